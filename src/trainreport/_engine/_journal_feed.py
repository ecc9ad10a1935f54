"""JournalKeeper: what the reporter thread writes to its journal, compacts it to, and recovers.

The reporter thread and the journal's destination drive it (``docs/engine.md``,
"The journal in front of a service"):

- :meth:`JournalKeeper.record`, after a drain, at least every
  ``journal_interval_seconds``: one record holding each series' points the
  journal lacks (a suffix at the journal's length) and the task fields that
  changed, written with one ``write()``; a rewind is a suffix from the index
  it cut, in the same record. When the stored task seeded the store (the
  indices become the service's), the journal is rewritten atomically as one
  snapshot instead, once; and so it is, in place of a record, when its file
  has grown past its compaction floor and twice what no destination
  acknowledged (the snapshot holds only that, its points read from the store:
  the journal's state keeps none).
- recovery, scheduled by the engine core like any other request
  (``_engine/_core.py``): after each successful open of the journal's
  destination, before the stored task seeds the store and before the first
  send, the core hands out one request at a time for the journals a dead
  process left, oldest first: the send of one left-over (read, planned
  against the task as last read with
  :func:`trainreport._runlog._plan.plan_recovery`, shared with
  ``trainreport sync``, and sent), or a re-open (the task read again).
  :func:`run_recovery` is a request's I/O, run on the destination's sender;
  :meth:`JournalKeeper.advance` (reporter thread, no I/O) reads its answer and
  says what comes next.
- :meth:`JournalKeeper.close` at the end: the journal is removed when every
  destination holds everything, ``fsync``-ed and kept otherwise.

The record is read through :meth:`Recorder.journal_view` (under the
recorder's lock); the current journal file is touched only by the reporter
thread (the writer generation of each open included: the driver records it
before any send under it), the left-over journals only by :func:`run_recovery`.
"""

from __future__ import annotations

import contextlib
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
from trainreport._runlog._runfile import RunFile, load_run_file
from trainreport._runlog._state import LogState
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Rejected,
    Resynchronise,
    RetryLater,
    SendResult,
    Sink,
    Update,
)
from trainreport.exceptions import RunLogError

