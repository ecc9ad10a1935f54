"""LogState: the task a run log describes, as the reference server would hold it.

A :class:`~trainreport._wire._task_record.TaskRecord` (the server's merge rules,
shared with ``MemorySink``) plus, per series, the index of the first point
held: 0, unless the log was trimmed after a service acknowledged the points
before (a journal). Offsets in records count from index 0 of the whole series.

A state can also keep no points at all (:meth:`LogState.drop_points`): a
``FileSink`` whose log is the only copy it needs. Applying an update then
records only what the next record and :meth:`LogState.lengths` need: each
series' length (its base), the status, the details and the series another tool
wrote. No point is copied (``docs/engine.md``, "Memory").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport._wire._task_record import SeriesGapError, TaskRecord, new_record_columns

__all__ = ["LogState"]


class LogState:
    """The task a run log describes: a :class:`TaskRecord` plus each series' first index.

    ``bases[name]`` is the index of the first point held (0 unless a snapshot
    was trimmed); offsets in records are indices in the whole series.

    Two modes, one rule: a state keeps the points it is given (the default:
    a journal, a ``FileSink`` that writes its record at close, a replay), or,
    after :meth:`drop_points`, none (:attr:`keeps_points` false): each series
    is then its base alone (its length; its columns stay empty) and
    :meth:`apply` leaves the state that applying the points and trimming
    them all would (the same lengths, bases, series order, status, details
    and refusals), without copying a point. Such a state must not be
    compacted into a log that is its only copy (a snapshot of it holds no
    points): ``FileSink`` compacts only a state with no bases.

    Driven by one thread (the writer's).
    """

    def __init__(self) -> None:
        self.task = TaskRecord(None)
        self.bases: dict[str, int] = {}
        self._keeps_points = True

    @classmethod
    def from_task(cls, task: Mapping[str, Any]) -> LogState:
        """A state holding ``task`` (the ``GET`` shape); malformed curves are dropped."""
        state = cls()
        state.task = TaskRecord(task)
        return state

    @property
    def keeps_points(self) -> bool:
        """False once :meth:`drop_points` was called: updates then add no points."""
        return self._keeps_points

    def drop_points(self) -> None:
        """Let every point held go, and keep none from now on; lengths and fields stay.

        For a state whose points are kept elsewhere (a ``FileSink``'s log, its
        only copy). Each series' base moves past the points it held.
        Idempotent; :meth:`reset` keeps the mode. Never raises.
        """
        self._keeps_points = False
        bases = self.bases
        series = self.task.series
        for name, cols in series.items():
            held = len(cols[0])
            if held:
                # New columns, not ``del column[:]``: a view of an old one may still be
                # alive (a snapshot that failed mid-write, in its traceback), and
                # resizing an exported array raises BufferError.
                series[name] = new_record_columns()
                bases[name] = bases.get(name, 0) + held

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

        Without :attr:`keeps_points`, only the lengths and the task fields
        change (:meth:`_apply_counted`).

        Raises:
            SeriesGapError: a suffix starts beyond its series' end (nothing applied).
        """
        if not self._keeps_points:
            return self._apply_counted(update)
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

    def _apply_counted(self, update: Update) -> dict[str, int]:
        """:meth:`apply` for a state that keeps no points: it counts them instead.

        Every series holds no points here (its length is its base), so a suffix
        from ``offset`` leaves ``min(held, offset - base) + count`` points, at
        once moved into the base, as :meth:`apply` followed by trimming every
        point would leave them; the branches are :meth:`apply`'s own (a full
        state starts every series afresh; a suffix before a base rebases the
        series; only that path keeps a series emptied past its base). The same
        gap is refused with the same message. Returns :meth:`lengths`.

        Raises:
            SeriesGapError: a suffix starts beyond its series' end (nothing applied).
        """
        task, bases = self.task, self.bases
        if update.series is None:
            task.apply(update)
            return self.lengths()
        full = update.full_state
        rebasing = not full and bool(bases)  # apply's suffix path onto trimmed series
        if not full:
            held = task.lengths()  # 0 a series (its columns are empty), foreign ones as stored
            for s in update.series:
                base = bases.get(s.name, 0)
                if s.offset >= base and s.offset - base > held.get(s.name, 0):
                    raise SeriesGapError(s.name, s.offset - base, held.get(s.name, 0))
        task.apply(attrs.evolve(update, series=None))  # status and details, as merged
        if full:
            task.series = {}
            task.foreign = dict(update.foreign_series)
            bases.clear()
        series, foreign = task.series, task.foreign
        counted: dict[str, int] = {}  # points each series would hold before the trim
        rebased: dict[str, int] = {}
        for s in update.series:
            name, base = s.name, bases.get(s.name, 0)
            if s.offset >= base:
                local = s.offset - base
            else:  # the suffix starts before the points held: it replaces all of them
                local, rebased[name] = 0, s.offset
            foreign.pop(name, None)
            count = counted[name] = min(counted.get(name, 0), local) + len(s)
            if not count:  # a series left with no points is removed, as the server does
                series.pop(name, None)
            elif name not in series:
                series[name] = new_record_columns()
        for name, base in rebased.items():
            if base:
                bases[name] = base
            else:
                bases.pop(name, None)
        if rebasing:
            self._keep_trimmed(update.series)
        for name, count in counted.items():
            if count:
                bases[name] = bases.get(name, 0) + count
        return self.lengths()

    def _keep_trimmed(self, series: Iterable[SeriesUpdate]) -> None:
        """Keep a series that holds no points here but has points before its base.

        The record drops a series left with no points (as the server does); one
        trimmed past all its points still has them (its base, set before this
        call), acknowledged by a service. One with no base has none: a suffix
        onto another tool's series replaces it, from any offset (``TaskRecord``).
        """
        bases = self.bases
        for s in series:
            if s.name not in self.task.series and bases.get(s.name, 0) > 0:
                self.task.series[s.name] = new_record_columns()

    def reset(self, snapshot: Update) -> None:
        """Replace everything with ``snapshot`` (series at their offsets, details whole).

        A state that keeps no points (:meth:`drop_points`) drops the snapshot's.
        """
        self.task = TaskRecord(None)
        self.bases = {s.name: s.offset for s in snapshot.series or () if s.offset}
        local = tuple(attrs.evolve(s, offset=0) for s in snapshot.series or ())
        self.task.apply(attrs.evolve(snapshot, series=local, full_state=False))
        self.task.foreign = dict(snapshot.foreign_series)
        self._keep_trimmed(snapshot.series or ())
        if not self._keeps_points:
            self.drop_points()

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
