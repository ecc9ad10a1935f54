"""The promise "a report call never raises" (docs/design.md#guarantees), in one place.

"No report call raises, ever, whatever it is given"; the reporter thread must survive
whatever it is handed. Pinned here:

- for each of the ten report methods, not only ``report_train_step``: mappings whose
  iteration, ``len`` or ``items()`` raise; values whose ``.item()``, ``__float__`` or
  ``__repr__`` raise; keys whose ``__hash__`` or ``__str__`` raise; and a user-injected
  clock that raises (which makes the caller's side of every method fail, so removing any
  method's guard fails a test). After the hostile calls, an ordinary report still reaches
  the destination and the reporter thread is alive;
- hostile objects that reach the reporter thread: they do not kill it, and objects that
  are not metrics "are dropped, with one log event per name" (docs/design.md#metrics; the
  other names are kept); a report after close is counted, never raised;
- a device (CUDA) error while copying reported tensors: a counted drop;
- the value and naming rules the record applies to whatever a caller passes
  (``caller_value``, ``to_chartable``, ``to_step``, the epoch rule, ``check_name``,
  ``flatten_params``), for any input.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fake_cuda
import hostile_values
from helpers import curve, drive, held
from hostile_values import HOSTILE, FakeTensor
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._record._params import flatten_params
from trainreport._record._values import (
    UNCONVERTIBLE,
    EpochRule,
    NotChartable,
    caller_value,
    to_chartable,
    to_step,
)
from trainreport._wire._protocol import check_name
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


class BoomError(Exception):
    """Raised by every hostile object."""


class IterRaises(Mapping[Any, Any]):
    """A mapping whose iteration raises."""

    def __getitem__(self, key: Any) -> Any:
        return 1.0

    def __iter__(self) -> Iterator[Any]:
        raise BoomError

    def __len__(self) -> int:
        return 1


class LenRaises(IterRaises):
    """A mapping whose ``len()`` raises."""

    def __iter__(self) -> Iterator[Any]:
        return iter(["loss"])

    def __len__(self) -> int:
        raise BoomError


class ItemsRaises(IterRaises):
    """A mapping whose ``items()`` raises."""

    def __iter__(self) -> Iterator[Any]:
        return iter(["loss"])

    def items(self) -> Any:
        raise BoomError


class ItemRaises:
    """A tensor-like value whose ``.item()`` raises."""

    def item(self) -> float:
        raise BoomError


class FloatRaises:
    """A number-like value whose ``__float__`` raises."""

    def __float__(self) -> float:
        raise BoomError

    def __index__(self) -> int:
        raise BoomError


class ReprRaises(float):
    """A float whose ``repr()`` and ``str()`` raise."""

    def __repr__(self) -> str:
        raise BoomError

    __str__ = __repr__


class HashRaises:
    """A key whose ``__hash__`` raises (only a custom mapping can hold it)."""

    def __hash__(self) -> int:
        raise BoomError


class KeyStrRaises(str):
    """A string key whose ``str()``, ``repr()`` and formatting raise."""

    def __str__(self) -> str:
        raise BoomError

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        raise BoomError


class HostileKeys(Mapping[Any, Any]):
    """A mapping that yields hostile keys."""

    def __init__(self, *keys: Any) -> None:
        self._keys = keys

    def __getitem__(self, key: Any) -> Any:
        return 1.0

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class PathRaises:
    """An ``os.PathLike`` whose ``__fspath__`` raises."""

    def __fspath__(self) -> str:
        raise BoomError


class UnprintableError(Exception):
    """An exception whose ``str()`` raises."""

    def __str__(self) -> str:
        raise BoomError


HOSTILE_MAPPINGS = [
    IterRaises(),
    LenRaises(),
    ItemsRaises(),
    HostileKeys(HashRaises()),
    HostileKeys(KeyStrRaises("loss")),
    {"loss": ItemRaises()},
    {"loss": FloatRaises()},
    {"loss": ReprRaises(1.0)},
    {KeyStrRaises("loss"): 1.0},
]
HOSTILE_SCALARS = [ItemRaises(), FloatRaises(), ReprRaises(3.0), KeyStrRaises("x"), object()]

Call = Callable[[Reporter], None]


def _mapping_calls(i: int, m: Any) -> list[tuple[str, Call]]:
    """Each call that takes a mapping, given the hostile mapping ``m``."""
    return [
        (f"train_step-metrics{i}", lambda r: r.report_train_step(step=1, metrics=m)),
        (f"validation-metrics{i}", lambda r: r.report_validation(step=1, metrics=m)),
        (f"metrics-metrics{i}", lambda r: r.report_metrics(step=1, metrics=m, phase="test")),
        (f"hyperparameters{i}", lambda r: r.report_hyperparameters(params=m)),
    ]


def _scalar_calls(i: int, v: Any) -> list[tuple[str, Call]]:
    """Each call that takes a scalar, given the hostile value ``v``."""
    return [
        (f"train_step-step{i}", lambda r: r.report_train_step(step=v, metrics={"x": 1.0})),
        (f"train_step-epoch{i}", lambda r: r.report_train_step(step=1, epoch=v)),
        (f"validation-step{i}", lambda r: r.report_validation(step=v, metrics={})),
        (f"validation-dataset{i}", lambda r: r.report_validation(step=1, dataset=v)),
        (f"metrics-phase{i}", lambda r: r.report_metrics(step=1, metrics={}, phase=v)),
        (f"training_start{i}", lambda r: r.report_training_start(max_steps=v, num_epochs=v)),
        (f"epoch_end{i}", lambda r: r.report_epoch_end(epoch=v)),
        (f"checkpoint{i}", lambda r: r.report_checkpoint_saved(path=v, step=v)),
        (f"cancelled{i}", lambda r: r.report_cancelled(reason=v)),
        (f"error{i}", lambda r: r.report_error(v)),
        (f"outcome{i}", lambda r: r.report_outcome(v)),
        (f"outcome-preempted{i}", lambda r: r.report_outcome(preempted=v)),
    ]


def _calls() -> list[tuple[str, Call]]:
    calls: list[tuple[str, Call]] = []
    for i, m in enumerate(HOSTILE_MAPPINGS):
        calls += _mapping_calls(i, m)
    for i, v in enumerate(HOSTILE_SCALARS):
        calls += _scalar_calls(i, v)
    calls += [
        ("checkpoint-fspath", lambda r: r.report_checkpoint_saved(path=PathRaises(), step=1)),
        ("error-unprintable", lambda r: r.report_error(UnprintableError())),
        ("outcome-unprintable", lambda r: r.report_outcome(UnprintableError())),
        ("outcome-exit-unprintable", lambda r: r.report_outcome(SystemExit(ReprRaises(1.0)))),
        ("completed", lambda r: r.report_completed()),
    ]
    return calls


CALLS = _calls()

#: Every report method, called with ordinary arguments.
EVERY_METHOD: list[tuple[str, Call]] = [
    ("report_train_step", lambda r: r.report_train_step(step=1, metrics={"loss": 1.0})),
    ("report_validation", lambda r: r.report_validation(step=1, metrics={"loss": 1.0})),
    ("report_metrics", lambda r: r.report_metrics(step=1, metrics={"acc": 1.0}, phase="test")),
    ("report_training_start", lambda r: r.report_training_start(max_steps=10, num_epochs=1)),
    ("report_hyperparameters", lambda r: r.report_hyperparameters(params={"lr": 0.1})),
    ("report_epoch_end", lambda r: r.report_epoch_end(epoch=1)),
    ("report_checkpoint_saved", lambda r: r.report_checkpoint_saved(path="ckpt", step=1)),
    ("report_completed", lambda r: r.report_completed()),
    ("report_cancelled", lambda r: r.report_cancelled(reason="preempted")),
    ("report_error", lambda r: r.report_error(RuntimeError("x"))),
    ("report_outcome", lambda r: r.report_outcome(RuntimeError("x"))),
]


def test_every_report_method_is_covered() -> None:
    """The list above names every public ``report_*`` method of Reporter."""
    methods = {name for name in dir(Reporter) if name.startswith("report_")}
    assert methods == {name for name, _ in EVERY_METHOD}


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
def test_a_hostile_input_never_raises_and_the_run_goes_on(
    name: str, call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No report call raises; the reporter thread survives; a later point is delivered."""
    died: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.0), rank=0)
    reporter.start()
    call(reporter)
    call(reporter)
    # A test metric is recorded in any status (a final evaluation after completion).
    reporter.report_metrics(step=5, metrics={"sentinel": 5.0}, phase="test")
    reporter.close(timeout=5)
    assert [] == died
    worker = reporter._worker
    assert worker is not None
    assert not worker.thread.is_alive()
    assert [(5, 5.0)] == [(p[0], p[2]) for p in curve(sink.task, "test_sentinel")]


