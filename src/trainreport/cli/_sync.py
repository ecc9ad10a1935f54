"""``trainreport sync``'s upload: drive a sink with the upload plan and say what it did.

:func:`sync` opens a sink, plans the upload of a run log (or a task record) with
``trainreport._runlog._plan`` (pure; its rules are in its docstring and in
``docs/engine.md``, "Uploading a run with trainreport sync"; the engine's journal
recovery shares the plan, never this driver) and sends it, once more after a
resynchronise; :func:`describe_sync` prints the result with the CLI's column
formatter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from trainreport._runlog._plan import SyncError, SyncPlan, plan_recovery
from trainreport._runlog._state import LogState
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    Resynchronise,
    Sink,
)
from trainreport.cli._summary import _aligned

__all__ = ["SyncReport", "describe_sync", "sync"]


@attrs.frozen
class SyncReport:
    """What :func:`sync` did.

    Attributes:
        plan: the plan that was sent (or found nothing to send).
        full_state: the service spoke only the baseline.
        bytes_sent: request bytes the sink reported.
    """

    plan: SyncPlan
    full_state: bool
    bytes_sent: int = 0


def sync(
    log: LogState,
    sink: Sink,
    *,
    timeout_seconds: float = 60.0,
    run: Mapping[str, str] | None = None,
    force: bool = False,
    sent_under: Callable[[int], object] | None = None,
) -> SyncReport:
    """Open ``sink``, plan the upload of ``log`` and send it (once more after a resynchronise).

    Args:
        log: the file's task, replayed.
        sink: the destination (opened here, closed before returning).
        timeout_seconds: for each request.
        run: the file's RUN fields; a journal's are planned with the journal's
            rules (:func:`plan_recovery`).
        force: upload a stale journal anyway
            (:class:`~trainreport._runlog._plan.StaleJournalError`).
        sent_under: called with the writer generation before the update is
            sent under it (the CLI records it in the journal,
            :func:`~trainreport._runlog._journal.mark_sent_under`).

    Raises:
        StaleJournalError: (``trainreport._runlog._plan``) the journal's writer
            was superseded or is older than the task's last writer; nothing was sent.
        SyncError: the service could not be opened, refused the update, or
            failed; the message says why. Running sync again sends nothing twice.
    """
    try:
        last_writer: int | None = None
        for attempt in range(2):
            opened = sink.open(timeout_seconds=timeout_seconds)
            if not isinstance(opened, Opened):
                raise SyncError(
                    f"cannot read the stored task: {opened.reason}",
                    getattr(opened, "status_code", None),
                )
            if not attempt:  # before this sync wrote anything
                last_writer = opened.last_writer_generation
            full_state = CAPABILITY_SERIES_SUFFIX not in opened.capabilities
            plan = plan_recovery(
                log,
                run or {},
                opened.stored_task,
                full_state=full_state,
                last_writer_generation=last_writer,
                force=force,
            )
            if plan.update is None:
                return SyncReport(plan, full_state)
            if sent_under is not None and opened.writer_generation is not None:
                sent_under(opened.writer_generation)
            result = sink.send(plan.update, timeout_seconds=timeout_seconds)
            if isinstance(result, Delivered):
                return SyncReport(plan, full_state, result.bytes_sent)
            if not isinstance(result, Resynchronise) or attempt:
                raise SyncError(
                    f"the service did not take the update: {result.reason}",
                    getattr(result, "status_code", None),
                )
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        sink.close()


def describe_sync(report: SyncReport) -> str:
    """What an upload did, per series and for the task fields, as aligned lines. Never raises."""
    plan = report.plan
    mode = "full-state PATCH" if report.full_state else CAPABILITY_SERIES_SUFFIX
    rows = [["series", "log", "service", "sent", ""]]
    for s in plan.series:
        sent = f"{s.sent:,} (from index {s.sent_from:,})" if s.sent_from is not None else "-"
        rows.append([s.name, f"{s.log_points:,}", f"{s.server_points:,}", sent, s.note])
    lines = [f"mode: {mode}", *_aligned(rows, right=(1, 2), indent="  ")]
    lines.append(f"task fields: {plan.details_note}")
    if plan.update is None:
        lines.append("nothing to send: the service holds everything in the log")
        return "\n".join(lines)
    points = sum(s.sent for s in plan.series)
    series = sum(1 for s in plan.series if s.sent)
    what = f"{points:,} points of {series} series"
    if plan.details_sent:
        what += " and the task fields"
    if report.full_state and plan.update.series is not None:
        what += " (as whole curves)"
    lines.append(f"sent {what}: {report.bytes_sent:,} bytes")
    return "\n".join(lines)
