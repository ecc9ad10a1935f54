"""Wall-clock stamps: ``updated_at`` strings for the sends (ISO 8601 UTC, milliseconds)."""

from __future__ import annotations

import datetime
import time

__all__ = ["Stamps", "utc_now_iso"]


def utc_now_iso() -> str:
    """The wall-clock time as ISO 8601 UTC with milliseconds and a ``Z`` suffix."""
    return _iso_from_ms(int(time.time() * 1000))


def _iso_from_ms(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Stamps:
    """``updated_at`` values that strictly increase, one millisecond apart at least.

    A plain job API cannot fence a request delayed in the network; every send
    carrying a strictly newer ``updated_at`` than the one before makes the final
    send the newest of the run, which a destination can order by.
    """

    def __init__(self) -> None:
        self._last_ms = 0

    def __call__(self) -> str:
        ms = max(int(time.time() * 1000), self._last_ms + 1)
        self._last_ms = ms
        return _iso_from_ms(ms)
