"""One destination's requests on the reporter thread: open, build and send, settle the answer.

:meth:`Dispatch.attempt` opens the destination when it is not open, then
builds an update under the recorder's lock and hands it to the destination's
:class:`~trainreport._sender.Sender` outside it (docs/design.md#shape).
:meth:`Dispatch.settle` applies an ended request's answer with the pure
result handling of ``_destination.py`` (``settle_open``, ``settle_send``,
``settle_error``). With a sender thread a request only starts in
``attempt``; a later cycle settles it.

While closing, each request gets the time left to the close deadline as its
timeout (real time, ``time.monotonic``, whatever clock drives the scheduling).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from trainreport._destination import (
    Destination,
    Job,
    settle_error,
    settle_open,
    settle_send,
)
from trainreport._logging import get_logger
from trainreport._recorder import Recorder
from trainreport._reports import Report
from trainreport._sender import Sender
from trainreport._sink import Opened

__all__ = ["Dispatch"]

_log = get_logger()


class Dispatch:
    """Starts and settles the requests to each destination (reporter thread only).

    Args:
        recorder: the attempt's state.
        queue: the report queue (a send's answer needs to know whether it is empty).
        clock: the scheduling clock (seconds).
        wall_clock: returns ``updated_at`` strings.
        cancel_requested: set when a destination asks the run to stop.
        senders: one per destination, by index.
        drain: moves the queue into the recorder (after a successful open;
            after a delivered send while closing).
        after_open: called after an open's answer was settled (the resume may
            be decided now).
    """

    def __init__(
        self,
        *,
        recorder: Recorder,
        queue: collections.deque[Report],
        clock: Callable[[], float],
        wall_clock: Callable[[], str],
        cancel_requested: threading.Event,
        senders: list[Sender],
        drain: Callable[[], None],
        after_open: Callable[[], None],
    ) -> None:
        self._recorder = recorder
        self._queue = queue
        self._clock = clock
        self._wall_clock = wall_clock
        self._cancel_requested = cancel_requested
        self.senders = senders
        self._drain = drain
        self._after_open = after_open
        #: An open failed (with a journal, reports are drained from then on).
        self.open_failed = False

    def attempt(
        self,
        dest: Destination,
        now: float,
        *,
        closing: bool,
        complete: bool = False,
        deadline: Callable[[Destination], float] | None = None,
    ) -> bool:
        """Open if needed, then send. True when an update was delivered by the time it returns.

        Args:
            dest: the destination (no request of its in flight).
            now: the scheduling clock's time.
            closing: ``close()`` is sending the tail.
            complete: a ``flush()`` waits (the send carries the curves too).
            deadline: while closing, the real time (``time.monotonic``) a
                request to the destination must end by, asked before each
                request (an answer can change it); its timeout is the time left.

        A superseded destination (a later attempt owns the task) gets no
        request: nothing it is sent can be accepted (``docs/engine.md``).
        """
        if dest.superseded:
            return False
        if not dest.is_open:
            dest.requests_sent += 1  # reading the stored task is a request too
            job = Job(None, closing=closing, timeout=_timeout(dest, deadline))
            self._submit(dest, job)
            if dest.in_flight or not dest.is_open:  # failed, or in flight
                return False
        recorder = self._recorder
        if not recorder.seeded or not dest.in_step:
            return False  # a destination earlier in the list has not answered its first open
        include = dest.scheduler.carries_metrics(
            now, full_state=dest.full_state, closing=closing, complete=complete
        )
        build = recorder.build_update(
            dest.index, wall=self._wall_clock(), full_state=dest.full_state, include_metrics=include
        )
        dest.requests_sent += 1
        job = Job(build, include_metrics=include, closing=closing)
        job.timeout = _timeout(dest, deadline)
        return bool(self._submit(dest, job))

    def _submit(self, dest: Destination, job: Job) -> bool | None:
        """Hand ``job`` to the destination's sender; settle it when it already ended."""
        dest.job = job
        self.senders[dest.index].submit(job)
        return self.settle(dest, closing=job.closing)

    def settle(self, dest: Destination, *, closing: bool) -> bool | None:
        """Settle the destination's request if it ended. None: none ended; else delivered."""
        job = dest.job
        if job is None or not job.done:
            return None
        dest.job = None
        now = self._clock()
        if job.error is not None:
            settle_error(dest, job.error, now, opening=job.build is None)
            self.open_failed = self.open_failed or job.build is None
            return False
        result = job.result
        if job.build is None:
            settled = settle_open(dest, self._recorder, result, now)  # type: ignore[arg-type]
            self.open_failed = self.open_failed or not isinstance(result, Opened)
            self._after_open()
            if settled.delivered:
                self._drain()  # what waited for the stored task goes with the first send
            return settled.delivered
        settled = settle_send(
            dest,
            self._recorder,
            job,
            result,  # type: ignore[arg-type]
            now,
            wall=self._wall_clock(),
            queue_empty=not self._queue,
        )
        if settled.cancel and not self._cancel_requested.is_set():
            _log.warning("trainreport.cancel_requested", destination=dest.label)
            self._cancel_requested.set()
        if settled.delivered and closing:
            self._drain()
        return settled.delivered


def _timeout(dest: Destination, deadline: Callable[[Destination], float] | None) -> float | None:
    """A request's timeout (seconds): the time left to the close deadline, else none."""
    if deadline is None:
        return None
    end = deadline(dest)
    if end == float("inf"):
        return None
    return max(end - time.monotonic(), 0.001)
