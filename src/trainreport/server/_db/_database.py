"""The reference server's storage, on SQLite or PostgreSQL (``_storage.Backend``), by concern.

:class:`Database` opens the backend, applies the migrations (``_migrations``,
schema in ``_schema``) and closes it; the storage rules live in one part per
concern, each a small class over the same backend, which the app and the
retention use directly (``docs/server.md``, "Storage"):

- :attr:`Database.tasks` (``_db_tasks``): task reads and writes, the writer
  fence and the ``series-suffix-v1`` updates, the page's columns;
- :attr:`Database.jobs` (``_db_jobs``): create, read, list, cancel, delete;
- :attr:`Database.retention` (``_db_retention``): expired jobs, the bounded purge;
- :attr:`Database.health` (``_db_health``): readiness and the metrics' counts.

Thread-safety: a :class:`Database` is shared by every request thread; the
backend owns the connections.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from trainreport.server._db._backend import Backend, open_backend
from trainreport.server._db._health import HealthChecks
from trainreport.server._db._jobs import UNFINISHED_STATUSES, JobStore
from trainreport.server._db._migrations import SCHEMA_VERSION, migrate
from trainreport.server._db._purges import RetentionStore
from trainreport.server._db._tasks import (
    Applied,
    SeriesGap,
    StaleAttempt,
    StaleWriter,
    Stored,
    TaskStore,
    UpdateOutcome,
    WriterOpened,
)

__all__ = [
    "SCHEMA_VERSION",
    "UNFINISHED_STATUSES",
    "Applied",
    "Database",
    "SeriesGap",
    "StaleAttempt",
    "StaleWriter",
    "Stored",
    "UpdateOutcome",
    "WriterOpened",
    "utc_now",
]


class Database:
    """The server's storage: a SQLite file or a PostgreSQL database, and its parts.

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
        #: Task reads and writes.
        self.tasks = TaskStore(self.backend)
        #: Jobs: create, read, list, cancel, delete.
        self.jobs = JobStore(self.backend)
        #: The retention's queries.
        self.retention = RetentionStore(self.backend)
        #: Readiness and the metrics' counts.
        self.health = HealthChecks(self.backend)

    @property
    def description(self) -> str:
        """The database for messages: a path, or a URL without its password."""
        return self.backend.description

    def close(self) -> None:
        """Close every connection. Idempotent; never raises."""
        self.backend.close()


def utc_now() -> str:
    """The system's wall clock as ISO 8601 UTC with milliseconds (how the database stores time)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
