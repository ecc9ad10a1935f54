"""flush() on the reporter thread: the sends it forces and who it wakes (``_core.FlushRequests``).

A flush sends now, even inside the debounce, but never before a delay the
destination asked for (Retry-After) nor inside the destination's own floor;
its resends after a failure follow the backoff. Pure: no thread, ``now`` in.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trainreport import MemorySink
from trainreport._engine._core import FlushRequests
from trainreport._engine._destination import Destination, Job
from trainreport._engine._scheduler import SendScheduler
from trainreport._record._machines import DestinationInput


def destination(index: int = 0, *, gap: float = 0.0) -> Destination:
    scheduler = SendScheduler(backoff_jitter=0.0, min_request_gap=gap)
    return Destination(index=index, sink=MemorySink(), scheduler=scheduler)


def test_a_flush_forces_one_send_to_every_destination_inside_the_debounce() -> None:
    """Each destination gets its send once; afterwards only unsent changes want another."""
    flush = FlushRequests(2)
    first, second = destination(0), destination(1)
    first.scheduler.on_delivered(0.0)  # a send just went: the debounce would wait

    flush.request()

    assert flush.wants_a_send(first, 0.1, lambda _d: False)
    flush.sent(first)
    assert not flush.wants_a_send(first, 0.1, lambda _d: False)
    assert flush.wants_a_send(first, 0.1, lambda _d: True)
    assert flush.wants_a_send(second, 0.1, lambda _d: False)


def test_a_flush_waits_for_retry_after_and_the_destinations_floor() -> None:
    """Retry-After and the floor between requests hold for a flush too."""
    flush = FlushRequests(2)
    asked, floored = destination(0), destination(1, gap=5.0)
    asked.scheduler.on_retry_later(0.0, 30.0)
    floored.scheduler.on_delivered(0.0)
    flush.request()

    assert (False, False) == (
        flush.wants_a_send(asked, 29.9, lambda _d: True),
        flush.wants_a_send(floored, 4.9, lambda _d: True),
    )
    assert (True, True) == (
        flush.wants_a_send(asked, 30.0, lambda _d: True),
        flush.wants_a_send(floored, 5.0, lambda _d: True),
    )


def test_the_resends_of_a_flush_follow_the_backoff() -> None:
    """After its forced send failed, a waiting flush does not resend at every wake."""
    flush = FlushRequests(1)
    dest = destination()
    flush.request()
    flush.sent(dest)
    dest.scheduler.on_retry_later(0.0)

    assert not flush.wants_a_send(dest, 0.5, lambda _d: True)


def test_a_destination_with_a_request_in_flight_is_not_sent_to() -> None:
    """One request per destination at a time, flush or not; another may still be sent to."""
    flush = FlushRequests(2)
    busy, free = destination(0), destination(1)
    flush.request()
    busy.job = Job(None)

    assert not flush.wants_a_send(busy, 0.0, lambda _d: True)
    assert not flush.wants_any_send([busy], 0.0, lambda _d: True)
    assert flush.wants_any_send([busy, free], 0.0, lambda _d: True)


def test_a_destination_waiting_for_the_seed_decision_is_not_forced() -> None:
    """Opened, the store waiting for another first open: a flush cannot send to it yet.

    Forcing it would make the thread loop (a forced send that cannot be made);
    the flush's request stays, and is made once the store is seeded.
    """
    flush = FlushRequests(1)
    dest = destination()
    dest.apply(DestinationInput.OPENED)
    flush.request()

    assert not flush.wants_a_send(dest, 0.0, lambda _d: True)
    assert not flush.wants_any_send([dest], 0.0, lambda _d: True)
    dest.apply(DestinationInput.SEEDED)  # seeded
    assert flush.wants_a_send(dest, 0.0, lambda _d: True)


def test_without_a_flush_no_send_is_wanted() -> None:
    """No flush asked: nothing is forced, whatever is unsent."""
    flush = FlushRequests(1)

    assert not flush.wants_any_send([destination()], 0.0, lambda _d: True)


def test_release_wakes_every_waiting_flush_and_forgets_them() -> None:
    """Every waiter's event is set; a later flush waits anew."""
    flush = FlushRequests(1)
    waiters = [flush.request(), flush.request()]

    flush.release()

    assert [True, True] == [w.is_set() for w in waiters]
    after_release = flush.waiting
    later = flush.request()
    assert (False, True, False) == (after_release, flush.waiting, later.is_set())


@given(
    requested=st.lists(st.booleans(), min_size=1, max_size=3),
    waiters=st.integers(0, 2),
    in_flight=st.lists(st.booleans(), min_size=3, max_size=3),
    failed=st.lists(st.booleans(), min_size=3, max_size=3),
    changes=st.booleans(),
    now=st.floats(0.0, 10.0),
)
def test_the_quick_no_flush_answer_is_the_per_destination_answer(
    requested: list[bool],
    waiters: int,
    in_flight: list[bool],
    failed: list[bool],
    changes: bool,
    now: float,
) -> None:
    """``wants_any_send``'s early exit (no flush at all) answers as asking each destination."""
    flush = FlushRequests(len(requested))
    for _ in range(waiters):
        flush.request()
    flush._requested = list(requested)
    dests = [destination(i, gap=1.0) for i in range(len(requested))]
    for dest in dests:
        if failed[dest.index]:
            dest.scheduler.on_retry_later(0.0, 5.0)
        if in_flight[dest.index]:
            dest.job = Job(None)

    def has_changes(_d: int) -> bool:
        return changes

    general = any(flush.wants_a_send(d, now, has_changes) for d in dests if d.job is None)
    assert general == flush.wants_any_send(dests, now, has_changes)
