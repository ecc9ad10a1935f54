"""Metric values, steps and epochs: what the store keeps, or why not.

The rules are docs/design.md#metrics. :func:`caller_value` runs on the training
thread for every metric value and is kept as cheap as possible (tensor-like
values become plain numbers there, so no tensor is ever queued); the rest runs
on the reporter thread: :func:`to_chartable`, :func:`to_step` and
:class:`EpochRule` (stateful, not thread-safe) turn values, steps and epochs
into what the store keeps, or say why not (:class:`NotChartable`).
"""

from __future__ import annotations

import decimal
import enum
import math
import numbers
from collections.abc import Collection, Mapping
from typing import Any, Final, Protocol, TypeAlias

import attrs

from trainreport._logging import get_logger

__all__ = [
    "MAX_STEP",
    "UNCONVERTIBLE",
    "EpochRule",
    "MetricValue",
    "NotChartable",
    "SupportsItem",
    "caller_value",
    "is_bool",
    "to_chartable",
    "to_step",
]


class _Sentinel(enum.Enum):
    # An enum member keeps its identity through pickle and copy (an unstarted
    # Reporter, queued reports included, may be pickled).
    UNCONVERTIBLE = "UNCONVERTIBLE"

    def __repr__(self) -> str:
        return "<UNCONVERTIBLE>"

    __str__ = __repr__


UNCONVERTIBLE: Final[object] = _Sentinel.UNCONVERTIBLE
"""Returned by :func:`caller_value` when a value's ``.item()`` (or attribute lookup) raised."""


class SupportsItem(Protocol):
    """A value with an ``.item()`` (a 0-d torch tensor, a numpy scalar or 0-d array)."""

    def item(self) -> Any:
        """The plain Python number this value holds."""


#: What a report call's ``metrics`` mapping holds, as typed for callers: real numbers
#: and tensor-like scalars. Anything else is accepted at run time too, and dropped
#: with one log event per name (report calls never raise).
MetricValue: TypeAlias = "float | SupportsItem"


def caller_value(value: object) -> object:
    """Copy one metric value on the training thread (docs/design.md#shape, #metrics).

    ``int`` and ``float`` (and their subclasses) are returned as they are, at the
    cost of one type check. Any other object with a callable ``item`` attribute
    (0-d torch tensors, numpy scalars and 0-d arrays) is converted with
    ``.item()``, so no tensor is ever queued; for a CUDA tensor this waits for
    the device, as any ``.item()`` does. Everything else is returned unchanged
    and judged later, on the reporter thread, by :func:`to_chartable`.

    Args:
        value: a metric value as the caller passed it.

    Returns:
        The value, its ``.item()``, or :data:`UNCONVERTIBLE` when ``.item()`` or
        looking up an attribute raised. Never raises an ``Exception`` (an
        interrupt raised inside a user's ``.item()`` is left to propagate).
    """
    cls = type(value)
    if cls is float or cls is int:
        return value
    try:
        if isinstance(value, (int, float)):
            return value
        item = getattr(value, "item", None)
        if callable(item):
            return item()
    except Exception:  # whatever a foreign object does is its own problem
        return UNCONVERTIBLE
    return value


@attrs.frozen
class NotChartable:
    """Why a value is not a chartable number (or a step, or an epoch).

    Attributes:
        reason: a short label for log events, such as ``"bool"``, ``"string"``,
            ``"None"``, ``"container"``, ``"object"``, ``"too large for a float"``
            or ``"item() failed"``.
    """

    reason: str


_ITEM_FAILED: Final = NotChartable("item() failed")
_BOOL: Final = NotChartable("bool")
_TOO_LARGE_FOR_FLOAT: Final = NotChartable("too large for a float")
_NEGATIVE: Final = NotChartable("negative")
_NON_FINITE: Final = NotChartable("non-finite")
_OBJECT: Final = NotChartable("object")

