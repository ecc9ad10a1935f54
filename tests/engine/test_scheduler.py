"""SendScheduler: debounce, events, backoff, Retry-After, rejections, heartbeat (pure, no clock)."""

from __future__ import annotations

import random

import pytest

from trainreport._engine._scheduler import MAX_RETRY_AFTER_SECONDS, SendScheduler


def scheduler(**kw: float) -> SendScheduler:
    settings = {"min_interval": 10.0, "heartbeat": 60.0, "backoff_jitter": 0.0, **kw}
    return SendScheduler(rng=random.Random(0), **settings)


def test_first_change_is_due_at_once() -> None:
    """The first report goes at once (no debounce before the first send)."""
    s = scheduler()
    assert s.due_at() is None
    s.note_change(100.0)
    assert s.is_due(100.0)


def test_regular_changes_wait_for_the_interval_after_the_last_success() -> None:
    """After a delivered send, ordinary data waits min_interval from that send."""
    s = scheduler()
    s.note_change(100.0)
    s.on_delivered(100.0)
    s.note_change(101.0)
    assert not s.is_due(109.9)
    assert s.is_due(110.0)


def test_event_changes_bypass_the_debounce() -> None:
    """An urgent change (event report) is due when it arrives."""
    s = scheduler()
    s.note_change(100.0)
    s.on_delivered(100.0)
    s.note_change(101.0, urgent=True)
    assert s.is_due(101.0)


def test_failure_does_not_consume_the_debounce_window() -> None:
    """After a failed send the next attempt is due after the backoff, not the interval."""
    s = scheduler(backoff_initial=1.0)
    s.note_change(100.0)
    delay = s.on_retry_later(100.0)
    assert 1.0 == delay
    assert not s.is_due(100.9)
    assert s.is_due(101.0)


def test_backoff_grows_exponentially_up_to_the_cap_and_resets_on_success() -> None:
    """Delays double per failure, stop at backoff_max, and start over after a success."""
    s = scheduler(backoff_initial=1.0, backoff_max=5.0)
    s.note_change(0.0)
    assert [1.0, 2.0, 4.0, 5.0, 5.0] == [s.on_retry_later(0.0) for _ in range(5)]
    s.on_delivered(1.0)
    s.note_change(2.0)
    assert 1.0 == s.on_retry_later(2.0)


def test_jitter_stays_within_its_fraction() -> None:
    """Each delay is scaled by a factor in [1 - jitter, 1 + jitter]."""
    s = SendScheduler(backoff_initial=10.0, backoff_jitter=0.2, rng=random.Random(1))
    delays = {s.backoff_delay(1) for _ in range(200)}
    assert all(8.0 <= d <= 12.0 for d in delays)
    assert len(delays) > 1


def test_retry_after_is_honoured_and_capped() -> None:
    """A delay the destination asks for replaces the backoff, up to a cap."""
    s = scheduler(backoff_initial=1.0)
    s.note_change(0.0)
    assert 30.0 == s.on_retry_later(0.0, 30.0)
    assert not s.is_due(29.0)
    assert MAX_RETRY_AFTER_SECONDS == s.on_retry_later(0.0, 10**9)


def test_rejection_is_not_retried_without_new_data() -> None:
    """After a rejection nothing is due until new data arrives, then after the long backoff."""
    s = scheduler(rejected_backoff=300.0)
    s.note_change(0.0)
    s.on_rejected(0.0)
    assert s.due_at() is None
    s.note_change(10.0)
    assert not s.is_due(299.0)
    assert s.is_due(300.0)


def test_heartbeat_is_due_when_nothing_changed() -> None:
    """With nothing pending, a send is due heartbeat seconds after the last success."""
    s = scheduler(heartbeat=60.0)
    s.note_change(0.0)
    s.on_delivered(0.0)
    assert not s.is_due(59.0)
    assert s.is_due(60.0)


def test_partial_delivery_keeps_data_pending_for_the_curves_window() -> None:
    """An event send that left curves out keeps them due when the curves' window ends."""
    s = scheduler()
    s.note_change(0.0)
    s.on_delivered(0.0)
    s.note_change(1.0, urgent=True)
    s.on_delivered(1.0, everything_sent=False, carried_curves=False)
    assert not s.is_due(9.9)
    assert s.is_due(10.0)


def test_events_more_often_than_the_interval_never_delay_the_curves() -> None:
    """A checkpoint every 3 s at a 10 s interval: the curves are still due every 10 s."""
    s = scheduler()
    s.note_change(0.0)
    s.on_delivered(0.0)
    curve_sends = []
    for tick in range(1, 61):
        now = float(tick)
        s.note_change(now, urgent=tick % 3 == 0)
        if s.is_due(now):
            carried = s.curves_due(now)
            if carried:
                curve_sends.append(tick)
            s.on_delivered(now, everything_sent=carried, carried_curves=carried)
    assert [10, 20, 30, 40, 50, 60] == curve_sends


def test_the_curves_window_is_not_consumed_by_a_failed_send() -> None:
    """A failed send leaves the curves' window where it was."""
    s = scheduler(backoff_initial=1.0)
    s.note_change(0.0)
    s.on_delivered(0.0)
    s.note_change(5.0)
    s.on_retry_later(10.0)
    assert s.curves_due(11.0)


@pytest.mark.parametrize("failures", [1, 10, 10_000])
def test_backoff_delay_never_overflows(failures: int) -> None:
    """Even after very many failures the delay is the cap, not an OverflowError."""
    s = scheduler(backoff_initial=1.0, backoff_max=60.0)
    assert 60.0 >= s.backoff_delay(failures)


# --------------------------------------------------------------------------- request floor


def test_request_gap_delays_an_event_after_a_delivered_send() -> None:
    """With a 5 s floor, an urgent event 1 s after a send waits until 5 s after it."""
    s = scheduler(min_interval=0.1, min_request_gap=5.0)
    s.note_change(100.0)
    s.on_delivered(100.0)
    s.note_change(101.0, urgent=True)
    assert (105.0, False, True) == (s.due_at(), s.is_due(104.9), s.is_due(105.0))


def test_request_gap_delays_a_retry_shorter_than_it() -> None:
    """A 1 s backoff after a failure still waits for the 5 s floor from the failed attempt."""
    s = scheduler(min_request_gap=5.0, backoff_initial=1.0)
    s.note_change(100.0)
    s.on_retry_later(100.0)
    assert 105.0 == s.due_at()


def test_request_gap_never_shortens_a_longer_wait() -> None:
    """A rejection's long backoff is longer than the floor and is kept."""
    s = scheduler(min_request_gap=5.0, rejected_backoff=300.0)
    s.note_change(100.0)
    s.on_rejected(100.0)
    s.note_change(101.0)
    assert 400.0 == s.due_at()


def test_gap_allows_says_when_a_forced_send_may_go() -> None:
    """``gap_allows`` is False within the floor after any attempt, True before the first."""
    s = scheduler(min_request_gap=5.0)
    before = s.gap_allows(0.0)
    s.on_delivered(100.0)
    assert (True, False, True) == (before, s.gap_allows(104.0), s.gap_allows(105.0))


def test_no_request_gap_changes_nothing() -> None:
    """Without a floor an event goes at once after a send."""
    s = scheduler()
    s.note_change(100.0)
    s.on_delivered(100.0)
    s.note_change(100.5, urgent=True)
    assert (100.5, True) == (s.due_at(), s.gap_allows(100.5))
