"""FileSink: the embedded default, a run log on local disk (and, if asked, a record at close)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainreport._logging import OnceLogger, describe_exception, get_logger
from trainreport._runlog._runfile import log_and_record_paths, read_task
from trainreport._runlog._writer import LogBusyError, RunLogWriter, replace_file
from trainreport._wire._payloads import ColumnTask
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Rejected,
    Resynchronise,
    RetryLater,
    SendResult,
    Sink,
    Update,
)
from trainreport._wire._task_record import SeriesGapError
from trainreport.exceptions import ConfigError

__all__ = ["FileSink"]

_log = get_logger()
_CAPABILITIES = frozenset({CAPABILITY_SERIES_SUFFIX})


def _write_failed(path: Path, exc: Exception) -> None:
    _log.warning("trainreport.run_log_write_failed", path=str(path), error=describe_exception(exc))


class FileSink(Sink):
    """Keeps a run on local disk: an append-only run log (and, if asked, a task record at close).

    Every send appends one record to the run log (the series' new points and
    the task fields that changed) with one ``write()``, so bytes written grow
    linearly with the run and a killed process loses nothing the kernel has.
    The log is ``fsync``-ed every ``fsync_interval_seconds`` and at
    :meth:`close`, and replayed by :meth:`open` to resume. The log is the
    record: :func:`trainreport.read_task` and ``trainreport show --file``
    produce the task in the ``GET`` shape a job-status service would return
    from it, during the run, after it or after a crash. Points the log holds
    leave memory (the engine's and this sink's: ``docs/engine.md``, "Memory"),
    so neither grows with the run. Format, repairs and guarantees:
    ``docs/engine.md``, "The run log".

    With ``write_record`` the task record is also written atomically beside
    the log at :meth:`close`, in the ``GET`` shape, as JSON; that keeps every
    point in memory (the record is written from it) and costs ``close()``
    time in proportion to the run (about 1 s a few million points), so it is
    off unless asked for, or the path given ends in ``.json``. While every
    point is held the log is compacted atomically when it grows past about
    twice the snapshot it describes.

    Paths (:attr:`log_path`, :attr:`record_path`):

    - ``FileSink("run.json")``: the task record is ``run.json`` (as older
      versions wrote, which rewrote it at every send; written at close, as
      ``write_record`` defaults to true for such a path) and the log
      ``run.log``; an existing ``run.json`` with no log beside it is resumed
      from;
    - ``FileSink("run.log")``: the log is ``run.log``, the record (with
      ``write_record=True``) ``run.json``;
    - any other name is the log, and the record is ``<name>.json``.

    The log is locked (``flock``) while open: a second process opening the
    same log gets :class:`~trainreport.Rejected` until the first closes.

    Args:
        path: see above (``str`` or ``os.PathLike``); parent directories are
            created at :meth:`open`.
        job_id: recorded in the log, so ``trainreport sync`` knows where to
            upload it (default: the file name).
        task_id: recorded likewise (default: ``"train"`` at sync time).
        fsync_interval_seconds: the least time between two ``fsync`` calls
            during the run, seconds (``0``: every send; ``math.inf``: only at
            close). Between them, a power loss (not a killed process) can
            lose the last records.
        write_record: write the task record (JSON) at :meth:`close`; ``None``
            (the default): only when ``path`` ends in ``.json``.
        clock: monotonic clock for the fsync interval (seconds); injectable.

    Raises:
        ConfigError: ``fsync_interval_seconds`` is not a number >= 0.

    Attributes:
        path: the path given.
        log_path: the run log (a :class:`pathlib.Path`).
        record_path: the task record written at :meth:`close` with ``write_record``.
        write_record: whether it is written.
        bytes_written: bytes written so far by this sink (log appends,
            compactions, repairs and the task record).

    Holds no file until :meth:`open`, so an unopened sink pickles. Driven by
    one thread (the reporter thread).
    """

    local_run_log = True  # the run log is its own journal (Sink.local_run_log)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        job_id: str | None = None,
        task_id: str | None = None,
        fsync_interval_seconds: float = 10.0,
        write_record: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.write_record = self.path.suffix == ".json" if write_record is None else write_record
        self.log_path, self.record_path = log_and_record_paths(path)
        interval = fsync_interval_seconds
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval >= 0:
            raise ConfigError(["expected a number of seconds >= 0 @ $.fsync_interval_seconds"])
        self._run = {k: v for k, v in (("job_id", job_id), ("task_id", task_id)) if v}
        self.fsync_interval_seconds = float(interval)
        self._once = OnceLogger()
        self.clock = clock
        self.bytes_written = 0
        self._writer: RunLogWriter | None = None
        self._last_fsync = -math.inf

    def __repr__(self) -> str:
        return f"FileSink({str(self.path)!r})"

    def describe(self) -> str:
        """``run log /abs/path.log (read it: trainreport show --file /abs/path.log)``.

        The absolute path, without touching the file system. Never raises.
        """
        log = self.run_log_path()
        return f"run log {log} (read it: trainreport show --file {log})"

    def run_log_path(self) -> str:
        """The run log's absolute path (``Sink.run_log_path``), without touching the file system.

        Never raises.
        """
        return os.path.abspath(self.log_path)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_writer"] = None
        return state

    def read_back(self, timeout_seconds: float) -> Mapping[str, Any] | None:
        """The task the run log holds, replayed from the file (``read_task``); never raises.

        Each series is kept as the replay's columns (``read_task(path,
        columns=True)``: ``ColumnPoints``, 20 bytes a point), so a long run's
        snapshot builds point dictionaries only for the points that left
        memory. Any thread: it reads the file, never the writer's state.
        ``None`` when there is no log yet or it cannot be read.
        """
        del timeout_seconds  # a local file
        try:
            return read_task(self.log_path, columns=True)
        except Exception:  # a snapshot never fails for its read-back
            return None

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """Replay the run log (or read an older task record) to resume; create the log if new.

        A damaged log is repaired (``trainreport.run_log_damaged``): every
        record before the damage is kept.

        Returns:
            :class:`Opened` with the series-suffix capability and the stored
            task; :class:`Rejected` when another process writes the same log;
            :class:`RetryLater` when the directory or the log cannot be
            created or read. Never raises.
        """
        if self._writer is not None:
            return Opened(capabilities=_CAPABILITIES, stored_task=_stored(self._writer))
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            writer = RunLogWriter.open(self.log_path, run=self._run, record=self.record_path)
        except LogBusyError:
            return Rejected(f"another process is writing {self.log_path}")
        except OSError as exc:
            return RetryLater(f"cannot open {self.log_path}: {exc.strerror or exc}")
        self._writer = writer
        self.bytes_written += writer.bytes_written
        if not writer.state.exists:
            self._resume_from_record(writer)
        opened = Opened(capabilities=_CAPABILITIES, stored_task=_stored(writer))
        self._release(writer)
        return opened

    def _release(self, writer: RunLogWriter) -> None:
        """Let the points the log holds leave memory (unless the record is written at close).

        Once, at :meth:`open`: the state then keeps no points
        (``LogState.drop_points``), only each series' length (its base) and the
        task fields, all that the next record needs; the points are in the
        file, and a send copies none of them into memory.
        """
        if not self.write_record:
            writer.state.drop_points()

    def _resume_from_record(self, writer: RunLogWriter) -> None:
        """A log with no task yet, beside a task record (an older FileSink's): start from it."""
        try:
            text = self.record_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            _log.warning(
                "trainreport.stored_task_malformed", path=str(self.record_path), reason=str(exc)
            )
            return
        try:
            task = json.loads(text)
        except (ValueError, RecursionError):
            task = None
        if not isinstance(task, dict):
            _log.warning(
                "trainreport.stored_task_malformed",
                path=str(self.record_path),
                reason="the file is not a JSON task",
            )
            return
        before = writer.bytes_written
        try:
            writer.seed(task)
        except OSError as exc:  # the state is seeded; the next compaction writes it
            _write_failed(self.log_path, exc)
        self.bytes_written += writer.bytes_written - before

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Append ``update`` to the run log (one ``write()``), compacting it when due.

        Returns:
            :class:`Delivered` with the lengths the log now holds and the bytes
            written; :class:`Resynchronise` for a suffix beyond a series' end;
            :class:`RetryLater` when the write or ``fsync`` fails (disk full:
            the record stays pending and the file stays a valid log);
            :class:`Rejected` for an update that cannot be encoded. A failed
            compaction does not fail the send: it is logged once
            (``trainreport.run_log_write_failed``) and tried again when the
            log has doubled. Never raises.
        """
        writer = self._writer
        if writer is None:
            return Rejected("FileSink.send() before open()")
        try:
            writer.append(update)
        except SeriesGapError as exc:
            return Resynchronise(str(exc), writer.state.lengths())
        except ValueError as exc:
            return Rejected(f"cannot encode the update: {describe_exception(exc)}")
        before = writer.bytes_written
        try:
            writer.flush()
            now = self.clock()
            if now - self._last_fsync >= self.fsync_interval_seconds:
                writer.fsync()
                self._last_fsync = now
        except OSError as exc:
            self.bytes_written += writer.bytes_written - before
            return RetryLater(f"cannot write {self.log_path}: {exc.strerror or exc}")
        # A state whose points left memory is not compacted: a snapshot of it would
        # drop them from the file, the record (the log stays linear in what was sent).
        if not writer.state.bases and writer.compaction_due():
            try:
                writer.compact()
            except OSError as exc:  # the records are written; the log is only longer
                self._once.warning(
                    "compact",
                    "trainreport.run_log_write_failed",
                    path=str(self.log_path),
                    error=describe_exception(exc),
                    during="compaction",
                )
        written = writer.bytes_written - before
        self.bytes_written += written
        return Delivered(series_lengths=writer.state.lengths(), bytes_sent=written)

    def close(self) -> None:
        """``fsync`` the log, with ``write_record`` write the record, close the log. Idempotent.

        The record is written before the log's lock goes (the next holder's
        open removes what a killed write of it left).

        Never raises: a failure is logged (``trainreport.run_log_write_failed``);
        the log still holds the run.
        """
        writer, self._writer = self._writer, None
        if writer is None:
            return
        before = writer.bytes_written
        try:
            try:
                writer.fsync()
            except (OSError, ValueError) as exc:
                _write_failed(self.log_path, exc)
            # Before the log's lock goes: the next holder's open removes what a killed
            # write of the record left, and so never meets a live one's.
            self._write_record(writer)
        finally:
            try:
                writer.close()
            except OSError as exc:
                _write_failed(self.log_path, exc)
        self.bytes_written += writer.bytes_written - before

    def _write_record(self, writer: RunLogWriter) -> None:
        """With ``write_record``, write the task record atomically; never raises."""
        if not self.write_record or not writer.state.task.exists or writer.state.bases:
            return
        try:
            _, written = replace_file(
                self.record_path, (c.encode() for c in writer.state.task.encode_chunks())
            )
        except (OSError, ValueError) as exc:
            _write_failed(self.record_path, exc)
            return
        self.bytes_written += written


def _stored(writer: RunLogWriter) -> ColumnTask | None:
    """The task the log holds, as columns (copied: the log goes on), or ``None`` when none yet.

    The engine seeds from the columns; the ``GET`` shape is built only if
    someone reads ``Opened.stored_task`` as a mapping (``docs/engine.md``,
    "Resuming"). Never raises.
    """
    record = writer.state.task
    if not record.exists:
        return None
    return ColumnTask(record.stored_state(copy=True))
