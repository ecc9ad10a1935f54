"""Sticky details: ``status_details`` fields sent until each destination holds them.

``max_steps``, ``num_epochs``, ``checkpoint_path``, ``checkpoint_step``,
``hyperparameters``, ``val_datasets``, ``cancel_reason`` and ``error`` are
sent in full only until a destination acknowledges them: the destination's
shallow merge keeps them afterwards (docs/design.md#wire-modes). Each value
carries a version; a destination holds a key when it acknowledged that
version. Values are made JSON-safe when set (:func:`json_safe`).

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["StickyFields", "json_safe"]

_MAX_INT_BITS = 256  # larger ints in details become text (JSON readers choke on them)


def json_safe(value: Any, depth: int = 0) -> Any:
    """A copy of a details value that any strict JSON encoder accepts.

    Lone surrogates (``os.fsdecode`` of undecodable bytes) become U+FFFD, huge
    ints and non-finite floats become text, nesting is cut at 32 levels.
    Never raises for values whose ``str`` works.
    """
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        bits = value.bit_length()
        return value if bits <= _MAX_INT_BITS else f"<int of {bits} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth >= 32:
        return "<nested too deep>"
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value]
    return json_safe(str(value))


class StickyFields:
    """The sticky fields' current values and versions (one version counter per run)."""

    __slots__ = ("_counter", "values", "versions")

    def __init__(self) -> None:
        #: key -> current value (JSON-safe).
        self.values: dict[str, Any] = {}
        #: key -> the version of its current value.
        self.versions: dict[str, int] = {}
        self._counter = 0

    def set(self, key: str, value: Any) -> None:
        """Set ``key`` to (a JSON-safe copy of) ``value``, as a new version."""
        self.values[key] = json_safe(value)
        self._counter += 1
        self.versions[key] = self._counter

    def forget(self, key: str) -> None:
        """Remove ``key`` (it is no longer sent)."""
        self.values.pop(key, None)
        self.versions.pop(key, None)

    def dirty(self, held: Mapping[str, int]) -> dict[str, int]:
        """Keys whose current version is not in ``held`` (key -> version) -> that version."""
        return {k: v for k, v in self.versions.items() if held.get(k) != v}
