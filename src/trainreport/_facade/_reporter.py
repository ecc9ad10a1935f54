"""Reporter: the public facade the training loop calls, one class.

Every ``report_*`` method copies its arguments on the caller's thread (turning
tensor-like values into plain numbers: a tensor's value is taken at call time;
a CUDA tensor's by a copy that does not wait for the device, ``_record/_device.py``),
appends one report (``_reports``) to a ``collections.deque`` and returns: no
lock, no ``Event.set`` per report, no I/O, never raises
(docs/design.md#shape, #public-api, #guarantees). Everything else happens on
the reporter thread, driven by a ``Worker`` (``_engine/_worker.py``) that ``start()``
builds; ``flush()`` and ``close()`` hand it a deadline.

What the training thread touches is the ``Reporter``'s own attributes: the
deque, the memory guard (``max_queue_bytes`` against the estimated
``_queued_bytes``) and the wake rule (the run's first point at once, then one
wake per ``drain_queue_depth`` reports, or fewer when that many would hold
more than :data:`DRAIN_WAKE_BYTES`; none again until the thread drained:
``_wake_depth``), the call counters and the latency histogram's buffers. The
pieces that are concepts of their own are composed: the report protocol
(``_reports``), the lifecycle table (``_record/_machines.py``'s ``ReporterMachine``), the
latency histogram (``_histogram``), what ``stats()`` returns
(``_reporter_stats``), what ``close()`` logs (``_close_report``) and the
process-wide fork and exit hooks (``_process_hooks``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

from trainreport._engine._closing import wait_for_close
from trainreport._engine._journal_feed import JournalKeeper, JournalWatch, journal_identity
from trainreport._environment import DISABLED, journal_off
from trainreport._facade._close_report import (
    describe_destination,
    left_over_waiting,
    log_close_progress,
    log_closed,
    warn_undelivered,
)
from trainreport._facade._histogram import FOLD_AT, TIMED_EVERY, LatencyHistogram
from trainreport._facade._process_hooks import forget, remember
from trainreport._facade._reporter_stats import DestinationStats, ReporterStats, assemble_stats
from trainreport._logging import OnceLogger, describe_exception, get_logger
from trainreport._record import _reports as reports
from trainreport._record._machines import ReporterInput, ReporterMachine, ReporterState
from trainreport._record._params import MAX_PARAM_ITEMS, flatten_params_bounded
from trainreport._record._recorder import Recorder
from trainreport._record._reports import (
    HEADER_KEYS,
    REPORT_BYTES,
    TRAIN_EPOCH,
    TRAIN_STEP,
    TRAIN_TIME,
    VALUE_BYTES,
    Report,
    queued_bytes,
)
from trainreport._record._values import MetricValue
from trainreport._reporting_config import ReportingConfig, from_env_over
from trainreport._runlog._journal import Journal, JournalPaths
from trainreport._wire._payloads import ColumnPoints
from trainreport._wire._sink_interface import Sink
from trainreport._wire._stamps import utc_now_iso
from trainreport.exceptions import ConfigError, TransitionError

if TYPE_CHECKING:
    from trainreport._engine._worker import Worker

__all__ = [
    "INTERRUPTED",
    "PREEMPTED",
    "DRAIN_WAKE_BYTES",
    "RANK_VARIABLES",
    "DestinationStats",
    "Reporter",
    "ReporterStats",
    "report_call",
    "safe_str",
]

_log = get_logger()

#: Environment variables read, in order, for the global rank (docs/design.md#guarantees).
#: The reporter thread is woken to drain once about this many bytes (the memory
#: guard's estimate) are queued, even before ``drain_queue_depth`` reports: what
#: waits in the queue between drains is the training process's memory beside the
#: store's (``docs/engine.md``, "Memory").
DRAIN_WAKE_BYTES = 4 * 2**20

RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
#: The cancel reason of a run stopped by an interrupt (``KeyboardInterrupt``, Ctrl-C).
INTERRUPTED = "interrupted"
#: The cancel reason of a run the job system stops to requeue it (SIGTERM, Lightning's requeue).
PREEMPTED = "preempted"

#: A ``report_train_step`` whose count has none of these bits set is timed (``_histogram``).
UNTIMED_MASK = TIMED_EVERY - 1
#: Epochs the short form carries as they are (anything else takes the general form).
_EPOCH_TYPES = frozenset({int, float, type(None)})
# Globals, not module attributes: one lookup each on the hot path.
_train = reports.train
_to_numbers = reports.to_numbers
_deferred = reports.deferred

_P = ParamSpec("_P")
_R = TypeVar("_R", bound="Reporter")


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
        t0 = self._timer()
        try:
            method(self, *args, **kwargs)
        except Exception as exc:
            self._failed(name, exc)
        self._latencies.append(self._timer() - t0)

    return report


def safe_str(value: object) -> str:
    """``str(value)``, or a placeholder naming its type when ``__str__`` raises. Never raises."""
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


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
        timer: the clock report calls time themselves with, in integer
            nanoseconds (``stats()``'s report-call latencies); tests inject a
            stand-in rather than patch ``time.perf_counter_ns``.
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

    # Class defaults: a Reporter pickled before these existed still works.
    _calls: int = 0
    _train_calls: int = 0
    #: ``trainreport.closed`` was logged (close() is idempotent; so is its line).
    _logged_closed: bool = False
    #: What ``stats()`` says about the journal (set at ``start()``; ``None``: no journal).
    _journal_watch: JournalWatch | None = None
    #: The report calls' own timing clock (integer nanoseconds).
    _timer: Callable[[], int] = time.perf_counter_ns

    def __init__(
        self,
        sink: Sink | None = None,
        config: ReportingConfig | None = None,
        *,
        sinks: Sequence[Sink] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rank: int | None = None,
        timer: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if (sink is None) == (sinks is None):
            raise ConfigError(["give a sink, or sinks=[...], not both"])
        chosen = [sink] if sink is not None else list(sinks or ())
        if not chosen:
            raise ConfigError(["sinks=[...] is empty: give at least one sink"])
        if len({id(s) for s in chosen}) != len(chosen):
            raise ConfigError(["the same sink is given twice: each destination needs its own"])
        self._sinks = tuple(chosen)
        self._config = config = config if config is not None else ReportingConfig()
        self._clock = clock
        self._timer = timer
        self._rank = rank
        self._machine = ReporterMachine()
        self._worker: Worker | None = None
        self._recorder: Recorder | None = None
        self._cancel: threading.Event | None = None
        self._pid: int | None = None
        # The process whose reports the queue holds: a forked copy of an unstarted
        # reporter (a data-loader worker) must never deliver its parent's reports.
        self._owner_pid = os.getpid()
        self._series_default: tuple[str, ...] = ("*",)
        self._warned_undelivered = False
        # --- what report calls touch (the training thread) ---
        self._queue: collections.deque[Report] = collections.deque()
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
        # Report calls made, and bytes left queued, when the thread last drained, and
        # the estimated bytes of one report as wide as those queued before it: the
        # wake depth in bytes (_drained).
        self._calls_at_drain = 0
        self._queued_at_drain = 0
        self._report_width = 1
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
        # Reports refused or failed on the caller's side, by reason (``stats().drops``).
        self._queue_drops = 0
        self._after_close_drops = 0
        self._caller_drops = 0
        self._once = OnceLogger()

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        config: ReportingConfig | None = None,
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
            environ: the environment (default ``os.environ``), a mapping of
                variable names to values.
            config: the script's own configuration, in place of the defaults:
                each ``TRAINREPORT_<FIELD>`` variable that is set overrides its
                field (the job system has the last word, as it does for the
                destination), and a bad one keeps the value given here. A field
                the environment changed is named in one
                ``trainreport.config_overridden`` event
                (docs/configuration.md#reporterfrom_env-and-an-explicit-config).
                ``None``: ``ReportingConfig.from_env(environ)``.
            clock: see :class:`Reporter`.

        Returns:
            an unstarted :class:`Reporter`. Never raises for bad environment values.

        Raises:
            ConfigError: ``environ`` is not a mapping (a ``ReportingConfig``
                given as the first argument: pass it as ``config=``), or
                ``config`` is not a ``ReportingConfig``. Raised at setup,
                never by a report call.
        """
        from trainreport.sinks import default_sinks_from_env  # noqa: PLC0415 - avoids a cycle

        env = os.environ if environ is None else environ
        if not isinstance(env, Mapping):
            raise ConfigError([_not_an_environment(env)])
        if config is None:
            chosen = ReportingConfig.from_env(env)
        elif isinstance(config, ReportingConfig):
            chosen = from_env_over(env, config)
        else:
            raise ConfigError(
                [
                    f"config must be a ReportingConfig, not {type(config).__name__}; parse a"
                    " mapping with ReportingConfig.from_mapping(...) first @ config"
                ]
            )
        return cls(sinks=default_sinks_from_env(env), config=chosen, clock=clock)

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

    # --- reading -------------------------------------------------------------------

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

    def snapshot(self, timeout_seconds: float = 10.0) -> dict[str, Any]:
        """The task record the destination should now hold, in the ``GET`` shape.

        ``{"status": ..., "status_details": {..., "metrics": {name: [{"step", "epoch",
        "value"}]}}}``, the same shape as ``MemorySink.task``. It reflects the
        reports the reporter thread has applied; call :meth:`flush` (or
        :meth:`close`) first for an up-to-date view. In a long run a series'
        points that every destination holds leave memory (``docs/engine.md``,
        "Memory"); they are read back here from the first destination that can
        (``Sink.read_back``: a ``FileSink``'s run log first, then an
        ``HttpSink``'s read, as ``client.read_task`` reads, each within
        ``timeout_seconds``), so the
        snapshot is still the whole record. A destination the curves are sent
        thinned to is not read back (it holds fewer points). If none can, such
        a series is given from its first point still in memory (a thinned
        series: from the thinned points it was sent of those that left,
        then the points in memory), with one ``trainreport.snapshot_partial``
        event. Never raises.

        Args:
            timeout_seconds: the most a read-back may take, seconds (only a
                long run's snapshot reads back).
        """
        recorder = self._recorder
        if recorder is None:
            return {"status": "pending", "status_details": {}}
        view, bases = recorder.snapshot()
        if bases:
            self._prepend_points_read_back(view, bases, timeout_seconds)
        return view

    def _prepend_points_read_back(
        self, view: dict[str, Any], bases: dict[str, int], timeout_seconds: float
    ) -> None:
        """Put back each series' first ``bases[name]`` points, read from a destination."""
        metrics = view["status_details"].setdefault("metrics", {})
        missing = dict(bases)
        recorder = self._recorder
        thinned = recorder.counts().thinned_to if recorder is not None else ()
        # A thinned destination holds fewer points than left memory: not read back.
        sinks = [s for d, s in enumerate(self._sinks) if d >= len(thinned) or thinned[d] is None]
        for sink in sorted(sinks, key=lambda sink: not sink.local_run_log):
            if not missing:
                break
            held = sink.read_back(timeout_seconds)
            stored = held.get("status_details", {}).get("metrics", {}) if held else {}
            if not isinstance(stored, dict):
                continue
            for name, base in list(missing.items()):
                points = stored.get(name)
                if isinstance(points, list | ColumnPoints) and len(points) >= base:
                    metrics[name] = points[:base] + metrics.get(name, [])
                    del missing[name]
        if missing:
            summaries = recorder.released_summaries(missing) if recorder is not None else {}
            for name, points in summaries.items():  # as a thinned destination was sent them
                metrics[name] = points + list(metrics.get(name, []))
            self._once.warning(
                "snapshot_partial",
                "trainreport.snapshot_partial",
                series=len(missing),
                thinned_series=len(summaries),
                example=next(iter(missing)),
                hint="no destination could be read back for the points that left memory: "
                "the snapshot gives those series from their first point in memory (thinned "
                "series: from their thinned points, as the destination was sent them); read "
                "the whole record with trainreport.read_task, or keep a FileSink beside",
            )

    def stats(self) -> ReporterStats:
        """Counters, per destination and in total, and the report-call latency histogram.

        Cheap; never raises.
        """
        self._histogram.fold()
        return assemble_stats(
            state=self._machine.state.value,
            destinations=len(self._sinks),
            driver=self._worker,
            recorder=self._recorder,
            histogram=self._histogram,
            report_calls=self._calls + self._train_calls,
            queued=list(self._queue),
            queued_bytes=self._queued_bytes,
            caller_drops={
                "queue_full": self._queue_drops,
                "after_close": self._after_close_drops,
                "report_failed": self._caller_drops,
            },
            journal=self._journal_watch,
        )

    # --- the report calls (the caller's thread) ------------------------------------

    def report_train_step(
        self,
        *,
        step: int | None = None,
        epoch: float | None = None,
        metrics: Mapping[str, MetricValue] | None = None,
    ) -> None:
        """Report one completed optimizer step and its metrics (stored as ``train_<name>``).

        Args:
            step: 1-based count of completed optimizer steps (int; numpy/tensor ints accepted).
                Omitted (``None``): the last training step recorded + 1, as wandb
                and Trackio count, whether that step was given or omitted; the
                first omitted step of a run is 1, or the stored last training
                step + 1 when the run resumes a stored task
                (docs/design.md#metrics). Resolved on the reporter thread.
            epoch: the epoch the step falls in: an int index (0-based if the
                run's first int epoch is 0) or a float of epochs completed (HF);
                see docs/design.md#metrics. ``None`` keeps the last epoch.
            metrics: metric name -> number (CPU tensors and numpy scalars are
                converted here with ``.item()``; a CUDA tensor is copied off
                the device without a sync, docs/design.md#device-values).

        Never raises, never blocks on I/O; bad values are dropped with one log event each.
        """
        # The hot path: :meth:`_put` and ``_reports``' short form, inlined (a call to a
        # builder there costs 9-18 % of this call's CPU: docs/engine.md, "The hot path").
        self._train_calls = (calls := self._train_calls) + 1  # one line: no switch inside
        t0 = 0 if calls & UNTIMED_MASK else self._timer()  # one call in TIMED_EVERY
        try:  # one copy, one append, no lock, no Event.set
            if not self._accepting or self._queued_bytes >= self._max_queue_bytes:
                self._refuse_report()
            elif (
                type(metrics) is dict
                and (type(step) is int or step is None)
                and type(epoch) in _EPOCH_TYPES
            ):
                copied = metrics.copy()  # the short form: the copy is the report
                pending = None  # device values on their way (_device), if any
                try:  # copy_metrics' fast path: a float sum means only ints and floats
                    if type(sum(copied.values(), 0.0)) is not float:
                        pending = _to_numbers(copied)  # on the copy: one copy in all
                except Exception:  # a value sum() cannot add (_to_numbers never raises)
                    pending = _to_numbers(copied)
                n = len(copied)
                copied[TRAIN_TIME] = self._clock()
                copied[TRAIN_STEP] = step
                copied[TRAIN_EPOCH] = epoch
                if len(copied) == n + HEADER_KEYS:
                    queue = self._queue
                    queue.append(copied if pending is None else _deferred(copied, pending))
                    self._queued_bytes += REPORT_BYTES + VALUE_BYTES * n  # = queued_bytes()
                    if len(queue) >= self._wake_depth:  # the first point, or a deep queue
                        self._wake_for_depth()
                else:  # a metric under a header key: the general form keeps it
                    self._put(_train(self._clock(), step, epoch, metrics), wake=False)
            else:
                self._put(_train(self._clock(), step, epoch, metrics), wake=False)
        except Exception as exc:
            self._failed("report_train_step", exc)
        if t0:
            self._sampled.append(self._timer() - t0)  # folded off this thread (_histogram)

    @report_call
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

    @report_call
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

    @report_call
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

    @report_call
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

    @report_call
    def report_epoch_end(self, *, epoch: float) -> None:
        """Report that ``epoch`` ended (same epoch rule as train steps); sent at once.

        Never raises, never blocks on I/O.
        """
        self._put(reports.epoch_end(self._clock(), epoch), wake=True)

    @report_call
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
            else safe_str(os.fspath(path) if isinstance(path, os.PathLike) else path)
        )
        self._put(reports.checkpoint(self._clock(), text, step), wake=True)

    # --- the terminal reports: how a run ends --------------------------------------

    @report_call
    def report_completed(self) -> None:
        """Report that the run completed; sent at once.

        The first terminal report wins (docs/design.md#lifecycle).

        Never raises, never blocks on I/O.
        """
        self._put(reports.completed(self._clock()), wake=True)

    @report_call
    def report_cancelled(self, *, reason: str = "cancelled") -> None:
        """Report that the run was cancelled (``"preempted"``, ``"interrupted"`` or free text).

        Never raises, never blocks on I/O.
        """
        self._put(reports.cancelled(self._clock(), safe_str(reason)[:4096]), wake=True)

    @report_call
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
            kind, message = type(error).__name__, safe_str(error)
        else:
            kind, message = "Error", safe_str(error)
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

    def _end_unreported(self, error: BaseException | None, *, at: str) -> None:
        """End a run that made no terminal report, as ``status_at_close`` says.

        The rule is docs/design.md#lifecycle's.

        ``"outcome"``: :meth:`report_outcome` of ``error`` (the exception being
        handled when ``close()`` was called, or the uncaught one at exit), logged
        ``trainreport.outcome_at_close``; with no exception, ``completed`` and one
        ``trainreport.completed_at_close`` warning. ``"keep"``: nothing (at exit,
        an uncaught exception is still reported, and ``run_ended_without_status``
        logged otherwise). A terminal report already applied or still queued (a
        ``report_completed()`` just before) wins: nothing is added.

        Args:
            error: the exception that is ending the run, or ``None``.
            at: ``"close"`` or ``"exit"`` (the exit hook), for the log events.

        Never raises.
        """
        try:
            recorder = self._recorder
            if recorder is None or recorder.final_status(self._queue) is not None:
                return
            if self._config.status_at_close == "keep":
                if at == "exit" and error is not None:
                    self.report_outcome(error)
                elif at == "exit":
                    _log.warning(
                        "trainreport.run_ended_without_status",
                        hint=(
                            "report the run's end before exit: report_completed(), or "
                            "report_outcome(exc) in an except block, or use `with Reporter(...)`"
                        ),
                    )
                return
            if error is not None:
                self.report_outcome(error)
                _log.info("trainreport.outcome_at_close", at=at, error_type=type(error).__name__)
                return
            self.report_completed()
            _log.warning(
                "trainreport.completed_at_close",
                at=at,
                hint=(
                    "close() with no terminal report: the run is marked completed; call "
                    "report_completed() or report_error(exc) before close(), or set "
                    "ReportingConfig(status_at_close='keep') to leave it running"
                ),
            )
        except Exception:  # noqa: S110 - the report calls never raise; nor does close() for this
            pass

    # --- the queue: its guard, its wake rule, its drop counters ---------------------

    def _put(self, item: Report, *, wake: bool) -> None:
        """Append one report: the memory guard, then the wake rule.

        Every report method but ``report_train_step``, which inlines this for
        its short form.
        ``wake``: an event report, sent at once.
        """
        if not self._accepting or self._queued_bytes >= self._max_queue_bytes:
            self._refuse_report()
            return
        queue = self._queue
        queue.append(item)
        nbytes = queued_bytes(item)  # before the sum: a drain during the call is kept
        self._queued_bytes += nbytes
        if len(queue) >= self._wake_depth:
            self._wake_for_depth()
        elif wake:
            self._wake_worker()

    def _drained(self, nbytes: int, deep_only: bool) -> None:
        """The reporter thread took reports of ``nbytes`` (estimated) off the queue.

        The worker's ``on_drained``, called on the reporter thread. ``deep_only``:
        wake it again only at ``drain_queue_depth`` (else at the next report:
        the run's first point is still to come), or at fewer reports when that
        many, as wide as those drained, would be estimated past
        :data:`DRAIN_WAKE_BYTES` (100 metrics a report: about 800).
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
            if self._machine.state is ReporterState.INERT:
                return
            self._after_close_drops += 1
            if self._after_close_drops == 1:
                _log.warning(
                    "trainreport.report_after_close",
                    hint=(
                        "reports after close() are dropped: call close() after the last "
                        "report (in a finally block, or leave a `with Reporter(...)` block last)"
                    ),
                )
            return
        self._queue_drops += 1
        if self._queue_drops == 1:
            _log.error(
                "trainreport.queue_full",
                max_queue_bytes=self._max_queue_bytes,
                queued_reports=len(self._queue),
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

    def _stop_accepting(self) -> None:
        """Refuse every report from now on and forget those queued (inert, forked, closed)."""
        self._accepting = False
        self._queue.clear()
        self._queued_bytes = 0

    # --- the lifecycle: start, flush, close ------------------------------------------

    def start(self: _R) -> _R:
        """Start the reporter thread and return at once (it reads the stored task itself).

        On a rank other than global rank 0, when ``TRAINREPORT_DISABLED=1``, or
        in a process forked from the one that created it, the reporter becomes
        inert: no thread, no sink, and report calls do nothing. Idempotent:
        a second call does nothing.

        Returns:
            ``self``, for chaining. Never raises for a destination problem.
        """
        from trainreport._engine._worker import Worker  # noqa: PLC0415 - the driver, built at start

        if self._machine.state is not ReporterState.NEW:
            return self
        rank = self._rank if self._rank is not None else _global_rank(os.environ)
        if rank != 0 or _disabled(os.environ):
            self._machine.apply(ReporterInput.START_INERT)
            self._stop_accepting()
            _log.info("trainreport.inert", rank=rank, disabled=_disabled(os.environ))
            return self
        self._pid = os.getpid()
        # One reading of each clock: a point's wall-clock time is its report's monotonic
        # time plus this offset, so no report call reads a second clock.
        wall_offset = time.time() - self._clock()
        self._recorder = recorder = Recorder(
            self._config,
            destinations=len(self._sinks),
            series_default=self._series_default,
            wall_offset=wall_offset,
        )
        for d, sink in enumerate(self._sinks):
            if sink.keeps_every_point:  # it holds the run in memory: so does the store
                recorder.keep_every_point(d)
        options, self._journal_watch = journal_options(self._config, self._sinks, self._clock)
        self._worker = worker = Worker(
            recorder=recorder,
            sinks=list(self._sinks),
            queue=self._queue,
            config=self._config,
            clock=self._clock,
            cancel_requested=self.cancel_requested,
            on_drained=self._drained,
            **options,
        )
        self._machine.apply(ReporterInput.START)
        remember(self)
        watch = self._journal_watch
        _log.info(
            "trainreport.reporting_to",
            destinations=[describe_destination(sink) for sink in self._sinks],
            **({"journal": watch.path} if watch is not None and watch.path else {}),
        )
        worker.start()
        return self

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
        done = worker.request_flush()
        return done.wait(self._budget(timeout)) and worker.everything_delivered()

    def close(self, timeout: float | None = None) -> bool:
        """Drain the queue, send the tail and join the reporter thread, within ``timeout``.

        Call it from a ``finally`` block. A run that made no terminal report
        is ended here (``ReportingConfig.status_at_close``, docs/design.md#lifecycle):
        by :meth:`report_outcome` of the exception being handled when
        ``close()`` is called (in a ``finally`` or ``except`` while it
        propagates), else ``completed`` with one
        ``trainreport.completed_at_close`` warning. When the wait takes more
        than 2 s, one ``trainreport.close_waiting`` warning says what it waits
        for and until when; a Ctrl-C (``KeyboardInterrupt``) during the wait
        stops it: ``trainreport.close_interrupted`` is logged and ``close()``
        returns False without raising, so the exception already propagating
        goes on. Idempotent: later calls return the
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
            True only when everything recorded was delivered, nothing was
            dropped by the queue's memory guard, and no journal a dead process
            left is waiting undelivered (each one waiting is named in a
            ``trainreport.close_undelivered`` warning with the command that
            uploads it).

        Raises:
            TransitionError: only with ``ReportingConfig(strict_transitions=True)``
                (tests), when a report was refused by the lifecycle tables.
                Never raises otherwise.
        """
        started = time.monotonic()
        deadline = started + self._budget(timeout)
        worker = self._worker if self._started_for_close() else None
        if worker is None:  # never started, inert, or a forked copy's queue
            return True
        if self._machine.state is ReporterState.RUNNING:
            self._end_unreported(sys.exc_info()[1], at="close")
            self._machine.apply(ReporterInput.CLOSE)
            self._accepting = False
            worker.stop(deadline)
        waited = self._wait_for_thread(worker, deadline)
        if waited == "interrupted":
            return False
        return self._closed(worker, started=started, timed_out=waited == "deadline")

    def _budget(self, timeout: float | None) -> float:
        """A wait ``Event.wait`` and ``Thread.join`` take (default the config's close timeout).

        NaN, a negative or an unreadable timeout waits 0 s; infinity is capped.
        """
        given = self._config.close_timeout_seconds if timeout is None else timeout
        try:
            seconds = float(given)
        except (TypeError, ValueError):
            return 0.0
        if math.isnan(seconds) or seconds < 0:
            return 0.0
        return min(seconds, threading.TIMEOUT_MAX / 2)

    def _started_for_close(self) -> bool:
        """Whether ``close()`` has a worker to close; a forgotten ``start()`` is made here.

        On a reporter whose ``start()`` was forgotten (docs/engine.md), with
        queued reports, in the process that made them, it starts the reporter
        now (same rank and ``TRAINREPORT_DISABLED`` rules as ``start()``) and
        logs ``trainreport.started_at_close``, so that the caller's ``close()``
        delivers them within its deadline. Otherwise (nothing queued, or a
        forked copy of a parent's queue) it closes without sending.
        """
        if self._machine.state is ReporterState.NEW:
            queued = len(self._queue)
            if not queued or os.getpid() != self._owner_pid:
                self._machine.apply(ReporterInput.CLOSE)
                self._stop_accepting()
                if queued:  # a forked child's copy: its parent holds and delivers these
                    _log.info("trainreport.closed_in_forked_copy", reports_left_to_parent=queued)
                return False
            if self.start().state is ReporterState.RUNNING:  # not another rank, not disabled
                _log.warning(
                    "trainreport.started_at_close",
                    queued_reports=queued,
                    hint=(
                        "call reporter.start() before the first report (or use `with "
                        "Reporter(...)`): until then reports only wait in memory"
                    ),
                )
        return self._machine.state is not ReporterState.INERT

    def _wait_for_thread(self, worker: Worker, deadline: float) -> str:
        """Wait for the reporter thread to end by ``deadline``, saying so when it is long.

        Returns:
            ``"ended"``, ``"deadline"`` or ``"interrupted"`` (a Ctrl-C, logged
            ``trainreport.close_interrupted``). Never raises.
        """
        thread = worker.thread
        if os.getpid() != self._pid:  # a forked copy never joins its parent's thread
            return "deadline" if thread.is_alive() else "ended"

        def join(seconds: float) -> bool:
            thread.join(seconds)
            return not thread.is_alive()

        def notice(seconds_left: float) -> None:
            self._log_progress("trainreport.close_waiting", worker, seconds_left)

        if wait_for_close(join, deadline, notice=notice) == "interrupted":
            self._log_progress("trainreport.close_interrupted", worker, None)
            return "interrupted"
        return "deadline" if thread.is_alive() else "ended"

    def _log_progress(self, event: str, worker: Worker, seconds_left: float | None) -> None:
        """``close_waiting`` or ``close_interrupted`` (``_close_report``). Never raises."""
        with contextlib.suppress(Exception):  # a log line must never break close()
            log_close_progress(
                event, self._sinks, worker, self.stats(), self._journal_watch, seconds_left
            )

    def _closed(self, worker: Worker, *, started: float, timed_out: bool) -> bool:
        """The end of ``close()``: the answer, its warnings and its one log line.

        Returns:
            what ``close()`` returns.

        Raises:
            TransitionError: see :meth:`close`.
        """
        first_close = not timed_out and self._machine.state is ReporterState.CLOSING
        if first_close:
            self._machine.apply(ReporterInput.CLOSED)
            forget(self)
        delivered = not timed_out and self._delivered()
        if (timed_out or (first_close and not delivered)) and not self._warned_undelivered:
            self._warned_undelivered = True  # close() is idempotent; so is its warning
            warn_undelivered(self._sinks, worker, self.stats(), self._journal_watch, timed_out)
        if not self._logged_closed:
            self._logged_closed = True
            log_closed(self._sinks, worker, self.stats(), delivered, started, timed_out)
        if not timed_out:
            self._raise_strict_violations()
        return delivered

    def _delivered(self) -> bool:
        worker = self._worker
        if worker is None:
            return not self._queue
        done = worker.finished_cleanly() if not worker.alive else worker.everything_delivered()
        # A journal a dead process left and this one did not deliver is data waiting too.
        return done and self._queue_drops == 0 and not left_over_waiting(self._journal_watch)

    def _raise_strict_violations(self) -> None:
        recorder = self._recorder
        violations = recorder.strict_violations() if recorder is not None else ()
        if violations:
            raise TransitionError("; ".join(violations))

    def __enter__(self: _R) -> _R:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Report the block's outcome (:meth:`report_outcome`), then close.

        A terminal report made inside the block (applied or still queued) is the
        run's end: the outcome is not reported a second time (docs/design.md#lifecycle).
        """
        recorder = self._recorder
        if recorder is None or recorder.final_status(self._queue) is None:
            self.report_outcome(exc)
        self.close()

    # --- what the process hooks call (``_process_hooks``) ----------------------------

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
        self._end_unreported(uncaught, at="exit")
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


def _not_an_environment(environ: object) -> str:
    """The ``ConfigError`` line for an ``environ`` that is not a mapping."""
    if isinstance(environ, ReportingConfig):
        return (
            "Reporter.from_env's first argument is the environment, not a ReportingConfig:"
            " pass it as config=..., e.g. Reporter.from_env(config=ReportingConfig(...)) @ environ"
        )
    return (
        "environ must be a mapping of variable names to values, such as os.environ"
        f" (got {type(environ).__name__}) @ environ"
    )


def journal_options(
    config: ReportingConfig, sinks: Sequence[Sink], clock: Callable[[], float]
) -> tuple[dict[str, Any], JournalWatch | None]:
    """The worker's journal arguments (``docs/engine.md``, "The journal in front of a service").

    With the config's ``journal`` on and ``TRAINREPORT_JOURNAL`` not ``0``:
    a ``FileSink`` (the local run log is its own journal) is sent to at
    least every ``journal_interval_seconds``, and the first destination
    with a job and a task that is not a local file gets a journal. None
    when the only destinations are local run logs (the embedded default).

    Returns:
        the worker's keyword arguments, and what ``stats()`` reads about the
        journal (``None``: no journal is kept).
    """
    if not config.journal or journal_off(os.environ):
        return {}, None
    options: dict[str, Any] = {"local_log_interval_seconds": config.journal_interval_seconds}
    keyed = [(i, journal_identity(sink)) for i, sink in enumerate(sinks)]
    found = next(((i, ids) for i, ids in keyed if ids is not None), None)
    if found is None:
        return options, None
    index, (job_id, task_id) = found

    try:
        path: str | None = str(JournalPaths(config.journal_dir, job_id, task_id).current)
    except ValueError:
        path = None
    watch = JournalWatch(path, destination=index)

    def open_journal(recorder: Recorder) -> JournalKeeper | None:
        try:
            journal = Journal.claim(
                config.journal_dir,
                job_id,
                task_id,
                fsync_seconds=config.journal_fsync_seconds,
                clock=clock,
                refused=watch.refused,
            )
        except Exception as exc:  # Resume logs it: the run goes on without a journal
            watch.refused("unavailable", describe_exception(exc))
            raise
        if journal is None:
            return None
        keeper = JournalKeeper(
            journal,
            recorder,
            interval_seconds=config.journal_interval_seconds,
            clock=clock,
            wall_clock=utc_now_iso,
        )
        watch.keeper, watch.state = keeper, "recording"
        return keeper

    options.update(open_journal=open_journal, journal_destination=index)
    return options, watch
