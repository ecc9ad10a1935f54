"""What the recorder makes of reports: names, epochs, progress, bad input (via a real Reporter)."""

from __future__ import annotations

import math
import warnings
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from helpers import curve
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._record import _reports as reports
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report
from trainreport._wire._payloads import StoredState
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


def run(
    body: Callable[[Reporter, FakeClock], None], **config: Any
) -> tuple[Reporter, dict[str, Any]]:
    sink = MemorySink()
    clock = FakeClock()
    # The record as it stands during the run: close() adds no completion.
    settings = {"status_at_close": "keep", **config}
    reporter = Reporter(sink, ReportingConfig(**settings), clock=clock, rank=0)
    reporter.start()
    body(reporter, clock)
    reporter.close(timeout=5)
    task = sink.task
    assert task is not None
    return reporter, task


def test_prefixes_are_not_doubled_and_validation_is_val() -> None:
    """train/loss -> train_loss; eval_loss in validation -> val_loss.

    See docs/design.md#metrics table.
    """

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_train_step(step=1, metrics={"train/loss": 1.0})
        r.report_validation(step=1, metrics={"eval_loss": 2.0, "accuracy": 0.5})
        r.report_metrics(step=1, metrics={"test_acc": 0.9}, phase="test")

    _, task = run(body)
    assert {"train_loss", "val_loss", "val_accuracy", "test_acc"} == set(
        task["status_details"]["metrics"]
    )


def test_second_validation_dataset_gets_its_own_curves() -> None:
    """The first dataset keeps val_N; others get val_<dataset>_N; the order is stored."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_validation(step=5, metrics={"loss": 1.0}, dataset="squad")
        r.report_validation(step=5, metrics={"loss": 2.0}, dataset="trivia")

    _, task = run(body)
    assert [(5, 1, 1.0)] == curve(task, "val_loss")
    assert [(5, 1, 2.0)] == curve(task, "val_trivia_loss")
    assert ["squad", "trivia"] == task["status_details"]["val_datasets"]


@pytest.mark.parametrize(
    ("epochs", "expected"),
    [
        ([0, 0, 1, 1], [1, 1, 2, 2]),  # zero-based index (for epoch in range(n))
        ([1, 1, 2, 2], [1, 1, 2, 2]),  # one-based index
        ([0.25, 0.5, 1.0, 1.5], [1, 1, 1, 2]),  # HF float: epochs completed
        ([5, 6, 7, 8], [3, 3, 3, 3]),  # capped at num_epochs
    ],
)
def test_epoch_rule_through_train_steps(epochs: list[float], expected: list[int]) -> None:
    """The point epoch follows docs/design.md#metrics (int index, float completed, capped)."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_training_start(max_steps=4, num_epochs=3)
        for step, epoch in enumerate(epochs, start=1):
            r.report_train_step(step=step, epoch=epoch, metrics={"loss": 1.0})

    _, task = run(body)
    assert expected == [p[1] for p in curve(task, "train_loss")]


def test_percentage_and_eta_come_from_steps_since_this_process_started() -> None:
    """percentage = step/max_steps; ETA = mean time per step since the first step x steps left."""

    def body(r: Reporter, clock: FakeClock) -> None:
        r.report_training_start(max_steps=100)
        clock.advance(50.0)  # model loading does not count
        for step in range(11, 21):
            r.report_train_step(step=step, metrics={"loss": 1.0})
            clock.advance(2.0)

    _, task = run(body)
    details = task["status_details"]
    assert 20.0 == details["percentage_done"]
    assert 160.0 == details["eta_seconds"]  # 2 s a step x 80 steps left


def test_other_phases_never_move_training_progress() -> None:
    """report_metrics(phase="system") records curves but leaves step and phase alone."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_train_step(step=3, metrics={"loss": 1.0})
        r.report_metrics(step=1000, metrics={"gpu_util": 0.9}, phase="system")

    _, task = run(body)
    assert 3 == task["status_details"]["step"]
    assert "training" == task["status_details"]["phase"]
    assert [(1000, 1, 0.9)] == curve(task, "system_gpu_util")


def test_hyperparameters_are_flattened_with_slashes() -> None:
    """Nested hyperparameters become one flat mapping under ``hyperparameters``."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_hyperparameters(params={"optimizer": {"lr": 0.001, "betas": [0.9, 0.99]}})

    _, task = run(body)
    assert {"optimizer/lr": 0.001, "optimizer/betas": [0.9, 0.99]} == task["status_details"][
        "hyperparameters"
    ]


