"""The journal's files: where a journal lives, who owns it, and what a dead process left.

A journal is a run log (:mod:`trainreport._runlog._format`) kept by a reporter
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
without one (``trainreport.journal_busy``). The journal file's own lock (the
run log's ``flock``, held by its writer) is asked too, because a cleanup may
delete ``<task>.lock`` alone: a ``<task>.log`` whose lock is held is a live
process's journal, and the claimant runs without one, as when ``<task>.lock``
is held; the live journal takes a new ``<task>.lock`` at its next write. A
``<task>.log`` found unlocked by the process that takes the lock was left by a
process that died (both locks die with their holder): it is moved into
``<task>.left/`` for recovery, after the temporary files of a compaction the
kill cut short (``.<task>.log.<8 hex digits>.tmp``) are removed.

The run log's RUN record names the job and task and says ``"journal": "1"``;
``"offsets": "local"`` while the process has not read the stored task (its
series indices then count from this process's first point, not from the
service's), ``"absolute"`` once it has. It also says whose the journal is
(:class:`JournalOwner`): ``journal_seq``, its place among the task's journals
on this node (one more than any journal already in the directory: left-overs
are recovered in that order, never by a clock), the attempt
(``attempt_number``, ``attempt_started_at``), ``journal_started_at`` (when it
was claimed, by this host's wall clock), and, appended as a new RUN
record when they change (a reader keeps the last one), ``writer_generation``
(the latest writer generation its content was sent under: the process's own,
or a recovering process's) and ``superseded: "1"`` once a later attempt or
writer took the task. A journal written before these keys existed has none of
them and is treated as before (``docs/engine.md``, "Recovery").

Threads: the reporter thread claims a journal and makes every call that writes
or checks its files (:meth:`Journal.append`, ``mark_writer``, ``sync``,
``reset``, ``compaction_due``, ``ensure_file``, ``close``; ``mark_writer`` too, since the
open's answer is settled there, ``_engine/_worker.py``'s ``Worker._react``).
Two other threads touch it:

* the journal destination's sender thread, running a recovery request
  (``_engine/_journal_feed.py``'s ``run_recovery``), calls
  :func:`mark_sent_under` on a left-over and :meth:`Journal.delivered_left_over`
  (which removes the file and its entry in ``left_over``) while that request
  is in flight: the engine core hands out one recovery request at a time, and
  the reporter thread changes ``left_over`` only when it settles one, so the
  two never change the list at once (a read of it elsewhere takes a copy,
  ``list(left_over)``);
* any thread reads the plain attributes (``Reporter.stats()``, ``close()``'s
  report: ``failed``, ``error``, ``fsynced_at``, ``restarts``,
  ``bytes_written``, ``closed``, ``removed``), each one read, never torn.

``Journal``'s write lock guards the file and what describes it: the writer and
its descriptor, the lock file's descriptor, ``failed`` and ``error``, the
``fsync`` bookkeeping and ``restarts``. Every method that writes holds it for
its whole call (``append``, ``mark_writer``, ``sync``, ``reset``,
``close``), ``ensure_file`` included, which they call first (it may start a new
file), so a call from another thread never interleaves with the reporter
thread's writes; uncontended today, it costs one acquire a record. The module's
functions keep no state: :func:`mark_sent_under` is guarded by the left-over's
own run log lock (a second writer is refused), and ``JournalPaths`` only names
and moves files.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from trainreport._logging import describe_exception, get_logger
from trainreport._runlog._format import HEADER, HEADER_CRC_SPAN, MAGIC, RecordKind
from trainreport._runlog._replay import DamageKind, replay
from trainreport._runlog._state import LogState
from trainreport._runlog._writer import (
    LogBusyError,
    RunLogWriter,
    log_temporaries_removed,
    names_file,
    open_locked,
)
from trainreport._wire._attempt import AttemptIdentity, current_attempt, follow
from trainreport._wire._protocol import ID_PATTERN
from trainreport._wire._sink_interface import Update
from trainreport._wire._stamps import utc_now_iso

__all__ = [
    "JOURNAL_MIN_COMPACT_BYTES",
    "JOURNAL_RUN_KEY",
    "LOCAL_OFFSETS",
    "Journal",
    "JournalOwner",
    "JournalPaths",
    "is_journal",
    "mark_sent_under",
]

#: The RUN record key that marks a run log as a journal (value ``"1"``).
JOURNAL_RUN_KEY = "journal"
#: The RUN record's ``offsets`` while the journal's indices are this process's own.
LOCAL_OFFSETS = "local"
_ABSOLUTE_OFFSETS = "absolute"
#: A journal is compacted only past this size (bytes; and past twice what it holds):
#: trimmed at every delivered send, it would otherwise be rewritten, with two ``fsync``
#: calls, every 64 KiB of appends. Its memory holds no points whatever the file's size.
JOURNAL_MIN_COMPACT_BYTES = 8 * 2**20
#: ``trainreport.journal_deleted`` is logged for this many restarts; later ones are counted only.
_LOGGED_RESTARTS = 3
_log = get_logger()


def is_journal(run: Mapping[str, str]) -> bool:
    """True when a run log's RUN fields say it is a journal. Never raises."""
    return run.get(JOURNAL_RUN_KEY) == "1"


