"""SendScheduler: when the next send is due (clock-free: time comes in as ``now``).

Rules (docs/design.md#shape, #metrics, #failure-handling):

* Debounce: the curves go at most every ``min_interval`` seconds. The window
  starts at the last delivered send that carried the curves; an event send
  that leaves them out (full-state mode) never moves it, so events never delay
  a curve. The first send, the first report that adds a point, and event
  reports (training start, checkpoint, epoch end, terminal status) go at once.
* A failed send never consumes the debounce window: the next attempt is due
  after the backoff delay, not after a whole interval.
* Backoff: exponential with jitter (``initial * multiplier**(n-1)``, capped at
  ``max``, each delay scaled by a random factor in ``[1-jitter, 1+jitter]``),
  reset by a success; a delay the destination asks for (``Retry-After``) is
  honoured instead.
* Rejections (400/401/403/404/422): the same data is not retried; a send is
  due again only when new data arrived, and not before ``rejected_backoff``.
* Heartbeat: with nothing to send, a send is due ``heartbeat`` seconds after the
  last delivered one, so the destination can tell a hung run from a slow one.
* Request floor: with ``min_request_gap`` > 0 (a destination's own limit, such
  as Kubeflow Trainer's 5 s), no send of any kind (regular, event, retry,
  heartbeat) is due sooner than that after the previous attempt, whatever
  its outcome.
"""

from __future__ import annotations

import random

import attrs

__all__ = ["SendScheduler"]

#: A Retry-After longer than this (seconds) is capped: a run must not go silent for hours.
MAX_RETRY_AFTER_SECONDS = 600.0