def test_distinct_name_cap_drops_and_counts_new_names() -> None:
    """A bug logging metric_{step} stops growing the record at the cap, with one warning."""

    def body(r: Reporter, _: FakeClock) -> None:
        for step in range(1, 21):
            r.report_train_step(step=step, metrics={f"metric_{step}": 1.0})

    with capture_events() as events:
        reporter, task = run(body, max_metric_names=5)
    assert 5 == len(task["status_details"]["metrics"])
    assert 15 == reporter.stats().drops["name_cap"]
    assert 1 == len([e for e in events if e["event"] == "trainreport.metric_name_cap_reached"])


class ItemRaises:
    def item(self) -> float:
        raise RuntimeError("device lost")


BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("metrics None", {"step": 2, "metrics": None}),
    ("metrics a string", {"step": 2, "metrics": "loss=1"}),
    ("non-string keys", {"step": 2, "metrics": {1: 1.0, ("a",): 2.0, "ok": 3.0}}),
    ("empty name", {"step": 2, "metrics": {"": 1.0, "ok": 3.0}}),
    ("10,000-char name", {"step": 2, "metrics": {"x" * 10_000: 1.0, "ok": 3.0}}),
    ("step a word", {"step": "x", "metrics": {"ok": 3.0}}),
    ("step a numeric string", {"step": "50.0", "metrics": {"ok": 3.0}}),
    ("negative step", {"step": -5, "metrics": {"ok": 3.0}}),
    ("huge step", {"step": 2**80, "metrics": {"ok": 3.0}}),
    ("epoch a word", {"step": 2, "epoch": "e", "metrics": {"ok": 3.0}}),
    ("int too large for a float", {"step": 2, "metrics": {"big": 10**400, "ok": 3.0}}),
    ("item() raises", {"step": 2, "metrics": {"t": ItemRaises(), "ok": 3.0}}),
    (
        "bool, None, list, str values",
        {"step": 2, "metrics": {"b": True, "n": None, "l": [1], "s": "x", "ok": 3.0}},
    ),
]


