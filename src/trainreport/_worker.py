"""The reporter thread: the only code in trainreport that owns a thread.

It sleeps until a send is due (debounce, heartbeat, backoff), an event report
or a deep queue wakes it, or ``close()`` is called; then it drains everything
queued in one pass, applies it to the recorder under its lock, and, when the
scheduler says a send is due, builds an update under the lock and sends it
outside the lock (STYLE habits 5 and 6). Waits are ``Event.wait(remaining)``,
never ``time.sleep``.

Closing: drain, send the tail (retrying with backoff while the real-time
deadline allows), log never-matched ``time_series_metrics`` patterns, close
the sink. The deadline is real time (``time.monotonic``) whatever clock drives
the scheduling, because ``close(timeout)`` bounds real process exit.
"""

from __future__ import annotations

import collections
import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

from trainreport._config import ReportingConfig
from trainreport._journal_feed import JournalKeeper
from trainreport._logging import OnceLogger, describe_exception, get_logger
from trainreport._payloads import StoredState, parse_stored_task
from trainreport._recorder import Recorder, queued_bytes
from trainreport._scheduler import SendScheduler
from trainreport._sink import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    Rejected,
    Resynchronise,
    RetryLater,
    Sink,
    Split,
    Update,
)

__all__ = ["Worker", "utc_now_iso"]

_log = get_logger()
#: Encoded bytes of one point in a full-state ``metrics`` (``{"step":..,"epoch":..,"value":..}``),
#: to compare the curves with a large field when the destination refuses a size.
_POINT_JSON_BYTES = 45
#: A field smaller than this (bytes) is never dropped for size: leaving it out cannot help.
_MIN_DROPPED_FIELD_BYTES = 1024
#: The longest single wait of the reporter thread (a day): bounded so that a huge
#: configured interval never overflows ``Event.wait``.
_MAX_SLEEP_SECONDS = 86_400.0
#: While closing, the last attempt starts at least this long (seconds) before the
#: deadline (a quarter of ``close_retry_max_seconds`` when that is longer), or
#: half the time left when less remains.
_LAST_ATTEMPT_LEAD_SECONDS = 0.1
#: The shortest wait between two journal records (seconds): a journal interval of 0
#: means a record at every wake, never a busy loop.
_MIN_JOURNAL_WAIT_SECONDS = 0.001


