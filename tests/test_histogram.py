"""The report calls' latency histogram: exact count, total and max; percentiles within ±9.1 %."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainreport import MemorySink, Reporter, _report_calls, _report_queue
from trainreport._histogram import FOLD_AT, TIMED_EVERY, LatencyHistogram, bucket_of
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(120)

DURATIONS = st.lists(st.integers(min_value=1, max_value=10**12), min_size=1, max_size=300)


def _nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@settings(max_examples=300, deadline=None)
@given(durations=DURATIONS, q=st.sampled_from([0.01, 0.5, 0.9, 0.99, 1.0]))
def test_a_percentile_is_within_its_bucket_of_the_exact_value(
    durations: list[int], q: float
) -> None:
    """Folded in C, each duration lands in its quarter-octave; a percentile is off by <= 9.1 %."""
    h = LatencyHistogram()
    for ns in durations:
        h.observe(ns)
    h.fold()
    assert len(durations) == h.count
    assert sum(durations) == h.total_ns
    assert max(durations) == h.max_ns
    assert [bucket_of(ns) for ns in durations].count(bucket_of(durations[0])) == (
        h.counts[bucket_of(durations[0])]
    )
    exact = _nearest_rank(durations, q)
    measured_ns = h.percentile_us(q) * 1000.0
    assert exact / 2 ** (1 / 8) * 0.999999 <= measured_ns <= exact * 2 ** (1 / 8) * 1.000001


def test_a_zero_duration_is_counted_exactly() -> None:
    """A clock that did not move (0 ns) is counted, summed and read back as 0 µs."""
    h = LatencyHistogram()
    h.observe(0)
    h.observe(0)
    h.fold()
    assert (2, 0, 0, 0.0) == (h.count, h.total_ns, h.max_ns, h.percentile_us(0.5))


def test_durations_recorded_after_a_fold_wait_for_the_next_one() -> None:
    """A fold takes what is pending; later durations stay pending, none is counted twice."""
    h = LatencyHistogram()
    h.observe(1_000)
    h.fold()
    h.observe(3_000)
    assert 1 == h.count
    assert 1 == len(h.pending)
    h.fold()
    h.fold()
    assert 2 == h.count
    assert 4_000 == h.total_ns
    assert 3_000 == h.max_ns


def test_refused_report_calls_keep_the_pending_durations_bounded() -> None:
    """With no drain ever coming (a closed reporter), refused calls fold what is pending."""
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0)
    reporter.close(timeout=1)
    calls = 3 * FOLD_AT
    for step in range(calls):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
    assert len(reporter._latencies) <= FOLD_AT
    assert calls == reporter.stats().report_calls
    assert 0 == len(reporter._latencies)


class _TimingClock:
    """A ``perf_counter_ns`` stand-in: each read 1 ms after the last; counts its reads."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.reads * 1_000_000


def test_one_report_call_in_timed_every_reads_the_timing_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hot path and the other report calls share one sample: the first call, then one in
    TIMED_EVERY, reads the timing clock (twice); every call still counts in ``report_calls``."""
    timing = _TimingClock()
    monkeypatch.setattr(_report_calls, "perf_counter_ns", timing)
    monkeypatch.setattr(_report_queue, "perf_counter_ns", timing)
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0)
    calls = 10 * TIMED_EVERY
    for step in range(1, calls // 2 + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
        reporter.report_validation(step=step, metrics={"loss": 1.0})
    assert 2 * 10 == timing.reads
    stats = reporter.stats()
    assert calls == stats.report_calls
    # Each timed call lasted 1 ms by the stand-in clock; the total is scaled to every call.
    assert 1000.0 == stats.report_max_us
    assert stats.report_total_seconds == pytest.approx(calls * 1e-3)
    assert 0 < stats.report_p50_us <= stats.report_p99_us <= stats.report_max_us


def test_refused_report_calls_are_sampled_like_accepted_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After close() a call is refused: still counted, still timed only one call in TIMED_EVERY."""
    timing = _TimingClock()
    monkeypatch.setattr(_report_calls, "perf_counter_ns", timing)
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0)
    reporter.close(timeout=1)
    for step in range(1, 2 * TIMED_EVERY + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
    assert 2 * 2 == timing.reads
    assert 2 * TIMED_EVERY == reporter.stats().report_calls
