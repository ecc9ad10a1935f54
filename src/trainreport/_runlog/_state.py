"""LogState: the task a run log describes, as the reference server would hold it.

A :class:`~trainreport._wire._task_record.TaskRecord` (the server's merge rules,
shared with ``MemorySink``) plus, per series, the index of the first point
held: 0, unless the log was trimmed after a service acknowledged the points
before (a journal). Offsets in records count from index 0 of the whole series.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport._wire._task_record import TaskRecord, new_record_columns

__all__ = ["LogState"]


class LogState:
    """The task a run log describes: a :class:`TaskRecord` plus each series' first index.

    ``bases[name]`` is the index of the first point held (0 unless a snapshot
    was trimmed); offsets in records are indices in the whole series.
    """

    def __init__(self) -> None:
        self.task = TaskRecord(None)
        self.bases: dict[str, int] = {}

    @classmethod
    def from_task(cls, task: Mapping[str, Any]) -> LogState:
        """A state holding ``task`` (the ``GET`` shape); malformed curves are dropped."""
        state = cls()
        state.task = TaskRecord(task)
        return state

    @property
    def exists(self) -> bool:
        """True once any update was applied (a task with no record does not exist)."""
        return self.task.exists

    def lengths(self) -> dict[str, int]:
        """Points per series, counted from index 0 of the whole series."""
        bases = self.bases
        held = {name: bases.get(name, 0) + len(c[0]) for name, c in self.task.series.items()}
        for name, raw in self.task.foreign.items():  # kept as stored, counted as the server does
            held[name] = len(raw) if isinstance(raw, list) else 0
        return held

    def point_count(self) -> int:
        """Points held (what a snapshot would write)."""
        return sum(len(c[0]) for c in self.task.series.values())

    def apply(self, update: Update) -> dict[str, int]:
        """Merge one update with the reference server's rules; returns :meth:`lengths`.

        Raises:
            SeriesGapError: a suffix starts beyond its series' end (nothing applied).
        """
        bases = self.bases
        if update.full_state or update.series is None or not bases:
            lengths = self.task.apply(update)
            if update.full_state and update.series is not None:
                bases.clear()
            return lengths if not bases else self.lengths()  # no base: the record's own
        local = []
        rebased = {}
        for s in update.series:
            base = bases.get(s.name, 0)
            if s.offset >= base:
                local.append(attrs.evolve(s, offset=s.offset - base))
            else:  # the suffix starts before the points held: it replaces all of them
                local.append(attrs.evolve(s, offset=0))
                rebased[s.name] = s.offset
        self.task.apply(attrs.evolve(update, series=tuple(local)))
        for name, base in rebased.items():
            if base:
                bases[name] = base
            else:
                bases.pop(name, None)
        self._keep_trimmed(update.series)
        return self.lengths()

    def _keep_trimmed(self, series: Iterable[SeriesUpdate]) -> None:
        """Keep a series that holds no points here but has points before its base.

        The record drops a series left with no points (as the server does); one
        trimmed past all its points still has them, acknowledged by a service.
        """
        for s in series:
            if s.name not in self.task.series and s.offset + len(s) > 0:
                self.task.series[s.name] = new_record_columns()

    def reset(self, snapshot: Update) -> None:
        """Replace everything with ``snapshot`` (series at their offsets, details whole)."""
        self.task = TaskRecord(None)
        self.bases = {s.name: s.offset for s in snapshot.series or () if s.offset}
        local = tuple(attrs.evolve(s, offset=0) for s in snapshot.series or ())
        self.task.apply(attrs.evolve(snapshot, series=local, full_state=False))
        self.task.foreign = dict(snapshot.foreign_series)
        self._keep_trimmed(snapshot.series or ())

    def trim(self, keep_from: Mapping[str, int]) -> None:
        """Drop each named series' points before index ``keep_from[name]`` (clamped)."""
        for name, start in keep_from.items():
            cols = self.task.series.get(name)
            if cols is None:
                continue
            base = self.bases.get(name, 0)
            cut = min(max(start - base, 0), len(cols[0]))
            if cut:
                for column in cols:
                    del column[:cut]
                self.bases[name] = base + cut

    def to_task(self) -> dict[str, Any] | None:
        """The task in the ``GET`` shape (the points held), or ``None`` when it does not exist."""
        return self.task.to_task()