MAX_STEP: Final[int] = 2**53
"""Largest accepted step (the largest integer every JSON reader holds exactly)."""
#: Float epochs at or past this are left to :meth:`EpochRule.resolve` (the batch
#: path takes only epochs whose ``ceil`` is exact and small).
_FLOAT_EPOCH_LIMIT: Final = 2.0**31


def is_bool(value: object) -> bool:
    if isinstance(value, bool):
        return True
    cls = type(value)
    # numpy.bool_ (numpy 1) / numpy.bool (numpy 2), without importing numpy.
    return cls.__module__ == "numpy" and cls.__name__ in ("bool_", "bool")


def _not_a_number(value: object) -> NotChartable:
    """Describe a value that is not a real number (bools are handled by the caller)."""
    if value is UNCONVERTIBLE:
        return _ITEM_FAILED
    if value is None:
        return NotChartable("None")
    if isinstance(value, (str, bytes, bytearray)):
        return NotChartable("string")
    if isinstance(value, numbers.Complex):
        return NotChartable("complex")
    if isinstance(value, (Mapping, Collection)):
        return NotChartable("container")
    return _OBJECT


def to_chartable(value: object) -> float | NotChartable:
    """Turn a metric value into the float the store keeps (docs/design.md#metrics).

    Real numbers are chartable: ``int``, ``float``, numpy scalars and any other
    :class:`numbers.Real`, and :class:`decimal.Decimal`. ``bool`` and
    ``numpy.bool_`` are not. NaN and ±Inf are returned as floats (kept as points;
    encoded as JSON ``null`` by the payload builder).

    Args:
        value: a value as returned by :func:`caller_value`.

    Returns:
        The value as a ``float``, or :class:`NotChartable` with the reason
        (``"bool"``, ``"string"``, ``"None"``, ``"container"``, ``"complex"``,
        ``"object"``, ``"too large for a float"``, ``"item() failed"``,
        ``"float() failed"``). Never raises an ``Exception``.
    """
    if type(value) is float:
        return value
    try:
        if type(value) is int:
            return float(value)
        if is_bool(value):
            return _BOOL
        if isinstance(value, (numbers.Real, decimal.Decimal)):
            return float(value)
        return _not_a_number(value)
    except OverflowError:
        return _TOO_LARGE_FOR_FLOAT
    except Exception:
        return NotChartable("float() failed")


def to_step(value: object) -> int | NotChartable:
    """Turn a reported step into the ``int`` the store keeps (docs/design.md#metrics).

    A step is an integer (``int``, numpy integers, any :class:`numbers.Integral`)
    or an integral real number (``50.0`` -> ``50``), from 0 to :data:`MAX_STEP`
    (2**53) inclusive. Steps are what the caller says they are; no offset is applied.

    Args:
        value: a step as returned by :func:`caller_value`.

    Returns:
        The step, or :class:`NotChartable` with the reason (``"bool"``,
        ``"string"`` (``"50"`` is not a step), ``"None"``, ``"negative"``,
        ``"too large"``, ``"not an integer"``, ``"non-finite"``, ``"container"``,
        ``"object"``, ``"item() failed"``). Never raises an ``Exception``.
    """
    try:
        if type(value) is int:
            step: int = value
        elif is_bool(value):
            return _BOOL
        elif isinstance(value, numbers.Integral):
            step = int(value)
        elif isinstance(value, (numbers.Real, decimal.Decimal)):
            real = float(value)
            if not math.isfinite(real):
                return _NON_FINITE
            if not real.is_integer():
                return NotChartable("not an integer")
            step = int(real)
        else:
            return _not_a_number(value)
    except OverflowError:
        return NotChartable("too large")
    except Exception:
        return _OBJECT
    if step < 0:
        return _NEGATIVE
    if step > MAX_STEP:
        return NotChartable("too large")
    return step


