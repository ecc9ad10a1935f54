"""scripts/relayout.py, the re-runnable layout move: its rewriting, its refusals, its table.

The lead re-runs the move on a merged tree, so the rewriting must be idempotent (a
reference already rewritten no longer matches) and must keep what a statement binds.
This file names the old modules on purpose; the script leaves it alone.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "relayout.py"

BEFORE = """\
from trainreport import MemorySink, _report_calls as calls  # noqa: F401 - kept
from trainreport.sinks import _http_plan
from trainreport.sinks._http import HttpSink
from trainreport._store import MetricStore

TARGET = "trainreport._worker.Worker.cycle"
PATH = "src/trainreport/_lifecycle.py"
NAME = "_naming.py"
# see sinks/_http_send.py and ``_store.py``
"""
AFTER = """\
from trainreport import MemorySink  # noqa: F401 - kept
from trainreport._facade import _report_calls as calls  # noqa: F401 - kept
from trainreport.sinks._http import _plan as _http_plan
from trainreport.sinks._http._sink import HttpSink
from trainreport._record._store import MetricStore

TARGET = "trainreport._engine._worker.Worker.cycle"
PATH = "src/trainreport/_record/_machines.py"
NAME = "_name_rules.py"
# see sinks/_http/_send.py and ``_record/_store.py``
"""


@pytest.fixture(scope="module")
def relayout() -> ModuleType:
    """The layout script, imported from its file path."""
    spec = importlib.util.spec_from_file_location("relayout", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_form_of_reference_is_rewritten(relayout: ModuleType) -> None:
    """Imports by name, dotted patch targets, paths and file names all take the new layout."""
    assert AFTER == relayout.rewrite_text(BEFORE, Path("x.py"), relayout.renames())


def test_rewriting_again_changes_nothing(relayout: ModuleType) -> None:
    """A second pass over rewritten text is a no-op, also where an old module became a package."""
    table = relayout.renames()
    once = relayout.rewrite_text(BEFORE, Path("x.py"), table)

    assert once == relayout.rewrite_text(once, Path("x.py"), table)


def test_the_tree_is_fully_placed(relayout: ModuleType) -> None:
    """The table is consistent and places every module the tree holds (nothing left to move)."""
    relayout.check_table()

    assert ([], []) == (relayout.unplaced_modules(), relayout.planned_moves())


def test_no_new_name_extends_an_old_one_without_a_guard(relayout: ModuleType) -> None:
    """Only a module that became a package of the same name may prefix a new name."""
    table = relayout.renames()
    prefixed = sorted(
        old for old in table if any(new.startswith(old + ".") for new in table.values())
    )

    assert ["server._db", "sinks._http"] == prefixed
