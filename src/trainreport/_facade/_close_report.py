"""What ``close()`` tells whoever reads the log: what was delivered, where the rest is kept.

While ``close()`` waits: one ``trainreport.close_waiting`` warning when the
wait gets long, or ``trainreport.close_interrupted`` at a Ctrl-C
(:func:`log_close_progress`). Then one ``trainreport.closed`` INFO line per
reporter (each destination in words, with the points it holds and lacks, the
run's status and the seconds ``close()`` took), and one
``trainreport.close_undelivered`` warning per destination that does not hold
everything, whose ``hint`` says where its points are kept (the journal, or a
run log that holds them) with the exact ``trainreport sync`` command that
uploads them, or that nothing keeps them; and one per journal a dead process
left that is not delivered (:func:`left_over_waiting`: ``close()`` is never True while one waits).
The destinations name themselves (``Sink.describe()``), the command that
uploads to them (``Sink.upload_command()``) and the run log they keep
(``Sink.run_log_path()``); these functions only read
``stats()`` and the driver's destinations (docs/engine.md, "Log events").
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainreport._engine._journal_feed import JournalWatch
from trainreport._facade._reporter_stats import ReporterStats
from trainreport._logging import get_logger
from trainreport._wire._sink_interface import Sink

if TYPE_CHECKING:
    from trainreport._engine._worker import Worker

__all__ = [
    "describe_destination",
    "left_over_waiting",
    "log_close_progress",
    "log_closed",
    "sync_command",
    "warn_undelivered",
]

_log = get_logger()


def describe_destination(sink: Sink) -> str:
    """``sink.describe()``, or its type's name when a custom one raises. Never raises."""
    try:
        return str(sink.describe())[:300]
    except Exception:
        return f"<{type(sink).__name__}>"


def sync_command(path: str, sink: Sink) -> str:
    """``sink.upload_command(path)``, or the command with a ``URL`` to fill in. Never raises."""
    try:
        return str(sink.upload_command(path))[:1000]
    except Exception:
        return f"trainreport sync {path} --url URL"


def _run_log_path(sink: Sink) -> str | None:
    """``sink.run_log_path()``, or ``None`` when a custom one raises or gives none. Never raises."""
    try:
        path = sink.run_log_path()
    except Exception:
        return None
    return str(path)[:1000] if path else None


def left_over_waiting(journal: JournalWatch | None) -> list[tuple[Path, str]]:
    """The journals dead processes left that are not delivered, each with why. Never raises."""
    keeper = journal.keeper if journal is not None else None
    if keeper is None:
        return []
    try:
        return keeper.waiting()
    except Exception:
        return []


def log_close_progress(
    event: str,
    sinks: Sequence[Sink],
    worker: Worker,
    stats: ReporterStats,
    journal: JournalWatch | None,
    seconds_left: float | None,
) -> None:
    """Say what ``close()`` waits for (``close_waiting``) or left unsent (``close_interrupted``).

    One event naming the destinations that do not hold everything yet, the
    points they lack, the status being sent, the deadline (``close_waiting``:
    seconds left and the wall-clock time) and the journal where the unsent
    points stay, with the command that uploads them (docs/engine.md#decisions-the-design-left-open).

    Args:
        event: ``trainreport.close_waiting`` or ``trainreport.close_interrupted``.
        sinks: the reporter's destinations, in order.
        worker: the reporter thread's driver.
        stats: ``Reporter.stats()`` now.
        journal: the reporter's journal, or ``None``.
        seconds_left: seconds to the deadline, or ``None`` after a Ctrl-C.

    Never raises.
    """
    with contextlib.suppress(Exception):  # a log line must never break close()
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
        kept = stats.journal
        path = kept.path if kept is not None and kept.state in ("recording", "kept") else None
        where = (
            f"unsent points stay in the journal at {path}: the next run of this job and "
            f"task sends them, or `{sync_command(path, sinks[journal.destination])}` "
            "uploads them"
            if path is not None and journal is not None
            else "no journal holds the unsent points"
        )
        where = f"{where[:1].upper()}{where[1:]}"
        fields: dict[str, Any] = {
            "destinations": ", ".join(label for label, _ in waiting),
            "unsent_points": sum(points for _, points in waiting),
            "status": (recorder.final_status(worker.queue) or recorder.status).value,
            "journal": path,
        }
        if seconds_left is None:
            _log.warning(event, **fields, hint=f"close() stopped waiting at Ctrl-C. {where}")
            return
        until = datetime.datetime.now().astimezone() + datetime.timedelta(seconds=seconds_left)
        _log.warning(
            event,
            **fields,
            seconds_left=round(seconds_left, 1),
            until=until.isoformat(timespec="seconds"),
            hint=(
                "close() waits until then for the destinations to take the points and "
                f"the status; press Ctrl-C to stop waiting. {where}"
            ),
        )


