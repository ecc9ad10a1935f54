"""The columnar ingest (runs of like training reports as one batch) changes nothing but speed.

Every report sequence, odd ones included (new names, non-numbers, NaN and
infinities, rewinds, repeated steps, every kind of epoch, the name cap,
events, validation, seeding and deliveries in between), leaves the same
store, counters, marks, updates and log events whether it is applied one
report at a time (``Recorder.apply``: the per-point path) or drained in
chunks (``Recorder.apply_all``: batches where they fit).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from trainreport import ReportingConfig
from trainreport._record._columnar import BATCH_VALUES
from trainreport._record._recorder import Build, Recorder
from trainreport._record._reports import (
    TRAIN_EPOCH,
    TRAIN_STEP,
    TRAIN_TIME,
    Report,
    checkpoint,
    completed,
    epoch_end,
    metrics_report,
    train,
    training_start,
    validation,
)
from trainreport._wire._payloads import StoredState
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(600)

BASE_KEYS = ("loss", "lr", "acc", "grad_norm", "tokens")
ODD_KEYS = ("eval_loss", "train/loss", "bad\x00name", "step", "new_metric", "x" * 300)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10.0, max_value=10.0),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([10**400, True, False, "1.5", None, [1.0]]),
)
EPOCHS = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=4),
    st.floats(min_value=0.0, max_value=4.0),
    st.sampled_from([-1, -0.5, math.nan, math.inf, True, "2", 2**40, 2.0**40]),
)


def short_form(t: float, step: object, epoch: object, metrics: object) -> Report:
    """A training step's report as ``report_train_step`` queues it when it can: the short form.

    The metrics' copy with the header keys last (``_reports``); the general
    ``TRAIN`` tuple when the short form does not apply. tests/record/test_reports.py
    pins the real call against the same rule.
    """
    item = train(t, step, epoch, metrics)
    assert isinstance(item, tuple)  # train() builds the general TRAIN tuple
    copied = item[4]
    if (
        (type(step) is not int and step is not None)
        or type(epoch) not in (int, float, type(None))
        or type(copied) is not dict
        or {TRAIN_TIME, TRAIN_STEP, TRAIN_EPOCH} & copied.keys()
    ):
        return item
    return {**copied, TRAIN_TIME: t, TRAIN_STEP: step, TRAIN_EPOCH: epoch}


@st.composite
def reports(draw: st.DrawFn) -> list[Report]:
    """A report sequence: mostly like training steps, with odd ones mixed in.

    A training step takes either form (the short form, the way the hot path
    queues it, or the ``TRAIN`` tuple), mixed within one sequence, and one in
    four omits its step (``None``: the last training step + 1, resolved on the
    reporter thread), mixed with explicit ones.
    """
    out: list[Report] = []
    step = draw(st.integers(min_value=0, max_value=3))
    epoch: object = draw(EPOCHS)
    keys = BASE_KEYS[: draw(st.integers(min_value=1, max_value=len(BASE_KEYS)))]
    for _ in range(draw(st.integers(min_value=1, max_value=60))):
        kind = draw(
            st.sampled_from(["train"] * 12 + ["odd_train", "validation", "metrics", "event"])
        )
        move = draw(st.sampled_from([1] * 8 + [0, -1, -3, 2]))
        step = max(0, step + move)
        if draw(st.integers(0, 9)) == 0:
            epoch = draw(EPOCHS)
        t = float(step) * 0.5
        if kind == "train":
            value = draw(st.floats(min_value=-5.0, max_value=5.0))
            metrics: dict[str, Any] = {k: value * (i + 1) for i, k in enumerate(keys)}
            if draw(st.integers(0, 5)) == 0:  # one value of any kind (int, bool, text, NaN)
                metrics[draw(st.sampled_from(keys))] = draw(VALUES)
            if draw(st.integers(0, 9)) == 0:  # the same keys in another order
                metrics = dict(reversed(metrics.items()))
            build = short_form if draw(st.booleans()) else train
            out.append(build(t, None if draw(st.integers(0, 3)) == 0 else step, epoch, metrics))
        elif kind == "odd_train":
            odd_keys = draw(st.lists(st.sampled_from(BASE_KEYS + ODD_KEYS), max_size=6))
            odd = {k: draw(VALUES) for k in odd_keys}
            raw_step = draw(st.sampled_from([step, step, float(step), -1, True, None, 2**60]))
            build = short_form if draw(st.booleans()) else train
            out.append(build(t, raw_step, epoch, odd))
        elif kind == "validation":
            dataset = draw(st.sampled_from([None, "test", 3]))
            out.append(validation(t, step, epoch, {"loss": draw(VALUES)}, dataset))
        elif kind == "metrics":
            out.append(metrics_report(t, step, {"lr": draw(VALUES)}, "optim"))
        else:
            out.append(
                draw(
                    st.sampled_from(
                        [
                            training_start(t, 100, draw(st.sampled_from([None, 2, 3]))),
                            epoch_end(t, epoch),
                            checkpoint(t, "/ckpt", step),
                            completed(t),
                        ]
                    )
                )
            )
    return out


def _state(recorder: Recorder) -> dict[str, Any]:
    """Everything the recorder holds, comparable (NaN by its repr)."""
    record = recorder._record
    store = record.store
    return {
        "series": {
            name: (
                s.steps.tolist(),
                s.epochs.tolist(),
                [repr(v) for v in s.values],
                [repr(t) for t in s.times],
                list(s.delivered),
                list(s.server_length),
                list(s.low),
            )
            for name, s in store.series.items()
        },
        "scalars": {name: repr(v) for name, v in store.scalars.items()},
        "scalar_order": list(store.scalars),
        "scalar_names": sorted(store.scalar_names),
        "marks": (store.max_step, store.rewinds, store.points_recorded, store.points_discarded),
        "drops": dict(record.drops),
        "progress": (
            record.changes,
            record.at_step,
            record.at_epoch,
            record.first_step,
            record.first_train_step,
            record.last_step_time,
            record.max_steps,
            record.num_epochs,
        ),
        "machine": (record.machine.status, record.machine.phase),
        "sticky": (dict(record.sticky.values), dict(record.sticky.versions)),
        "epoch_base": recorder._ingest._epochs.rule.zero_based,
        "provisional": sorted(record.provisional),
        "names": {
            table: {repr(k): None if e is None else e[0] for k, e in names.items()}
            for table, names in recorder._names.tables.items()
        },
        "snapshot": repr(recorder.snapshot()),
        "counts": recorder.counts(),
        "delivered": (recorder.has_changes(0), recorder.all_delivered(0)),
    }


def _build_repr(build: Build) -> str:
    update = build.update
    series = None if update.series is None else [repr(s) for s in update.series]
    return repr((update.status, update.status_details, series, build.sent, build.sticky))


WALL = "2026-12-01T00:00:00Z"
STORED = StoredState(
    series={"train_loss": (array("q", [1, 2, 3]), array("i", [1, 1, 2]), array("d", [3, 2, 1]))},
    val_datasets=("test",),
)


def _run(
    items: list[Report],
    cuts: list[int],
    ops: list[str],
    config: ReportingConfig,
    batch: bool,
) -> tuple[dict[str, Any], list[str], list[dict[str, Any]], int]:
    # Applying a short form takes its header keys out: each run gets its own copies.
    items = [dict(item) if isinstance(item, dict) else item for item in items]
    recorder = Recorder(config, wall_offset=1_767_225_000.25)
    builds: list[str] = []
    with capture_events() as events:
        recorder.start_attempt()
        start = 0
        for cut, op in zip([*cuts, len(items)], [*ops, "deliver"], strict=True):
            chunk = items[start:cut]
            start = max(start, cut)
            if batch:
                queue = deque(chunk)
                recorder.apply_all(queue)
                assert not queue
            else:
                for item in chunk:
                    recorder.apply(item)
            if op == "seed" and not recorder.seeded:
                recorder.seed(STORED)
            elif op in ("deliver", "full"):
                build = recorder.build_update(0, wall=WALL, full_state=op == "full")
                builds.append(_build_repr(build))
                recorder.on_delivered(0, build, None)
            elif op == "resync":
                recorder.resynchronise(0, {"train_loss": 1})
        rows = recorder._ingest._columnar.rows
    return _state(recorder), builds, events, rows


CONFIGS = st.builds(
    ReportingConfig,
    max_metric_names=st.sampled_from([4, 8, 1000]),
    time_series_metrics=st.sampled_from([None, ("train_loss", "train_acc", "val_*"), ("*",)]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=reports(),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=6),
    ops=st.lists(st.sampled_from(["none", "seed", "deliver", "full", "resync"]), max_size=6),
    config=CONFIGS,
)
def test_batches_and_single_reports_leave_the_same_record(
    items: list[Report], cuts: list[int], ops: list[str], config: ReportingConfig
) -> None:
    """Applied per point or drained in batches: same store, counters, updates and log events."""
    cuts = sorted(cuts)
    ops = (ops + ["none"] * len(cuts))[: len(cuts)]
    per_point = _run(items, cuts, ops, config, batch=False)
    batched = _run(items, cuts, ops, config, batch=True)
    event("batched" if batched[3] else "per point only")
    assert per_point[:3] == batched[:3]
    assert 0 == per_point[3]


@pytest.mark.parametrize("build", [short_form, train], ids=["short form", "tuple"])
@pytest.mark.parametrize(
    "given",
    [lambda s: s, lambda _s: None, lambda s: s if s % 7 == 0 else None],
    ids=["steps given", "steps omitted", "mixed"],
)
def test_like_training_reports_are_applied_as_batches(
    build: Any, given: Callable[[int], int | None]
) -> None:
    """The common case (the same metrics every step) takes the batch path, not a loop per point.

    So does the same loop without its steps (``report_train_step(metrics=...)``):
    the batch numbers them as the per-point path does, 1 to 50.
    """
    items = [
        build(float(s), given(s), 1, {"loss": 1.0 / s, "lr": 0.1, "acc": 0.5}) for s in range(1, 51)
    ]
    per_point = _run(items, [], [], ReportingConfig(), batch=False)
    batched = _run(items, [], [], ReportingConfig(), batch=True)
    assert per_point[:3] == batched[:3]
    assert list(range(1, 51)) == batched[0]["series"]["train_loss"][0]
    assert 49 == batched[3]  # all but the first training step (the purge decision)


def test_a_long_run_is_cut_into_batches_of_bounded_size() -> None:
    """A batch takes at most ``BATCH_VALUES`` values; the rest of the run is the next batch's.

    Its checks and copies are single C calls that hold the interpreter, so a
    drain of a deep queue of wide reports is cut into pieces the training
    thread can interleave with
    (docs/performance.md#reporter-ingest-throughput-issue-23); the record is
    the per-point path's.
    """
    width = 500
    rows = BATCH_VALUES // width
    keys = [f"m{i}" for i in range(width)]
    items: list[Report] = [
        short_form(float(s), s, 1, {k: s + i / 1000 for i, k in enumerate(keys)})
        for s in range(1, 3 * rows + 2)
    ]
    # Nothing delivered on either side: every point is still in memory to compare.
    per_point = Recorder(ReportingConfig(), wall_offset=1_767_225_000.25)
    per_point.start_attempt()
    for item in items:
        per_point.apply(dict(item) if isinstance(item, dict) else item)
    recorder = Recorder(ReportingConfig(), wall_offset=1_767_225_000.25)
    recorder.start_attempt()
    recorder.apply_all(deque(dict(item) for item in items if isinstance(item, dict)))
    columnar = recorder._ingest._columnar
    assert 3 * rows == columnar.rows  # all but the first step (the purge decision)
    assert 3 == columnar.batches
    points = {name: s[:4] for name, s in _state(recorder)["series"].items()}
    assert {name: s[:4] for name, s in _state(per_point)["series"].items()} == points
    assert 3 * rows + 1 == len(points["train_m0"][0])


@pytest.mark.parametrize(
    ("odd_key", "batched"),
    [("bad\x00name", True), ("loss", False)],
    ids=["under a refused key: batched", "under a recorded key: per point"],
)
def test_a_value_of_another_type_sends_a_run_per_point_only_where_it_is_recorded(
    odd_key: str, batched: bool
) -> None:
    """A text value under a refused name is never read: the run still batches.

    Under a recorded name it sends the whole run through the per-point path,
    which drops and logs it; either way the record is the per-point path's.
    """
    items: list[Report] = []
    for s in range(1, 41):
        metrics: dict[str, object] = {"loss": 1.0 / s, "lr": 2, "bad\x00name": 0.5}
        if s == 20:
            metrics[odd_key] = "1.5"
        items.append(short_form(float(s), s, 1, metrics))
    per_point = _run(items, [], [], ReportingConfig(), batch=False)
    batch = _run(items, [], [], ReportingConfig(), batch=True)
    assert per_point[:3] == batch[:3]
    assert (39 if batched else 0) == batch[3]
