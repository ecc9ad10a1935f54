"""Property: whatever the report calls, none raises, and close() leaves every point exactly once."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._record._name_rules import qualify
from trainreport._wire._protocol import check_name

pytestmark = pytest.mark.timeout(300)

NAMES = st.sampled_from(["loss", "acc", "eval_loss", "train/lr", "x"])
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**60), max_value=2**60),
)
GARBAGE = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(min_value=2**1100, max_value=2**1100 + 5),
)
STEPS = st.integers(min_value=0, max_value=60)
BAD_STEPS = st.one_of(st.just("x"), st.just("50.0"), st.just(-3), st.just(2**70))
#: An omitted training step (the last training step + 1); for validation, a bad step.
NO_STEP = st.none()


def metric_dicts() -> st.SearchStrategy[Any]:
    good = st.dictionaries(NAMES, VALUES, max_size=4)
    mixed = st.dictionaries(
        st.one_of(NAMES, st.integers(), st.text(max_size=300)),
        st.one_of(VALUES, GARBAGE),
        max_size=4,
    )
    return st.one_of(good, mixed, GARBAGE)


CALLS = st.one_of(
    st.tuples(st.just("train"), st.one_of(STEPS, BAD_STEPS, NO_STEP), metric_dicts()),
    st.tuples(st.just("val"), st.one_of(STEPS, BAD_STEPS, NO_STEP), metric_dicts()),
    st.tuples(st.just("garbage_epoch"), STEPS, st.dictionaries(NAMES, VALUES, max_size=2)),
)


def chartable(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def valid_step(step: object) -> bool:
    return type(step) is int and 0 <= step <= 2**53


class Model:
    """What the stored curves must be: the docs/design.md#metrics rules, written plainly."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[int, float]]] = {}
        self.last_train_step = 0  # an omitted step is the last training step + 1

    def point(self, name: str, step: int, value: float) -> None:
        # A point at or before a series' last step replaces that series' tail (no stored
        # task here, so there is never a run-wide purge).
        points = [p for p in self.series.setdefault(name, []) if p[0] < step]
        points.append((step, value))
        self.series[name] = points

    def train(self, step: int, metrics: object) -> None:
        self.last_train_step = step
        self.record("train", step, metrics)

    def record(self, phase: str, step: int, metrics: object) -> None:
        if not isinstance(metrics, dict):
            return
        for raw, value in metrics.items():
            if check_name(raw) is not None:  # the name rules are pinned in test_naming
                continue
            v = chartable(value)
            if v is None:
                continue
            self.point(qualified(raw, phase), step, v)


def qualified(raw: str, phase: str) -> str:
    return qualify(raw, "train" if phase == "train" else "validation")


@example(calls=[("val", 0, {"eval_loss": 0.0, "loss": 0.0})], series_suffix=False)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(CALLS, max_size=40), series_suffix=st.booleans())
def test_any_report_sequence_never_raises_and_keeps_every_point_once(
    calls: list[Any], series_suffix: bool
) -> None:
    """For any calls, valid or garbage, in both wire modes: no raise; curves follow the model."""
    sink = MemorySink(series_suffix=series_suffix)
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.0), rank=0)
    model = Model()
    reporter.start()
    for kind, step, metrics in calls:
        if kind == "train":
            reporter.report_train_step(step=step, metrics=metrics)
            resolved = model.last_train_step + 1 if step is None else step  # omitted: not bad
            if valid_step(resolved):
                model.train(resolved, metrics)
        elif kind == "val":
            reporter.report_validation(step=step, metrics=metrics)
            if valid_step(step):
                model.record("val", step, metrics)
        else:
            not_an_epoch: Any = "e"  # a wrong type on purpose: dropped, never raised
            reporter.report_train_step(step=step, epoch=not_an_epoch, metrics=metrics)
            model.train(step, metrics)
    assert reporter.close(timeout=10)
    snapshot = reporter.snapshot()
    stored = snapshot["status_details"].get("metrics", {})
    expected = {
        name: [(s, v if math.isfinite(v) else None) for s, v in points]
        for name, points in model.series.items()
        if points
    }
    actual = {
        name: [(p["step"], p["value"]) for p in points] for name, points in stored.items() if points
    }
    assert expected == actual
    task = sink.task
    assert task is not None
    assert stored == task["status_details"].get("metrics", {})
