"""The storage layer on both backends: migrations, two replicas on one database, retention.

"Two replicas" here are two :class:`Database` objects on one database (two
connection pools, as two server processes have); ``test_server_replicas.py``
runs real server processes. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from conftest import new_database, opened_writer
from trainreport.server._db._backend import open_backend
from trainreport.server._db._database import (
    UNFINISHED_STATUSES,
    Applied,
    Database,
    StaleWriter,
)
from trainreport.server._db._migrations import MIGRATIONS, SCHEMA_VERSION, ddl
from trainreport.server._db._sqlite import SqliteBackend
from trainreport.server._retention import RetentionWorker, cutoff_for
from trainreport.server._wire import TASK_STATUSES, SeriesPoints, TaskPatch, TaskUpdate

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(120)]

NOW = "2026-03-01T12:00:00.000Z"
OLD = "2026-01-01T12:00:00.000Z"


@pytest.fixture
def target(request: pytest.FixtureRequest, storage: str, tmp_path: Path) -> str | Path:
    return new_database(request, storage, tmp_path)


@pytest.fixture
def open_db(target: str | Path) -> Iterator[Callable[[], Database]]:
    """A factory of databases on the test's one database (each its own connections)."""
    opened: list[Database] = []

    def open_one() -> Database:
        opened.append(Database(target))
        return opened[-1]

    yield open_one
    for db in opened:
        db.close()


def suffix(generation: int, sequence: int, offset: int, count: int, value: float) -> TaskUpdate:
    steps = list(range(offset + 1, offset + count + 1))
    return TaskUpdate(
        writer_generation=generation,
        sequence=sequence,
        status="running",
        details={"step": offset + count},
        series=(SeriesPoints("loss", offset, steps, [1] * count, [value] * count),),
    )


def stored_values(db: Database, job: str, task: str = "t") -> list[tuple[int, float]]:
    columns = db.tasks.series_columns(job, task, None)
    if not columns:
        return []
    return list(zip(columns["loss"]["steps"], columns["loss"]["values"], strict=True))


# -- migrations -------------------------------------------------------------------------


def test_migrations_run_once_and_a_second_start_changes_nothing(
    open_db: Callable[[], Database],
) -> None:
    """Every migration is recorded once in schema_version; reopening keeps the data."""
    first = open_db()
    first.jobs.put_job("kept", now=NOW)
    second = open_db()

    with second.backend.read() as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert list(range(1, SCHEMA_VERSION + 1)) == [row[0] for row in rows]
    assert len(MIGRATIONS) == SCHEMA_VERSION
    assert second.jobs.get_job("kept") is not None


def test_replicas_starting_together_migrate_once(target: str | Path) -> None:
    """Four servers opening a new database at the same moment: one schema, no error."""
    barrier = threading.Barrier(4)

    def start(_: int) -> Database:
        barrier.wait(timeout=30)
        return Database(target)

    with ThreadPoolExecutor(4) as pool:
        databases = list(pool.map(start, range(4)))
    try:
        with databases[0].backend.read() as conn:
            count = conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0]
        assert SCHEMA_VERSION == count
    finally:
        for db in databases:
            db.close()


def test_connections_opening_a_new_sqlite_file_together_all_get_wal_mode(tmp_path: Path) -> None:
    """Four threads opening a new file at once, 100 times: every connection opens, in WAL mode.

    Two connections switching a new file to WAL each hold a shared lock and want the
    exclusive one; SQLite refuses one at once (``database is locked``) instead of waiting.
    Unretried, about one round in nine failed here, so 100 rounds pass by chance 1 in 10^5.
    """
    for round_number in range(100):
        path = tmp_path / f"round-{round_number}.db"
        barrier = threading.Barrier(4)

        def open_one(_: int, path: Path = path, barrier: threading.Barrier = barrier) -> str:
            barrier.wait(timeout=30)
            backend = SqliteBackend(path)
            try:
                with backend.read() as conn:
                    return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            finally:
                backend.close()

        with ThreadPoolExecutor(4) as pool:
            modes = list(pool.map(open_one, range(4)))
        assert ["wal"] * 4 == modes, round_number


def test_a_database_of_a_newer_schema_is_refused(target: str | Path) -> None:
    """A database a newer server migrated is not misread by an older one."""
    Database(target).close()
    backend = open_backend(target)
    with backend.write(None) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (99, ?)", (NOW,))
    backend.close()

    with pytest.raises(RuntimeError, match="schema version 99"):
        Database(target)


