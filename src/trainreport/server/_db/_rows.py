"""The row-level SQL of a task, run inside a transaction of the caller (``Backend.read``/``write``).

Shared by the task reads and writes (``_db_tasks``); every function takes an
open connection and neither commits nor opens a transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import count, repeat
from typing import Any, TypeAlias

from trainreport._wire._protocol import TaskStatus, forget_running_only_details
from trainreport.server._db._backend import Connection
from trainreport.server._wire import SeriesPoints

__all__ = [
    "PENDING",
    "PointRow",
    "dump_details",
    "forget_purged_points",
    "job_cancel_requested",
    "merge_task",
    "point_rows",
    "series_lengths_of",
    "task_document",
    "task_row",
    "touch_job",
    "write_suffix",
]

#: A task created without a status holds this one (docs/protocol.md).
PENDING = TaskStatus.PENDING.value


def task_row(conn: Connection, job_id: str, task_id: str) -> tuple[str, str] | None:
    """The task's ``(status, details JSON)``, or ``None`` when it does not exist."""
    row: tuple[str, str] | None = conn.execute(
        "SELECT status, details FROM tasks WHERE job_id = ? AND task_id = ?", (job_id, task_id)
    ).fetchone()
    return row


def series_lengths_of(conn: Connection, job_id: str, task_id: str) -> dict[str, int]:
    """Points stored per series of the task, in the task's series order."""
    return dict(
        conn.execute(
            "SELECT series, length FROM series WHERE job_id = ? AND task_id = ? ORDER BY ord",
            (job_id, task_id),
        ).fetchall()
    )


