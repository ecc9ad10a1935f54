"""The report protocol: what a report call hands the reporter thread, declared once.

A report crosses from the training thread to the reporter thread as a plain
tuple ``(kind, t, *fields)``: ``kind`` is a :class:`Kind`, ``t`` the caller's
monotonic clock reading in seconds. A tuple, not a NamedTuple or an attrs
value: building one costs about 30 ns where a NamedTuple costs about 300 ns,
and the hot path (``report_train_step``) is measured in single microseconds
(``docs/performance.md``).

This module holds the three things both threads must agree on:

* the builders, one per kind, called on the caller's thread (they copy the
  caller's arguments and turn tensor-like values into plain numbers);
* :func:`dispatch`, which unpacks a report on the reporter thread with one
  ``match`` on its kind and calls the matching :class:`ReportHandler` method;
* the memory guard's estimate of a queued report (:func:`queued_bytes`) and the
  number of metric values it carries (:func:`queued_points`).

Field shapes, by kind:

=================  ======================================================
kind               fields after ``(kind, t)``
=================  ======================================================
TRAIN              step, epoch, metrics
VALIDATION         step, epoch, metrics, dataset
METRICS            step, metrics, phase
TRAINING_START     max_steps, num_epochs
HYPERPARAMETERS    flat params (dict), keys left out (int)
EPOCH_END          epoch
CHECKPOINT         path (str or None), step
COMPLETED          (none)
CANCELLED          reason (str)
FAILED             error type name (str), message (str)
=================  ======================================================

``metrics`` is a ``dict`` copy (values plain numbers, or whatever the caller
gave that is not tensor-like, judged on the reporter thread), ``None``, or a
:class:`NotAMapping` marker. Nothing here validates: names, values, steps and
epochs are judged on the reporter thread.

The training step's short form. ``report_train_step`` (the hot path) hands
over a dict instead of a tuple: the copy of the caller's metrics itself, with
the clock reading, the step and the epoch under three header keys
(:data:`TRAIN_TIME`, :data:`TRAIN_STEP`, :data:`TRAIN_EPOCH`) that no metric
name can take (a control character is never valid in a name). It takes this
form when ``metrics`` is a ``dict``, the step an ``int`` or ``None`` (omitted:
resolved on the reporter thread, ``RunRecord.next_train_step``) and the epoch
an ``int``, a ``float`` or ``None`` (every training loop's case); any other call
makes the ``TRAIN`` tuple above. ``Reporter.report_train_step`` builds it
inline, the one place it is built: a call to a builder here cost 9-18 % of
the call's CPU when measured; the byte estimate it adds is
:func:`queued_bytes`' (a test in ``tests/record/test_reports.py`` pins that they
agree). Why the short form: a copy of plain numbers is a container the
garbage collector does not track, so a report queued in this form costs
the training thread's collections nothing however long the queue grows (a
hanging or unreachable destination keeps every report queued until the stored
task is read), and the copy is the call's only allocation. :func:`dispatch`
takes the header keys back out, so the handler sees the same arguments for
both forms (a Hypothesis property in ``tests/record/test_reports.py`` pins it).

The rule for values (both forms): an ``int`` or ``float`` is queued as it
is; a one-element CUDA tensor is copied off the device without a sync
(``_record/_device.py``: the report is queued wrapped in a
:class:`~trainreport._record._device.DeviceReport`, its values filled in on the
reporter thread once the copy has completed, docs/design.md#device-values);
anything else is converted on the caller's thread, at call time, with
``.item()`` (a tensor's value is taken when it is reported, never later: it
may be changed in place); what cannot be converted is queued as it is and
judged on the reporter thread.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import attrs

from trainreport._record._device import (
    DeviceReport,
    PendingValues,
    gather_to_host,
    is_device_scalar,
)
from trainreport._record._values import caller_value

__all__ = [
    "EVENT_KINDS",
    "HEADER_KEYS",
    "REPORT_BYTES",
    "Report",
    "TERMINAL_KINDS",
    "TRAIN_EPOCH",
    "TRAIN_STEP",
    "TRAIN_TIME",
    "VALUE_BYTES",
    "Kind",
    "NotAMapping",
    "ReportHandler",
    "cancelled",
    "checkpoint",
    "completed",
    "copy_metrics",
    "copy_scalar",
    "deferred",
    "dispatch",
    "epoch_end",
    "event_queued",
    "failed",
    "hyperparameters",
    "kind_of",
    "metrics_report",
    "queued_bytes",
    "queued_at",
    "queued_points",
    "to_numbers",
    "train",
    "training_start",
    "validation",
]


class Kind(enum.IntEnum):
    """The kind of a queued report (its tuple's first item)."""

    TRAIN = 0
    VALIDATION = 1
    METRICS = 2
    TRAINING_START = 3
    HYPERPARAMETERS = 4
    EPOCH_END = 5
    CHECKPOINT = 6
    COMPLETED = 7
    CANCELLED = 8
    FAILED = 9


#: A queued report: a tuple ``(kind, t, *fields)``, a training step's short form, or
#: either wrapped while its device values are copied (``DeviceReport``).
Report: TypeAlias = "tuple[Any, ...] | dict[str, Any] | DeviceReport"

#: The report method behind each kind, for log events about a dropped report.
REPORT_NAME = {
    Kind.TRAIN: "report_train_step",
    Kind.VALIDATION: "report_validation",
    Kind.METRICS: "report_metrics",
    Kind.TRAINING_START: "report_training_start",
    Kind.HYPERPARAMETERS: "report_hyperparameters",
    Kind.EPOCH_END: "report_epoch_end",
    Kind.CHECKPOINT: "report_checkpoint_saved",
    Kind.COMPLETED: "report_completed",
    Kind.CANCELLED: "report_cancelled",
    Kind.FAILED: "report_error",
}
#: Kinds that end the run (the first one applied wins).
TERMINAL_KINDS = frozenset({Kind.COMPLETED, Kind.CANCELLED, Kind.FAILED})
#: The event reports: their call wakes the reporter thread, and once applied they are
#: sent at once (``EventIngest``).
EVENT_KINDS = frozenset({Kind.TRAINING_START, Kind.EPOCH_END, Kind.CHECKPOINT}) | TERMINAL_KINDS

# Module constants: a global lookup is cheaper than an enum attribute on the hot path.
_TRAIN = Kind.TRAIN
_VALIDATION = Kind.VALIDATION
_METRICS = Kind.METRICS
_HYPERPARAMETERS = Kind.HYPERPARAMETERS
_STEP_TYPES = frozenset({int, float, type(None)})
_KINDS = frozenset(Kind)

#: The header keys of a training step's short form (a ``dict``): the caller's clock
#: reading, the step and the epoch. A control character is never valid in a metric name.
TRAIN_TIME = "\x00t"
TRAIN_STEP = "\x00step"
TRAIN_EPOCH = "\x00epoch"
#: How many header keys a short-form report carries.
HEADER_KEYS = 3

#: The queue's memory guard estimates a queued report at this many bytes (the
#: tuple, the copied dict's table and header, the numbers) ...
REPORT_BYTES = 256
#: ... plus this many per metric value it carries (measured: 912 B for 14 metrics).
VALUE_BYTES = 48


@attrs.frozen
class NotAMapping:
    """Stands in for a ``metrics`` argument that is not a mapping (logged on the reporter thread).

    Args:
        type_name: the type the caller passed.
    """

    type_name: str


# --- building (the caller's thread) ------------------------------------------------------


def copy_metrics(metrics: object) -> tuple[object, PendingValues | None]:
    """Copy a metrics mapping on the caller's thread; tensors become numbers.

    The mapping is copied once. Fast path: when every value is an ``int`` or
    ``float``, their sum (one C loop) is a ``float``; a tensor, numpy value or
    anything else makes it something else (or raises), and only then is each
    value of the copy converted in place (:func:`to_numbers`). The one other
    place this is written is the short form, inlined in
    ``Reporter.report_train_step`` (the module's docstring says why).

    Returns:
        (a ``dict``, ``None`` for ``None``, or a :class:`NotAMapping`; the
        device values on their way to it, or ``None``).

    Raises:
        Exception: whatever a mapping that cannot be read raises (the report
            call catches it and counts the report as dropped).
    """
    if type(metrics) is dict:
        copied: dict[Any, Any] = metrics.copy()
    elif isinstance(metrics, Mapping):
        copied = dict(metrics)  # may raise: the report call counts it (report_failed)
    else:
        return (None if metrics is None else NotAMapping(type(metrics).__name__)), None
    try:
        if type(sum(copied.values(), 0.0)) is float:
            return copied, None
    except Exception:  # noqa: S110 - a str or an object without __add__: converted below
        pass
    return copied, to_numbers(copied)


def to_numbers(copied: dict[Any, Any]) -> PendingValues | None:
    """Turn each value of a copied metrics dict into a plain number, in place.

    One-element CUDA tensors are copied off the device without a sync
    (:func:`~trainreport._record._device.gather_to_host`; their values become
    placeholders); every other value goes through
    :func:`~trainreport._record._values.caller_value` (``.item()``).

    Returns:
        The device values on their way, or ``None`` when there were none.
        Never raises an ``Exception``.
    """
    on_device: list[Any] | None = None
    for key, value in copied.items():  # same keys: assigning while iterating is safe
        cls = type(value)
        if cls is float or cls is int:
            continue
        if is_device_scalar(value):
            if on_device is None:
                on_device = []
            on_device.append(key)
        else:
            copied[key] = caller_value(value)
    return None if on_device is None else gather_to_host(copied, on_device)


def deferred(report: Report, pending: PendingValues | None) -> Report:
    """``report`` as queued: itself, or wrapped while its device values are copied."""
    return report if pending is None else DeviceReport(pending, report)


def copy_scalar(value: object) -> object:
    """A step, epoch or count as the reporter thread takes it (tensors become numbers)."""
    return value if type(value) in _STEP_TYPES else caller_value(value)


def train(t: float, step: object, epoch: object, metrics: object) -> Report:
    """``report_train_step``'s report as a ``TRAIN`` tuple (the general form).

    ``report_train_step`` makes the short form itself (see the module's
    docstring) and this for every other call.
    """
    copied, pending = copy_metrics(metrics)
    report = (
        _TRAIN,
        t,
        step if type(step) is int else caller_value(step),
        epoch if epoch is None or type(epoch) is int else copy_scalar(epoch),
        copied,
    )
    return report if pending is None else DeviceReport(pending, report)


def validation(t: float, step: object, epoch: object, metrics: object, dataset: object) -> Report:
    """``report_validation``'s report."""
    copied, pending = copy_metrics(metrics)
    report = (_VALIDATION, t, copy_scalar(step), copy_scalar(epoch), copied, dataset)
    return report if pending is None else DeviceReport(pending, report)


def metrics_report(t: float, step: object, metrics: object, phase: object) -> Report:
    """``report_metrics``'s report."""
    copied, pending = copy_metrics(metrics)
    report = (_METRICS, t, copy_scalar(step), copied, phase)
    return report if pending is None else DeviceReport(pending, report)


def training_start(t: float, max_steps: object, num_epochs: object) -> tuple[Any, ...]:
    """``report_training_start``'s report."""
    return (Kind.TRAINING_START, t, copy_scalar(max_steps), copy_scalar(num_epochs))


def hyperparameters(t: float, flat: dict[str, Any], left_out: int) -> tuple[Any, ...]:
    """``report_hyperparameters``'s report: the flattened params and how many keys were left out."""
    return (_HYPERPARAMETERS, t, flat, left_out)


def epoch_end(t: float, epoch: object) -> tuple[Any, ...]:
    """``report_epoch_end``'s report."""
    return (Kind.EPOCH_END, t, copy_scalar(epoch))


def checkpoint(t: float, path: str | None, step: object) -> tuple[Any, ...]:
    """``report_checkpoint_saved``'s report (``path`` already text, or ``None``)."""
    return (Kind.CHECKPOINT, t, path, copy_scalar(step))


def completed(t: float) -> tuple[Any, ...]:
    """``report_completed``'s report."""
    return (Kind.COMPLETED, t)


def cancelled(t: float, reason: str) -> tuple[Any, ...]:
    """``report_cancelled``'s report."""
    return (Kind.CANCELLED, t, reason)


def failed(t: float, error_type: str, message: str) -> tuple[Any, ...]:
    """``report_error``'s report (never the exception itself: it holds frames and tensors)."""
    return (Kind.FAILED, t, error_type, message)


# --- sizing (either thread) --------------------------------------------------------------


def kind_of(item: object) -> Kind | None:
    """The kind of a queued report (either form), or None for what no builder here makes."""
    if type(item) is DeviceReport:
        item = item.report
    if type(item) is dict:
        return Kind.TRAIN
    if type(item) is tuple and item and item[0] in _KINDS:
        return Kind(item[0])
    return None


def queued_at(item: object) -> float:
    """When a queued report (either form, or a device report) was made (the reporter's clock).

    ``-inf`` for what no builder here makes. Never raises.
    """
    if type(item) is DeviceReport:
        item = item.report
    if type(item) is dict:
        t = item.get(TRAIN_TIME)
    elif type(item) is tuple and len(item) > 1:
        t = item[1]
    else:
        return -math.inf
    return t if type(t) is float else -math.inf


def event_queued(queue: Sequence[object]) -> bool:
    """Whether an event report (:data:`EVENT_KINDS`) is in ``queue``. Never raises.

    Reads a copy (``list`` of a deque is one C call: the training thread may
    append meanwhile); the reporter thread asks only while the queue's head
    waits for device values (docs/design.md#device-values).
    """
    return any(kind_of(item) in EVENT_KINDS for item in list(queue))


def _values_in(item: object) -> int | None:
    """How many metric values (or params) a report carries, or None when it carries no dict.

    A short form counts without its header keys, whether or not
    :func:`dispatch` has taken them out yet. A :class:`DeviceReport` counts
    as the report it wraps (its device values are in the dict, as placeholders).
    """
    if type(item) is DeviceReport:
        item = item.report
    if type(item) is dict:
        return len(item) - HEADER_KEYS if TRAIN_TIME in item else len(item)
    values = _carried(item)
    return len(values) if type(values) is dict else None


def _carried(item: object) -> object:
    """The dict of values a report tuple carries (metrics, or the flat params), or None."""
    match item:
        case (Kind.TRAIN, _, _, _, values) | (Kind.VALIDATION, _, _, _, values, _):
            return values
        case (Kind.METRICS, _, _, values, _) | (Kind.HYPERPARAMETERS, _, values, _):
            return values
    return None


def queued_bytes(item: object) -> int:
    """The memory guard's estimate of one queued report (either form), in bytes. Never raises.

    ``Reporter.report_train_step`` adds the same sum for its report; the
    reporter thread subtracts this for every report it drains (before or after
    applying it), so the two agree.
    """
    n = _values_in(item)
    return REPORT_BYTES if n is None else REPORT_BYTES + VALUE_BYTES * n


def queued_points(item: object) -> int:
    """Metric values a queued report carries (each may become a point). Never raises."""
    if type(item) is DeviceReport:
        item = item.report
    if type(item) is tuple and item and item[0] == _HYPERPARAMETERS:
        return 0
    return _values_in(item) or 0


# --- unpacking (the reporter thread) -----------------------------------------------------


class ReportHandler(Protocol):
    """What :func:`dispatch` calls, one method per kind (the recorder implements it)."""

    def train_step(self, t: float, step: object, epoch: object, metrics: object) -> None: ...

    def validation(
        self, t: float, step: object, epoch: object, metrics: object, dataset: object
    ) -> None: ...

    def other_metrics(self, t: float, step: object, metrics: object, phase: object) -> None: ...

    def hyperparameters(self, flat: dict[str, Any], left_out: int) -> None: ...

    def training_start(self, max_steps: object, num_epochs: object) -> bool: ...

    def epoch_end(self, epoch: object) -> bool: ...

    def checkpoint(self, path: object, step: object) -> bool: ...

    def terminal(self, kind: Kind, reason: object, message: object) -> bool: ...


def dispatch(item: Report, handler: ReportHandler) -> bool:
    """Apply one queued report (either form) to ``handler``.

    A training step's short form loses its header keys here (the dict is the
    metrics the handler receives).

    Returns:
        True for an event report (it bypasses the debounce), False otherwise.

    Raises:
        ValueError: for a tuple no builder here makes (a bug); KeyError for a
            dict without the header keys (a bug); whatever the handler raises
            propagates (the recorder catches it).
    """
    if type(item) is dict:
        pop = item.pop
        handler.train_step(pop(TRAIN_TIME), pop(TRAIN_STEP), pop(TRAIN_EPOCH), item)
        return False
    match item:
        case (Kind.TRAIN, t, step, epoch, metrics):
            handler.train_step(t, step, epoch, metrics)
            return False
        case (Kind.VALIDATION, t, step, epoch, metrics, dataset):
            handler.validation(t, step, epoch, metrics, dataset)
            return False
        case (Kind.METRICS, t, step, metrics, phase):
            handler.other_metrics(t, step, metrics, phase)
            return False
        case (Kind.HYPERPARAMETERS, _, flat, left_out):
            handler.hyperparameters(flat, left_out)
            return False
        case (Kind.TRAINING_START, _, max_steps, num_epochs):
            return handler.training_start(max_steps, num_epochs)
        case (Kind.EPOCH_END, _, epoch):
            return handler.epoch_end(epoch)
        case (Kind.CHECKPOINT, _, path, step):
            return handler.checkpoint(path, step)
        case (Kind.COMPLETED, _):
            return handler.terminal(Kind.COMPLETED, None, None)
        case (Kind.CANCELLED, _, reason):
            return handler.terminal(Kind.CANCELLED, reason, None)
        case (Kind.FAILED, _, error_type, message):
            return handler.terminal(Kind.FAILED, error_type, message)
    raise ValueError(f"not a report: {item!r:.100}")
