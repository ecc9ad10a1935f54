"""The retention's reads and purges (``docs/server.md``, "Retention").

A job goes in two steps: :meth:`~trainreport.server._db._jobs.JobStore.delete_job`
removes it at once and queues its points; :meth:`RetentionStore.purge_points`
deletes them in bounded batches, one short transaction each, so a large job
never holds the database for long. :meth:`RetentionStore.expired_jobs` finds
the candidates (a hint: the delete checks again under the lock).
"""

from __future__ import annotations

from trainreport.server._db._backend import Backend
from trainreport.server._db._jobs import UNFINISHED

__all__ = ["RetentionStore"]


class RetentionStore:
    """The retention's queries on one backend.

    Args:
        backend: the database's backend (owned by ``server._db._database.Database``).

    Thread-safety: shared by the retention thread and request threads.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def expired_jobs(self, finished_before: str, *, limit: int) -> list[str]:
        """Jobs last written before ``finished_before`` with no unfinished task, oldest first.

        A hint for retention: ``JobStore.delete_job`` checks again under the lock.

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
                (finished_before, *UNFINISHED, limit),
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
