"""How long the reporter thread sleeps between cycles (``_core.next_wait``, pure: ``now`` in).

It wakes at least once per debounce interval (report calls do not signal it),
never spins on a zero interval, never waits past a day, wakes when a send or
the journal is due, and not for a destination whose request is in flight.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trainreport import MemorySink
from trainreport._engine._core import MIN_JOURNAL_WAIT_SECONDS, next_wait
from trainreport._engine._destination import Destination, Job
from trainreport._engine._scheduler import SendScheduler
from trainreport._record._machines import DestinationInput


def destination(index: int = 0, *, interval: float = 10.0) -> Destination:
    scheduler = SendScheduler(min_interval=interval, backoff_jitter=0.0)
    return Destination(index=index, sink=MemorySink(), scheduler=scheduler)


def test_with_nothing_due_the_thread_wakes_once_per_debounce_interval() -> None:
    """The shortest interval counts: a local run log's, when shorter than the config's."""
    regular, local_log = destination(0), destination(1, interval=2.0)

    assert 2.0 == next_wait(
        0.0, [regular, local_log], interval=10.0, flush_now=False, journal_due=None
    )


def test_a_zero_interval_never_spins_and_a_huge_one_is_capped_at_a_day() -> None:
    """0 s waits 50 ms; 1e12 s waits 86,400 s (``Event.wait`` must not overflow)."""
    zero, huge = destination(interval=0.0), destination(interval=1e12)

    assert (0.05, 86_400.0) == (
        next_wait(0.0, [zero], interval=0.0, flush_now=False, journal_due=None),
        next_wait(0.0, [huge], interval=1e12, flush_now=False, journal_due=None),
    )


def test_a_due_send_a_waiting_flush_and_the_journal_wake_the_thread_sooner() -> None:
    """Due in 3 s: 3 s. A flush that may send: at once. The journal due: at its time."""
    dest = destination()
    dest.scheduler.on_retry_later(0.0, 3.0)

    assert 3.0 == next_wait(0.0, [dest], interval=10.0, flush_now=False, journal_due=None)
    assert 0.0 == next_wait(0.0, [dest], interval=10.0, flush_now=True, journal_due=None)
    idle = destination()
    assert 1.5 == next_wait(0.0, [idle], interval=10.0, flush_now=False, journal_due=1.5)
    assert MIN_JOURNAL_WAIT_SECONDS == next_wait(  # overdue: a record at once, never a spin
        5.0, [idle], interval=10.0, flush_now=False, journal_due=4.0
    )


def test_a_destination_with_a_request_in_flight_does_not_set_the_wake() -> None:
    """Its sender wakes the thread when the request ends; its overdue send is not a spin."""
    busy = destination()
    busy.scheduler.note_change(0.0, urgent=True)
    busy.job = Job(None)

    assert 10.0 == next_wait(5.0, [busy], interval=10.0, flush_now=False, journal_due=None)


def test_a_destination_waiting_for_another_first_open_waits_for_the_seed_decision() -> None:
    """Opened, its first point due, the store waiting for another first open: no spin.

    Nothing can be sent to it before the store is seeded, so its overdue send
    sets no wake: the thread wakes when the other open ends (that sender wakes
    it) or when the seed decision is due (one debounce interval after the
    first successful open), whichever comes first.
    """
    hanging, opened = destination(0), destination(1)
    hanging.job = Job(None)  # its first open hangs
    opened.apply(DestinationInput.OPENED)
    opened.scheduler.note_change(0.0, urgent=True, first_point=True)
    dests = [hanging, opened]

    assert 10.0 == next_wait(3.0, dests, interval=10.0, flush_now=False, journal_due=None)
    assert 7.0 == next_wait(
        3.0, dests, interval=10.0, flush_now=False, journal_due=None, seed_due=10.0
    )
    opened.apply(DestinationInput.SEEDED)  # seeded: its send is due at once again
    assert 0.0 == next_wait(3.0, dests, interval=10.0, flush_now=False, journal_due=None)


@given(
    now=st.floats(0.0, 1e6),
    interval=st.floats(0.0, 1e9),
    delays=st.lists(st.none() | st.floats(0.0, 1e7), min_size=1, max_size=4),
)
def test_the_wait_is_bounded_and_never_later_than_a_due_send(
    now: float, interval: float, delays: list[float | None]
) -> None:
    """0 <= wait <= a day, and no later than any destination's due send."""
    dests = []
    for i, delay in enumerate(delays):
        dest = destination(i, interval=interval)
        if delay is not None:
            dest.scheduler.on_retry_later(now, delay)
        dests.append(dest)

    wait = next_wait(now, dests, interval=interval, flush_now=False, journal_due=None)

    assert 0.0 <= wait <= 86_400.0
    for dest in dests:
        due = dest.scheduler.due_at()
        if due is not None:
            assert wait <= max(due - now, 0.0)
