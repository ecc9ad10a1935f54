"""Columnar ingest: a run of like training reports applied to the store as one batch.

The common case on the reporter thread is a queue of ``report_train_step``
reports with the same metric keys every step (docs/design.md#performance). Applied
one point at a time that is a Python loop per point; here a run of such
reports is gathered, its values transposed with C-level builtins
(one ``struct`` pack of the run's values row after row, columns cut from it
by strided slices of the packed array) and
appended column by column, using one cached :class:`_Plan` per key set
(which keys are series, which scalars, which are refused, and the series
themselves).

A report joins the run only when the per-point path
(:meth:`~trainreport._record._ingest.Ingest.train_step`) would apply it quietly and
plainly: a plain ``int`` step (or an omitted one, ``None``: the previous
row's step + 1, ``RunRecord.next_train_step``'s rule) later than every point
recorded and than the first step of the ETA window; an epoch that is ``None`` or resolves without a
decision or a log event (:meth:`~trainreport._record._epochs.EpochResolver.settled`);
the task machine at a fixed point for a training step; not the process's
first training step (the run-wide purge); every key already resolved, no
two keys sharing a series. Values are checked per column before anything is
changed: only ``float`` and ``int`` values (converted as the per-point path
converts them) are taken; anything else sends the whole run through the
per-point path, which drops and logs as usual. Everything else (new names,
rewinds, non-numbers, the epoch base decision, other kinds) takes the
per-point path. Both forms of a training step's report are taken: the
``TRAIN`` tuple and the short form (the metrics' copy with its header keys
last, ``_reports``), whose plan is that of its metric keys. A Hypothesis
property (``tests/record/test_columnar.py``) checks that both paths leave the same
store, counters, marks and log events.

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from operator import itemgetter
from struct import Struct, error
from typing import Any

from trainreport._record._epochs import EpochResolver
from trainreport._record._machines import PHASE_TRANSITIONS, TASK_TRANSITIONS, TaskEvent
from trainreport._record._name_table import Entry, NameTables
from trainreport._record._reports import (
    HEADER_KEYS,
    REPORT_BYTES,
    TRAIN_EPOCH,
    TRAIN_STEP,
    TRAIN_TIME,
    VALUE_BYTES,
    Kind,
    Report,
)
from trainreport._record._run_record import RunRecord
from trainreport._record._store import Series
from trainreport._record._values import MAX_STEP

__all__ = ["ColumnarIngest"]

_TRAIN = Kind.TRAIN
_TRAIN_STEP = TaskEvent.TRAIN_STEP
_TRAIN_TABLE = ("train", None)
_NUMBERS = frozenset({float, int})
_MISSING: Any = object()
#: Cached plans per name-table version (key sets seen); past it the cache starts afresh.
_MAX_PLANS = 64
#: Values one batch takes at most: its checks, pack and column copies are single C
#: calls that hold the interpreter, so a batch is cut to about a millisecond of them
#: (the training thread waits no longer for its turn); past it the next batch starts.
BATCH_VALUES = 2**16


class _Plan:
    """How the reports with one key sequence are applied: per column, a series or a scalar."""

    __slots__ = ("getter", "rows", "scalars", "series", "used", "width")

    def __init__(
        self,
        keys: tuple[object, ...],
        series: list[tuple[int, Series]],
        scalars: list[tuple[int, str]],
    ) -> None:
        self.width = len(keys)
        #: Reports one batch takes at most (``BATCH_VALUES``).
        self.rows = max(1, BATCH_VALUES // max(1, self.width))
        if len(keys) == 1:
            key = keys[0]
            self.getter: Callable[[dict[Any, Any]], tuple[Any, ...]] = lambda m: (m[key],)
        else:
            self.getter = itemgetter(*keys)
        self.series = series
        self.scalars = scalars
        #: The columns whose values are recorded (a refused key's values are never read).
        self.used = sorted({i for i, _ in series} | {i for i, _ in scalars})


def _plan(keys: tuple[object, ...], names: dict[object, Entry], record: RunRecord) -> _Plan | None:
    """The plan for ``keys`` (every one resolved in ``names``), or None for the per-point path."""
    store = record.store
    series: list[tuple[int, Series]] = []
    scalars: list[tuple[int, str]] = []
    for i, key in enumerate(keys):
        entry = names.get(key, _MISSING)
        if entry is _MISSING:
            return None  # a new key: the per-point path resolves and logs it
        if entry is None:
            continue  # refused once (logged then): skipped, as the per-point path does
        name, s = entry
        if store.series.get(name) is s and s is not None:
            series.append((i, s))
        elif s is None and name in store.scalar_names and name not in store.series:
            scalars.append((i, name))
        else:
            return None  # a name two keys share: store.record() replaces, per point
    distinct_series = {id(column) for _, column in series}
    distinct_scalars = {scalar for _, scalar in scalars}
    if len(distinct_series) != len(series) or len(distinct_scalars) != len(scalars):
        return None
    return _Plan(keys, series, scalars)


class ColumnarIngest:
    """Applies runs of like training reports as batches (see the module docstring).

    Args:
        record: the attempt's shared record.
        names: the attempt's name tables (plans are rebuilt whenever they change).
        epochs: the attempt's epoch resolver.
    """

    __slots__ = ("_epochs", "_names", "_plans", "_plans_version", "_record", "batches", "rows")

    def __init__(self, record: RunRecord, names: NameTables, epochs: EpochResolver) -> None:
        self._record = record
        self._names = names
        self._epochs = epochs
        self._plans: dict[tuple[object, ...], _Plan | None] = {}
        self._plans_version = -1
        #: Reports applied as batches, and the batches (for tests: the batch path is taken).
        self.rows = 0
        self.batches = 0

    def plan_for(self, item: Report) -> _Plan | None:
        """The plan a run starting with ``item`` would use, or None (per-point path)."""
        if type(item) is dict:
            metrics: object = item
            headers = HEADER_KEYS  # the short form: its header keys come last
        elif type(item) is tuple and len(item) == 5 and item[0] is _TRAIN:
            metrics = item[4]
            headers = 0
        else:
            return None
        record = self._record
        if (
            type(metrics) is not dict
            or record.first_train_step is None
            or record.first_step is None
        ):
            return None
        machine = record.machine
        if (
            TASK_TRANSITIONS.get((machine.status, _TRAIN_STEP)) is not machine.status
            or PHASE_TRANSITIONS.get((machine.phase, _TRAIN_STEP)) is not machine.phase
        ):
            return None
        names = self._names.tables.get(_TRAIN_TABLE)
        if names is None:
            return None
        if self._plans_version != self._names.version or len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
            self._plans_version = self._names.version
        try:
            keys = tuple(metrics)
            if headers:
                keys = keys[:-headers]
            try:
                return self._plans[keys]
            except KeyError:
                plan = self._plans[keys] = _plan(keys, names, record)
                return plan
        except Exception:  # a hostile key (its hash or __eq__ raises): per point
            return None

    def take(
        self,
        plan: _Plan,
        first: Report,
        popleft: Callable[[], Report],
        remaining: int,
        per_point: Callable[[Report], bool],
    ) -> tuple[int, int, Report | None]:
        """Apply ``first`` and as many following reports as fit the run, as one batch.

        Args:
            plan: :meth:`plan_for` of ``first``.
            first: the report that starts the run (already taken off the queue).
            popleft: takes the next report off the queue.
            remaining: how many more reports may be taken (a batch takes at
                most ``plan.rows`` in all: the rest is the next batch's).
            per_point: applies one report the per-point way.

        Returns:
            (reports taken off the queue besides ``first``, the memory guard's
            bytes of the reports applied, the report taken that did not fit, or None).
            Never raises.
        """
        record = self._record
        first_step = record.first_step
        last = record.store.max_step
        if first_step is not None and first_step[1] > last:
            last = first_step[1]
        # An omitted step (None) is the previous row's step + 1: the rule of
        # RunRecord.next_train_step, which at_step (the last training step) feeds.
        at = record.at_step
        settled = self._epochs.settled
        getter = plan.getter
        width = plan.width
        headed = width + HEADER_KEYS
        epoch = record.at_epoch
        raw_before: object = _MISSING
        resolved_before: int | None = None
        steps: list[int] = []
        epochs: list[int] = []
        times: list[float] = []
        flat: list[Any] = []  # the values, row after row (the order they lie in memory)
        add_row = flat.extend
        items: list[Report] = []
        item: Report | None = first
        taken = 0
        room = min(remaining, plan.rows - 1)  # more reports this batch may take
        while item is not None:
            try:
                if type(item) is dict:  # the short form: same keys = same length, all found
                    if len(item) != headed:
                        break
                    step = item[TRAIN_STEP]
                    raw_epoch = item[TRAIN_EPOCH]
                    t = item[TRAIN_TIME]
                    metrics = item
                elif type(item) is tuple and len(item) == 5 and item[0] is _TRAIN:
                    _, t, step, raw_epoch, metrics = item
                    if type(metrics) is not dict or len(metrics) != width:
                        break
                else:
                    break
                if step is None:
                    if at is None:
                        break
                    step = at + 1
                if type(step) is not int or not last < step <= MAX_STEP:
                    break
                row_epoch = epoch
                if raw_epoch is not None:
                    if raw_epoch is not raw_before:
                        resolved_before = settled(raw_epoch)
                        raw_before = raw_epoch
                    if resolved_before is None:
                        break
                    row_epoch = resolved_before
                add_row(getter(metrics))
            except Exception:  # a key missing, or a hostile one: this report goes per point
                break
            epoch = row_epoch
            last = at = step
            steps.append(step)
            epochs.append(epoch or 1)
            times.append(t)
            items.append(item)
            item = None
            if taken < room:
                item = popleft()
                taken += 1
        if not self._apply(plan, items, flat, steps, epochs, times, epoch):
            for report in items:  # a value the batch does not take: the per-point path
                per_point(report)
        return taken, len(items) * (REPORT_BYTES + VALUE_BYTES * width), item

    def _apply(
        self,
        plan: _Plan,
        items: list[Report],
        flat: list[Any],
        steps: list[int],
        epochs: list[int],
        times: list[float],
        epoch: int | None,
    ) -> bool:
        """Append the gathered run; False (nothing changed) if a value needs the per-point path.

        ``flat``: the run's values row after row, ``plan.width`` a row.
        """
        if not items:
            return True
        width = plan.width
        # Checked and packed row after row, in the order the values lie in memory (a
        # report's values were allocated together), then cut into columns by strided
        # slices of the packed doubles: ints are converted as float() converts them.
        try:
            if _NUMBERS.issuperset(map(type, flat)):
                packed = array("d", Struct(f"{len(flat)}d").pack(*flat))
                values = {i: packed[i::width] for i in plan.used}
            else:  # a value of another type: only the recorded columns must be numbers
                pack = Struct(f"{len(items)}d").pack
                values = {}
                for i in plan.used:
                    column = flat[i::width]
                    if not _NUMBERS.issuperset(map(type, column)):
                        return False
                    values[i] = array("d", pack(*column))
        except (OverflowError, error):  # an int too large for a float: per point
            return False
        record = self._record
        store = record.store
        step_column = array("q", steps)
        epoch_column = array("i", epochs)
        offset = record.wall_offset  # each report's monotonic time -> wall-clock time
        time_column = array("d", [t + offset for t in times])
        for i, s in plan.series:
            s.steps.extend(step_column)
            s.epochs.extend(epoch_column)
            s.values.extend(values[i])
            s.times.extend(time_column)
        for i, name in plan.scalars:
            store.scalars[name] = values[i][-1]
        store.points_recorded += len(items) * len(plan.series)
        store.max_step = steps[-1]
        record.at_epoch = epoch
        record.at_step = steps[-1]
        final = items[-1]
        if isinstance(final, dict):  # the short form
            record.last_step_time = final[TRAIN_TIME]
        elif isinstance(final, tuple):  # the TRAIN tuple (a device report never batches)
            record.last_step_time = final[1]
        record.changes += len(items)
        self.rows += len(items)
        self.batches += 1
        return True
