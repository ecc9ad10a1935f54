"""Retention: removing finished jobs older than N days, and the points of deleted jobs.

A job goes in two steps (``Database.jobs.delete_job``, ``Database.retention.purge_points``):
its rows of ``jobs``, ``tasks``, ``series`` and ``writers`` vanish in one short
transaction that re-checks, under the job's lock, that the job is still
finished and old (a writer that got in first wins; a writer that comes after
finds its fence gone and is refused with ``stale_writer``, never a
half-deleted task); its points, possibly millions, are then deleted by this
worker in batches of ``points_per_batch``, each its own transaction, so
ingest never waits behind a large delete.

The worker is a daemon thread that wakes every ``interval_seconds`` (or when
:meth:`RetentionWorker.wake` is called after an admin ``DELETE``) and runs
:meth:`RetentionWorker.run_once`; every wait is an ``Event.wait`` that
:meth:`RetentionWorker.stop` cuts short. With several replicas each runs its
own worker; they share the work safely (per-job locks, re-checks).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import attrs

from trainreport._logging import describe_exception, get_logger
from trainreport.server._config import DEFAULT_RETENTION_INTERVAL_SECONDS
from trainreport.server._db._database import Database

__all__ = [
    "RetentionPass",
    "RetentionWorker",
    "cutoff_for",
]

#: Jobs examined per read, and points deleted per transaction.
_JOBS_PER_BATCH = 50
_POINTS_PER_BATCH = 5000


@attrs.frozen
class RetentionPass:
    """What one pass removed.

    Args:
        jobs: jobs deleted.
        points: points purged (of these jobs or of jobs deleted before).
    """

    jobs: int
    points: int


def cutoff_for(now: datetime, retain_days: float) -> str:
    """The ISO 8601 UTC time before which a finished job is removed. Never raises."""
    cutoff = now.astimezone(timezone.utc) - timedelta(days=retain_days)
    return cutoff.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RetentionWorker:
    """Deletes expired jobs and purges deleted jobs' points in the background.

    Args:
        db: the database.
        retain_days: keep finished jobs this many days after their last write;
            ``None`` keeps every job (the worker then only purges the points
            of jobs deleted through the API).
        interval_seconds: seconds between passes.
        points_per_batch: points deleted per transaction at most.
        clock: the wall clock (``datetime`` in UTC); injectable for tests.

    Raises:
        ValueError: ``retain_days`` or ``interval_seconds`` not positive.

    Thread-safety: :meth:`wake` and :meth:`stop` may be called from any thread.
    """

    def __init__(
        self,
        db: Database,
        *,
        retain_days: float | None,
        interval_seconds: float = DEFAULT_RETENTION_INTERVAL_SECONDS,
        points_per_batch: int = _POINTS_PER_BATCH,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        if retain_days is not None and not retain_days > 0:
            raise ValueError("retain_days must be positive")
        if not interval_seconds > 0 or points_per_batch < 1:
            raise ValueError("interval_seconds and points_per_batch must be positive")
        self._db = db
        self._retain_days = retain_days
        self._interval = interval_seconds
        self._points_per_batch = points_per_batch
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> RetentionPass:
        """One pass: delete every expired job, then purge queued points in batches.

        Stops early (returning what it did) when :meth:`stop` is called.

        Raises:
            StorageUnavailable: the database cannot be reached (the worker logs
                it and tries again at the next pass).
        """
        now = self._clock()
        stamp = now.astimezone(timezone.utc).isoformat(timespec="milliseconds")
        stamp = stamp.replace("+00:00", "Z")
        jobs = 0
        if self._retain_days is not None:
            cutoff = cutoff_for(now, self._retain_days)
            seen: set[str] = set()
            while not self._stopping.is_set():
                batch = [
                    job
                    for job in self._db.retention.expired_jobs(cutoff, limit=_JOBS_PER_BATCH)
                    if job not in seen
                ]
                if not batch:
                    break
                for job_id in batch:
                    seen.add(job_id)
                    jobs += self._db.jobs.delete_job(job_id, now=stamp, finished_before=cutoff)
        points = 0
        while not self._stopping.is_set():
            deleted = self._db.retention.purge_points(limit=self._points_per_batch)
            if deleted is None:
                break
            points += deleted
        return RetentionPass(jobs=jobs, points=points)

    def wake(self) -> None:
        """Run a pass soon (after an admin ``DELETE``). Never raises."""
        self._wake.set()

    def start(self) -> None:
        """Start the daemon thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="trainreport-retention", daemon=True
            )
            self._thread.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stop the thread, waiting at most ``timeout_seconds``. Idempotent; never raises."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)

    def _run(self) -> None:
        first = True
        while not self._stopping.is_set():
            if not first:
                self._wake.wait(self._interval)
            first = False
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                done = self.run_once()
            except Exception as exc:
                get_logger().warning("trainreport.retention_failed", error=describe_exception(exc))
                continue
            if done.jobs or done.points:
                get_logger().info(
                    "trainreport.retention_pass", jobs_deleted=done.jobs, points=done.points
                )
