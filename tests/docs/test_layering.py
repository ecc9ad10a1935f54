"""The layering contract: what each layer of ``src/trainreport`` may import (docs/design.md#layout).

Every module of the package belongs to one layer (:data:`LAYERS`, by the longest dotted
prefix), and each layer names the layers it may import. Every import counts: at module
level, inside a function (a lazy import is a dependency all the same), and under
``if TYPE_CHECKING:`` (a type-only import is still one the reader and mypy follow; an
inversion hidden there is still an inversion, so none is exempt). A violation prints as
``importer -> imported (rule)``.

The layers, bottom to top:

- foundation: ``exceptions``, ``_logging``, ``_reporting_config`` (every layer reads them);
- wire (``_wire/``): the job-status protocol and the Sink interface;
- record (``_record/``): imports nothing from the engine, the sinks or the run log;
- environment (``_environment``): the one reader of the variables a job system sets;
- runlog (``_runlog/``): the run-log format, its files, replay, sync's plan;
- sinks: the destinations; never the engine;
- engine (``_engine/``): knows the Sink interface (``_wire``), never a concrete sink;
- report calls: what runs on the training thread and the stats values; never the engine;
- facade (``_facade/``, ``trainreport`` itself): puts the Reporter together;
- public modules beside it: ``client``, ``testing``, ``integrations`` (the public API
  only), ``server`` (only the wire layer of the client), ``cli`` (which nothing imports).

Finer than the layers, :data:`FORBIDDEN` names what one part of a layer may not import
(import-linter's "forbidden" contract, down to the imported name): the facade may import
the sinks layer only to build the default destinations (``default_sinks_from_env``) and
knows every destination by the Sink interface, never a concrete sink.

The tree keeps the contract: :data:`KNOWN_INVERSIONS`, where an inversion being removed
was listed with the issue item that removes it, is empty, and may only shrink: a new
inversion fails :func:`test_no_module_imports_across_its_layers` (fix the import; do not
list it), and an entry that no longer occurs fails
:func:`test_every_known_inversion_still_exists` (delete the entry).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import attrs

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "trainreport"


@attrs.frozen
class Layer:
    """One layer: the modules it holds (dotted prefixes) and the layers it may import."""

    modules: tuple[str, ...]
    may_import: frozenset[str]
    rule: str


_BASE = frozenset({"foundation", "wire"})
#: The layers, bottom to top. A layer may always import itself.
LAYERS: Mapping[str, Layer] = {
    "foundation": Layer(
        ("trainreport.exceptions", "trainreport._logging", "trainreport._reporting_config"),
        frozenset(),
        "the foundation imports nothing of trainreport",
    ),
    "wire": Layer(("trainreport._wire",), frozenset({"foundation"}), "the wire is the bottom"),
    "record": Layer(
        ("trainreport._record",),
        _BASE,
        "the record imports nothing from the engine, sinks or run log",
    ),
    "environment": Layer(
        ("trainreport._environment",),
        _BASE | {"record"},
        "the environment reads variables; it builds nothing",
    ),
    "runlog": Layer(
        ("trainreport._runlog",),
        _BASE | {"record"},
        "the run log knows the record and the wire, never a sink or the engine",
    ),
    "sinks": Layer(
        ("trainreport.sinks",),
        _BASE | {"record", "environment", "runlog"},
        "sinks never import the engine",
    ),
    "engine": Layer(
        ("trainreport._engine",),
        _BASE | {"record", "runlog"},
        "the engine knows the Sink interface (_wire), never a concrete sink",
    ),
    "report calls": Layer(
        ("trainreport._facade._histogram",),
        _BASE | {"record"},
        "the training thread's side never imports the engine",
    ),
    "facade": Layer(
        ("trainreport._facade", "trainreport"),
        _BASE | {"record", "environment", "runlog", "sinks", "engine", "report calls"},
        "the facade imports no public module but the sinks",
    ),
    "client": Layer(
        ("trainreport.client",),
        _BASE | {"sinks"},
        "the client reads a service: the wire and the HTTP transport",
    ),
    "testing": Layer(("trainreport.testing",), frozenset({"foundation"}), "testing is a leaf"),
    "integrations": Layer(
        ("trainreport.integrations",),
        frozenset({"foundation", "facade", "sinks"}),
        "integrations use the public API",
    ),
    "server": Layer(
        ("trainreport.server",),
        _BASE,
        "the server imports only the wire layer of the client",
    ),
    "cli": Layer(
        ("trainreport.cli",),
        frozenset(
            {"foundation", "wire", "record", "environment", "runlog", "sinks", "engine"}
            | {"report calls", "facade", "client", "server"}
        ),
        "nothing imports the CLI",
    ),
}


@attrs.frozen
class Forbidden:
    """What the modules under ``importers`` may not import from ``imported`` but ``allowed``.

    ``imported`` is a module; importing it, any module under it or any name from it is
    forbidden, except the dotted names in ``allowed``.
    """

    importers: tuple[str, ...]
    imported: str
    allowed: frozenset[str]
    rule: str


#: The rules finer than :data:`LAYERS`, each between two parts of layers that may import
#: each other.
FORBIDDEN: tuple[Forbidden, ...] = (
    Forbidden(
        ("trainreport._facade",),
        "trainreport.sinks",
        frozenset({"trainreport.sinks.default_sinks_from_env"}),
        "the facade knows the Sink interface, never a concrete sink",
    ),
)

#: Inversions being removed, each with the issue item that removes it: none is left
#: (issue 22 item 4 removed the last). Never add to it: fix the import, or move the code
#: to the layer it belongs to.
KNOWN_INVERSIONS: Mapping[str, str] = {}


def module_name(path: Path) -> str:
    """The dotted module of a file under ``src/`` (a package's ``__init__.py`` is the package)."""
    parts = path.relative_to(SRC).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(path): path for path in sorted((SRC / PACKAGE).rglob("*.py"))}


