"""The promise "the first arrival of a name decides, once", as it really works (docs/design.md).

Whether a name keeps a history (a *series*) or only its latest value (a
*scalar*) is decided when it first arrives, by ``time_series_metrics``, except
before the stored task is read: until then a name not selected for a history
is admitted *provisionally*, as a series that keeps every point, because the
stored task may hold it as a series (``_record/_name_table.py``). Seeding, at
the read, changes that kind once (``_record/_seeding.py``): a provisional name
the stored task holds as a series stays a series (its stored points first); any
other provisional name becomes a scalar keeping only its latest value. After the
read, the first arrival decides for good.

Driven on the recorder itself (reports in, the stored task in), then once
through a reporter whose destination is down at start.
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import Any

import pytest

from helpers import ScriptedSink, curve, drive, held, without_updated_at
from trainreport import MemorySink, Reporter, ReportingConfig, RetryLater
from trainreport._record import _reports as reports
from trainreport._record._recorder import Recorder
from trainreport._wire._payloads import StoredState
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(60)

#: No name is selected for a history: only provisional admission makes a series.
NO_HISTORY: dict[str, Any] = {"time_series_metrics": []}


def recorder_of(**config: Any) -> Recorder:
    """A recorder whose attempt has begun, its stored task not read yet."""
    recorder = Recorder(ReportingConfig(**config))
    recorder.start_attempt()
    return recorder


def report_lr(recorder: Recorder, *steps: int) -> None:
    """``train_lr`` reported at each of ``steps`` (value ``step / 10``), drained."""
    queue = deque(reports.train(float(s), s, None, {"lr": s / 10}) for s in steps)
    recorder.apply_all(queue)


def kind(recorder: Recorder, name: str) -> tuple[str, list[int] | float | None]:
    """``("series", its steps)`` or ``("scalar", its latest value)`` for ``name`` in the store."""
    store = recorder._record.store
    if name in store.series:
        return ("series", store.series[name].steps.tolist())
    assert name in store.scalar_names, f"{name} is not in the store"
    return ("scalar", store.scalars.get(name))


def stored_series(name: str, steps: list[int]) -> StoredState:
    """A stored task holding one series ``name`` at ``steps`` (epoch 1, value 1.0)."""
    columns = (array("q", steps), array("i", [1] * len(steps)), array("d", [1.0] * len(steps)))
    return StoredState(series={name: columns})


def test_before_the_read_a_name_is_admitted_provisionally_as_a_series() -> None:
    """Not selected for a history, arriving before the stored task is read: every point kept."""
    recorder = recorder_of(**NO_HISTORY)
    report_lr(recorder, 1, 2, 3)

    assert ("series", [1, 2, 3]) == kind(recorder, "train_lr")
    assert {"train_lr"} == recorder._record.provisional


def test_the_read_makes_a_provisional_name_a_scalar_unless_it_is_stored_as_a_series() -> None:
    """No stored series of that name: at the read it becomes a scalar with its latest value."""
    recorder = recorder_of(**NO_HISTORY)
    report_lr(recorder, 1, 2, 3)

    recorder.seed(StoredState(series={}))

    assert ("scalar", 0.3) == kind(recorder, "train_lr")
    assert set() == recorder._record.provisional
    assert 0.3 == recorder.snapshot()[0]["status_details"]["train_lr"]
    assert "train_lr" not in recorder.snapshot()[0]["status_details"].get("metrics", {})


def test_a_provisional_name_the_stored_task_holds_as_a_series_stays_a_series() -> None:
    """Stored as a series: at the read it stays one, the stored points before this run's."""
    recorder = recorder_of(**NO_HISTORY)
    report_lr(recorder, 3, 4)

    recorder.seed(stored_series("train_lr", [1, 2]))

    assert ("series", [1, 2, 3, 4]) == kind(recorder, "train_lr")


def test_the_kind_changes_once_at_the_read_and_never_after() -> None:
    """After the read the scalar stays a scalar: later points replace its value, never a curve."""
    recorder = recorder_of(**NO_HISTORY)
    report_lr(recorder, 1)
    recorder.seed(StoredState(series={}))
    report_lr(recorder, 2, 3)

    assert ("scalar", 0.3) == kind(recorder, "train_lr")
    assert set() == recorder._record.provisional


def test_after_the_read_the_first_arrival_decides_for_good() -> None:
    """A name first seen after the read is a scalar at once: nothing provisional about it."""
    recorder = recorder_of(**NO_HISTORY)
    recorder.seed(stored_series("train_lr", [1, 2]))
    queue = deque([reports.train(3.0, 3, None, {"lr": 0.3, "momentum": 0.9})])
    recorder.apply_all(queue)

    assert ("series", [1, 2, 3]) == kind(recorder, "train_lr")
    assert ("scalar", 0.9) == kind(recorder, "train_momentum")
    assert set() == recorder._record.provisional


def test_a_name_selected_for_a_history_is_a_series_from_its_first_arrival() -> None:
    """Matched by ``time_series_metrics``: a series before the read, never provisional, kept."""
    recorder = recorder_of(time_series_metrics=["train_*"])
    report_lr(recorder, 1, 2)

    assert set() == recorder._record.provisional
    recorder.seed(StoredState(series={}))
    assert ("series", [1, 2]) == kind(recorder, "train_lr")


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_name_stored_as_a_series_stays_a_series_whatever_arrives_first(
    series_suffix: bool,
) -> None:
    """Without history configured, and before the stored task is read: the stored curve goes on."""
    points = [{"step": s, "epoch": 1, "value": float(s)} for s in range(1, 4)]
    stored = {"status": "running", "status_details": {"metrics": {"train_loss": points}}}
    sink = ScriptedSink(MemorySink(stored, series_suffix=series_suffix))
    sink.open_results.extend(RetryLater("down") for _ in range(3))
    clock = FakeClock()
    config = ReportingConfig(
        min_report_interval_seconds=10.0,
        backoff_jitter=0.0,
        drain_queue_depth=2,
        time_series_metrics=[],
        backoff_initial_seconds=1.0,
    )
    reporter = Reporter(sink, config, clock=clock, rank=0)
    worker = drive(reporter)
    for step in range(4, 9):
        reporter.report_train_step(step=step, metrics={"loss": float(step), "lr": 0.1})
        worker.cycle()
    for _ in range(4):
        clock.advance(10.0)
        worker.cycle()
    assert reporter.close(timeout=5)
    assert list(range(1, 9)) == [p[0] for p in curve(sink.task, "train_loss")]
    assert "train_lr" not in held(sink)["status_details"]["metrics"]
    assert 0.1 == held(sink)["status_details"]["train_lr"]
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())
