"""The terminal reports, and the one rule that maps how a run ended to one of them.

``report_completed``, ``report_cancelled`` and ``report_error`` end a run (the
first terminal report of an attempt wins, docs/design.md#lifecycle);
``report_outcome`` maps the exception that ended a run to one of them, and
every adapter, hook and ``with Reporter(...)`` block goes through it
(docs/lifecycle.md). A ``close()`` or an exit with no terminal report made
goes through it too (``_end_unreported``, ``ReportingConfig.status_at_close``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from trainreport import _reports as reports
from trainreport._config import ReportingConfig
from trainreport._logging import get_logger
from trainreport._report_calls import ReportCalls
from trainreport._report_queue import report_call, safe_str

if TYPE_CHECKING:
    from trainreport._recorder import Recorder

__all__ = ["INTERRUPTED", "PREEMPTED", "TerminalReports"]

_log = get_logger()

#: The cancel reason of a run stopped by an interrupt (``KeyboardInterrupt``, Ctrl-C).
INTERRUPTED = "interrupted"
#: The cancel reason of a run the job system stops to requeue it (SIGTERM, Lightning's requeue).
PREEMPTED = "preempted"


class TerminalReports(ReportCalls):
    """How a run ends: completed, cancelled or failed (a base of ``Reporter``)."""

    _config: ReportingConfig
    _recorder: Recorder | None

    #: The cancel reason :meth:`report_outcome` gives a run stopped by an interrupt.
    INTERRUPTED: ClassVar[str] = INTERRUPTED
    #: The cancel reason :meth:`report_outcome` gives a run the job system preempts.
    PREEMPTED: ClassVar[str] = PREEMPTED

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
