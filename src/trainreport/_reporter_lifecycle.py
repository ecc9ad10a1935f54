"""The reporter's lifecycle: start, flush, close, and what fork and exit do to it.

Orchestration only (docs/engine.md, docs/lifecycle.md): ``start()`` builds the
recorder and the worker and starts the reporter thread (or makes the reporter
inert on another rank or when disabled); ``flush()`` and ``close()`` hand the
worker a deadline and report whether every destination holds everything;
the fork and exit hooks (``_process_hooks``) call back into the two methods at
the end. The lifecycle's states and transitions are the table in
``_lifecycle.py``.
"""

from __future__ import annotations

import collections
import datetime
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from trainreport._close_report import (
    describe_destination,
    left_over_waiting,
    log_closed,
    sync_command,
    warn_undelivered,
)
from trainreport._closing import wait_for_close
from trainreport._config import ReportingConfig
from trainreport._environment import DISABLED, journal_off
from trainreport._journal_feed import JournalKeeper, JournalWatch, journal_identity
from trainreport._lifecycle import ReporterInput, ReporterState
from trainreport._logging import describe_exception, get_logger
from trainreport._process_hooks import forget, remember
from trainreport._recorder import Recorder
from trainreport._reporter_stats import ReporterStats, assemble_stats
from trainreport._sink import Sink
from trainreport._terminal_reports import TerminalReports
from trainreport._worker import Worker, utc_now_iso
from trainreport.exceptions import TransitionError
from trainreport.sinks._journal import Journal, JournalPaths
from trainreport.sinks._memory import MemorySink

__all__ = ["RANK_VARIABLES", "ReporterLifecycle"]

_log = get_logger()

#: Environment variables read, in order, for the global rank (docs/design.md#guarantees).
RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


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


def _log_close_progress(
    event: str, reporter: ReporterLifecycle, worker: Worker, seconds_left: float | None
) -> None:
    """Say what ``close()`` waits for (``close_waiting``) or left unsent (``close_interrupted``).

    One event naming the destinations that do not hold everything yet, the
    points they lack, the status being sent, the deadline (``close_waiting``:
    seconds left and the wall-clock time) and the journal where the unsent
    points stay, with the command that uploads them (docs/engine.md#decisions-the-design-left-open).
    Never raises.
    """
    try:
        stats = reporter.stats()
        recorder = worker.recorder
        waiting = [
            (dest.label, figures.points_unsent)
            for dest, figures in zip(worker.destinations, stats.destinations, strict=True)
            if not dest.superseded
            and (
                stats.queue_depth
                or not (dest.finished_cleanly or recorder.all_delivered(dest.index))
            )
        ]
        kept, watch = stats.journal, reporter._journal_watch
        journal = kept.path if kept is not None and kept.state in ("recording", "kept") else None
        where = (
            f"unsent points stay in the journal at {journal}: the next run of this job and "
            f"task sends them, or `{sync_command(journal, reporter._sinks[watch.destination])}` "
            "uploads them"
            if journal is not None and watch is not None
            else "no journal holds the unsent points"
        )
        fields: dict[str, Any] = {
            "destinations": ", ".join(label for label, _ in waiting),
            "unsent_points": sum(points for _, points in waiting),
            "status": (recorder.final_status(worker.queue) or recorder.status).value,
            "journal": journal,
        }
        if seconds_left is None:
            _log.warning(
                event,
                **fields,
                hint=f"close() stopped waiting at Ctrl-C. {where[:1].upper()}{where[1:]}",
            )
            return
        until = datetime.datetime.now().astimezone() + datetime.timedelta(seconds=seconds_left)
        _log.warning(
            event,
            **fields,
            seconds_left=round(seconds_left, 1),
            until=until.isoformat(timespec="seconds"),
            hint=(
                "close() waits until then for the destinations to take the points and "
                f"the status; press Ctrl-C to stop waiting. {where[:1].upper()}{where[1:]}"
            ),
        )
    except Exception:  # noqa: S110 - a log line must never break close()
        pass


_L = TypeVar("_L", bound="ReporterLifecycle")


class ReporterLifecycle(TerminalReports):
    """Start, flush, close, fork and exit, and reading the state (a base of ``Reporter``)."""

    _sinks: tuple[Sink, ...]
    _config: ReportingConfig
    _rank: int | None
    _recorder: Recorder | None
    _cancel: threading.Event | None
    _pid: int | None
    _owner_pid: int
    _series_default: tuple[str, ...]
    _warned_undelivered: bool
    #: ``trainreport.closed`` was logged (close() is idempotent; so is its line).
    _logged_closed: bool = False
    #: What ``stats()`` says about the journal (set at ``start()``; ``None``: no journal).
    _journal_watch: JournalWatch | None = None

    @property
    def cancel_requested(self) -> threading.Event:
        """Set when the job-status service asks the run to stop (the job was cancelled).

        Check ``reporter.cancel_requested.is_set()`` in the training loop and
        stop cleanly. Created on first access; never raises.
        """
        if self._cancel is None:
            self._cancel = threading.Event()
        return self._cancel

    def start(self: _L) -> _L:
        """Start the reporter thread and return at once (it reads the stored task itself).

        On a rank other than global rank 0, when ``TRAINREPORT_DISABLED=1``, or
        in a process forked from the one that created it, the reporter becomes
        inert: no thread, no sink, and report calls do nothing. Idempotent:
        a second call does nothing.

        Returns:
            ``self``, for chaining. Never raises for a destination problem.
        """
        return self._start(threaded=True)

    def _start(self: _L, *, threaded: bool) -> _L:
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
        # One reading of each clock: a point's wall-clock time is its report's monotonic
        # time plus this offset, so no report call reads a second clock.
        wall_offset = time.time() - self._clock()
        recorder = Recorder(
            self._config,
            destinations=len(self._sinks),
            series_default=self._series_default,
            wall_offset=wall_offset,
        )
        for d, sink in enumerate(self._sinks):
            if isinstance(sink, MemorySink):  # it holds the run in memory: so does the store
                recorder.keep_every_point(d)
        self._recorder = recorder
        options, self._journal_watch = journal_options(self._config, self._sinks, self._clock)
        self._worker = Worker(
            recorder=recorder,
            sinks=list(self._sinks),
            queue=self._queue,
            config=self._config,
            clock=self._clock,
            cancel_requested=self.cancel_requested,
            on_drained=self._drained,
            threaded=threaded,
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
        self._worker.start()
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
        budget = _budget(self._config.close_timeout_seconds if timeout is None else timeout)
        done = worker.request_flush()
        if not worker.threaded:  # tests: one cycle on this thread
            worker.cycle()
        return done.wait(budget) and worker.everything_delivered()

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
        budget = _budget(self._config.close_timeout_seconds if timeout is None else timeout)
        started = time.monotonic()
        deadline = started + budget
        if self._machine.state is ReporterState.NEW and not self._close_unstarted():
            return True
        state = self._machine.state
        if state is ReporterState.INERT:
            return True
        worker = self._worker
        assert worker is not None
        if state is ReporterState.RUNNING:
            self._end_unreported(sys.exc_info()[1], at="close")
            self._machine.apply(ReporterInput.CLOSE)
            self._accepting = False
            worker.stop(deadline)
            if not worker.threaded:  # tests: the closing pass on this thread
                worker.finish()
        if os.getpid() == self._pid and worker.threaded:
            thread = worker.thread

            def join(seconds: float) -> bool:
                thread.join(seconds)
                return not thread.is_alive()

            def notice(seconds_left: float) -> None:
                _log_close_progress("trainreport.close_waiting", self, worker, seconds_left)

            if wait_for_close(join, deadline, notice=notice) == "interrupted":
                _log_close_progress("trainreport.close_interrupted", self, worker, None)
                return False
        if worker.threaded and worker.thread.is_alive():
            self._warn_undelivered(worker, timed_out=True)
            self._log_closed(worker, delivered=False, started=started, timed_out=True)
            return False
        first_close = self._machine.state is ReporterState.CLOSING
        if first_close:
            self._machine.apply(ReporterInput.CLOSED)
            forget(self)
        delivered = self._delivered()
        if not delivered and first_close:
            self._warn_undelivered(worker, timed_out=False)
        self._log_closed(worker, delivered=delivered, started=started, timed_out=False)
        self._raise_strict_violations()
        return delivered

    def _log_closed(
        self, worker: Worker, *, delivered: bool, started: float, timed_out: bool
    ) -> None:
        """One ``trainreport.closed`` line (``_close_report.py``). Never raises."""
        if not self._logged_closed:
            self._logged_closed = True
            log_closed(self._sinks, worker, self.stats(), delivered, started, timed_out)

    def _warn_undelivered(self, worker: Worker, *, timed_out: bool) -> None:
        """One warning per destination that did not receive everything. Never raises."""
        if not self._warned_undelivered:  # close() is idempotent; so is its warning
            self._warned_undelivered = True
            warn_undelivered(self._sinks, worker, self.stats(), self._journal_watch, timed_out)

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
                _log.warning(
                    "trainreport.started_at_close",
                    queued_reports=queued,
                    hint=(
                        "call reporter.start() before the first report (or use `with "
                        "Reporter(...)`): until then reports only wait in memory"
                    ),
                )
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
        # A journal a dead process left and this one did not deliver is data waiting too.
        return done and self._queue_drops == 0 and not left_over_waiting(self._journal_watch)

    def _raise_strict_violations(self) -> None:
        recorder = self._recorder
        violations = recorder.strict_violations() if recorder is not None else ()
        if violations:
            raise TransitionError("; ".join(violations))

    def __enter__(self: _L) -> _L:
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
        self._end_unreported(uncaught, at="exit")
        self.close(self._config.atexit_timeout_seconds)

    # --- reading ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The task record the destination should now hold, in the ``GET`` shape.

        ``{"status": ..., "status_details": {..., "metrics": {name: [{"step", "epoch",
        "value"}]}}}``, the same shape as ``MemorySink.task``. It reflects the
        reports the reporter thread has applied; call :meth:`flush` (or
        :meth:`close`) first for an up-to-date view. A series' points that
        every destination holds leave memory in a long run (``docs/engine.md``,
        "Memory"): such a series is here from its first point still in memory
        on (the destinations, ``read_task`` of the run log, hold it whole);
        with a ``MemorySink`` or a full-state destination every point stays.
        Never raises.
        """
        recorder = self._recorder
        if recorder is None:
            return {"status": "pending", "status_details": {}}
        return recorder.snapshot()

    def stats(self) -> ReporterStats:
        """Counters, per destination and in total, and the report-call latency histogram.

        Cheap; never raises.
        """
        self._histogram.fold()
        return assemble_stats(
            state=self._machine.state.value,
            destinations=len(self._sinks),
            worker=self._worker,
            recorder=self._recorder,
            histogram=self._histogram,
            report_calls=self._calls + self._train_calls,
            queued=list(self._queue),
            queued_bytes=self._queued_bytes,
            caller_drops=self._caller_drop_counts(),
            journal=self._journal_watch,
        )