def _int_or_none(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


@attrs.frozen
class JournalOwner:
    """Whose a journal is, from its RUN fields (``None``/``False``: not recorded).

    Attributes:
        seq: its place among the task's journals on its node (1 for the first).
        attempt_number: the attempt number of the process that recorded it.
        attempt_started_at: that process's start time (seconds since the Unix
            epoch, as text: for inspection, and for :meth:`attempt`; never
            orders journals).
        journal_started_at: when the journal was claimed (ISO 8601 UTC, this
            host's wall clock): for a journal that never opened its service,
            a write at the service after it was another writer's
            (``trainreport._runlog._plan.stale_reason``; never orders journals).
        writer_generation: the latest writer generation its content was sent under.
        superseded: a later attempt or writer took the task from its writer.
    """

    seq: int | None = None
    attempt_number: int | None = None
    attempt_started_at: str | None = None
    journal_started_at: str | None = None
    writer_generation: int | None = None
    superseded: bool = False

    @classmethod
    def of(cls, run: Mapping[str, str]) -> JournalOwner:
        """Read the owner from a journal's RUN fields. Never raises."""
        return cls(
            seq=_int_or_none(run.get("journal_seq")),
            attempt_number=_int_or_none(run.get("attempt_number")),
            attempt_started_at=run.get("attempt_started_at"),
            journal_started_at=run.get("journal_started_at"),
            writer_generation=_int_or_none(run.get("writer_generation")),
            superseded=run.get("superseded") == "1",
        )

    def attempt(self) -> AttemptIdentity:
        """The attempt identity its process claimed the task with (what was recorded).

        Never raises: an unreadable start time is ``None``.
        """
        try:
            started_at = None if self.attempt_started_at is None else float(self.attempt_started_at)
        except ValueError:
            started_at = None
        if started_at is not None and not (0 <= started_at < math.inf):
            started_at = None  # NaN, infinite or negative: no order to keep
        return AttemptIdentity(number=self.attempt_number, started_at=started_at)

    def describe(self) -> str:
        """``attempt 0, writer generation 3`` (what is known), for a message. Never raises."""
        parts = []
        if self.attempt_number is not None:
            parts.append(f"attempt {self.attempt_number}")
        elif self.attempt_started_at is not None:
            parts.append(f"the attempt started at {self.attempt_started_at}")
        if self.writer_generation is not None:
            parts.append(f"writer generation {self.writer_generation}")
        return ", ".join(parts) or "an unknown writer"


def _first_run(path: Path) -> dict[str, str]:
    """The fields of a run log's first record when it is a RUN record; ``{}`` otherwise.

    Reads only that record (a journal's RUN record comes first). Never raises.
    """
    import json  # noqa: PLC0415 - only here

    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC) + HEADER.size)
            if len(head) < len(MAGIC) + HEADER.size or not head.startswith(MAGIC):
                return {}
            _, kind, _, length, body_crc, header_crc = HEADER.unpack_from(head, len(MAGIC))
            if zlib.crc32(head[len(MAGIC) : len(MAGIC) + HEADER_CRC_SPAN]) != header_crc:
                return {}
            if kind != RecordKind.RUN or length > 1 << 16:
                return {}
            body = f.read(length)
        if zlib.crc32(body) != body_crc:
            return {}
        run = json.loads(body)
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(run, dict):
        return {}
    return {str(k): v for k, v in run.items() if isinstance(v, str)}


