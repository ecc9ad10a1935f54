"""A step that goes back is said in the log, bounded, and counted (docs/design.md#metrics).

The rewind rule (a point at or before a series' last step replaces its tail)
is right for a resume from a checkpoint, but it deletes history, so each
rewind is one ``trainreport.series_rewound`` event (all series one report
rewound in one event, at most ``MAX_REWIND_EVENTS`` a process), counted in
``stats()``; rewinds back to the process's first step again (a per-epoch batch
index used as the step) give one ``trainreport.step_looks_like_batch_index``
warning. Pure tests drive the store and a Recorder without threads; one goes
through a real Reporter.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import pytest

from helpers import curve
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._record._recorder import Recorder
from trainreport._record._reports import train, validation
from trainreport._record._rewinds import MAX_REWIND_EVENTS, MAX_SERIES_NAMED, RewindLog
from trainreport._record._store import MetricStore
from trainreport._wire._payloads import StoredState
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)

REWIND_EVENTS = (
    "trainreport.series_rewound",
    "trainreport.step_looks_like_batch_index",
    "trainreport.series_rewound_not_logged",
)


def rewind_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] in REWIND_EVENTS]


def rewind_fields(event: dict[str, Any]) -> tuple[Any, ...]:
    """A ``series_rewound`` event's fields: series, series_count, from_step, last_step,
    points_replaced, resume."""
    return (
        event["series"],
        event["series_count"],
        event["from_step"],
        event["last_step"],
        event["points_replaced"],
        event["resume"],
    )


def batch_index_loop(
    recorder: Recorder, epochs: int, batches: int, metrics: int = 1
) -> list[dict[str, Any]]:
    """The issue's loop: ``step=i + 1`` restarts every epoch; returns the log events."""
    with capture_events() as events:
        recorder.start_attempt()
        t = 0.0
        for _ in range(epochs):
            for i in range(batches):
                t += 1.0
                recorder.apply(train(t, i + 1, None, {f"m{k}": float(i) for k in range(metrics)}))
    return events


def test_a_series_rewind_is_noted_by_the_store_and_counted_once_per_report() -> None:
    """store.record notes (name, last step, points removed); end_report counts one rewind."""
    store = MetricStore()
    for name in ("a", "b"):
        store.admit(name, as_series=True)
        for step in range(1, 11):
            store.record(name, step, 1, float(step))
    assert [] == store.end_report()
    store.record("a", 4, 1, 0.0)
    store.record("b", 8, 1, 0.0)
    assert [("a", 10, 7), ("b", 10, 3)] == store.end_report()
    assert 1 == store.rewinds
    assert 10 == store.points_replaced_by_rewinds
    assert [] == store.end_report()
    assert 1 == store.rewinds


def test_a_re_reported_last_step_is_no_rewind() -> None:
    """A point at the last step replaces it (one point discarded) without counting a rewind."""
    store = MetricStore()
    store.admit("a", as_series=True)
    store.record("a", 5, 1, 1.0)
    store.record("a", 5, 1, 2.0)
    assert [] == store.end_report()
    assert (0, 0, 1) == (store.rewinds, store.points_replaced_by_rewinds, store.points_discarded)


def test_the_purge_names_the_series_it_cut() -> None:
    """purge_after returns each series that lost points: (name, last step, points removed)."""
    store = MetricStore()
    store.admit("train_loss", as_series=True)
    store.admit("val_loss", as_series=True)
    store.admit("val_acc", as_series=True)
    for step in range(1, 11):
        store.record("train_loss", step, 1, float(step))
    store.record("val_loss", 10, 1, 1.0)
    store.record("val_acc", 5, 1, 1.0)
    assert [("train_loss", 10, 4), ("val_loss", 10, 1)] == store.purge_after(6)
    assert (1, 5) == (store.rewinds, store.points_replaced_by_rewinds)


def test_the_batch_index_loop_gives_one_warning_naming_the_cause() -> None:
    """3 epochs x 50 steps with step=i+1: one info (epoch 2), one warning (epoch 3), counted."""
    recorder = Recorder(ReportingConfig())
    events = batch_index_loop(recorder, epochs=3, batches=50)
    said = rewind_events(events)
    assert ["trainreport.series_rewound", "trainreport.step_looks_like_batch_index"] == [
        e["event"] for e in said
    ]
    info, warning = said
    assert "info" == info["log_level"]
    assert (["train_m0"], 1, 1, 50, 50, False) == rewind_fields(info)
    assert "warning" == warning["log_level"]
    assert (["train_m0"], 1, 50, 50) == (
        warning["series"],
        warning["from_step"],
        warning["last_step"],
        warning["points_replaced"],
    )
    assert "per-epoch batch index" in warning["cause"]
    assert "went back to 1 again" in warning["cause"]
    assert "epoch * batches_per_epoch + i" in warning["fix"]
    counts = recorder.counts()
    assert (2, 100) == (counts.rewinds, counts.points_replaced_by_rewinds)


