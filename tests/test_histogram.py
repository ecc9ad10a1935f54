"""The report calls' latency histogram: exact count, total and max; percentiles within ±9.1 %."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainreport import MemorySink, Reporter
from trainreport._histogram import FOLD_AT, LatencyHistogram, bucket_of
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
