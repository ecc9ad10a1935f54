"""How long the reporter thread sleeps between two cycles (a pure function of ``now``)."""

from __future__ import annotations

from trainreport._destination import MAX_FLOOR_SECONDS, Destination

__all__ = ["MIN_JOURNAL_WAIT_SECONDS", "next_wait"]

#: The longest single wait of the reporter thread (a day): bounded so that a huge
#: configured interval never overflows ``Event.wait``.
_MAX_SLEEP_SECONDS = MAX_FLOOR_SECONDS
#: The shortest wait of the reporter thread, seconds (a zero interval never spins).
_MIN_SLEEP_SECONDS = 0.05
#: The shortest wait between two journal records (seconds): a journal interval of 0
#: means a record at every wake, never a busy loop.
MIN_JOURNAL_WAIT_SECONDS = 0.001


def next_wait(
    now: float,
    destinations: list[Destination],
    *,
    interval: float,
    flush_now: bool,
    journal_due: float | None,
    seed_due: float | None = None,
) -> float:
    """Seconds until the reporter thread's next cycle is due (it is woken earlier by events).

    The thread wakes at least once per debounce interval to look at the queue:
    the training thread does not signal ordinary reports
    (docs/design.md#public-api). A local run log's shorter interval counts (it
    is sent to that often).

    Args:
        now: the scheduling clock's time (seconds).
        destinations: the reporter's destinations.
        interval: the configured debounce interval (seconds).
        flush_now: a waiting ``flush()`` may send now to a destination with no
            request in flight (the thread does not sleep).
        journal_due: when the journal's next record is due (scheduling clock),
            ``None`` without a journal.
        seed_due: when the store is seeded without waiting any longer for a
            first open in flight (scheduling clock), ``None`` when it is seeded
            or no open succeeded yet. A destination waiting for the seed
            (:attr:`Destination.waits_for_seed`) sets no wake of its own: it
            can be sent to only then, or when that open ends (its sender
            wakes the thread), so its overdue send is never a busy loop.
    """
    if flush_now:
        return 0.0
    shortest = min(interval, *(d.scheduler.min_interval for d in destinations))
    wait = min(max(shortest, _MIN_SLEEP_SECONDS), _MAX_SLEEP_SECONDS)
    for dest in destinations:
        if dest.job is not None or dest.waits_for_seed:
            continue  # its sender (or the seed decision) wakes the thread
        due = dest.scheduler.due_at()
        if due is not None:
            wait = min(wait, max(due - now, 0.0))
    if journal_due is not None:
        wait = min(wait, max(journal_due - now, MIN_JOURNAL_WAIT_SECONDS))
    if seed_due is not None:
        wait = min(wait, max(seed_due - now, 0.0))
    return wait
