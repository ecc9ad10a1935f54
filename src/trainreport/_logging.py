"""trainreport's logger: structlog bound to the standard library logger ``trainreport``.

structlog is never configured globally: the bound logger carries its own
processors, and every event ends as one ``logging.LogRecord`` on the
``trainreport`` logger, so ``logging.getLogger("trainreport")`` controls it like
any other library's. The record's message is the event name followed by its
fields as ``key=value`` pairs; the event dict itself is attached to the record
as ``record.trainreport`` for handlers and tests (``trainreport.testing``).

Event names are namespaced (``trainreport.send_failed``); fields are flat;
secrets (tokens) are never passed as fields.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, MutableMapping
from typing import Any

import structlog

__all__ = ["LOGGER_NAME", "OnceLogger", "describe_exception", "get_logger"]

LOGGER_NAME = "trainreport"
_stdlib_logger = logging.getLogger(LOGGER_NAME)


def _to_log_record(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    event = event_dict.get("event", "")
    fields = " ".join(f"{k}={v!r}" for k, v in event_dict.items() if k != "event")
    message = f"{event} {fields}" if fields else str(event)
    return (message,), {"extra": {"trainreport": dict(event_dict)}}


_logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
    _stdlib_logger,
    processors=[structlog.stdlib.filter_by_level, _to_log_record],
    wrapper_class=structlog.stdlib.BoundLogger,
)


def get_logger() -> structlog.stdlib.BoundLogger:
    """Return trainreport's structlog logger (bound to the stdlib ``trainreport`` logger).

    Never raises. Thread-safe.
    """
    return _logger


def describe_exception(exc: BaseException, limit: int = 300) -> str:
    """``"Type: message"`` for a log field, even when the exception's ``__str__`` raises.

    Never raises.
    """
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = f"{type(exc).__name__}: <unprintable>"
    return text[:limit]


class OnceLogger:
    """Logs an event at most once per key, for problems that would repeat every step.

    Used for "dropped with one log event per name" rules. The deduplication
    itself is bounded: keys are grouped by kind (a tuple key's kind is all but
    its last element, e.g. ``(reason, report)`` for ``(reason, report, name)``;
    any other key is its own kind), and past ``max_keys_per_kind`` distinct
    keys of one kind nothing more is kept or logged for it: one
    ``trainreport.log_limit_reached`` line says so, and :meth:`summarize` logs
    one ``trainreport.log_suppressed`` line per event with the count left out.
    Not thread-safe; each instance belongs to one thread (the reporter thread).

    Args:
        max_keys_per_kind: distinct keys of one kind logged (and remembered).
    """

    def __init__(self, max_keys_per_kind: int = 100) -> None:
        self._seen: set[Hashable] = set()
        self._limit = max_keys_per_kind
        self._per_kind: dict[Hashable, int] = {}
        self._suppressed: dict[str, int] = {}

    def _first(self, key: Hashable, event: str) -> bool:
        if key in self._seen:
            return False
        kind = key[:-1] if isinstance(key, tuple) and len(key) > 1 else key
        count = self._per_kind.get(kind, 0)
        if count >= self._limit:
            suppressed = self._suppressed.get(event, 0)
            if suppressed == 0:
                _logger.warning(
                    "trainreport.log_limit_reached", event_name=event, limit=self._limit
                )
            self._suppressed[event] = suppressed + 1
            return False
        self._per_kind[kind] = count + 1
        self._seen.add(key)
        return True

    def warning(self, key: Hashable, event: str, **fields: Any) -> bool:
        """Log ``event`` at WARNING level unless ``key`` was logged before.

        Returns:
            ``True`` when the event was logged now. Never raises.
        """
        if not self._first(key, event):
            return False
        _logger.warning(event, **fields)
        return True

    def info(self, key: Hashable, event: str, **fields: Any) -> bool:
        """Log ``event`` at INFO level unless ``key`` was logged before (see :meth:`warning`)."""
        if not self._first(key, event):
            return False
        _logger.info(event, **fields)
        return True

    def summarize(self) -> None:
        """Log one ``trainreport.log_suppressed`` line per event whose keys passed the limit."""
        for event, count in self._suppressed.items():
            _logger.warning("trainreport.log_suppressed", event_name=event, suppressed=count)
        self._suppressed.clear()