def layer_of(module: str) -> str | None:
    """The layer whose longest dotted prefix matches ``module``, or None."""
    best: tuple[int, str] | None = None
    for name, layer in LAYERS.items():
        for prefix in layer.modules:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), name)
    return None if best is None else best[1]


def imports_of(module: str, source: str, known: Iterable[str]) -> Iterator[str]:
    """The trainreport modules one module's source imports, anywhere in it.

    ``from trainreport.x import y`` names ``trainreport.x.y`` when that is a module of
    the package, else ``trainreport.x``.
    """
    known = set(known)
    is_package = any(other.startswith(module + ".") for other in known)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".") if is_package else module.split(".")[:-1]
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield candidate if candidate in known else base


def imported_names(module: str, source: str, is_package: bool) -> Iterator[str]:
    """Every module or name one module's source imports, as a dotted name, anywhere in it.

    ``import trainreport.x`` names ``trainreport.x``; ``from trainreport.x import y`` names
    ``trainreport.x.y`` whether ``y`` is a module or a name in it.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".") if is_package else module.split(".")[:-1]
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def forbidden_imports(sources: Mapping[str, str]) -> list[str]:
    """Every import :data:`FORBIDDEN` refuses, as ``importer -> imported (rule)``, sorted."""
    found = set()
    for importer, source in sources.items():
        for contract in FORBIDDEN:
            if not any(_within(importer, prefix) for prefix in contract.importers):
                continue
            is_package = any(other.startswith(importer + ".") for other in sources)
            for name in imported_names(importer, source, is_package):
                if _within(name, contract.imported) and name not in contract.allowed:
                    found.add(f"{importer} -> {name} ({contract.rule})")
    return sorted(found)


def violations(sources: Mapping[str, str]) -> list[str]:
    """Every import across the layers, as ``importer -> imported (rule)``, sorted."""
    found = set()
    for importer, source in sources.items():
        importer_layer = layer_of(importer)
        assert importer_layer is not None, f"{importer} belongs to no layer of LAYERS"
        layer = LAYERS[importer_layer]
        for imported in imports_of(importer, source, sources):
            imported_layer = layer_of(imported)
            if imported_layer is None or imported_layer == importer_layer:
                continue
            if imported_layer not in layer.may_import:
                rule = LAYERS["cli"].rule if imported_layer == "cli" else layer.rule
                found.add(f"{importer} -> {imported} ({rule})")
    return sorted(found)


def _tree_sources() -> dict[str, str]:
    return {name: path.read_text(encoding="utf-8") for name, path in package_modules().items()}


def _tree_violations() -> list[str]:
    return violations(_tree_sources())


def _edge(line: str) -> str:
    return line.split(" (", 1)[0]


def test_every_module_belongs_to_a_layer() -> None:
    """A new module must be placed: each module of the package matches a layer's prefix."""
    assert [] == [name for name in package_modules() if layer_of(name) is None]


