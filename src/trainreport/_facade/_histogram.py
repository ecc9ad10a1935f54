"""A cheap latency histogram for the time the training thread spends in report calls.

Buckets are quarter-octaves of nanoseconds (bucket ``k`` holds the durations
``d`` with ``floor(4 * log2(d)) == k``), so a percentile, read back as its
bucket's geometric midpoint, is within ±9.1 % (``2 ** (1/8)``).

``report_train_step``, the hot path, is timed by sample: its first call,
then one in :data:`TIMED_EVERY` (its own count), reads the timing clock, and
its duration goes to :attr:`LatencyHistogram.sampled`, where it stands for
that many calls when folded. Every other report call is rare (validation,
events) and is timed each time, into :attr:`LatencyHistogram.pending`, with
a weight of one. The hot path keeps its own count so that a loop making the
same few report calls each step can never sample one kind only. Timing
every training step measured at 0.2 to 0.3 µs of a 2.8 to 5.2 µs call
(``benchmarks/bench_call_parts.py``, ``docs/performance.md``). A sample of
one in 16 still gives percentiles from thousands of calls in any real run.
Percentiles, count and total are weighted estimates; the maximum is the
longest timed call.

Recording is one ``array.append`` of the duration (a C call: no bucket
arithmetic on the caller's thread); :meth:`LatencyHistogram.fold` moves the
recorded durations into the buckets, in C (``map``, ``log2``, ``Counter``).
The reporter calls ``fold`` on the reporter thread after each drain, in
``stats()``, and on the caller's thread only when reports are refused (the
queue's guard tripped, or the reporter is closed) with at least
:data:`FOLD_AT` durations in either buffer, so the buffers stay bounded when
no drain comes (a hanging destination).

Thread-safety: appends come from the threads making report calls; one fold
runs at a time (a second one at the same moment returns at once, leaving the
durations to the next). A fold removes exactly the durations it counted, so an
append racing with it is kept for the next fold.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections import Counter
from math import log2

__all__ = ["FOLD_AT", "TIMED_EVERY", "LatencyHistogram"]

_SUB = 4  # sub-buckets per octave
_BUCKETS = 64 * _SUB
#: One ``report_train_step`` call in this many is timed (a power of two: the test is a bit mask).
TIMED_EVERY = 16
#: Pending durations at which a refused report call folds them on the caller's thread.
FOLD_AT = 512

# One fold at a time, for every histogram: folds are rare and short, and a
# module lock keeps the histogram picklable (an unstarted Reporter pickles).
_folding = threading.Lock()


def _new_lock_in_child() -> None:
    global _folding  # noqa: PLW0603 - a child forked during a fold must not inherit it held
    _folding = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


_times_four = (4.0).__mul__


def bucket_of(ns: int) -> int:
    """The bucket index of a duration of ``ns`` nanoseconds (0 counts as 1 ns)."""
    return int(4.0 * log2(max(ns, 1)))


class LatencyHistogram:
    """Counts durations in nanoseconds, each with a weight; reports p50/p99/max in microseconds.

    Attributes:
        pending: durations of calls timed each time, not folded yet,
            nanoseconds (``pending.append(ns)`` records one, weight 1).
        sampled: durations of sampled calls, not folded yet, nanoseconds;
            each stands for :data:`TIMED_EVERY` calls (weight ``TIMED_EVERY``).
        counts: weighted durations per bucket (folded ones).
        max_ns: the longest folded duration, nanoseconds.
        total_ns: the weighted sum of the folded durations, nanoseconds.
    """

    __slots__ = ("counts", "max_ns", "pending", "sampled", "total_ns")

    def __init__(self) -> None:
        self.pending = array("q")
        self.sampled = array("q")
        self.counts = [0] * _BUCKETS
        self.max_ns = 0
        self.total_ns = 0

    @property
    def count(self) -> int:
        """Calls the folded durations stand for (weighted; call :meth:`fold` first)."""
        return sum(self.counts)

    def observe(self, ns: int) -> None:
        """Record one duration of ``ns`` nanoseconds (>= 0), weight 1. Never raises for ints."""
        self.pending.append(ns)

    def unfolded(self) -> int:
        """Durations recorded and not folded yet, in both buffers."""
        return len(self.pending) + len(self.sampled)

    def fold(self) -> None:
        """Move the recorded durations into the buckets, with their weights. Never raises."""
        if not _folding.acquire(blocking=False):
            return  # another thread is folding: these durations go in the next fold
        try:
            self._fold(self.pending, 1)
            self._fold(self.sampled, TIMED_EVERY)
        finally:
            _folding.release()

    def _fold(self, buffer: array[int], weight: int) -> None:
        n = len(buffer)
        if not n:
            return
        taken = buffer[:n]
        del buffer[:n]  # one C call: a racing append lands after the n taken
        self.total_ns += sum(taken) * weight
        longest = max(taken)
        self.max_ns = max(self.max_ns, longest)
        if min(taken) < 1:  # log2 needs >= 1 (a clock that did not move)
            taken = array("q", [max(ns, 1) for ns in taken])
        counts = self.counts
        # Bucket every duration in C (map, log2, Counter): no Python loop per duration.
        for index, c in Counter(map(int, map(_times_four, map(log2, taken)))).items():
            counts[index] += c * weight

    def percentile_us(self, q: float) -> float:
        """The ``q`` quantile (0 < q <= 1) in microseconds, from bucket midpoints; 0.0 if empty.

        Reads the folded durations (call :meth:`fold` first).
        """
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
    """The geometric midpoint of bucket ``index``, nanoseconds."""
    return float(2.0 ** ((index + 0.5) / _SUB))
