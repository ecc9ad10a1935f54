"""The SQLite backend: one database file, the embedded default (``_storage.Backend``).

Every write is one transaction opened with ``BEGIN IMMEDIATE`` and committed
before the caller answers the request; the database runs in WAL mode with
``synchronous=FULL``, so an acknowledged write survives a process crash and a
power loss.

Thread-safety: a backend is shared by every request thread. Each thread reads
on its own connection; writes are serialised on one writer connection by an
in-process lock (so writers queue instead of spinning in SQLite's busy
handler) and by ``BEGIN IMMEDIATE`` (against other processes on the same
file), and the writes that queue up together are committed together
(``_commit``: one fsync for a group of requests, each acknowledged only once
its group is committed). Serialising every write is stronger than the
per-job exclusion ``Backend.write`` promises.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from trainreport.server._db._commit import GroupCommit

__all__ = ["SqliteBackend"]

#: Seconds a connection waits for another process's write lock before failing.
_BUSY_TIMEOUT_SECONDS = 30.0
#: Page cache of the writer connection, KiB: the points B-tree of many live tasks stays hot.
_WRITER_CACHE_KIB = 32 * 1024


def _enter_wal_mode(conn: sqlite3.Connection) -> None:
    """Switch ``conn``'s database to WAL mode, waiting out other connections doing the same.

    Changing the journal mode takes an exclusive lock after a shared one. When two
    connections (two replicas, or two threads of one server) open a new file together,
    each holds its shared lock and wants the exclusive one, and SQLite answers one of
    them ``database is locked`` at once instead of calling its busy handler (it would
    deadlock; https://www.sqlite.org/c3ref/busy_handler.html). The other one's change
    lands, so retrying within the busy timeout always ends.

    Raises:
        sqlite3.OperationalError: the file stayed locked for ``_BUSY_TIMEOUT_SECONDS``.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_SECONDS
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            if time.monotonic() + pause > deadline:
                raise
        else:
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


class SqliteBackend:
    """Transactions on one SQLite file.

    Args:
        path: the database file; created when missing.

    Raises:
        sqlite3.Error: the file cannot be opened (on first use).
    """

    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._commits = GroupCommit(self._connect_writer, self._checkpoint, self._wal_size)
        self._closed = False

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=_BUSY_TIMEOUT_SECONDS,
            isolation_level=None,
            check_same_thread=False,  # only so that close() may close it from another thread
        )
        _enter_wal_mode(conn)
        conn.execute("PRAGMA synchronous=FULL")
        with self._connections_lock:
            if self._closed:
                conn.close()
                raise RuntimeError("the database is closed")
            self._connections.append(conn)
        return conn

    def _connect_writer(self) -> sqlite3.Connection:
        """The one writer connection: a larger cache, checkpoints left to ``_checkpoint``."""
        conn = self._connect()
        conn.execute(f"PRAGMA cache_size = -{_WRITER_CACHE_KIB}")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        return conn

    def _checkpoint(self) -> None:
        """A passive WAL checkpoint on the calling thread's own connection (no write lock)."""
        self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _wal_size(self) -> int:
        try:
            return os.stat(f"{self.path}-wal").st_size
        except OSError:
            return 0

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def write(self, job_id: str | None) -> Iterator[sqlite3.Connection]:
        """One atomic write, committed (with whatever writes queued beside it) on exit.

        ``job_id`` is not needed: every write is serialised.
        """
        del job_id
        with self._commits.transaction() as conn:
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A snapshot on this thread's own connection (WAL readers never block the writer)."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection (checkpointing the WAL). Idempotent; never raises."""
        with self._connections_lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
