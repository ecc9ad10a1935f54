"""The storage interface behind the reference server: what a database backend provides.

The rules of the protocol (writer generations, sequence numbers, series-suffix
offsets, retention) are written once, in the parts of ``_db.Database``
(``_db_tasks``, ``_db_jobs``, ``_db_retention``), as SQL that both
backends understand; a backend only provides transactions with the guarantees
those rules need:

- ``write(job_id)``: one atomic read-write transaction, committed durably
  before the block's caller returns, during which **no other write
  transaction on the same job runs**, in this process or any other (several
  server replicas on one database). ``job_id=None`` excludes every other
  ``write(None)`` (schema migrations).
- ``read()``: a consistent snapshot for several ``SELECT``s.

Two implementations: :class:`~trainreport.server._db._sqlite.SqliteBackend` (the
embedded default, one file, group commit) and
:class:`~trainreport.server._db._postgres.PostgresBackend` (``postgresql://`` URLs,
psycopg 3; several servers on one database). :func:`open_backend` picks one
from the ``--db`` value.

Statements use ``?`` placeholders and the SQL common to SQLite and
PostgreSQL; a backend's connection object answers ``execute(sql, params)``
(a cursor with ``fetchone``/``fetchall``/``rowcount``, iterable) and
``executemany(sql, rows)``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol

__all__ = [
    "POSTGRES_SCHEMES",
    "Backend",
    "Connection",
    "StorageUnavailable",
    "is_postgres_url",
    "open_backend",
]

#: ``--db`` values starting with one of these are PostgreSQL URLs; anything else is a file.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class StorageUnavailable(Exception):  # noqa: N818 - reads as a state, like TimeoutError
    """The database cannot be reached now (connection refused or lost, pool exhausted).

    The server answers 503 with ``Retry-After``; the write was not applied, or
    was applied and will be recognised when the client resends it (sequence
    numbers and offsets make every write idempotent). The message never holds
    a password.
    """


class Connection(Protocol):
    """A backend's connection inside a transaction (``?`` placeholders)."""

    def execute(self, sql: str, params: Any = ..., /) -> Any:
        """Run one statement; a cursor (``fetchone``, ``fetchall``, ``rowcount``, iterable)."""

    def executemany(self, sql: str, rows: Any, /) -> Any:
        """Run one statement once per row of parameters."""


class Backend(Protocol):
    """Transactions on one database (see the module docstring for the guarantees).

    Attributes:
        dialect: ``"sqlite"`` or ``"postgresql"`` (picks the DDL of the migrations).
        description: the database for messages: a path, or a URL without its password.
    """

    dialect: str
    description: str

    def write(self, job_id: str | None) -> contextlib.AbstractContextManager[Connection]:
        """One atomic write, exclusive per job; committed (durably) when the block exits.

        Raises:
            StorageUnavailable: the database cannot be reached (nothing applied,
                or applied without the caller knowing: writes are idempotent).
        """

    def read(self) -> contextlib.AbstractContextManager[Connection]:
        """A consistent read-only snapshot.

        Raises:
            StorageUnavailable: the database cannot be reached.
        """

    def close(self) -> None:
        """Close every connection. Idempotent; never raises."""


def is_postgres_url(target: str | os.PathLike[str]) -> bool:
    """Whether a ``--db`` value names a PostgreSQL database rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def open_backend(target: str | os.PathLike[str]) -> Backend:
    """The backend for a ``--db`` value: a ``postgresql://`` URL or a SQLite file path.

    Raises:
        StorageUnavailable: a PostgreSQL server that cannot be reached now.
        ImportError: a PostgreSQL URL without the ``postgres`` extra installed.
        sqlite3.Error: a SQLite file that cannot be opened.
    """
    if is_postgres_url(target):
        from trainreport.server._db._postgres import PostgresBackend  # noqa: PLC0415 - optional

        return PostgresBackend(os.fspath(target))
    from trainreport.server._db._sqlite import SqliteBackend  # noqa: PLC0415 - symmetric

    return SqliteBackend(target)