def _seq_of(path: Path) -> int | None:
    return _int_or_none(_first_run(path).get("journal_seq"))


def mark_sent_under(path: Path, generation: int) -> bool:
    """Record in the journal at ``path`` that its content is being sent as ``generation``.

    Called before a left-over journal is recovered (by the next process or by
    ``trainreport sync``), so a kill during the recovery leaves a journal whose
    ``writer_generation`` is the one that wrote the service's last points: the
    next recovery still finds it the task's last writer. Appends one RUN
    record (a torn tail is cut first, as at any open of a run log).

    Returns:
        True when written; False when the file could not be written (another
        process writes it, or it is read-only). Never raises.
    """
    if not is_journal(_first_run(path)):
        return False  # not a journal (a task record, a run log): never changed
    try:
        damage = replay(path.read_bytes()).damage
    except OSError:
        return False
    if damage is not None and damage.kind is not DamageKind.TORN_TAIL:
        return False  # a damaged journal is left exactly as it is
    try:
        writer = RunLogWriter.open(path)
    except (OSError, LogBusyError, ValueError):
        return False
    try:
        if not is_journal(writer.run):
            return False
        writer.run["writer_generation"] = str(generation)
        writer.append_run()
        writer.fsync()
    except (OSError, ValueError):
        return False
    finally:
        with contextlib.suppress(OSError):
            writer.close()
    return True


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
        """Journals dead processes left, oldest first. Never raises (``[]`` when unreadable).

        Ordered by what they contain, never by a clock: each journal's
        ``journal_seq`` (its place among the task's journals, given when it
        was claimed); journals of earlier versions, which have none, come
        first, by name (the wall time their process set them aside).
        """
        try:
            found = [p for p in self.left_dir.iterdir() if p.suffix == ".log" and p.is_file()]
        except OSError:
            return []
        keyed = [(_seq_of(p), p.name, p) for p in found]
        keyed.sort(key=lambda k: (k[0] is not None, k[0] or 0, k[1]))
        return [p for _, _, p in keyed]

    def next_seq(self) -> int:
        """One more than the ``journal_seq`` of every journal of the task here. Never raises."""
        seqs = [_seq_of(p) for p in self.left_over()]
        if self.current.exists():
            seqs.append(_seq_of(self.current))
        return 1 + max((q for q in seqs if q is not None), default=0)

    def set_aside(self, path: Path) -> Path:
        """Move ``path`` into the left-over directory (a unique name; order is by content).

        Raises:
            OSError: the move failed.
        """
        self.left_dir.mkdir(exist_ok=True)
        stem = f"{_seq_of(path) or 0:012d}-{os.getpid()}"
        target = self.left_dir / f"{stem}.log"
        n = 1
        while target.exists():
            n += 1
            target = self.left_dir / f"{stem}-{n}.log"
        os.replace(path, target)
        return target


