"""The engine core: what to do next for each destination, with no thread, no clock and no I/O.

The reporter thread's driver (``_engine/_worker.py``) owns the thread, reads the
clocks and calls the sinks; every decision it acts on is made here, by one
:class:`EngineCore`, in one of three regimes (:class:`Regime`):

- **running**: a destination gets a request when its scheduler says a send
  is due (``_engine/_scheduler.py``): an open when it is not open, else a send of the
  update built under the recorder's lock;
- **flushing**: a ``flush()`` waits (:class:`FlushRequests`): each destination
  is sent to now, even inside the debounce or a backoff, but never before a
  delay it asked for (``Retry-After``) nor inside its own floor between
  requests; a flush's resends after a failure follow the backoff;
- **closing**: ``close()`` gave a real-time deadline (:meth:`EngineCore.close`):
  each destination is retried with a capped backoff (:func:`close_wait`) until
  it holds everything, its deadline has passed, or one last attempt made
  shortly before the deadline failed. A destination that never answered (a
  wrong URL) gets a short deadline of its own (``close_unanswered_seconds``).

Time comes in as arguments: ``now`` is the scheduling clock (injectable,
``Reporter(clock=...)``); ``real`` is ``time.monotonic`` while closing, because
``close(timeout)`` bounds real process exit. A request is a
:class:`~trainreport._engine._destination.Job` the core hands out (its timeout, while
closing, never ends after the destination's deadline); the driver runs it
through the destination's sink and hands it back to :meth:`EngineCore.settle`.
While the journal's destination delivers what dead processes left, its
requests are recovery's (:attr:`EngineCore.recovery`: a left-over's send, a
re-open), handed out and settled like any other, their answers read by
``JournalKeeper.advance`` (docs/engine.md, "Recovery").
A destination that falls behind (lacks more than a million points) warns,
once per threshold (:meth:`EngineCore.check_behind`, ``_engine/_behind.py``).
The answers are settled by the pure rules of ``_engine/_destination.py``; the resume
decision is ``_engine/_resume.py``'s; how long the thread may sleep is
:meth:`EngineCore.next_wait` (running) and :meth:`EngineCore.close_wait_seconds`
(closing). The rules are in docs/engine.md ("Closing", "Flushing").

Thread-safety: :meth:`FlushRequests.request` runs on any thread; everything
else on the reporter thread.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence

import attrs

from trainreport._engine._behind import BEHIND_WARNING_POINTS, LagWatch
from trainreport._engine._destination import (
    MAX_FLOOR_SECONDS,
    Destination,
    Job,
    sending,
    settle_error,
    settle_open,
    settle_send,
    thin_ahead,
)
from trainreport._engine._journal_feed import RecoveryOutcome, RecoveryStep
from trainreport._engine._resume import Resume
from trainreport._engine._scheduler import SendScheduler
from trainreport._record._recorder import Recorder
from trainreport._reporting_config import ReportingConfig
from trainreport._wire._sink_interface import Delivered, Opened, RetryLater

__all__ = [
    "BACKLOG_SEND_POINTS",
    "THINNED_BACKLOG_BODIES",
    "LAST_ATTEMPT_LEAD_SECONDS",
    "MIN_JOURNAL_WAIT_SECONDS",
    "MIN_TIMEOUT_SECONDS",
    "Answer",
    "CloseState",
    "EngineCore",
    "FlushRequests",
    "Regime",
    "close_wait",
    "last_attempt_lead",
    "next_wait",
]

#: A destination that takes suffixes (the reference server, a run log) and lacks at
#: least this many points is sent to without waiting for the debounce (never inside
#: its floor, a backoff or a Retry-After): the points it has not acknowledged are
#: what the store must keep in memory (docs/engine.md, "Memory"), so memory stays
#: bounded however fast the loop reports (about 28 MB of columns at 28 B a point).
BACKLOG_SEND_POINTS = 100_000
#: A full-state destination is exempt from that rule (each send carries every point:
#: sending it more often would cost the square of the run) until it is thinned: a
#: thinned body carries at most its budget a series whatever the run's length, so it
#: is sent to once it lacks this many thinned bodies' worth of points (and at least
#: ``BACKLOG_SEND_POINTS``): at about 1.6 µs to encode a body's point, the bodies
#: then cost at most a tenth of a microsecond a point recorded (docs/engine.md, "Memory").
THINNED_BACKLOG_BODIES = 16

#: While closing, the last attempt starts at least this long (seconds) before the
#: deadline (a quarter of ``close_retry_max_seconds`` when that is longer), or
#: half the time left when less remains.
LAST_ATTEMPT_LEAD_SECONDS = 0.1
#: While closing, no request is started with less than this (real seconds) left to
#: its deadline: its timeout is the time left, and shorter ones cannot complete.
MIN_TIMEOUT_SECONDS = 0.001
#: The longest single wait of the reporter thread (a day): bounded so that a huge
#: configured interval never overflows ``Event.wait``.
_MAX_SLEEP_SECONDS = MAX_FLOOR_SECONDS
#: The shortest wait of the reporter thread, seconds (a zero interval never spins).
_MIN_SLEEP_SECONDS = 0.05
#: The shortest wait between two journal records (seconds): a journal interval of 0
#: means a record at every wake, never a busy loop.
MIN_JOURNAL_WAIT_SECONDS = 0.001


def _count_left_over_send(dest: Destination, job: Job) -> None:
    """A left-over's send (a recovery request) in ``dest``'s figures, as ``stats()`` shows them.

    A request when the sink was asked (or the request raised), its bytes when
    delivered, and a failure when it was refused or resynchronised; none when
    nothing was sent (the left-over recorded nothing, held nothing the
    service lacked, could not be read or is stale). A ``RetryLater`` or an
    error is counted as a failure where the core settles it (it fails the
    open: ``settle_open``, ``settle_error``). Re-opens are counted when handed
    out, as every open is. Never raises.
    """
    if job.error is not None:
        dest.requests_sent += 1
        return
    outcome = job.result
    if not isinstance(outcome, RecoveryOutcome) or outcome.sent is None:
        return
    dest.requests_sent += 1
    sent = outcome.sent
    if isinstance(sent, Delivered):
        dest.bytes_sent += sent.bytes_sent
    elif not isinstance(sent, RetryLater):
        dest.requests_failed += 1


class Regime(enum.Enum):
    """Which rules decide the next request (see the module docstring)."""

    RUNNING = "running"
    FLUSHING = "flushing"
    CLOSING = "closing"


@attrs.frozen
class Answer:
    """What a settled request asks of the driver.

    Args:
        delivered: a send was delivered (or an open succeeded).
        cancel: the destination asks the run to stop (set ``cancel_requested``).
        drain: move the queue into the recorder now (after a first open, what
            waited for the stored task goes with the first send; while closing,
            after each delivery, what was reported meanwhile).
        writer_generation: the journal destination's open was answered under
            this writer generation: the driver records it in the journal
            (``Journal.mark_writer``) before any send under it, else ``None``.
    """

    delivered: bool
    cancel: bool = False
    drain: bool = False
    writer_generation: int | None = None


class FlushRequests:
    """The ``flush()`` calls waiting for delivery, and the send each asked of each destination.

    Args:
        destinations: how many destinations the reporter sends to.
    """

    def __init__(self, destinations: int) -> None:
        self._waiters: list[threading.Event] = []
        #: Per destination: a flush() asked for a send that has not been made yet.
        self._requested = [False] * destinations
        self._lock = threading.Lock()

    def request(self) -> threading.Event:
        """Ask every destination for a send now; the event is set once all is delivered."""
        done = threading.Event()
        with self._lock:
            self._waiters.append(done)
            self._requested = [True] * len(self._requested)
        return done

    @property
    def waiting(self) -> bool:
        """A ``flush()`` waits for delivery (its sends also carry the curves)."""
        return bool(self._waiters)

    def wants_a_send(
        self, dest: Destination, now: float, has_changes: Callable[[int], bool]
    ) -> bool:
        """A flush is waiting and may send to ``dest`` at ``now`` (scheduling clock, seconds).

        Args:
            dest: the destination (no request of its may be in flight).
            now: the scheduling clock's time.
            has_changes: whether destination ``d`` has something unsent.
        """
        flushing = self._requested[dest.index]
        if dest.job is not None or not (flushing or self._waiters):
            return False
        if dest.waits_for_seed:
            return False  # nothing can be sent to it yet; the request stays for later
        scheduler = dest.scheduler
        if scheduler.not_before is not None and now < scheduler.not_before:
            return False  # Retry-After is honoured even by flush()
        if not scheduler.gap_allows(now):
            return False  # so is the destination's own floor between requests
        if flushing:
            return True
        if scheduler.consecutive_failures:
            return False  # our own backoff applies to the resends of a flush
        return has_changes(dest.index)

    def wants_any_send(
        self, destinations: list[Destination], now: float, has_changes: Callable[[int], bool]
    ) -> bool:
        """:meth:`wants_a_send` for any of ``destinations`` (no request of theirs in flight)."""
        if not self._waiters and not any(self._requested):
            return False
        return any(self.wants_a_send(d, now, has_changes) for d in destinations if d.job is None)

    def sent(self, dest: Destination) -> None:
        """The send a flush asked of ``dest`` is being made."""
        self._requested[dest.index] = False

    def release(self) -> None:
        """Wake every waiting ``flush()`` (everything is delivered, or the thread ends)."""
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.set()


def next_wait(
    now: float,
    destinations: list[Destination],
    *,
    interval: float,
    flush_now: bool,
    journal_due: float | None,
    seed_due: float | None = None,
) -> float:
    """Seconds until the reporter thread's next cycle is due (it is woken earlier by events).

    The thread wakes at least once per debounce interval to look at the queue:
    the training thread does not signal ordinary reports
    (docs/design.md#public-api). A local run log's shorter interval counts (it
    is sent to that often).

    Args:
        now: the scheduling clock's time (seconds).
        destinations: the reporter's destinations.
        interval: the configured debounce interval (seconds).
        flush_now: a waiting ``flush()`` may send now to a destination with no
            request in flight (the thread does not sleep).
        journal_due: when the journal's next record is due (scheduling clock),
            ``None`` without a journal.
        seed_due: when the store is seeded without waiting any longer for a
            first open in flight (scheduling clock), ``None`` when it is seeded
            or no open succeeded yet. A destination waiting for the seed
            (:attr:`Destination.waits_for_seed`) sets no wake of its own: it
            can be sent to only then, or when that open ends (its sender
            wakes the thread), so its overdue send is never a busy loop.
    """
    if flush_now:
        return 0.0
    shortest = min(interval, *(d.scheduler.min_interval for d in destinations))
    wait = min(max(shortest, _MIN_SLEEP_SECONDS), _MAX_SLEEP_SECONDS)
    for dest in destinations:
        if dest.job is not None or dest.waits_for_seed:
            continue  # its sender (or the seed decision) wakes the thread
        due = dest.due_at()
        if due is not None:
            wait = min(wait, max(due - now, 0.0))
    if journal_due is not None:
        wait = min(wait, max(journal_due - now, MIN_JOURNAL_WAIT_SECONDS))
    if seed_due is not None:
        wait = min(wait, max(seed_due - now, 0.0))
    return wait


def last_attempt_lead(cap: float, remaining: float) -> float:
    """How long (seconds) before its deadline a close's last attempt starts, to have time to end.

    :data:`LAST_ATTEMPT_LEAD_SECONDS`, or a quarter of ``cap``
    (``close_retry_max_seconds``) when that is longer, but never more than half
    of ``remaining`` (real seconds left to the deadline). The one definition of
    "what the close needs to deliver": :func:`close_wait` starts the last
    attempt this long before the deadline, and the seed of a resume stops
    waiting for first opens in flight by then (:meth:`EngineCore.seed_if_decided`).
    Never raises.
    """
    return min(max(cap / 4, LAST_ATTEMPT_LEAD_SECONDS), max(remaining, 0.0) / 2)


def close_wait(
    scheduler: SendScheduler, now: float, remaining: float, cap: float
) -> tuple[float, bool]:
    """Seconds to wait before the next attempt while closing, and whether it is the last.

    The backoff is capped at ``cap`` (``close_retry_max_seconds``); a delay the
    destination asked for (``Retry-After``) is honoured, but never past one
    last attempt made shortly before the deadline, so a destination that comes
    back within the deadline still receives everything. The destination's own
    floor between requests (``Sink.min_interval_seconds``) always holds.

    Args:
        scheduler: the destination's scheduler (read only).
        now: the scheduling clock's time (seconds).
        remaining: real seconds left to the destination's close deadline.
        cap: the longest wait between two attempts (seconds).

    Returns:
        ``(wait, last)``: the wait in seconds (never past the deadline), and
        whether the attempt after it is the last one.
    """
    due = scheduler.due_at()
    backoff = 0.0 if due is None else max(due - now, 0.0)
    asked = 0.0 if scheduler.not_before is None else max(scheduler.not_before - now, 0.0)
    wait = max(min(backoff, cap), asked)
    lead = last_attempt_lead(cap, remaining)
    last = wait >= remaining - lead
    if last:
        wait = max(remaining - lead, 0.0)
    # The destination's own floor between requests holds even for the last
    # attempt: when it ends past the deadline, no attempt is left.
    gap = scheduler.min_request_gap
    if gap > 0 and scheduler.last_attempt is not None:
        wait = max(wait, scheduler.last_attempt + gap - now)
        last = last or wait >= remaining
    return min(wait, max(remaining, 0.0)), last


class CloseState:
    """One destination's progress through ``close()`` (real-time seconds)."""

    __slots__ = ("attempted", "done", "last", "next_at")

    def __init__(self) -> None:
        #: close() made an attempt (only its first skips the destination's floor).
        self.attempted = False
        #: The next attempt is the last one before the deadline.
        self.last = False
        #: Nothing more is tried for this destination.
        self.done = False
        #: The real time (``time.monotonic``) of the next step.
        self.next_at = 0.0


