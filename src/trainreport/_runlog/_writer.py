"""RunLogWriter: one run log on disk, appended to, repaired at open and compacted atomically.

The writer owns the file, an exclusive advisory lock on it (``flock``, where
the platform has it, so two processes never append to one log) and the state
the file describes (:class:`~trainreport._runlog._state.LogState`). The invariant a
test checks after any sequence of calls: replaying the file gives the state
the writer holds, once everything appended has been flushed.

Costs, by design (``docs/engine.md``, "The run log"):

* :meth:`RunLogWriter.append` encodes one record (a few hundred bytes of JSON
  for the changed fields, then the columns' bytes) into memory;
* :meth:`RunLogWriter.flush` hands everything appended to the kernel with one
  ``write()`` (no ``fsync``): a killed process loses nothing the kernel has;
* :meth:`RunLogWriter.fsync` makes it durable against power loss;
* :meth:`RunLogWriter.compact` rewrites the log as one snapshot (temporary
  file, ``fsync``, ``os.replace``, ``fsync`` of the directory), when
  :meth:`RunLogWriter.compaction_due` says the log has grown past about twice
  the snapshot it would compact to; so bytes written stay linear in the run.

Not thread-safe: one thread at a time drives a writer. A ``FileSink``'s writer
is driven by the thread that performs its destination's requests (the
reporter thread, or the destination's sender thread, one request at a time);
a journal's by the calls that hold the journal's write lock
(:mod:`trainreport._runlog._journal`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from trainreport._logging import get_logger
from trainreport._runlog._format import (
    MAGIC,
    Piece,
    append_record,
    encode_run,
    encode_snapshot,
    snapshot_bytes,
)
from trainreport._runlog._replay import DamageKind, Replayed, replay
from trainreport._runlog._state import LogState
from trainreport._wire._sink_interface import Update

_flock: Callable[[int, int], None] | None
try:
    import fcntl

    _flock, _LOCK_FLAGS = fcntl.flock, fcntl.LOCK_EX | fcntl.LOCK_NB
except ImportError:  # pragma: no cover - Windows: no advisory lock
    _flock, _LOCK_FLAGS = None, 0

__all__ = [
    "MIN_COMPACT_BYTES",
    "WRITE_BATCH_BYTES",
    "LogBusyError",
    "RunLogWriter",
    "log_temporaries_removed",
    "names_file",
    "open_locked",
    "remove_temporaries",
    "replace_file",
    "temporary_path",
]

#: A log is never compacted below this size (bytes): small logs are cheap to replay.
MIN_COMPACT_BYTES = 64 * 1024
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | getattr(os, "O_BINARY", 0)
_log = get_logger()


class LogBusyError(OSError):
    """Another process holds the run log's lock (it is writing the same log)."""


def _lock(fd: int) -> None:
    """Take the exclusive advisory lock on ``fd`` without waiting.

    Raises:
        LogBusyError: another open file description holds it.
    """
    if _flock is None:  # pragma: no cover - Windows
        return
    try:
        _flock(fd, _LOCK_FLAGS)
    except BlockingIOError as exc:
        raise LogBusyError(exc.errno, "another process is writing this run log") from exc


#: Tries :func:`open_locked` makes when the path keeps naming another file than it locked.
_LOCK_TRIES = 5


