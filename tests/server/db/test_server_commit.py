"""Group commit: writes queued together share one transaction, each returns once committed.

Threads are orchestrated with events and the commit's own queue counter, not
with sleeps: the first writer holds the connection until the others are
queued behind it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainreport.server._db._commit import GroupCommit

pytestmark = pytest.mark.timeout(60)


class _Fixture:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.statements: list[str] = []
        self.connections: list[sqlite3.Connection] = []
        self.commits = GroupCommit(self.connect)
        with self.commits.transaction() as conn:
            conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
        self.statements.clear()

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.set_trace_callback(self.statements.append)
        self.connections.append(conn)
        return conn

    def stored(self) -> set[str]:
        with sqlite3.connect(self.path) as reader:
            return {row[0] for row in reader.execute("SELECT k FROM t")}

    def queued(self) -> int:
        return self.commits._queued


@pytest.fixture
def db(tmp_path: Path) -> Iterator[_Fixture]:
    fixture = _Fixture(tmp_path / "g.db")
    yield fixture
    for conn in fixture.connections:
        conn.close()


def _wait_until(condition: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    waiter = threading.Event()
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        waiter.wait(0.005)
    assert condition(), "condition not reached"  # type: ignore[operator]


def test_writes_queued_behind_one_another_share_one_commit(db: _Fixture) -> None:
    """Five writers, four queued while the first writes: five rows, one COMMIT."""
    release = threading.Event()
    entered = threading.Event()
    done: list[str] = []

    def write(key: str, hold: bool) -> None:
        with db.commits.transaction() as conn:
            conn.execute("INSERT INTO t VALUES (?)", (key,))
            if hold:
                entered.set()
                release.wait(20)
        done.append(key)
        assert key in db.stored()  # returned only once committed (another connection sees it)

    first = threading.Thread(target=write, args=("k0", True))
    first.start()
    entered.wait(20)
    others = [threading.Thread(target=write, args=(f"k{i}", False)) for i in range(1, 5)]
    for thread in others:
        thread.start()
    _wait_until(lambda: db.queued() == 4)
    release.set()
    for thread in [first, *others]:
        thread.join(20)

    assert {f"k{i}" for i in range(5)} == set(done) == db.stored()
    assert 1 == db.statements.count("COMMIT")


def test_a_failing_write_rolls_back_alone(db: _Fixture) -> None:
    """The write that raises is undone; the one queued beside it is committed."""
    release = threading.Event()
    entered = threading.Event()
    errors: list[BaseException] = []

    def failing() -> None:
        try:
            with db.commits.transaction() as conn:
                conn.execute("INSERT INTO t VALUES ('bad')")
                entered.set()
                release.wait(20)
                raise ValueError("the handler failed")
        except ValueError as exc:
            errors.append(exc)

    def good() -> None:
        with db.commits.transaction() as conn:
            conn.execute("INSERT INTO t VALUES ('good')")

    thread = threading.Thread(target=failing)
    thread.start()
    entered.wait(20)
    other = threading.Thread(target=good)
    other.start()
    _wait_until(lambda: db.queued() == 1)
    release.set()
    thread.join(20)
    other.join(20)

    assert 1 == len(errors)
    assert {"good"} == db.stored()


def test_a_lone_write_commits_at_once(db: _Fixture) -> None:
    """With nobody queued, a write is its own group: committed before it returns."""
    with db.commits.transaction() as conn:
        conn.execute("INSERT INTO t VALUES ('alone')")

    assert {"alone"} == db.stored()
    assert 1 == db.statements.count("COMMIT")


def test_a_failed_commit_fails_every_write_of_its_group(db: _Fixture) -> None:
    """If COMMIT fails, no writer of the group is told its write is stored."""
    release = threading.Event()
    entered = threading.Event()
    outcomes: list[str] = []

    def write(key: str, hold: bool) -> None:
        try:
            with db.commits.transaction() as conn:
                conn.execute("INSERT INTO t VALUES (?)", (key,))
                if hold:
                    entered.set()
                    release.wait(20)
                if key == "k1":  # the last of the group breaks the COMMIT: a deferred FK
                    conn.execute("PRAGMA defer_foreign_keys = ON")
                    conn.execute("CREATE TABLE IF NOT EXISTS p (id INTEGER PRIMARY KEY)")
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS c (p INTEGER REFERENCES p(id) "
                        "DEFERRABLE INITIALLY DEFERRED)"
                    )
                    conn.execute("INSERT INTO c VALUES (99)")
        except sqlite3.Error:
            outcomes.append(f"{key} failed")
        else:
            outcomes.append(f"{key} stored")

    db.commits._connection().execute("PRAGMA foreign_keys = ON")
    first = threading.Thread(target=write, args=("k0", True))
    first.start()
    entered.wait(20)
    second = threading.Thread(target=write, args=("k1", False))
    second.start()
    _wait_until(lambda: db.queued() == 1)
    release.set()
    first.join(20)
    second.join(20)

    assert ["k0 failed", "k1 failed"] == sorted(outcomes)
    assert set() == db.stored()


def test_the_write_ahead_log_stays_bounded_without_sqlite_autocheckpoint(tmp_path: Path) -> None:
    """The writer turns SQLite's in-commit checkpoint off; the log is checkpointed after commits.

    Writes of ~20x the (lowered) threshold leave a log a few thresholds long,
    not one that grew with everything written.
    """
    from trainreport.server._db._database import Database, WriterOpened  # noqa: PLC0415
    from trainreport.server._db._sqlite import SqliteBackend  # noqa: PLC0415
    from trainreport.server._wire import SeriesPoints, TaskUpdate  # noqa: PLC0415

    backend = SqliteBackend(tmp_path / "wal.db")
    db = Database(backend)
    threshold = 128 * 1024
    backend._commits._checkpoint_wal_bytes = threshold
    try:
        opened = db.tasks.open_writer("j", "t")
        assert isinstance(opened, WriterOpened)
        generation = opened.generation
        for sequence in range(1, 121):
            offset = (sequence - 1) * 500
            steps = list(range(offset, offset + 500))
            update = TaskUpdate(
                writer_generation=generation,
                sequence=sequence,
                status=None,
                details={},
                series=(SeriesPoints("loss", offset, steps, [1] * 500, [0.5] * 500),),
            )
            db.tasks.apply_update("j", "t", update, now="2026-01-01T00:00:00Z")
        written = (tmp_path / "wal.db").stat().st_size
        wal = (tmp_path / "wal.db-wal").stat().st_size
    finally:
        db.close()

    assert written > 10 * threshold  # the checkpoints did move pages into the database
    assert wal < 4 * threshold