def test_points_stored_before_the_times_migration_read_with_unknown_times(
    target: str | Path,
) -> None:
    """A database of schema 4 gains ``points.time``; its points read back with time ``None``."""
    backend = open_backend(target)
    with backend.write(None) as conn:
        conn.execute(migration_ddl_version_table(backend.dialect))
        for number, statements in enumerate(MIGRATIONS[:4], start=1):
            for statement in statements:
                conn.execute(ddl(statement, backend.dialect))
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (number, OLD)
            )
        if backend.dialect == "sqlite":
            conn.execute("PRAGMA user_version = 4")
        conn.execute(
            "INSERT INTO jobs (job_id, created_at, updated_at) VALUES ('old', ?, ?)", (OLD, OLD)
        )
        conn.execute(
            "INSERT INTO tasks (job_id, task_id, status, details, created_at, updated_at) "
            "VALUES ('old', 't', 'running', '{}', ?, ?)",
            (OLD, OLD),
        )
        conn.execute(
            "INSERT INTO series (job_id, task_id, series, ord, length) "
            "VALUES ('old', 't', 'a', 1, 1)"
        )
        conn.execute(
            "INSERT INTO points (job_id, task_id, series, idx, step, epoch, value) "
            "VALUES ('old', 't', 'a', 0, 7, 1, 0.5)"
        )
    backend.close()

    db = Database(target)
    try:
        columns = db.tasks.series_columns("old", "t", None)
    finally:
        db.close()

    assert columns is not None
    assert ([7], [0.5], [None]) == (
        columns["a"]["steps"],
        columns["a"]["values"],
        columns["a"]["times"],
    )


def migration_ddl_version_table(dialect: str) -> str:
    return ddl(
        "CREATE TABLE IF NOT EXISTS schema_version (version {int} PRIMARY KEY, "
        "applied_at TEXT NOT NULL)",
        dialect,
    )


# -- two replicas on one database -------------------------------------------------------


