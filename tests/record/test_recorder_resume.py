"""Reports applied before the stored task was read must not lose the resumed curves.

docs/design.md#metrics (resume): "Until that read has succeeded, the reporter never sends
``metrics`` in full-state mode, so a failed or slow read can never overwrite a
resumed job's stored curves with a shorter history." docs/design.md#public-api: "A report made
before ``start()`` is kept."
"""

from __future__ import annotations

from typing import Any

import pytest

from helpers import ScriptedSink, curve, drive
from trainreport import MemorySink, Reporter, ReportingConfig, RetryLater
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(60)


def stored_task() -> dict[str, Any]:
    points = [{"step": s, "epoch": 1, "value": float(s)} for s in (1, 2, 3)]
    return {
        "status": "running",
        "status_details": {"val_datasets": ["a", "b"], "metrics": {"train_loss": points}},
    }


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_report_made_before_start_continues_the_stored_curve(series_suffix: bool) -> None:
    """A train step queued before start() on a resumed task extends the stored curve."""
    sink = MemorySink(stored_task(), series_suffix=series_suffix)
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.0), rank=0)
    reporter.report_train_step(step=4, metrics={"loss": 4.0})
    reporter.start()
    assert reporter.close(timeout=5)
    assert [1, 2, 3, 4] == [p[0] for p in curve(sink.task, "train_loss")]


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_slow_first_read_never_overwrites_the_stored_curve(series_suffix: bool) -> None:
    """The stored task's first read fails once; training reports meanwhile; history survives."""
    sink = ScriptedSink(MemorySink(stored_task(), series_suffix=series_suffix))
    sink.open_results.append(RetryLater("server busy"))
    clock = FakeClock()
    config = ReportingConfig(min_report_interval_seconds=10.0, backoff_jitter=0.0)
    reporter = Reporter(sink, config, clock=clock, rank=0)
    drive(reporter)
    worker = reporter._worker
    assert worker is not None
    worker.cycle()  # the read fails: backoff
    reporter.report_train_step(step=4, metrics={"loss": 4.0})
    worker.cycle()  # drains step 4 while not yet opened
    clock.advance(5.0)
    worker.cycle()  # the read succeeds now and the first send goes
    assert reporter.close(timeout=5)
    assert [1, 2, 3, 4] == [p[0] for p in curve(sink.task, "train_loss")]


def test_a_validation_dataset_reported_before_start_keeps_the_stored_order() -> None:
    """Stored val_datasets ["a", "b"]: a report for "b" made before start() goes to val_b_*."""
    sink = MemorySink(stored_task())
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.0), rank=0)
    reporter.report_validation(step=3, metrics={"loss": 0.3}, dataset="b")
    reporter.start()
    assert reporter.close(timeout=5)
    task = sink.task
    assert task is not None
    assert ["a", "b"] == task["status_details"]["val_datasets"]
    assert [(3, 1, 0.3)] == curve(task, "val_b_loss")


@pytest.mark.parametrize("series_suffix", [False, True])
def test_an_omitted_step_on_a_resumed_task_continues_after_the_stored_last_step(
    series_suffix: bool,
) -> None:
    """Stored steps 1-3: omitted steps are 4 and 5, so nothing stored is rewound."""
    sink = MemorySink(stored_task(), series_suffix=series_suffix)
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.0), rank=0)
    reporter.start()
    reporter.report_train_step(metrics={"loss": 4.0})
    reporter.report_train_step(metrics={"loss": 5.0})
    assert reporter.close(timeout=5)
    assert [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0)] == [
        (p[0], p[2]) for p in curve(sink.task, "train_loss")
    ]
    assert 0 == reporter.stats().rewinds
