"""The PostgreSQL backend: several server replicas on one database (``_storage.Backend``).

Needs the ``postgres`` extra (``pip install "trainreport[postgres]"``: psycopg 3
and its connection pool). A server holds no state of its own over
PostgreSQL, so any number of replicas may serve the same jobs behind a load
balancer.

How a write is made exclusive per job: every write transaction begins with
``pg_advisory_xact_lock`` on the job id, held until commit or rollback. All
writes of one job (writer claims, suffix updates, baseline patches, cancel,
retention) therefore run one after the other, whichever replica received
them, and each sees everything committed before it (``READ COMMITTED`` takes
a new snapshot per statement, after the lock is granted). That is what makes
the writer fence, the sequence check and the suffix offsets hold across
replicas: a zombie writer on replica A is checked against the generation that
replica B committed, and two replicas applying the same suffix see each
other's result (the second is a duplicate or an idempotent rewrite). One lock
per transaction, always taken first, cannot deadlock; it also covers rows
that do not exist yet (a row lock, ``SELECT ... FOR UPDATE``, could not). The
server's own rows already serialised writes per job (every write updates the
job's ``updated_at``), so the lock costs no concurrency.

Durability: PostgreSQL's default ``synchronous_commit=on``; a request is
answered after its ``COMMIT`` returned. Reads run ``REPEATABLE READ READ
ONLY`` so that a task's lengths and points come from one snapshot.

Failures: a refused or lost connection, a server shutting down or an exhausted
pool raise :class:`~trainreport.server._db._backend.StorageUnavailable` (the app
answers 503 with ``Retry-After``); the broken connection is dropped by the
pool, the pool's idle connections are tested at once (after a database
restart they are all dead), and new ones are made as requests need them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import urllib.parse
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from trainreport.server._db._backend import StorageUnavailable

__all__ = [
    "DEFAULT_ACQUIRE_TIMEOUT_SECONDS",
    "DEFAULT_CONNECT_TIMEOUT_SECONDS",
    "DEFAULT_POOL_SIZE",
    "PostgresBackend",
    "redact_url",
]

#: Connections one server process keeps to PostgreSQL at most.
DEFAULT_POOL_SIZE = 16
#: Seconds a request waits for a free pooled connection before it is answered 503.
DEFAULT_ACQUIRE_TIMEOUT_SECONDS = 5.0
#: Seconds a new connection may take to be established (libpq ``connect_timeout``).
DEFAULT_CONNECT_TIMEOUT_SECONDS = 5
#: First key of trainreport's advisory locks (``"tR"`` and a kind), so that other
#: applications sharing the database do not collide with them.
_LOCK_CLASS_JOB = 0x74520001
_LOCK_CLASS_SCHEMA = 0x74520000
_UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


def redact_url(url: str) -> str:
    """The URL with its password (in the user part or the query) replaced by ``***``.

    Never raises; a value that does not parse is replaced whole.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            if ":" in user:
                user = user.split(":", 1)[0] + ":***"
            netloc = f"{user}@{host}"
        query = urllib.parse.urlencode(
            [
                (key, "***" if key.lower() == "password" else value)
                for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            ],
            safe="*",
        )
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return "postgresql://***"


def _password(url: str) -> str | None:
    with contextlib.suppress(ValueError):
        parts = urllib.parse.urlsplit(url)
        if parts.password:
            return urllib.parse.unquote(parts.password)
        for key, value in urllib.parse.parse_qsl(parts.query):
            if key.lower() == "password" and value:
                return value
    return None


def _lock_key(job_id: str) -> int:
    """A signed 32-bit key for the job's advisory lock (a collision only serialises more)."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


@functools.lru_cache(maxsize=256)
def _placeholders(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (the server's SQL has no literal ``?`` or ``%``)."""
    return sql.replace("?", "%s")


class _Connection:
    """A psycopg connection inside a transaction, answering the shared ``?`` SQL."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Any = None) -> psycopg.Cursor[Any]:
        return self._conn.execute(_placeholders(sql), params or None)

    def executemany(self, sql: str, rows: Any) -> None:
        with self._conn.cursor() as cursor:
            cursor.executemany(_placeholders(sql), rows)


class PostgresBackend:
    """Transactions on one PostgreSQL database, through a connection pool.

    Args:
        url: a libpq URL, ``postgresql://user:password@host:port/dbname?...``.
        pool_size: connections kept at most by this process.
        acquire_timeout_seconds: how long a request waits for a pooled
            connection, in seconds; then :class:`StorageUnavailable`.
        connect_timeout_seconds: how long establishing one connection may
            take, in seconds.

    Raises:
        StorageUnavailable: the database cannot be reached now (checked once,
            at construction; the message names the URL without its password).
    """

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        acquire_timeout_seconds: float = DEFAULT_ACQUIRE_TIMEOUT_SECONDS,
        connect_timeout_seconds: int = DEFAULT_CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self.description = redact_url(url)
        self._secret = _password(url)
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": connect_timeout_seconds,
            "application_name": "trainreport-server",
        }
        try:
            psycopg.connect(url, **kwargs).close()  # a clear error now, not a pool timeout later
        except psycopg.Error as exc:
            raise self._unavailable("cannot connect", exc) from None
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs=kwargs,
            timeout=acquire_timeout_seconds,
            open=False,
            name="trainreport",
        )
        self._pool.open(wait=False)

    def _unavailable(self, what: str, exc: BaseException) -> StorageUnavailable:
        text = " ".join(str(exc).split()) or type(exc).__name__
        if self._secret:
            text = text.replace(self._secret, "***")
        return StorageUnavailable(f"{what} to PostgreSQL at {self.description}: {text}")

    @contextlib.contextmanager
    def _transaction(self, *first: tuple[str, tuple[Any, ...]]) -> Iterator[_Connection]:
        try:
            with self._pool.connection() as conn, conn.transaction():
                for sql, params in first:
                    conn.execute(sql, params or None)
                yield _Connection(conn)
        except _UNAVAILABLE as exc:
            # The other idle connections most likely died with this one (a restart):
            # test them now, so that the next requests get live ones, not one 503 each.
            with contextlib.suppress(Exception):
                self._pool.check()
            raise self._unavailable("lost the connection", exc) from exc

    @contextlib.contextmanager
    def write(self, job_id: str | None) -> Iterator[_Connection]:
        """One ``READ COMMITTED`` transaction holding the job's advisory lock.

        ``job_id=None`` takes the schema lock instead (migrations).
        """
        lock = (_LOCK_CLASS_SCHEMA, 0) if job_id is None else (_LOCK_CLASS_JOB, _lock_key(job_id))
        with self._transaction(("SELECT pg_advisory_xact_lock(%s, %s)", lock)) as conn:
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[_Connection]:
        """One ``REPEATABLE READ READ ONLY`` transaction: every statement sees one snapshot."""
        with self._transaction(
            ("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY", ())
        ) as conn:
            yield conn

    def close(self) -> None:
        """Close the pool and its connections. Idempotent; never raises."""
        with contextlib.suppress(Exception):
            self._pool.close(timeout=5.0)
