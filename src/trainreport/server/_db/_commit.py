"""Group commit: the write requests that arrive together share one SQLite transaction.

Every acknowledged write must be on disk (WAL, ``synchronous=FULL``: an fsync
per commit), and that fsync, not Python, bounded the server's throughput under
many concurrent reporters: each update waited for the write lock, then for
its own fsync (``docs/performance.md``, "Reference server under load"). Here
writers take turns on one shared connection as before, but each write runs in
a ``SAVEPOINT`` of a transaction that stays open while other writers are
queued behind it; the last writer of the wave (or the 64th) commits for all.
Nobody returns before the commit that holds its write, so "acknowledged means
durable" is unchanged; a write that fails rolls back to its savepoint and
leaves the others alone.

Thread-safety: any thread may call :meth:`GroupCommit.transaction`; the
connection is used by one thread at a time (under the lock), never concurrently.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator

__all__ = ["CHECKPOINT_WAL_BYTES", "MAX_BATCH_WRITES", "GroupCommit"]

#: Writes sharing one transaction at most (bounds the wait of the first of them).
MAX_BATCH_WRITES = 64
#: A write-ahead log larger than this (bytes) is checkpointed after the next commit.
CHECKPOINT_WAL_BYTES = 4 * 2**20


class _Batch:
    """One open transaction: its writes, and how it ended."""

    def __init__(self) -> None:
        self.writes = 0
        self.error: BaseException | None = None
        self.done = threading.Event()

    def finish(self, error: BaseException | None) -> None:
        self.error = error
        self.done.set()

    def result(self) -> None:
        """Wait for the commit; raise if it (or the transaction) failed."""
        self.done.wait()
        if self.error is not None:
            raise sqlite3.OperationalError(
                f"the transaction holding this write failed: {self.error}"
            ) from self.error


class GroupCommit:
    """Serialised writes on one connection, committed in groups.

    SQLite's automatic checkpoint runs inside the commit that crosses its
    threshold, that is, while every other writer waits. The writer connection
    turns it off (``wal_autocheckpoint=0``, done by ``connect``) and the thread
    that committed runs a passive checkpoint once the log outgrows
    ``checkpoint_wal_bytes``, after it let go of the connection, so writes go
    on meanwhile (one checkpoint at a time; a thread that finds one running
    skips it).

    Args:
        connect: opens the writer connection (autocommit mode,
            ``isolation_level=None``, ``wal_autocheckpoint=0``), on first use.
        checkpoint: runs a passive checkpoint on a connection of its own.
        wal_size: the write-ahead log's size in bytes (0 when absent).
        checkpoint_wal_bytes: the log size that triggers a checkpoint, bytes.
    """

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        checkpoint: Callable[[], None] | None = None,
        wal_size: Callable[[], int] | None = None,
        checkpoint_wal_bytes: int = CHECKPOINT_WAL_BYTES,
    ) -> None:
        self._connect = connect
        self._checkpoint = checkpoint
        self._wal_size = wal_size
        self._checkpoint_wal_bytes = checkpoint_wal_bytes
        self._checkpointing = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # the connection and _batch
        self._queued = 0  # writers waiting for _lock (guarded by _queued_lock)
        self._queued_lock = threading.Lock()
        self._batch: _Batch | None = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run the block's writes atomically; return once they are committed.

        Raises:
            sqlite3.Error: the block's statements, ``BEGIN`` or the commit failed
                (the block's writes are then not stored).
            BaseException: whatever the block raised (its writes rolled back).
        """
        with self._queued_lock:
            self._queued += 1
        self._lock.acquire()
        with self._queued_lock:
            self._queued -= 1
        batch: _Batch | None = None
        lead = False
        try:
            conn = self._connection()
            if self._batch is None:
                conn.execute("BEGIN IMMEDIATE")
                self._batch = _Batch()
            batch = self._batch
            conn.execute("SAVEPOINT trainreport_write")
            try:
                yield conn
            except BaseException:
                self._undo(conn, batch)
                raise
            conn.execute("RELEASE trainreport_write")
            batch.writes += 1
        finally:
            lead = self._commit_unless_others_follow(batch)
            self._lock.release()
        if batch is not None and not lead:
            batch.result()
        elif batch is not None and batch.error is not None:
            raise batch.error
        if lead:
            self._checkpoint_if_due()

    def _checkpoint_if_due(self) -> None:
        """A passive checkpoint when the log is large and none is running. Never raises."""
        if self._checkpoint is None or self._wal_size is None:
            return
        if self._wal_size() < self._checkpoint_wal_bytes:
            return
        if not self._checkpointing.acquire(blocking=False):
            return
        try:
            with contextlib.suppress(sqlite3.Error):
                self._checkpoint()
        finally:
            self._checkpointing.release()

    def _undo(self, conn: sqlite3.Connection, batch: _Batch) -> None:
        """Roll back the failed block only; if SQLite ended the transaction, fail the batch."""
        if conn.in_transaction:
            conn.execute("ROLLBACK TO trainreport_write")
            conn.execute("RELEASE trainreport_write")
            return
        self._batch = None  # e.g. SQLITE_FULL: the whole transaction is gone
        batch.finish(sqlite3.OperationalError("the transaction was rolled back"))

    def _commit_unless_others_follow(self, batch: _Batch | None) -> bool:
        """Commit the open batch unless another writer is queued to join it (under the lock).

        Returns:
            True when this thread ended the batch (committed it or found it ended).
        """
        if batch is None or self._batch is not batch:
            return True
        with self._queued_lock:
            others = self._queued
        if others and batch.writes < MAX_BATCH_WRITES:
            return False
        self._batch = None
        if batch.writes == 0:  # only failed writes: nothing to keep
            self._rollback()
            batch.finish(None)
            return True
        try:
            self._connection().execute("COMMIT")
        except BaseException as exc:
            self._rollback()
            batch.finish(exc)
        else:
            batch.finish(None)
        return True

    def _rollback(self) -> None:
        conn = self._connection()
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn
