"""The reporter thread: a driver that owns the thread and nothing else.

Each cycle (:meth:`Worker.cycle`) drains everything queued into the recorder,
settles the answers of requests that ended, and, for each destination whose
scheduler says a send is due, builds an update under the recorder's lock and
hands it to the destination's sender outside it (docs/design.md#shape). The
decisions live elsewhere: when to send and whether a send carries the curves
(``_scheduler.py``), what an answer does (``_destination.py``), what an update
holds (``_recorder.py``). Waits are ``Event.wait(remaining)``, never
``time.sleep``.

Several destinations share the one store, queue and reporter thread; each has
its own scheduler, opened state, wire mode and request in flight. With more
than one, each destination's requests run on a small sender thread of its
own, so one that hangs never holds up the others (``docs/engine.md``).

Closing: drain, send the tail to every destination (retrying with backoff
while the shared real-time deadline allows), log never-matched
``time_series_metrics`` patterns, close the sinks. The deadline is real time
(``time.monotonic``) whatever clock drives the scheduling, because
``close(timeout)`` bounds real process exit.

Tests drive the same code without a thread: ``Worker(..., threaded=False)``,
then :meth:`Worker.cycle` as often as they like and :meth:`Worker.finish`.
"""

from __future__ import annotations

import collections
import datetime
import threading
import time
from collections.abc import Callable

from trainreport._config import ReportingConfig
from trainreport._destination import (
    MAX_FLOOR_SECONDS,
    Destination,
    Job,
    Sender,
    adopt,
    floor_of,
    seed_source,
    settle_error,
    settle_open,
    settle_send,
)
from trainreport._journal_feed import JournalKeeper
from trainreport._logging import describe_exception, get_logger
from trainreport._payloads import StoredState
from trainreport._recorder import Recorder
from trainreport._reports import Report
from trainreport._scheduler import SendScheduler
from trainreport._sink import Opened, OpenResult, Sink
from trainreport.sinks._file import FileSink

__all__ = ["Worker", "utc_now_iso"]

_log = get_logger()
#: The longest single wait of the reporter thread (a day): bounded so that a huge
#: configured interval never overflows ``Event.wait``.
_MAX_SLEEP_SECONDS = MAX_FLOOR_SECONDS
#: While closing, the last attempt starts at least this long (seconds) before the
#: deadline (a quarter of ``close_retry_max_seconds`` when that is longer), or
#: half the time left when less remains.
_LAST_ATTEMPT_LEAD_SECONDS = 0.1
#: The shortest wait between two journal records (seconds): a journal interval of 0
#: means a record at every wake, never a busy loop.
_MIN_JOURNAL_WAIT_SECONDS = 0.001


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


def _is_open(dest: Destination) -> bool:
    """Whether ``dest`` is open now (a call, so a type checker does not narrow it for good)."""
    return dest.opened is not None


def _in_flight(dest: Destination) -> bool:
    """Whether a request to ``dest`` is in flight (see :func:`_is_open`)."""
    return dest.job is not None


class _Closing:
    """One destination's progress through ``close()`` (real-time seconds)."""

    __slots__ = ("attempted", "done", "last", "next_at")

    def __init__(self) -> None:
        self.attempted = False
        self.last = False
        self.done = False
        self.next_at = 0.0


