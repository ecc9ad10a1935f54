"""The reference server's storage rules, on SQLite or PostgreSQL (``_storage.Backend``).

The schema is in ``_schema``. Points have their own rows, so appending a
suffix costs the new points (one ``executemany``), not a rewrite of the whole
curve. Every write is one transaction of the backend, committed before the
caller answers the request, and exclusive per job across every server process
on the database (``Backend.write``): the writer fence (generation), the
sequence check and the suffix offsets are read and written inside it, so they
hold with several replicas on one PostgreSQL database as with one process on
one SQLite file (docs/design.md#guarantees: never lose an acknowledged write).

Thread-safety: a :class:`Database` is shared by every request thread; the
backend owns the connections.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from itertools import count, repeat
from typing import Any, TypeAlias

import attrs

from trainreport._lifecycle import forget_running_only_details
from trainreport._protocol import TaskStatus
from trainreport.server._migrations import SCHEMA_VERSION, migrate, stored_version
from trainreport.server._storage import Backend, Connection, open_backend
from trainreport.server._wire import SeriesPoints, TaskPatch, TaskUpdate, WriterClaim

__all__ = [
    "SCHEMA_VERSION",
    "Applied",
    "Database",
    "SeriesGap",
    "StaleAttempt",
    "StaleWriter",
    "Stored",
    "UpdateOutcome",
    "WriterOpened",
]

#: A task created without a status holds this one (docs/protocol.md).
_PENDING = TaskStatus.PENDING.value
#: The statuses of a task that is not over (retention keeps its job), in the order
#: the SQL below binds them (``status IN (?, ?)``).
_UNFINISHED = (TaskStatus.PENDING.value, TaskStatus.RUNNING.value)
UNFINISHED_STATUSES = frozenset(_UNFINISHED)


@attrs.frozen
class Stored:
    """A baseline ``PATCH`` was applied.

    Args:
        status: the task's stored status after the patch.
        cancel_requested: whether the task's job was asked to cancel.
    """

    status: str
    cancel_requested: bool


@attrs.frozen
class WriterOpened:
    """A new writer generation was issued.

    Args:
        generation: the new generation (1 for the first writer of a task).
        task: the stored task in the ``GET`` shape, or ``None`` when absent.
        series_lengths: points stored per series, in the task's series order.
        cancel_requested: whether the task's job was asked to cancel.
    """

    generation: int
    task: dict[str, Any] | None
    series_lengths: dict[str, int]
    cancel_requested: bool


@attrs.frozen
class Applied:
    """An update was applied (or recognised as a duplicate and ignored).

    Args:
        series_lengths: points stored per series after the update.
        sequence: the request's sequence number.
        status: the task's stored status.
        cancel_requested: whether the task's job was asked to cancel.
        duplicate: ``True`` when the sequence was already applied and nothing changed.
    """

    series_lengths: dict[str, int]
    sequence: int
    status: str
    cancel_requested: bool
    duplicate: bool


@attrs.frozen
class StaleWriter:
    """The update's writer generation is not the task's current one; nothing applied.

    Args:
        current_generation: the task's current generation, ``None`` when none was issued.
    """

    current_generation: int | None


@attrs.frozen
class StaleAttempt:
    """A writer claimed the task with an older attempt than the holder's; nothing changed.

    Args:
        holder: the attempt identity of the task's current writer.
        current_generation: the task's current writer generation.
    """

    holder: WriterClaim
    current_generation: int


@attrs.frozen
class SeriesGap:
    """A suffix starts beyond the stored length of its series; nothing applied.

    Args:
        series_lengths: points stored per series (every series of the task).
    """

    series_lengths: dict[str, int]


UpdateOutcome: TypeAlias = Applied | StaleWriter | SeriesGap


class Database:
    """The server's storage: a SQLite file or a PostgreSQL database.

    Args:
        target: a SQLite file path (created with its tables when missing), a
            ``postgresql://`` URL, or a backend.
        now: the wall-clock time recorded with the migrations, ISO 8601 UTC
            (default: the system clock's).

    Raises:
        sqlite3.Error: the SQLite file cannot be opened or is not a database.
        StorageUnavailable: the PostgreSQL database cannot be reached.
        RuntimeError: the database was written by a newer schema version.
    """

    def __init__(self, target: str | os.PathLike[str] | Backend, *, now: str | None = None) -> None:
        self.backend: Backend = (
            open_backend(target) if isinstance(target, (str, os.PathLike)) else target
        )
        try:
            migrate(self.backend, now=now or utc_now())
        except BaseException:
            self.backend.close()
            raise

    @property
    def description(self) -> str:
        """The database for messages: a path, or a URL without its password."""
        return self.backend.description

    def close(self) -> None:
        """Close every connection. Idempotent; never raises."""
        self.backend.close()

    # -- operations (readiness, metrics) ------------------------------------------------

    def check_ready(self) -> None:
        """Raise unless the database answers and holds this server's schema (``/readyz``).

        Cheap: one read of the ``schema_version`` table.

        Raises:
            sqlite3.Error: the SQLite database cannot be read.
            StorageUnavailable: the PostgreSQL database cannot be reached.
            RuntimeError: the database is closed, or its schema version is not
                :data:`SCHEMA_VERSION` (migrations not applied).
        """
        with self.backend.read() as conn:
            version = stored_version(conn)
        if version != SCHEMA_VERSION:
            raise RuntimeError(f"schema version {version}; this server needs {SCHEMA_VERSION}")

    def count_tasks_by_status(self) -> dict[str, int]:
        """The number of tasks per stored status (``/metrics``); statuses without tasks are absent.

        Raises:
            sqlite3.Error, StorageUnavailable: the database cannot be read.
        """
        with self.backend.read() as conn:
            rows = conn.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status").fetchall()
        return {str(status): int(count) for status, count in rows}

    def running_task_update_times(self) -> list[str]:
        """The server's ``updated_at`` of every task whose status is ``running`` (``/metrics``).

        Raises:
            sqlite3.Error, StorageUnavailable: the database cannot be read.
        """
        with self.backend.read() as conn:
            rows = conn.execute("SELECT updated_at FROM tasks WHERE status = 'running'")
            return [str(row[0]) for row in rows]

    # -- baseline ---------------------------------------------------------------------

    def get_task(
        self, job_id: str, task_id: str, *, include_metrics: bool = True
    ) -> dict[str, Any] | None:
        """The stored task in the ``GET`` shape ``{"status", "status_details"}``, or ``None``.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            include_metrics: add ``status_details.metrics`` (every point of
                every series) when the task has series.
        """
        with self.backend.read() as conn:
            return _task_document(conn, job_id, task_id, include_metrics=include_metrics)

    def read_task(
        self, job_id: str, task_id: str, *, include_metrics: bool = True
    ) -> tuple[dict[str, Any], str] | None:
        """:meth:`get_task` and the server's time of the task's last write, in one snapshot.

        Returns:
            ``(task, updated_at)`` (ISO 8601 UTC), or ``None`` when the task does
            not exist.
        """
        with self.backend.read() as conn:
            task = _task_document(conn, job_id, task_id, include_metrics=include_metrics)
            row = conn.execute(
                "SELECT updated_at FROM tasks WHERE job_id = ? AND task_id = ?", (job_id, task_id)
            ).fetchone()
        if task is None or row is None:
            return None
        return task, str(row[0])

    def patch_task(self, job_id: str, task_id: str, patch: TaskPatch, *, now: str) -> Stored:
        """Apply a baseline ``PATCH``: shallow merge of details, ``metrics`` replaces all series.

        Creates the job and the task when missing (status ``"pending"`` unless given).

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            patch: the validated body.
            now: the server's wall-clock time, ISO 8601 UTC.
        """
        with self.backend.write(job_id) as conn:
            _touch_job(conn, job_id, now)
            status = _merge_task(conn, job_id, task_id, patch.status, patch.details, now)
            if patch.metrics is not None:
                conn.execute(
                    "DELETE FROM points WHERE job_id = ? AND task_id = ?", (job_id, task_id)
                )
                conn.execute(
                    "DELETE FROM series WHERE job_id = ? AND task_id = ?", (job_id, task_id)
                )
                lengths: dict[str, int] = {}
                for series in patch.metrics:
                    _write_suffix(conn, job_id, task_id, series, lengths)
            return Stored(status=status, cancel_requested=_cancel_requested(conn, job_id))

    # -- series-suffix-v1 -------------------------------------------------------------

    def open_writer(
        self, job_id: str, task_id: str, claim: WriterClaim | None = None
    ) -> WriterOpened | StaleAttempt:
        """Issue the task's next writer generation, unless the claim is of an older attempt.

        Generations follow the attempts' order, not the order in which writers
        open: a claim older than the current holder's (``WriterClaim.is_older_than``)
        is refused and fences nobody; any other claim issues the next
        generation, which fences every older writer, and becomes the holder.
        Does not create the task or the job.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            claim: the writer's attempt identity (``None``: no identity).
        """
        claim = claim if claim is not None else WriterClaim()
        with self.backend.write(job_id) as conn:
            row = conn.execute(
                "SELECT generation, attempt_number, attempt_started_at FROM writers "
                "WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()
            if row is not None:
                holder = WriterClaim(number=row[1], started_at=row[2])
                if claim.is_older_than(holder):
                    return StaleAttempt(holder=holder, current_generation=row[0])
            conn.execute(
                "INSERT INTO writers (job_id, task_id, generation, last_sequence, "
                "attempt_number, attempt_started_at) VALUES (?, ?, 1, 0, ?, ?) "
                "ON CONFLICT (job_id, task_id) DO UPDATE SET generation = writers.generation + 1, "
                "last_sequence = 0, attempt_number = excluded.attempt_number, "
                "attempt_started_at = excluded.attempt_started_at",
                (job_id, task_id, claim.number, claim.started_at),
            )
            generation = conn.execute(
                "SELECT generation FROM writers WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()[0]
        # The read needs no write lock: the new writer has not written yet, and
        # every older one is fenced by the committed generation.
        with self.backend.read() as conn:
            return WriterOpened(
                generation=generation,
                task=_task_document(conn, job_id, task_id, include_metrics=True),
                series_lengths=_lengths(conn, job_id, task_id),
                cancel_requested=_cancel_requested(conn, job_id),
            )

    def apply_update(
        self, job_id: str, task_id: str, update: TaskUpdate, *, now: str
    ) -> UpdateOutcome:
        """Apply one ``series-suffix-v1`` update atomically (``docs/protocol.md``).

        In order: a generation other than the current one is :class:`StaleWriter`;
        a sequence at or below the last applied one is a duplicate (nothing
        applied); a suffix whose offset is beyond its series' length is
        :class:`SeriesGap`; otherwise every series is truncated to its offset
        and extended with the given points, details are merged shallowly and
        the status set, in one committed transaction.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            update: the validated body.
            now: the server's wall-clock time, ISO 8601 UTC.
        """
        with self.backend.write(job_id) as conn:
            writer = conn.execute(
                "SELECT generation, last_sequence FROM writers WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()
            if writer is None or writer[0] != update.writer_generation:
                return StaleWriter(current_generation=None if writer is None else writer[0])
            lengths = _lengths(conn, job_id, task_id)
            if update.sequence <= writer[1]:
                row = _task_row(conn, job_id, task_id)
                return Applied(
                    series_lengths=lengths,
                    sequence=update.sequence,
                    status=_PENDING if row is None else row[0],
                    cancel_requested=_cancel_requested(conn, job_id),
                    duplicate=True,
                )
            if any(s.offset > lengths.get(s.name, 0) for s in update.series):
                return SeriesGap(series_lengths=lengths)
            _touch_job(conn, job_id, now)
            status = _merge_task(conn, job_id, task_id, update.status, update.details, now)
            for series in update.series:
                _write_suffix(conn, job_id, task_id, series, lengths)
            conn.execute(
                "UPDATE writers SET last_sequence = ? WHERE job_id = ? AND task_id = ?",
                (update.sequence, job_id, task_id),
            )
            return Applied(
                series_lengths=lengths,
                sequence=update.sequence,
                status=status,
                cancel_requested=_cancel_requested(conn, job_id),
                duplicate=False,
            )

    def series_columns(
        self, job_id: str, task_id: str, names: Sequence[str] | None
    ) -> dict[str, dict[str, list[Any]]] | None:
        """The task's series as columns ``{name: {"steps", "epochs", "values"}}``.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            names: the series wanted (unknown names are skipped), or ``None`` for all.

        Returns:
            The columns in the task's series order, or ``None`` when the task is absent.
        """
        with self.backend.read() as conn:
            if _task_row(conn, job_id, task_id) is None:
                return None
            wanted = list(_lengths(conn, job_id, task_id))
            if names is not None:
                chosen = set(names)
                wanted = [name for name in wanted if name in chosen]
            result: dict[str, dict[str, list[Any]]] = {}
            for name in wanted:
                rows = _point_rows(conn, job_id, task_id, name)
                result[name] = {
                    "steps": [r[0] for r in rows],
                    "epochs": [r[1] for r in rows],
                    "values": [r[2] for r in rows],
                }
            return result

    # -- jobs -------------------------------------------------------------------------

    def put_job(self, job_id: str, *, now: str) -> tuple[bool, dict[str, Any]]:
        """Create the job unless it exists (idempotent).

        Args:
            job_id: a validated job id.
            now: the server's wall-clock time, ISO 8601 UTC.

        Returns:
            ``(created, job)``: whether this call created it, and the job document.
        """
        with self.backend.write(job_id) as conn:
            created = (
                conn.execute(
                    "INSERT INTO jobs (job_id, created_at, updated_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (job_id) DO NOTHING",
                    (job_id, now, now),
                ).rowcount
                == 1
            )
            job = _job_document(conn, job_id)
        assert job is not None
        return created, job

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        """The job with its task summaries, or ``None`` when it does not exist.

        Args:
            job_id: a validated job id.
        """
        with self.backend.read() as conn:
            return _job_document(conn, job_id)

    def list_jobs(self, *, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` jobs (newest first), each with its task summaries.

        Args:
            limit: the most jobs returned (>= 1).
        """
        with self.backend.read() as conn:
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT job_id FROM jobs ORDER BY created_at DESC, rowid DESC LIMIT ?",
                    (limit,),
                )
            ]
            jobs = [_job_document(conn, job_id) for job_id in ids]
        return [job for job in jobs if job is not None]

    def cancel_job(self, job_id: str, *, now: str) -> dict[str, Any] | None:
        """Mark the job cancel-requested; ``None`` when it does not exist.

        Every later ``PATCH``/update response for its tasks carries
        ``"cancel_requested": true`` (docs/design.md#failure-handling: the server can talk back).

        Args:
            job_id: a validated job id.
            now: the server's wall-clock time, ISO 8601 UTC.
        """
        with self.backend.write(job_id) as conn:
            conn.execute(
                "UPDATE jobs SET cancel_requested = 1, updated_at = ? WHERE job_id = ?",
                (now, job_id),
            )
            return _job_document(conn, job_id)

    # -- retention --------------------------------------------------------------------

    def delete_job(self, job_id: str, *, now: str, finished_before: str | None = None) -> bool:
        """Remove a job, its tasks, series and writers in one transaction; queue its points.

        The job vanishes at once for every reader and writer: a writer of one of
        its tasks gets ``stale_writer`` on its next update (its fence row is
        gone), a baseline ``PATCH`` creates the task anew. The points are left
        for :meth:`purge_points`, in bounded batches (``docs/server.md``).

        Args:
            job_id: a validated job id.
            now: the server's wall-clock time, ISO 8601 UTC.
            finished_before: when set (retention), remove the job only if it was
                last written before this time (ISO 8601 UTC) and has no task
                ``pending`` or ``running``, checked inside the transaction so a
                write that got in first wins.

        Returns:
            Whether the job was removed.
        """
        with self.backend.write(job_id) as conn:
            row = conn.execute("SELECT updated_at FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                return False
            if finished_before is not None and (
                row[0] >= finished_before or _has_unfinished_task(conn, job_id)
            ):
                return False
            conn.execute(
                "INSERT INTO purges (job_id, task_id, queued_at) "
                "SELECT job_id, task_id, ? FROM tasks WHERE job_id = ? "
                "ON CONFLICT (job_id, task_id) DO NOTHING",
                (now, job_id),
            )
            for table in ("series", "tasks", "writers", "jobs"):
                conn.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))  # noqa: S608
            return True

    def expired_jobs(self, finished_before: str, *, limit: int) -> list[str]:
        """Jobs last written before ``finished_before`` with no unfinished task, oldest first.

        A hint for retention: :meth:`delete_job` checks again under the lock.

        Args:
            finished_before: ISO 8601 UTC.
            limit: the most ids returned (>= 1).
        """
        with self.backend.read() as conn:
            rows = conn.execute(
                "SELECT job_id FROM jobs WHERE updated_at < ? AND NOT EXISTS ("
                "SELECT 1 FROM tasks WHERE tasks.job_id = jobs.job_id "
                "AND tasks.status IN (?, ?)) "
                "ORDER BY updated_at LIMIT ?",
                (finished_before, *_UNFINISHED, limit),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def purge_points(self, *, limit: int) -> int | None:
        """Delete at most ``limit`` points of one deleted task (one short transaction).

        Args:
            limit: the most points deleted (>= 1).

        Returns:
            The points deleted (maybe 0), or ``None`` when no deleted task has points left.
        """
        with self.backend.read() as conn:
            queued = conn.execute("SELECT job_id, task_id FROM purges LIMIT 1").fetchone()
        if queued is None:
            return None
        job_id, task_id = str(queued[0]), str(queued[1])
        with self.backend.write(job_id) as conn:
            still = conn.execute(
                "SELECT 1 FROM purges WHERE job_id = ? AND task_id = ?", (job_id, task_id)
            ).fetchone()
            if still is None:  # a writer re-created the task and cleared them meanwhile
                return 0
            deleted = int(
                conn.execute(
                    "DELETE FROM points WHERE job_id = ? AND task_id = ? AND (series, idx) IN ("
                    "SELECT series, idx FROM points WHERE job_id = ? AND task_id = ? LIMIT ?)",
                    (job_id, task_id, job_id, task_id, limit),
                ).rowcount
            )
            if deleted < limit:
                conn.execute(
                    "DELETE FROM purges WHERE job_id = ? AND task_id = ?", (job_id, task_id)
                )
            return deleted


# -- helpers (run inside a transaction) -----------------------------------------------


def _task_row(conn: Connection, job_id: str, task_id: str) -> tuple[str, str] | None:
    row: tuple[str, str] | None = conn.execute(
        "SELECT status, details FROM tasks WHERE job_id = ? AND task_id = ?", (job_id, task_id)
    ).fetchone()
    return row


def _lengths(conn: Connection, job_id: str, task_id: str) -> dict[str, int]:
    return dict(
        conn.execute(
            "SELECT series, length FROM series WHERE job_id = ? AND task_id = ? ORDER BY ord",
            (job_id, task_id),
        ).fetchall()
    )


def _cancel_requested(conn: Connection, job_id: str) -> bool:
    row = conn.execute("SELECT cancel_requested FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return bool(row and row[0])


def _point_rows(
    conn: Connection, job_id: str, task_id: str, series: str
) -> list[tuple[int, int | None, float | None]]:
    rows: list[tuple[int, int | None, float | None]] = conn.execute(
        "SELECT step, epoch, value FROM points WHERE job_id = ? AND task_id = ? AND series = ? "
        "ORDER BY idx",
        (job_id, task_id, series),
    ).fetchall()
    return rows


def _task_document(
    conn: Connection, job_id: str, task_id: str, *, include_metrics: bool
) -> dict[str, Any] | None:
    row = _task_row(conn, job_id, task_id)
    if row is None:
        return None
    details: dict[str, Any] = json.loads(row[1])
    if include_metrics:
        lengths = _lengths(conn, job_id, task_id)
        if lengths:
            details["metrics"] = {
                name: [
                    {"step": step, "epoch": epoch, "value": value}
                    for step, epoch, value in _point_rows(conn, job_id, task_id, name)
                ]
                for name in lengths
            }
    return {"status": row[0], "status_details": details}


def _touch_job(conn: Connection, job_id: str, now: str) -> None:
    conn.execute(
        "INSERT INTO jobs (job_id, created_at, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (job_id) DO UPDATE SET updated_at = excluded.updated_at",
        (job_id, now, now),
    )


def _merge_task(
    conn: Connection,
    job_id: str,
    task_id: str,
    status: str | None,
    details: Mapping[str, Any],
    now: str,
) -> str:
    row = _task_row(conn, job_id, task_id)
    if row is None:
        _forget_purged_points(conn, job_id, task_id)
        stored_status = status or _PENDING
        created = dict(details)
        forget_running_only_details(stored_status, created)
        conn.execute(
            "INSERT INTO tasks (job_id, task_id, status, details, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, task_id, stored_status, _dumps(created), now, now),
        )
        return stored_status
    stored_status = status or row[0]
    merged = json.loads(row[1])
    merged.update(details)
    # A run that is over has no time left (docs/protocol.md): drop its last ETA.
    forget_running_only_details(stored_status, merged)
    conn.execute(
        "UPDATE tasks SET status = ?, details = ?, updated_at = ? WHERE job_id = ? AND task_id = ?",
        (stored_status, _dumps(merged), now, job_id, task_id),
    )
    return stored_status


def _write_suffix(
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
        "INSERT INTO points (job_id, task_id, series, idx, step, epoch, value) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        zip(
            repeat(job_id),
            repeat(task_id),
            repeat(name),
            count(offset),
            series.steps,
            series.epochs,
            series.values,
        ),
    )
    lengths[name] = offset + len(series)


def _job_document(conn: Connection, job_id: str) -> dict[str, Any] | None:
    job = conn.execute(
        "SELECT created_at, updated_at, cancel_requested FROM jobs WHERE job_id = ?", (job_id,)
    ).fetchone()
    if job is None:
        return None
    tasks = []
    for task_id, status, details, updated_at in conn.execute(
        "SELECT task_id, status, details, updated_at FROM tasks WHERE job_id = ? "
        "ORDER BY created_at, task_id",
        (job_id,),
    ):
        parsed = json.loads(details)
        tasks.append(
            {
                "task_id": task_id,
                "status": status,
                "phase": parsed.get("phase"),
                "step": parsed.get("step"),
                "max_steps": parsed.get("max_steps"),
                "percentage_done": parsed.get("percentage_done"),
                "updated_at": updated_at,
            }
        )
    return {
        "job_id": job_id,
        "created_at": job[0],
        "updated_at": job[1],
        "cancel_requested": bool(job[2]),
        "tasks": tasks,
    }


def _dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _has_unfinished_task(conn: Connection, job_id: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM tasks WHERE job_id = ? AND status IN (?, ?) LIMIT 1",
        (job_id, *_UNFINISHED),
    ).fetchone()
    return row is not None


def _forget_purged_points(conn: Connection, job_id: str, task_id: str) -> None:
    """Before a task is created: drop the points of a deleted namesake not yet purged."""
    if conn.execute(
        "DELETE FROM purges WHERE job_id = ? AND task_id = ?", (job_id, task_id)
    ).rowcount:
        conn.execute("DELETE FROM points WHERE job_id = ? AND task_id = ?", (job_id, task_id))


def utc_now() -> str:
    """The system's wall clock as ISO 8601 UTC with milliseconds (how the database stores time)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