def _take_lock(path: Path) -> int | None:
    """Open ``path`` and take its exclusive lock; ``None`` when another process holds it.

    The lock file is removed at a clean close; a process that opened it just
    before may then hold the lock of a file no longer there, so the lock
    counts only when the path still names the locked file
    (:func:`~trainreport._runlog._writer.open_locked`, the run log's rule).

    Raises:
        OSError: the file cannot be created or opened.
    """
    try:
        return open_locked(path, os.O_RDWR)
    except LogBusyError:
        return None


def _lock_left_journal(path: Path) -> int | None:
    """Take the run log lock of the journal at ``path``, to move it; ``None`` when there is none.

    The writer of a journal holds its file's lock (``flock``) as long as it
    lives, whatever became of the task's lock file: a ``<task>.log`` whose
    lock is held is a live process's journal, never a dead one's, even when a
    cleanup deleted ``<task>.lock`` and so let another process take a new one.

    Returns:
        the descriptor holding the lock (close it once the file is moved),
        or ``None`` when no file is at ``path``.

    Raises:
        LogBusyError: a live process writes the journal at ``path``.
        OSError: the file cannot be opened.
    """
    try:
        return open_locked(path, os.O_RDONLY, create=False)
    except FileNotFoundError:
        return None
    except LogBusyError as exc:
        raise LogBusyError(0, "another live process writes this task's journal") from exc


