"""A cheap latency histogram for the time the training thread spends in report calls.

Buckets are quarter-octaves of nanoseconds: recording is one ``bit_length`` and
one list increment (tens of nanoseconds), and a percentile is read back within
about ±10 %. Not thread-safe by design: it is written by the thread that makes
report calls, and a lost increment under a rare race only blurs a statistic.
"""

from __future__ import annotations

__all__ = ["LatencyHistogram"]

_SUB = 4  # sub-buckets per octave
_BUCKETS = 64 * _SUB


class LatencyHistogram:
    """Counts durations in nanoseconds; reports p50/p99/max in microseconds."""

    __slots__ = ("counts", "max_ns", "total_ns")

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.max_ns = 0
        self.total_ns = 0

    @property
    def count(self) -> int:
        """Number of durations recorded."""
        return sum(self.counts)

    def observe(self, ns: int) -> None:
        """Record one duration of ``ns`` nanoseconds (>= 0). Never raises for ints >= 0.

        ``Reporter.report_train_step`` inlines these lines (a call costs as much).
        """
        n = ns.bit_length()
        self.counts[(n << 2) | ((ns >> (n - 3)) & 3) if n > 2 else n << 2] += 1
        self.total_ns += ns
        self.max_ns = max(self.max_ns, ns)

    def percentile_us(self, q: float) -> float:
        """The ``q`` quantile (0 < q <= 1) in microseconds, from bucket midpoints; 0.0 if empty."""
        total = self.count
        if total == 0:
            return 0.0
        rank = q * total
        seen = 0
        for index, c in enumerate(self.counts):
            seen += c
            if c and seen >= rank:
                return min(_midpoint_ns(index), self.max_ns) / 1000.0
        return self.max_ns / 1000.0


def _midpoint_ns(index: int) -> float:
    n, sub = divmod(index, _SUB)
    if n <= 2:
        return float((1 << n) - 1) if n else 0.0
    low = (4 + sub) << (n - 3)
    high = (5 + sub) << (n - 3)
    return (low + high) / 2.0
