"""The terminal reports, and the one rule that maps how a run ended to one of them.

``report_completed``, ``report_cancelled`` and ``report_error`` end a run (the
first terminal report of an attempt wins, docs/design.md#lifecycle);
``report_outcome`` maps the exception that ended a run to one of them, and
every adapter, hook and ``with Reporter(...)`` block goes through it
(docs/lifecycle.md).
"""

from __future__ import annotations

from typing import ClassVar

from trainreport import _reports as reports
from trainreport._report_calls import ReportCalls
from trainreport._report_queue import report_call, safe_str

__all__ = ["INTERRUPTED", "PREEMPTED", "TerminalReports"]

#: The cancel reason of a run stopped by an interrupt (``KeyboardInterrupt``, Ctrl-C).
INTERRUPTED = "interrupted"
#: The cancel reason of a run the job system stops to requeue it (SIGTERM, Lightning's requeue).
PREEMPTED = "preempted"


class TerminalReports(ReportCalls):
    """How a run ends: completed, cancelled or failed (a base of ``Reporter``)."""

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
