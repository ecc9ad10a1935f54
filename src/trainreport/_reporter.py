"""Reporter: the public facade the training loop calls.

Every ``report_*`` method copies its arguments (turning tensor-like values into
plain numbers), appends one tuple to a ``collections.deque`` and returns: no
lock, no ``Event.set`` per report, no I/O, never raises
(docs/design.md#shape, #public-api, #guarantees).
Everything else happens on the reporter thread (``_worker.py``).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter_ns
from types import TracebackType
from typing import Any, ClassVar, Concatenate, ParamSpec

import attrs

from trainreport import _reports as reports
from trainreport._config import ReportingConfig
from trainreport._environment import DISABLED, journal_off
from trainreport._histogram import LatencyHistogram
from trainreport._journal_feed import JournalKeeper, journal_identity
from trainreport._lifecycle import ReporterInput, ReporterMachine, ReporterState
from trainreport._logging import OnceLogger, get_logger
from trainreport._params import MAX_PARAM_ITEMS, flatten_params_bounded
from trainreport._recorder import Recorder
from trainreport._reports import (
    REPORT_BYTES,
    TERMINAL_KINDS,
    VALUE_BYTES,
    queued_bytes,
    queued_points,
)
from trainreport._sink import Sink
from trainreport._values import MetricValue
from trainreport._worker import Worker, utc_now_iso
from trainreport.exceptions import ConfigError, TransitionError
from trainreport.sinks._journal import Journal

__all__ = [
    "INTERRUPTED",
    "PREEMPTED",
    "RANK_VARIABLES",
    "DestinationStats",
    "Reporter",
    "ReporterStats",
]

_log = get_logger()

#: The cancel reason of a run stopped by an interrupt (``KeyboardInterrupt``, Ctrl-C).
INTERRUPTED = "interrupted"
#: The cancel reason of a run the job system stops to requeue it (SIGTERM, Lightning's requeue).
PREEMPTED = "preempted"

#: Environment variables read, in order, for the global rank (docs/design.md#guarantees).
RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


_P = ParamSpec("_P")


def _report_call(
    method: Callable[Concatenate[Reporter, _P], None],
) -> Callable[Concatenate[Reporter, _P], None]:
    """Time a report method into the latency histogram and keep any exception from the caller.

    Every report method but ``report_train_step`` (which inlines the same
    lines: it is the hot path) runs under this. Never raises an ``Exception``.
    """
    name = method.__name__

    @functools.wraps(method)
    def report(self: Reporter, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        t0 = perf_counter_ns()
        try:
            method(self, *args, **kwargs)
        except Exception as exc:
            self._failed(name, exc)
        self._histogram.observe(perf_counter_ns() - t0)

    return report


@attrs.frozen
class DestinationStats:
    """One destination's share of ``Reporter.stats()``.

    Attributes:
        destination: the sink, as its repr shows it (``HttpSink`` shows URL, job, task).
        requests_sent: requests attempted to it (reads of the stored task included).
        requests_failed: those that were not delivered.
        consecutive_failures: failures since its last delivered send.
        bytes_sent: request bytes put on the wire (as the sink counts them).
        points_delivered: points it is known to hold.
        points_unsent: points it is not known to hold (queued reports included).
        last_error: its last failure's reason, or None.
        last_success_at: wall-clock time (ISO 8601 UTC) of its last delivered send.
    """

    destination: str
    requests_sent: int
    requests_failed: int
    consecutive_failures: int
    bytes_sent: int
    points_delivered: int
    points_unsent: int
    last_error: str | None
    last_success_at: str | None


@attrs.frozen
class ReporterStats:
    """A point-in-time view of a reporter's health (``Reporter.stats()``).

    With several destinations the top-level figures are totals: requests,
    failures and bytes are summed; ``consecutive_failures`` is the largest;
    ``points_delivered`` counts the points every destination holds and
    ``points_unsent`` the points some destination does not hold yet;
    ``last_error`` is the first destination's (in list order) that has one;
    ``last_success_at`` the latest. ``destinations`` has each one's own figures.

    Attributes:
        state: the reporter's lifecycle state (``new``, ``running``, ``closing``,
            ``closed``, ``inert``).
        requests_sent: sends attempted (including failed ones).
        requests_failed: sends that were not delivered.
        consecutive_failures: failures since the last delivered send.
        bytes_sent: request bytes put on the wire (as the sink counts them).
        points_recorded: series points applied to the store.
        points_delivered: points the destination is known to hold.
        points_unsent: points not yet known to be delivered.
        queue_depth: reports queued and not yet applied.
        queue_bytes: the memory guard's estimate of those reports, in bytes.
        drops: dropped items by reason (``queue_full``, ``name_cap``,
            ``not_chartable``, ``invalid_step``, ``after_close``, ...).
        rewinds: training-step rewinds and series tail replacements (docs/design.md#metrics).
        last_error: the last send failure's reason, or None.
        last_success_at: wall-clock time (ISO 8601 UTC) of the last delivered send.
        report_calls: report calls made on this reporter.
        report_p50_us: median time inside a report call, microseconds (±10 %).
        report_p99_us: 99th percentile of the same, microseconds (±10 %).
        report_max_us: longest report call, microseconds.
        report_total_seconds: total time spent inside report calls, seconds.
        destinations: each destination's figures, in ``Reporter(sinks=[...])`` order.
    """

    state: str
    requests_sent: int
    requests_failed: int
    consecutive_failures: int
    bytes_sent: int
    points_recorded: int
    points_delivered: int
    points_unsent: int
    queue_depth: int
    queue_bytes: int
    drops: Mapping[str, int]
    rewinds: int
    last_error: str | None
    last_success_at: str | None
    report_calls: int
    report_p50_us: float
    report_p99_us: float
    report_max_us: float
    report_total_seconds: float
    destinations: tuple[DestinationStats, ...] = ()


#: Started, unclosed reporters. Strong references: a reporter held only by a local
#: variable stays reachable until it is closed, so the exit hook can close it (the
#: worker thread holds no reference to its reporter).
_live_reporters: set[Reporter] = set()
_hooks_installed = False
_hooks_lock = threading.Lock()


def _after_fork_in_child() -> None:
    reporters = list(_live_reporters)
    _live_reporters.clear()  # the child never sends
    for reporter in reporters:
        reporter._after_fork_in_child()


def _close_at_exit() -> None:
    uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    for reporter in list(_live_reporters):
        reporter._close_at_exit(uncaught if isinstance(uncaught, BaseException) else None)


def _install_process_hooks() -> None:
    global _hooks_installed  # noqa: PLW0603 - process-wide hooks are installed once
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
        atexit.register(_close_at_exit)


def _budget(timeout: float) -> float:
    """A wait in seconds that `Event.wait` and `Thread.join` take: NaN, < 0 -> 0; inf capped."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(seconds) or seconds < 0:
        return 0.0
    return min(seconds, threading.TIMEOUT_MAX / 2)


def _global_rank(environ: Mapping[str, str]) -> int:
    for name in RANK_VARIABLES:
        raw = environ.get(name)
        if raw is None or raw == "":
            continue
        try:
            return int(raw)
        except ValueError:
            _log.warning("trainreport.rank_unreadable", variable=name, value=raw[:50])
            return 0
    return 0


def _disabled(environ: Mapping[str, str]) -> bool:
    return environ.get(DISABLED, "").strip().lower() in ("1", "true", "yes", "on")


class Reporter:
    """Reports a training run's phase, progress and metrics to its sinks, off the training thread.

    Args:
        sink: where updates go: :class:`~trainreport.HttpSink`,
            :class:`~trainreport.FileSink`, :class:`~trainreport.MemorySink`
            or your own :class:`~trainreport.Sink`.
        sinks: several destinations instead of one, e.g.
            ``sinks=[HttpSink(...), FileSink(...)]``: one record, one queue and
            one reporter thread; each destination has its own schedule, wire
            mode and retries, and one that fails or hangs never delays another.
            A resume reads the stored curves from the first destination (in
            this order) that holds the task (docs/engine.md).
        config: scheduling and shaping options (default ``ReportingConfig()``).
        clock: monotonic clock in seconds that drives the debounce, heartbeat
            and backoff; inject :class:`trainreport.testing.FakeClock` in tests.
            ``close()`` deadlines always use real time.
        rank: this process's global rank; ``None`` reads it in :meth:`start`
            from ``RANK``, then ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``,
            ``PMI_RANK``, ``PMIX_RANK`` (docs/design.md#guarantees). Only rank 0 reports.

    Thread-safety: report calls may come from any thread (they only append to a
    deque); ``start``, ``flush`` and ``close`` from any one thread at a time.

    Before :meth:`start` a reporter holds no thread, lock or connection, so it
    pickles; reports made before ``start()`` are kept and sent after it. If
    ``start()`` is never called, :meth:`close` starts the reporter and delivers
    them (docs/engine.md).

    Raises:
        ConfigError: neither or both of ``sink`` and ``sinks`` given, an
            empty ``sinks``, or the same sink object twice.
    """

    #: The cancel reason :meth:`report_outcome` gives a run stopped by an interrupt.
    INTERRUPTED: ClassVar[str] = INTERRUPTED
    #: The cancel reason :meth:`report_outcome` gives a run the job system preempts.
    PREEMPTED: ClassVar[str] = PREEMPTED

    def __init__(
        self,
        sink: Sink | None = None,
        config: ReportingConfig | None = None,
        *,
        sinks: Sequence[Sink] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rank: int | None = None,
    ) -> None:
        if (sink is None) == (sinks is None):
            raise ConfigError("give a sink, or sinks=[...], not both")
        chosen = [sink] if sink is not None else list(sinks or ())
        if not chosen:
            raise ConfigError("sinks=[...] is empty: give at least one sink")
        if len({id(s) for s in chosen}) != len(chosen):
            raise ConfigError("the same sink is given twice: each destination needs its own")
        self._sinks = tuple(chosen)
        self._config = config if config is not None else ReportingConfig()
        self._clock = clock
        self._rank = rank
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._machine = ReporterMachine()
        self._accepting = True
        self._max_queue_bytes = self._config.max_queue_bytes
        # Estimated bytes of the reports queued: added by report calls, subtracted by
        # the reporter thread as it drains (each update is one indivisible step
        # under the GIL; an estimate, not an exact count).
        self._queued_bytes = 0
        self._drain_depth = self._config.drain_queue_depth
        # A report that brings the queue to this depth wakes the reporter thread: 1
        # until the run's first point was drained (the first point goes at once),
        # then drain_queue_depth; past a wake, no more until the thread drained.
        self._wake_depth = 1
        self._histogram = LatencyHistogram()
        self._queue_drops = 0
        self._after_close_drops = 0
        self._caller_drops = 0
        self._pending_wake = False
        self._warned_undelivered = False
        self._worker: Worker | None = None
        self._recorder: Recorder | None = None
        self._cancel: threading.Event | None = None
        self._pid: int | None = None
        # The process whose reports the queue holds: a forked copy of an unstarted
        # reporter (a data-loader worker) must never deliver its parent's reports.
        self._owner_pid = os.getpid()
        self._once = OnceLogger()
        self._series_default: tuple[str, ...] = ("*",)

    # --- construction helpers --------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> Reporter:
        """Build a reporter from the environment a job system gives a pod.

        Reads ``TRAINREPORT_URL`` (base URL of the job-status service),
        ``TRAINREPORT_JOB_ID``, ``TRAINREPORT_TASK_ID`` (default ``train``),
        ``TRAINREPORT_TOKEN`` or ``TRAINREPORT_TOKEN_FILE``, and the config
        variables of ``docs/configuration.md`` (leniently: a bad value falls back
        to its default with a log event). Without a URL, reports go to a
        :class:`~trainreport.FileSink` under ``./trainreport-runs/``. Inside a
        Kubeflow TrainJob (``KUBEFLOW_TRAINER_SERVER_URL``) a
        :class:`~trainreport.KubeflowSink` is used, as a second destination
        after the ``HttpSink`` when ``TRAINREPORT_URL`` is set too
        (``trainreport.sinks.default_sinks_from_env``).
        ``TRAINREPORT_DISABLED=1`` and ranks other than 0 give a reporter that
        does nothing once started.

        Args:
            environ: the environment (default ``os.environ``).
            clock: see :class:`Reporter`.

        Returns:
            an unstarted :class:`Reporter`. Never raises for bad environment values.
        """
        from trainreport.sinks import default_sinks_from_env  # noqa: PLC0415 - avoids a cycle

        env = os.environ if environ is None else environ
        config = ReportingConfig.from_env(env)
        return cls(sinks=default_sinks_from_env(env), config=config, clock=clock)

    def use_series_default(self, patterns: tuple[str, ...]) -> bool:
        """Use an adapter's own default ``time_series_metrics`` (for adapters, before start).

        It applies only where the config's ``time_series_metrics`` is ``None``;
        a list the user gave always wins.

        Args:
            patterns: the adapter's default list (``docs/integrations.md``).

        Returns:
            ``True`` when it will be used; ``False`` once the reporter has
            started (the choice is made at ``start()``). Never raises.
        """
        if self._machine.state is not ReporterState.NEW:
            return False
        self._series_default = tuple(patterns)
        return True

    # --- lifecycle -------------------------------------------------------------------

    @property
    def state(self) -> ReporterState:
        """The reporter's lifecycle state (``docs/lifecycle.md``)."""
        return self._machine.state

    @property
    def config(self) -> ReportingConfig:
        """The configuration in use."""
        return self._config

    @property
    def sink(self) -> Sink:
        """The (first) sink updates go to."""
        return self._sinks[0]

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """Every sink updates go to, in order."""
        return self._sinks

    @property
    def cancel_requested(self) -> threading.Event:
        """Set when the job-status service asks the run to stop (the job was cancelled).

        Check ``reporter.cancel_requested.is_set()`` in the training loop and
        stop cleanly. Created on first access; never raises.
        """
        if self._cancel is None:
            self._cancel = threading.Event()
        return self._cancel

    def start(self) -> Reporter:
        """Start the reporter thread and return at once (it reads the stored task itself).

        On a rank other than global rank 0, when ``TRAINREPORT_DISABLED=1``, or
        in a process forked from the one that created it, the reporter becomes
        inert: no thread, no sink, and report calls do nothing. Idempotent:
        a second call does nothing.

        Returns:
            ``self``, for chaining. Never raises for a destination problem.
        """
        return self._start(threaded=True)

    def _start(self, *, threaded: bool) -> Reporter:
        """``start()``; ``threaded=False`` (tests) drives the same worker without a thread."""
        if self._machine.state is not ReporterState.NEW:
            return self
        rank = self._rank if self._rank is not None else _global_rank(os.environ)
        if rank != 0 or _disabled(os.environ):
            self._machine.apply(ReporterInput.START_INERT)
            self._accepting = False
            self._queue.clear()
            self._queued_bytes = 0
            _log.info("trainreport.inert", rank=rank, disabled=_disabled(os.environ))
            return self
        self._pid = os.getpid()
        recorder = Recorder(
            self._config, destinations=len(self._sinks), series_default=self._series_default
        )
        self._recorder = recorder
        self._worker = Worker(
            recorder=recorder,
            sinks=list(self._sinks),
            queue=self._queue,
            config=self._config,
            clock=self._clock,
            cancel_requested=self.cancel_requested,
            on_drained=self._drained,
            threaded=threaded,
            **self._journal_options(),
        )
        self._machine.apply(ReporterInput.START)
        _install_process_hooks()
        _live_reporters.add(self)
        self._worker.start()
        return self

    def _journal_options(self) -> dict[str, Any]:
        """The worker's journal arguments (``docs/engine.md``, "The journal in front of a service").

        With the config's ``journal`` on and ``TRAINREPORT_JOURNAL`` not ``0``:
        a ``FileSink`` (the local run log is its own journal) is sent to at
        least every ``journal_interval_seconds``, and the first destination
        with a job and a task that is not a local file gets a journal. None
        when the only destinations are local run logs (the embedded default).
        """
        config = self._config
        if not config.journal or journal_off(os.environ):
            return {}
        options: dict[str, Any] = {"local_log_interval_seconds": config.journal_interval_seconds}
        keyed = [(i, journal_identity(sink)) for i, sink in enumerate(self._sinks)]
        found = next(((i, ids) for i, ids in keyed if ids is not None), None)
        if found is None:
            return options
        index, (job_id, task_id) = found
        clock = self._clock

        def open_journal(recorder: Recorder) -> JournalKeeper | None:
            journal = Journal.claim(
                config.journal_dir,
                job_id,
                task_id,
                fsync_seconds=config.journal_fsync_seconds,
                clock=clock,
            )
            if journal is None:
                return None
            return JournalKeeper(
                journal,
                recorder,
                interval_seconds=config.journal_interval_seconds,
                clock=clock,
                wall_clock=utc_now_iso,
            )

        options.update(open_journal=open_journal, journal_destination=index)
        return options

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything recorded now, ignoring the debounce, and wait for delivery.

        Args:
            timeout: seconds to wait at most (default: the config's
                ``close_timeout_seconds``).

        Returns:
            True when everything recorded so far was delivered. Never raises.
        """
        worker = self._worker
        if worker is None or self._machine.state is not ReporterState.RUNNING:
            return self._machine.state is not ReporterState.NEW and self._delivered()
        budget = _budget(self._config.close_timeout_seconds if timeout is None else timeout)
        done = worker.request_flush()
        if not worker.threaded:  # tests: one cycle on this thread
            worker.cycle()
        return done.wait(budget) and worker.everything_delivered()

    def close(self, timeout: float | None = None) -> bool:
        """Drain the queue, send the tail and join the reporter thread, within ``timeout``.

        Call it from a ``finally`` block. Idempotent: later calls return the
        first call's answer (or wait for it when it is still running). On a
        reporter that was never started, with reports queued, it starts it
        first (rank and ``TRAINREPORT_DISABLED`` rules apply) and logs
        ``trainreport.started_at_close``; a forked copy of an unstarted
        reporter sends nothing (its parent delivers the reports).

        Args:
            timeout: seconds the whole close may take (default: the config's
                ``close_timeout_seconds``). A dead or hanging destination delays
                the caller by at most this.

        Returns:
            True only when everything recorded was delivered and nothing was
            dropped by the queue's memory guard.

        Raises:
            TransitionError: only with ``ReportingConfig(strict_transitions=True)``
                (tests), when a report was refused by the lifecycle tables.
                Never raises otherwise.
        """
        budget = _budget(self._config.close_timeout_seconds if timeout is None else timeout)
        deadline = time.monotonic() + budget
        if self._machine.state is ReporterState.NEW and not self._close_unstarted():
            return True
        state = self._machine.state
        if state is ReporterState.INERT:
            return True
        worker = self._worker
        assert worker is not None
        if state is ReporterState.RUNNING:
            self._machine.apply(ReporterInput.CLOSE)
            self._accepting = False
            worker.stop(deadline)
            if not worker.threaded:  # tests: the closing pass on this thread
                worker.finish()
        if os.getpid() == self._pid and worker.threaded:
            worker.thread.join(max(deadline - time.monotonic(), 0.0))
        if worker.threaded and worker.thread.is_alive():
            self._warn_undelivered(worker, timed_out=True)
            return False
        first_close = self._machine.state is ReporterState.CLOSING
        if first_close:
            self._machine.apply(ReporterInput.CLOSED)
            _live_reporters.discard(self)
        self._raise_strict_violations()
        delivered = self._delivered()
        if not delivered and first_close:
            self._warn_undelivered(worker, timed_out=False)
        return delivered

    def _warn_undelivered(self, worker: Worker, *, timed_out: bool) -> None:
        """One warning per destination that did not receive everything. Never raises."""
        if self._warned_undelivered:  # close() is idempotent; so is its warning
            return
        self._warned_undelivered = True
        try:
            stats = self.stats()
            dropped = sum(stats.drops.get(k, 0) for k in ("queue_full", "queue_bytes"))
            for dest, figures in zip(worker.destinations, stats.destinations, strict=True):
                holds_all = dest.finished_cleanly or (
                    worker.alive and worker.recorder.all_delivered(dest.index)
                )
                if holds_all and not stats.queue_depth and not dropped:
                    continue
                _log.warning(
                    "trainreport.close_undelivered",
                    destination=dest.label,
                    undelivered_reports=stats.queue_depth,
                    undelivered_points=figures.points_unsent,
                    dropped=dropped,
                    last_error=figures.last_error,
                    never_answered=not dest.answered,
                    timed_out=timed_out and dest.job is not None,
                )
        except Exception:  # noqa: S110 - a warning must never break close()
            pass

    def _close_unstarted(self) -> bool:
        """``close()`` on a reporter whose ``start()`` was forgotten (docs/engine.md).

        With queued reports, in the process that made them, it starts the
        reporter now (same rank and ``TRAINREPORT_DISABLED`` rules as ``start()``)
        and logs ``trainreport.started_at_close``, so that the caller's
        ``close()`` delivers them within its deadline. Otherwise (nothing queued,
        or a forked copy of a parent's queue) it closes without sending.

        Returns:
            True when the reporter was started and ``close()`` must go on.
        """
        queued = len(self._queue)
        if queued and os.getpid() == self._owner_pid:
            self.start()
            if self._machine.state is ReporterState.RUNNING:  # not another rank, not disabled
                _log.warning("trainreport.started_at_close", queued_reports=queued)
            return True
        self._machine.apply(ReporterInput.CLOSE)
        self._accepting = False
        self._queue.clear()
        self._queued_bytes = 0
        if queued:  # a forked child's copy: its parent holds and delivers these reports
            _log.info("trainreport.closed_in_forked_copy", reports_left_to_parent=queued)
        return False

    def _delivered(self) -> bool:
        worker = self._worker
        if worker is None:
            return not self._queue
        done = worker.finished_cleanly() if not worker.alive else worker.everything_delivered()
        return done and self._queue_drops == 0

    def _raise_strict_violations(self) -> None:
        recorder = self._recorder
        violations = recorder.strict_violations() if recorder is not None else ()
        if violations:
            raise TransitionError("; ".join(violations))

    def __enter__(self) -> Reporter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Report the block's outcome (:meth:`report_outcome`), then close."""
        self.report_outcome(exc)
        self.close()

    # --- process hooks ---------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        self._accepting = False
        self._queue = collections.deque()
        self._queued_bytes = 0
        self._machine.apply(ReporterInput.FORKED)
        if self._recorder is not None:
            self._recorder.after_fork()
        self._worker = None
        self._cancel = None

    def _close_at_exit(self, uncaught: BaseException | None) -> None:
        if self._pid != os.getpid() or self._machine.state is not ReporterState.RUNNING:
            return
        recorder = self._recorder
        # Reports made before the hook count even when still queued (a completion
        # reported just before exit must not read as a run without status).
        terminal = (recorder is not None and recorder.is_terminal) or any(
            item[0] in TERMINAL_KINDS for item in list(self._queue)
        )
        if not terminal:
            if uncaught is not None:
                self.report_outcome(uncaught)
            else:
                _log.warning("trainreport.run_ended_without_status")
        self.close(self._config.atexit_timeout_seconds)

    # --- pickling --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if self._machine.state is not ReporterState.NEW:
            raise TypeError("only an unstarted Reporter can be pickled")
        state = self.__dict__.copy()
        state["_cancel"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._owner_pid = os.getpid()  # an unpickled copy (a spawned worker) owns its reports

    # --- reading ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The task record the destination should now hold, in the ``GET`` shape.

        ``{"status": ..., "status_details": {..., "metrics": {name: [{"step", "epoch",
        "value"}]}}}``, the same shape as ``MemorySink.task``. It reflects the
        reports the reporter thread has applied; call :meth:`flush` (or
        :meth:`close`) first for an up-to-date view. Never raises.
        """
        recorder = self._recorder
        if recorder is None:
            return {"status": "pending", "status_details": {}}
        return recorder.snapshot()

    def stats(self) -> ReporterStats:
        """Counters, per destination and in total, and the report-call latency histogram.

        Cheap; never raises.
        """
        worker, recorder, h = self._worker, self._recorder, self._histogram
        drops: dict[str, int] = {}
        recorded = rewinds = 0
        n = len(self._sinks)
        delivered, unsent = (0,) * n, (0,) * n
        if recorder is not None:
            counts = recorder.counts()
            drops.update(counts.drops)
            recorded, rewinds = counts.points_recorded, counts.rewinds
            delivered, unsent = counts.delivered, counts.unsent
        # Reports still queued (not yet applied, e.g. the stored task was never read)
        # are recorded but unsent: each metric value they carry counts as a point.
        queued = sum(map(queued_points, list(self._queue)))
        recorded += queued
        if self._queue_drops:
            drops["queue_full"] = self._queue_drops
        if self._after_close_drops:
            drops["after_close"] = self._after_close_drops
        if self._caller_drops:
            drops["report_failed"] = self._caller_drops
        per = tuple(
            DestinationStats(
                destination=dest.label,
                requests_sent=dest.requests_sent,
                requests_failed=dest.requests_failed,
                consecutive_failures=dest.scheduler.consecutive_failures,
                bytes_sent=dest.bytes_sent,
                points_delivered=delivered[dest.index],
                points_unsent=unsent[dest.index] + queued,
                last_error=dest.last_error,
                last_success_at=dest.last_success_at,
            )
            for dest in (worker.destinations if worker is not None else ())
        )
        successes = [d.last_success_at for d in per if d.last_success_at is not None]
        return ReporterStats(
            state=self._machine.state.value,
            requests_sent=sum(d.requests_sent for d in per),
            requests_failed=sum(d.requests_failed for d in per),
            consecutive_failures=max((d.consecutive_failures for d in per), default=0),
            bytes_sent=sum(d.bytes_sent for d in per),
            points_recorded=recorded,
            points_delivered=min(delivered),
            points_unsent=max(unsent) + queued,
            queue_depth=len(self._queue),
            queue_bytes=max(self._queued_bytes, 0),
            drops=drops,
            rewinds=rewinds,
            last_error=next((d.last_error for d in per if d.last_error is not None), None),
            last_success_at=max(successes) if successes else None,
            report_calls=h.count,
            report_p50_us=h.percentile_us(0.5),
            report_p99_us=h.percentile_us(0.99),
            report_max_us=h.max_ns / 1000.0,
            report_total_seconds=h.total_ns / 1e9,
            destinations=per,
        )

    # --- the hot path ----------------------------------------------------------------

    def _put(self, item: tuple[Any, ...], *, wake: bool) -> None:
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
        next report: the run's first point is still to come).
        """
        self._queued_bytes -= nbytes
        self._wake_depth = self._drain_depth if deep_only else 1

    def _wake_for_depth(self) -> None:
        self._wake_depth = sys.maxsize  # one wake per drain, not one per report
        self._wake_worker()

    def _wake_worker(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.wake.set()

    def _refuse_report(self) -> None:
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
            _log.warning("trainreport.report_after_close")

    def _failed(self, report: str, exc: Exception) -> None:
        self._caller_drops += 1
        with contextlib.suppress(Exception):  # logging must not raise into training
            self._once.warning(
                ("report_failed", report),
                "trainreport.report_failed",
                report=report,
                error=f"{type(exc).__name__}"[:100],
            )

    def report_train_step(
        self,
        *,
        step: int,
        epoch: float | None = None,
        metrics: Mapping[str, MetricValue] | None = None,
    ) -> None:
        """Report one completed optimizer step and its metrics (stored as ``train_<name>``).

        Args:
            step: 1-based count of completed optimizer steps (int; numpy/tensor ints accepted).
            epoch: the epoch the step falls in: an int index (0-based if the
                run's first int epoch is 0) or a float of epochs completed (HF);
                see docs/design.md#metrics. ``None`` keeps the last epoch.
            metrics: metric name -> number (0-d tensors and numpy scalars are
                converted here with ``.item()``).

        Never raises, never blocks on I/O; bad values are dropped with one log event each.
        """
        t0 = perf_counter_ns()
        try:  # the hot path: one copy, one append, no lock, no Event.set
            if self._accepting and self._queued_bytes < self._max_queue_bytes:
                item = _train(self._clock(), step, epoch, metrics)
                queue = self._queue
                queue.append(item)
                # as queued_bytes() says (a copy has as many values as a dict of metrics)
                self._queued_bytes += (
                    REPORT_BYTES + VALUE_BYTES * len(metrics)
                    if type(metrics) is dict
                    else queued_bytes(item)
                )
                if len(queue) >= self._wake_depth:  # the first point, or a deep queue
                    self._wake_for_depth()
            else:
                self._refuse_report()
        except Exception as exc:
            self._failed("report_train_step", exc)
        dt = perf_counter_ns() - t0
        h = self._histogram
        n = dt.bit_length()
        h.counts[(n << 2) | ((dt >> (n - 3)) & 3) if n > 2 else n << 2] += 1
        h.total_ns += dt
        if dt > h.max_ns:  # noqa: PLR1730 - a compare is cheaper than max() here
            h.max_ns = dt

    @_report_call
    def report_validation(
        self,
        *,
        step: int,
        epoch: float | None = None,
        metrics: Mapping[str, MetricValue] | None = None,
        dataset: str | None = None,
    ) -> None:
        """Report validation metrics at ``step`` (stored as ``val_<name>``, docs/design.md#metrics).

        Args:
            step: the training step the validation belongs to.
            epoch: as in :meth:`report_train_step`.
            metrics: metric name -> number; ``eval_``/``val_`` prefixes are not doubled.
            dataset: validation dataset name; the first dataset keeps plain
                ``val_`` names, others get ``val_<dataset>_<name>``.

        Never raises, never blocks on I/O.
        """
        self._put(reports.validation(self._clock(), step, epoch, metrics, dataset), wake=False)

    @_report_call
    def report_metrics(
        self, *, step: int, metrics: Mapping[str, MetricValue] | None, phase: str
    ) -> None:
        """Report metrics of another phase (``test``, or a stream such as ``system``).

        Stored as ``<phase>_<name>``; never moves training progress or the phase.

        Args:
            step: the step the metrics belong to.
            metrics: metric name -> number.
            phase: an identifier such as ``"test"`` or ``"system"``.

        Never raises, never blocks on I/O.
        """
        self._put(reports.metrics_report(self._clock(), step, metrics, phase), wake=False)

    @_report_call
    def report_training_start(
        self, *, max_steps: int | None = None, num_epochs: int | None = None
    ) -> None:
        """Report that training begins (phase ``training``); sent at once.

        Args:
            max_steps: total optimizer steps planned (for ``percentage_done`` and ETA).
            num_epochs: epochs planned (caps the epoch of each point).

        Never raises, never blocks on I/O.
        """
        self._put(reports.training_start(self._clock(), max_steps, num_epochs), wake=True)

    @_report_call
    def report_hyperparameters(self, *, params: Mapping[str, Any]) -> None:
        """Report hyperparameters, flattened with ``/`` and stored once as ``hyperparameters``.

        Args:
            params: a (nested) mapping; values that are not JSON scalars are
                stored as strings. At most ``MAX_PARAM_ITEMS`` (10,000) items
                are flattened on the caller's thread (each key and each element
                of a list counts one); keys past that are left out, counted
                (``hyperparameters_truncated``) and logged once. A value too
                large for any request to the destination is dropped there
                (``field_too_large``) and never holds back the curves.

        Never raises, never blocks on I/O.
        """
        given: object = params  # callers may pass anything; never trust the annotation
        if isinstance(given, Mapping):
            # Bounded: the caller's thread never flattens more than MAX_PARAM_ITEMS items.
            flat, left_out = flatten_params_bounded(given, MAX_PARAM_ITEMS)
        else:
            flat, left_out = None, 0
        if flat is None:
            self._once.warning(
                "hyperparameters",
                "trainreport.report_dropped",
                report="report_hyperparameters",
                reason="params is not a mapping",
            )
        else:
            self._put(reports.hyperparameters(self._clock(), flat, left_out), wake=False)

    @_report_call
    def report_epoch_end(self, *, epoch: float) -> None:
        """Report that ``epoch`` ended (same epoch rule as train steps); sent at once.

        Never raises, never blocks on I/O.
        """
        self._put(reports.epoch_end(self._clock(), epoch), wake=True)

    @_report_call
    def report_checkpoint_saved(self, *, path: object, step: int | None = None) -> None:
        """Report a saved checkpoint (``checkpoint_path``, phase ``checkpointing``); sent at once.

        Args:
            path: where the checkpoint is (str or ``os.PathLike``; stored as text).
                ``None`` or an empty path is never sent: the report is logged
                once and the last good ``checkpoint_path`` stays.
            step: the step it holds.

        Never raises, never blocks on I/O.
        """
        text = (
            None
            if path is None
            else _safe_str(os.fspath(path) if isinstance(path, os.PathLike) else path)
        )
        self._put(reports.checkpoint(self._clock(), text, step), wake=True)

    @_report_call
    def report_completed(self) -> None:
        """Report that the run completed; sent at once.

        The first terminal report wins (docs/design.md#lifecycle).

        Never raises, never blocks on I/O.
        """
        self._put(reports.completed(self._clock()), wake=True)

    @_report_call
    def report_cancelled(self, *, reason: str = "cancelled") -> None:
        """Report that the run was cancelled (``"preempted"``, ``"interrupted"`` or free text).

        Never raises, never blocks on I/O.
        """
        self._put(reports.cancelled(self._clock(), _safe_str(reason)[:4096]), wake=True)

    @_report_call
    def report_error(self, error: BaseException | str) -> None:
        """Report that the run failed with ``error`` (status ``failed``); sent at once.

        A ``KeyboardInterrupt`` (Ctrl-C) is not a failure: it is reported as
        :meth:`report_cancelled` with reason ``"interrupted"`` (docs/lifecycle.md), so the
        usual ``except BaseException as exc: reporter.report_error(exc)`` records
        an interrupted run correctly.

        Args:
            error: the exception (its type name and message are kept, never
                the exception itself, which would hold frames and tensors) or a message.

        Never raises, never blocks on I/O.
        """
        if isinstance(error, KeyboardInterrupt):
            self._put(reports.cancelled(self._clock(), INTERRUPTED), wake=True)
            return
        if isinstance(error, BaseException):
            kind, message = type(error).__name__, _safe_str(error)
        else:
            kind, message = "Error", _safe_str(error)
        self._put(reports.failed(self._clock(), kind, message[:4096]), wake=True)

    def report_outcome(
        self, error: BaseException | None = None, *, preempted: bool = False
    ) -> None:
        """Report how the run ended, from the exception that ended it (the one rule).

        Every adapter, hook and ``with Reporter(...)`` block ends a run through
        this method, so the mapping is written once (docs/lifecycle.md):

        ============================================  =================================
        what ended the run                            terminal report
        ============================================  =================================
        ``preempted=True`` (SIGTERM, a requeue)       ``cancelled``, reason ``"preempted"``
        ``KeyboardInterrupt`` (Ctrl-C)                ``cancelled``, reason ``"interrupted"``
        ``None``, or ``SystemExit`` with code 0/None  ``completed``
        any other exception (``SystemExit(1)`` too)   ``failed`` (type name and message)
        ============================================  =================================

        The first terminal report of an attempt wins, so calling this after an
        adapter already reported an outcome changes nothing.

        Args:
            error: the exception that ended the run, or ``None`` for a run that
                ran to its end.
            preempted: the job system is stopping the run to requeue it.

        Never raises, never blocks on I/O. (Not timed itself: the one report
        method it calls is, once.)
        """
        try:
            preempt = bool(preempted)
            clean_exit = isinstance(error, SystemExit) and error.code in (0, None)
            completed = not preempt and (error is None or clean_exit)
        except Exception as exc:  # a hostile exit code or flag: the caller never sees it
            self._failed("report_outcome", exc)
            preempt = completed = False
        if preempt:
            self.report_cancelled(reason=PREEMPTED)
        elif completed:
            self.report_completed()
        else:  # report_error maps KeyboardInterrupt to cancelled (interrupted)
            self.report_error(error if error is not None else "report_outcome failed")


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


_train = reports.train
