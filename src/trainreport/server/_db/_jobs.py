"""The jobs of the reference server's storage: create, read, list, cancel, delete.

A job holds tasks; deleting one removes it, its tasks, series and writers in
one transaction and queues its points for the retention's bounded purge
(``_db_retention``, ``docs/server.md``).
"""

from __future__ import annotations

import json
from typing import Any

from trainreport._wire._protocol import TaskStatus
from trainreport.server._db._backend import Backend, Connection

__all__ = ["UNFINISHED", "UNFINISHED_STATUSES", "JobStore"]

#: The statuses of a task that is not over (retention keeps its job), in the order
#: the SQL binds them (``status IN (?, ?)``).
UNFINISHED = (TaskStatus.PENDING.value, TaskStatus.RUNNING.value)
UNFINISHED_STATUSES = frozenset(UNFINISHED)


class JobStore:
    """The jobs on one backend.

    Args:
        backend: the database's backend (owned by ``server._db._database.Database``).

    Thread-safety: shared by every request thread; the backend owns the connections.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

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
            job = job_document(conn, job_id)
        assert job is not None
        return created, job

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        """The job with its task summaries, or ``None`` when it does not exist.

        Args:
            job_id: a validated job id.
        """
        with self.backend.read() as conn:
            return job_document(conn, job_id)

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
            jobs = [job_document(conn, job_id) for job_id in ids]
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
            return job_document(conn, job_id)

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
                row[0] >= finished_before or has_unfinished_task(conn, job_id)
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


def job_document(conn: Connection, job_id: str) -> dict[str, Any] | None:
    """The job with its task summaries, or ``None`` when it does not exist."""
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


def has_unfinished_task(conn: Connection, job_id: str) -> bool:
    """Whether a task of the job is ``pending`` or ``running``."""
    row = conn.execute(
        "SELECT 1 FROM tasks WHERE job_id = ? AND status IN (?, ?) LIMIT 1",
        (job_id, *UNFINISHED),
    ).fetchone()
    return row is not None
