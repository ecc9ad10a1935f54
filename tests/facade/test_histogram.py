"""The report calls' latency histogram: exact count, total and max; percentiles within ±9.1 %."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainreport import MemorySink, Reporter
from trainreport._facade._histogram import FOLD_AT, TIMED_EVERY, LatencyHistogram, bucket_of
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


def test_refused_report_calls_keep_the_unfolded_durations_bounded() -> None:
    """With no drain ever coming (a closed reporter), refused calls fold what is recorded,
    in both buffers: sampled training steps and the other report calls."""
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0)
    reporter.close(timeout=1)
    histogram = reporter._histogram
    steps = 3 * FOLD_AT * TIMED_EVERY
    for step in range(steps):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
        assert histogram.unfolded() <= FOLD_AT
    others = 3 * FOLD_AT
    for step in range(others):
        reporter.report_validation(step=step, metrics={"loss": 1.0})
        assert histogram.unfolded() <= FOLD_AT
    assert histogram.count > 0  # folded on the caller's thread, before any stats()
    assert steps + others == reporter.stats().report_calls
    assert 0 == len(reporter._latencies)


class _TimingClock:
    """A ``Reporter(timer=...)``: each read ``step_ns`` after the last; counts its reads.

    ``step_ns`` may be changed between calls: a timed call then lasts the new step.
    """

    def __init__(self, step_ns: int = 1_000_000) -> None:
        self.reads = 0
        self.step_ns = step_ns
        self.now_ns = 0

    def __call__(self) -> int:
        self.reads += 1
        self.now_ns += self.step_ns
        return self.now_ns


def test_the_first_training_step_then_one_in_timed_every_reads_the_timing_clock() -> None:
    """report_train_step times its first call, then calls 17, 33, ...: two clock reads each."""
    timing = _TimingClock()
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0, timer=timing)
    reads_after = {}
    for step in range(1, 10 * TIMED_EVERY + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
        reads_after[step] = timing.reads
    assert 2 == reads_after[1] == reads_after[TIMED_EVERY]
    assert 4 == reads_after[TIMED_EVERY + 1]
    assert 2 * 10 == reads_after[10 * TIMED_EVERY]
    assert 10 * TIMED_EVERY == reporter.stats().report_calls


def test_a_sampled_training_step_stands_for_timed_every_calls_and_others_for_one() -> None:
    """Training steps (1 ms each, sampled) and validations (3 ms each, every one timed),
    made in a fixed pattern: both kinds are timed, and the weighted histogram counts,
    sums and ranks them as if every call had been timed."""
    timing = _TimingClock()
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0, timer=timing)
    steps = 2 * TIMED_EVERY
    for step in range(1, steps + 1):
        timing.step_ns = 1_000_000
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
        if step % 8 == 0:  # a period that divides TIMED_EVERY: a shared count would alias
            timing.step_ns = 3_000_000
            reporter.report_validation(step=step, metrics={"loss": 1.0})
    validations = steps // 8
    stats = reporter.stats()
    assert steps + validations == stats.report_calls
    assert stats.report_total_seconds == pytest.approx(steps * 1e-3 + validations * 3e-3)
    assert 3000.0 == stats.report_max_us
    assert stats.report_p50_us == pytest.approx(1000.0, rel=0.091)
    assert stats.report_p99_us == pytest.approx(3000.0, rel=0.091)


def test_refused_training_steps_are_counted_and_sampled() -> None:
    """After close() each call is refused: still counted, still timed one call in TIMED_EVERY."""
    timing = _TimingClock()
    reporter = Reporter(MemorySink(), clock=FakeClock(), rank=0, timer=timing)
    reporter.close(timeout=1)
    for step in range(1, 2 * TIMED_EVERY + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
    assert 2 * 2 == timing.reads
    stats = reporter.stats()
    assert 2 * TIMED_EVERY == stats.report_calls
    assert 2 * TIMED_EVERY == stats.drops["after_close"]
