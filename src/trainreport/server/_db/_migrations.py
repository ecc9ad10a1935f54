"""The database schema as numbered migrations, applied at start on SQLite and PostgreSQL.

Layout (``docs/server.md``)::

    jobs    (job_id PK, created_at, updated_at, cancel_requested)
    tasks   ((job_id, task_id) PK, status, details JSON without "metrics", created_at, updated_at)
    series  ((job_id, task_id, series) PK, ord, length)          lengths without counting points
    points  ((job_id, task_id, series, idx) PK, step, epoch, value,
             time)                                               time: seconds since the epoch
    writers ((job_id, task_id) PK, generation, last_sequence,
             attempt_number, attempt_started_at,
             applied_generation)                                 exists before the task does
    purges  ((job_id, task_id) PK, queued_at)                    deleted tasks whose points remain
    schema_version (version PK, applied_at)                      one row per migration applied

Each migration is a list of statements written once, in the SQL both databases
speak, with the few words that differ as ``{placeholders}`` (integer and
float column types, SQLite's ``WITHOUT ROWID``, an identity column standing in
for SQLite's implicit ``rowid``). :func:`migrate` applies the missing ones in
one transaction that excludes every other migrating server (``write(None)``),
so replicas starting together are safe and a second start changes nothing. A
database whose version is newer than this server's is refused.

SQLite files written before the ``schema_version`` table existed carry their
version in ``PRAGMA user_version`` (1, or 2 with the writers' attempt identity);
they are recorded as such and only the later migrations run. SQLite files also
keep ``user_version`` current, so an older server refuses a newer file.
"""

from __future__ import annotations

from trainreport.server._db._backend import Backend, Connection

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "ddl", "migrate", "stored_version"]

_DIALECT_WORDS = {
    "sqlite": {"int": "INTEGER", "real": "REAL", "without_rowid": " WITHOUT ROWID", "rowid": ""},
    "postgresql": {
        "int": "BIGINT",
        "real": "DOUBLE PRECISION",
        "without_rowid": "",
        # ORDER BY rowid (the jobs listing's tie-break) works on both.
        "rowid": "rowid BIGINT GENERATED ALWAYS AS IDENTITY,",
    },
}

#: Migration ``i`` (0-based) brings the schema to version ``i + 1``.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS jobs (
            {rowid}
            job_id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            cancel_requested {int} NOT NULL DEFAULT 0)""",
        """CREATE TABLE IF NOT EXISTS tasks (
            job_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            status TEXT NOT NULL,
            details TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (job_id, task_id)){without_rowid}""",
        """CREATE TABLE IF NOT EXISTS series (
            job_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            series TEXT NOT NULL,
            ord {int} NOT NULL,
            length {int} NOT NULL,
            PRIMARY KEY (job_id, task_id, series)){without_rowid}""",
        """CREATE TABLE IF NOT EXISTS points (
            job_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            series TEXT NOT NULL,
            idx {int} NOT NULL,
            step {int} NOT NULL,
            epoch {int},
            value {real},
            PRIMARY KEY (job_id, task_id, series, idx)){without_rowid}""",
        """CREATE TABLE IF NOT EXISTS writers (
            job_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            generation {int} NOT NULL,
            last_sequence {int} NOT NULL,
            PRIMARY KEY (job_id, task_id)){without_rowid}""",
    ),
    (
        # The writers' attempt identity: an older attempt cannot take a task from a newer one.
        "ALTER TABLE writers ADD COLUMN attempt_number {int}",
        "ALTER TABLE writers ADD COLUMN attempt_started_at {real}",
    ),
    (
        # Retention: a deleted task's points are removed in bounded batches after the
        # task itself (rows of jobs, tasks, series, writers) vanished in one transaction.
        """CREATE TABLE IF NOT EXISTS purges (
            job_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            queued_at TEXT NOT NULL,
            PRIMARY KEY (job_id, task_id)){without_rowid}""",
        "CREATE INDEX IF NOT EXISTS jobs_by_updated_at ON jobs (updated_at)",
    ),
    (
        # The generation whose update the task's last write was (NULL: none recorded, or a
        # baseline PATCH came last): a left-over journal of an older writer is never
        # replayed over a newer one's writes (docs/protocol.md, POST .../writers).
        "ALTER TABLE writers ADD COLUMN applied_generation {int}",
    ),
    (
        # Each point's wall-clock time (seconds since the Unix epoch; NULL: unknown, as for
        # every point stored before), sent by clients of series-times-v1 (docs/protocol.md).
        "ALTER TABLE points ADD COLUMN time {real}",
    ),
)

#: The schema version this server writes and reads.
SCHEMA_VERSION = len(MIGRATIONS)

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    version {int} PRIMARY KEY,
    applied_at TEXT NOT NULL)"""


def ddl(statement: str, dialect: str) -> str:
    """A migration statement in the dialect's words (``"sqlite"`` or ``"postgresql"``)."""
    return statement.format(**_DIALECT_WORDS[dialect])


def stored_version(conn: Connection) -> int:
    """The highest migration recorded in ``schema_version`` (0 when none or no table)."""
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(backend: Backend, *, now: str) -> int:
    """Apply the migrations the database lacks, atomically; idempotent.

    Args:
        backend: the database.
        now: the server's wall-clock time, ISO 8601 UTC (recorded per migration).

    Returns:
        The version before migrating (0 for a new database).

    Raises:
        RuntimeError: the database was written by a newer server.
        StorageUnavailable: the database cannot be reached.
    """
    with backend.write(None) as conn:
        conn.execute(ddl(_VERSION_TABLE, backend.dialect))
        version = stored_version(conn)
        if backend.dialect == "sqlite":
            legacy = int(conn.execute("PRAGMA user_version").fetchone()[0])
            version = max(version, legacy)
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{backend.description} has schema version {version}; "
                f"this server knows {SCHEMA_VERSION}"
            )
        for number in range(1, SCHEMA_VERSION + 1):
            if number > version:
                for statement in MIGRATIONS[number - 1]:
                    conn.execute(ddl(statement, backend.dialect))
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?) "
                "ON CONFLICT (version) DO NOTHING",
                (number, now),
            )
        if backend.dialect == "sqlite":
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return version
