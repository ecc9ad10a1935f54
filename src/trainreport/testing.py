"""Helpers for testing code that uses trainreport: a fake clock and a log capture.

Public and stable: use them in your own tests.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from trainreport._logging import LOGGER_NAME

__all__ = ["FakeClock", "capture_events"]


class FakeClock:
    """A monotonic clock that only moves when told to; pass it as ``Reporter(clock=...)``.

    Args:
        start: the initial reading, in seconds.

    Thread-safe. Never raises.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, float]:
        return {"now": self._now}

    def __setstate__(self, state: dict[str, float]) -> None:
        self._now = state["now"]
        self._lock = threading.Lock()

    def __call__(self) -> float:
        """Return the current reading, in seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` (must be >= 0) and return the new reading.

        Raises:
            ValueError: when ``seconds`` is negative (a monotonic clock never goes back).
        """
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        with self._lock:
            self._now += seconds
            return self._now


class _ListHandler(logging.Handler):
    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__(level=logging.DEBUG)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        event = dict(getattr(record, "trainreport", {"event": record.getMessage()}))
        event["log_level"] = record.levelname.lower()
        self.events.append(event)


@contextlib.contextmanager
def capture_events(level: int = logging.DEBUG) -> Iterator[list[dict[str, Any]]]:
    """Capture trainreport's log events as a list of event dicts.

    Each dict has ``"event"`` (e.g. ``"trainreport.send_failed"``), ``"log_level"``
    and the event's fields. Events from every thread are captured.

    Args:
        level: the lowest level captured (a ``logging`` level).

    Yields:
        The list that events are appended to while the block runs.
    """
    logger = logging.getLogger(LOGGER_NAME)
    events: list[dict[str, Any]] = []
    handler = _ListHandler(events)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(min(level, old_level) if old_level else level)
    try:
        yield events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