def test_the_same_suffix_applied_by_two_replicas_at_once_is_stored_once(
    open_db: Callable[[], Database],
) -> None:
    """A client resending through the other replica while the first still works: no doubles.

    Each of 30 updates goes to both replicas at the same moment; one applies it,
    the other finds it applied (a duplicate) or rewrites the same points.
    """
    a, b = open_db(), open_db()
    job = f"j-{uuid.uuid4().hex[:8]}"
    generation = opened_writer(a, job, "t").generation
    barrier = threading.Barrier(2)

    def send(db: Database, update: TaskUpdate) -> Any:
        barrier.wait(timeout=30)
        return db.tasks.apply_update(job, "t", update, now=NOW)

    with ThreadPoolExecutor(2) as pool:
        for sequence in range(1, 31):
            update = suffix(generation, sequence, (sequence - 1) * 5, 5, float(sequence))
            outcomes = list(pool.map(send, (a, b), (update, update)))
            assert all(isinstance(o, Applied) for o in outcomes)
            assert [False, True] == sorted(o.duplicate for o in outcomes)

    expected = [(step, float(1 + (step - 1) // 5)) for step in range(1, 151)]
    assert expected == stored_values(b, job)


def test_a_zombie_on_one_replica_cannot_write_after_a_new_attempt_opened_on_the_other(
    open_db: Callable[[], Database],
) -> None:
    """While the old writer keeps sending through A, the new one opens through B.

    Whatever the interleaving, each zombie update either landed before the new
    writer opened (and is in the lengths it was given) or is refused; the new
    writer's updates all apply (none mistaken for a duplicate) and the curve
    ends as the new writer wrote it.
    """
    a, b = open_db(), open_db()
    for round_ in range(5):
        job = f"j-{round_}-{uuid.uuid4().hex[:8]}"
        zombie_gen = opened_writer(a, job, "t").generation
        opened = threading.Event()
        refused = threading.Event()

        def zombie(
            job: str = job,
            zombie_gen: int = zombie_gen,
            opened: threading.Event = opened,
            refused: threading.Event = refused,
        ) -> list[int]:
            acknowledged, sequence, length = [], 1, 0
            while not refused.is_set():
                outcome = a.tasks.apply_update(
                    job, "t", suffix(zombie_gen, sequence, length, 3, -1.0), now=NOW
                )
                if isinstance(outcome, StaleWriter):
                    refused.set()
                    break
                assert isinstance(outcome, Applied)
                length = outcome.series_lengths["loss"]
                acknowledged.append(length)
                sequence += 1
                if opened.is_set() and sequence > 200:
                    break
            return acknowledged

        with ThreadPoolExecutor(1) as pool:
            zombie_run = pool.submit(zombie)
            threading.Event().wait(0.02 * (round_ + 1))
            new = opened_writer(b, job, "t")
            opened.set()
            acknowledged = zombie_run.result(timeout=60)
        start = new.series_lengths.get("loss", 0)
        assert all(length <= start for length in acknowledged)
        for sequence in range(1, 4):
            outcome = b.tasks.apply_update(
                job,
                "t",
                suffix(new.generation, sequence, start + 3 * (sequence - 1), 3, 7.0),
                now=NOW,
            )
            assert isinstance(outcome, Applied)
            assert not outcome.duplicate
        values = [value for _, value in stored_values(a, job)]
        assert [-1.0] * start + [7.0] * 9 == values


# -- retention --------------------------------------------------------------------------


def finished_job(db: Database, job: str, points: int, *, status: str = "completed") -> None:
    """A job with one task of ``points`` points in ``status``, last written at OLD."""
    generation = opened_writer(db, job, "t").generation
    db.tasks.apply_update(job, "t", suffix(generation, 1, 0, points, 0.5), now=OLD)
    db.tasks.patch_task(job, "t", TaskPatch(status=status, details={}, metrics=None), now=OLD)


def test_unfinished_statuses_are_the_non_terminal_ones() -> None:
    """Retention's SQL names 'pending' and 'running': every other status is terminal."""
    assert {"pending", "running"} == UNFINISHED_STATUSES
    assert UNFINISHED_STATUSES < TASK_STATUSES


def test_retention_removes_finished_old_jobs_and_keeps_the_rest(
    open_db: Callable[[], Database],
) -> None:
    """Old and finished: gone with every point. Old but running, or recent: kept."""
    db = open_db()
    tag = uuid.uuid4().hex[:8]
    finished_job(db, f"old-done-{tag}", 120)
    finished_job(db, f"old-failed-{tag}", 10, status="failed")
    finished_job(db, f"old-running-{tag}", 10, status="running")
    generation = opened_writer(db, f"recent-{tag}", "t").generation
    db.tasks.apply_update(f"recent-{tag}", "t", suffix(generation, 1, 0, 5, 1.0), now=NOW)
    worker = RetentionWorker(
        db,
        retain_days=30,
        points_per_batch=50,
        clock=lambda: datetime(2026, 3, 1, tzinfo=timezone.utc),
    )

    done = worker.run_once()

    assert (2, 130) == (done.jobs, done.points)
    assert db.jobs.get_job(f"old-done-{tag}") is None
    assert db.tasks.get_task(f"old-done-{tag}", "t") is None
    assert db.jobs.get_job(f"old-running-{tag}") is not None
    assert 5 == len(stored_values(db, f"recent-{tag}"))
    with db.backend.read() as conn:
        left = conn.execute(
            "SELECT COUNT(*) FROM points WHERE job_id IN (?, ?)",
            (f"old-done-{tag}", f"old-failed-{tag}"),
        ).fetchone()[0]
        queued = conn.execute("SELECT COUNT(*) FROM purges").fetchone()[0]
    assert (0, 0) == (left, queued)
    assert (0, 0) == (worker.run_once().jobs, worker.run_once().points)


def test_points_are_purged_in_bounded_batches(open_db: Callable[[], Database]) -> None:
    """A deleted task of 1,000 points goes in transactions of at most 300 points."""
    db = open_db()
    job = f"big-{uuid.uuid4().hex[:8]}"
    finished_job(db, job, 1000)
    assert db.jobs.delete_job(job, now=NOW)

    batches = []
    while (deleted := db.retention.purge_points(limit=300)) is not None:
        batches.append(deleted)

    assert [300, 300, 300, 100] == batches


def test_a_deleted_task_vanishes_at_once_though_its_points_wait(
    open_db: Callable[[], Database],
) -> None:
    """Between the delete and the purge nothing of the task is visible, and its old writer
    is refused; a task created again under the same ids starts empty."""
    db = open_db()
    job = f"gone-{uuid.uuid4().hex[:8]}"
    generation = opened_writer(db, job, "t").generation
    db.tasks.apply_update(job, "t", suffix(generation, 1, 0, 40, 0.5), now=OLD)

    assert db.jobs.delete_job(job, now=NOW)

    assert (None, None, None) == (
        db.jobs.get_job(job),
        db.tasks.get_task(job, "t"),
        db.tasks.series_columns(job, "t", None),
    )
    late = db.tasks.apply_update(job, "t", suffix(generation, 2, 40, 5, 9.0), now=NOW)
    assert isinstance(late, StaleWriter)
    again = opened_writer(db, job, "t").generation
    applied = db.tasks.apply_update(job, "t", suffix(again, 1, 0, 3, 2.0), now=NOW)
    assert isinstance(applied, Applied)
    assert [(1, 2.0), (2, 2.0), (3, 2.0)] == stored_values(db, job)
    assert db.retention.purge_points(limit=100) is None  # the re-created task cleared the leftovers
    assert 3 == len(stored_values(db, job))


def test_retention_racing_a_writer_of_an_old_job_never_leaves_half_a_task(
    open_db: Callable[[], Database],
) -> None:
    """A writer revives an old finished job while a replica runs retention on it.

    Either the write got in first (the job is fresh again and kept, with every
    point) or retention did (the job is gone whole and the writer is refused):
    never a task with some of its series or points.
    """
    writer_db, retention_db = open_db(), open_db()
    cutoff = cutoff_for(datetime(2026, 3, 1, tzinfo=timezone.utc), 30)
    for attempt in range(12):
        job = f"race-{attempt}-{uuid.uuid4().hex[:8]}"
        finished_job(writer_db, job, 30)
        generation = opened_writer(writer_db, job, "t").generation
        barrier = threading.Barrier(2)

        def write(
            job: str = job, generation: int = generation, barrier: threading.Barrier = barrier
        ) -> Any:
            barrier.wait(timeout=30)
            return writer_db.tasks.apply_update(
                job, "t", suffix(generation, 1, 30, 10, 3.0), now=NOW
            )

        def retain(job: str = job, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait(timeout=30)
            return retention_db.jobs.delete_job(job, now=NOW, finished_before=cutoff)

        with ThreadPoolExecutor(2) as pool:
            wrote, deleted = pool.submit(write), pool.submit(retain)
            outcome, removed = wrote.result(timeout=60), deleted.result(timeout=60)
        task = writer_db.tasks.get_task(job, "t")
        if removed:
            assert isinstance(outcome, StaleWriter)
            assert task is None
            assert writer_db.jobs.get_job(job) is None
        else:
            assert isinstance(outcome, Applied)
            assert task is not None
            assert 40 == len(task["status_details"]["metrics"]["loss"])


def test_retention_never_deletes_a_job_whose_task_went_back_to_running_since_it_was_listed(
    open_db: Callable[[], Database],
) -> None:
    """The listing is a hint: the delete itself re-checks that no task is unfinished.

    A replica whose clock is behind restarts a task of a listed job and stamps
    the job with an old time, so the job still looks old to the delete; only
    the status check inside the delete's transaction keeps the running task.
    """
    retention_db, writer_db = open_db(), open_db()
    cutoff = cutoff_for(datetime(2026, 3, 1, tzinfo=timezone.utc), 30)
    job = f"revived-{uuid.uuid4().hex[:8]}"
    finished_job(writer_db, job, 12)
    assert job in retention_db.retention.expired_jobs(cutoff, limit=1000)
    running = TaskPatch(status="running", details={}, metrics=None)
    writer_db.tasks.patch_task(job, "t", running, now=OLD)

    removed = retention_db.jobs.delete_job(job, now=NOW, finished_before=cutoff)

    assert removed is False
    task = writer_db.tasks.get_task(job, "t")
    assert task is not None
    assert "running" == task["status"]
    assert 12 == len(stored_values(writer_db, job))


def test_retention_days_must_be_positive(open_db: Callable[[], Database]) -> None:
    """0 or a negative number of days would delete every finished job at once."""
    with pytest.raises(ValueError, match="retain_days"):
        RetentionWorker(open_db(), retain_days=0)


def test_the_cutoff_is_n_days_before_now_in_the_stored_format() -> None:
    """Stored times compare as text: the cutoff uses the same ISO 8601 form."""
    now = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc) + timedelta(milliseconds=5)
    assert "2026-02-27T12:00:00.005Z" == cutoff_for(now, 2)


# -- the PostgreSQL half of the suite ------------------------------------------------------


def _run_one_postgres_test(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """This module's first PostgreSQL test, in a child pytest with no PostgreSQL binaries."""
    environment = {
        k: v for k, v in os.environ.items() if k not in ("CI", "TRAINREPORT_SKIP_POSTGRES")
    }
    environment.update(TRAINREPORT_PG_BIN=str(tmp_path), **env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            f"{__file__}::test_migrations_run_once_and_a_second_start_changes_nothing[postgresql]",
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


def test_without_postgres_binaries_the_postgres_tests_fail_in_ci(tmp_path: Path) -> None:
    """CI must not pass by skipping half the suite: no initdb means failures, even when
    TRAINREPORT_SKIP_POSTGRES is set."""
    result = _run_one_postgres_test(tmp_path, CI="true", TRAINREPORT_SKIP_POSTGRES="1")
    assert 1 == result.returncode, result.stdout
    assert "PostgreSQL server binaries (initdb, pg_ctl) not found" in result.stdout


def test_a_local_run_may_skip_them_when_asked(tmp_path: Path) -> None:
    """Outside CI, TRAINREPORT_SKIP_POSTGRES=1 turns the failure into a visible skip."""
    result = _run_one_postgres_test(tmp_path, TRAINREPORT_SKIP_POSTGRES="1")
    assert 0 == result.returncode, result.stdout
    assert "1 skipped" in result.stdout
