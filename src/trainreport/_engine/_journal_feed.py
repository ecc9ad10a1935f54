"""JournalKeeper: what the reporter thread writes to its journal, trims from it, and recovers.

The reporter thread and the journal's destination drive it (``docs/engine.md``,
"The journal in front of a service"):

- :meth:`JournalKeeper.record`, after a drain, at least every
  ``journal_interval_seconds``: first the points every destination is known
  to hold are trimmed (in memory at once; in the file when it has grown past
  its compaction floor), then one record holding each series' points the
  journal lacks (a suffix at the journal's length) and the task fields that
  changed, written with one ``write()``; a rewind is a suffix from the index
  it cut, in the same record. When the stored task seeded the store (the
  indices become the service's), the journal is rewritten atomically as one
  snapshot instead, once.
- :meth:`JournalKeeper.recover`, called with the journal's destination's
  open (on whichever thread runs that destination's requests), before the
  stored task seeds the store and before the first send: the journals a
  dead process left are planned against the stored task
  (:func:`trainreport._runlog._plan.plan_recovery`, shared with
  ``trainreport sync``) and sent, oldest first.
- :meth:`JournalKeeper.close` at the end: the journal is removed when every
  destination holds everything, ``fsync``-ed and kept otherwise.

The record is read through :meth:`Recorder.journal_view` (under the
recorder's lock); the current journal file is touched only by the reporter
thread, the left-over journals only by :meth:`recover`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import attrs

from trainreport._engine._destination import keeps_local_run_log
from trainreport._logging import describe_exception, get_logger
from trainreport._record._recorder import Recorder
from trainreport._runlog._journal import Journal, mark_sent_under
from trainreport._runlog._plan import StaleJournalError, SyncError, plan_recovery
from trainreport._runlog._replay import DamageKind, replay
from trainreport._runlog._runfile import load_run_file
from trainreport._runlog._state import LogState
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Resynchronise,
    RetryLater,
    Sink,
    Update,
)
from trainreport.exceptions import RunLogError

__all__ = ["JournalKeeper", "JournalWatch", "journal_identity"]

_log = get_logger()
_MISSING = object()


def _recorded_nothing(path: Path) -> bool:
    """True for a run log that holds no task and no damage but a torn tail. Never raises."""
    try:
        replayed = replay(path.read_bytes())
    except OSError:
        return False
    damage = replayed.damage
    return not replayed.state.exists and (damage is None or damage.kind is DamageKind.TORN_TAIL)


def journal_identity(sink: Sink) -> tuple[str, str] | None:
    """The job and task a journal for ``sink`` is kept under, or ``None`` for no journal.

    A sink that keeps the run on local disk itself (:func:`keeps_local_run_log`:
    ``FileSink``) needs none, and one
    without a ``job_id`` and ``task_id`` (``MemorySink``, ``KubeflowSink``)
    has nothing to key it by. Never raises.
    """
    if keeps_local_run_log(sink):
        return None
    job, task = getattr(sink, "job_id", None), getattr(sink, "task_id", None)
    if isinstance(job, str) and isinstance(task, str) and job and task:
        return job, task
    return None


@attrs.define(eq=False)
class JournalWatch:
    """What ``Reporter.stats()`` reads about a reporter's journal (written on the reporter thread).

    Attributes:
        path: the journal file it is (or would be) kept in, or ``None`` for an invalid id.
        state: ``pending`` until the claim, then ``recording``, ``busy`` or
            ``unavailable`` (the claim's outcome); the keeper's journal says
            ``failed``, ``kept`` or ``removed`` later.
        error: why there is no journal (``busy``, ``unavailable``), or ``None``.
        keeper: the claimed journal's keeper, or ``None``.
        destination: the index of the destination the journal is kept for.
    """

    path: str | None
    state: str = "pending"
    error: str | None = None
    keeper: JournalKeeper | None = None
    destination: int = 0

    def holds_points(self) -> bool:
        """A journal was claimed and none of its writes failed: what it recorded is on disk."""
        keeper = self.keeper
        return keeper is not None and self.path is not None and not keeper.journal.failed

    def refused(self, state: str, reason: str) -> None:
        """The claim failed (``Journal.claim``'s ``refused``): no journal for this attempt."""
        self.state, self.error = state, reason[:300]


class JournalKeeper:
    """Feeds one :class:`~trainreport._runlog._journal.Journal` from a :class:`Recorder`.

    Args:
        journal: the claimed journal.
        recorder: the attempt's state.
        interval_seconds: ``journal_interval_seconds``: :meth:`due` says yes
            this long after the last :meth:`record`.
        clock: monotonic clock (seconds).
        wall_clock: ``updated_at`` text for the records.
    """

    def __init__(
        self,
        journal: Journal,
        recorder: Recorder,
        *,
        interval_seconds: float,
        clock: Callable[[], float],
        wall_clock: Callable[[], str],
    ) -> None:
        self.journal = journal
        self.recorder = recorder
        self.interval_seconds = interval_seconds
        self.clock = clock
        self.wall_clock = wall_clock
        self.records = 0
        #: Whether the journal's destination was superseded (set by the worker).
        self.superseded: Callable[[], bool] | None = None
        #: The writer generations this process was issued, and the generation of the
        #: task's last write before any of them wrote (recovery's baseline).
        self._own_generations: set[int] = set()
        self._last_writer: int | None = None
        self._fields_from_older = False  # the service's task fields are an older left-over's
        #: Left-overs recovery gave up on (path, why): kept on disk for ``trainreport sync``.
        self.given_up: list[tuple[Path, str]] = []
        self._lengths: dict[str, int] = {}
        self._version: bool | None = None
        self._last = -math.inf

    # --- recording --------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """True when ``interval_seconds`` have passed since the last :meth:`record`."""
        return now - self._last >= self.interval_seconds

    def next_due(self) -> float:
        """When the next record is due (the clock's time)."""
        return self._last + self.interval_seconds

    def record(self, *, at: float | None = None, sync: bool = False) -> None:
        """Append what the record holds past the journal's lengths, with one ``write()``.

        Trims what every destination acknowledged first. Never raises.

        Args:
            at: the time (the clock's) the record holds everything queued
                before: the drain's, read before it (a report queued during
                the drain goes in the next record, one interval later); the
                next record is due ``interval_seconds`` after it. Default:
                now.
            sync: ``fsync`` the journal afterwards when anything written to it
                is not on disk yet, whatever ``journal_fsync_seconds`` says
                (``close()``: this may be the process's last moment).
        """
        self._last = self.clock() if at is None else at
        journal = self.journal
        if journal.failed:
            return
        if self.superseded is not None and not journal.owner.superseded and self.superseded():
            journal.mark_writer(superseded=True)
        self._record()
        if sync:
            journal.sync()

    def _record(self) -> None:
        journal, recorder = self.journal, self.recorder
        view = recorder.journal_view(self.wall_clock(), self._lengths, self._version)
        if recorder.seeded:
            journal.trim(view.acknowledged)
        if view.version != self._version:
            self._version = view.version
            state = LogState()
            state.reset(Update(view.status, view.details, view.series, False))
            if journal.reset(state, absolute=view.version):
                self.records += 1
            self._lengths = view.lengths
            return
        task = journal.state.task
        changed = {
            k: v
            for k, v in view.details.items()
            if k != "updated_at" and task.details.get(k, _MISSING) != v
        }
        if not view.series and not changed and view.status == task.status:
            return
        changed["updated_at"] = view.details["updated_at"]
        if journal.append(Update(view.status, changed, view.series or None, False)):
            self.records += 1
        self._lengths = view.lengths

    # --- recovery ---------------------------------------------------------------------

    def recover(self, sink: Sink, opened: Opened, timeout_seconds: float | None) -> OpenResult:
        """Send what the journals of dead processes hold, before this process's first send.

        Args:
            sink: the destination, just opened.
            opened: its answer (the stored task).
            timeout_seconds: for each send and re-open.

        Returns:
            the :class:`Opened` to seed the store from (read again after a
            delivery), or the failed result of a send or re-open (the caller
            retries the open later; nothing is lost). A left-over journal that
            cannot be read, or that the destination rejects, is logged
            (``trainreport.journal_recovery_failed``) and left on disk for
            ``trainreport sync``. Never raises.
        """
        self.note_open(opened)
        self._fields_from_older = False
        for path in list(self.journal.left_over):
            result = self._recover_one(sink, opened, path, timeout_seconds)
            if isinstance(result, Opened):
                opened = result
            elif result is not None:
                return result
        return opened

    def note_open(self, opened: OpenResult) -> OpenResult:
        """Learn the generations of an open: ours (the journal says so), and the last writer's.

        The last writer's generation is kept from before this process wrote:
        a left-over it recovered was written under its generation on the
        left-over's behalf, so it never makes the next left-over look older.
        """
        if not isinstance(opened, Opened):
            return opened
        mine = opened.writer_generation
        if mine is not None:
            self._own_generations.add(mine)
            self.journal.mark_writer(generation=mine)
        last = opened.last_writer_generation
        if last is None or last not in self._own_generations:
            self._last_writer = last
        return opened

    def _recover_one(
        self, sink: Sink, opened: Opened, path: Path, timeout_seconds: float | None
    ) -> OpenResult | None:
        """One left-over: the re-opened task, ``None`` (nothing changed) or a failure to return."""
        journal = self.journal
        try:
            run = load_run_file(path)
        except RunLogError as exc:
            if _recorded_nothing(path):  # a process killed before its first record
                _log.info("trainreport.journal_left_over_empty", path=str(path))
                journal.delivered_left_over(path)
                return None
            self._give_up(path, str(exc))  # kept: a newer trainreport may read it
            return None
        except OSError as exc:
            self._give_up(path, f"cannot read it: {describe_exception(exc)}")
            return None
        full_state = CAPABILITY_SERIES_SUFFIX not in opened.capabilities
        for attempt in range(2):
            try:
                plan = plan_recovery(
                    run.state,
                    run.run,
                    opened.stored_task,
                    full_state=full_state,
                    last_writer_generation=self._last_writer,
                    after_older_journal=self._fields_from_older,
                )
            except StaleJournalError as exc:
                self._set_aside_stale(path, str(exc))
                return None
            except SyncError as exc:
                self._give_up(path, str(exc))
                return None
            if plan.update is None:
                journal.delivered_left_over(path)
                return None
            if opened.writer_generation is not None:
                # Said before the send: a kill during it leaves the left-over whose
                # generation wrote the service's last points (the next recovery's rule).
                mark_sent_under(path, opened.writer_generation)
            result = sink.send(plan.update, timeout_seconds=timeout_seconds)
            if isinstance(result, Delivered):
                sent = sum(s.sent for s in plan.series)
                _log.info("trainreport.journal_recovered", path=str(path), points=sent)
                journal.delivered_left_over(path)
                # The next left-over (recorded later here) is newer than these fields.
                self._fields_from_older = plan.details_sent
                return self.note_open(sink.open(timeout_seconds=timeout_seconds))
            if isinstance(result, RetryLater):
                return result
            if isinstance(result, Resynchronise) and not attempt:
                reopened = self.note_open(sink.open(timeout_seconds=timeout_seconds))
                if not isinstance(reopened, Opened):
                    return reopened
                opened = reopened
                continue
            self._give_up(path, getattr(result, "reason", type(result).__name__))
            return None
        return None  # pragma: no cover - the loop returns

    def _set_aside_stale(self, path: Path, reason: str) -> None:
        """A left-over of a superseded or older writer: kept for inspection, never replayed."""
        if path in self.journal.left_over:
            self.journal.left_over.remove(path)
        _log.warning(
            "trainreport.journal_superseded",
            path=str(path),
            reason=reason[:300],
            kept_for="inspection: `trainreport sync --force PATH` uploads it over the newer writer",
        )

    def waiting(self) -> list[tuple[Path, str]]:
        """The left-over journals not delivered, each with why: ``close()`` is never True then.

        Those recovery gave up on, then those not tried yet (the journal's
        destination never opened). Never raises.
        """
        untried = "not recovered yet: the journal's destination did not take it before close()"
        return [*self.given_up, *((path, untried) for path in list(self.journal.left_over))]

    def _give_up(self, path: Path, reason: str) -> None:
        if path in self.journal.left_over:
            self.journal.left_over.remove(path)
        self.given_up.append((path, reason[:300]))
        _log.warning(
            "trainreport.journal_recovery_failed",
            path=str(path),
            reason=reason[:300],
            kept_for="trainreport sync",
        )

    def close(self, *, delivered: bool) -> None:
        """Write what is left, then close; removed when ``delivered``. Never raises."""
        if not delivered:
            self.record()
        self.journal.close(delivered=delivered)
