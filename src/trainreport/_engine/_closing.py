"""``close()``'s caller's side: wait for the reporter thread to end by the deadline.

The reporter thread's side of the close (the tail sent to every destination
within the real-time deadline) is the engine core's closing regime
(``_engine/_core.py``; docs/engine.md, "Closing"). Here, :func:`wait_for_close`:
``close()`` waits on its own thread for the reporter thread to end by the
deadline, says once what it waits for when that takes longer than
:data:`CLOSE_NOTICE_SECONDS`, and stops waiting at a Ctrl-C.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

__all__ = ["CLOSE_NOTICE_SECONDS", "WaitOutcome", "wait_for_close"]

#: ``close()`` logs ``trainreport.close_waiting`` once when it has waited this long
#: (seconds) for the reporter thread and the deadline is still ahead: a hanging
#: service must not look like a hung process.
CLOSE_NOTICE_SECONDS = 2.0

#: How :func:`wait_for_close` ended: the thread ended, the deadline passed, or a
#: ``KeyboardInterrupt`` (Ctrl-C) stopped the wait.
WaitOutcome = Literal["ended", "deadline", "interrupted"]


def wait_for_close(
    join: Callable[[float], bool],
    deadline: float,
    *,
    notice: Callable[[float], None],
    now: Callable[[], float] = time.monotonic,
    notice_after: float = CLOSE_NOTICE_SECONDS,
) -> WaitOutcome:
    """Wait (on ``close()``'s caller's thread) for the reporter thread to end by ``deadline``.

    After ``notice_after`` seconds of waiting, with the deadline still ahead,
    ``notice(seconds_left)`` is called once, then the wait goes on to the
    deadline. A ``KeyboardInterrupt`` raised while waiting (a Ctrl-C during
    ``finally: reporter.close()``) ends the wait: it is caught here, so no
    traceback comes out of trainreport's wait, and the caller decides what to
    say (docs/engine.md#decisions-the-design-left-open).

    Args:
        join: waits at most the given seconds; returns True once the thread ended.
        deadline: when to stop waiting (on ``now``'s clock, seconds).
        notice: called once with the seconds left, when the wait gets long.
        now: the clock of ``deadline`` (default ``time.monotonic``).
        notice_after: seconds to wait before ``notice`` (default :data:`CLOSE_NOTICE_SECONDS`).

    Returns:
        ``"ended"``, ``"deadline"`` or ``"interrupted"``. Never raises
        (``notice`` must not).
    """
    try:
        if join(max(min(deadline - now(), notice_after), 0.0)):
            return "ended"
        left = deadline - now()
        if left <= 0:
            return "deadline"
        notice(left)
        return "ended" if join(left) else "deadline"
    except KeyboardInterrupt:
        return "interrupted"
