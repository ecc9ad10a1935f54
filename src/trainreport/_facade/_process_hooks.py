"""The process-wide hooks every started reporter relies on: fork and interpreter exit.

Installed once per process, on the first ``start()`` (docs/engine.md):

* after ``fork()`` in the child, every live reporter becomes inert (the
  child never sends its parent's reports: the parent delivers them);
* at interpreter exit, every live reporter is closed within its
  ``atexit_timeout_seconds``, first reporting the uncaught exception's outcome
  when the run reported none.

The registry holds strong references: a reporter held only by a local
variable stays reachable until it is closed, so the exit hook can close it
(the worker thread holds no reference to its reporter).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Protocol

__all__ = ["HookedReporter", "forget", "install_process_hooks", "live_reporters", "remember"]


class HookedReporter(Protocol):
    """What the hooks call on each live reporter (``Reporter`` implements it)."""

    def _after_fork_in_child(self) -> None: ...

    def _close_at_exit(self, uncaught: BaseException | None) -> None: ...


_live_reporters: set[HookedReporter] = set()
_hooks_installed = False
_hooks_lock = threading.Lock()


def remember(reporter: HookedReporter) -> None:
    """Add a started reporter to the live set (and install the hooks on first use)."""
    install_process_hooks()
    _live_reporters.add(reporter)


def forget(reporter: HookedReporter) -> None:
    """Remove a closed reporter from the live set. Never raises."""
    _live_reporters.discard(reporter)


def live_reporters() -> list[HookedReporter]:
    """The started, unclosed reporters (a copy)."""
    return list(_live_reporters)


def _after_fork_in_child() -> None:
    reporters = list(_live_reporters)
    _live_reporters.clear()  # the child never sends
    for reporter in reporters:
        reporter._after_fork_in_child()


def _close_at_exit() -> None:
    uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    for reporter in list(_live_reporters):
        reporter._close_at_exit(uncaught if isinstance(uncaught, BaseException) else None)


def install_process_hooks() -> None:
    """Register the fork and exit hooks, once per process. Never raises."""
    global _hooks_installed  # noqa: PLW0603 - process-wide hooks are installed once
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
        atexit.register(_close_at_exit)