__all__ = [
    "JournalKeeper",
    "JournalWatch",
    "RecoveryOutcome",
    "RecoveryStep",
    "journal_identity",
    "run_recovery",
]

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
        #: Points no destination had acknowledged at the last record (a compaction's size).
        self._held = 0
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
        # Compacted only at the service's indices: before the rewrite that gives them, the
        # acknowledged lengths are the service's and the journal's indices its own.
        compact = recorder.seeded and self._version is True and journal.compaction_due(self._held)
        view = recorder.journal_view(self.wall_clock(), self._lengths, self._version, whole=compact)
        self._held = sum(max(n - view.acknowledged.get(k, 0), 0) for k, n in view.lengths.items())
        if view.whole:
            # A rewrite (the stored task was read), or the compaction in place of this
            # record: one snapshot of what no destination acknowledged, the points taken
            # from the store (the journal's state keeps none) and encoded once.
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

    # --- recovery (the core's requests: docs/engine.md, "Recovery") ------------------

    def advance(
        self, step: RecoveryStep | None, result: OpenResult | RecoveryOutcome | None
    ) -> tuple[RecoveryStep | OpenResult, int | None]:
        """The next recovery request after ``step``'s answer, or the open's result to settle.

        Called by the engine core on the reporter thread, for every answer of
        the journal destination's opens and recovery requests; it does no I/O
        (the requests' I/O is :func:`run_recovery`'s, on the sender). Left-overs
        go oldest first; a delivered one is followed by a re-open (the task is
        read again), a ``Resynchronise`` by one re-open and one more send of
        the same left-over; one that cannot be read, is rejected or
        resynchronised twice is given up on (``trainreport.journal_recovery_failed``,
        kept on disk), a stale one set aside (``trainreport.journal_superseded``).

        Args:
            step: the recovery request answered, or ``None`` for an open the
                core handed out itself (a recovery begins with it).
            result: the answer: an open's (:class:`Opened` or a failure), or
                a left-over's send (:class:`RecoveryOutcome`).

        Returns:
            ``(next, generation)``: ``next`` is the next recovery request, or
            the :class:`OpenResult` the core settles as the open (the last
            task read once every left-over is done, or the failure that makes
            the open fail: a ``RetryLater`` backs off like any send's); and
            ``generation`` is the writer generation an open was answered
            under, which the driver records in the journal before any send
            under it (``Journal.mark_writer``), else ``None``. Never raises.
        """
        if step is None or step.reopen:
            if not isinstance(result, Opened):
                if isinstance(result, RetryLater | Rejected):
                    return result, None
                return RetryLater(f"unexpected answer to an open: {type(result).__name__}"), None
            generation = self._learn_open(result)
            if step is None:
                self._fields_from_older = False
            elif step.path is not None:  # after a Resynchronise: the same left-over once more
                again = attrs.evolve(
                    step,
                    reopen=False,
                    opened=result,
                    resynchronised=True,
                    last_writer=self._last_writer,
                    after_older=self._fields_from_older,
                )
                return again, generation
            return self._next(result), generation
        path, opened = step.path, step.opened
        assert isinstance(result, RecoveryOutcome)
        assert path is not None
        assert opened is not None
        self._done_with(path)
        if result.empty:
            _log.info("trainreport.journal_left_over_empty", path=str(path))
        elif result.gave_up is not None:
            self._give_up(path, result.gave_up)
        elif result.stale is not None:
            self._set_aside_stale(path, result.stale)
        elif isinstance(result.sent, Delivered):
            _log.info("trainreport.journal_recovered", path=str(path), points=result.points)
            # The next left-over (recorded later here) is newer than these fields.
            self._fields_from_older = result.details_sent
            return self._reopen(None, None), None
        elif isinstance(result.sent, RetryLater):
            self.journal.left_over.insert(0, path)  # still waiting: tried first at the next open
            return result.sent, None
        elif isinstance(result.sent, Resynchronise) and not step.resynchronised:
            self.journal.left_over.insert(0, path)
            return self._reopen(path, result.run), None
        elif result.sent is not None:
            self._give_up(path, getattr(result.sent, "reason", type(result.sent).__name__))
        return self._next(opened), None

    def _next(self, opened: Opened) -> RecoveryStep | Opened:
        """The send of the oldest left-over not done yet, or ``opened`` when none is left."""
        left = self.journal.left_over
        if not left:
            return opened
        return RecoveryStep(
            journal=self.journal,
            path=left[0],
            opened=opened,
            last_writer=self._last_writer,
            after_older=self._fields_from_older,
        )

    def _reopen(self, path: Path | None, run: RunFile | None) -> RecoveryStep:
        """A re-open; then ``path`` once more (after a ``Resynchronise``), or the next left-over."""
        return RecoveryStep(
            journal=self.journal,
            path=path,
            reopen=True,
            run=run,
            last_writer=self._last_writer,
            after_older=self._fields_from_older,
        )

    def _done_with(self, path: Path) -> None:
        with contextlib.suppress(ValueError):
            self.journal.left_over.remove(path)

    def _learn_open(self, opened: Opened) -> int | None:
        """Learn an open's generations: ours (returned, for the journal), and the last writer's.

        The last writer's generation is kept from before this process wrote:
        a left-over it recovered was written under its generation on the
        left-over's behalf, so it never makes the next left-over look older.
        """
        mine = opened.writer_generation
        if mine is not None:
            self._own_generations.add(mine)
        last = opened.last_writer_generation
        if last is None or last not in self._own_generations:
            self._last_writer = last
        return mine

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


