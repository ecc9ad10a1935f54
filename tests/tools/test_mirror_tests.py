"""scripts/mirror_tests.py, the re-runnable test layout move: mending, rewriting, refusals.

The lead re-runs the move on a merged tree, so every step must be idempotent and must
refuse, before changing anything, a flat test file its table does not place. This file
names the flat paths on purpose; the script leaves it alone.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mirror_tests.py"

FLAT = """\
ROOT = Path(__file__).resolve().parent.parent
SRC = Path(__file__).resolve().parent.parent / "src"
DOCS = Path(__file__).resolve().parents[1] / "docs"
DATA = Path(__file__).parent / "data"
PAGE = Path(__file__).parents[1] / "src"
THIS = Path(__file__).resolve()
NODE = f"{__file__}::test_x"
PACKAGE = Path(cli.__file__).parent
"""
ONE_DOWN = """\
ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).resolve().parents[2] / "src"
DOCS = Path(__file__).resolve().parents[2] / "docs"
DATA = Path(__file__).parents[1] / "data"
PAGE = Path(__file__).parents[2] / "src"
THIS = Path(__file__).resolve()
NODE = f"{__file__}::test_x"
PACKAGE = Path(cli.__file__).parent
"""


@pytest.fixture
def mirror() -> ModuleType:
    """The mirror script, imported from its file path (fresh, so patches do not leak)."""
    spec = importlib.util.spec_from_file_location("mirror_tests", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _repo(tmp_path: Path, mirror: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway git repository with the script's roots pointed at it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(mirror, "ROOT", tmp_path)
    monkeypatch.setattr(mirror, "TESTS", tmp_path / "tests")
    monkeypatch.setattr(mirror, "DESIGN", tmp_path / "docs" / "design.md")
    return tmp_path


def test_a_path_from_file_climbs_one_level_more_per_folder(mirror: ModuleType) -> None:
    """``.parent`` chains and ``.parents[N]`` take the new depth; other ``__file__``s stay."""
    assert ONE_DOWN == mirror.deepen_file_paths(FLAT, 1)
    assert FLAT == mirror.deepen_file_paths(FLAT, 0)
    assert "ROOT = Path(__file__).resolve().parents[3]\n" == mirror.deepen_file_paths(
        "ROOT = Path(__file__).resolve().parent.parent\n", 2
    )


def test_the_same_text_in_a_string_or_a_comment_is_left_alone(mirror: ModuleType) -> None:
    """Only code is mended: a test's sample source (like this file's) keeps its text."""
    source = f"SAMPLE = {FLAT!r}  # Path(__file__).parent\nHERE = Path(__file__).parent\n"
    expected = f"SAMPLE = {FLAT!r}  # Path(__file__).parent\nHERE = Path(__file__).parents[1]\n"

    assert expected == mirror.deepen_file_paths(source, 1)


def test_a_directory_taken_with_os_path_stops_the_move(mirror: ModuleType) -> None:
    """``os.path.dirname(__file__)`` cannot be mended by a pattern, so the script refuses it."""
    code = "HERE = os.path.dirname(os.path.abspath(__file__))\n"
    with pytest.raises(mirror.MirrorError, match=r"os\.path"):
        mirror.deepen_file_paths(code, 1)
    assert f"CODE = {code!r}\n" == mirror.deepen_file_paths(f"CODE = {code!r}\n", 1)


def test_a_flat_path_is_rewritten_once_and_others_are_left_alone(mirror: ModuleType) -> None:
    """``tests/test_core.py`` takes its folder; moved, unknown and bare names do not change."""
    before = (
        "see tests/test_core.py and ../tests/test_server_storage.py::test_x,\n"
        "tests/contracts/test_kill.py, tests/test_class_size.py, test_core.py, "
        "mytests/test_core.py, "
        "tests/test_core.pyc\n"
    )
    expected = (
        "see tests/engine/test_core.py and ../tests/server/db/test_server_storage.py::test_x,\n"
        "tests/contracts/test_kill.py, tests/test_class_size.py, test_core.py, "
        "mytests/test_core.py, "
        "tests/test_core.pyc\n"
    )
    once = mirror.rewrite_references(before)

    assert (expected, expected) == (once, mirror.rewrite_references(once))


def test_every_flat_test_file_of_the_tree_has_a_row(mirror: ModuleType) -> None:
    """A new ``tests/test_*.py`` fails here until MAPPING places it; every row's folder exists."""
    mirror.check_table()

    assert [] == mirror.unplaced_files()


def test_a_flat_file_without_a_row_stops_the_script_before_anything_moves(
    mirror: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2, the file named in what to do, and both files still where they were."""
    root = _repo(tmp_path, mirror, monkeypatch)
    (root / "tests" / "test_core.py").write_text("X = 1\n", encoding="utf-8")
    (root / "tests" / "test_brand_new.py").write_text("X = 1\n", encoding="utf-8")

    status = mirror.main(["--ruff", ""])

    assert 2 == status
    assert "test_brand_new.py" in capsys.readouterr().err
    assert ["test_brand_new.py", "test_core.py"] == sorted(
        p.name for p in (root / "tests").rglob("*.py")
    )


def test_two_test_files_with_one_base_name_stop_the_script(
    mirror: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folders are not packages, so a move that would clash on a base name is refused."""
    root = _repo(tmp_path, mirror, monkeypatch)
    (root / "tests" / "contracts").mkdir()
    (root / "tests" / "test_core.py").write_text("X = 1\n", encoding="utf-8")
    (root / "tests" / "contracts" / "test_core.py").write_text("X = 1\n", encoding="utf-8")

    with pytest.raises(mirror.MirrorError, match="base name"):
        mirror.planned_moves()


def test_the_move_mends_rewrites_and_a_second_run_changes_nothing(
    mirror: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``git mv`` into the folder, the path mended, the doc rewritten; then a no-op."""
    root = _repo(tmp_path, mirror, monkeypatch)
    (root / "tests" / "test_core.py").write_text(
        "ROOT = Path(__file__).resolve().parent.parent\n", encoding="utf-8"
    )
    (root / "docs" / "design.md").write_text("# Design\n\nSee `tests/test_core.py`.\n")
    subprocess.run(["git", "add", "."], cwd=root, check=True)

    first = mirror.main(["--ruff", ""])
    design = (root / "docs" / "design.md").read_text(encoding="utf-8")
    moved = root / "tests" / "engine" / "test_core.py"
    second = mirror.main(["--ruff", ""])

    assert (0, 0) == (first, second)
    assert "ROOT = Path(__file__).resolve().parents[2]\n" == moved.read_text(encoding="utf-8")
    assert "See `tests/engine/test_core.py`." in design
    assert 1 == design.count("## Tests")
    assert "| `tests/engine/` |" in design
    assert design == (root / "docs" / "design.md").read_text(encoding="utf-8")
    assert not (root / "tests" / "test_core.py").exists()
    assert 0 == mirror.main(["--check"])
