"""Every ``report_*`` method: no hostile input raises into training, and the run goes on.

"A report call never raises" is pinned here for each of the ten report methods,
not only ``report_train_step``: mappings whose iteration, ``len`` or ``items()``
raise; values whose ``.item()``, ``__float__`` or ``__repr__`` raise; keys whose
``__hash__`` or ``__str__`` raise; and a user-injected clock that raises (which
makes the caller's side of every method fail, so removing any method's guard
fails a test). After the hostile calls, an ordinary report still reaches the
destination and the reporter thread is alive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from helpers import curve
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport.testing import FakeClock

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
