"""``close()`` on the reporter thread: send the tail to every destination within the deadline.

Each destination moves through the close on its own (:class:`CloseState`):
settle the request in flight, stop when it holds everything or its deadline
has passed, otherwise attempt, and after a failed attempt wait
(:func:`close_wait`) and try again. The deadline is real time
(``time.monotonic``) whatever clock drives the scheduling, because
``close(timeout)`` bounds real process exit; it is shared by the destinations,
and a destination that never answered (a wrong URL) gets a short one of its
own (``close_unanswered_seconds``). The rules are in docs/engine.md
("Closing").

The caller's side of the same close (:func:`wait_for_close`): ``close()``
waits on its own thread for the reporter thread to end by the deadline, says
once what it waits for when that takes longer than
:data:`CLOSE_NOTICE_SECONDS`, and stops waiting at a Ctrl-C.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Literal

from trainreport._destination import Destination, settle_error
from trainreport._dispatch import Dispatch
from trainreport._recorder import Recorder
from trainreport._reports import Report
from trainreport._scheduler import SendScheduler

__all__ = [
    "CLOSE_NOTICE_SECONDS",
    "CloseSequence",
    "CloseState",
    "WaitOutcome",
    "close_wait",
    "wait_for_close",
]

#: While closing, the last attempt starts at least this long (seconds) before the
#: deadline (a quarter of ``close_retry_max_seconds`` when that is longer), or
#: half the time left when less remains.
LAST_ATTEMPT_LEAD_SECONDS = 0.1
#: How often (real seconds) a destination that opened checks again whether the
#: resume was decided (it waits for another destination's first open).
_RESUME_POLL_SECONDS = 0.01
#: ``close()`` logs ``trainreport.close_waiting`` once when it has waited this long
#: (seconds) for the reporter thread and the deadline is still ahead: a hanging
#: service must not look like a hung process.
CLOSE_NOTICE_SECONDS = 2.0

#: How :func:`wait_for_close` ended: the thread ended, the deadline passed, or a
#: ``KeyboardInterrupt`` (Ctrl-C) stopped the wait.
WaitOutcome = Literal["ended", "deadline", "interrupted"]


def wait_for_close(
    join: Callable[[float], bool],
    deadline: float,
    *,
    notice: Callable[[float], None],
    now: Callable[[], float] = time.monotonic,
    notice_after: float = CLOSE_NOTICE_SECONDS,
) -> WaitOutcome:
    """Wait (on ``close()``'s caller's thread) for the reporter thread to end by ``deadline``.

    After ``notice_after`` seconds of waiting, with the deadline still ahead,
    ``notice(seconds_left)`` is called once, then the wait goes on to the
    deadline. A ``KeyboardInterrupt`` raised while waiting (a Ctrl-C during
    ``finally: reporter.close()``) ends the wait: it is caught here, so no
    traceback comes out of trainreport's wait, and the caller decides what to
    say (docs/engine.md#decisions-the-design-left-open).

    Args:
        join: waits at most the given seconds; returns True once the thread ended.
        deadline: when to stop waiting (on ``now``'s clock, seconds).
        notice: called once with the seconds left, when the wait gets long.
        now: the clock of ``deadline`` (default ``time.monotonic``).
        notice_after: seconds to wait before ``notice`` (default :data:`CLOSE_NOTICE_SECONDS`).

    Returns:
        ``"ended"``, ``"deadline"`` or ``"interrupted"``. Never raises
        (``notice`` must not).
    """
    try:
        if join(max(min(deadline - now(), notice_after), 0.0)):
            return "ended"
        left = deadline - now()
        if left <= 0:
            return "deadline"
        notice(left)
        return "ended" if join(left) else "deadline"
    except KeyboardInterrupt:
        return "interrupted"


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
    # The last attempt starts this long before the deadline, to have time to finish.
    lead = min(max(cap / 4, LAST_ATTEMPT_LEAD_SECONDS), remaining / 2)
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


class CloseSequence:
    """Sends the tail to every destination by the deadline (reporter thread only).

    Args:
        destinations: the reporter's destinations.
        recorder: the attempt's state.
        queue: the report queue.
        clock: the scheduling clock (seconds).
        dispatch: starts and settles the requests.
        drain: moves the queue into the recorder.
        seed: decides the resume when it can (a destination may open while closing).
        wake: set when a sender's request ends (cuts a wait short).
        retry_max: the longest wait between two attempts (``close_retry_max_seconds``).
        unanswered: the deadline (seconds after ``started``) of a destination
            that never answered (``close_unanswered_seconds``).
        deadline: when everything must be done (``time.monotonic``).
        started: when ``close()`` began (``time.monotonic``).
    """

    def __init__(
        self,
        *,
        destinations: list[Destination],
        recorder: Recorder,
        queue: collections.deque[Report],
        clock: Callable[[], float],
        dispatch: Dispatch,
        drain: Callable[[], None],
        seed: Callable[[], None],
        wake: threading.Event,
        retry_max: float,
        unanswered: float,
        deadline: float,
        started: float,
    ) -> None:
        self._destinations = destinations
        self._recorder = recorder
        self._queue = queue
        self._clock = clock
        self._dispatch = dispatch
        self._drain = drain
        self._seed = seed
        self._wake = wake
        self._retry_max = retry_max
        self._unanswered = unanswered
        self._deadline = deadline
        self._started = started

    def deadline_for(self, dest: Destination) -> float:
        """The deadline closing works to: the whole one, or a short one for a wrong URL."""
        if dest.answered:
            return self._deadline
        return min(self._deadline, self._started + self._unanswered)

    def run(self) -> None:
        """Step every destination until each is done, waiting on ``wake`` in between."""
        states = [CloseState() for _ in self._destinations]
        self._drain()
        while True:
            for dest, state in zip(self._destinations, states, strict=True):
                if not state.done:
                    self._step(dest, state)
            self._seed()
            pending = [s for s in states if not s.done]
            if not pending:
                return
            wait = min(s.next_at for s in pending) - time.monotonic()
            if wait > 0:
                self._wake.wait(wait)
                self._wake.clear()
            self._drain()

    def _holds_everything(self, dest: Destination) -> bool:
        return dest.in_step and not self._recorder.has_changes(dest.index) and not self._queue

    def _step(self, dest: Destination, state: CloseState) -> None:
        """Move one destination's close along: settle, decide, attempt; set ``next_at``/``done``."""
        dispatch = self._dispatch
        while not state.done:
            if dest.job is not None:
                ended = dispatch.settle(dest, closing=True)
                if ended is None:
                    deadline = self.deadline_for(dest)
                    if time.monotonic() >= deadline:
                        state.done = True  # a request still in flight at the deadline
                    else:
                        state.next_at = deadline
                    return
                self._after_attempt(dest, state, ended)
                continue
            if self.deadline_for(dest) - time.monotonic() <= 0 or self._holds_everything(dest):
                state.done = True
                return
            if time.monotonic() < state.next_at:
                return
            now = self._clock()
            scheduler = dest.scheduler
            if state.attempted and not scheduler.gap_allows(now):
                # Only close()'s first send skips the destination's floor.
                floor_at = (scheduler.last_attempt or now) + scheduler.min_request_gap
                state.next_at = time.monotonic() + max(floor_at - now, 0.0)
                return
            if dest.waits_for_seed:
                # Waiting for another destination's first open to decide the resume.
                state.next_at = time.monotonic() + _RESUME_POLL_SECONDS
                return
            state.attempted = True
            try:
                ended = dispatch.attempt(dest, now, closing=True, deadline=self.deadline_for)
            except Exception as exc:  # a raising sink gets the backoff, as while running
                settle_error(dest, exc, self._clock())
                ended = False
            if dest.in_flight:
                continue  # in flight on its sender: settled above when it ends
            if dest.is_open and not dest.in_step:  # seeding (the attempt may have opened it)
                state.next_at = time.monotonic()  # opened; the resume is decided after this pass
                return
            self._after_attempt(dest, state, ended)

    def _after_attempt(self, dest: Destination, state: CloseState, delivered: bool) -> None:
        deadline = self.deadline_for(dest)
        if delivered:
            self._drain()
            state.last = False
            state.next_at = 0.0
            return
        if state.last and self.deadline_for(dest) <= deadline:
            state.done = True  # the last attempt failed (unless the destination answered at last)
            return
        if dest.scheduler.due_at() is None:  # rejected: the same data will not be taken
            state.done = True
            return
        remaining = deadline - time.monotonic()
        wait, state.last = close_wait(dest.scheduler, self._clock(), remaining, self._retry_max)
        state.next_at = time.monotonic() + wait