def names_file(fd: int, path: str | os.PathLike[str]) -> bool:
    """True when ``path`` still names the file open as ``fd`` (not deleted, not replaced).

    A path replaced (a compaction's ``os.replace``) or unlinked (a cleanup job)
    names another file, or none, while ``fd`` keeps the old one. Never raises.
    """
    try:
        held, named = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def open_locked(path: str | os.PathLike[str], flags: int, *, create: bool = True) -> int:
    """Open (creating) ``path`` with ``flags`` and take its exclusive lock without waiting.

    The lock counts only when ``path`` still names the locked file once it is
    held: a writer compacting the log replaces the file and then closes (so
    unlocks) the old one, and a process that opened the old file just before
    would otherwise hold the lock of a file no longer there, and write into
    it for nothing. It opens the path again then (a few times).

    The lock is ``flock``'s: it belongs to an open file description, so a
    second ``open()`` of the same file is refused in the same process too,
    and the kernel releases it when its holder dies, however it dies.

    Args:
        path: the file.
        flags: ``os.open`` flags (``O_CREAT`` is added when ``create``).
        create: create the file when it does not exist; ``False``: only ask
            whether someone holds the lock of a file that is there.

    Returns:
        the descriptor, locked.

    Raises:
        LogBusyError: another open file description holds the lock (or the
            path kept being replaced under every try).
        FileNotFoundError: ``create`` is false and there is no such file.
        OSError: the file cannot be created or opened.
    """
    for _ in range(_LOCK_TRIES):
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o666)
        try:
            _lock(fd)
        except BaseException:
            os.close(fd)
            raise
        if names_file(fd, path):
            return fd
        os.close(fd)
    raise LogBusyError(0, f"{path} was replaced under every attempt to lock it")


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` (a regular file may take it in several calls)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def fsync_directory(directory: Path) -> None:
    """``fsync`` a directory so a rename in it survives power loss (a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: The random part of a temporary file's name: this many bytes, as lower-case hex digits.
_TEMPORARY_TOKEN_BYTES = 4


def temporary_path(path: Path) -> Path:
    """A new temporary file's path beside ``path``: ``.<name>.<8 hex digits>.tmp``.

    The one rule for the name, which :func:`remove_temporaries` recognises.
    Never raises.
    """
    return path.with_name(f".{path.name}.{secrets.token_hex(_TEMPORARY_TOKEN_BYTES)}.tmp")


#: What may stand between a log's name and a temporary's random part: nothing (the
#: log's own, a compaction's), or its damaged copy's suffix (``_set_aside_path``:
#: ``.damaged``, ``.damaged.2``, ...).
_OWN_SUFFIXES = r"(?:damaged(?:\.[1-9][0-9]*)?\.)?"


def _temporary_pattern(path: Path, record: Path | None) -> re.Pattern[str]:
    """The names of the temporaries of ``path``, its damaged copies and ``record``."""
    names = re.escape(f".{path.name}.") + _OWN_SUFFIXES
    if record is not None:
        names = f"(?:{names}|{re.escape(f'.{record.name}.')})"
    return re.compile(names + f"[0-9a-f]{{{2 * _TEMPORARY_TOKEN_BYTES}}}" + r"\.tmp")


def remove_temporaries(path: Path, *, record: Path | None = None) -> tuple[int, int]:
    """Remove the temporary files a process killed while replacing ``path``'s files left.

    Call it only holding ``path``'s lock (:meth:`RunLogWriter.open`, a
    journal's claim): its holder is the only one who can be replacing the
    log, its ``.damaged`` copy (written at the open that repairs it) or its
    task record (``FileSink`` writes it at close, before it lets the lock
    go), so such a temporary is a dead process's, left between the write and
    the rename of :func:`replace_file` (up to the log's size each time). Only
    names of exactly :func:`temporary_path`'s shape for exactly ``path``,
    ``path.damaged`` (or ``.damaged.N``) and ``record`` are removed; and a
    temporary whose lock is held (:func:`replace_file` takes it on each, so
    a replace under way by a writer whose log was deleted and made again
    under it) is kept.

    Args:
        path: the run log.
        record: the task record written beside it (``FileSink``), or ``None``.

    Returns:
        ``(files removed, bytes freed)``. Never raises: a file that cannot be
        removed is left.
    """
    if record is not None and record.parent != path.parent:
        record = None  # FileSink's is always beside the log
    pattern = _temporary_pattern(path, record)
    prefixes = (f".{path.name}.",) if record is None else (f".{path.name}.", f".{record.name}.")
    files = freed = 0
    try:
        with os.scandir(path.parent) as entries:
            names = [
                e.name for e in entries if e.name.startswith(prefixes) and pattern.fullmatch(e.name)
            ]
    except OSError:
        return 0, 0
    for name in names:
        temporary = path.parent / name
        try:
            fd = os.open(temporary, os.O_RDONLY)
        except OSError:
            continue
        try:
            _lock(fd)
            size = os.fstat(fd).st_size
            os.unlink(temporary)
        except OSError:  # LogBusyError: a live compaction's
            continue
        finally:
            os.close(fd)
        files, freed = files + 1, freed + size
    return files, freed


#: :func:`replace_file` joins shorter pieces into writes of at least this many bytes (4 MiB).
WRITE_BATCH_BYTES = 4 << 20


def replace_file(
    path: Path, pieces: Iterable[Piece], *, keep_open: bool = False
) -> tuple[int | None, int]:
    """Write ``pieces`` to a temporary file beside ``path``, ``fsync`` it, move it over ``path``.

    A reader sees the old file or the new one, never a mix; after a power
    loss, one of the two (the directory is ``fsync``-ed too). A kill between
    the write and the rename leaves the temporary file
    (:func:`temporary_path`); the next holder of a run log's lock removes its
    log's, its damaged copy's and its task record's (:func:`remove_temporaries`),
    never one whose lock is held: the temporary is locked while it is written.

    Args:
        path: the file to replace (or create).
        pieces: the content, written in batches of at least
            :data:`WRITE_BATCH_BYTES` (a snapshot is hundreds of column
            views: one ``write()`` each would wait for the interpreter after
            each, behind a busy training thread); a piece that long alone is
            written from its own buffer, never copied into a batch.
        keep_open: return the new file's descriptor (opened for appending),
            holding the run log lock taken on it before it became visible (a
            compacted log goes on under it); otherwise the lock goes with the
            descriptor, closed once the file is in place.

    Returns:
        ``(descriptor or None, bytes written)``.

    Raises:
        OSError: nothing was replaced (the temporary file is removed).
    """
    tmp = temporary_path(path)
    fd = os.open(tmp, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o666)
    written = 0
    try:
        _lock(fd)  # a live replace's temporary: remove_temporaries keeps it
        batch: list[Piece] = []
        held = 0
        for piece in pieces:
            if len(piece) >= WRITE_BATCH_BYTES:  # long enough alone: from its own buffer
                if batch:
                    _write_all(fd, b"".join(batch))
                    written += held
                    batch, held = [], 0
                _write_all(fd, piece)
                written += len(piece)
                continue
            batch.append(piece)
            held += len(piece)
            if held >= WRITE_BATCH_BYTES:
                _write_all(fd, b"".join(batch))
                written += held
                batch, held = [], 0
        if batch:
            _write_all(fd, b"".join(batch))
            written += held
        os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)
    if keep_open:
        return fd, written
    os.close(fd)
    return None, written


def log_temporaries_removed(path: Path, *, record: Path | None = None) -> int:
    """:func:`remove_temporaries` of ``path`` (and ``record``), logged once when it removed any.

    ``trainreport.run_log_temporaries_removed`` (INFO): the files and bytes
    freed; it happens only after a kill during a compaction, a damaged copy's
    write or the task record's, and says where the disk went. Call it only
    holding ``path``'s lock.

    Returns:
        the files removed. Never raises.
    """
    files, freed = remove_temporaries(path, record=record)
    if files:
        _log.info(
            "trainreport.run_log_temporaries_removed",
            path=str(path),
            files=files,
            bytes_freed=freed,
            reason=(
                "left by a process killed while it replaced this log (a compaction), "
                "its damaged copy or its task record"
            ),
        )
    return files


def _set_aside_path(path: Path) -> Path:
    candidate = path.with_name(path.name + ".damaged")
    n = 2
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.damaged.{n}")
        n += 1
    return candidate


class RunLogWriter:
    """Appends records to one run log; use :meth:`open`.

    Attributes:
        path: the log file.
        state: the task the log describes (what replaying it gives).
        opened: what replaying the file found at :meth:`open` (its damage, if any).
        set_aside: where a damaged log was copied at :meth:`open`, or ``None``.
        run: the log's RUN fields (``job_id``, ``task_id``), or empty.
        size: bytes in the file (what has been flushed).
        bytes_written: every byte written since :meth:`open` (appends,
            compactions, repairs).
        compactions: how many times the log was rewritten as a snapshot.
        min_compact_bytes: the log is never compacted below this size (bytes;
            default :data:`MIN_COMPACT_BYTES`). A journal, trimmed at every
            delivered send, raises it so that it is not rewritten (and
            ``fsync``-ed) every few sends.
    """

    def __init__(self, path: Path, fd: int, opened: Replayed, run: Mapping[str, str]) -> None:
        self.path = path
        self.state = opened.state
        self.opened = opened
        self.set_aside: Path | None = None
        self.run = dict(run)
        self.size = opened.valid_bytes
        self.bytes_written = 0
        self.compactions = 0
        self._fd: int | None = fd
        self._pending: list[bytes | bytearray] = []
        self._pending_bytes = 0
        self._torn = False
        self.min_compact_bytes = MIN_COMPACT_BYTES
        self._compact_at = MIN_COMPACT_BYTES

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        run: Mapping[str, str] | None = None,
        record: Path | None = None,
    ) -> RunLogWriter:
        """Open (or create) the log at ``path``, lock it, replay it and repair any damage.

        Repairs: a torn tail (a write the last process did not finish) is cut
        off; any other damage (a bad checksum, a newer format version, a file
        that is not a log) keeps every intact record (a damaged record or file
        header is skipped; a newer version stops the reading), copies
        the whole file to ``<path>.damaged`` (never losing what a newer
        trainreport or a person could still read) and rewrites the log as a
        snapshot of what was read. Each repair logs ``trainreport.run_log_damaged``.
        The temporary files of replaces a kill cut short (a compaction's, a
        damaged copy's, the task record's) are removed first
        (:func:`remove_temporaries`; ``trainreport.run_log_temporaries_removed``,
        once, with the bytes freed).

        Args:
            path: the log file; its directory must exist.
            run: ``job_id`` and ``task_id`` to record when the log has none.
            record: the task record its holder writes beside it
                (``FileSink(write_record=True)``), whose killed writes'
                temporaries are removed too; ``None``: none.

        Returns:
            the writer, holding the lock.

        Raises:
            LogBusyError: another process holds the log's lock.
            OSError: the file cannot be created, read or repaired.
        """
        path = Path(path)
        fd = open_locked(path, _OPEN_FLAGS)
        log_temporaries_removed(path, record=record)  # the lock held: nobody else replaces them
        writer: RunLogWriter | None = None
        try:
            data = _read_all(fd)
            opened = replay(data)
            writer = cls(path, fd, opened, opened.run or dict(run or {}))
            writer._repair(data)
            if writer.run and not opened.run and not writer.compactions:
                writer._add_pending(encode_run(writer.run))
                writer.flush()
        except BaseException:
            if writer is None:
                os.close(fd)
            else:
                writer._abandon()
            raise
        return writer

    def _repair(self, data: bytes) -> None:
        damage = self.opened.damage
        if damage is None:
            if not data:
                self._rewrite_in_place(MAGIC)
            return
        if damage.kind is DamageKind.TORN_TAIL:
            if self.opened.valid_bytes < len(MAGIC):
                self._rewrite_in_place(MAGIC)
            else:
                self._truncate(self.opened.valid_bytes)
        else:
            self.set_aside = _set_aside_path(self.path)
            replace_file(self.set_aside, [data])
            self.compact()
        _log.warning(
            "trainreport.run_log_damaged",
            path=str(self.path),
            damage=damage.kind.name.lower(),
            detail=damage.describe(),
            kept_records=self.opened.records,
            salvaged_records=self.opened.salvaged,
            lost=self.opened.lost(),
            set_aside=None if self.set_aside is None else str(self.set_aside),
        )

    def _rewrite_in_place(self, data: bytes) -> None:
        self._truncate(0)
        self._add_pending(data)
        self.flush()

    def _truncate(self, size: int) -> None:
        assert self._fd is not None
        os.ftruncate(self._fd, size)
        self.size = size

    # --- writing ----------------------------------------------------------------------

    @property
    def fd(self) -> int | None:
        """The open file's descriptor (to check what the path names), or ``None`` once closed."""
        return self._fd

    @property
    def pending_bytes(self) -> int:
        """Bytes appended but not yet flushed."""
        return self._pending_bytes

    def append(self, update: Update) -> int:
        """Apply ``update`` to :attr:`state` and encode it as one record, in memory.

        The record keeps the series as given (offset and points) and only the
        status and ``status_details`` keys that changed
        (:func:`~trainreport._runlog._format.append_record`).

        Returns:
            the record's size in bytes (written by the next :meth:`flush`).

        Raises:
            SeriesGapError: a suffix starts beyond its series' end; nothing changed.
            ValueError: the update cannot be encoded (a detail that is not
                strict JSON, unencodable text, columns of different lengths);
                nothing changed.
        """
        return self._add_pending(append_record(self.state, update))

    def append_run(self) -> int:
        """Append a RUN record holding :attr:`run` as it is now (the last one read wins).

        Returns:
            bytes appended (written at the next :meth:`flush`).
        """
        self._require_open()
        return self._add_pending(encode_run(self.run))

    def _add_pending(self, record: bytes | bytearray) -> int:
        """Keep one ``record`` (whole, in one buffer) for the next :meth:`flush`; its bytes.

        A record is the one copy of the columns it holds
        (``_format._record``): no view of a column outlives its encoding (a
        view kept would forbid the columns to grow or shrink).
        """
        self._pending.append(record)
        self._pending_bytes += len(record)
        return len(record)

    def flush(self) -> int:
        """Write everything appended with one ``write()`` (no ``fsync``).

        Returns:
            bytes written.

        Raises:
            OSError: nothing was added to the file (a partial write is cut
                back off); the records stay pending for the next flush.
        """
        fd = self._require_open()
        if self._torn:
            os.ftruncate(fd, self.size)
            self._torn = False
        if not self._pending:
            return 0
        pending = self._pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)  # one record: no copy
        try:
            _write_all(fd, data)
        except OSError:
            try:
                os.ftruncate(fd, self.size)
            except OSError:
                self._torn = True  # cut it back before the next write
            raise
        self._pending.clear()
        self._pending_bytes = 0
        self.size += len(data)
        self.bytes_written += len(data)
        return len(data)

    def fsync(self) -> None:
        """:meth:`flush`, then ``fsync`` the file (durable against power loss).

        Raises:
            OSError: from the flush or the ``fsync``.
        """
        self.flush()
        os.fsync(self._require_open())

    def compaction_due(self, points: int | None = None) -> bool:
        """True when the log (flushed and pending) is over twice the snapshot it would become.

        Never below :attr:`min_compact_bytes`. The snapshot's size is computed
        only when the log has grown past the last threshold.

        Args:
            points: the points the snapshot would hold, when not the state's
                (a journal's state keeps none; its snapshot holds what no
                destination acknowledged).
        """
        size = self.size + self._pending_bytes
        if size <= max(self._compact_at, self.min_compact_bytes):
            return False
        held = snapshot_bytes(self.state, points) if self.state.exists else 0
        snapshot = self._header_bytes() + held
        if size > 2 * snapshot:
            return True
        self._compact_at = max(2 * snapshot, self.min_compact_bytes)
        return False

    def _header_bytes(self) -> int:
        return len(MAGIC) + (len(encode_run(self.run)) if self.run else 0)

    def compact(self, keep_from: Mapping[str, int] | None = None) -> int:
        """Rewrite the log atomically as one snapshot of :attr:`state` (pending records included).

        Args:
            keep_from: per series, the first index to keep (a journal drops
                what its service acknowledged); :attr:`state` is trimmed too,
                even when the rewrite then fails (the file holds more, never less).

        Returns:
            bytes written.

        Raises:
            OSError: the old log is left as it was, and :meth:`compaction_due`
                says no until the log has doubled again.
        """
        self._require_open()
        if keep_from:
            self.state.trim(keep_from)
        pieces: list[Piece] = [MAGIC]
        if self.run:
            pieces.append(encode_run(self.run))
        if self.state.exists:
            pieces += encode_snapshot(self.state)
        return self._replace(pieces)

    def contents(self) -> bytes:
        """The whole log as this writer has it: the file's bytes, then what is pending.

        Read through the open descriptor, so it is the file this writer
        appends to even after its path was deleted or replaced.

        Raises:
            OSError: the file cannot be read.
            ValueError: the writer is closed.
        """
        data = _read_all(self._require_open())
        return data[: self.size] + b"".join(self._pending)

    def copy_of(self, other: RunLogWriter) -> int:
        """Rewrite this log atomically as a byte copy of ``other``'s (:meth:`contents`).

        For a journal whose file was deleted under it, when its state keeps
        no points: the copy holds every point the old file held. :attr:`state`
        and :attr:`run` become ``other``'s.

        Returns:
            bytes written.

        Raises:
            OSError: the old log is left as it was (see :meth:`compact`);
                reading ``other`` failed.
            ValueError: either writer is closed.
        """
        self._require_open()
        data = other.contents()
        written = self._replace([data])
        self.state, self.run = other.state, dict(other.run)
        return written

    def _replace(self, pieces: list[Piece]) -> int:
        """Replace the file with ``pieces`` atomically, keeping the lock; bytes written."""
        fd = self._require_open()
        try:
            new_fd, written = replace_file(self.path, pieces, keep_open=True)
        except OSError:
            # Not due again before the log has doubled (a platform that cannot
            # replace an open file must not pay for a rewrite at every send).
            self._compact_at = max(2 * (self.size + self._pending_bytes), self.min_compact_bytes)
            raise
        assert new_fd is not None
        self._fd = new_fd
        os.close(fd)  # releases the old file's lock; the new one is held already
        self._pending.clear()
        self._pending_bytes = 0
        self._torn = False
        self.size = written
        self.bytes_written += written
        self.compactions += 1
        self._compact_at = max(2 * written, self.min_compact_bytes)
        return written

    def seed(self, task: Mapping[str, Any]) -> int:
        """Replace :attr:`state` with ``task`` (the ``GET`` shape) and :meth:`compact`.

        For a log that holds no task yet, resuming from an older task record
        (``FileSink``'s JSON file). Returns bytes written.

        Raises:
            OSError: from the compaction (the state is replaced anyway).
        """
        self.state = LogState.from_task(task)
        return self.compact()

    def close(self) -> None:
        """Flush, then close the file (releasing its lock). Idempotent.

        Raises:
            OSError: the flush failed (the file is closed anyway).
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._pending or self._torn:
                self._fd = fd
                try:
                    self.flush()
                finally:
                    self._fd = None
        finally:
            os.close(fd)

    def _abandon(self) -> None:
        """Close the file without flushing (a failed :meth:`open`)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _require_open(self) -> int:
        if self._fd is None:
            raise ValueError("the run log is closed")
        return self._fd