def test_a_zero_based_batch_index_is_recognised_too() -> None:
    """step=i (0-based) goes back to the first step, 0: the same warning, once."""
    recorder = Recorder(ReportingConfig())
    with capture_events() as events:
        recorder.start_attempt()
        for epoch in range(4):
            for i in range(10):
                recorder.apply(train(float(epoch * 10 + i), i, None, {"loss": 1.0}))
    warnings = [e for e in events if e["event"] == "trainreport.step_looks_like_batch_index"]
    assert 1 == len(warnings)
    assert 0 == warnings[0]["from_step"]


def test_a_single_rewind_is_an_info_event_and_no_batch_index_warning() -> None:
    """One rollback within the process (say after a loss spike): info, with its fields."""
    recorder = Recorder(ReportingConfig())
    with capture_events() as events:
        recorder.start_attempt()
        for step in range(1, 101):
            recorder.apply(train(float(step), step, None, {"loss": 1.0, "lr": 0.1}))
        recorder.apply(train(101.0, 60, None, {"loss": 0.5, "lr": 0.1}))
    said = rewind_events(events)
    assert 1 == len(said)
    assert "trainreport.series_rewound" == said[0]["event"]
    assert "info" == said[0]["log_level"]
    assert (["train_loss", "train_lr"], 2, 60, 100, 82, False) == rewind_fields(said[0])
    assert "global step" in said[0]["hint"]
    counts = recorder.counts()
    assert (1, 82) == (counts.rewinds, counts.points_replaced_by_rewinds)


def test_two_rollbacks_above_the_first_step_are_no_batch_index() -> None:
    """Going back twice, to steps above the process's first step: info twice, no warning."""
    recorder = Recorder(ReportingConfig())
    with capture_events() as events:
        recorder.start_attempt()
        for step in [*range(1, 51), *range(30, 61), *range(30, 41)]:
            recorder.apply(train(float(step), step, None, {"loss": 1.0}))
    assert ["trainreport.series_rewound"] * 2 == [e["event"] for e in rewind_events(events)]


def test_rewind_events_are_bounded_across_many_rewinds_of_100_metrics() -> None:
    """20 epochs x 5 steps x 100 metrics: a bounded number of events, each naming few series."""
    recorder = Recorder(ReportingConfig())
    events = batch_index_loop(recorder, epochs=20, batches=5, metrics=100)
    said = rewind_events(events)
    assert MAX_REWIND_EVENTS + 1 == len(said)
    assert 1 == sum(e["event"] == "trainreport.step_looks_like_batch_index" for e in said)
    assert "trainreport.series_rewound_not_logged" == said[-1]["event"]
    assert "stats()" in said[-1]["hint"]
    for e in said[:-1]:
        assert MAX_SERIES_NAMED == len(e["series"])
        assert 100 == e["series_count"]
        assert 500 == e["points_replaced"]
    counts = recorder.counts()
    assert (19, 19 * 5 * 100) == (counts.rewinds, counts.points_replaced_by_rewinds)


def test_the_batch_index_warning_comes_even_past_the_event_cap() -> None:
    """Many legitimate rollbacks fill the cap; the pattern later still gets its warning."""
    recorder = Recorder(ReportingConfig())
    with capture_events() as events:
        recorder.start_attempt()
        steps = [*range(1, 101)]
        for k in range(MAX_REWIND_EVENTS + 3):
            steps += [90 - k, 95]  # back to 90, 89, ...: above the first step
        steps += [1, 2, 1]
        for t, step in enumerate(steps):
            recorder.apply(train(float(t), step, None, {"loss": 1.0}))
    said = [e["event"] for e in rewind_events(events)]
    assert 1 == said.count("trainreport.series_rewound_not_logged")
    assert 1 == said.count("trainreport.step_looks_like_batch_index")
    assert "trainreport.step_looks_like_batch_index" == said[-1]


