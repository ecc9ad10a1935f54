"""The public surface: pinned ``__all__``, docstrings, and no framework imports."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import trainreport

EXPECTED = [
    "AttemptIdentity",
    "ClientError",
    "ConfigError",
    "Delivered",
    "DestinationStats",
    "FileSink",
    "HttpSink",
    "JournalStats",
    "KubeflowSink",
    "MemorySink",
    "NotFoundError",
    "Opened",
    "Phase",
    "ProtocolError",
    "Rejected",
    "Reporter",
    "ReporterState",
    "ReporterStats",
    "ReportingConfig",
    "Resynchronise",
    "RetryLater",
    "RunLogError",
    "STRIPPED_PREFIXES",
    "SeriesUpdate",
    "Sink",
    "SinkError",
    "Split",
    "TaskStatus",
    "TrainReportError",
    "TransitionError",
    "TransportError",
    "UnauthorizedError",
    "UnreachableError",
    "Update",
    "read_task",
]


#: ``trainreport.server``'s public names (the ``server`` extra).
SERVER_EXPECTED = [
    "DEFAULT_BODY_BUDGET_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "DEFAULT_MAX_RESPONSE_MEMORY_BYTES",
    "ServerConfig",
    "ServerHandle",
    "create_app",
    "start_in_thread",
    "start_subprocess",
]


def _own_members(cls: type) -> dict[str, object]:
    """A public class's members, those it inherits from trainreport's private bases included.

    ``Reporter`` is put together from one private base per concern; their
    methods are its API as much as the ones it defines itself.
    """
    members: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("trainreport"):
            members.update(vars(klass))
    return members


def test_all_is_pinned_and_sorted() -> None:
    """Adding or removing a public name is a deliberate change to this list."""
    assert EXPECTED == trainreport.__all__
    assert sorted(trainreport.__all__) == trainreport.__all__


def test_the_servers_all_is_pinned_and_sorted() -> None:
    """The reference server's surface changes only with this list."""
    import trainreport.server  # noqa: PLC0415 - the server extra

    assert SERVER_EXPECTED == trainreport.server.__all__


def test_every_public_name_and_method_has_a_docstring() -> None:
    """Public classes, functions and their public methods are documented."""
    missing = []
    for name in trainreport.__all__:
        obj = getattr(trainreport, name)
        if callable(obj) and not inspect.getdoc(obj):  # a constant's doc is its #: comment
            missing.append(name)
        if inspect.isclass(obj):
            for attr, member in _own_members(obj).items():
                if attr.startswith("_") or not callable(member):
                    continue
                if not inspect.getdoc(member):
                    missing.append(f"{name}.{attr}")
    assert [] == missing


def test_report_methods_say_they_never_raise() -> None:
    """Each report_* docstring states the never-raises contract."""
    methods = [m for m in _own_members(trainreport.Reporter) if m.startswith("report_")]
    assert 11 == len(methods)
    for m in methods:
        assert "Never raises" in (inspect.getdoc(getattr(trainreport.Reporter, m)) or ""), m


def test_import_trainreport_imports_no_framework() -> None:
    """``import trainreport`` pulls in no ML framework, numpy, or server stack."""
    code = (
        "import sys, trainreport, trainreport.integrations; "
        "print(sorted(m for m in ('torch','transformers','lightning','numpy','starlette',"
        "'uvicorn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "[]" == out.stdout.strip()


#: Every public module with an ``__all__``.
PUBLIC_MODULES = [
    "trainreport",
    "trainreport.exceptions",
    "trainreport.sinks",
    "trainreport.testing",
    "trainreport.integrations",
    "trainreport.integrations.accelerate",
    "trainreport.integrations.huggingface",
    "trainreport.integrations.keras",
    "trainreport.integrations.lightning",
    "trainreport.integrations.nemo_rl",
    "trainreport.client",
    "trainreport.server",
]
SRC = Path(trainreport.__file__).parent


def _import_public(name: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    if name.endswith(".keras"):
        monkeypatch.setenv("KERAS_BACKEND", os.environ.get("KERAS_BACKEND", "torch"))
    return pytest.importorskip(name) if "integrations." in name else importlib.import_module(name)


def _public_names(module: types.ModuleType) -> set[str]:
    """The names a module makes public: its own classes, functions and constants.

    A package (``__init__.py``) makes public what it defines and every trainreport
    object it imports; a plain module only what it defines itself (its imports of
    ``Reporter`` or a framework's classes are not its API). Standard-library and
    framework names, modules and ``__future__`` features are nobody's API here.
    """
    source = inspect.getsource(module)
    tree = ast.parse(source)
    is_package = Path(module.__file__ or "").name == "__init__.py"
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        elif (
            is_package
            and isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("trainreport")
        ):
            bound |= {alias.asname or alias.name for alias in node.names}
    names = set()
    for name, obj in vars(module).items():
        if name.startswith("_") or isinstance(obj, types.ModuleType) or name == "annotations":
            continue
        home = getattr(obj, "__module__", None) if (inspect.isclass(obj) or callable(obj)) else None
        ours = home == module.__name__ or (is_package and str(home).startswith("trainreport"))
        if ours or name in bound:
            names.add(name)
    return names


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_lists_every_public_name_and_only_names_that_exist(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``__all__`` both ways: nothing public is left out, nothing listed is missing."""
    module = _import_public(name, monkeypatch)
    exported = list(module.__all__)

    missing = [n for n in exported if not hasattr(module, n)]

    assert ([], sorted(_public_names(module))) == (missing, sorted(exported))


def test_version_is_the_installed_distributions() -> None:
    """``__version__`` is read from the package metadata (pyproject.toml's version)."""
    assert importlib.metadata.version("trainreport") == trainreport.__version__


def test_integrations_use_only_the_public_api() -> None:
    """Adapters and hooks import trainreport's public names, never its private modules.

    The one bridge is ``integrations/_guard.py``, which re-exports trainreport's
    logger (infrastructure, not API) to the adapters.
    """
    private = []
    for path in sorted((SRC / "integrations").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainreport._"):
                private.append(f"{path.name}: {node.module}")
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                private.append(f"{path.name}: relative {node.module}")
    assert ["_guard.py: trainreport._logging"] == private


def test_the_outcome_rule_is_written_once() -> None:
    """Only ``Reporter`` maps an exception to a terminal report (no adapter re-derives it).

    Outside ``_facade/_reporter.py`` (``Reporter.report_error``) no module of the package tests for
    ``KeyboardInterrupt`` to choose a status (the server's foreground loop in
    ``server/_run.py``, the CLI and the demo catch it to stop a server, and
    ``close()``'s wait in ``_engine/_closing.py`` to stop waiting, which is no run outcome).
    """
    allowed = {
        "trainreport._facade._reporter",
        "trainreport.cli",
        "trainreport.cli._demo",
        "trainreport._engine._closing",
        "trainreport.server._run",
    }
    copies = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if ".".join(parts[:-1] if parts[-1] == "__init__" else parts) in allowed:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "KeyboardInterrupt":
                copies.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert [] == copies
