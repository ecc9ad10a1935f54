"""Hyperparameters: nested mappings flattened with ``/``, bounded on the caller's thread.

The rules are docs/design.md#metrics and #public-api (``report_hyperparameters``).
Pure functions; :func:`flatten_params_bounded` runs on the training thread and
bounds its own work (:data:`MAX_PARAM_ITEMS`).
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Mapping
from typing import Any, Final

from trainreport._record._values import is_bool

__all__ = [
    "MAX_PARAM_ITEMS",
    "flatten_params",
    "flatten_params_bounded",
]


_MAX_PARAM_TEXT: Final[int] = 1000
_MAX_PARAM_LIST: Final[int] = 1000
_MAX_PARAM_DEPTH: Final[int] = 64
_CYCLE: Final[str] = "<cycle>"

MAX_PARAM_ITEMS: Final[int] = 10_000
"""Most items one ``report_hyperparameters`` call flattens on the caller's thread: each
key and each element of a list value counts one (a real run has a few hundred)."""


class _Budget:
    """Items left to flatten, and keys left out once they ran out."""

    __slots__ = ("dropped", "left")

    def __init__(self, items: int | None) -> None:
        self.left = items
        self.dropped = 0

    def take(self, value: object) -> bool:
        if self.left is None:
            return True
        cost = 1 + (len(value) if isinstance(value, (list, tuple)) else 0)
        if cost > self.left:
            self.dropped += 1
            return False
        self.left -= cost
        return True


def _safe_str(value: object) -> str:
    try:
        return str(value)[:_MAX_PARAM_TEXT]
    except Exception:
        try:
            return f"<unprintable {type(value).__name__}>"
        except Exception:
            return "<unprintable>"


_NOT_SCALAR: Final = object()


def _param_scalar(value: object) -> object:
    """Return the JSON scalar for ``value``, or ``_NOT_SCALAR``."""
    if value is None:
        return None
    if isinstance(value, str):
        return str.__str__(value)
    if is_bool(value):
        return bool(value)  # bool or numpy.bool_
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        real = float(value)
        return real if math.isfinite(real) else repr(real)
    return _NOT_SCALAR


def _param_value(value: object) -> object:
    scalar = _param_scalar(value)
    if scalar is not _NOT_SCALAR:
        return scalar
    if isinstance(value, (list, tuple)) and len(value) <= _MAX_PARAM_LIST:
        items = [_param_scalar(item) for item in value]
        if all(item is not _NOT_SCALAR for item in items):
            return items
    return _safe_str(value)


def _flatten_into(
    out: dict[str, object],
    params: Mapping[Any, object],
    prefix: str,
    sep: str,
    path: list[int],
    budget: _Budget,
) -> None:
    path.append(id(params))
    try:
        for key, value in params.items():
            name = f"{prefix}{_safe_str(key)}"
            try:
                if isinstance(value, Mapping):
                    if id(value) in path:
                        out[name] = _CYCLE
                    elif len(path) >= _MAX_PARAM_DEPTH:
                        out[name] = _safe_str(value)
                    else:
                        _flatten_into(out, value, f"{name}{sep}", sep, path, budget)
                elif budget.take(value):
                    out[name] = _param_value(value)
            except Exception:
                out[name] = _safe_str(value)
    finally:
        path.pop()


def flatten_params(params: Mapping[str, object], sep: str = "/") -> dict[str, object]:
    """Flatten nested hyperparameters into one level of JSON scalars (docs/design.md#public-api).

    ``{"opt": {"lr": 1e-4}}`` -> ``{"opt/lr": 1e-4}``. Keys that are not ``str``
    are converted with ``str()``. Values:

    - JSON scalars (``str``, ``int``, finite ``float``, ``bool``, ``None``) are
      kept; numpy scalars become the matching Python scalar;
    - non-finite floats become their repr (``"nan"``, ``"inf"``, ``"-inf"``);
    - lists and tuples of at most 1000 scalars are kept as lists (elements
      converted as above);
    - anything else becomes ``str(value)`` truncated to 1000 characters;
    - a mapping that contains itself is cut with the value ``"<cycle>"``;
      nesting deeper than 64 levels is kept as text; empty mappings contribute
      nothing. When two paths flatten to the same key, the later one wins.

    Args:
        params: the hyperparameters, possibly nested mappings.
        sep: the separator between the keys of nested mappings.

    Returns:
        A new flat ``dict``; ``{}`` when ``params`` is not a mapping.
        Never raises an ``Exception``.
    """
    return flatten_params_bounded(params, None, sep)[0]


def flatten_params_bounded(
    params: Mapping[str, object], max_items: int | None, sep: str = "/"
) -> tuple[dict[str, object], int]:
    """:func:`flatten_params` with a bound on the work done (the caller's thread does it).

    Args:
        params: the hyperparameters, possibly nested mappings.
        max_items: the most items flattened (each key and each element of a
            list value counts one; :data:`MAX_PARAM_ITEMS` for report calls), or
            ``None`` for no bound. A key that no longer fits is left out.
        sep: the separator between the keys of nested mappings.

    Returns:
        ``(flat, dropped)``: the flat ``dict`` and how many keys were left out.
        Never raises an ``Exception``.
    """
    out: dict[str, object] = {}
    budget = _Budget(max_items)
    # A mapping whose iteration fails keeps what was read before it failed.
    with contextlib.suppress(Exception):
        if isinstance(params, Mapping):
            _flatten_into(out, params, "", sep, [], budget)
    return out, budget.dropped