@attrs.frozen(eq=False)
class RecoveryStep:
    """One request of journal recovery, handed out by the engine core (``docs/engine.md``).

    Either the send of one left-over (``path``, planned against ``opened``)
    or a re-open (``reopen``: after a delivery, ``path`` ``None``; after a
    ``Resynchronise``, the left-over to send once more, with the file as
    first read, ``run``). Made on the reporter thread, run by
    :func:`run_recovery` on the destination's sender.

    Attributes:
        journal: the journal whose left-over it is (a delivered one is removed).
        path: the left-over journal, or ``None`` (a re-open after a delivery).
        reopen: the request is an ``open()``.
        opened: the task as last read (the plan's base), for a send.
        run: the left-over as read before its first send (its generation is
            the one it had before ``mark_sent_under``), or ``None``.
        last_writer: the task's last writer generation before this process wrote.
        after_older: the service's task fields were sent by this recovery from
            an older left-over.
        resynchronised: a send of this left-over was answered ``Resynchronise``.
    """

    journal: Journal
    path: Path | None
    reopen: bool = False
    opened: Opened | None = None
    run: RunFile | None = None
    last_writer: int | None = None
    after_older: bool = False
    resynchronised: bool = False


@attrs.frozen
class RecoveryOutcome:
    """What the send of one left-over found (:func:`run_recovery`, on the sender thread).

    Attributes:
        sent: the destination's answer, or ``None`` when nothing was sent.
        points: the points the plan sent.
        details_sent: the plan sent the journal's task fields.
        empty: the left-over recorded nothing (a process killed before its first record).
        gave_up: why it cannot be delivered (unreadable, refused by the plan).
        stale: why it is a superseded or older writer's (never replayed).
        run: the left-over as read (kept for a send again after a ``Resynchronise``).
    """

    sent: SendResult | None = None
    points: int = 0
    details_sent: bool = False
    empty: bool = False
    gave_up: str | None = None
    stale: str | None = None
    run: RunFile | None = None


def run_recovery(
    step: RecoveryStep, sink: Sink, timeout_seconds: float | None
) -> OpenResult | RecoveryOutcome:
    """Perform one recovery request: its I/O, on the destination's sender thread.

    A re-open is ``sink.open()``. A send reads the left-over (unless it was
    read already), plans it against the task as last read
    (:func:`~trainreport._runlog._plan.plan_recovery`, pure), records in it the
    generation it is sent under (``mark_sent_under``, before the send: a kill
    during it leaves the left-over whose generation wrote the service's last
    points), sends the update, and removes the file once delivered (also one
    with nothing to send, or that recorded nothing). What the answer means is
    the core's (:meth:`JournalKeeper.advance`).

    Raises:
        Exception: what the sink raised (the sender settles it as an error).
    """
    if step.reopen:
        return sink.open(timeout_seconds=timeout_seconds)
    path, opened, journal = step.path, step.opened, step.journal
    assert path is not None
    assert opened is not None
    run = step.run
    if run is None:
        try:
            run = load_run_file(path)
        except RunLogError as exc:
            if _recorded_nothing(path):
                journal.delivered_left_over(path)
                return RecoveryOutcome(empty=True)
            return RecoveryOutcome(gave_up=str(exc))  # kept: a newer trainreport may read it
        except OSError as exc:
            return RecoveryOutcome(gave_up=f"cannot read it: {describe_exception(exc)}")
    try:
        plan = plan_recovery(
            run.state,
            run.run,
            opened.stored_task,
            full_state=CAPABILITY_SERIES_SUFFIX not in opened.capabilities,
            last_writer_generation=step.last_writer,
            after_older_journal=step.after_older,
        )
    except StaleJournalError as exc:
        return RecoveryOutcome(stale=str(exc))
    except SyncError as exc:
        return RecoveryOutcome(gave_up=str(exc))
    if plan.update is None:
        journal.delivered_left_over(path)
        return RecoveryOutcome()
    if opened.writer_generation is not None:
        mark_sent_under(path, opened.writer_generation)
    result = sink.send(plan.update, timeout_seconds=timeout_seconds)
    if isinstance(result, Delivered):
        journal.delivered_left_over(path)
    return RecoveryOutcome(
        sent=result,
        points=sum(s.sent for s in plan.series),
        details_sent=plan.details_sent,
        run=run,
    )