def job_cancel_requested(conn: Connection, job_id: str) -> bool:
    """Whether the job was asked to cancel (``False`` when it does not exist)."""
    row = conn.execute("SELECT cancel_requested FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return bool(row and row[0])


#: One stored point: ``(step, epoch, value, time)`` (``time`` in seconds since the epoch).
PointRow: TypeAlias = "tuple[int, int | None, float | None, float | None]"


def point_rows(
    conn: Connection,
    job_id: str,
    task_id: str,
    series: str,
    *,
    from_step: int | None = None,
    to_step: int | None = None,
    after: int = 0,
) -> tuple[int, list[PointRow]]:
    """The series' points as ``(step, epoch, value, time)`` rows, in order.

    Args:
        conn: an open connection.
        job_id: a validated job id.
        task_id: a validated task id.
        series: the series' name.
        from_step: only the points whose step is at least this (``None``: no bound).
        to_step: only the points whose step is at most this (``None``: no bound).
        after: only the points whose index is at least this.

    Returns:
        ``(index of the first row returned, the rows)``; the index is ``after``
        when no row matches the bounds (so a client appending from it stays put).
    """
    where = "job_id = ? AND task_id = ? AND series = ? AND idx >= ?"
    params: list[Any] = [job_id, task_id, series, after]
    if from_step is not None:
        where += " AND step >= ?"
        params.append(from_step)
    if to_step is not None:
        where += " AND step <= ?"
        params.append(to_step)
    rows = conn.execute(
        f"SELECT idx, step, epoch, value, time FROM points WHERE {where} ORDER BY idx",  # noqa: S608 - fixed text
        params,
    ).fetchall()
    first = int(rows[0][0]) if rows else after
    return first, [(r[1], r[2], r[3], r[4]) for r in rows]


def task_document(
    conn: Connection, job_id: str, task_id: str, *, include_metrics: bool
) -> dict[str, Any] | None:
    """The task in the ``GET`` shape ``{"status", "status_details"}``, or ``None``."""
    row = task_row(conn, job_id, task_id)
    if row is None:
        return None
    details: dict[str, Any] = json.loads(row[1])
    if include_metrics:
        lengths = series_lengths_of(conn, job_id, task_id)
        if lengths:
            # The baseline shape, as a plain job API holds it: the points' times are
            # served by GET .../series (a client resuming in suffix mode never resends
            # the points the server holds, so their stored times stay).
            details["metrics"] = {
                name: [
                    {"step": step, "epoch": epoch, "value": value}
                    for step, epoch, value, _time in point_rows(conn, job_id, task_id, name)[1]
                ]
                for name in lengths
            }
    return {"status": row[0], "status_details": details}


def touch_job(conn: Connection, job_id: str, now: str) -> None:
    """Create the job, or mark it written at ``now`` (ISO 8601 UTC)."""
    conn.execute(
        "INSERT INTO jobs (job_id, created_at, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (job_id) DO UPDATE SET updated_at = excluded.updated_at",
        (job_id, now, now),
    )


def merge_task(
    conn: Connection,
    job_id: str,
    task_id: str,
    status: str | None,
    details: Mapping[str, Any],
    now: str,
) -> str:
    """Create the task or merge ``details`` into it shallowly; returns its stored status."""
    row = task_row(conn, job_id, task_id)
    if row is None:
        forget_purged_points(conn, job_id, task_id)
        stored_status = status or PENDING
        created = dict(details)
        forget_running_only_details(stored_status, created)
        conn.execute(
            "INSERT INTO tasks (job_id, task_id, status, details, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, task_id, stored_status, dump_details(created), now, now),
        )
        return stored_status
    stored_status = status or row[0]
    merged = json.loads(row[1])
    merged.update(details)
    # A run that is over has no time left (docs/protocol.md): drop its last ETA.
    forget_running_only_details(stored_status, merged)
    conn.execute(
        "UPDATE tasks SET status = ?, details = ?, updated_at = ? WHERE job_id = ? AND task_id = ?",
        (stored_status, dump_details(merged), now, job_id, task_id),
    )
    return stored_status


def write_suffix(
    conn: Connection,
    job_id: str,
    task_id: str,
    series: SeriesPoints,
    lengths: dict[str, int],
) -> None:
    """Truncate ``series`` to its offset and append its points; updates ``lengths`` in place.

    A series left with no points is removed (a task keeps points, not names), so
    ``GET`` never shows an empty series and the client's record agrees with it.
    """
    name, offset = series.name, series.offset
    if name in lengths:
        if offset < lengths[name]:
            conn.execute(
                "DELETE FROM points WHERE job_id = ? AND task_id = ? AND series = ? AND idx >= ?",
                (job_id, task_id, name, offset),
            )
        if offset + len(series) == 0:
            conn.execute(
                "DELETE FROM series WHERE job_id = ? AND task_id = ? AND series = ?",
                (job_id, task_id, name),
            )
            del lengths[name]
            return
        conn.execute(
            "UPDATE series SET length = ? WHERE job_id = ? AND task_id = ? AND series = ?",
            (offset + len(series), job_id, task_id, name),
        )
    elif offset + len(series) == 0:
        return
    else:
        conn.execute(
            "INSERT INTO series (job_id, task_id, series, ord, length) VALUES (?, ?, ?, "
            "(SELECT COALESCE(MAX(ord), 0) + 1 FROM series WHERE job_id = ? AND task_id = ?), ?)",
            (job_id, task_id, name, job_id, task_id, offset + len(series)),
        )
    conn.executemany(
        "INSERT INTO points (job_id, task_id, series, idx, step, epoch, value, time) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        zip(
            repeat(job_id),
            repeat(task_id),
            repeat(name),
            count(offset),
            series.steps,
            series.epochs,
            series.values,
            repeat(None) if series.times is None else series.times,
        ),
    )
    lengths[name] = offset + len(series)


def dump_details(value: Mapping[str, Any]) -> str:
    """``status_details`` as the stored JSON text (strict: no NaN, compact)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def forget_purged_points(conn: Connection, job_id: str, task_id: str) -> None:
    """Before a task is created: drop the points of a deleted namesake not yet purged."""
    if conn.execute(
        "DELETE FROM purges WHERE job_id = ? AND task_id = ?", (job_id, task_id)
    ).rowcount:
        conn.execute("DELETE FROM points WHERE job_id = ? AND task_id = ?", (job_id, task_id))
