"""The journal's files: where a journal lives, who owns it, and what a dead process left.

A journal is a run log (:mod:`trainreport.sinks._runlog`) kept by a reporter
in front of a destination that is not itself a local file, so a killed
process loses at most ``journal_interval_seconds`` of points
(``docs/engine.md``, "The journal in front of a service"). Per job and task,
under ``journal_dir``::

    <journal_dir>/<job id>/<task id>.lock        held (flock) by the live process
    <journal_dir>/<job id>/<task id>.log         that process's journal
    <journal_dir>/<job id>/<task id>.left/N.log  journals left by dead processes

Each name ends in its own suffix (``.lock``, ``.log``, ``.left``), so no task
id's files can be mistaken for another's. The lock is the claim: only its
holder appends, moves or removes any of the task's files, so two live
processes never share a journal; a second process on the same task runs
without one (``trainreport.journal_busy``). A ``<task>.log`` found by the
process that takes the lock was left by a process that died (the lock dies
with its holder): it is moved into ``<task>.left/`` for recovery.

The run log's RUN record names the job and task and says ``"journal": "1"``;
``"offsets": "local"`` while the process has not read the stored task (its
series indices then count from this process's first point, not from the
service's), ``"absolute"`` once it has.

Not thread-safe: one thread (the reporter thread) drives a journal.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from trainreport._logging import describe_exception, get_logger
from trainreport._protocol import ID_PATTERN
from trainreport._sink import Update
from trainreport._stamps import utc_now_iso
from trainreport.sinks._runlog_state import LogState
from trainreport.sinks._runlog_writer import LogBusyError, RunLogWriter

_flock: Callable[[int, int], None] | None
try:
    import fcntl

    _flock, _LOCK_FLAGS = fcntl.flock, fcntl.LOCK_EX | fcntl.LOCK_NB
except ImportError:  # pragma: no cover - Windows: no advisory lock
    _flock, _LOCK_FLAGS = None, 0

__all__ = [
    "JOURNAL_MIN_COMPACT_BYTES",
    "JOURNAL_RUN_KEY",
    "LOCAL_OFFSETS",
    "Journal",
    "JournalPaths",
    "is_journal",
]

#: The RUN record key that marks a run log as a journal (value ``"1"``).
JOURNAL_RUN_KEY = "journal"
#: The RUN record's ``offsets`` while the journal's indices are this process's own.
LOCAL_OFFSETS = "local"
_ABSOLUTE_OFFSETS = "absolute"
#: A journal is compacted only past this size (bytes; and past twice what it holds):
#: trimmed at every delivered send, it would otherwise be rewritten, with two ``fsync``
#: calls, every 64 KiB of appends. Its memory is trimmed at once whatever the file's size.
JOURNAL_MIN_COMPACT_BYTES = 8 * 2**20
_log = get_logger()


def is_journal(run: Mapping[str, str]) -> bool:
    """True when a run log's RUN fields say it is a journal. Never raises."""
    return run.get(JOURNAL_RUN_KEY) == "1"


class JournalPaths:
    """The files of one job and task's journals under a directory.

    Args:
        directory: ``journal_dir`` (``str`` or ``os.PathLike``).
        job_id, task_id: the destination's ids (the protocol's id rule:
            ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``).

    Raises:
        ValueError: an id breaks the rule (it could name a file elsewhere).
    """

    def __init__(self, directory: str | os.PathLike[str], job_id: str, task_id: str) -> None:
        for what, value in (("job id", job_id), ("task id", task_id)):
            # The protocol's id rule (docs/protocol.md): each id is a safe file name.
            if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
                raise ValueError(f"the {what} {value!r} is not a valid id for a journal file")
        self.job_id, self.task_id = job_id, task_id
        self.job_dir = Path(directory) / job_id
        self.lock = self.job_dir / f"{task_id}.lock"
        self.current = self.job_dir / f"{task_id}.log"
        self.left_dir = self.job_dir / f"{task_id}.left"

    def left_over(self) -> list[Path]:
        """Journals dead processes left, oldest first. Never raises (``[]`` when unreadable)."""
        try:
            return sorted(
                (p for p in self.left_dir.iterdir() if p.suffix == ".log" and p.is_file()),
                key=lambda p: p.name,
            )
        except OSError:
            return []

    def set_aside(self, path: Path) -> Path:
        """Move ``path`` into the left-over directory under a name that sorts after the others.

        Raises:
            OSError: the move failed.
        """
        self.left_dir.mkdir(exist_ok=True)
        target = self.left_dir / f"{time.time_ns():020d}-{os.getpid()}.log"
        os.replace(path, target)
        return target