def log_closed(
    sinks: Sequence[Sink],
    worker: Worker,
    stats: ReporterStats,
    delivered: bool,
    started: float,
    timed_out: bool,
) -> None:
    """Log ``trainreport.closed``: the status, the seconds since ``started``, each destination.

    Args:
        sinks: the reporter's destinations, in order.
        worker: the reporter thread's driver.
        stats: ``Reporter.stats()`` at the end of ``close()``.
        delivered: what ``close()`` returns.
        started: when ``close()`` began (``time.monotonic``).
        timed_out: the reporter thread was still sending at the deadline.

    Never raises.
    """
    with contextlib.suppress(Exception):  # a log line must never break close()
        _log.info(
            "trainreport.closed",
            delivered=delivered,
            status=worker.recorder.status.value,
            seconds=round(time.monotonic() - started, 3),
            destinations=[
                f"{describe_destination(sink)}: {figures.points_delivered} points delivered, "
                f"{figures.points_unsent} unsent"
                + (
                    ""
                    if figures.thinned_to is None
                    else f" (curves thinned to {figures.thinned_to} points a series)"
                )
                for sink, figures in zip(sinks, stats.destinations, strict=True)
            ],
            **({"timed_out": True} if timed_out else {}),
        )


def warn_undelivered(
    sinks: Sequence[Sink],
    worker: Worker,
    stats: ReporterStats,
    journal: JournalWatch | None,
    timed_out: bool,
) -> None:
    """One ``trainreport.close_undelivered`` per destination that lacks something.

    Args:
        sinks: the reporter's destinations, in order.
        worker: the reporter thread's driver.
        stats: ``Reporter.stats()`` now.
        journal: the reporter's journal, or ``None``.
        timed_out: the reporter thread was still sending at the deadline.

    Never raises.
    """
    try:
        dropped = sum(stats.drops.get(k, 0) for k in ("queue_full", "queue_bytes"))
        for dest, figures in zip(worker.destinations, stats.destinations, strict=True):
            holds_all = dest.finished_cleanly or (
                worker.alive and worker.recorder.all_delivered(dest.index)
            )
            if holds_all and not stats.queue_depth and not dropped:
                continue
            kept, hint = _undelivered_hint(
                sinks, worker, journal, dest.index, figures.points_unsent, stats.queue_depth
            )
            _log.warning(
                "trainreport.close_undelivered",
                destination=dest.label,
                undelivered_reports=stats.queue_depth,
                undelivered_points=figures.points_unsent,
                dropped=dropped,
                last_error=figures.last_error,
                never_answered=not dest.answered,
                timed_out=timed_out and dest.job is not None,
                **({"journal": kept} if kept is not None else {}),
                hint=hint,
            )
        if journal is not None:
            for path, reason in left_over_waiting(journal):
                _warn_left_over(sinks[journal.destination], worker, journal, path, reason)
    except Exception:  # noqa: S110 - a warning must never break close()
        pass


def _warn_left_over(
    sink: Sink, worker: Worker, journal: JournalWatch, path: Path, reason: str
) -> None:
    """One ``trainreport.close_undelivered`` for a journal a dead process left, not delivered."""
    where = str(path)
    fix = (
        "its curves exceed the service's request body limit: raise the limit (the "
        "reference server: `trainreport serve --max-body-bytes N`) or upload it to a "
        "service with the series-suffix extension, which splits it; "
        if "413" in reason
        else ""
    )
    _log.warning(
        "trainreport.close_undelivered",
        destination=worker.destinations[journal.destination].label,
        journal=where,
        left_over=True,
        reason=reason,
        hint=(
            f"the journal {where}, left by an earlier process of this job and task, is not "
            f"delivered: {fix}the next run of this job and task tries again, or upload it "
            f"now with `{sync_command(where, sink)}`"
        ),
    )


def _undelivered_hint(
    sinks: Sequence[Sink],
    worker: Worker,
    journal: JournalWatch | None,
    index: int,
    points: int,
    reports: int,
) -> tuple[str | None, str]:
    """Where destination ``index``'s undelivered points are kept, and what to do.

    The journal kept for it, else the run log of another destination that
    holds everything (``Sink.run_log_path()``: a ``FileSink``'s), each with
    the command that uploads it; with neither, what is lost.

    Returns:
        ``(the journal's path or None, hint)``.
    """
    sink = sinks[index]
    if journal is not None and journal.destination == index and journal.holds_points():
        path = str(journal.path)
        return path, (
            f"the undelivered points are safe in the journal {path}: the next run of this "
            f"job and task delivers them, or upload them now with `{sync_command(path, sink)}`"
        )
    for dest in worker.destinations:
        log = _run_log_path(dest.sink) if dest.index != index and dest.finished_cleanly else None
        if log is not None:
            return None, (
                f"the run log {log} holds them: upload them with `{sync_command(log, sink)}`"
            )
    return None, (
        f"lost when this process exits: {points} points and {reports} queued reports are "
        "kept nowhere else (no journal: give the destination a job and task id and keep "
        "ReportingConfig(journal=True), or add a FileSink for a local copy)"
    )