def _floor_of(sink: Sink) -> float:
    """The sink's ``min_interval_seconds`` as a finite number >= 0 (0.0 when unusable)."""
    value = getattr(sink, "min_interval_seconds", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if 0.0 <= value < _MAX_SLEEP_SECONDS else 0.0


def utc_now_iso() -> str:
    """The wall-clock time as ISO 8601 UTC with milliseconds and a ``Z`` suffix."""
    return _iso_from_ms(int(time.time() * 1000))


def _iso_from_ms(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Stamps:
    """``updated_at`` values that strictly increase, one millisecond apart at least.

    A plain job API cannot fence a request delayed in the network; every send
    carrying a strictly newer ``updated_at`` than the one before makes the final
    send the newest of the run, which a destination can order by.
    """

    def __init__(self) -> None:
        self._last_ms = 0

    def __call__(self) -> str:
        ms = max(int(time.time() * 1000), self._last_ms + 1)
        self._last_ms = ms
        return _iso_from_ms(ms)


class Worker:
    """Drives a :class:`Recorder` and a :class:`Sink` from one daemon thread.

    Args:
        recorder: the attempt's state (owned by this worker for writing).
        sink: where updates go.
        queue: the deque the training thread appends report tuples to.
        config: scheduling configuration.
        clock: monotonic clock (seconds) that drives scheduling; injectable.
        wall_clock: returns ``updated_at`` strings (default: ISO 8601 UTC to the
            millisecond, strictly increasing from one send to the next); injectable.
        cancel_requested: set when the destination asks the run to stop.
        on_drained: called after each drain with the estimated bytes
            (``queued_bytes``) of the reports it took off the queue (the memory
            guard's count) and whether a report call should wake the thread only
            at ``drain_queue_depth`` (the first point was applied, or the
            stored task is not read yet) rather than at once.
        open_journal: called once on the reporter thread before anything
            else, with the recorder; returns the journal keeper, or ``None``
            for no journal (``docs/engine.md``, "The journal in front of a
            service"). The journal hooks into the thread at four places: a
            record after each drain when due (and the thread wakes at least
            every ``journal_interval_seconds``), recovery at the first open,
            a trim after each delivered send, and the close.
    """

    def __init__(
        self,
        *,
        recorder: Recorder,
        sink: Sink,
        queue: collections.deque[tuple[Any, ...]],
        config: ReportingConfig,
        clock: Callable[[], float],
        wall_clock: Callable[[], str] | None = None,
        cancel_requested: threading.Event,
        on_drained: Callable[[int, bool], None] | None = None,
        open_journal: Callable[[Recorder], JournalKeeper | None] | None = None,
    ) -> None:
        self.recorder = recorder
        self.sink = sink
        self.queue = queue
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock if wall_clock is not None else _Stamps()
        self.cancel_requested = cancel_requested
        self.on_drained = on_drained
        self.open_journal = open_journal
        self.journal: JournalKeeper | None = None
        # A destination's own floor (Sink.min_interval_seconds, e.g. Kubeflow
        # Trainer's 5 s) holds whatever the config says: for regular sends, and
        # as a gap between any two attempts (events, retries, flush).
        floor = _floor_of(sink)
        self.scheduler = SendScheduler(
            min_interval=max(config.min_report_interval_seconds, floor),
            min_request_gap=floor,
            heartbeat=config.heartbeat_seconds,
            backoff_initial=config.backoff_initial_seconds,
            backoff_max=config.backoff_max_seconds,
            backoff_multiplier=config.backoff_multiplier,
            backoff_jitter=config.backoff_jitter,
            rejected_backoff=config.rejected_backoff_seconds,
        )
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name="trainreport-reporter", daemon=True)
        self.once = OnceLogger()
        self.opened: Opened | None = None
        self.suffix_mode = False
        self.requests_sent = 0
        self.requests_failed = 0
        self.bytes_sent = 0
        self.last_error: str | None = None
        self.last_success_at: str | None = None
        self.finished_cleanly = False
        #: The destination answered at least once (anything but a refused or
        #: unresolvable connection); until then close() waits only briefly.
        self.answered = False
        self._stopping = False
        self._deadline = float("inf")
        self._close_started = float("inf")
        self._send_deadline = float("inf")
        self._flush_waiters: list[threading.Event] = []
        self._flush_requested = False
        self._resyncs = 0
        self._had_point = False
        self._open_failed = False
        self._last_unsent_warning: float | None = None
        self._cycle = threading.Condition()
        self._cycles_started = 0
        self._cycles_done = 0

    # --- control from other threads ----------------------------------------------

    def start(self) -> None:
        """Start the thread (returns at once)."""
        self.thread.start()

    def stop(self, deadline: float) -> None:
        """Ask the thread to drain, send the tail and exit by ``deadline`` (time.monotonic)."""
        self._deadline = deadline
        self._close_started = time.monotonic()
        self._stopping = True
        self.wake.set()

    def request_flush(self) -> threading.Event:
        """Ask for an immediate send of everything; the event is set once all is delivered."""
        done = threading.Event()
        with self._cycle:
            self._flush_waiters.append(done)
            self._flush_requested = True
        self.wake.set()
        return done

    def run_cycle(self, timeout: float) -> bool:
        """Wake the thread and wait until a full cycle that began after this call has ended.

        For tests driven by an injected clock. Returns False on timeout.
        """
        with self._cycle:
            target = self._cycles_started + 1
            self.wake.set()
            return self._cycle.wait_for(
                lambda: self._cycles_done >= target or not self.thread.is_alive(), timeout
            )

    def everything_delivered(self) -> bool:
        """True when nothing queued or recorded is undelivered."""
        with self.recorder.lock:
            return not self.queue and self.recorder.all_delivered()

    def _nothing_left_to_send(self) -> bool:
        with self.recorder.lock:
            return not self.queue and not self.recorder.has_changes()

    # --- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._open_journal()
            with self.recorder.lock:
                self.recorder.start_attempt()
            self.scheduler.note_change(self.clock(), urgent=True)
            while not self._stopping:
                with self._cycle:
                    self._cycles_started += 1
                self._cycle_once()
                timeout = self._sleep_seconds()
                with self._cycle:
                    self._cycles_done += 1
                    self._cycle.notify_all()
                if self.wake.wait(timeout):
                    self.wake.clear()
            self._finish()
        except BaseException as exc:
            _log.error("trainreport.reporter_thread_crashed", error=describe_exception(exc))
        finally:
            with self._cycle:
                self._cycles_done = self._cycles_started + 1
                self._cycle.notify_all()
                waiters, self._flush_waiters = self._flush_waiters, []
            for w in waiters:
                w.set()

    def _open_journal(self) -> None:
        """Claim the journal (``open_journal``): a failure means no journal, not a dead thread."""
        if self.open_journal is None:
            return
        try:
            self.journal = self.open_journal(self.recorder)
        except Exception as exc:
            _log.warning("trainreport.journal_unavailable", reason=describe_exception(exc, 300))

    def _cycle_once(self) -> None:
        try:
            self._drain()
            now = self.clock()
            journal = self.journal
            if journal is not None and journal.due(now):
                journal.record()
            # flush() sends now, even during a backoff, and keeps sending while its
            # waiters wait and sends succeed (a short acknowledgement needs a resend).
            forced = self._flush_wants_a_send(now)
            if forced:
                self._flush_requested = False
                self.scheduler.note_change(now, urgent=True)
            if forced or self.scheduler.is_due(now):
                # A pending flush wants the curves too, not only an event send.
                self._attempt(now, closing=False, complete=bool(self._flush_waiters))
            self._release_flush_waiters()
            self._warn_if_unsent_old(now)
        except Exception as exc:  # a bug must not kill the thread; back off instead
            self._survive(exc)

    def _survive(self, exc: Exception) -> None:
        """A sink or engine error: log it once per type, count it, and back off."""
        self.requests_failed += 1
        self.answered = True  # something ran: not known to be a wrong URL
        self.once.warning(
            ("cycle", type(exc).__name__),
            "trainreport.reporter_error",
            error=describe_exception(exc, 500),
        )
        self.last_error = describe_exception(exc)
        self.scheduler.on_retry_later(self.clock())

    def _flush_wants_a_send(self, now: float) -> bool:
        """A flush() is waiting and may send now: not before a server-requested delay."""
        if not (self._flush_requested or self._flush_waiters):
            return False
        if self.scheduler.not_before is not None and now < self.scheduler.not_before:
            return False  # Retry-After is honoured even by flush()
        if not self.scheduler.gap_allows(now):
            return False  # so is the destination's own floor between requests
        if self._flush_requested:
            return True
        if self.scheduler.consecutive_failures:
            return False  # our own backoff applies to the resends of a flush
        with self.recorder.lock:
            return self.recorder.has_changes()

    def _sleep_seconds(self) -> float:
        now = self.clock()
        due = self.scheduler.due_at()
        # Wake at least once per debounce interval to look at the queue: the
        # training thread does not signal ordinary reports (DESIGN §2).
        poll = min(max(self.config.min_report_interval_seconds, 0.05), _MAX_SLEEP_SECONDS)
        if self._flush_wants_a_send(now):
            return 0.0
        if self.journal is not None:
            poll = min(poll, max(self.journal.next_due() - now, _MIN_JOURNAL_WAIT_SECONDS))
        if due is None:
            return poll
        return min(max(due - now, 0.0), poll)

    def _drain(self) -> None:
        queue = self.queue
        # Until the stored task has been read, reports wait in the queue, so that
        # seeding is exact (DESIGN §3); past drain_queue_depth (a long outage at start)
        # they are applied, bounding memory, and seeding merges the stored curves
        # under them (Recorder.seed).
        # With a journal, once an open has failed (the destination down at start) the
        # queue is drained at every wake, so the journal bounds what a kill loses; until
        # then reports wait as without one, so that seeding stays exact.
        waiting = (
            self.opened is None
            and not self.recorder.seeded
            and not (self.journal is not None and self._open_failed)
        )
        if not queue or (waiting and len(queue) < self.config.drain_queue_depth):
            if self.on_drained is not None:
                # Re-arm the report calls' wake: at the first point once the destination
                # is open (it goes at once), otherwise at drain_queue_depth.
                self.on_drained(0, self._had_point or waiting)
            return
        urgent = False
        recorder = self.recorder
        released = 0
        with recorder.lock:
            apply = recorder.apply
            popleft = queue.popleft
            for _ in range(len(queue)):
                item = popleft()
                urgent |= apply(item)
                released += queued_bytes(item)
            store = recorder.store
            first_point = not self._had_point and bool(store.points_recorded or store.scalars)
        if first_point:  # the first point goes at once, curves included
            self._had_point = True
        if self.on_drained is not None:
            self.on_drained(released, self._had_point)
        self.scheduler.note_change(self.clock(), urgent=urgent, first_point=first_point)

    # --- open and send -------------------------------------------------------------

    def _timeout(self, closing: bool) -> float | None:
        if not closing or self._send_deadline == float("inf"):
            return None
        return max(self._send_deadline - time.monotonic(), 0.001)

    def _note_answer(self, result: object) -> None:
        if not (isinstance(result, RetryLater) and result.unreachable):
            self.answered = True

    def _open(self, now: float, closing: bool) -> bool:
        self.requests_sent += 1  # reading the stored task is a request too
        result = self.sink.open(timeout_seconds=self._timeout(closing))
        self._note_answer(result)
        if not isinstance(result, Opened):
            self._open_failed = True
            self._failed(now, result)
            return False
        first = self.opened is None and not self.recorder.seeded
        if first and self.journal is not None and self.journal.journal.left_over:
            # Journals a dead process left go first, before this process's first send.
            result = self.journal.recover(self.sink, result, self._timeout(closing))
            if not isinstance(result, Opened):
                self._open_failed = True
                self._failed(now, result)
                return False
        self.opened = result
        self.suffix_mode = CAPABILITY_SERIES_SUFFIX in result.capabilities
        state = parse_stored_task(result.stored_task)
        if isinstance(state, str):
            _log.warning("trainreport.stored_task_malformed", reason=state[:300])
            state = StoredState(series={})
        for problem in state.problems:
            _log.warning("trainreport.stored_task_malformed", reason=problem[:300])
        with self.recorder.lock:
            if first:
                self.recorder.seed(state)
                if state.series:
                    _log.info(
                        "trainreport.resumed",
                        series=len(state.series),
                        points=sum(len(s[0]) for s in state.series.values()),
                    )
            else:
                self.recorder.store.resynchronise({n: len(s[0]) for n, s in state.series.items()})
                self.recorder.mark_all_dirty()
        return True

    def _attempt(self, now: float, *, closing: bool, complete: bool = False) -> bool:
        """One open-if-needed plus send. Returns True when the update was delivered.

        ``complete``: include the curves even in a full-state event send (flush).
        """
        if self.opened is None:
            if not self._open(now, closing):
                return False
            self._drain()
        scheduler = self.scheduler
        full_state = not self.suffix_mode
        # Only a send that carries the curves consumes their window: a full-state
        # event send inside it leaves them out, and never delays them.
        include_metrics = (
            not full_state
            or closing
            or complete
            or not scheduler.urgent
            or scheduler.curves_due(now)
        )
        with self.recorder.lock:
            update, sent, sticky = self.recorder.build_update(
                wall=self.wall_clock(), full_state=full_state, include_metrics=include_metrics
            )
        self.requests_sent += 1
        result = self.sink.send(update, timeout_seconds=self._timeout(closing))
        self._note_answer(result)
        if isinstance(result, Delivered):
            self._resyncs = 0
            self.bytes_sent += result.bytes_sent
            with self.recorder.lock:
                self.recorder.on_delivered(
                    sent, sticky, None if full_state else result.series_lengths
                )
                left = bool(self.queue) or self.recorder.has_changes()
            if self.journal is not None:
                self.journal.acknowledged()
            scheduler.on_delivered(
                self.clock(), everything_sent=not left, carried_curves=include_metrics
            )
            self.last_success_at = self.wall_clock()
            if self.last_error is not None and scheduler.consecutive_failures == 0:
                _log.info("trainreport.send_recovered")
                self.last_error = None
            if result.cancel_requested and not self.cancel_requested.is_set():
                _log.warning("trainreport.cancel_requested")
                self.cancel_requested.set()
            return True
        if isinstance(result, Split):
            self._too_large(now, update, result)
            return False
        if isinstance(result, Resynchronise):
            self.requests_failed += 1
            self._resyncs += 1
            _log.info("trainreport.resynchronise", reason=result.reason[:300])
            with self.recorder.lock:
                if result.series_lengths is not None:
                    self.recorder.store.resynchronise(result.series_lengths)
                else:
                    self.opened = None
                self.recorder.mark_all_dirty()
            if self._resyncs == 1:  # resend from the server's state at once, once
                scheduler.note_change(now, urgent=True)
            else:  # a server that keeps disagreeing gets the backoff, not a busy loop
                scheduler.on_retry_later(now)
                self.last_error = result.reason[:300]
            return False
        self._failed(now, result)
        return False

    def _too_large(self, now: float, update: Update, result: Split) -> None:
        """The destination refused the update's size (413): leave out what cannot fit.

        A once-sent field (``hyperparameters``, ...) larger than the curves is
        dropped (counted, logged once) and the rest is resent at once; it never
        holds back the curves. Otherwise, in full-state mode, ``metrics`` is
        what does not fit: it cannot be split under a shallow merge, so the
        reporter goes on without it. With nothing left to leave out, the
        refusal is a rejection.
        """
        with self.recorder.lock:
            field = self.recorder.largest_field(update)
        metrics_bytes = update.point_count * _POINT_JSON_BYTES if update.full_state else 0
        if field is not None and field[1] >= max(metrics_bytes, _MIN_DROPPED_FIELD_BYTES):
            self.requests_failed += 1
            with self.recorder.lock:
                self.recorder.drop_field(*field)
            self.scheduler.note_change(now, urgent=True)
            return
        if update.series is not None and update.full_state:
            self.requests_failed += 1
            with self.recorder.lock:
                self.recorder.metrics_too_large = True
                self.recorder.drops["metrics_too_large"] += 1
            _log.warning(
                "trainreport.metrics_too_large",
                reason=result.reason[:300],
                points=update.point_count,
            )
            self.scheduler.note_change(now, urgent=True)
            return
        self._failed(now, Rejected(result.reason, 413))

    def _failed(self, now: float, result: object) -> float:
        self.requests_failed += 1
        scheduler = self.scheduler
        if isinstance(result, RetryLater):
            delay = scheduler.on_retry_later(now, result.delay_seconds)
            reason = result.reason
            level_warn = scheduler.consecutive_failures in (1, 3) or (
                scheduler.consecutive_failures % 20 == 0
            )
            if level_warn:
                _log.warning(
                    "trainreport.send_failed",
                    reason=reason[:300],
                    consecutive_failures=scheduler.consecutive_failures,
                    retry_in_seconds=round(delay, 3),
                )
        else:
            delay = scheduler.on_rejected(now)
            reason = getattr(result, "reason", repr(result))
            self.once.warning(
                ("rejected", reason),
                "trainreport.send_rejected",
                reason=reason[:300],
                status_code=getattr(result, "status_code", None),
                retry_with_new_data_in_seconds=round(delay, 3),
            )
        self.last_error = reason[:300]
        return delay

    # --- flush, warnings, closing --------------------------------------------------

    def _release_flush_waiters(self) -> None:
        if not self._flush_waiters or not self._nothing_left_to_send():
            return
        with self._cycle:
            waiters, self._flush_waiters = self._flush_waiters, []
        for w in waiters:
            w.set()

    def _warn_if_unsent_old(self, now: float) -> None:
        since = self.scheduler.pending_since
        limit = self.config.unsent_warning_seconds
        if since is None or now - since < limit or limit <= 0:
            return
        last = self._last_unsent_warning
        if last is not None and now - last < limit:
            return
        self._last_unsent_warning = now
        with self.recorder.lock:
            unsent = self.recorder.store.unsent_points()
        _log.warning(
            "trainreport.unsent_data_old",
            age_seconds=round(now - since, 1),
            unsent_points=unsent,
            consecutive_failures=self.scheduler.consecutive_failures,
            last_error=self.last_error,
        )

    def _close_deadline(self) -> float:
        """The deadline closing works to: the whole one, or a short one for a wrong URL."""
        if self.answered:
            return self._deadline
        return min(self._deadline, self._close_started + self.config.close_unanswered_seconds)

    def _close_wait(self, now: float, deadline: float) -> tuple[float, bool]:
        """Seconds to wait before the next attempt while closing, and whether it is the last.

        The backoff is capped at ``close_retry_max_seconds``; a delay the
        destination asked for (``Retry-After``) is honoured, but never past one
        last attempt made shortly before ``deadline``, so a destination that
        comes back within the deadline still receives everything. The
        destination's own floor between requests (``Sink.min_interval_seconds``)
        always holds.
        """
        scheduler = self.scheduler
        cap = self.config.close_retry_max_seconds
        due = scheduler.due_at()
        backoff = 0.0 if due is None else max(due - now, 0.0)
        asked = 0.0 if scheduler.not_before is None else max(scheduler.not_before - now, 0.0)
        wait = max(min(backoff, cap), asked)
        remaining = deadline - time.monotonic()
        # The last attempt starts this long before the deadline, to have time to finish.
        lead = min(max(cap / 4, _LAST_ATTEMPT_LEAD_SECONDS), remaining / 2)
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

    def _finish(self) -> None:
        try:
            self._drain()
            last = False
            attempted = False
            while True:
                deadline = self._close_deadline()
                self._send_deadline = deadline
                if deadline - time.monotonic() <= 0:
                    break
                if self.opened is not None and not self.recorder.has_changes() and not self.queue:
                    break
                now = self.clock()
                if attempted and not self.scheduler.gap_allows(now):
                    # Only close()'s first send skips the destination's floor.
                    floor_at = (self.scheduler.last_attempt or now) + self.scheduler.min_request_gap
                    self.wake.wait(min(floor_at - now, max(deadline - time.monotonic(), 0.0)))
                    self.wake.clear()
                    self._drain()
                    continue
                attempted = True
                try:
                    delivered = self._attempt(now, closing=True)
                except Exception as exc:  # a raising sink gets the backoff, as while running
                    self._survive(exc)
                    delivered = False
                if delivered:
                    self._drain()
                    last = False
                    continue
                if last and self._close_deadline() <= deadline:
                    break  # the last attempt failed (unless the destination answered at last)
                if self.scheduler.due_at() is None:  # rejected: the same data will not be taken
                    break
                wait, last = self._close_wait(now, self._close_deadline())
                self.wake.wait(wait)
                self.wake.clear()
                self._drain()
        finally:
            with self.recorder.lock:
                arrived = [*self.recorder.store.series, *self.recorder.store.scalar_names]
                self.finished_cleanly = (
                    self.opened is not None and not self.queue and self.recorder.all_delivered()
                )
            self.recorder.selector.log_unmatched(arrived)
            self.recorder.once.summarize()
            self.once.summarize()
            if self.journal is not None:
                self.journal.close(delivered=self.finished_cleanly)
            try:
                self.sink.close()
            except Exception as exc:
                _log.warning("trainreport.sink_close_failed", error=describe_exception(exc))
