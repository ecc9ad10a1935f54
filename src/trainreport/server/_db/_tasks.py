"""The task reads and writes of the reference server's storage (``docs/server.md``).

Baseline ``GET``/``PATCH`` (:meth:`TaskStore.get_task`, :meth:`TaskStore.read_task`,
:meth:`TaskStore.patch_task`), the ``series-suffix-v1`` writer fence and
updates (:meth:`TaskStore.open_writer`, :meth:`TaskStore.apply_update`), and the
page's columns (:meth:`TaskStore.series_columns`). Points have their own rows,
so appending a suffix costs the new points (one ``executemany``), not a rewrite
of the whole curve. Every write is one transaction of the backend, committed
before the caller answers the request, and exclusive per job across every
server process on the database (``Backend.write``): the writer fence
(generation), the sequence check and the suffix offsets are read and written
inside it (docs/design.md#guarantees: never lose an acknowledged write).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import attrs

from trainreport.server._db._backend import Backend
from trainreport.server._db._rows import (
    PENDING,
    job_cancel_requested,
    merge_task,
    point_rows,
    series_lengths_of,
    task_document,
    task_row,
    touch_job,
    write_suffix,
)
from trainreport.server._wire import TaskPatch, TaskUpdate, WriterClaim

__all__ = [
    "Applied",
    "SeriesGap",
    "StaleAttempt",
    "StaleWriter",
    "Stored",
    "TaskStore",
    "UpdateOutcome",
    "WriterOpened",
]


@attrs.frozen
class Stored:
    """A baseline ``PATCH`` was applied.

    Args:
        status: the task's stored status after the patch.
        cancel_requested: whether the task's job was asked to cancel.
    """

    status: str
    cancel_requested: bool


@attrs.frozen
class WriterOpened:
    """A new writer generation was issued.

    Args:
        generation: the new generation (1 for the first writer of a task).
        last_writer_generation: the generation whose update the task's last write
            was, or ``None`` (none recorded, or a baseline ``PATCH`` came last).
        task: the stored task in the ``GET`` shape, or ``None`` when absent.
        series_lengths: points stored per series, in the task's series order.
        cancel_requested: whether the task's job was asked to cancel.
    """

    generation: int
    task: dict[str, Any] | None
    series_lengths: dict[str, int]
    cancel_requested: bool
    last_writer_generation: int | None = None


@attrs.frozen
class Applied:
    """An update was applied (or recognised as a duplicate and ignored).

    Args:
        series_lengths: points stored per series after the update.
        sequence: the request's sequence number.
        status: the task's stored status.
        cancel_requested: whether the task's job was asked to cancel.
        duplicate: ``True`` when the sequence was already applied and nothing changed.
    """

    series_lengths: dict[str, int]
    sequence: int
    status: str
    cancel_requested: bool
    duplicate: bool


@attrs.frozen
class StaleWriter:
    """The update's writer generation is not the task's current one; nothing applied.

    Args:
        current_generation: the task's current generation, ``None`` when none was issued.
    """

    current_generation: int | None


@attrs.frozen
class StaleAttempt:
    """A writer claimed the task with an older attempt than the holder's; nothing changed.

    Args:
        holder: the attempt identity of the task's current writer.
        current_generation: the task's current writer generation.
    """

    holder: WriterClaim
    current_generation: int


@attrs.frozen
class SeriesGap:
    """A suffix starts beyond the stored length of its series; nothing applied.

    Args:
        series_lengths: points stored per series (every series of the task).
    """

    series_lengths: dict[str, int]


UpdateOutcome: TypeAlias = Applied | StaleWriter | SeriesGap


class TaskStore:
    """A task's reads and writes on one backend.

    Args:
        backend: the database's backend (owned by ``server._db._database.Database``).

    Thread-safety: shared by every request thread; the backend owns the connections.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def get_task(
        self, job_id: str, task_id: str, *, include_metrics: bool = True
    ) -> dict[str, Any] | None:
        """The stored task in the ``GET`` shape ``{"status", "status_details"}``, or ``None``.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            include_metrics: add ``status_details.metrics`` (every point of
                every series) when the task has series.
        """
        with self.backend.read() as conn:
            return task_document(conn, job_id, task_id, include_metrics=include_metrics)

    def read_task(
        self, job_id: str, task_id: str, *, include_metrics: bool = True
    ) -> tuple[dict[str, Any], str] | None:
        """:meth:`get_task` and the server's time of the task's last write, in one snapshot.

        Returns:
            ``(task, updated_at)`` (ISO 8601 UTC), or ``None`` when the task does
            not exist.
        """
        with self.backend.read() as conn:
            task = task_document(conn, job_id, task_id, include_metrics=include_metrics)
            row = conn.execute(
                "SELECT updated_at FROM tasks WHERE job_id = ? AND task_id = ?", (job_id, task_id)
            ).fetchone()
        if task is None or row is None:
            return None
        return task, str(row[0])

    def patch_task(self, job_id: str, task_id: str, patch: TaskPatch, *, now: str) -> Stored:
        """Apply a baseline ``PATCH``: shallow merge of details, ``metrics`` replaces all series.

        Creates the job and the task when missing (status ``"pending"`` unless given).

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            patch: the validated body.
            now: the server's wall-clock time, ISO 8601 UTC.
        """
        with self.backend.write(job_id) as conn:
            touch_job(conn, job_id, now)
            status = merge_task(conn, job_id, task_id, patch.status, patch.details, now)
            # A baseline write has no generation: the last writer is unknown from here on.
            conn.execute(
                "UPDATE writers SET applied_generation = NULL WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            )
            if patch.metrics is not None:
                conn.execute(
                    "DELETE FROM points WHERE job_id = ? AND task_id = ?", (job_id, task_id)
                )
                conn.execute(
                    "DELETE FROM series WHERE job_id = ? AND task_id = ?", (job_id, task_id)
                )
                lengths: dict[str, int] = {}
                for series in patch.metrics:
                    write_suffix(conn, job_id, task_id, series, lengths)
            return Stored(status=status, cancel_requested=job_cancel_requested(conn, job_id))

    # -- series-suffix-v1 -------------------------------------------------------------

    def open_writer(
        self,
        job_id: str,
        task_id: str,
        claim: WriterClaim | None = None,
        *,
        include_metrics: bool = True,
    ) -> WriterOpened | StaleAttempt:
        """Issue the task's next writer generation, unless the claim is of an older attempt.

        Generations follow the attempts' order, not the order in which writers
        open: a claim older than the current holder's (``WriterClaim.is_older_than``)
        is refused and fences nobody; any other claim issues the next
        generation, which fences every older writer, and becomes the holder.
        Does not create the task or the job.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            claim: the writer's attempt identity (``None``: no identity).
            include_metrics: the task's ``metrics`` in the answer (``False``:
                ``?metrics=false``, the series read from ``GET .../series``).
        """
        claim = claim if claim is not None else WriterClaim()
        with self.backend.write(job_id) as conn:
            row = conn.execute(
                "SELECT generation, attempt_number, attempt_started_at FROM writers "
                "WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()
            if row is not None:
                holder = WriterClaim(number=row[1], started_at=row[2])
                if claim.is_older_than(holder):
                    return StaleAttempt(holder=holder, current_generation=row[0])
            conn.execute(
                "INSERT INTO writers (job_id, task_id, generation, last_sequence, "
                "attempt_number, attempt_started_at) VALUES (?, ?, 1, 0, ?, ?) "
                "ON CONFLICT (job_id, task_id) DO UPDATE SET generation = writers.generation + 1, "
                "last_sequence = 0, attempt_number = excluded.attempt_number, "
                "attempt_started_at = excluded.attempt_started_at",
                (job_id, task_id, claim.number, claim.started_at),
            )
            generation, applied = conn.execute(
                "SELECT generation, applied_generation FROM writers "
                "WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()
        # The read needs no write lock: the new writer has not written yet, and
        # every older one is fenced by the committed generation.
        with self.backend.read() as conn:
            return WriterOpened(
                generation=generation,
                task=task_document(conn, job_id, task_id, include_metrics=include_metrics),
                series_lengths=series_lengths_of(conn, job_id, task_id),
                cancel_requested=job_cancel_requested(conn, job_id),
                last_writer_generation=None if applied is None else int(applied),
            )

    def apply_update(
        self, job_id: str, task_id: str, update: TaskUpdate, *, now: str
    ) -> UpdateOutcome:
        """Apply one ``series-suffix-v1`` update atomically (``docs/protocol.md``).

        In order: a generation other than the current one is :class:`StaleWriter`;
        a sequence at or below the last applied one is a duplicate (nothing
        applied); a suffix whose offset is beyond its series' length is
        :class:`SeriesGap`; otherwise every series is truncated to its offset
        and extended with the given points, details are merged shallowly and
        the status set, in one committed transaction.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            update: the validated body.
            now: the server's wall-clock time, ISO 8601 UTC.
        """
        with self.backend.write(job_id) as conn:
            writer = conn.execute(
                "SELECT generation, last_sequence FROM writers WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()
            if writer is None or writer[0] != update.writer_generation:
                return StaleWriter(current_generation=None if writer is None else writer[0])
            lengths = series_lengths_of(conn, job_id, task_id)
            if update.sequence <= writer[1]:
                row = task_row(conn, job_id, task_id)
                return Applied(
                    series_lengths=lengths,
                    sequence=update.sequence,
                    status=PENDING if row is None else row[0],
                    cancel_requested=job_cancel_requested(conn, job_id),
                    duplicate=True,
                )
            if any(s.offset > lengths.get(s.name, 0) for s in update.series):
                return SeriesGap(series_lengths=lengths)
            touch_job(conn, job_id, now)
            status = merge_task(conn, job_id, task_id, update.status, update.details, now)
            for series in update.series:
                write_suffix(conn, job_id, task_id, series, lengths)
            conn.execute(
                "UPDATE writers SET last_sequence = ?, applied_generation = generation "
                "WHERE job_id = ? AND task_id = ?",
                (update.sequence, job_id, task_id),
            )
            return Applied(
                series_lengths=lengths,
                sequence=update.sequence,
                status=status,
                cancel_requested=job_cancel_requested(conn, job_id),
                duplicate=False,
            )

    def point_count(self, job_id: str, task_id: str, names: Sequence[str] | None = None) -> int:
        """Points stored in the task's series (those in ``names``, or all): one cheap read.

        What a response carrying the task's curves will read, so that its
        memory can be budgeted before it is built (``server/_responses.py``).
        0 when the task does not exist.
        """
        with self.backend.read() as conn:
            lengths = series_lengths_of(conn, job_id, task_id)
        if names is not None:
            chosen = set(names)
            return sum(n for name, n in lengths.items() if name in chosen)
        return sum(lengths.values())

    def series_count(self, job_id: str, task_id: str) -> int:
        """Series the task holds (0 when it does not exist): one cheap read, for budgeting."""
        with self.backend.read() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM series WHERE job_id = ? AND task_id = ?", (job_id, task_id)
            ).fetchone()
        return int(row[0]) if row else 0

    def series_summary(self, job_id: str, task_id: str) -> dict[str, dict[str, Any]] | None:
        """Each series' stored length and last point, without reading its other points.

        One query: the ``series`` rows of the task (their primary key) joined
        with the point at index ``length - 1`` of each (the points' primary key
        ``(job_id, task_id, series, idx)``), so its cost is one index lookup a
        series, whatever their lengths (``docs/server.md``, ``/series/summary``).

        Returns:
            ``{name: {"length", "last_step", "last_epoch", "last_value", "last_time"}}``
            in the task's series order, or ``None`` when the task is absent.
        """
        with self.backend.read() as conn:
            if task_row(conn, job_id, task_id) is None:
                return None
            rows = conn.execute(
                "SELECT s.series, s.length, p.step, p.epoch, p.value, p.time "
                "FROM series s LEFT JOIN points p ON p.job_id = s.job_id "
                "AND p.task_id = s.task_id AND p.series = s.series AND p.idx = s.length - 1 "
                "WHERE s.job_id = ? AND s.task_id = ? ORDER BY s.ord",
                (job_id, task_id),
            ).fetchall()
        return {
            name: {
                "length": length,
                "last_step": step,
                "last_epoch": epoch,
                "last_value": value,
                "last_time": time,
            }
            for name, length, step, epoch, value, time in rows
        }

    def series_columns(
        self,
        job_id: str,
        task_id: str,
        names: Sequence[str] | None,
        *,
        from_step: int | None = None,
        to_step: int | None = None,
        after: int = 0,
    ) -> dict[str, dict[str, Any]] | None:
        """The task's series as columns, optionally only a step range or an index suffix.

        Args:
            job_id: a validated job id.
            task_id: a validated task id.
            names: the series wanted (unknown names are skipped), or ``None`` for all.
            from_step: only the points whose step is at least this (``None``: no bound).
            to_step: only the points whose step is at most this (``None``: no bound).
            after: only the points whose index is at least this.

        Returns:
            ``{name: {"length", "first_index", "steps", "epochs", "values", "times"}}``
            in the task's series order (``length``: every point stored; ``first_index``:
            the stored index of the first point given), or ``None`` when the task is absent.
        """
        with self.backend.read() as conn:
            if task_row(conn, job_id, task_id) is None:
                return None
            lengths = series_lengths_of(conn, job_id, task_id)
            wanted = list(lengths)
            if names is not None:
                chosen = set(names)
                wanted = [name for name in wanted if name in chosen]
            result: dict[str, dict[str, Any]] = {}
            for name in wanted:
                first, rows = point_rows(
                    conn, job_id, task_id, name, from_step=from_step, to_step=to_step, after=after
                )
                result[name] = {
                    "length": lengths[name],
                    "first_index": first,
                    "steps": [r[0] for r in rows],
                    "epochs": [r[1] for r in rows],
                    "values": [r[2] for r in rows],
                    "times": [r[3] for r in rows],
                }
            return result