@pytest.mark.parametrize(("label", "kwargs"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_is_logged_and_dropped_and_the_rest_is_kept(
    label: str, kwargs: dict[str, Any]
) -> None:
    """No report call raises or warns; bad parts are dropped, good parts of the call kept."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_train_step(step=1, metrics={"ok": 1.0})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _repeat in range(3):  # repeated: still one log event per name
                r.report_train_step(**kwargs)

    with capture_events() as events:
        _, task = run(body)
    points = curve(task, "train_ok")
    assert (1, 1, 1.0) == points[0]
    valid_step = kwargs["step"] == 2
    has_ok = isinstance(kwargs["metrics"], dict) and "ok" in kwargs["metrics"]
    assert (2 if valid_step and has_ok else 1) == len(points), label
    dropped = [e for e in events if e["event"] == "trainreport.report_dropped"]
    if kwargs["metrics"] is not None and not (valid_step and kwargs["metrics"] == {"ok": 3.0}):
        assert dropped, label
    assert len(dropped) == len({(e.get("field"), e.get("reason")) for e in dropped}), label


def test_numpy_scalars_and_item_objects_are_converted_on_the_callers_thread() -> None:
    """numpy scalars/ints and 0-d arrays become plain numbers; numpy int steps work."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_train_step(
            step=np.int64(1), metrics={"a": np.float32(0.5), "b": np.int64(3), "c": np.array(1.5)}
        )

    _, task = run(body)
    assert [(1, 1, 0.5)] == curve(task, "train_a")
    assert [(1, 1, 3.0)] == curve(task, "train_b")
    assert [(1, 1, 1.5)] == curve(task, "train_c")


def test_queued_metrics_are_copies_not_the_callers_dict() -> None:
    """Mutating the dict after the call does not change what was reported."""

    def body(r: Reporter, _: FakeClock) -> None:
        metrics = {"loss": 1.0}
        r.report_train_step(step=1, metrics=metrics)
        metrics["loss"] = 99.0

    _, task = run(body)
    assert [(1, 1, 1.0)] == curve(task, "train_loss")


def test_reserved_detail_names_cannot_be_overwritten_by_a_metric() -> None:
    """A custom phase whose qualified name hits a reserved key (max_steps) is dropped."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_training_start(max_steps=10)
        r.report_metrics(step=1, metrics={"steps": 999.0}, phase="max")

    _, task = run(body)
    assert 10 == task["status_details"]["max_steps"]


def test_two_keys_naming_the_same_series_in_one_report_give_one_point() -> None:
    """``loss`` and ``eval_loss`` in one validation report are both ``val_loss``: one point."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_validation(step=0, metrics={"eval_loss": 1.0, "loss": 2.0})
        r.report_validation(step=5, metrics={"eval_loss": 3.0, "loss": 4.0})

    _, task = run(body)
    assert [(0, 1, 2.0), (5, 1, 4.0)] == curve(task, "val_loss")


# --- an omitted step (docs/design.md#metrics, "Steps and epochs") ----------------------


def test_an_omitted_step_counts_training_steps_from_one() -> None:
    """``report_train_step(metrics=...)`` without ``step``: 1, 2, 3, ... (as wandb and Trackio)."""

    def body(r: Reporter, _: FakeClock) -> None:
        for i in range(5):
            r.report_train_step(metrics={"loss": float(i)})

    reporter, task = run(body)
    assert [(s, 1, float(s - 1)) for s in range(1, 6)] == curve(task, "train_loss")
    assert 5 == task["status_details"]["step"]
    assert 0 == sum(reporter.stats().drops.values())


def test_an_omitted_step_follows_the_last_training_step_given_or_not() -> None:
    """Explicit and implicit steps mix: an omitted step is the last training step seen + 1."""

    def body(r: Reporter, _: FakeClock) -> None:
        r.report_train_step(step=10, metrics={"loss": 1.0})
        r.report_train_step(metrics={"loss": 2.0})
        r.report_train_step(metrics={"loss": 3.0})
        r.report_validation(step=50, metrics={"loss": 0.5})  # not a training step
        r.report_train_step(step=20, metrics={"loss": 4.0})
        r.report_train_step(metrics={"loss": 5.0})

    _, task = run(body)
    assert [10, 11, 12, 20, 21] == [p[0] for p in curve(task, "train_loss")]


def test_an_omitted_step_after_a_rewind_continues_from_the_rewound_step() -> None:
    """A step back to 3 replaces the tail; the next omitted step is 4, not 6."""

    def body(r: Reporter, _: FakeClock) -> None:
        for _i in range(5):
            r.report_train_step(metrics={"loss": 1.0})
        r.report_train_step(step=3, metrics={"loss": 2.0})
        r.report_train_step(metrics={"loss": 3.0})

    reporter, task = run(body)
    assert [(1, 1.0), (2, 1.0), (3, 2.0), (4, 3.0)] == [
        (p[0], p[2]) for p in curve(task, "train_loss")
    ]
    assert 1 == reporter.stats().rewinds


def test_each_point_gets_its_reports_time_on_the_wall_clock_batched_or_not() -> None:
    """A point's time is its report's monotonic ``t`` plus the offset taken at start.

    Training steps (a batch of like reports, then one per point after a new
    name), validation and other phases alike; the update built carries the
    times of the points it sends.
    """
    recorder = Recorder(ReportingConfig(), wall_offset=1_767_225_000.0)
    recorder.start_attempt()
    queue: deque[Report] = deque(
        [
            reports.train(10.0, 1, None, {"loss": 1.0}),
            reports.train(11.0, 2, None, {"loss": 0.9}),
            reports.train(12.0, 3, None, {"loss": 0.8}),
            reports.train(13.5, 4, None, {"loss": 0.7, "acc": 0.1}),
            reports.validation(14.0, 4, None, {"loss": 1.1}, None),
            reports.metrics_report(15.0, 4, {"lr": 0.01}, "optim"),
        ]
    )
    recorder.apply_all(queue)
    build = recorder.build_update(0, wall="2026-01-01T00:00:00Z", full_state=False)

    assert build.update.series is not None
    times = {s.name: list(s.times or ()) for s in build.update.series}
    base = 1_767_225_000.0
    assert {
        "train_loss": [base + 10.0, base + 11.0, base + 12.0, base + 13.5],
        "train_acc": [base + 13.5],
        "val_loss": [base + 14.0],
        "optim_lr": [base + 15.0],
    } == times
    assert recorder._ingest._columnar.rows > 0  # the batch path took some of them


def test_seeded_points_have_unknown_times_and_keep_them_after_a_rewind() -> None:
    """Points read back from a destination have NaN times; this run's points have real ones."""
    recorder = Recorder(ReportingConfig(), wall_offset=100.0)
    recorder.start_attempt()
    recorder.seed(
        StoredState(
            series={"train_loss": (array("q", [1, 2]), array("i", [1, 1]), array("d", [2.0, 1.0]))}
        )
    )
    recorder.apply_all(deque([reports.train(5.0, 3, None, {"loss": 0.5})]))
    series = recorder._record.store.series["train_loss"]

    assert [1, 2, 3] == series.steps.tolist()
    assert [True, True, False] == [math.isnan(t) for t in series.times]
    assert 105.0 == series.times[-1]
