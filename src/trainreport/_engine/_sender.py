"""A destination's requests, run on the reporter thread or on a small thread of its own.

With several destinations, or with a journal, each gets a sender thread, so one
that hangs holds only its own thread (``docs/engine.md``). The sender runs a :class:`Job`
(an open, a send, or a journal recovery request's I/O: ``run_recovery``) and
touches nothing else; the reporter thread settles the job once it is done.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from trainreport._engine._destination import Job
from trainreport._engine._journal_feed import run_recovery
from trainreport._logging import describe_exception, get_logger
from trainreport._wire._sink_interface import Sink

__all__ = ["Sender"]

_log = get_logger()


class Sender:
    """Runs a destination's requests: on the reporter thread, or on a small thread of its own.

    With one destination and no journal the reporter thread calls the sink
    itself (no thread hop). With several, or with a journal, each
    destination gets a sender thread, so a destination that hangs holds only
    its own thread: the reporter thread keeps draining, scheduling and
    journaling, and the others keep their cadence (``docs/engine.md``). The
    reporter thread hands a :class:`Job` over and reads it back once
    ``done``; the sender touches nothing else.

    Args:
        sink: the destination's sink.
        on_own_thread: run requests on a thread of its own, started with the
            first (the driver's rule: several destinations, or a journal);
            otherwise on the thread that submits them (the reporter thread).
        on_done: called (from the sender thread) when a job is done (wakes
            the reporter thread).
        name: the thread's name.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        on_own_thread: bool,
        on_done: Any = None,
        name: str = "trainreport-sender",
    ) -> None:
        self._sink = sink
        self._on_own_thread = on_own_thread
        self._on_done = on_done
        self._name = name
        self._jobs: list[Job] = []
        self._ready = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def submit(self, job: Job) -> None:
        """Run ``job`` (at once on this thread, or on the sender thread)."""
        if not self._on_own_thread:
            self._run(job)
            return
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._jobs.append(job)
            self._ready.notify()

    def _run(self, job: Job) -> None:
        sink = self._sink
        try:
            if job.recovery is not None:  # a left-over journal's send, or a re-open
                job.result = run_recovery(job.recovery, sink, job.timeout)
            elif job.build is None:
                job.result = sink.open(timeout_seconds=job.timeout)
            else:
                job.result = sink.send(job.build.update, timeout_seconds=job.timeout)
        except Exception as exc:  # a raising sink gets the backoff, never kills a thread
            job.error = exc
        job.done = True

    def _loop(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._stopping:
                    self._ready.wait()
                if not self._jobs:
                    break
                job = self._jobs.pop(0)
            self._run(job)
            if self._on_done is not None:
                self._on_done()
        self._close_sink()

    def close(self, timeout: float) -> None:
        """Close the sink once the request in flight (if any) ends; wait up to ``timeout`` s."""
        if self._thread is None:
            self._close_sink()
            return
        with self._ready:
            self._stopping = True
            self._ready.notify()
        self._thread.join(max(0.0, timeout) if math.isfinite(timeout) else None)

    def _close_sink(self) -> None:
        try:
            self._sink.close()
        except Exception as exc:
            _log.warning("trainreport.sink_close_failed", error=describe_exception(exc))
