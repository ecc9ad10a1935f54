"""The report protocol: a training step's short form and its general form are the same report."""

from __future__ import annotations

import gc
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainreport import MemorySink, Reporter
from trainreport._record._reports import (
    HEADER_KEYS,
    TRAIN_EPOCH,
    TRAIN_STEP,
    TRAIN_TIME,
    Kind,
    dispatch,
    kind_of,
    queued_bytes,
    queued_points,
    train,
)
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(300)


class _Item:
    """A 0-d tensor stand-in: a value with ``.item()``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"_Item({self.value!r})"


class _Recording:
    """A ReportHandler that records each call as ``(method, arguments)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def train_step(self, t: float, step: object, epoch: object, metrics: object) -> None:
        self.calls.append(("train_step", (t, step, epoch, _plain(metrics))))

    def validation(
        self, t: float, step: object, epoch: object, metrics: object, dataset: object
    ) -> None:
        self.calls.append(("validation", (t, step, epoch, metrics, dataset)))

    def other_metrics(self, t: float, step: object, metrics: object, phase: object) -> None:
        self.calls.append(("other_metrics", (t, step, metrics, phase)))

    def hyperparameters(self, flat: dict[str, Any], left_out: int) -> None:
        self.calls.append(("hyperparameters", (flat, left_out)))

    def training_start(self, max_steps: object, num_epochs: object) -> bool:
        self.calls.append(("training_start", (max_steps, num_epochs)))
        return True

    def epoch_end(self, epoch: object) -> bool:
        self.calls.append(("epoch_end", (epoch,)))
        return True

    def checkpoint(self, path: object, step: object) -> bool:
        self.calls.append(("checkpoint", (path, step)))
        return True

    def terminal(self, kind: Kind, reason: object, message: object) -> bool:
        self.calls.append(("terminal", (kind, reason, message)))
        return True


def _plain(metrics: object) -> object:
    """Metrics as comparable text: values by type and repr (NaN equals NaN), order kept."""
    if type(metrics) is dict:
        return [(k, type(v).__name__, repr(v)) for k, v in metrics.items()]
    return repr(metrics)


KEYS = st.one_of(
    st.sampled_from(["loss", "lr", "acc", "x"]),
    st.sampled_from([TRAIN_TIME, TRAIN_STEP, TRAIN_EPOCH]),  # a metric under a header key
    st.text(max_size=4),
    st.integers(min_value=-3, max_value=3),
)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=False).map(_Item),
    st.none(),
    st.text(max_size=3),
)
METRICS = st.one_of(
    st.dictionaries(KEYS, VALUES, max_size=6),
    st.dictionaries(st.sampled_from(["loss", "lr", "acc"]), st.floats(), max_size=3),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
STEPS = st.one_of(st.integers(min_value=-5, max_value=2**40), st.booleans(), st.floats(), st.none())
EPOCHS = st.one_of(
    st.none(), st.integers(min_value=-2, max_value=50), st.floats(), st.text(max_size=2)
)


@settings(max_examples=400, deadline=None)
@given(step=STEPS, epoch=EPOCHS, metrics=METRICS)
@example(step=3, epoch=1, metrics={"loss": 0.5, "lr": 1})
@example(step=3, epoch=0.5, metrics={"loss": _Item(0.25), "lr": 1e-3})
@example(step=3, epoch=None, metrics={TRAIN_STEP: 9.0, "loss": 1.0})
def test_a_train_step_queued_by_the_hot_path_dispatches_as_its_general_form(
    step: Any, epoch: Any, metrics: Any
) -> None:
    """Whatever the call, the queued report and ``train()``'s tuple reach the handler alike.

    Same handler call (time, step, epoch, metrics with their types, in order),
    same byte estimate and point count before dispatch, and the caller's dict
    is left as it was.
    """
    clock = FakeClock(start=1234.5)
    reporter = Reporter(MemorySink(), clock=clock, rank=0)  # unstarted: the queue only
    before = _plain(metrics)
    reporter.report_train_step(step=step, epoch=epoch, metrics=metrics)
    assert before == _plain(metrics)
    assert 1 == len(reporter._queue)
    queued = reporter._queue[0]
    general = train(clock(), step, epoch, metrics)
    assert queued_bytes(general) == queued_bytes(queued) == reporter._queued_bytes
    assert queued_points(general) == queued_points(queued)
    assert Kind.TRAIN == kind_of(queued) == kind_of(general)
    fast, slow = _Recording(), _Recording()
    assert dispatch(general, slow) is dispatch(queued, fast) is False
    assert slow.calls == fast.calls
    assert queued_bytes(general) == queued_bytes(queued)  # after dispatch too


def test_a_train_step_of_plain_numbers_is_queued_as_a_container_the_collector_skips() -> None:
    """The short form: the metrics' copy itself, untracked by gc, with the three header keys."""
    reporter = Reporter(MemorySink(), clock=FakeClock(start=7.0), rank=0)
    metrics = {"loss": 0.5, "tokens": 1024}
    reporter.report_train_step(step=4, epoch=1, metrics=metrics)
    queued = reporter._queue[0]
    assert {"loss": 0.5, "tokens": 1024, TRAIN_TIME: 7.0, TRAIN_STEP: 4, TRAIN_EPOCH: 1} == queued
    assert queued is not metrics
    assert not gc.is_tracked(queued)
    assert len(metrics) + HEADER_KEYS == len(queued)


def test_a_tensor_like_value_is_taken_at_call_time_in_the_short_form() -> None:
    """``.item()`` runs in the report call: a later in-place change is not what is queued."""
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0)
    loss = _Item(2.0)
    reporter.report_train_step(step=1, metrics={"loss": loss, "lr": 0.1})
    loss.value = math.inf
    recording = _Recording()
    dispatch(reporter._queue[0], recording)
    expected = [("loss", "float", "2.0"), ("lr", "float", "0.1")]
    assert [("train_step", (1000.0, 1, None, expected))] == recording.calls


def test_an_omitted_step_is_queued_in_the_short_form_as_none() -> None:
    """``step`` omitted: the same untracked short form, its step ``None`` (resolved later)."""
    reporter = Reporter(MemorySink(), clock=FakeClock(start=7.0), rank=0)
    reporter.report_train_step(metrics={"loss": 0.5})
    queued = reporter._queue[0]
    assert {"loss": 0.5, TRAIN_TIME: 7.0, TRAIN_STEP: None, TRAIN_EPOCH: None} == queued
    assert not gc.is_tracked(queued)
    recording = _Recording()
    dispatch(queued, recording)
    assert [("train_step", (7.0, None, None, [("loss", "float", "0.5")]))] == recording.calls


@pytest.mark.parametrize("key", [TRAIN_TIME, TRAIN_STEP, TRAIN_EPOCH])
def test_a_metric_under_a_header_key_is_queued_in_the_general_form(key: str) -> None:
    """The header keys never overwrite a caller's metric: such a call takes the tuple form."""
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0)
    reporter.report_train_step(step=2, metrics={key: 3.0, "loss": 1.0})
    queued = reporter._queue[0]
    assert tuple is type(queued)
    assert {key: 3.0, "loss": 1.0} == queued[4]
