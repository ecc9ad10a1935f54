"""Recorder: applies queued reports to the store and the task machine, builds updates.

This is the sans-I/O core the reporter thread drives (docs/design.md#shape): it gets
report tuples that the training thread queued (``_record/_reports.py`` declares them),
hands back :class:`~trainreport.sinks.Update` values for each destination and
applies what each destination acknowledged. It reads no clock (times arrive
in the reports and as ``wall`` arguments) and does no I/O.

The recorder owns its lock: every method that reads or writes the record
takes it, so the reporter thread (applying, building, acknowledging) and other
threads (``snapshot``, ``counts``, ``final_status``) never share a mutable
attribute. Two read-only properties do not (``seeded``, ``status``): each
reads one attribute that only the reporter thread writes and that is
replaced whole, never mutated, so a read is at worst one report old
(docs/design.md#shape). Behind the lock the work is
split by concern, one private module each:

* ``_record/_run_record.py``: the attempt's state the parts share;
* ``_record/_seeding.py``: seeding from a stored task (resume);
* ``_record/_ingest.py`` (with ``_record/_name_table.py``, ``_record/_epochs.py`` and
  ``_record/_events.py``): applying reports to the store and the task machine;
* ``_record/_details.py``: the ``status_details`` an update carries, and the
  snapshot and journal views;
* ``_record/_delivery.py``: building each destination's update and applying what
  it acknowledged;
* ``_record/_sticky.py``: the details sent until delivered (versions per key).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from trainreport._record._delivery import Build, Delivery
from trainreport._record._details import DetailsView, JournalView
from trainreport._record._epochs import EpochResolver
from trainreport._record._ingest import Ingest
from trainreport._record._machines import TaskEvent, TaskStatus
from trainreport._record._name_table import RESERVED_KEYS, NameTables
from trainreport._record._reports import TERMINAL_KINDS, Kind, Report, kind_of
from trainreport._record._run_record import RunRecord
from trainreport._record._seeding import points_json, seed
from trainreport._reporting_config import ReportingConfig
from trainreport._wire._payloads import StoredState
from trainreport._wire._sink_interface import Update

__all__ = ["RESERVED_KEYS", "Build", "JournalView", "Recorder", "RecorderCounts"]


@attrs.frozen
class RecorderCounts:
    """Counters for ``Reporter.stats()``, read under the recorder's lock.

    Args:
        points_recorded: series points applied to the store.
        delivered: per destination, the points it is known to hold.
        unsent: per destination, the points it is not known to hold.
        drops: dropped items by reason.
        rewinds: reports (and resume cuts) whose step went back in some series.
        points_replaced_by_rewinds: the points those rewinds removed.
        thinned_to: per destination, the most points a series is sent with
            (full-state mode over its body limit), or ``None`` (every point).
    """

    points_recorded: int
    delivered: tuple[int, ...]
    unsent: tuple[int, ...]
    drops: Mapping[str, int]
    rewinds: int
    points_replaced_by_rewinds: int
    thinned_to: tuple[int | None, ...] = ()


#: The status each terminal report kind ends an attempt with.
_TERMINAL_STATUS = {
    Kind.COMPLETED: TaskStatus.COMPLETED,
    Kind.CANCELLED: TaskStatus.CANCELLED,
    Kind.FAILED: TaskStatus.FAILED,
}


class Recorder:
    """The state of one reporting attempt: metrics, status, phase and details.

    Args:
        config: the reporter's configuration.
        destinations: how many destinations the reporter sends to.
        series_default: the ``time_series_metrics`` used when the config's is
            ``None`` (an adapter's own default list; every metric otherwise).
        wall_offset: seconds from the reports' monotonic clock to the wall clock
            (``time.time() - clock()`` when the reporter starts): each point's
            wall-clock time is its report's ``t`` plus this.

    Thread-safety: every public method takes the recorder's own lock.
    """

    def __init__(
        self,
        config: ReportingConfig,
        *,
        destinations: int = 1,
        series_default: tuple[str, ...] = ("*",),
        wall_offset: float = 0.0,
    ) -> None:
        self._lock = threading.Lock()
        self._record = record = RunRecord.new(config, destinations, series_default, wall_offset)
        self._names = NameTables(record)
        self._ingest = Ingest(record, self._names, EpochResolver(record))
        self._details = DetailsView(record)
        self._delivery = Delivery(record, self._details, destinations)

    # --- seeding (resume) ----------------------------------------------------------

    def start_attempt(self) -> None:
        """Begin a new attempt: status ``running``, phase ``setup`` (docs/design.md#lifecycle)."""
        with self._lock:
            self._record.machine.apply(TaskEvent.ATTEMPT_START)
            self._record.changes += 1

    @property
    def seeded(self) -> bool:
        """Whether the store was seeded from a stored task (or found none)."""
        return self._record.seeded

    def seed(self, state: StoredState, d: int = 0) -> None:
        """Seed curves and ``val_datasets`` from destination ``d``'s stored task.

        Resume as docs/design.md#metrics describes it. Never the stored status:
        a new process starts a new attempt. Series continue; other stored fields
        are left as they are on the destination.
        """
        with self._lock:
            seed(self._record, self._names, state, d)

    # --- applying reports ----------------------------------------------------------

    def apply_all(self, queue: deque[Report]) -> tuple[bool, int, bool]:
        """Take every report queued now off ``queue`` and apply them, in order, under the lock.

        Returns:
            (an event report was among them, their estimated bytes for the
            memory guard, the run has a point or a scalar now). Never raises.
        """
        with self._lock:
            return self._ingest.apply_all(queue)

    def apply(self, item: Report) -> bool:
        """Apply one report (see :meth:`apply_all`). True for an event report."""
        with self._lock:
            return self._ingest.apply(item)

    def record_system(self, t: float, values: dict[str, float]) -> None:
        """Record one sample of the system stream (``system_*``) at the last training step.

        The step is the last training step applied (before any, the stored
        task's last training step, else 0): docs/design.md#the-system-stream.
        """
        with self._lock:
            record = self._record
            step = record.at_step if record.at_step is not None else record.stored_last_train
            self._ingest.apply((Kind.METRICS, t, step or 0, values, "system"))

    def drop_field(self, d: int, update: Update, metrics_bytes: int, floor: int) -> bool:
        """Destination ``d`` refused ``update``'s size: drop its largest once-sent field, if any.

        The largest once-sent field (``hyperparameters``, ...) in ``update``,
        when it is at least ``floor`` bytes and at least ``metrics_bytes``
        (the curves it carries), is dropped: it goes back to its last
        delivered value (or to nothing), so a later report merges into what
        the destinations hold; ``d`` is known to hold that value, the others
        are sent it. Counted as ``field_too_large`` and logged once per field.

        Returns:
            True when a field was dropped (the rest is to be resent at once).
        """
        with self._lock:
            return self._delivery.drop_field(d, update, metrics_bytes, floor)

    def refuse_metrics(self, d: int) -> None:
        """Destination ``d`` cannot take the full-state ``metrics`` (413): go on without them."""
        with self._lock:
            self._delivery.refuse_metrics(d)

    # --- building updates ----------------------------------------------------------

    def journal_view(
        self, wall: str, lengths: Mapping[str, int], version: bool | None, *, whole: bool = False
    ) -> JournalView:
        """The suffixes the journal lacks (or, when ``version`` is not current, a rewrite).

        For the journal (``_engine/_journal_feed.py``): ``lengths`` is what it holds,
        ``version`` the :attr:`JournalView.version` it last wrote; ``whole``: its
        compaction is due, so every series from what every destination holds
        on, when the store still holds those points (:attr:`JournalView.whole`).
        Marks what it returns as journaled (a rewind after it is a suffix in
        the next view). Called on the reporter thread, which alone changes the
        store (drains, settled answers), so nothing leaves memory between the
        view and the journal's write of it.
        """
        with self._lock:
            return self._details.journal_view(wall, lengths, version, whole=whole)

    def has_changes(self, d: int = 0) -> bool:
        """True when something recorded could still be sent to ``d`` and is not known delivered.

        Curves that can never be sent (full-state ``metrics`` over the
        destination's body limit) do not count here, or the reporter would
        resend forever; they do count in :meth:`all_delivered`.
        """
        with self._lock:
            return self._delivery.has_changes(d)

    def all_delivered(self, d: int = 0) -> bool:
        """True when ``d`` holds everything recorded (close() and flush() say so)."""
        with self._lock:
            return self._delivery.all_delivered(d)

    def build_update(
        self, d: int, *, wall: str, full_state: bool, include_metrics: bool = True
    ) -> Build:
        """Build the next update for destination ``d``.

        Args:
            d: the destination.
            wall: the wall-clock time to send as ``updated_at`` (ISO 8601, UTC).
            full_state: True for the baseline mode (complete ``metrics`` or none),
                False for series suffixes from what ``d`` holds.
            include_metrics: False to leave curves out (an event send in
                full-state mode: event reports send only what they change,
                docs/design.md#wire-modes).

        Returns:
            the update and what to acknowledge when it is delivered (:meth:`on_delivered`).
        """
        with self._lock:
            return self._delivery.build_update(d, wall, full_state, include_metrics)

    def on_delivered(self, d: int, build: Build, lengths: Mapping[str, int] | None) -> None:
        """Destination ``d`` applied ``build``'s update (holding ``lengths``, if it says)."""
        with self._lock:
            self._delivery.on_delivered(d, build, lengths)

    def resynchronise(self, d: int, lengths: Mapping[str, int] | None) -> None:
        """``d``'s state disagrees with ours: resend from ``lengths`` and every sticky field.

        ``lengths`` ``None``: the destination is to be opened again, which says them.
        """
        with self._lock:
            self._delivery.resynchronise(d, lengths)

    def adopt(self, d: int, state: StoredState, full_state: bool) -> int:
        """Bring ``d`` up to date from its own stored task (the store was seeded from another).

        Each series is sent from the longest prefix ``d`` holds as we do. In
        full-state mode, series ``d`` holds and this run does not are kept as
        stored (sent back inside ``metrics``). Every sticky field is sent.

        Returns:
            how many of ``d``'s stored points this run's record replaces.
        """
        with self._lock:
            return self._delivery.adopt(d, state, full_state)

    def thin_metrics(self, d: int, budget: int) -> int | None:
        """Send ``d``'s full-state curves thinned to ``budget`` points a series (``_thinning.py``).

        Returns:
            the budget before (``None``: ``d`` was sent every point).
        """
        with self._lock:
            return self._delivery.thin_metrics(d, budget)

    def keep_every_point(self, d: int) -> None:
        """Destination ``d`` needs every point kept in memory (``MemorySink``, full state).

        Otherwise a point leaves memory once every destination holds it and
        the journal was given it (``docs/engine.md``, "Memory"); a full-state
        destination is marked when it opens in full-state mode (before the
        store is seeded from it), and again at each full-state build.
        """
        with self._lock:
            self._record.store.keep_every_point(d)

    def metrics_refused(self, d: int) -> bool:
        """Whether ``d`` refused the full-state ``metrics`` for size."""
        with self._lock:
            return self._delivery.metrics_refused(d)

    def thinned_to(self, d: int) -> int | None:
        """The most points a series is sent to full-state ``d`` with (``None``: every point)."""
        with self._lock:
            return self._delivery.thinned_to(d)

    def series_lengths(self) -> list[int]:
        """Every series' length, points (those that left memory included), in store order."""
        with self._lock:
            return [len(s) for s in self._record.store.series.values()]

    def series_count(self) -> int:
        """How many series the store keeps (scalars not counted)."""
        with self._lock:
            return len(self._record.store.series)

    # --- reading -------------------------------------------------------------------

    def snapshot(self) -> tuple[dict[str, Any], dict[str, int]]:
        """The task record the destinations should now hold (the ``GET`` shape), and bases.

        Each series is there from its first point still in memory on; the
        second value names each series whose earlier points left memory and
        how many did (``Series.base``: every destination holds them).
        """
        with self._lock:
            bases = {name: s.base for name, s in self._record.store.series.items() if s.base}
            return self._details.snapshot(), bases

    def released_summaries(self, names: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """Of each named series, the points that left memory as its summary keeps them.

        The first point and each bucket's lowest and highest (``_thinning.py``):
        what a thinned full-state destination was sent of them. A series
        without a summary is not in the answer.
        """
        with self._lock:
            series = self._record.store.series
            return {
                name: points_json(*s.summary.points())
                for name in names
                if (s := series.get(name)) is not None and s.summary is not None
            }

    def counts(self) -> RecorderCounts:
        """Counters for ``Reporter.stats()``."""
        with self._lock:
            store = self._record.store
            n = store.destinations
            return RecorderCounts(
                points_recorded=store.points_recorded,
                delivered=tuple(store.delivered_points(d) for d in range(n)),
                unsent=tuple(store.unsent_points(d) for d in range(n)),
                drops=dict(self._record.drops),
                rewinds=store.rewinds,
                points_replaced_by_rewinds=store.points_replaced_by_rewinds,
                thinned_to=tuple(self._delivery.thinned_to(d) for d in range(n)),
            )

    def unsent_points(self, d: int) -> int:
        """Points ``d`` is not known to hold."""
        with self._lock:
            return self._record.store.unsent_points(d)

    def retained_points(self) -> int:
        """Points held in memory (for the memory benchmarks)."""
        with self._lock:
            return self._record.store.retained_points()

    def final_status(self, queue: deque[Report]) -> TaskStatus | None:
        """The terminal status the attempt ends with: applied, or the first one queued.

        ``None`` when no terminal report was made. Under the lock, so a
        terminal report the reporter thread is taking off the queue
        (``apply_all`` holds the lock throughout) is seen in one place or the
        other, never missed. Never raises.
        """
        with self._lock:
            machine = self._record.machine
            if machine.is_terminal:
                return machine.status
            for item in list(queue):
                kind = kind_of(item)
                if kind in TERMINAL_KINDS:
                    return _TERMINAL_STATUS[kind]
            return None

    @property
    def status(self) -> TaskStatus:
        """The attempt's current status."""
        return self._record.machine.status

    def strict_violations(self) -> tuple[str, ...]:
        """Reports the lifecycle tables refused, in strict mode."""
        with self._lock:
            return tuple(self._record.strict_violations)

    def finish(self) -> None:
        """At close: log never-matched ``time_series_metrics`` patterns and what was suppressed."""
        record = self._record
        with self._lock:
            arrived = [*record.store.series, *record.store.scalar_names]
        record.selector.log_unmatched(arrived)
        record.once.summarize()

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held at the fork)."""
        self._lock = threading.Lock()
