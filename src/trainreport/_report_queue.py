"""The report queue the training thread fills: its guard, its wake rule, its drop counters.

Every report call appends one tuple (built by ``_reports``) to a
``collections.deque``: no lock, no ``Event.set`` per report, no I/O
(docs/design.md#shape). This module owns what that append is checked and
followed by: the byte-budgeted memory guard (``max_queue_bytes``), the wake
rule (the run's first point at once, then one wake per ``drain_queue_depth``
reports, or fewer when that many would hold more than :data:`DRAIN_WAKE_BYTES`;
none again until the thread drained), the counters of refused and
failed reports, the count of report calls and their timing for the latency
histogram (``_histogram``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import sys
from array import array
from collections.abc import Callable
from time import perf_counter_ns
from typing import Concatenate, ParamSpec, TypeVar

from trainreport._config import ReportingConfig
from trainreport._histogram import FOLD_AT, TIMED_EVERY, LatencyHistogram
from trainreport._lifecycle import ReporterMachine, ReporterState
from trainreport._logging import OnceLogger, get_logger
from trainreport._reports import Report, queued_bytes
from trainreport._worker import Worker

__all__ = ["ReportQueue", "report_call", "safe_str"]


#: The reporter thread is woken to drain once about this many bytes (the memory
#: guard's estimate) are queued, even before ``drain_queue_depth`` reports: what
#: waits in the queue between drains is the training process's memory beside the
#: store's (``docs/engine.md``, "Memory").
DRAIN_WAKE_BYTES = 4 * 2**20
_log = get_logger()

#: A ``report_train_step`` whose count has none of these bits set is timed (``_histogram``).
UNTIMED_MASK = TIMED_EVERY - 1

_P = ParamSpec("_P")
_R = TypeVar("_R", bound="ReportQueue")


def report_call(
    method: Callable[Concatenate[_R, _P], None],
) -> Callable[Concatenate[_R, _P], None]:
    """Count and time a report method's calls and keep any exception from the caller.

    Every report method but ``report_train_step`` (the hot path, which counts
    itself and is timed by sample: ``_histogram``) runs under this; these calls
    are rare, and each is timed. Never raises an ``Exception``.
    """
    name = method.__name__

    @functools.wraps(method)
    def report(self: _R, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        self._calls += 1
        t0 = perf_counter_ns()
        try:
            method(self, *args, **kwargs)
        except Exception as exc:
            self._failed(name, exc)
        self._latencies.append(perf_counter_ns() - t0)

    return report


def safe_str(value: object) -> str:
    """``str(value)``, or a placeholder naming its type when ``__str__`` raises. Never raises."""
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


class ReportQueue:
    """The queue side of ``Reporter``: the state report calls share with the reporter thread.

    A base of ``Reporter``, not used alone. The reporter thread only calls
    :meth:`_drained` (through the worker's ``on_drained``); everything else
    runs on the caller's thread.
    """

    _queue: collections.deque[Report]
    _clock: Callable[[], float]
    _machine: ReporterMachine
    _worker: Worker | None
    _accepting: bool
    _max_queue_bytes: int
    _queued_bytes: int
    _drain_depth: int
    _wake_depth: int
    _histogram: LatencyHistogram
    _latencies: array[int]
    _sampled: array[int]
    # Class defaults: a Reporter pickled before these counts existed still counts.
    _calls: int = 0
    _train_calls: int = 0
    _queue_drops: int
    _after_close_drops: int
    _caller_drops: int
    _once: OnceLogger
    #: Report calls made, and bytes left queued, when the thread last drained (the
    #: wake depth in bytes: how wide the reports queued since are).
    _calls_at_drain: int = 0
    _queued_at_drain: int = 0
    #: Estimated bytes of one report, as wide as those queued before the last drain.
    _report_width: int = 1

    def _init_queue(self, config: ReportingConfig, clock: Callable[[], float]) -> None:
        """Set up the queue's state (``Reporter.__init__``)."""
        self._queue = collections.deque()
        self._clock = clock
        self._machine = ReporterMachine()
        self._worker = None
        self._accepting = True
        self._max_queue_bytes = config.max_queue_bytes
        # Estimated bytes of the reports queued: added by report calls, subtracted by
        # the reporter thread as it drains (each update is one indivisible step
        # under the GIL; an estimate, not an exact count).
        self._queued_bytes = 0
        self._drain_depth = config.drain_queue_depth
        # A report that brings the queue to this depth wakes the reporter thread: 1
        # until the run's first point was drained (the first point goes at once),
        # then drain_queue_depth; past a wake, no more until the thread drained.
        self._wake_depth = 1
        self._histogram = LatencyHistogram()
        # Report calls record their durations here (the histogram's buffers): every
        # other report call in _latencies, one report_train_step in TIMED_EVERY in _sampled.
        self._latencies = self._histogram.pending
        self._sampled = self._histogram.sampled
        # Calls made: report_train_step's, and every other kind's. Counted with no lock.
        # With the GIL, CPython switches threads only at calls and backward jumps, and
        # none falls inside one `+= 1` or the hot path's one-line count, so concurrent
        # calls lose no count; a build without the GIL could lose (never add) one.
        self._train_calls = 0
        self._calls = 0
        self._queue_drops = 0
        self._after_close_drops = 0
        self._caller_drops = 0
        self._once = OnceLogger()

    def _caller_drop_counts(self) -> dict[str, int]:
        """Drops counted on the caller's side, by reason (for ``stats()``)."""
        return {
            "queue_full": self._queue_drops,
            "after_close": self._after_close_drops,
            "report_failed": self._caller_drops,
        }

    def _put(self, item: Report, *, wake: bool) -> None:
        """Append one report (every report method but the inlined report_train_step).

        ``wake``: an event report, sent at once.
        """
        queue = self._queue
        if not self._accepting or self._queued_bytes >= self._max_queue_bytes:
            self._refuse_report()
            return
        queue.append(item)
        self._queued_bytes += queued_bytes(item)
        if len(queue) >= self._wake_depth:
            self._wake_for_depth()
        elif wake:
            self._wake_worker()

    def _drained(self, nbytes: int, deep_only: bool) -> None:
        """The reporter thread took reports of ``nbytes`` (estimated) off the queue.

        ``deep_only``: wake it again only at ``drain_queue_depth`` (else at the
        next report: the run's first point is still to come), or at fewer
        reports when that many, as wide as those drained, would be estimated
        past :data:`DRAIN_WAKE_BYTES` (100 metrics a report: about 800).
        """
        # Bytes and report calls queued since the last drain: how wide the reports are.
        added = self._queued_bytes - self._queued_at_drain
        self._queued_bytes -= nbytes
        self._queued_at_drain = self._queued_bytes
        calls = self._calls + self._train_calls
        reports, self._calls_at_drain = calls - self._calls_at_drain, calls
        if added > 0 and reports > 0:
            self._report_width = max(1, added // reports)
        # Wide reports: wake before they hold much memory.
        depth = max(1, min(self._drain_depth, DRAIN_WAKE_BYTES // self._report_width))
        self._wake_depth = depth if deep_only else 1
        self._histogram.fold()  # the report calls' durations, off the training thread

    def _wake_for_depth(self) -> None:
        self._wake_depth = sys.maxsize  # one wake per drain, not one per report
        self._wake_worker()

    def _wake_worker(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.wake.set()

    def _refuse_report(self) -> None:
        if self._histogram.unfolded() >= FOLD_AT:  # no drain comes: keep the buffers bounded
            self._histogram.fold()
        if not self._accepting:
            self._dropped_after_close()
            return
        self._queue_drops += 1
        if self._queue_drops == 1:
            _log.error(
                "trainreport.queue_full",
                max_queue_bytes=self._max_queue_bytes,
                queued_reports=len(self._queue),
            )

    def _dropped_after_close(self) -> None:
        if self._machine.state is ReporterState.INERT:
            return
        self._after_close_drops += 1
        if self._after_close_drops == 1:
            _log.warning(
                "trainreport.report_after_close",
                hint=(
                    "reports after close() are dropped: call close() after the last report "
                    "(in a finally block, or leave a `with Reporter(...)` block last)"
                ),
            )

    def _failed(self, report: str, exc: Exception) -> None:
        self._caller_drops += 1
        with contextlib.suppress(Exception):  # logging must not raise into training
            self._once.warning(
                ("report_failed", report),
                "trainreport.report_failed",
                report=report,
                error=f"{type(exc).__name__}"[:100],
            )