@attrs.define(eq=False)
class _Closing:
    """The closing regime's inputs and each destination's progress."""

    deadline: float
    started: float
    unanswered: float
    #: The longest wait between two attempts (``close_retry_max_seconds``).
    cap: float
    states: list[CloseState]

    def deadline_for(self, dest: Destination, *, recovering: bool = False) -> float:
        """The deadline closing works to: the whole one, or a short one for a wrong URL.

        ``recovering``: the destination opened and delivers left-over journals
        (it answered, though its open is not settled yet).
        """
        if dest.answered or recovering:
            return self.deadline
        return min(self.deadline, self.started + self.unanswered)

    def seed_by(self, destinations: list[Destination], *, recovering: int | None = None) -> float:
        """The real time until which the seed of a resume waits for first opens in flight.

        The time of the close's last attempt (the deadline less
        :func:`last_attempt_lead`), so that every destination that opened is
        still sent everything in time; and no later than the deadline of a
        destination whose first open has not ended (it never answered: the
        close stops trying it then, so nothing is sent to it after, and none
        of its stored points can be replaced). The journal's destination
        while it recovers (index ``recovering``) opened: it keeps the whole
        deadline (:meth:`deadline_for`). docs/engine.md, "Resume, across
        destinations".
        """
        whole = self.deadline - last_attempt_lead(self.cap, self.deadline - self.started)
        pending = [
            self.deadline_for(d, recovering=d.index == recovering)
            for d in destinations
            if not d.first_open_ended
        ]
        return min(whole, max(pending, default=whole))