def _take_lock(path: Path) -> int | None:
    """Open ``path`` and take its exclusive lock; ``None`` when another process holds it.

    The lock file is removed at a clean close; a process that opened it just
    before may then hold the lock of a file no longer there, so the lock
    counts only when the path still names the locked file.

    Raises:
        OSError: the file cannot be created or opened.
    """
    for _ in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if _flock is not None:
                _flock(fd, _LOCK_FLAGS)
            held, named = os.fstat(fd), os.stat(path)
        except (BlockingIOError, FileNotFoundError) as exc:
            os.close(fd)
            if isinstance(exc, BlockingIOError):
                return None
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
            return fd
        os.close(fd)
    return None


class Journal:
    """One process's journal of one job and task; use :meth:`claim`.

    Attributes:
        paths: the task's journal files.
        writer: the run log being appended to (see :attr:`unavailable`).
        unavailable: this process's own journal file could not be opened (a
            full disk): the journal holds the lock only to deliver what dead
            processes left (:attr:`left_over`); it records nothing (``failed``).
        left_over: journals of dead processes still to deliver, oldest first.
        fsync_seconds: least time between two ``fsync`` calls, seconds.
        clock: monotonic clock for the fsync interval (seconds).
        wall_clock: ISO 8601 UTC text of now, for :attr:`fsynced_at`.
        failed: a write failed; the journal appends nothing more (logged once).
        error: why it failed, or ``None``.
        fsynced_at: when (ISO 8601 UTC) it was last ``fsync``-ed, or ``None``.
        closed: :meth:`close` ran; ``removed`` says whether the file went with it.
    """

    def __init__(
        self,
        paths: JournalPaths,
        lock_fd: int,
        writer: RunLogWriter | None,
        *,
        fsync_seconds: float,
        clock: Callable[[], float],
        wall_clock: Callable[[], str] = utc_now_iso,
    ) -> None:
        self.paths = paths
        self._writer = writer
        self.unavailable = writer is None
        self.left_over = paths.left_over()
        self.fsync_seconds = fsync_seconds
        self.clock = clock
        self.wall_clock = wall_clock
        self.failed = writer is None
        self.error: str | None = None
        self.fsynced_at: str | None = None
        self.closed = False
        self.removed = False
        self._lock_fd: int | None = lock_fd
        self._last_fsync = -math.inf
        #: An append since the last ``fsync`` (:meth:`sync` has something to do).
        self._unsynced = False

    @classmethod
    def claim(
        cls,
        directory: str | os.PathLike[str],
        job_id: str,
        task_id: str,
        *,
        fsync_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        refused: Callable[[str, str], None] | None = None,
    ) -> Journal | None:
        """Claim the journal of ``job_id``/``task_id`` under ``directory`` for this process.

        Creates the directories, takes the task's lock, moves a journal a dead
        process left into the left-over directory, and opens a new journal
        (its RUN record: the ids, ``journal``, ``offsets: local``).

        Returns:
            the journal, or ``None`` after one log event: ``trainreport.journal_busy``
            (another live process holds the task's journal) or
            ``trainreport.journal_unavailable`` (an invalid id, a directory
            that cannot be created or written, a file that cannot be opened),
            after which ``refused`` (when given) is called with ``"busy"`` or
            ``"unavailable"`` and the reason. Never raises.
        """

        def refuse(state: str, reason: str) -> None:
            if refused is not None:
                refused(state, reason)

        try:
            paths = JournalPaths(directory, job_id, task_id)
        except ValueError as exc:
            _log.warning("trainreport.journal_unavailable", reason=str(exc)[:300])
            refuse("unavailable", str(exc)[:300])
            return None
        lock_fd: int | None = None
        try:
            paths.job_dir.mkdir(parents=True, exist_ok=True)
            lock_fd = _take_lock(paths.lock)
            if lock_fd is None:
                reason = "another live process keeps this task's journal"
                _log.warning(
                    "trainreport.journal_busy",
                    path=str(paths.current),
                    reason=f"{reason}; this one runs without a journal",
                )
                refuse("busy", reason)
                return None
            if paths.current.exists():
                moved = paths.set_aside(paths.current)
                _log.info("trainreport.journal_left_over", path=str(moved))
            run = {
                "job_id": job_id,
                "task_id": task_id,
                JOURNAL_RUN_KEY: "1",
                "offsets": LOCAL_OFFSETS,
            }
            writer = RunLogWriter.open(paths.current, run=run)
        except (OSError, LogBusyError) as exc:
            reason = describe_exception(exc)
            keep = lock_fd is not None and bool(paths.left_over())
            _log.warning(
                "trainreport.journal_unavailable",
                path=str(paths.current),
                reason=reason,
                **({"left_over": "kept for recovery at the first open"} if keep else {}),
            )
            refuse("unavailable", reason)
            if lock_fd is None:
                return None
            if not keep:
                os.close(lock_fd)
                return None
            # Delivering a left-over needs no room on the disk (a send, then an unlink):
            # keep the lock and deliver them, recording nothing of this process's own.
            journal = cls(paths, lock_fd, None, fsync_seconds=fsync_seconds, clock=clock)
            journal.error = reason
            return journal
        writer.min_compact_bytes = JOURNAL_MIN_COMPACT_BYTES
        return cls(paths, lock_fd, writer, fsync_seconds=fsync_seconds, clock=clock)

    # --- writing ----------------------------------------------------------------------

    @property
    def writer(self) -> RunLogWriter:
        """The run log being appended to.

        Raises:
            RuntimeError: the journal is :attr:`unavailable` (it has none).
        """
        if self._writer is None:
            raise RuntimeError(f"the journal {self.paths.current} is unavailable")
        return self._writer

    @property
    def bytes_written(self) -> int:
        """Bytes written to the journal's file, rewrites included (0 when unavailable)."""
        return 0 if self._writer is None else self._writer.bytes_written

    @property
    def state(self) -> LogState:
        """What the journal holds (series trimmed to what is not known delivered)."""
        return LogState() if self._writer is None else self._writer.state

    def append(self, update: Update) -> bool:
        """Append ``update`` (series suffixes at this journal's lengths) with one ``write()``.

        ``fsync`` when ``fsync_seconds`` have passed since the last one.

        Returns:
            True when written. Never raises: a failure is logged once
            (``trainreport.journal_write_failed``) and the journal stops.
        """
        if self.failed:
            return False
        try:
            self.writer.append(update)
            self.writer.flush()
            self._unsynced = True
            now = self.clock()
            if now - self._last_fsync >= self.fsync_seconds:
                self.writer.fsync()
                self._fsynced(now)
        except (OSError, ValueError) as exc:
            self._fail(exc)
            return False
        return True

    def sync(self) -> None:
        """``fsync`` now when an append since the last ``fsync`` is not on disk yet.

        For ``close()``, whose records may be the process's last. Never raises
        (see :meth:`append`).
        """
        if self.failed or not self._unsynced:
            return
        try:
            self.writer.fsync()
        except (OSError, ValueError) as exc:
            self._fail(exc)
        else:
            self._fsynced(self.clock())

    def reset(self, state: LogState, *, absolute: bool) -> bool:
        """Replace the journal with ``state`` (one SNAPSHOT, written atomically).

        Args:
            state: what the journal must now hold.
            absolute: its indices are the service's (the stored task was read).

        Returns:
            True when written. Never raises (see :meth:`append`).
        """
        if self.failed:
            return False
        writer = self.writer
        writer.state = state
        writer.run["offsets"] = _ABSOLUTE_OFFSETS if absolute else LOCAL_OFFSETS
        try:
            writer.compact()
        except (OSError, ValueError) as exc:
            self._fail(exc)
            return False
        self._fsynced(self.clock())  # compact() fsyncs the new file
        return True

    def _fsynced(self, now: float) -> None:
        self._last_fsync, self._unsynced = now, False
        self.fsynced_at = self.wall_clock()

    def trim(self, keep_from: Mapping[str, int]) -> None:
        """Forget, per series, the points before ``keep_from[name]`` (delivered to the service).

        The file is rewritten (compacted) only when it has grown past about
        twice what it would hold. Never raises.
        """
        if self.failed:
            return
        writer = self.writer
        writer.state.trim(keep_from)
        if writer.compaction_due():
            try:
                writer.compact()
            except (OSError, ValueError) as exc:
                self._fail(exc)
            else:
                self._fsynced(self.clock())

    def _fail(self, exc: BaseException) -> None:
        self.failed = True
        self.error = describe_exception(exc)
        _log.warning(
            "trainreport.journal_write_failed",
            path=str(self.paths.current),
            error=describe_exception(exc),
            reason="the run goes on without a journal",
        )

    # --- left-overs and closing -------------------------------------------------------

    def delivered_left_over(self, path: Path) -> None:
        """A left-over journal was delivered: remove it. Never raises."""
        with contextlib.suppress(ValueError):
            self.left_over.remove(path)
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            self.paths.left_dir.rmdir()  # only when empty

    def close(self, *, delivered: bool) -> None:
        """``fsync`` and close; remove the journal when everything in it was delivered.

        Args:
            delivered: the destination holds everything this process recorded.
                Left-over journals not yet delivered stay, whatever this says.

        Never raises (failures are logged).
        """
        writer = self._writer
        remove = delivered and not self.failed
        try:
            if writer is not None and not remove and not self.failed:
                writer.fsync()
                self._fsynced(self.clock())
        except (OSError, ValueError) as exc:
            self._fail(exc)
        finally:
            if writer is not None:
                with contextlib.suppress(OSError):
                    writer.close()
        if remove:
            with contextlib.suppress(OSError):
                self.paths.current.unlink()
        self.closed, self.removed = True, remove
        self._release(remove_files=remove and not self.left_over)

    def _release(self, *, remove_files: bool) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        if remove_files:
            with contextlib.suppress(OSError):
                self.paths.lock.unlink()  # before releasing: see _take_lock
        os.close(fd)
        if remove_files:
            with contextlib.suppress(OSError):
                self.paths.job_dir.rmdir()  # only when empty