def test_no_module_imports_across_its_layers() -> None:
    """Nothing imports what its layer may not, beyond the known inversions being removed."""
    new = [line for line in _tree_violations() if _edge(line) not in KNOWN_INVERSIONS]
    assert [] == new, "\n".join(["imports across the layers:", *new])


def test_every_known_inversion_still_exists() -> None:
    """An inversion fixed by its issue item is deleted from KNOWN_INVERSIONS (it only shrinks)."""
    present = {_edge(line) for line in _tree_violations()}
    assert [] == sorted(set(KNOWN_INVERSIONS) - present)


def test_an_inverted_import_is_caught_wherever_it_is_written() -> None:
    """The record importing the engine fails at module level, in a function or for typing."""
    written = {
        "module level": "from trainreport._engine._worker import Worker\n",
        "in a function": "def f():\n    from trainreport._engine import _worker\n",
        "for typing": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import trainreport._engine._worker\n",
    }
    known = {"trainreport._record._store": "", "trainreport._engine._worker": ""}
    expected = [
        "trainreport._record._store -> trainreport._engine._worker "
        "(the record imports nothing from the engine, sinks or run log)"
    ]
    found = {
        where: violations({**known, "trainreport._record._store": source})
        for where, source in written.items()
    }

    assert dict.fromkeys(written, expected) == found


def test_the_rules_the_issue_names_hold_between_layers() -> None:
    """Each forbidden pair of the contract is refused by the table itself."""
    refused = [
        ("record", "engine"),
        ("record", "sinks"),
        ("record", "runlog"),
        ("engine", "sinks"),
        ("sinks", "engine"),
        ("server", "record"),
        ("server", "engine"),
        ("server", "sinks"),
        ("report calls", "engine"),
        *((name, "cli") for name in LAYERS if name != "cli"),
    ]
    assert [] == [pair for pair in refused if pair[1] in LAYERS[pair[0]].may_import]


def test_no_module_imports_what_a_finer_rule_forbids() -> None:
    """The facade names no concrete sink (it asks the Sink interface); nothing else FORBIDDEN."""
    found = forbidden_imports(_tree_sources())
    assert [] == found, "\n".join(["forbidden imports:", *found])


def test_a_concrete_sink_in_the_facade_is_caught_however_it_is_imported() -> None:
    """A sink's module, a sink from the package or the package itself fails; the factory not."""
    written = {
        "its module": "from trainreport.sinks._file import FileSink\n",
        "from the package": "def f():\n    from trainreport.sinks import FileSink\n",
        "the package": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import trainreport.sinks\n",
        "relative": "from ..sinks._file import FileSink\n",
    }
    rule = "the facade knows the Sink interface, never a concrete sink"
    expected = {
        "its module": [
            f"trainreport._facade._close_report -> trainreport.sinks._file.FileSink ({rule})"
        ],
        "from the package": [
            f"trainreport._facade._close_report -> trainreport.sinks.FileSink ({rule})"
        ],
        "the package": [f"trainreport._facade._close_report -> trainreport.sinks ({rule})"],
        "relative": [
            f"trainreport._facade._close_report -> trainreport.sinks._file.FileSink ({rule})"
        ],
    }
    found = {
        where: forbidden_imports({"trainreport._facade._close_report": source})
        for where, source in written.items()
    }
    factory = "def f():\n    from trainreport.sinks import default_sinks_from_env\n"

    assert expected == found
    assert [] == forbidden_imports({"trainreport._facade._reporter": factory})
    assert [] == forbidden_imports({"trainreport.cli._sync": written["its module"]})