class EpochRule:
    """The epoch rule of docs/design.md#metrics: which 1-based epoch a reported epoch value means.

    - A float epoch ``e`` (``float``, numpy floats, any non-integral
      :class:`numbers.Real`) counts epochs completed so far, as Hugging Face
      reports it, and becomes ``max(1, ceil(e))``: 0.0 -> 1, 1.5 -> 2, 3.0 -> 3.
    - An int epoch (``int``, numpy integers) is an index: 0-based if the first
      int epoch the run reports is 0 (a plain ``for epoch in range(n)``), 1-based
      otherwise. The choice is made once, at the first int epoch, and logged once
      as the INFO event ``trainreport.epoch_rule`` with ``zero_based=...`` and
      ``first_epoch=...``.
    - Either way the result is at least 1, capped at ``num_epochs`` when known,
      and a report at step 0 belongs to epoch 1.

    Args:
        zero_based: the int-epoch choice when already known (otherwise decided
            at the first int epoch).

    Not thread-safe (reporter thread only).
    """

    def __init__(self, zero_based: bool | None = None) -> None:
        self._zero_based = zero_based

    @property
    def zero_based(self) -> bool | None:
        """Whether int epochs are 0-based; ``None`` until the first int epoch arrives."""
        return self._zero_based

    def resolve(
        self, epoch: object, *, step: int, num_epochs: int | None
    ) -> int | NotChartable | None:
        """Return the 1-based epoch that ``step`` falls in.

        Args:
            epoch: the reported epoch, as returned by :func:`caller_value`.
            step: the (already validated) step of the report.
            num_epochs: the run's number of epochs, if known; values below 1 are ignored.

        Returns:
            ``None`` when ``epoch`` is ``None`` (the caller keeps its last epoch);
            an ``int >= 1``; or :class:`NotChartable` for bool, strings,
            non-finite or negative values and other objects. Never raises an
            ``Exception``.
        """
        if epoch is None:
            return None
        try:
            resolved = self._resolve(epoch)
            if isinstance(resolved, NotChartable):
                return resolved
            if step == 0:
                return 1
            if type(num_epochs) is int and num_epochs >= 1:
                resolved = min(resolved, num_epochs)
        except OverflowError:  # e.g. a huge Fraction
            return NotChartable("too large")
        except Exception:
            return _OBJECT
        return resolved

    def settled(self, epoch: object, num_epochs: int | None) -> int | None:
        """What :meth:`resolve` returns for ``epoch`` at a step above 0, when that is quiet.

        For a plain ``int`` index (once the base is decided) or a finite,
        non-negative plain ``float``: the epoch, with nothing logged or decided.
        None for anything else (:meth:`resolve` then decides and logs).
        Changes nothing; never raises.
        """
        if type(epoch) is int:
            if epoch < 0 or self._zero_based is None:
                return None
            resolved = max(1, epoch + 1 if self._zero_based else epoch)
        elif type(epoch) is float:
            if not 0.0 <= epoch < _FLOAT_EPOCH_LIMIT:  # NaN, negative, inf, huge
                return None
            resolved = max(1, math.ceil(epoch))
        else:
            return None
        if type(num_epochs) is int and num_epochs >= 1:
            resolved = min(resolved, num_epochs)
        return resolved

    def _resolve(self, epoch: object) -> int | NotChartable:
        if is_bool(epoch):
            return _BOOL
        if isinstance(epoch, numbers.Integral):
            index = int(epoch)
            if index < 0:
                return _NEGATIVE
            if self._zero_based is None:
                self._zero_based = index == 0
                get_logger().info(
                    "trainreport.epoch_rule", zero_based=self._zero_based, first_epoch=index
                )
            return max(1, index + 1 if self._zero_based else index)
        if isinstance(epoch, (numbers.Real, decimal.Decimal)):
            completed = float(epoch)
            if not math.isfinite(completed):
                return _NON_FINITE
            if completed < 0:
                return _NEGATIVE
            return max(1, math.ceil(completed))
        return _not_a_number(epoch)