class EngineCore:
    """Decides each destination's next request, settles its answers, and says how long to wait.

    Args:
        recorder: the attempt's state.
        destinations: the reporter's destinations, in order.
        config: the intervals, the close retry cap and the unanswered deadline.
        resume: the seed decision of the attempt (and its journal, which the
            driver keeps).
        wall_clock: the ``updated_at`` stamp of each update built (a stamp
            source, not read for any decision).
        backlog_send_points: the points a suffix-mode destination may lack
            before it is sent to inside the debounce (:data:`BACKLOG_SEND_POINTS`).
        behind_points: the points a destination may lack before it warns
            (``trainreport.destination_behind``), once per threshold
            (``_engine/_behind.py``'s ``BEHIND_WARNING_POINTS``).
        journal_destination: the index of the destination the journal (if
            any, ``resume.journal``) is kept for: its opens are followed by
            the recovery of what dead processes left (docs/engine.md, "Recovery").

    Owned by the reporter thread (the driver); see the module docstring.
    """

    def __init__(
        self,
        *,
        recorder: Recorder,
        destinations: list[Destination],
        config: ReportingConfig,
        resume: Resume,
        wall_clock: Callable[[], str],
        backlog_send_points: int = BACKLOG_SEND_POINTS,
        behind_points: Sequence[int] = BEHIND_WARNING_POINTS,
        journal_destination: int = 0,
    ) -> None:
        self.recorder = recorder
        self.destinations = destinations
        self.backlog_send_points = backlog_send_points
        #: Which destinations fell how far behind (``trainreport.destination_behind``).
        self.lag = LagWatch(len(destinations), behind_points)
        self.config = config
        self.resume = resume
        self.wall_clock = wall_clock
        self.flush = FlushRequests(len(destinations))
        #: An open failed (with a journal, reports are drained from then on).
        self.open_failed = False
        self.journal_destination = journal_destination
        #: The next recovery request of the journal destination (its open succeeded and
        #: left-over journals wait), or ``None``: handed out instead of a new open.
        self.recovery: RecoveryStep | None = None
        self._closing: _Closing | None = None

    @property
    def regime(self) -> Regime:
        """The rules in force: closing once :meth:`close` was called, flushing while one waits."""
        if self._closing is not None:
            return Regime.CLOSING
        return Regime.FLUSHING if self.flush.waiting else Regime.RUNNING

    # --- inputs -------------------------------------------------------------------

    def begin(self, now: float) -> None:
        """The attempt begins at ``now``: the task machine starts, every first open is due."""
        self.recorder.start_attempt()
        for dest in self.destinations:
            dest.scheduler.note_change(now, urgent=True)

    def drained(self, now: float, *, urgent: bool, first_point: bool) -> None:
        """Reports were applied at ``now``: every destination has something new to send."""
        for dest in self.destinations:
            dest.scheduler.note_change(now, urgent=urgent, first_point=first_point)

    def close(self, *, deadline: float, started: float) -> None:
        """Enter the closing regime: all by ``deadline`` (real s), begun at ``started``.

        Requests already in flight are settled under the closing rules.
        """
        self._closing = _Closing(
            deadline=deadline,
            started=started,
            unanswered=self.config.close_unanswered_seconds,
            cap=self.config.close_retry_max_seconds,
            states=[CloseState() for _ in self.destinations],
        )

    def seed_if_decided(
        self, now: float, *, real: float | None = None, patient: bool = False
    ) -> None:
        """Seed the store once the resume rule can decide (``_resume.py``).

        Running, a first open in flight holds the seed back one debounce
        interval after the first successful open; closing, until the real
        time ``_Closing.seed_by`` gives from the deadline.

        Args:
            now: the scheduling clock's time (seconds).
            real: real time (``time.monotonic``, seconds), while closing; without
                it a closing core waits on for first opens in flight.
            patient: wait for every first open (right after one ended).
        """
        if self.recorder.seeded:
            return
        closing = self._closing
        if closing is None:
            self.resume.seed_if_decided(
                self.destinations, self.recorder, now, closing_late=None, patient=patient
            )
            return
        late = real is not None and real >= closing.seed_by(
            self.destinations, recovering=self._recovering_index()
        )
        waiting = [d for d in self.destinations if d.waits_for_seed]
        pending = [d for d in self.destinations if not d.first_open_ended]
        self.resume.seed_if_decided(
            self.destinations, self.recorder, now, closing_late=late, patient=patient
        )
        if all(d.waits_for_seed for d in waiting):
            return  # not seeded yet (seeding ends every destination's wait)
        for dest in waiting:  # seeded: told to look again later, each is sent to now
            closing.states[dest.index].next_at = 0.0 if real is None else real
        for dest in pending:
            # Seeded without it (the bound passed with its first open, or its recovery, in
            # flight): were it sent to when it answers, the store it did not seed would
            # replace what it holds. Nothing more goes to it in this close; its points stay
            # there, and the run's are in the journal (docs/engine.md, "Resume, across
            # destinations").
            closing.states[dest.index].done = True

    def check_behind(self, now: float) -> None:
        """Running or flushing: warn once per threshold for a destination that fell behind.

        A destination lacking more than each of ``behind_points`` points (in the
        store, so in memory) gets one ``trainreport.destination_behind``, and one
        ``trainreport.destination_caught_up`` once it lacks fewer than the first
        again (:class:`~trainreport._engine._behind.LagWatch`; docs/engine.md,
        "Memory"). ``now`` is the scheduling clock (seconds). The driver asks
        at every pass, right after the drain. Never raises.
        """
        keeper = self.resume.journal
        journal = None
        if keeper is not None and not keeper.journal.failed:
            journal = str(keeper.journal.paths.current)
        self.lag.check(
            self.destinations,
            self.recorder,
            now,
            journal=journal,
            journal_destination=self.journal_destination,
        )

    def cycle_failed(self, exc: Exception, now: float) -> None:
        """The engine raised during a pass: every destination not in flight backs off."""
        for dest in self.destinations:
            if dest.job is None:
                settle_error(dest, exc, now)

    # --- what to send -------------------------------------------------------------

    def running_request(self, dest: Destination, now: float) -> Job | None:
        """Running or flushing: the request to start now for ``dest``, or ``None``.

        A waiting ``flush()`` forces one send (and its sends carry the curves);
        a destination lacking its backlog (:meth:`backlog_points`) is due at
        once with the curves, within its floor, backoff and Retry-After. A
        full-state destination whose state outgrew its stated body limit is
        thinned here, as it outgrows it, not at its next send (``thin_ahead``):
        its backlog then applies, so a fast loop's first debounce interval
        does not fill the store.
        """
        flush = self.flush
        forced = flush.wants_a_send(dest, now, self.recorder.has_changes)
        if forced:
            flush.sent(dest)
            dest.scheduler.note_change(now, urgent=True)
        elif dest.job is None:
            if dest.full_state and dest.in_step:
                thin_ahead(dest, self.recorder)  # outgrew a stated limit: thinned from now on
            backlog = self.backlog_points(dest)
            if backlog is not None and self.recorder.unsent_points(dest.index) >= backlog:
                dest.scheduler.note_change(now, curves=True)  # it holds memory
        if dest.job is not None or not (forced or dest.is_due(now)):
            return None
        return self._request(dest, now, closing=False, complete=flush.waiting, timeout=None)

    def backlog_points(self, dest: Destination) -> int | None:
        """The points ``dest`` may lack before it is sent to inside the debounce (``None``: never).

        A series-suffix destination: ``backlog_send_points``. A thinned
        full-state one: :data:`THINNED_BACKLOG_BODIES` bodies of its budget a
        series, at least ``backlog_send_points``. Any other full-state one is
        sent every point each time, and one that refused even the thinnest
        curves is sent none: never (docs/engine.md, "Memory").
        """
        if dest.suffix_mode:
            return self.backlog_send_points
        recorder = self.recorder
        budget = recorder.thinned_to(dest.index)
        if budget is None or recorder.metrics_refused(dest.index):
            return None
        bodies = THINNED_BACKLOG_BODIES * budget * recorder.series_count()
        return max(self.backlog_send_points, bodies)

    def close_request(
        self, dest: Destination, now: float, real: float, *, queue_empty: bool
    ) -> Job | None:
        """Closing: the request to start now for ``dest``, or ``None`` (nothing now).

        Args:
            dest: the destination.
            now: the scheduling clock's time (seconds).
            real: real time (``time.monotonic``, seconds), the deadline's clock.
            queue_empty: no report waits in the queue.

        The request's timeout is the real time left to the destination's
        deadline, so it never ends after it; no request starts with less than
        :data:`MIN_TIMEOUT_SECONDS` left.
        """
        closing = self._closing
        assert closing is not None
        state = closing.states[dest.index]
        if state.done:
            return None
        deadline = self._deadline_for(closing, dest)
        if dest.job is not None:
            if real >= deadline:
                state.done = True  # a request still in flight at the deadline
            else:
                state.next_at = deadline
            return None
        if deadline - real < MIN_TIMEOUT_SECONDS or self._holds_everything(dest, queue_empty):
            state.done = True
            return None
        if real < state.next_at:
            return None
        scheduler = dest.scheduler
        if state.attempted and not scheduler.gap_allows(now):
            # Only close()'s first send skips the destination's floor.
            floor_at = (scheduler.last_attempt or now) + scheduler.min_request_gap
            state.next_at = real + max(floor_at - now, 0.0)
            return None
        if dest.waits_for_seed:
            # Waiting for another destination's first open to decide the resume: that
            # open's answer wakes the driver (and seeding makes this due at once); at the
            # bound, the driver's pass seeds (seed_if_decided), drains what waited in the
            # queue, and this goes.
            state.next_at = closing.seed_by(self.destinations, recovering=self._recovering_index())
            return None
        state.attempted = True
        timeout = None if deadline == float("inf") else deadline - real
        try:
            job = self._request(dest, now, closing=True, complete=False, timeout=timeout)
        except Exception as exc:  # building raised: the backoff, as while running
            settle_error(dest, exc, now)
            job = None
        if job is None:
            self._after_attempt(dest, False, now, real)
        return job

    def follow_up(self, dest: Destination, job: Job, now: float, real: float) -> Job | None:
        """The send of the attempt ``job`` (an open) began, when its answer came within it.

        An attempt is an open, then, once the destination is open and in step
        with the store, the send. With a sender thread the open's answer comes
        in a later pass, and the send waits for its turn (:meth:`running_request`,
        :meth:`close_request`).
        """
        if job.build is not None or dest.job is not None:
            return None
        if not dest.in_step and self._recovering(dest) is None:
            return None
        timeout = None
        if job.closing:
            closing = self._closing
            assert closing is not None
            deadline = self._deadline_for(closing, dest)
            if deadline - real < MIN_TIMEOUT_SECONDS:
                return None
            timeout = None if deadline == float("inf") else deadline - real
        return self._request(dest, now, closing=job.closing, complete=job.complete, timeout=timeout)

    def _request(
        self,
        dest: Destination,
        now: float,
        *,
        closing: bool,
        complete: bool,
        timeout: float | None,
    ) -> Job | None:
        """Open ``dest`` when it is not open, else build its update; ``None`` when nothing can go.

        A superseded destination (a later attempt owns the task) gets no
        request: nothing it is sent can be accepted (``docs/engine.md``); one
        waiting for the seed gets no send. While the journal destination
        delivers left-over journals (:attr:`recovery`), its requests are
        recovery's, with the same timeouts, backoff and deadlines.
        """
        if dest.superseded:
            return None
        if not dest.is_open:
            step = self._recovering(dest)
            if step is None or step.reopen:
                dest.requests_sent += 1  # reading the stored task is a request too
            job = Job(None, recovery=step, closing=closing, complete=complete, timeout=timeout)
        else:
            recorder = self.recorder
            if not recorder.seeded or not dest.in_step:
                return None  # a destination earlier in the list has not answered its first open
            include = dest.scheduler.carries_metrics(
                now, full_state=dest.full_state, closing=closing, complete=complete
            )
            if include and dest.full_state:
                thin_ahead(dest, recorder)  # before a body that cannot fit is built
            build = recorder.build_update(
                dest.index,
                wall=self.wall_clock(),
                full_state=dest.full_state,
                include_metrics=include,
            )
            dest.requests_sent += 1
            sending(dest)  # the first send since adopt() replaces what it found
            job = Job(
                build, include_metrics=include, closing=closing, complete=complete, timeout=timeout
            )
        dest.job = job
        return job

    # --- answers ------------------------------------------------------------------

    def settle(
        self,
        dest: Destination,
        now: float,
        real: float,
        *,
        queue_empty: bool,
        within_attempt: bool = False,
    ) -> Answer | None:
        """Apply the answer of ``dest``'s request, if it ended; ``None`` when none ended.

        Args:
            dest: the destination.
            now: the scheduling clock's time (seconds).
            real: real time (seconds), for the closing regime's next step.
            queue_empty: no report waits in the queue (nothing left out of a send).
            within_attempt: the answer came within the attempt that started the
                request (no sender thread): an open that succeeded is followed
                by its send (:meth:`follow_up`), not by a new attempt.
        """
        job = dest.job
        if job is None or not job.done:
            return None
        dest.job = None
        if job.recovery is not None and not job.recovery.reopen:
            _count_left_over_send(dest, job)
        opening = job.build is None
        result = job.result
        generation = None
        keeper = self.resume.journal
        journals = keeper is not None and dest.index == self.journal_destination
        if job.error is not None and journals:
            self.recovery = None  # the open failed: the next one begins the recovery again
        elif opening and keeper is not None and journals:
            # An open (or a recovery request) of the journal's destination: what dead
            # processes left goes first, one request at a time (docs/engine.md, "Recovery").
            following, generation = keeper.advance(job.recovery, result)  # type: ignore[arg-type]
            if isinstance(following, RecoveryStep):
                self.recovery = following
                if self._closing is not None:
                    self._closing.states[dest.index].next_at = real  # it goes on at once
                return Answer(delivered=False, writer_generation=generation)
            self.recovery = None
            result = following
        if job.error is not None:
            settle_error(dest, job.error, now, opening=opening)
            self.open_failed = self.open_failed or opening
            answer = Answer(delivered=False)
        elif opening:
            settled = settle_open(dest, self.recorder, result, now)  # type: ignore[arg-type]
            self.open_failed = self.open_failed or not isinstance(result, Opened)
            self.seed_if_decided(now, real=real, patient=True)
            answer = Answer(
                delivered=settled.delivered,
                drain=settled.delivered,
                writer_generation=generation,
            )
        else:
            settled = settle_send(
                dest,
                self.recorder,
                job,
                job.result,  # type: ignore[arg-type]
                now,
                wall=self.wall_clock(),
                queue_empty=queue_empty,
            )
            delivered = settled.delivered
            closing = self._closing is not None
            answer = Answer(delivered=delivered, cancel=settled.cancel, drain=delivered and closing)
        if self._closing is not None:
            if within_attempt and opening and answer.delivered:
                if not dest.in_step:  # opened; the resume is decided after this pass
                    self._closing.states[dest.index].next_at = real
            else:
                self._after_attempt(dest, answer.delivered, now, real)
        return answer

    def _after_attempt(self, dest: Destination, delivered: bool, now: float, real: float) -> None:
        """Closing: after an attempt, when the next one is (or that none is left)."""
        closing = self._closing
        assert closing is not None
        state = closing.states[dest.index]
        if delivered:
            state.last = False
            state.next_at = 0.0
            return
        if state.last:
            state.done = True  # the last attempt failed
            return
        if dest.due_at() is None:  # rejected or superseded: the same data will not be taken
            state.done = True
            return
        remaining = self._deadline_for(closing, dest) - real
        wait, state.last = close_wait(
            dest.scheduler, now, remaining, self.config.close_retry_max_seconds
        )
        state.next_at = real + wait

    # --- how long to wait, and what is left ---------------------------------------

    def next_wait(self, now: float, *, journal_due: float | None) -> float:
        """Running or flushing: seconds until the next pass is due (:func:`next_wait`)."""
        has_changes = self.recorder.has_changes
        return next_wait(
            now,
            self.destinations,
            interval=self.config.min_report_interval_seconds,
            flush_now=self.flush.wants_any_send(self.destinations, now, has_changes),
            journal_due=journal_due,
            seed_due=None if self.recorder.seeded else self.resume.seed_due(),
        )

    def close_wait_seconds(self, real: float) -> float | None:
        """Closing: real seconds until a destination's next step, ``None`` once all are done."""
        closing = self._closing
        assert closing is not None
        pending = [s.next_at for s in closing.states if not s.done]
        if not pending:
            return None
        return min(pending) - real

    def _recovering_index(self) -> int | None:
        """The journal's destination while it recovers left-over journals, else ``None``."""
        return self.journal_destination if self.recovery is not None else None

    def _recovering(self, dest: Destination) -> RecoveryStep | None:
        """The recovery request ``dest`` is to get next, if it is the journal's and recovers."""
        return self.recovery if dest.index == self.journal_destination else None

    def _deadline_for(self, closing: _Closing, dest: Destination) -> float:
        return closing.deadline_for(dest, recovering=self._recovering(dest) is not None)

    def _holds_everything(self, dest: Destination, queue_empty: bool) -> bool:
        return dest.in_step and queue_empty and not self.recorder.has_changes(dest.index)

    def nothing_left_to_send(self, *, queue_empty: bool) -> bool:
        """Nothing queued or recorded is unsent to a destination that still takes sends."""
        recorder = self.recorder
        # A superseded destination takes nothing more: a flush does not wait for it.
        return queue_empty and not any(
            recorder.has_changes(d.index) for d in self.destinations if not d.superseded
        )

    def everything_delivered(self, *, queue_empty: bool) -> bool:
        """Nothing queued or recorded is undelivered, to any destination."""
        recorder = self.recorder
        return queue_empty and all(recorder.all_delivered(d.index) for d in self.destinations)