class Worker:
    """Drives a :class:`Recorder` and its destinations from one daemon thread.

    Args:
        recorder: the attempt's state.
        sinks: the destinations, in order (the first holding the task seeds a resume).
        queue: the deque the training thread appends report tuples to.
        config: scheduling configuration.
        clock: monotonic clock (seconds) that drives scheduling; injectable.
        wall_clock: returns ``updated_at`` strings (default: ISO 8601 UTC to the
            millisecond, strictly increasing from one send to the next); injectable.
        cancel_requested: set when a destination asks the run to stop.
        on_drained: called after each drain with the estimated bytes
            (``queued_bytes``) of the reports it took off the queue (the memory
            guard's count) and whether a report call should wake the thread only
            at ``drain_queue_depth`` (the first point was applied, or the
            stored task is not read yet) rather than at once.
        threaded: run on a thread of its own (``start()``); ``False`` for tests,
            which call :meth:`cycle` and :meth:`finish` themselves.
        open_journal: called once, when the attempt begins (on the reporter
            thread), with the recorder; returns the journal keeper or ``None``
            (``docs/engine.md``, "The journal in front of a service"). The
            journal is recorded after a drain at least every
            ``journal_interval_seconds`` (the thread wakes that often), the
            journals of dead processes are delivered with the first open of
            destination ``journal_destination`` (on its sender), and it is
            closed, or removed when every destination holds everything, at the end.
        journal_destination: the index of the destination the journal is kept for.
        local_log_interval_seconds: the send interval of a ``FileSink`` (the
            local run log is its own journal), when shorter than the config's.
    """

    def __init__(
        self,
        *,
        recorder: Recorder,
        sinks: list[Sink],
        queue: collections.deque[Report],
        config: ReportingConfig,
        clock: Callable[[], float],
        wall_clock: Callable[[], str] | None = None,
        cancel_requested: threading.Event,
        on_drained: Callable[[int, bool], None] | None = None,
        threaded: bool = True,
        open_journal: Callable[[Recorder], JournalKeeper | None] | None = None,
        journal_destination: int = 0,
        local_log_interval_seconds: float | None = None,
    ) -> None:
        self.recorder = recorder
        self.queue = queue
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock if wall_clock is not None else _Stamps()
        self.cancel_requested = cancel_requested
        self.on_drained = on_drained
        self.threaded = threaded
        self.open_journal = open_journal
        self.journal: JournalKeeper | None = None
        self._journal_destination = journal_destination
        self._local_log_interval = local_log_interval_seconds
        #: An open failed (with a journal, reports are drained from then on).
        self._open_failed = False
        self.wake = threading.Event()
        self.destinations = [self._destination(i, sink) for i, sink in enumerate(sinks)]
        several = threaded and len(sinks) > 1
        self._senders = [
            Sender(
                d.sink,
                threaded=several,
                on_done=self.wake.set,
                name=f"trainreport-send-{i}",
                after_open=self._recover if i == journal_destination else None,
            )
            for i, d in enumerate(self.destinations)
        ]
        self.thread = threading.Thread(target=self._run, name="trainreport-reporter", daemon=True)
        self._stopping = False
        self._deadline = float("inf")
        self._close_started = float("inf")
        self._flush_waiters: list[threading.Event] = []
        #: Per destination: a flush() asked for a send that has not been made yet.
        self._flush_requested = [False] * len(sinks)
        self._flush_lock = threading.Lock()
        self._had_point = False
        self._began = False
        #: When (scheduling clock) the first destination opened, for the resume decision.
        self._first_opened_at: float | None = None

    def _destination(self, index: int, sink: Sink) -> Destination:
        # A destination's own floor (Sink.min_interval_seconds, e.g. Kubeflow
        # Trainer's 5 s) holds whatever the config says: for regular sends, and
        # as a gap between any two attempts (events, retries, flush).
        config = self.config
        floor = floor_of(sink)
        interval = config.min_report_interval_seconds
        if self._local_log_interval is not None and isinstance(sink, FileSink):
            interval = min(interval, self._local_log_interval)
        scheduler = SendScheduler(
            min_interval=max(interval, floor),
            min_request_gap=floor,
            heartbeat=config.heartbeat_seconds,
            backoff_initial=config.backoff_initial_seconds,
            backoff_max=config.backoff_max_seconds,
            backoff_multiplier=config.backoff_multiplier,
            backoff_jitter=config.backoff_jitter,
            rejected_backoff=config.rejected_backoff_seconds,
        )
        return Destination(index=index, sink=sink, scheduler=scheduler)

    # --- control from other threads ----------------------------------------------

    def start(self) -> None:
        """Begin the attempt; start the thread when threaded (returns at once)."""
        if self.threaded:
            self.thread.start()
        else:
            self._begin()

    def stop(self, deadline: float) -> None:
        """Ask the thread to drain, send the tail and exit by ``deadline`` (time.monotonic)."""
        self._deadline = deadline
        self._close_started = time.monotonic()
        self._stopping = True
        self.wake.set()

    def request_flush(self) -> threading.Event:
        """Ask for an immediate send of everything; the event is set once all is delivered."""
        done = threading.Event()
        with self._flush_lock:
            self._flush_waiters.append(done)
            self._flush_requested = [True] * len(self.destinations)
        self.wake.set()
        return done

    @property
    def alive(self) -> bool:
        """The reporter thread runs (or, unthreaded, has not finished)."""
        return self.thread.is_alive() if self.threaded else not self._stopping

    def everything_delivered(self) -> bool:
        """True when nothing queued or recorded is undelivered, to any destination."""
        recorder = self.recorder
        return not self.queue and all(recorder.all_delivered(d.index) for d in self.destinations)

    def finished_cleanly(self) -> bool:
        """After :meth:`finish`: every destination was opened and holds everything."""
        return all(d.finished_cleanly for d in self.destinations)

    def _nothing_left_to_send(self) -> bool:
        recorder = self.recorder
        return not self.queue and not any(recorder.has_changes(d.index) for d in self.destinations)

    # --- the thread ----------------------------------------------------------------

    def _begin(self) -> None:
        if self._began:
            return
        self._began = True
        self._open_journal()
        self.recorder.start_attempt()
        now = self.clock()
        for dest in self.destinations:
            dest.scheduler.note_change(now, urgent=True)

    def _run(self) -> None:
        try:
            self._begin()
            while not self._stopping:
                timeout = self.cycle()
                if self.wake.wait(timeout):
                    self.wake.clear()
            self.finish()
        except BaseException as exc:
            _log.error("trainreport.reporter_thread_crashed", error=describe_exception(exc))
        finally:
            with self._flush_lock:
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
            return
        if self.journal is not None:
            # The sends' stamps: a journal's updated_at orders with theirs (recovery
            # sends the journal's task fields only when they are not older).
            self.journal.wall_clock = self.wall_clock

    def _recover(self, sink: Sink, opened: Opened, timeout: float | None) -> OpenResult:
        """After the journal destination's open: deliver what dead processes left first."""
        journal = self.journal
        if journal is None or not journal.journal.left_over:
            return opened
        return journal.recover(sink, opened, timeout)

    def cycle(self) -> float:
        """One pass: drain, record the journal when due, settle ended requests, send what is due.

        Returns:
            the seconds until the next pass is due (the thread waits that long
            unless woken). Never raises an ``Exception``.
        """
        self._begin()
        try:
            self._drain()
            now = self.clock()
            journal = self.journal
            if journal is not None and journal.due(now):
                journal.record()
            # flush() sends now, even during a backoff, and keeps sending while its
            # waiters wait and sends succeed (a short acknowledgement needs a resend).
            complete = bool(self._flush_waiters)
            self._seed_if_decided()
            for dest in self.destinations:
                self._settle(dest, closing=False)
                forced = self._flush_wants_a_send(dest, now)
                if forced:
                    self._flush_requested[dest.index] = False
                    dest.scheduler.note_change(now, urgent=True)
                if dest.job is None and (forced or dest.scheduler.is_due(now)):
                    # A pending flush wants the curves too, not only an event send.
                    self._attempt(dest, now, closing=False, complete=complete)
            self._release_flush_waiters()
            self._warn_if_unsent_old(now)
        except Exception as exc:  # a bug must not kill the thread; back off instead
            for dest in self.destinations:
                if dest.job is None:
                    settle_error(dest, exc, self.clock())
        return self._sleep_seconds()

    def _flush_wants_a_send(self, dest: Destination, now: float) -> bool:
        """A flush() is waiting and may send now: not before a server-requested delay."""
        flushing = self._flush_requested[dest.index]
        if dest.job is not None or not (flushing or self._flush_waiters):
            return False
        scheduler = dest.scheduler
        if scheduler.not_before is not None and now < scheduler.not_before:
            return False  # Retry-After is honoured even by flush()
        if not scheduler.gap_allows(now):
            return False  # so is the destination's own floor between requests
        if flushing:
            return True
        if scheduler.consecutive_failures:
            return False  # our own backoff applies to the resends of a flush
        return self.recorder.has_changes(dest.index)

    def _sleep_seconds(self) -> float:
        now = self.clock()
        # Wake at least once per debounce interval to look at the queue: the
        # training thread does not signal ordinary reports (docs/design.md#public-api).
        # (A local run log's shorter interval counts: it is sent to that often.)
        interval = min(
            self.config.min_report_interval_seconds,
            *(d.scheduler.min_interval for d in self.destinations),
        )
        wait = min(max(interval, 0.05), _MAX_SLEEP_SECONDS)
        for dest in self.destinations:
            if dest.job is not None:
                continue  # its sender wakes this thread when the request ends
            if self._flush_wants_a_send(dest, now):
                return 0.0
            due = dest.scheduler.due_at()
            if due is not None:
                wait = min(wait, max(due - now, 0.0))
        if self.journal is not None:
            wait = min(wait, max(self.journal.next_due() - now, _MIN_JOURNAL_WAIT_SECONDS))
        return wait

    def _drain(self) -> None:
        queue = self.queue
        recorder = self.recorder
        # Until the stored task has been read, reports wait in the queue, so that
        # seeding is exact (docs/design.md#metrics); past drain_queue_depth (a long outage at start)
        # they are applied, bounding memory, and seeding merges the stored curves
        # under them (Recorder.seed).
        # With a journal, once an open has failed (a destination down at start), the
        # queue is drained at every wake, so the journal bounds what a kill loses.
        waiting = not recorder.seeded and not (self.journal is not None and self._open_failed)
        if not queue or (waiting and len(queue) < self.config.drain_queue_depth):
            if self.on_drained is not None:
                # Re-arm the report calls' wake: at the first point once the store is
                # seeded (it goes at once), otherwise at drain_queue_depth.
                self.on_drained(0, self._had_point or waiting)
            return
        urgent, released, has_point = recorder.apply_all(queue)
        first_point = not self._had_point and has_point
        if first_point:  # the first point goes at once, curves included
            self._had_point = True
        if self.on_drained is not None:
            self.on_drained(released, self._had_point)
        now = self.clock()
        for dest in self.destinations:
            dest.scheduler.note_change(now, urgent=urgent, first_point=first_point)

    # --- open and send -------------------------------------------------------------

    def _timeout(self, dest: Destination, closing: bool) -> float | None:
        if not closing:
            return None
        deadline = self._close_deadline(dest)
        if deadline == float("inf"):
            return None
        return max(deadline - time.monotonic(), 0.001)

    def _attempt(
        self, dest: Destination, now: float, *, closing: bool, complete: bool = False
    ) -> bool:
        """Open if needed, then send. True when an update was delivered by the time it returns.

        With a sender thread the request is only started here; its answer is
        settled by a later cycle.
        """
        if dest.opened is None:
            dest.requests_sent += 1  # reading the stored task is a request too
            self._submit(dest, Job(None, closing=closing, timeout=self._timeout(dest, closing)))
            if dest.job is not None or not _is_open(dest):  # failed, or in flight
                return False
            self._drain()
        if not self.recorder.seeded or not dest.known:
            return False  # a destination earlier in the list has not answered its first open
        scheduler = dest.scheduler
        include = scheduler.carries_metrics(
            now, full_state=dest.full_state, closing=closing, complete=complete
        )
        build = self.recorder.build_update(
            dest.index, wall=self.wall_clock(), full_state=dest.full_state, include_metrics=include
        )
        dest.requests_sent += 1
        job = Job(build, include_metrics=include, closing=closing)
        job.timeout = self._timeout(dest, closing)
        delivered = self._submit(dest, job)
        return bool(delivered)

    def _submit(self, dest: Destination, job: Job) -> bool | None:
        """Hand ``job`` to the destination's sender; settle it when it already ended."""
        dest.job = job
        self._senders[dest.index].submit(job)
        return self._settle(dest, closing=job.closing)

    def _settle(self, dest: Destination, *, closing: bool) -> bool | None:
        """Settle the destination's request if it ended. None: none ended; else delivered."""
        job = dest.job
        if job is None or not job.done:
            return None
        dest.job = None
        now = self.clock()
        if job.error is not None:
            settle_error(dest, job.error, now)
            self._open_failed = self._open_failed or job.build is None
            return False
        result = job.result
        if job.build is None:
            settled = settle_open(dest, self.recorder, result, now)  # type: ignore[arg-type]
            self._open_failed = self._open_failed or not isinstance(result, Opened)
            self._seed_if_decided(patient=True)
            return settled.delivered
        settled = settle_send(
            dest,
            self.recorder,
            job,
            result,  # type: ignore[arg-type]
            now,
            wall=self.wall_clock(),
            queue_empty=not self.queue,
        )
        if settled.cancel and not self.cancel_requested.is_set():
            _log.warning("trainreport.cancel_requested", destination=dest.label)
            self.cancel_requested.set()
        if settled.delivered and closing:
            self._drain()
        return settled.delivered

    def _seed_if_decided(self, *, patient: bool = False) -> None:
        """Seed the store once the resume rule can decide (``seed_source``), then adopt the rest.

        ``patient``: wait for every first open (right after one ended).
        """
        recorder = self.recorder
        if recorder.seeded:
            return
        now = self.clock()
        if self._first_opened_at is None and any(d.opened for d in self.destinations):
            self._first_opened_at = now
        # A destination whose first open is still in flight holds the resume back
        # one debounce interval at most: a hanging one never stalls the others.
        waited = self._first_opened_at is not None and (
            now - self._first_opened_at >= self.config.min_report_interval_seconds
        )
        stop_waiting = not patient and (waited or self._stopping)
        source = seed_source(self.destinations, stop_waiting=stop_waiting)
        if source is False:
            return
        state = StoredState(series={})
        if isinstance(source, Destination) and source.stored is not None:
            state = source.stored
        recorder.seed(state, source.index if isinstance(source, Destination) else 0)
        if state.series:
            _log.info(
                "trainreport.resumed",
                series=len(state.series),
                points=sum(len(s[0]) for s in state.series.values()),
                destination=source.label if isinstance(source, Destination) else None,
            )
        for dest in self.destinations:
            if dest is source:
                dest.known = True
                dest.stored = None
            elif dest.opened is not None:
                adopt(dest, recorder)
        if not isinstance(source, Destination):
            # Nothing stored anywhere: every opened destination starts from nothing.
            for dest in self.destinations:
                if dest.opened is not None:
                    dest.known = True

    # --- flush, warnings, closing --------------------------------------------------

    def _release_flush_waiters(self) -> None:
        if not self._flush_waiters or not self._nothing_left_to_send():
            return
        with self._flush_lock:
            waiters, self._flush_waiters = self._flush_waiters, []
        for w in waiters:
            w.set()

    def _warn_if_unsent_old(self, now: float) -> None:
        limit = self.config.unsent_warning_seconds
        for dest in self.destinations:
            since = dest.scheduler.pending_since
            if since is None or now - since < limit or limit <= 0:
                continue
            last = dest.last_unsent_warning
            if last is not None and now - last < limit:
                continue
            dest.last_unsent_warning = now
            _log.warning(
                "trainreport.unsent_data_old",
                age_seconds=round(now - since, 1),
                unsent_points=self.recorder.unsent_points(dest.index),
                consecutive_failures=dest.scheduler.consecutive_failures,
                last_error=dest.last_error,
                destination=dest.label,
            )

    def _close_deadline(self, dest: Destination) -> float:
        """The deadline closing works to: the whole one, or a short one for a wrong URL."""
        if dest.answered:
            return self._deadline
        return min(self._deadline, self._close_started + self.config.close_unanswered_seconds)

    def _close_wait(self, dest: Destination, now: float, deadline: float) -> tuple[float, bool]:
        """Seconds to wait before the next attempt while closing, and whether it is the last.

        The backoff is capped at ``close_retry_max_seconds``; a delay the
        destination asked for (``Retry-After``) is honoured, but never past one
        last attempt made shortly before ``deadline``, so a destination that
        comes back within the deadline still receives everything. The
        destination's own floor between requests (``Sink.min_interval_seconds``)
        always holds.
        """
        scheduler = dest.scheduler
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

    def _close_step(self, dest: Destination, state: _Closing) -> None:
        """Move one destination's close along: settle, decide, attempt; set ``next_at``/``done``."""
        while not state.done:
            if dest.job is not None:
                ended = self._settle(dest, closing=True)
                if ended is None:
                    deadline = self._close_deadline(dest)
                    if time.monotonic() >= deadline:
                        state.done = True  # a request still in flight at the deadline
                    else:
                        state.next_at = deadline
                    return
                self._after_close_attempt(dest, state, ended)
                continue
            deadline = self._close_deadline(dest)
            if deadline - time.monotonic() <= 0:
                state.done = True
                return
            if (
                dest.opened is not None
                and dest.known
                and not self.recorder.has_changes(dest.index)
                and not self.queue
            ):
                state.done = True
                return
            if time.monotonic() < state.next_at:
                return
            now = self.clock()
            scheduler = dest.scheduler
            if state.attempted and not scheduler.gap_allows(now):
                # Only close()'s first send skips the destination's floor.
                floor_at = (scheduler.last_attempt or now) + scheduler.min_request_gap
                state.next_at = time.monotonic() + max(floor_at - now, 0.0)
                return
            if dest.opened is not None and not (self.recorder.seeded and dest.known):
                # Waiting for another destination's first open to decide the resume.
                state.next_at = time.monotonic() + 0.01
                return
            state.attempted = True
            try:
                ended = self._attempt(dest, now, closing=True)
            except Exception as exc:  # a raising sink gets the backoff, as while running
                settle_error(dest, exc, self.clock())
                ended = False
            if _in_flight(dest):
                continue  # in flight on its sender: settled above when it ends
            if _is_open(dest) and not dest.known:
                state.next_at = time.monotonic()  # opened; the resume is decided after this pass
                return
            self._after_close_attempt(dest, state, ended)

    def _after_close_attempt(self, dest: Destination, state: _Closing, delivered: bool) -> None:
        deadline = self._close_deadline(dest)
        if delivered:
            self._drain()
            state.last = False
            state.next_at = 0.0
            return
        if state.last and self._close_deadline(dest) <= deadline:
            state.done = True  # the last attempt failed (unless the destination answered at last)
            return
        if dest.scheduler.due_at() is None:  # rejected: the same data will not be taken
            state.done = True
            return
        wait, state.last = self._close_wait(dest, self.clock(), deadline)
        state.next_at = time.monotonic() + wait

    def finish(self) -> None:
        """Drain, send the tail to every destination within the deadline, close the sinks."""
        self._begin()
        states = [_Closing() for _ in self.destinations]
        try:
            self._drain()
            while True:
                for dest, state in zip(self.destinations, states, strict=True):
                    if not state.done:
                        self._close_step(dest, state)
                self._seed_if_decided()
                pending = [s for s in states if not s.done]
                if not pending:
                    break
                wait = min(s.next_at for s in pending) - time.monotonic()
                if wait > 0:
                    self.wake.wait(wait)
                    self.wake.clear()
                self._drain()
        finally:
            if self.journal is not None:
                # Reports still waiting for the stored task go into the journal.
                self._open_failed = True
                self._drain()
            queue_empty = not self.queue
            for dest in self.destinations:
                dest.finished_cleanly = (
                    dest.opened is not None
                    and dest.known
                    and queue_empty
                    and self.recorder.all_delivered(dest.index)
                )
            self.recorder.finish()
            for dest in self.destinations:
                dest.once.summarize()
            if self.journal is not None:
                self.journal.close(delivered=self.finished_cleanly())
            for sender in self._senders:
                sender.close(max(self._deadline - time.monotonic(), 0.0))
