"""FileSink: the merged task record as a JSON file, replaced atomically on every send."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from trainreport._logging import get_logger
from trainreport._sink import (
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
from trainreport.sinks._record import SeriesGapError, TaskRecord

__all__ = ["FileSink"]

_log = get_logger()


class FileSink(Sink):
    """Keeps the task record (the ``GET`` shape) in a JSON file on local disk.

    Every send merges the update (both wire modes, exactly as the reference
    server would) and replaces the file atomically: write a temporary file in
    the same directory, ``fsync`` it, ``os.replace`` it over the old one, so a
    reader never sees a half-written file. The JSON is written series by
    series, so no single encoding call holds the GIL for long.

    An existing file is read at :meth:`open` and the run resumes from it.

    Args:
        path: the JSON file (str or ``os.PathLike``); parent directories are
            created at :meth:`open`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._record: TaskRecord | None = None

    def __repr__(self) -> str:
        return f"FileSink({str(self.path)!r})"

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """Read the stored task from the file (a missing file is a new task).

        Returns:
            :class:`Opened` with the series-suffix capability; :class:`RetryLater`
            when the directory cannot be created or the file cannot be read.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            stored: dict[str, Any] | None = None
            if self.path.exists():
                try:
                    stored = json.loads(self.path.read_text(encoding="utf-8"))
                except ValueError:
                    _log.warning(
                        "trainreport.stored_task_malformed",
                        path=str(self.path),
                        reason="the file is not JSON",
                    )
                    stored = {}
        except OSError as exc:
            return RetryLater(f"cannot read {self.path}: {exc.strerror or exc}")
        self._record = TaskRecord(stored if isinstance(stored, dict) else None)
        return Opened(
            capabilities=frozenset({CAPABILITY_SERIES_SUFFIX}), stored_task=self._record.to_task()
        )

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Merge ``update`` and replace the file atomically.

        Returns:
            :class:`Delivered` with the lengths now held; :class:`RetryLater` on
            an I/O error (disk full, permissions); never raises.
        """
        record = self._record
        if record is None:
            return Rejected("FileSink.send() before open()")
        try:
            lengths = record.apply(update)
        except SeriesGapError as exc:
            return Resynchronise(str(exc), record.lengths())
        try:
            written = self._write(record)
        except OSError as exc:
            return RetryLater(f"cannot write {self.path}: {exc.strerror or exc}")
        return Delivered(series_lengths=lengths, bytes_sent=written)

    def _write(self, record: TaskRecord) -> int:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        written = 0
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for chunk in record.encode_chunks():
                    written += f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return written
