"""The database's health for operations: readiness (``/readyz``) and the ``/metrics`` counts."""

from __future__ import annotations

from trainreport.server._db._backend import Backend
from trainreport.server._db._migrations import SCHEMA_VERSION, stored_version

__all__ = ["HealthChecks"]


class HealthChecks:
    """Cheap reads for readiness and metrics on one backend.

    Args:
        backend: the database's backend (owned by ``server._db._database.Database``).
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

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
