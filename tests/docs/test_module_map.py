"""The generated module map (docs/engine.md) and package list (docs/design.md#layout).

``scripts/module_map.py`` renders both from the docstrings of the tree; like the
lifecycle diagrams, the checked-in pages must be exactly what it renders, so a module
added, moved, folded away or re-described without regenerating fails here.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "module_map.py"
ENGINE = ROOT / "docs" / "engine.md"
DESIGN = ROOT / "docs" / "design.md"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    """The module-map script, imported from its file path."""
    spec = importlib.util.spec_from_file_location("module_map", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_pages_match_the_tree(script: ModuleType) -> None:
    """docs/engine.md and docs/design.md hold exactly what the script renders from the tree."""
    engine, design = ENGINE.read_text(encoding="utf-8"), DESIGN.read_text(encoding="utf-8")

    assert (engine, design) == script.render(engine, design)


def test_every_module_of_the_client_has_a_row(script: ModuleType) -> None:
    """Each module outside the server's own has one row, named by its path, with its summary."""
    table = script.render_modules()
    package = ROOT / "src" / "trainreport"
    expected = [
        path.relative_to(package).as_posix()
        for path in sorted(package.rglob("*.py"))
        if path.name != "__init__.py" and path.relative_to(package).parts[0] != "server"
    ]
    missing = [name for name in expected if f"| `{name}` | " not in table]

    assert ([], len(expected)) == (missing, table.count(".py` | "))


def test_check_flag_exits_1_when_a_page_drifts(script: ModuleType, tmp_path: Path) -> None:
    """--check returns 0 after writing and 1 once a generated row differs from the tree."""
    engine, design = tmp_path / "engine.md", tmp_path / "design.md"
    shutil.copy(ENGINE, engine)
    shutil.copy(DESIGN, design)
    pages = ["--engine", str(engine), "--design", str(design)]
    written = script.main(pages)
    fresh = script.main(["--check", *pages])
    engine.write_text(
        engine.read_text(encoding="utf-8").replace(
            "| `_record/_store.py` | ", "| `_record/_store.py` | (edited) "
        ),
        encoding="utf-8",
    )
    stale = script.main(["--check", *pages])

    assert (0, 0, 1) == (written, fresh, stale)


def test_a_page_without_its_markers_is_refused(script: ModuleType) -> None:
    """A page that lost its marker comments is an error that names the markers to add."""
    with pytest.raises(ValueError, match="module-map"):
        script.replace_block("no markers here\n", "module-map", "| row |\n")
