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

    Used for "dropped with one log event per name" rules (DESIGN §3). Not
    thread-safe; each instance belongs to one thread (the reporter thread).
    """

    def __init__(self) -> None:
        self._seen: set[Hashable] = set()

    def warning(self, key: Hashable, event: str, **fields: Any) -> bool:
        """Log ``event`` at WARNING level unless ``key`` was logged before.

        Returns:
            ``True`` when the event was logged now. Never raises.
        """
        if key in self._seen:
            return False
        self._seen.add(key)
        _logger.warning(event, **fields)
        return True

    def info(self, key: Hashable, event: str, **fields: Any) -> bool:
        """Log ``event`` at INFO level unless ``key`` was logged before (see :meth:`warning`)."""
        if key in self._seen:
            return False
        self._seen.add(key)
        _logger.info(event, **fields)
        return True
