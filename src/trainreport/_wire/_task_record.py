"""TaskRecord: a task as the reference server holds it, merged from updates (for local sinks).

Applies both wire modes exactly as the reference server does
(``docs/protocol.md``): ``status_details`` keys are merged shallowly, a
full-state ``metrics`` replaces every series, and a series suffix means "from
index ``offset`` on, the series is exactly these points". Series are kept as
columns (steps, epochs, values and each point's wall-clock time, NaN where
unknown); :meth:`TaskRecord.to_task` gives the ``GET`` shape (without times,
as the server's ``GET`` of a task) and :meth:`TaskRecord.encode_chunks` the
same as JSON text, series by series.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

import attrs

from trainreport._wire._payloads import (
    StoredState,
    encode_details,
    encode_points,
    finite_or_none,
    parse_stored_task,
)
from trainreport._wire._protocol import (
    TIMES_TYPECODE,
    TaskStatus,
    forget_running_only_details,
    new_columns,
)
from trainreport._wire._sink_interface import SeriesUpdate, Update

__all__ = ["Columns", "SeriesGapError", "TaskRecord", "new_record_columns", "unknown_times"]

#: A series as a task record holds it: steps, epochs, values, times (NaN: unknown).
Columns: TypeAlias = "tuple[array[int], array[int], array[float], array[float]]"
_UNKNOWN = array(TIMES_TYPECODE, [math.nan])


def new_record_columns() -> Columns:
    """Empty ``(steps, epochs, values, times)`` columns of the wire's typecodes. Never raises."""
    return (*new_columns(), array(TIMES_TYPECODE))


def unknown_times(count: int) -> array[float]:
    """``count`` unknown times (NaN): for points that came without any. Never raises."""
    return _UNKNOWN * count


#: A task created without a status holds this one (docs/protocol.md).
_PENDING = TaskStatus.PENDING.value


class SeriesGapError(ValueError):
    """A suffix starts beyond the end of the stored series (the sender assumed too much)."""

    def __init__(self, name: str, offset: int, length: int) -> None:
        super().__init__(f"series {name!r}: offset {offset} is beyond the stored length {length}")


class TaskRecord:
    """One task's stored state: status, details and series columns.

    Args:
        task: a stored task in the ``GET`` shape to start from, or ``None``
            (the task does not exist yet). Malformed stored curves are dropped.
    """

    def __init__(self, task: Mapping[str, Any] | None = None) -> None:
        self.exists = task is not None
        self.status: str = _PENDING
        self.details: dict[str, Any] = {}
        self.series: dict[str, Columns] = {}
        # Series a client could not parse (another tool wrote them), kept as stored.
        self.foreign: dict[str, Any] = {}
        if task is not None:
            state = parse_stored_task(dict(task))
            if not isinstance(state, str):
                self.details = dict(state.details)
                self.series = {
                    n: (s, e, v, unknown_times(len(s))) for n, (s, e, v) in state.series.items()
                }
                self.foreign = dict(state.damaged)
                self.status = state.status or _PENDING

    def lengths(self) -> dict[str, int]:
        """Points held per series."""
        held = {name: len(cols[0]) for name, cols in self.series.items()}
        for name, raw in self.foreign.items():
            held[name] = len(raw) if isinstance(raw, list) else 0
        return held

    def apply(self, update: Update) -> dict[str, int]:
        """Merge one update; returns the series lengths now held.

        Raises:
            SeriesGapError: a suffix's offset is beyond its stored series (nothing
                of the update is applied then).
        """
        if update.series is not None and not update.full_state:
            lengths = self.lengths()
            for s in update.series:
                held = lengths.get(s.name, 0)
                if s.offset > held:
                    raise SeriesGapError(s.name, s.offset, held)
        self.exists = True
        if update.status is not None:
            self.status = update.status
        self.details.update(update.status_details)
        forget_running_only_details(self.status, self.details)
        if update.series is not None:
            if update.full_state:
                self.series = {}
                self.foreign = dict(update.foreign_series)
            for s in update.series:
                self._apply_series(s)
        return self.lengths()

    def _apply_series(self, s: SeriesUpdate) -> None:
        self.foreign.pop(s.name, None)  # a suffix replaces a series nobody could parse
        cols = self.series.get(s.name)
        if cols is None:
            cols = self.series[s.name] = new_record_columns()
        steps, epochs, values, times = cols
        for column in cols:
            del column[s.offset :]
        steps.extend(s.steps)
        epochs.extend(s.epochs)
        values.extend(s.values)
        given = s.times
        times.extend(
            given if given is not None and len(given) == len(s.values) else unknown_times(len(s))
        )
        if not steps:  # a series left with no points is removed, as the server does
            del self.series[s.name]

    def _series_update(self, name: str) -> SeriesUpdate:
        steps, epochs, values, _times = self.series[name]
        return SeriesUpdate(name, 0, steps, epochs, values)  # the GET shape: no times

    def to_task(self) -> dict[str, Any] | None:
        """The task in the ``GET`` shape, or ``None`` when it does not exist."""
        if not self.exists:
            return None
        details = dict(self.details)
        if any(cols[0] for cols in self.series.values()) or self.foreign:
            metrics: dict[str, Any] = {
                name: [
                    {"step": st, "epoch": ep, "value": v}
                    for st, ep, v in zip(cols[0], cols[1], finite_or_none(cols[2]), strict=True)
                ]
                for name, cols in self.series.items()
                if cols[0]
            }
            metrics.update(self.foreign)
            details["metrics"] = metrics
        return {"status": self.status, "status_details": details}

    def stored_state(self, *, copy: bool = False) -> StoredState:
        """What a resume seeds from, straight from the columns: no ``GET``-shape points built.

        Equal to ``parse_stored_task(self.to_task())`` except that a non-finite
        value stays what it is (the ``GET`` shape turns it into ``null``, read
        back as NaN). Series nobody could parse (:attr:`foreign`) are parsed as
        stored, so they stay damaged exactly as before. Never raises.

        Args:
            copy: copy the columns (28 bytes a point) rather than share them,
                for a record that goes on changing while the state is held.
        """
        if not self.exists:
            return StoredState(series={})
        details = dict(self.details)
        if self.foreign:
            details["metrics"] = dict(self.foreign)
        parsed = parse_stored_task({"status": self.status, "status_details": details})
        assert not isinstance(parsed, str)  # status_details is an object
        series = {
            name: (cols[0][:], cols[1][:], cols[2][:]) if copy else cols[:3]
            for name, cols in self.series.items()
            if cols[0]
        }
        series.update(parsed.series)
        return attrs.evolve(parsed, series=series)

    def encode_chunks(self) -> Iterator[str]:
        """The ``GET`` shape as JSON text, in pieces (one per series), for writing to a file."""
        yield '{"status":' + json.dumps(self.status) + ',"status_details":{'
        inner = encode_details(self.details)
        yield inner
        if self.series or self.foreign:
            yield ("," if inner else "") + '"metrics":{'
            for i, name in enumerate(self.series):
                prefix = "," if i else ""
                yield f"{prefix}{json.dumps(name)}:{encode_points(self._series_update(name))}"
            for i, (name, raw) in enumerate(self.foreign.items(), start=len(self.series)):
                prefix = "," if i else ""
                yield f"{prefix}{json.dumps(name)}:{json.dumps(raw)}"
            yield "}"
        yield "}}"
