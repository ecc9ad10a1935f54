"""Reporter: what close() delivers, stats() and snapshot() consistency.

docs/design.md#shape, #metrics: close() "drains what is queued, makes the final send"; "Every report
carries the current value of every metric"; docs/engine.md: after ``close()``
``snapshot()`` "equals what the destination holds (except ``updated_at``)";
docs/protocol.md (client algorithm, step 4): "On success, the response's
``series_lengths`` become the acknowledged lengths".
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from helpers import ScriptedSink, curve, drive, without_updated_at
from trainreport import Delivered, MemorySink, Reporter, ReportingConfig, RetryLater
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(60)


def task_of(sink: Any) -> dict[str, Any]:
    task: dict[str, Any] | None = sink.task
    assert task is not None
    return task


def make(sink: Any, clock: FakeClock | None = None, **config: Any) -> Reporter:
    settings: dict[str, Any] = {"min_report_interval_seconds": 10.0, "backoff_jitter": 0.0}
    settings.update(config)
    return Reporter(sink, ReportingConfig(**settings), clock=clock or FakeClock(), rank=0)


def test_a_very_long_heartbeat_does_not_kill_the_reporter_thread() -> None:
    """``heartbeat_seconds=1e10`` (about 300 years) is accepted and the thread keeps running."""
    reporter = make(MemorySink(), min_report_interval_seconds=1e10, heartbeat_seconds=1e10)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.flush(timeout=5)  # a cycle ran, and the wait after it
    reporter.report_train_step(step=2, metrics={"loss": 1.0})
    assert reporter.flush(timeout=5)
    worker = reporter._worker
    assert worker is not None
    alive = worker.thread.is_alive()
    reporter.close(timeout=5)
    assert alive


@pytest.mark.parametrize("series_suffix", [False, True])
def test_close_sends_the_last_value_of_a_scalar_reported_by_report_metrics(
    series_suffix: bool,
) -> None:
    """A final test metric kept as a scalar reaches the destination at close()."""
    sink = MemorySink(series_suffix=series_suffix)
    reporter = make(sink, time_series_metrics=["train_*"])
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    reporter.report_metrics(step=1, metrics={"accuracy": 0.5}, phase="test")
    assert reporter.flush(timeout=5)
    reporter.report_metrics(step=2, metrics={"accuracy": 0.9}, phase="test")
    assert reporter.close(timeout=5)
    assert 0.9 == task_of(sink)["status_details"]["test_accuracy"]


@pytest.mark.parametrize("series_suffix", [False, True])
def test_snapshot_equals_the_stored_task_after_a_rewind_empties_a_series(
    series_suffix: bool,
) -> None:
    """Step 5 reports ``acc``; a rewind to step 1 discards it; after close both views agree."""
    sink = MemorySink(series_suffix=series_suffix)
    reporter = make(sink)
    reporter.start()
    reporter.report_train_step(step=5, metrics={"acc": 0.5, "loss": 5.0})
    assert reporter.flush(timeout=5)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.close(timeout=5)
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())


def test_stats_never_show_more_failed_requests_than_requests() -> None:
    """Three failed reads of the stored task, then success: failed <= sent."""
    sink = ScriptedSink()
    sink.open_results.extend([RetryLater("down")] * 3)
    clock = FakeClock()
    reporter = make(sink, clock)
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker = reporter._worker
    assert worker is not None
    for _ in range(3):
        worker.cycle()
        clock.advance(100.0)
    assert reporter.close(timeout=5)
    stats = reporter.stats()
    assert stats.requests_failed <= stats.requests_sent


def test_names_refused_by_the_cap_are_not_remembered_forever() -> None:
    """20 000 distinct names against a cap of 10: the name cache stays small."""
    reporter = make(MemorySink(), max_metric_names=10, min_report_interval_seconds=0.0)
    reporter.start()
    for step in range(1, 20_001):
        reporter.report_train_step(step=step, metrics={f"metric_{step}": 1.0})
    reporter.close(timeout=5)
    recorder = reporter._recorder
    assert recorder is not None
    assert 1000 >= sum(len(names) for names in recorder._names.tables.values())


class _ServerThatLosesAPoint(ScriptedSink):
    """Suffix-mode destination that, once, loses the last point of each series it holds,
    either of the series not in the update (a restore from backup, ``others=True``) or of
    those in it (it kept fewer than it was sent), and says so in its answer's lengths."""

    def __init__(self, *, others: bool) -> None:
        super().__init__(MemorySink(series_suffix=True))
        self.lose = threading.Event()
        self.others = others

    def send(self, update: Any, *, timeout_seconds: float | None = None) -> Any:
        result = super().send(update, timeout_seconds=timeout_seconds)
        if self.lose.is_set() and isinstance(result, Delivered):
            self.lose.clear()
            record = self.inner._record
            sent = {s.name for s in update.series or ()}
            for name, columns in record.series.items():
                if (name in sent) != self.others:
                    for column in columns:
                        del column[len(column) - 1 :]
            return Delivered(series_lengths=record.lengths())
        return result


def test_lengths_reported_for_a_series_not_in_the_update_are_acknowledged() -> None:
    """The server says it holds fewer points of ``train_loss``; the reporter resends them."""
    sink = _ServerThatLosesAPoint(others=True)
    reporter = make(sink)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    reporter.report_validation(step=1, metrics={"loss": 2.0})
    assert reporter.flush(timeout=5)
    reporter.report_validation(step=2, metrics={"loss": 3.0})  # only val_loss needs sending
    sink.lose.set()
    reporter.flush(timeout=1)
    assert reporter.close(timeout=5)
    stored = task_of(sink)["status_details"].get("metrics", {})
    assert [{"step": 1, "epoch": 1, "value": 1.0}] == stored.get("train_loss")


def test_flush_resends_at_once_when_the_destination_acknowledges_fewer_points() -> None:
    """A flush whose send is acknowledged short (lengths below what was sent) still completes."""
    sink = _ServerThatLosesAPoint(others=False)
    reporter = make(sink)  # frozen clock: the 10 s debounce never elapses
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.flush(timeout=5)
    reporter.report_train_step(step=2, metrics={"loss": 2.0})
    sink.lose.set()
    try:
        assert reporter.flush(timeout=1)
    finally:
        reporter.close(timeout=5)
    assert [1, 2] == [p[0] for p in curve(sink.task, "train_loss")]


def test_forgotten_close_after_ctrl_c_reports_cancelled_interrupted(tmp_path: Path) -> None:
    """Ctrl-C in a script that never closes its reporter: ``cancelled``/``interrupted``."""
    code = (
        "import trainreport\n"
        "reporter = trainreport.Reporter(trainreport.FileSink('task.json'), rank=0)\n"
        "reporter.start()\n"
        "reporter.report_train_step(step=1, metrics={'loss': 1.0})\n"
        "raise KeyboardInterrupt\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, timeout=60, check=False
    )
    task = json.loads((tmp_path / "task.json").read_text())
    assert "cancelled" == task["status"]
    assert "interrupted" == task["status_details"].get("cancel_reason")
