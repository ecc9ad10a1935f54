"""Attack: hostile objects given to report calls must not kill the reporter or lose siblings.

DESIGN §7: "No report call raises, ever, whatever it is given"; the reporter
thread must survive whatever it is handed. DESIGN §3: objects that are not
metrics "are dropped, with one log event per name" (the other names are kept).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from helpers import curve, drive
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(60)


class _UnprintableError(Exception):
    """An exception whose own ``str()`` raises (so does formatting it in an f-string)."""

    def __str__(self) -> str:
        raise _UnprintableError


class _KeyWithBadRepr:
    """A metrics key whose ``repr()`` raises an exception that cannot be printed."""

    def __repr__(self) -> str:
        raise _UnprintableError


class _KeyWithFailingRepr:
    """A metrics key whose ``repr()`` raises an ordinary exception."""

    def __repr__(self) -> str:
        raise ValueError("no repr")


class _Unstringable:
    """An argument whose ``str()`` raises."""

    def __str__(self) -> str:
        raise ValueError("no str")


def task_of(sink: MemorySink) -> dict[str, Any]:
    task = sink.task
    assert task is not None
    return task


def make() -> tuple[Reporter, MemorySink]:
    sink = MemorySink()
    config = ReportingConfig(min_report_interval_seconds=0.0)
    return Reporter(sink, config, clock=FakeClock(), rank=0), sink


def test_a_key_whose_repr_raises_an_unprintable_error_does_not_kill_the_reporter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a hostile metrics key, the thread is alive and later reports are delivered."""
    died: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    reporter, sink = make()
    drive(reporter)
    reporter.report_train_step(step=1, metrics={_KeyWithBadRepr(): 1.0})  # type: ignore[dict-item]
    worker = reporter._worker
    assert worker is not None
    worker.cycle()
    reporter.report_train_step(step=2, metrics={"loss": 2.0})
    assert reporter.close(timeout=5)
    assert [] == died
    assert [(2, 1, 2.0)] == curve(sink.task, "train_loss")


def test_a_key_whose_repr_raises_drops_only_that_key() -> None:
    """``{bad_key: 1.0, "loss": 1.0}``: the bad key is dropped, ``train_loss`` is kept."""
    reporter, sink = make()
    reporter.start()
    bad_key: Any = _KeyWithFailingRepr()
    reporter.report_train_step(step=1, metrics={bad_key: 1.0, "loss": 1.0})
    assert reporter.close(timeout=5)
    stored = task_of(sink)["status_details"].get("metrics", {})
    assert [{"step": 1, "epoch": 1, "value": 1.0}] == stored.get("train_loss")
    assert 1 == reporter.stats().points_recorded


def test_an_unprintable_cancel_reason_still_cancels_the_task() -> None:
    """A reason whose ``str()`` raises keeps the status change (as report_error does)."""
    reporter, sink = make()
    reporter.start()
    reporter.report_cancelled(reason=_Unstringable())  # type: ignore[arg-type]
    assert reporter.close(timeout=5)
    assert "cancelled" == task_of(sink)["status"]


def test_an_unprintable_checkpoint_path_still_records_the_checkpoint() -> None:
    """A path whose ``str()`` raises still records ``checkpoint_step``."""
    reporter, sink = make()
    reporter.start()
    reporter.report_checkpoint_saved(path=_Unstringable(), step=3)
    assert reporter.close(timeout=5)
    assert 3 == task_of(sink)["status_details"].get("checkpoint_step")


class _MappingThatCannotBeRead(dict):  # type: ignore[type-arg]
    """A dict subclass whose every way of being read raises."""

    def __iter__(self) -> Any:
        raise RuntimeError("unreadable")

    def keys(self) -> Any:
        raise RuntimeError("unreadable")


def test_a_report_dropped_on_the_callers_thread_is_counted_in_stats() -> None:
    """A metrics mapping that cannot be copied drops the report, and stats() says so."""
    reporter, _ = make()
    reporter.report_train_step(step=1, metrics=_MappingThatCannotBeRead(loss=1.0))
    assert 1 == sum(reporter.stats().drops.values())