class RaisingClock(FakeClock):
    """A user-injected clock that raises: the caller's side of every report method fails."""

    def __call__(self) -> float:
        raise BoomError


@pytest.mark.parametrize(("name", "call"), EVERY_METHOD, ids=[name for name, _ in EVERY_METHOD])
def test_every_report_method_survives_a_failure_on_the_callers_thread(
    name: str, call: Call
) -> None:
    """Whatever fails inside a report method, it is counted, never raised into training."""
    reporter = Reporter(MemorySink(), ReportingConfig(), clock=RaisingClock(), rank=0)
    call(reporter)
    call(reporter)
    assert 2 == reporter.stats().drops["report_failed"]
    assert 2 == reporter.stats().report_calls


# ------------------------------------- hostile objects on the reporter thread


class RaisesItselfError(Exception):
    """An exception whose own ``str()`` raises (so does formatting it in an f-string)."""

    def __str__(self) -> str:
        raise RaisesItselfError


class _KeyWithBadRepr:
    """A metrics key whose ``repr()`` raises an exception that cannot be printed."""

    def __repr__(self) -> str:
        raise RaisesItselfError


class _KeyWithFailingRepr:
    """A metrics key whose ``repr()`` raises an ordinary exception."""

    def __repr__(self) -> str:
        raise ValueError("no repr")


