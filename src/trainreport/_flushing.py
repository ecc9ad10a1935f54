"""``flush()`` on the reporter thread: who waits for delivery, and which sends a flush forces.

``Reporter.flush()`` asks for an immediate send of everything to every
destination and waits on an event that is set once nothing queued or recorded
is left unsent (or the reporter thread ends). A flush sends now even during a
debounce, but never before a delay the destination asked for (``Retry-After``)
nor inside the destination's own floor between requests; its resends after a
failure follow the backoff (docs/engine.md).

Thread-safety: :meth:`FlushRequests.request` runs on any thread; the rest on the
reporter thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from trainreport._destination import Destination

__all__ = ["FlushRequests"]


class FlushRequests:
    """The ``flush()`` calls waiting for delivery, and the send each asked of each destination.

    Args:
        destinations: how many destinations the reporter sends to.
    """

    def __init__(self, destinations: int) -> None:
        self._waiters: list[threading.Event] = []
        #: Per destination: a flush() asked for a send that has not been made yet.
        self._requested = [False] * destinations
        self._lock = threading.Lock()

    def request(self) -> threading.Event:
        """Ask every destination for a send now; the event is set once all is delivered."""
        done = threading.Event()
        with self._lock:
            self._waiters.append(done)
            self._requested = [True] * len(self._requested)
        return done

    @property
    def waiting(self) -> bool:
        """A ``flush()`` waits for delivery (its sends also carry the curves)."""
        return bool(self._waiters)

    def wants_a_send(
        self, dest: Destination, now: float, has_changes: Callable[[int], bool]
    ) -> bool:
        """A flush is waiting and may send to ``dest`` at ``now`` (scheduling clock, seconds).

        Args:
            dest: the destination (no request of its may be in flight).
            now: the scheduling clock's time.
            has_changes: whether destination ``d`` has something unsent.
        """
        flushing = self._requested[dest.index]
        if dest.job is not None or not (flushing or self._waiters):
            return False
        if dest.waits_for_seed:
            return False  # nothing can be sent to it yet; the request stays for later
        scheduler = dest.scheduler
        if scheduler.not_before is not None and now < scheduler.not_before:
            return False  # Retry-After is honoured even by flush()
        if not scheduler.gap_allows(now):
            return False  # so is the destination's own floor between requests
        if flushing:
            return True
        if scheduler.consecutive_failures:
            return False  # our own backoff applies to the resends of a flush
        return has_changes(dest.index)

    def wants_any_send(
        self, destinations: list[Destination], now: float, has_changes: Callable[[int], bool]
    ) -> bool:
        """:meth:`wants_a_send` for any of ``destinations`` (no request of theirs in flight)."""
        if not self._waiters and not any(self._requested):
            return False
        return any(self.wants_a_send(d, now, has_changes) for d in destinations if d.job is None)

    def sent(self, dest: Destination) -> None:
        """The send a flush asked of ``dest`` is being made."""
        self._requested[dest.index] = False

    def release(self) -> None:
        """Wake every waiting ``flush()`` (everything is delivered, or the thread ends)."""
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.set()