@attrs.define
class SendScheduler:
    """Decides when the reporter thread sends. All times are monotonic seconds.

    Args:
        min_interval: debounce interval between regular sends (seconds).
        heartbeat: longest gap between delivered sends (seconds).
        backoff_initial: first retry delay (seconds).
        backoff_max: cap of the retry delay (seconds).
        backoff_multiplier: growth factor per consecutive failure.
        backoff_jitter: fraction of random spread of each delay, in [0, 1].
        rejected_backoff: delay after a rejection before new data is tried (seconds).
        min_request_gap: the destination's floor between two attempts (seconds;
            0 for none). It holds for every kind of send.
        rng: random source for jitter (inject a seeded one in tests).

    Not thread-safe: owned by the reporter thread.
    """

    min_interval: float = 10.0
    heartbeat: float = 60.0
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    backoff_multiplier: float = 2.0
    backoff_jitter: float = 0.2
    rejected_backoff: float = 300.0
    min_request_gap: float = 0.0
    rng: random.Random = attrs.field(factory=random.Random)

    last_success: float | None = attrs.field(default=None, init=False)
    #: When the last delivered send that carried the curves was made (the window's start).
    curves_at: float | None = attrs.field(default=None, init=False)
    consecutive_failures: int = attrs.field(default=0, init=False)
    pending_since: float | None = attrs.field(default=None, init=False)
    urgent: bool = attrs.field(default=False, init=False)
    #: The next send carries the curves whatever the window says (the first point).
    force_curves: bool = attrs.field(default=False, init=False)
    _retry_at: float | None = attrs.field(default=None, init=False)
    #: The destination asked for no request before this time (Retry-After).
    not_before: float | None = attrs.field(default=None, init=False)
    _rejected: bool = attrs.field(default=False, init=False)
    _new_since_rejection: bool = attrs.field(default=False, init=False)
    #: When the last attempt (delivered or not) was made, for ``min_request_gap``.
    last_attempt: float | None = attrs.field(default=None, init=False)

    def note_change(
        self, now: float, *, urgent: bool = False, first_point: bool = False, curves: bool = False
    ) -> None:
        """New data was recorded at ``now``.

        Args:
            now: monotonic seconds.
            urgent: an event report, which bypasses the debounce.
            first_point: the run's first point: sent at once, curves included.
            curves: sent at once, curves included (a backlog of points the
                destination lacks, which the store holds in memory).
        """
        if self.pending_since is None:
            self.pending_since = now
        if urgent or first_point or curves:
            self.urgent = True
        if first_point or curves:
            self.force_curves = True
        if self._rejected:
            self._new_since_rejection = True

    def curves_due(self, now: float) -> bool:
        """Whether a send at ``now`` may carry the curves (full-state mode's debounce)."""
        return (
            self.force_curves or self.curves_at is None or now - self.curves_at >= self.min_interval
        )

    def carries_metrics(
        self, now: float, *, full_state: bool, closing: bool = False, complete: bool = False
    ) -> bool:
        """Whether a send made at ``now`` carries the curves (``metrics``).

        In suffix mode every send does (a suffix is cheap and idempotent). In
        full-state mode an event send inside the curves' window leaves them
        out ("event reports send only what they change"), so it never moves
        the window and events never delay a curve; the sends of ``close()``
        and of a pending ``flush()`` (``complete``) always carry them.
        """
        return not full_state or closing or complete or not self.urgent or self.curves_due(now)

    def due_at(self) -> float | None:
        """The monotonic time at which a send is due, or ``None`` when none will be.

        A time in the past means "now". Never sooner than ``min_request_gap``
        after the last attempt.
        """
        due = self._due_at()
        if due is None or self.last_attempt is None or self.min_request_gap <= 0:
            return due
        return max(due, self.last_attempt + self.min_request_gap)

    def gap_allows(self, now: float) -> bool:
        """True when ``min_request_gap`` allows an attempt at ``now`` (for forced sends)."""
        last = self.last_attempt
        return last is None or self.min_request_gap <= 0 or now >= last + self.min_request_gap

    def _due_at(self) -> float | None:
        if self._rejected:
            if not self._new_since_rejection:
                return None
            return self._retry_at
        if self._retry_at is not None:
            return self._retry_at
        if self.pending_since is not None:
            if self.urgent or self.curves_at is None:
                return self.pending_since
            return max(self.pending_since, self.curves_at + self.min_interval)
        if self.last_success is None:
            return None
        return self.last_success + self.heartbeat

    def is_due(self, now: float) -> bool:
        """True when a send should be made at ``now``."""
        due = self.due_at()
        return due is not None and due <= now

    def on_delivered(
        self, now: float, *, everything_sent: bool = True, carried_curves: bool = True
    ) -> None:
        """A send was delivered at ``now``; resets the backoff.

        Args:
            now: monotonic seconds.
            everything_sent: nothing is left pending.
            carried_curves: the send carried the curves (it starts a new
                debounce window); ``False`` for a full-state event send that
                left them out, which leaves the window where it was.
        """
        self.last_success = now
        self.last_attempt = now
        if carried_curves:
            self.curves_at = now
            self.force_curves = False
        self.consecutive_failures = 0
        self._retry_at = None
        self.not_before = None
        self._rejected = False
        self._new_since_rejection = False
        self.urgent = False
        # Data left out of this send (a full-state event send omits the curves)
        # waits for the end of the curves' window, which this send did not move.
        self.pending_since = None if everything_sent else now

    def on_retry_later(self, now: float, delay_seconds: float | None = None) -> float:
        """A transient failure at ``now``; returns the delay (seconds) before the next attempt."""
        self.last_attempt = now
        self.consecutive_failures += 1
        delay = self.backoff_delay(self.consecutive_failures)
        if delay_seconds is not None and delay_seconds >= 0:
            # Never earlier than asked, never faster than our own backoff (a
            # "Retry-After: 0" or a date in the past must not make a busy loop).
            asked = min(delay_seconds, MAX_RETRY_AFTER_SECONDS)
            self.not_before = now + asked
            delay = max(asked, delay)
        self._retry_at = now + delay
        if self.pending_since is None:
            self.pending_since = now
        return delay

    def on_rejected(self, now: float) -> float:
        """The destination refused the data at ``now``; returns the long delay (seconds)."""
        self.last_attempt = now
        self.consecutive_failures += 1
        self._rejected = True
        self._new_since_rejection = False
        self._retry_at = now + self.rejected_backoff
        return self.rejected_backoff

    def on_open_refused(self) -> None:
        """The refusal :meth:`on_rejected` noted was of an open: try again after the long delay.

        An open carries no data, and reports wait for one to succeed, so no
        new data would ever come to allow the retry that a refused send waits for.
        """
        self._new_since_rejection = True

    def on_superseded(self, now: float) -> None:
        """The destination said at ``now`` that a later attempt owns the task: a failure, no retry.

        The attempt counts as failed and no retry is scheduled. That nothing is
        ever due again is the destination's state (``superseded``, the end of
        ``DESTINATION_TRANSITIONS``), which ``Destination.due_at`` reads: the
        scheduler keeps no copy of it.
        """
        self.last_attempt = now
        self.consecutive_failures += 1
        self._retry_at = None

    def backoff_delay(self, failures: int) -> float:
        """The jittered delay (seconds) after ``failures`` consecutive failures (>= 1)."""
        exponent = max(failures - 1, 0)
        try:
            base = self.backoff_initial * self.backoff_multiplier**exponent
        except OverflowError:
            base = self.backoff_max
        base = min(base, self.backoff_max)
        j = self.backoff_jitter
        return base * (1.0 + self.rng.uniform(-j, j)) if j else base