class _Unstringable:
    """An argument whose ``str()`` raises."""

    def __str__(self) -> str:
        raise ValueError("no str")


def task_of(sink: MemorySink) -> dict[str, Any]:
    """The task the sink holds (there is one)."""
    task = sink.task
    assert task is not None
    return task


def make_reporter() -> tuple[Reporter, MemorySink]:
    sink = MemorySink()
    config = ReportingConfig(min_report_interval_seconds=0.0)
    """A reporter sending at once to a memory sink, on a fake clock."""
    return Reporter(sink, config, clock=FakeClock(), rank=0), sink


def test_a_key_whose_repr_raises_an_unprintable_error_does_not_kill_the_reporter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a hostile metrics key, the thread is alive and later reports are delivered."""
    died: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    reporter, sink = make_reporter()
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
    reporter, sink = make_reporter()
    reporter.start()
    bad_key: Any = _KeyWithFailingRepr()
    reporter.report_train_step(step=1, metrics={bad_key: 1.0, "loss": 1.0})
    assert reporter.close(timeout=5)
    stored = task_of(sink)["status_details"].get("metrics", {})
    assert [{"step": 1, "epoch": 1, "value": 1.0}] == stored.get("train_loss")
    assert 1 == reporter.stats().points_recorded


def test_an_unprintable_cancel_reason_still_cancels_the_task() -> None:
    """A reason whose ``str()`` raises keeps the status change (as report_error does)."""
    reporter, sink = make_reporter()
    reporter.start()
    reporter.report_cancelled(reason=_Unstringable())  # type: ignore[arg-type]
    assert reporter.close(timeout=5)
    assert "cancelled" == task_of(sink)["status"]


def test_an_unprintable_checkpoint_path_still_records_the_checkpoint() -> None:
    """A path whose ``str()`` raises still records ``checkpoint_step``."""
    reporter, sink = make_reporter()
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
    reporter, _ = make_reporter()
    reporter.report_train_step(step=1, metrics=_MappingThatCannotBeRead(loss=1.0))
    assert 1 == sum(reporter.stats().drops.values())


def test_report_after_close_is_dropped_with_one_log_event() -> None:
    """Reports after close are counted and logged once, never raised."""
    reporter, _ = make_reporter()
    reporter.start()
    reporter.close(timeout=5)
    with capture_events() as events:
        for step in range(3):
            reporter.report_train_step(step=step, metrics={"loss": 1.0})
    assert 3 == reporter.stats().drops["after_close"]
    assert 1 == len([e for e in events if e["event"] == "trainreport.report_after_close"])


# -------------------------------------------------------------- device values


@pytest.mark.parametrize("failing", ["stack", "to", "copy_", "query"])
def test_a_device_error_is_a_counted_drop_never_an_exception(
    torch: fake_cuda.FakeTorch, failing: str
) -> None:
    """torch raising in the gather, copy or event: the device values are dropped and counted.

    The plain values of the same report are kept; one log event says what
    happened and what to do; the training thread sees nothing.
    """
    sink = MemorySink()
    config = ReportingConfig(min_report_interval_seconds=10.0, backoff_jitter=0.0)
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0)
    drive(reporter)
    torch.fail_on = failing
    with capture_events() as events:
        for step in (1, 2):
            reporter.report_train_step(step=step, metrics={"loss": torch.tensor(1.0), "lr": 0.5})
        torch.complete()
        assert reporter.close(timeout=5)
    assert 2 == reporter.stats().drops["device_values"]
    assert [0.5, 0.5] == [p[2] for p in curve(sink.task, "train_lr")]
    assert "train_loss" not in held(sink)["status_details"].get("metrics", {})
    dropped = [e for e in events if e["event"] == "trainreport.device_values_dropped"]
    assert 1 == len(dropped)
    assert "CUDA error" in dropped[0]["reason"]
    assert "hint" in dropped[0]


# --------------------------------------------- the value rules, for any input


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(hostile_values.ItemRaises(), id="item-raises"),
        pytest.param(hostile_values.GetattrRaises(), id="getattr-raises"),
        pytest.param(hostile_values.GetattributeRaises(), id="getattribute-raises"),
        pytest.param(hostile_values.ClassPropertyRaises(), id="class-property-raises"),
        pytest.param(np.ones(3), id="multi-element-array"),
    ],
)
def test_caller_value_failed_conversion_gives_the_sentinel(value: object) -> None:
    """.item() raising, or attribute access raising, gives UNCONVERTIBLE instead of raising."""
    assert UNCONVERTIBLE is caller_value(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(hostile_values.GetattrRaises(), id="getattr-raises"),
        pytest.param(hostile_values.GetattributeRaises(), id="getattribute-raises"),
        pytest.param(hostile_values.ClassPropertyRaises(), id="class-property-raises"),
        pytest.param(hostile_values.BadReal(), id="float-raises"),
        pytest.param(hostile_values.ReprRaises(), id="repr-raises"),
    ],
)
def test_to_chartable_refuses_hostile_objects_without_raising(value: object) -> None:
    """Objects whose attribute access or float() raises are refused, not raised."""
    assert isinstance(to_chartable(value), NotChartable)


def hostile(index: int) -> object:
    """The hostile object at ``index`` (a named function, so Hypothesis can describe it)."""
    return HOSTILE[index]


numpy_values = st.one_of(
    st.floats(width=32).map(np.float32),
    st.floats().map(np.float64),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.integers(0, 255).map(np.uint8),
    st.booleans().map(np.bool_),
    st.floats().map(np.array),
    st.lists(st.floats(), max_size=3).map(np.array),
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.complex_numbers(),
    st.fractions(),
    st.decimals(),
    st.text(),
    st.binary(),
    numpy_values,
    # Indices, not the objects: Hypothesis describes sampled elements, which hostile ones resist.
    st.integers(min_value=0, max_value=len(HOSTILE) - 1).map(hostile),
)

arbitrary = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=5), children, max_size=4),
        st.tuples(children, children),
        children.map(FakeTensor),
    ),
    max_leaves=10,
)


@given(arbitrary)
def test_caller_value_and_to_chartable_never_raise(value: object) -> None:
    """Whatever a caller reports, conversion yields a float or a NotChartable, never an error."""
    for candidate in (value, caller_value(value)):
        assert isinstance(to_chartable(candidate), (float, NotChartable))


@given(arbitrary)
def test_to_step_never_raises(value: object) -> None:
    """to_step yields an int in [0, 2**53] or a NotChartable for anything."""
    for candidate in (value, caller_value(value)):
        result = to_step(candidate)
        assert isinstance(result, NotChartable) or (type(result) is int and 0 <= result <= 2**53)


@given(
    arbitrary,
    st.integers(min_value=0, max_value=10**6),
    st.one_of(st.none(), st.integers(min_value=-5, max_value=100)),
    st.sampled_from([None, True, False]),
)
def test_epoch_rule_never_raises(
    value: object, step: int, num_epochs: int | None, zero_based: bool | None
) -> None:
    """resolve yields None, an int >= 1 (capped when num_epochs >= 1) or a NotChartable."""
    rule = EpochRule(zero_based=zero_based)
    for candidate in (value, caller_value(value)):
        result = rule.resolve(candidate, step=step, num_epochs=num_epochs)
        if result is None or isinstance(result, NotChartable):
            continue
        assert type(result) is int
        assert result >= 1
        if num_epochs is not None and num_epochs >= 1:
            assert result <= num_epochs


@given(arbitrary)
def test_check_name_and_flatten_params_never_raise(value: object) -> None:
    """Name checks and hyperparameter flattening accept anything without raising."""
    assert check_name(value) is None or isinstance(check_name(value), str)
    flat = flatten_params({"p": value, "q": {"r": value}})
    assert {"p", "q/r"} <= set(flat) or isinstance(value, dict)
