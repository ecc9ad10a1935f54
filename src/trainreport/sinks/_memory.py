"""MemorySink: keeps every request and the merged task in memory (tests, notebooks)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from trainreport._wire._payloads import encode_patch_body, encode_suffix_body
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Resynchronise,
    SendResult,
    Sink,
    Update,
)
from trainreport._wire._task_record import SeriesGapError, TaskRecord

__all__ = ["MemorySink"]


class MemorySink(Sink):
    """A sink that holds the task in memory, merged exactly as the reference server would.

    Args:
        stored_task: a task to pre-load, in the ``GET`` shape
            (``{"status": ..., "status_details": {...}}``), to test resuming;
            ``None`` for a task that does not exist yet.
        series_suffix: speak the series-suffix extension (``docs/protocol.md``)
            instead of the baseline full-state ``PATCH``.

    Attributes:
        requests: every request body received, decoded from the JSON that was
            really encoded (so the wire format is exercised), in order.
        opens: how many times :meth:`open` was called.

    Thread-safe for reading ``requests`` and ``task`` while a reporter sends.
    Its reporter's store keeps every point (``keeps_every_point``), so
    ``Reporter.snapshot()`` equals ``task`` however long the run.
    """

    keeps_every_point = True

    def __init__(
        self, stored_task: Mapping[str, Any] | None = None, *, series_suffix: bool = False
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        self.opens = 0
        self.series_suffix = series_suffix
        self._record = TaskRecord(stored_task)
        self._cancel = False
        self._sequence = 0
        self._lock: threading.Lock | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None
        return state

    def describe(self) -> str:
        """``memory (MemorySink.task)``: the record stays in this process. Never raises."""
        return "memory (MemorySink.task)"

    def _locked(self) -> threading.Lock:
        if self._lock is None:
            self._lock = threading.Lock()
        return self._lock

    @property
    def task(self) -> dict[str, Any] | None:
        """The merged task record in the ``GET`` shape, or ``None`` before the first update."""
        with self._locked():
            return self._record.to_task()

    def request_cancel(self) -> None:
        """Simulate the job being cancelled: later responses carry ``cancel_requested``."""
        self._cancel = True

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """Return the capabilities and the stored task. Never fails."""
        with self._locked():
            self.opens += 1
            caps = frozenset({CAPABILITY_SERIES_SUFFIX}) if self.series_suffix else frozenset()
            return Opened(
                capabilities=caps,
                writer_generation=self.opens if self.series_suffix else None,
                stored_task=self._record.to_task(),
            )

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Encode ``update`` as the real wire body, record it, and merge it. Never raises."""
        with self._locked():
            self._sequence += 1
            if self.series_suffix:
                body = encode_suffix_body(
                    update, writer_generation=self.opens, sequence=self._sequence
                )
            else:
                body = encode_patch_body(update)
            self.requests.append(json.loads(body))
            try:
                lengths = self._record.apply(update)
            except SeriesGapError as exc:
                return Resynchronise(str(exc), self._record.lengths())
            return Delivered(
                series_lengths=lengths if self.series_suffix else None,
                cancel_requested=self._cancel,
                bytes_sent=len(body),
            )
