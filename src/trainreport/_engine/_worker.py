"""The reporter thread: the driver, the only code that owns threads and reads the clocks.

Each cycle (:meth:`Worker.cycle`) drains everything queued into the recorder,
records the journal when due, and asks the engine core (``_engine/_core.py``) what to
do for each destination: it settles the answers of requests that ended and
starts the requests the core hands out, through the destination's sink
(``_engine/_sender.py``), then waits as long as the core says (docs/design.md#shape).
Every decision is the core's: when to send and whether a send carries the
curves, what a ``flush()`` forces, the close's retries within its deadline
(its three regimes: running, flushing, closing); what an answer does
(``_engine/_destination.py``); which stored task seeds a resume (``_engine/_resume.py``); what
an update holds (``_record/_recorder.py``). Waits are ``Event.wait(remaining)``, never
``time.sleep``.

Several destinations share the one store, queue and reporter thread; each has
its own scheduler, state, wire mode and request in flight. With more than one,
or with a journal, each destination's requests run on a small sender thread of
its own, so one that hangs never holds up the others nor the journal
(``docs/engine.md``); only one destination without a journal (a ``FileSink``,
a ``MemorySink``) is sent to from the reporter thread itself.

Closing: drain, send the tail to every destination (the core's closing
regime, within the shared real-time deadline), close the journal and the sinks.

There is one mode: :meth:`Worker.start` starts the thread. The core's
decisions are tested on the core itself (``tests/engine/test_core.py``); tests that
need the real sinks step this thread one cycle at a time through the one wait
it makes between cycles (:meth:`Worker.idle`, ``tests/helpers.py``'s ``drive``).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from trainreport._engine._core import Answer, EngineCore
from trainreport._engine._destination import Destination, Job, new_destination, warn_if_unsent_old
from trainreport._engine._journal_feed import JournalKeeper
from trainreport._engine._resume import Resume
from trainreport._engine._sender import Sender
from trainreport._engine._system import (
    MIN_SAMPLE_WAIT_SECONDS,
    SystemSampler,
    load_nvml,
    load_psutil,
)
from trainreport._logging import describe_exception, get_logger
from trainreport._record._device import DEVICE_POLL_SECONDS, await_device_values, device_head
from trainreport._record._machines import DestinationInput
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report, event_queued, queued_at
from trainreport._reporting_config import ReportingConfig
from trainreport._wire._sink_interface import Sink
from trainreport._wire._stamps import Stamps, utc_now_iso

__all__ = ["Worker", "utc_now_iso"]

_log = get_logger()


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
        open_journal: called once, when the attempt begins (on the reporter
            thread), with the recorder; returns the journal keeper or ``None``
            (``docs/engine.md``, "The journal in front of a service"). The
            journal is recorded after a drain at least every
            ``journal_interval_seconds`` (the thread wakes that often; every
            destination's requests run on its sender thread, so none delays
            it; reports are drained before the stored task is read once the
            first opens are that late, one failed, or ``close()`` began), the
            journals of dead processes are delivered after the first open of
            destination ``journal_destination`` (requests the core hands out,
            run on its sender), and it is closed, or removed when every
            destination holds everything, at the end.
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
        open_journal: Callable[[Recorder], JournalKeeper | None] | None = None,
        journal_destination: int = 0,
        local_log_interval_seconds: float | None = None,
    ) -> None:
        self.recorder = recorder
        self.queue = queue
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock if wall_clock is not None else Stamps()
        self.on_drained = on_drained
        self.wake = threading.Event()
        self.destinations = [
            new_destination(i, sink, config, interval=local_log_interval_seconds)
            for i, sink in enumerate(sinks)
        ]
        self._resume = Resume(open_journal, interval=config.min_report_interval_seconds)
        self._journal_destination = journal_destination
        # A request that hangs holds only its sender's thread: the reporter thread
        # keeps the other destinations' cadence and the journal's (docs/engine.md).
        isolated = len(sinks) > 1 or open_journal is not None
        senders = [
            Sender(
                d.sink,
                on_own_thread=isolated,
                on_done=self.wake.set,
                name=f"trainreport-send-{i}",
            )
            for i, d in enumerate(self.destinations)
        ]
        self._senders = senders
        self._cancel_requested = cancel_requested
        self.core = EngineCore(
            recorder=recorder,
            destinations=self.destinations,
            config=config,
            resume=self._resume,
            wall_clock=self.wall_clock,
            journal_destination=journal_destination,
        )
        self.thread = threading.Thread(target=self._run, name="trainreport-reporter", daemon=True)
        self._stopping = False
        self._deadline = float("inf")
        self._close_started = float("inf")
        self._had_point = False
        self._began = False
        #: The close sequence began: every drain is journaled at once (:meth:`_drain`),
        #: reports waiting for the stored task included (``Resume.reports_wait``).
        self._closing = False
        #: The journal kept for this attempt, once claimed (``None``: no journal).
        self.journal: JournalKeeper | None = None
        #: A journal record's ``at`` when reports queued before it were left behind a
        #: copy in flight: recorded again once none is queued (:meth:`_record_journal`).
        self._journal_owed: float | None = None
        #: The system stream's sampler (``system_metrics_seconds``), made on this thread.
        self.system: SystemSampler | None = None

    # --- control from other threads ----------------------------------------------

    def start(self) -> None:
        """Start the reporter thread, which begins the attempt (returns at once)."""
        self.thread.start()

    def stop(self, deadline: float) -> None:
        """Ask the thread to drain, send the tail and exit by ``deadline`` (time.monotonic)."""
        self._deadline = deadline
        self._close_started = time.monotonic()
        self._stopping = True
        self.wake.set()

    def request_flush(self) -> threading.Event:
        """Ask for an immediate send of everything; the event is set once all is delivered."""
        done = self.core.flush.request()
        self.wake.set()
        return done

    @property
    def alive(self) -> bool:
        """The reporter thread runs."""
        return self.thread.is_alive()

    def everything_delivered(self) -> bool:
        """True when nothing queued or recorded is undelivered, to any destination."""
        return self.core.everything_delivered(queue_empty=not self.queue)

    def finished_cleanly(self) -> bool:
        """After :meth:`finish`: every destination was opened and holds everything."""
        return all(d.finished_cleanly for d in self.destinations)

    # --- the thread ----------------------------------------------------------------

    def _begin(self) -> None:
        if self._began:
            return
        self._began = True
        interval = self.config.system_metrics_seconds
        if interval is not None:  # the libraries are imported here, off the training thread
            self.system = SystemSampler(
                interval, clock=self.clock, psutil=load_psutil(), nvml=load_nvml()
            )
        now = self.clock()
        self._resume.open_journal(self.recorder, self.wall_clock, now)
        self.journal = self._resume.journal
        if self.journal is not None:  # it says when superseded (docs/engine.md, "Recovery")
            dest = self.destinations[self._journal_destination]
            self.journal.superseded = lambda: dest.superseded
        self.core.begin(now)

    def _run(self) -> None:
        try:
            self._begin()
            while not self._stopping:
                self.idle(self.cycle())
            self.finish()
        except BaseException as exc:
            _log.error("trainreport.reporter_thread_crashed", error=describe_exception(exc))
        finally:
            self.core.flush.release()

    def idle(self, seconds: float) -> None:
        """The wait between two cycles: ``seconds`` at most, cut short by :attr:`wake`.

        The thread's only wait while running (the close pass waits on
        :attr:`wake` too, for the core's closing regime). Never raises.
        """
        if self.wake.wait(seconds):
            self.wake.clear()

    def cycle(self) -> float:
        """One pass: drain, record the journal when due, settle ended requests, send what is due.

        Returns:
            the seconds until the next pass is due (the thread waits that long
            unless woken). Never raises an ``Exception``.
        """
        self._begin()
        core = self.core
        try:
            # A record holds what the drain took: the journal's interval counts from
            # the clock read before it, so a report queued during the drain is in
            # the next record, due one interval after (docs/engine.md).
            drained_at = self.clock()
            self._drain()
            now = self.clock()
            if self.system is not None and self.recorder.seeded:
                sample = self.system.sample_if_due(now)
                if sample:
                    self.recorder.record_system(now, sample)
            self._record_journal(drained_at)
            core.seed_if_decided(now)
            # Before the sends: a destination sent to on this thread holds the thread for
            # its request, and what is reported meanwhile waits in the queue; drained
            # just now, it is what the destination lacks (docs/engine.md, "Memory").
            core.check_behind(now)
            for dest in self.destinations:
                self._settle(dest)
                self._perform(dest, core.running_request(dest, now))
            flush = core.flush
            if flush.waiting and core.nothing_left_to_send(queue_empty=not self.queue):
                flush.release()
            warn_if_unsent_old(
                self.destinations, self.recorder, self.config.unsent_warning_seconds, now
            )
        except Exception as exc:  # a bug must not kill the thread; back off instead
            core.cycle_failed(exc, self.clock())
        return self._sleep_seconds()

    def _settle(self, dest: Destination, *, within_attempt: bool = False) -> None:
        """Hand the core the answer of ``dest``'s request, if it ended, and do what it asks."""
        job = dest.job
        if job is None or not job.done:
            return  # nothing ended: no clock read
        answer = self.core.settle(
            dest,
            self.clock(),
            time.monotonic(),
            queue_empty=not self.queue,
            within_attempt=within_attempt,
        )
        if answer is not None:
            self._react(dest, answer)

    def _react(self, dest: Destination, answer: Answer) -> None:
        journal = self.journal
        if answer.writer_generation is not None and journal is not None:
            # Before any send under it: a recovery never takes this process's own
            # writes for a newer writer's (docs/engine.md, "Recovery").
            journal.journal.mark_writer(generation=answer.writer_generation)
        if answer.cancel and not self._cancel_requested.is_set():
            _log.warning("trainreport.cancel_requested", destination=dest.label)
            self._cancel_requested.set()
        if answer.drain:
            self._drain()

    def _perform(self, dest: Destination, job: Job | None) -> None:
        """Run the core's request through the destination's sender; settle it if it ended.

        On a sender thread the request usually goes on after this returns (a
        later pass settles it); otherwise its answer is settled at once and an
        open is followed by the attempt's send (:meth:`EngineCore.follow_up`).
        """
        while job is not None:
            self._senders[dest.index].submit(job)
            if not job.done:
                return  # in flight on its sender: a later pass settles it
            self._settle(dest, within_attempt=True)
            job = self.core.follow_up(dest, job, self.clock(), time.monotonic())

    def _sleep_seconds(self) -> float:
        now, journal = self.clock(), self.journal
        wait = self.core.next_wait(now, journal_due=None if journal is None else journal.next_due())
        if self._awaits_device_values():
            wait = min(wait, DEVICE_POLL_SECONDS)
        if self.system is not None:  # the next sample of the system stream
            wait = min(wait, max(self.system.next_due() - now, MIN_SAMPLE_WAIT_SECONDS))
        return wait

    def _record_journal(self, drained_at: float) -> None:
        """Record the journal when due, and again once copies that kept reports out are applied.

        A record holds what the drain before it (at ``drained_at``) took: the
        reports behind a device report whose copy is in flight are not in it.
        Once no report queued before that record waits at the queue's head
        (``DEVICE_POLL_SECONDS`` after the copies complete, at most), one more
        record holds them: they miss the journal window by the copies'
        latency, not by a whole interval (docs/design.md#device-values).
        """
        journal = self.journal
        if journal is None:
            return
        owed = self._journal_owed
        head = device_head(self.queue)
        if journal.due(drained_at):
            journal.record(at=drained_at)
            if head is not None and queued_at(head) < drained_at:
                self._journal_owed = drained_at
        elif owed is not None and (head is None or queued_at(head) >= owed):
            journal.record(at=drained_at)
            self._journal_owed = None

    def _awaits_device_values(self) -> bool:
        """Whether the thread looks again in ``DEVICE_POLL_SECONDS`` for the queue's head.

        The drain stopped at a device report whose copy was in flight, and
        something waits for it: a flush (or close), the run's first point, an
        event report behind it (sent at once once applied), or a journal
        record it kept points out of (:meth:`_record_journal`). Training
        reports alone wait for the next cycle: the copy completes long before
        the next send is due. Never while the store is not seeded: the
        reports wait in the queue then, and a look would be a busy loop.
        """
        head = device_head(self.queue)
        if head is None or not self.recorder.seeded:
            return False
        return (
            self.core.flush.waiting
            or not self._had_point
            or self._journal_owed is not None
            or event_queued(self.queue)
        )

    def _drain(self) -> None:
        """Move the queue into the recorder; while closing, journal it at once.

        From the start of the close sequence on, every drain is followed by a
        journal record with an ``fsync`` (nothing is written when nothing
        changed), so the terminal report and the last points are on disk
        before any send of the close sequence: the deadline a hanging service
        runs ``close()`` to is when a job system's SIGKILL comes
        (``docs/engine.md``, "The journal in front of a service").
        """
        drained_at = self.clock()
        self._apply_queue()
        journal = self.journal
        if self._closing and journal is not None:
            journal.record(at=drained_at, sync=True)

    def _apply_queue(self) -> None:
        queue = self.queue
        recorder = self.recorder
        # Until the stored task has been read, reports wait in the queue (Resume.reports_wait);
        # past drain_queue_depth (a long outage at start) they are applied, bounding memory,
        # and seeding merges the stored curves under them (Recorder.seed).
        waiting = not recorder.seeded and self._resume.reports_wait(
            self.clock(), open_failed=self.core.open_failed, closing=self._closing
        )
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
        self.core.drained(self.clock(), urgent=urgent, first_point=first_point)

    # --- closing -------------------------------------------------------------------

    def _await_device_values(self) -> None:
        """Wait for queued device copies for at most half of close's time left (``_device.py``)."""
        if self.queue:
            start = time.monotonic()

            def wait(seconds: float) -> None:
                if self.wake.wait(seconds):
                    self.wake.clear()

            until = start + max(self._deadline - start, 0.0) / 2
            await_device_values(self.queue, wait, until=until, now=time.monotonic)

    def finish(self) -> None:
        """Drain, send the tail to every destination within the deadline, close the sinks."""
        self._begin()
        self.core.close(deadline=self._deadline, started=self._close_started)
        self._closing = True
        try:
            self._await_device_values()
            self._close_pass()
        finally:
            journal = self.journal
            if journal is not None:
                self._drain()  # what was reported while closing goes into the journal
            queue_empty = not self.queue
            for dest in self.destinations:
                if dest.in_step and queue_empty and self.recorder.all_delivered(dest.index):
                    dest.apply(DestinationInput.CLOSED_HOLDING_ALL)
            self.recorder.finish()
            for dest in self.destinations:
                dest.once.summarize()
            if journal is not None:
                journal.close(delivered=self.finished_cleanly())
            for sender in self._senders:
                sender.close(max(self._deadline - time.monotonic(), 0.0))

    def _close_pass(self) -> None:
        """Step every destination through the core's closing regime until each is done."""
        core = self.core
        self._drain()
        while True:
            for dest in self.destinations:
                while True:
                    self._settle(dest)
                    job = core.close_request(
                        dest, self.clock(), time.monotonic(), queue_empty=not self.queue
                    )
                    if job is None:
                        break
                    self._perform(dest, job)
            core.seed_if_decided(self.clock(), real=time.monotonic())
            wait = core.close_wait_seconds(time.monotonic())
            if wait is None:
                return
            if wait > 0:
                self.wake.wait(wait)
                self.wake.clear()
            self._drain()