def test_a_validation_rewind_is_said_too() -> None:
    """A validation report whose step goes back rewinds its series: one event."""
    recorder = Recorder(ReportingConfig())
    with capture_events() as events:
        recorder.start_attempt()
        for step in (10, 20, 30):
            recorder.apply(train(float(step), step, None, {"loss": 1.0}))
            recorder.apply(validation(float(step), step, None, {"loss": 1.0}, None))
        recorder.apply(validation(31.0, 15, None, {"loss": 1.0}, None))
    said = rewind_events(events)
    assert [(["val_loss"], 15, 30, 2)] == [
        (e["series"], e["from_step"], e["last_step"], e["points_replaced"]) for e in said
    ]


STORED = StoredState(
    series={
        "train_loss": (
            array("q", range(1, 11)),
            array("i", [1] * 10),
            array("d", [float(s) for s in range(1, 11)]),
        ),
        "val_loss": (array("q", [5, 10]), array("i", [1, 1]), array("d", [0.5, 0.4])),
    },
)


@pytest.mark.parametrize(
    ("seed_first", "steps", "replaced"),
    [(True, range(6, 12), 5), (False, (6, 7), 6)],
    ids=["resume_purge", "seeding_cut"],
)
def test_a_resume_is_an_info_event(seed_first: bool, steps: Sequence[int], replaced: int) -> None:
    """Seeded first, then a first training step at 6 (stored last 10): the purge is said;
    training steps 6, 7 applied before the stored task was read: seeding's cut is said."""
    recorder = Recorder(ReportingConfig())
    with capture_events() as events:
        recorder.start_attempt()
        if seed_first:
            recorder.seed(STORED)
        for step in steps:
            recorder.apply(train(float(step), step, None, {"loss": 1.0}))
        if not seed_first:
            recorder.seed(STORED)
    said = rewind_events(events)
    assert 1 == len(said)
    assert "info" == said[0]["log_level"]
    assert (["train_loss", "val_loss"], 2, 6, 10, replaced, True) == rewind_fields(said[0])
    counts = recorder.counts()
    assert (1, replaced) == (counts.rewinds, counts.points_replaced_by_rewinds)


def test_a_resume_then_the_batch_index_loop_still_warns() -> None:
    """A resumed process using the batch index: the purge is legitimate, the loop is not."""
    recorder = Recorder(ReportingConfig())
    with capture_events() as events:
        recorder.start_attempt()
        recorder.seed(STORED)
        for epoch in range(3):
            for i in range(5):
                recorder.apply(train(float(epoch * 5 + i), i + 1, None, {"loss": 1.0}))
    said = rewind_events(events)
    assert [True, False, False] == [e["resume"] for e in said]
    assert "trainreport.step_looks_like_batch_index" == said[-1]["event"]


def test_the_issues_loop_through_a_reporter() -> None:
    """for epoch in range(3): for i in range(50): step=i + 1 -> one warning, counted in stats()."""
    sink = MemorySink()
    config = ReportingConfig(min_report_interval_seconds=0.0)
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0)
    with capture_events() as events:
        reporter.start()
        reporter.report_training_start(max_steps=150, num_epochs=3)
        for epoch in range(3):
            for i in range(50):
                reporter.report_train_step(step=i + 1, epoch=epoch, metrics={"loss": 1.0 / (i + 1)})
        assert reporter.close(timeout=5)
    warnings = [e for e in events if e["event"] == "trainreport.step_looks_like_batch_index"]
    assert 1 == len(warnings)
    assert "warning" == warnings[0]["log_level"]
    assert "per-epoch batch index" in warnings[0]["cause"]
    assert 2 == len(rewind_events(events))
    stats = reporter.stats()
    assert (2, 100) == (stats.rewinds, stats.points_replaced_by_rewinds)
    task = sink.task
    assert task is not None
    assert 50 == len(curve(task, "train_loss"))


def test_the_not_logged_line_comes_even_when_the_warning_filled_the_cap() -> None:
    """The warning as the cap's last event: the next rewind still says it is not logged."""
    log = RewindLog(max_events=2)
    with capture_events() as events:
        log.rewound(1, [("train_loss", 50, 50)], first_step=1)
        log.rewound(20, [("train_loss", 50, 31)], first_step=1)
        log.rewound(1, [("train_loss", 50, 50)], first_step=1)
        log.rewound(1, [("train_loss", 50, 50)], first_step=1)
        log.rewound(1, [("train_loss", 50, 50)], first_step=1)
    assert [
        "trainreport.series_rewound",
        "trainreport.series_rewound",
        "trainreport.step_looks_like_batch_index",
        "trainreport.series_rewound_not_logged",
    ] == [e["event"] for e in rewind_events(events)]
