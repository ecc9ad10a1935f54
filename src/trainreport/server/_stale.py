"""Dead runs: when a running task's silence means its process may have died.

A reporter sends at least every ``heartbeat_seconds`` (60 s by default) while
it runs, even when nothing changed, and every accepted write sets the task's
``updated_at`` (the server's clock). So a task whose status is ``running`` and
whose last write is older than ``stale_after_seconds`` (180 s by default: three
missed heartbeats) has most likely lost its process: killed, out of memory, a
lost node. The reference server says so (``docs/protocol.md``, "Stale
tasks"): ``GET`` of the task and the job's task summaries carry a ``stale``
object, the page and ``trainreport show`` print its message in place of an
ETA, and ``/metrics`` counts such tasks. This module is the one rule all of
them use.

Pure: the time comes in as ``now``.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from trainreport._wire._protocol import TaskStatus

__all__ = [
    "STALE_KEY",
    "describe_silence",
    "is_stale",
    "parse_server_time",
    "staleness",
]

#: The key of the stale object in a ``GET`` task and in a task summary (outside
#: ``status_details``, so a plain job API, which never sends it, reads as "not known stale").
STALE_KEY = "stale"


def parse_server_time(text: str) -> float:
    """Seconds since the Unix epoch of a server timestamp (``2026-11-29T16:03:39.120Z``).

    Raises:
        ValueError: not an ISO 8601 timestamp.
    """
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def is_stale(status: str, updated_at: float, *, now: float, stale_after_seconds: float) -> bool:
    """Whether a task is stale: ``running``, and no write for more than ``stale_after_seconds``.

    Args:
        status: the stored status.
        updated_at: the server's time of the task's last write, seconds since the epoch.
        now: the server's time now, seconds since the epoch.
        stale_after_seconds: the silence allowed, in seconds (``> 0``).

    Never raises.
    """
    return status == TaskStatus.RUNNING and now - updated_at > stale_after_seconds


def describe_silence(seconds: float) -> str:
    """``"no update for 4 min: the process may have died"``; whole units, rounded down.

    Args:
        seconds: the time since the last write, in seconds (>= 0).

    Under 2 minutes in seconds, under 2 hours in minutes, under 2 days in
    hours and minutes, then in days. Never raises.
    """
    whole = max(0, math.floor(seconds)) if math.isfinite(seconds) else 0
    if whole < 120:
        span = f"{whole} s"
    elif whole < 2 * 3600:
        span = f"{whole // 60} min"
    elif whole < 2 * 86400:
        hours, minutes = divmod(whole // 60, 60)
        span = f"{hours} h {minutes} min" if minutes else f"{hours} h"
    else:
        span = f"{whole // 86400} days"
    return f"no update for {span}: the process may have died"


def staleness(
    status: str, updated_at: str, *, now: float, stale_after_seconds: float
) -> dict[str, Any] | None:
    """The ``stale`` object of a task, or ``None`` when it is not stale.

    Args:
        status: the stored status.
        updated_at: the server's timestamp of the task's last write.
        now: the server's time now, seconds since the epoch.
        stale_after_seconds: the silence allowed, in seconds.

    Returns:
        ``{"seconds_since_update": int, "last_update_at": str, "message": str}``
        (``docs/protocol.md``), or ``None``. A timestamp that does not parse
        is never stale. Never raises.
    """
    try:
        last = parse_server_time(updated_at)
    except ValueError:
        return None
    if not is_stale(status, last, now=now, stale_after_seconds=stale_after_seconds):
        return None
    silence = now - last
    return {
        "seconds_since_update": math.floor(silence),
        "last_update_at": updated_at,
        "message": describe_silence(silence),
    }