def _reopen(paths: JournalPaths, old: RunLogWriter, lock: int | None) -> tuple[RunLogWriter, int]:
    """A new journal at ``paths`` holding ``old``'s state; its lock taken again when it went.

    For a journal whose file (or lock file) was deleted or replaced under it.
    ``old`` is closed (its file is no longer there) and ``lock`` released when
    a new lock replaces it.

    Returns:
        ``(the new writer, the lock's descriptor)``.

    Raises:
        OSError: the new journal cannot be created, locked or written
            (``LogBusyError``: another process claimed the task meanwhile, or
            writes a ``<task>.log`` there).
    """
    paths.job_dir.mkdir(parents=True, exist_ok=True)
    taken: int | None = None
    if lock is None or not names_file(lock, paths.lock):
        taken = _take_lock(paths.lock)
        if taken is None:
            raise LogBusyError(
                0, "another process claimed this task's journal after it was deleted"
            )
    try:
        # Not ours (ours is gone): a dead process's is set aside as claim() does; one
        # whose lock is held is a live process's journal, never moved (LogBusyError).
        dead_fd = _lock_left_journal(paths.current)
        if dead_fd is not None:
            try:
                paths.set_aside(paths.current)
            finally:
                os.close(dead_fd)
        writer = RunLogWriter.open(paths.current, run=old.run)
        try:
            writer.min_compact_bytes = old.min_compact_bytes
            # The old file's bytes, read through its descriptor (its path is gone): every
            # point it held, which the state (keeping none) could not write.
            writer.copy_of(old)
        except BaseException:
            writer.close()
            raise
    except BaseException:
        # The caller keeps the lock it had: a descriptor closed here and kept there
        # would later close whatever file was given its number.
        if taken is not None:
            os.close(taken)
        raise
    if taken is not None:
        if lock is not None:
            os.close(lock)
        lock = taken
    assert lock is not None  # taken above whenever there was none
    with contextlib.suppress(OSError, ValueError):
        old.close()  # the unlinked file's descriptor
    return writer, lock


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
        restarts: times its file was found deleted and a new one started, or its
            lock file and the lock taken again (:meth:`ensure_file`).

    Threads: see the module's docstring. The reporter thread calls every
    method but :meth:`delivered_left_over` (the sender thread's, during a
    recovery request); any thread may read the attributes. The write lock
    guards the file and its state, held by every method that writes.
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
        self.restarts = 0
        self._lock_fd: int | None = lock_fd
        self._last_fsync = -math.inf
        self._earlier_bytes = 0  # written by the writers a restart replaced
        #: Held by every write (append, mark_writer, sync, reset, close) and
        #: the restart it may begin (ensure_file): guards the writer, both
        #: descriptors, failed/error, the fsync bookkeeping and restarts.
        self._write_lock = threading.Lock()
        #: An append since the last ``fsync`` (:meth:`sync` has something to do).
        self._unsynced = False

    @property
    def owner(self) -> JournalOwner:
        """Whose this journal is, as its RUN fields say."""
        return JournalOwner.of({} if self._writer is None else self._writer.run)

    @classmethod
    def claim(
        cls,
        directory: str | os.PathLike[str],
        job_id: str,
        task_id: str,
        *,
        fsync_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], str] = utc_now_iso,
        refused: Callable[[str, str], None] | None = None,
    ) -> Journal | None:
        """Claim the journal of ``job_id``/``task_id`` under ``directory`` for this process.

        Creates the directories, takes the task's lock, asks the lock of a
        ``<task>.log`` there (held: a live process writes it, its lock file
        was deleted; this one runs without a journal), removes the temporary
        files of a compaction a kill cut short, moves a journal a dead
        process left into the left-over directory, orders this process's
        attempt after every left-over's (``_wire._attempt.follow``: its claim at
        the service is not refused as older when its clock was stepped back),
        and opens a new journal (its RUN record: the ids, ``journal``,
        ``offsets: local``, the attempt).

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

        def busy(reason: str) -> None:
            _log.warning(
                "trainreport.journal_busy",
                path=str(paths.current),
                reason=f"{reason}; this one runs without a journal",
            )
            refuse("busy", reason)

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
                busy("another live process keeps this task's journal")
                return None
            try:
                dead_fd = _lock_left_journal(paths.current)
            except LogBusyError:
                os.close(lock_fd)
                lock_fd = None
                busy(
                    "another live process still writes this task's journal (its lock file "
                    "was deleted: a cleanup of journal_dir?)"
                )
                return None
            # Only the holder of both locks can be compacting the journal: what a kill
            # left between a compaction's write and its rename goes, before anything
            # needs room on the disk.
            log_temporaries_removed(paths.current)
            seq = paths.next_seq()
            if dead_fd is not None:
                try:
                    moved = paths.set_aside(paths.current)
                finally:
                    os.close(dead_fd)
                _log.info("trainreport.journal_left_over", path=str(moved))
            for left in paths.left_over():  # dead attempts: this one comes after them
                follow(job_id, task_id, JournalOwner.of(_first_run(left)).attempt())
            attempt = current_attempt(job_id, task_id)
            run = {
                "job_id": job_id,
                "task_id": task_id,
                JOURNAL_RUN_KEY: "1",
                "offsets": LOCAL_OFFSETS,
                "journal_seq": str(seq),
                "journal_started_at": wall_clock(),
            }
            if attempt.number is not None:
                run["attempt_number"] = str(attempt.number)
            if attempt.started_at is not None:
                run["attempt_started_at"] = str(attempt.started_at)
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
        writer.state.drop_points()  # the points are in the file and the store
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
    def state(self) -> LogState:
        """What the journal holds, without its points: each series' length, the task fields.

        The points are in the file, and those no destination acknowledged in
        the store too, from which a compaction takes them (:meth:`reset`); the
        state keeps none (``LogState.drop_points``), so a lagging destination
        costs their memory once.
        """
        return LogState() if self._writer is None else self._writer.state

    @property
    def bytes_written(self) -> int:
        """Bytes written to the journal's files by this process, rewrites and restarts
        included (0 when unavailable)."""
        return self._earlier_bytes + (0 if self._writer is None else self._writer.bytes_written)

    def ensure_file(self) -> bool:
        """Check that the journal's paths still name its open files; start new ones if not.

        A cleanup job deleting ``<journal_dir>/<job id>`` mid-run would leave
        the journal appending to a file no longer there, lost at the next
        kill. Then the lock is taken again and a new journal holds what this
        one holds (every point not known delivered, the task fields), logged
        (``trainreport.journal_deleted``). When only the lock file went, the
        lock is taken again and the journal stays in its own file
        (:meth:`_take_lock_again`). Two ``stat`` calls a file, per write.
        Called by the writing methods, with the write lock held.

        Returns:
            True when the journal can be written. Never raises: a new journal
            that cannot be started stops it (``trainreport.journal_write_failed``).
        """
        if self.failed:
            return False
        paths, old, lock = self.paths, self.writer, self._lock_fd
        file_ours = old.fd is None or names_file(old.fd, paths.current)
        if file_ours and (lock is None or names_file(lock, paths.lock)):
            return True
        if file_ours:  # only the lock file went: the journal stays in its own file
            self._take_lock_again()
            return True
        try:
            self._writer, self._lock_fd = _reopen(paths, old, lock)
        except (OSError, ValueError) as exc:
            self._fail(exc)
            return False
        self._earlier_bytes += old.bytes_written
        self.restarts += 1
        self._fsynced(self.clock())  # the new file was fsync-ed
        if self.restarts <= _LOGGED_RESTARTS:
            _log.warning(
                "trainreport.journal_deleted",
                path=str(paths.current),
                restarts=self.restarts,
                bytes=self.writer.size,
                reason="the journal file was deleted or replaced while this process wrote it "
                "(a cleanup of journal_dir?); a new one, a copy of it, holds every point "
                "not yet acknowledged",
                hint="keep cleanups of journal_dir away from jobs that are running; after "
                f"{_LOGGED_RESTARTS}, restarts are counted in Reporter.stats().journal only",
            )
        return True

    def _take_lock_again(self) -> None:
        """Take the task's lock again after its file was deleted (``<task>.log`` was not).

        Meanwhile the journal's file is still locked by its writer, and a
        claim (or another process's restart) asks that lock before it takes a
        ``<task>.log`` for a dead process's: nobody moves the journal or claims
        the task. Refused (another process's claim holds the new lock while it
        asks: it will find the log held and run without a journal), the
        journal goes on in its file and tries again at its next write. Logged
        as a restart (``trainreport.journal_deleted``, the first 3 times).
        Never raises.
        """
        try:
            taken = _take_lock(self.paths.lock)
        except OSError:
            return
        if taken is None:
            return
        released, self._lock_fd = self._lock_fd, taken
        if released is not None:
            os.close(released)
        self.restarts += 1
        if self.restarts <= _LOGGED_RESTARTS:
            _log.warning(
                "trainreport.journal_deleted",
                path=str(self.paths.lock),
                restarts=self.restarts,
                reason="the journal's lock file was deleted or replaced while this process "
                "wrote the journal (a cleanup of journal_dir?); the lock is taken again and "
                "the journal goes on in its own file",
                hint="keep cleanups of journal_dir away from jobs that are running; after "
                f"{_LOGGED_RESTARTS}, restarts are counted in Reporter.stats().journal only",
            )

    def append(self, update: Update) -> bool:
        """Append ``update`` (series suffixes at this journal's lengths) with one ``write()``.

        ``fsync`` when ``fsync_seconds`` have passed since the last one.

        Returns:
            True when written. Never raises: a failure is logged once
            (``trainreport.journal_write_failed``) and the journal stops.
        """
        with self._write_lock:
            if self.failed or not self.ensure_file():
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

    def mark_writer(self, *, generation: int | None = None, superseded: bool = False) -> bool:
        """Record whose the journal is: the writer generation it is sent under, or superseded.

        Appends one RUN record (with one ``write()`` and an ``fsync``: it is
        written once per open, before any send under that generation) when
        something changed. Called on the reporter thread, right after it
        settles an open's answer (``Worker._react``) and when the destination
        was superseded; it holds the write lock like every write, so it is
        safe from another thread too.

        Returns:
            True when the journal now says so. Never raises (see :meth:`append`).
        """
        with self._write_lock:
            if self.failed or self.closed or not self.ensure_file():
                return False
            run = self.writer.run
            changed = False
            if generation is not None and run.get("writer_generation") != str(generation):
                run["writer_generation"], changed = str(generation), True
            if superseded and run.get("superseded") != "1":
                run["superseded"], changed = "1", True
            if not changed:
                return True
            try:
                self.writer.append_run()
                self.writer.fsync()
                self._fsynced(self.clock())
            except (OSError, ValueError) as exc:
                self._fail(exc)
                return False
            return True

    def sync(self) -> None:
        """``fsync`` now when an append since the last ``fsync`` is not on disk yet.

        For ``close()``, whose records may be the process's last. Never raises
        (see :meth:`append`).
        """
        with self._write_lock:
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

        The journal's rewrite when the stored task was read, and its
        compaction (:meth:`compaction_due`): ``state`` holds the points no
        destination acknowledged, taken from the store; once written, it keeps
        none of them (``LogState.drop_points``).

        Args:
            state: what the journal must now hold (with its points).
            absolute: its indices are the service's (the stored task was read).

        Returns:
            True when written. Never raises (see :meth:`append`).
        """
        with self._write_lock:
            if self.failed or not self.ensure_file():
                return False
            writer = self.writer
            writer.state = state
            writer.run["offsets"] = _ABSOLUTE_OFFSETS if absolute else LOCAL_OFFSETS
            try:
                writer.compact()
            except (OSError, ValueError) as exc:
                self._fail(exc)
                return False
            finally:
                state.drop_points()
            self._fsynced(self.clock())  # compact() fsyncs the new file
            return True

    def _fsynced(self, now: float) -> None:
        self._last_fsync, self._unsynced = now, False
        self.fsynced_at = self.wall_clock()

    def compaction_due(self, points: int) -> bool:
        """Whether the file has grown past 8 MiB and twice a snapshot of ``points`` points.

        Args:
            points: the points a snapshot would hold now (those no destination
                acknowledged; the state keeps none to count).

        Then the caller writes one (:meth:`reset`) in place of its next record.
        Never raises.
        """
        with self._write_lock:
            return not self.failed and self.writer.compaction_due(points)

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
        """A left-over journal was delivered: remove it. Never raises.

        Called on the journal destination's sender thread during a recovery
        request (``run_recovery``), while the reporter thread leaves
        ``left_over`` alone until it settles that request; it touches only
        ``left_over`` and the left-over's files, never the journal's own (no
        write lock).
        """
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
        with self._write_lock:
            self._close(delivered=delivered)

    def _close(self, *, delivered: bool) -> None:
        remove = delivered and not self.failed
        if not remove:
            self.ensure_file()
        writer = self._writer
        # Only our own file is removed: after a deletion another process may have claimed the path.
        fd = None if writer is None else writer.fd
        ours = fd is not None and names_file(fd, self.paths.current)
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
        if remove and ours:
            with contextlib.suppress(OSError):
                self.paths.current.unlink()
        self.closed, self.removed = True, remove
        self._release(remove_files=remove and not self.left_over)

    def _release(self, *, remove_files: bool) -> None:
        """Give the task up: close the journal's file and the lock's, as a process's end does.

        Both are the claim (a claimant asks the journal file's lock too, since a
        cleanup may have deleted the lock file), so both are released here;
        tests model a killed process with ``_release(remove_files=False)``.
        With ``remove_files``, the lock file goes first (while still held: see
        :func:`_take_lock`), then the job's directory when empty. Never raises.
        """
        if self._writer is not None:
            with contextlib.suppress(OSError, ValueError):
                self._writer.close()  # closed already when close() called this
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        if remove_files and names_file(fd, self.paths.lock):
            with contextlib.suppress(OSError):
                self.paths.lock.unlink()  # before releasing: see _take_lock
        os.close(fd)
        if remove_files:
            with contextlib.suppress(OSError):
                self.paths.job_dir.rmdir()  # only when empty
