"""The thinning rule: a series at reduced resolution that still covers the whole run.

Full-state mode sends every curve whole in one body (docs/design.md#wire-modes).
When that body no longer fits the destination's limit (a 413 with nothing left
to split, or ``HttpSink(max_body_bytes=...)``), the reporter sends each series
thinned to a budget of points instead of freezing the curves (docs/engine.md,
"Thinning under a body limit"). The rule, per series of ``n`` points and a
budget of ``b`` points:

- ``n <= b``: every point, unchanged (thinning is exact below the limit);
- else the first and the last point are kept, and the points between them are
  cut into buckets of ``w`` consecutive points from index 1 on (the last one
  shorter), ``w`` the least power of two that makes at most ``(b - 2) // 2``
  buckets (:func:`bucket_width`); each bucket keeps its lowest and its highest
  value (the first of equals), so a spike survives whatever the resolution.
  A NaN (a diverging loss, sent as JSON ``null``) ranks above ``+Inf``: a
  bucket that holds one keeps it as its highest, so the gap still shows.
- The kept points are in the series' order (step order), none twice, and
  never more than ``b`` (at least about ``b / 2`` of a longer series); the
  global minimum and maximum are always among them (each is its bucket's, or
  the first or the last point).

How it differs from the rule before session 28 (``(b - 2) // 2`` buckets of
equal counts): those boundaries move with every point the series gains, so
the thinned curve could only be computed from every point. Power-of-two
buckets aligned at index 1 only ever merge pairwise as the series grows, and
the min/max rule composes (the extremes of a union of buckets are the
extremes of their extremes), so the points that left memory can be kept as a
bounded :class:`Summary` and the body built from it and the points in memory
is the same (:func:`thin_series`; docs/engine.md, "Memory once thinned"). The
price: a long series is sent with between half and all of its budget.

Source: the M4 aggregation (Jugel et al., "M4: A Visualization-Oriented Time
Series Data Aggregation", VLDB 2014) keeps the first, last, minimum and maximum
of each pixel column so a line chart drawn from the thinned series differs
from the full one by at most a pixel; keeping only the extremes (and the
series' ends) is its min/max variant, the one TensorBoard and wandb's
"full fidelity" mode use for the same reason (a spike must not vanish at low
resolution). The reference server's ``/series?max_points=`` thins with the
same min/max idea over equal-count buckets (``server/_page.py``), keeping one
more point per bucket for a gap: it holds every point.

Pure functions, and :class:`Summary` (state, no I/O). The latest value of a
series is its last point, so it stays exact at every resolution.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import TypeAlias

__all__ = [
    "MIN_POINTS",
    "Columns",
    "Summary",
    "bucket_width",
    "budget_for",
    "keep_indices",
    "next_budget",
    "thin_columns",
    "thin_series",
]

#: The smallest budget that keeps a series' first and last point and one bucket's extremes.
MIN_POINTS = 4


def bucket_width(n: int, budget: int) -> int:
    """The rule's bucket width for a series of ``n`` points at ``budget`` points.

    1 when the series fits the budget (every point is its own bucket: exact),
    else the least power of two ``w`` with ``ceil((n - 2) / w) <= (budget - 2) // 2``.
    Grows with ``n`` and as the budget goes down; never raises.
    """
    if n <= budget:
        return 1
    buckets = max((budget - 2) // 2, 1)
    inner, width = n - 2, 1
    while -(-inner // width) > buckets:
        width *= 2
    return width


def _below(x: float, y: float) -> bool:
    """``x`` ranks strictly below ``y`` in the rule's order (NaN above ``+Inf``)."""
    if math.isnan(y):
        return not math.isnan(x)
    return not math.isnan(x) and x < y


def _extremes(chunk: Sequence[float]) -> tuple[int, int]:
    """(index of the lowest, index of the highest) value of a non-empty bucket.

    The first of equal values; NaN ranks above every number (a bucket of NaNs
    only keeps its first point). ``sum`` finds a NaN in one C loop (an
    ``inf - inf`` makes it NaN too: then the slow path finds none and gives the
    same answer as the fast one).
    """
    if not math.isnan(sum(chunk)):
        low, high = min(chunk), max(chunk)
        return chunk.index(low), chunk.index(high)
    gap = next((j for j, v in enumerate(chunk) if math.isnan(v)), -1)
    numbers = [(v, j) for j, v in enumerate(chunk) if not math.isnan(v)]
    if gap < 0:  # inf - inf, no NaN
        return min(numbers)[1], max(numbers, key=lambda p: (p[0], -p[1]))[1]
    low = min(numbers)[1] if numbers else gap
    return low, gap


#: One series' columns: steps, epochs, values and wall-clock times (``None``: none kept).
Columns: TypeAlias = "tuple[array[int], array[int], array[float], array[float] | None]"


class Summary:
    """The points of a series that left memory, kept as the rule needs them: bounded.

    Entry 0 is the series' first point; then two entries a bucket of
    :attr:`width` points (bucket ``j`` covers the absolute indices
    ``1 + j * width`` to ``(j + 1) * width``): its lowest then its highest
    point (the same point twice for a bucket of one), each with its absolute
    index, step, epoch, value and time; an index of -1 is a bucket end that is
    not known (cut by a rewind). The min/max rule composes (the extremes of a
    union of buckets are the extremes of their extremes), so two buckets merge
    into one of twice the width when the series outgrows the budget: a summary
    holds at most about ``2 * budget`` entries (28 bytes each plus the index)
    whatever the run's length. Not thread-safe (the recorder's lock).
    """

    __slots__ = ("end", "epochs", "index", "steps", "times", "values", "width")

    def __init__(self) -> None:
        #: The points each bucket covers (a power of two).
        self.width = 1
        #: One past the absolute index of the last point folded in.
        self.end = 0
        self.index: array[int] = array("q")
        self.steps: array[int] = array("q")
        self.epochs: array[int] = array("i")
        self.values: array[float] = array("d")
        self.times: array[float] = array("d")

    def __len__(self) -> int:
        """Entries held (the first point and two a bucket)."""
        return len(self.index)

    def nbytes(self) -> int:
        """Bytes held by the entries' columns."""
        return 36 * len(self.index)

    def points(self) -> tuple[array[int], array[int], array[float]]:
        """The known entries' steps, epochs and values, in step order, each point once."""
        order = sorted({i: e for e, i in enumerate(self.index) if i >= 0 and e}.items())
        if self.index and self.index[0] == 0:
            order.insert(0, (0, 0))
        return (
            array("q", (self.steps[e] for _, e in order)),
            array("i", (self.epochs[e] for _, e in order)),
            array("d", (self.values[e] for _, e in order)),
        )

    def _put(
        self,
        e: int,
        src: tuple[array[int], array[int], array[float], array[float]],
        p: int,
        index: int,
    ) -> None:
        self.index[e] = index
        self.steps[e] = src[0][p]
        self.epochs[e] = src[1][p]
        self.values[e] = src[2][p]
        self.times[e] = src[3][p]

    def _grow(self, entries: int) -> None:
        extra = entries - len(self.index)
        if extra > 0:
            self.index.extend(array("q", [-1]) * extra)
            self.steps.extend(array("q", [0]) * extra)
            self.epochs.extend(array("i", [0]) * extra)
            self.values.extend(array("d", [0.0]) * extra)
            self.times.extend(array("d", [0.0]) * extra)

    def widen(self, width: int) -> None:
        """Merge buckets pairwise until they are ``width`` points wide (a power of two)."""
        own = (self.steps, self.epochs, self.values, self.times)
        while self.width < width:
            buckets = max(len(self.index) - 1, 0) // 2
            for j in range(0, buckets, 2):
                a, b, out = 1 + 2 * j, 3 + 2 * j, 1 + j
                low, high = a, a + 1
                if j + 1 < buckets:
                    low = _lower_entry(self, low, b)
                    high = _higher_entry(self, high, b + 1)
                self._put(out, own, low, self.index[low])
                self._put(out + 1, own, high, self.index[high])
            keep = 1 + 2 * (-(-buckets // 2)) if buckets else len(self.index)
            for column in (self.index, *own):
                del column[keep:]
            self.width *= 2

    def fold(
        self,
        start: int,
        columns: tuple[array[int], array[int], array[float], array[float]],
        count: int,
        width: int,
    ) -> None:
        """Fold the first ``count`` points of ``columns`` (absolute indices from ``start``) in.

        ``start`` is :attr:`end` (points leave memory in order); the buckets are
        first widened to ``width`` (:func:`bucket_width` of the series at the
        finest budget it is sent with).
        """
        self.widen(width)
        w = self.width
        values = columns[2]
        i, stop_all = start, start + count
        if i == 0 and count:
            self._grow(1)
            self._put(0, columns, 0, 0)
            i = 1
        while i < stop_all:
            j = (i - 1) // w
            stop = min(1 + (j + 1) * w, stop_all)
            low, high = _extremes(values[i - start : stop - start])
            a = 1 + 2 * j
            self._grow(a + 2)
            for e, p, lower in ((a, low, True), (a + 1, high, False)):
                q = i - start + p
                held = self.index[e]
                v = values[q]
                if held < 0 or (_below(v, self.values[e]) if lower else _below(self.values[e], v)):
                    self._put(e, columns, q, i + p)
            i = stop
        self.end = max(self.end, stop_all)

    def truncate(self, length: int) -> None:
        """Forget the points from absolute index ``length`` on (a rewind into them).

        The bucket the cut falls in keeps only the extremes it knows before the
        cut (the others there left memory unrecorded): its lowest and highest
        are then of the points it still knows.
        """
        if length >= self.end:
            return
        self.end = length
        keep = 0 if length <= 0 else 1 + 2 * (-(-(length - 1) // self.width))
        for column in (self.index, self.steps, self.epochs, self.values, self.times):
            del column[keep:]
        for e in range(max(keep - 2, 1), len(self.index)):
            if self.index[e] >= length:
                self.index[e] = -1


def _lower_entry(s: Summary, a: int, b: int) -> int:
    """The lower of entries ``a`` (earlier) and ``b`` in the rule's order, ties to ``a``."""
    if s.index[a] < 0 or (s.index[b] >= 0 and _below(s.values[b], s.values[a])):
        return b
    return a


def _higher_entry(s: Summary, a: int, b: int) -> int:
    """The higher of entries ``a`` (earlier) and ``b`` in the rule's order, ties to ``a``."""
    if s.index[a] < 0 or (s.index[b] >= 0 and _below(s.values[a], s.values[b])):
        return b
    return a


def _picks(
    summary: Summary | None, base: int, values: Sequence[float], n: int, budget: int
) -> list[int]:
    """The kept points in order: ``p >= 0`` is in-memory point ``p``, ``~e`` summary entry ``e``."""
    if budget < MIN_POINTS:
        raise ValueError(f"a thinning budget is at least {MIN_POINTS} points, not {budget}")
    held = summary is not None and base > 0
    if not held and n <= budget:
        return list(range(n))
    if n == 0:
        return []
    w = bucket_width(n, budget)
    if held:
        assert summary is not None
        w = max(w, summary.width)
        sw, entries, index, svalues = summary.width, len(summary), summary.index, summary.values
        picks = [~0] if entries and index[0] == 0 else []
    else:
        sw, entries, index, svalues = 1, 0, array("q"), array("d")
        picks = [0 - base]
    last_in_memory = n - 1 >= base
    inner_stop = n - 1 if last_in_memory else n
    j = 0
    while 1 + j * w < inner_stop:
        start = 1 + j * w
        stop = min(start + w, inner_stop)
        low: tuple[int, int, float] | None = None  # (absolute index, pick, value)
        high: tuple[int, int, float] | None = None
        if held and start < base:
            first = 1 + 2 * ((start - 1) // sw)
            last = min(1 + 2 * ((min(stop, base) - 2) // sw), entries - 2)
            for e in range(first, last + 1, 2):
                if index[e] >= 0 and (low is None or _below(svalues[e], low[2])):
                    low = (index[e], ~e, svalues[e])
                if index[e + 1] >= 0 and (high is None or _below(high[2], svalues[e + 1])):
                    high = (index[e + 1], ~(e + 1), svalues[e + 1])
        if stop > base:
            m0 = max(start, base) - base
            lo, hi = _extremes(values[m0 : stop - base])
            if low is None or _below(values[m0 + lo], low[2]):
                low = (base + m0 + lo, m0 + lo, values[m0 + lo])
            if high is None or _below(high[2], values[m0 + hi]):
                high = (base + m0 + hi, m0 + hi, values[m0 + hi])
        pair = dict(sorted((p[0], p[1]) for p in (high, low) if p is not None))
        picks.extend(pair.values())  # in index order, a point that is both once
        j += 1
    if last_in_memory and n - 1 > 0:
        picks.append(n - 1 - base)
    return picks


def keep_indices(values: Sequence[float], budget: int) -> Sequence[int]:
    """Increasing indices of the points of ``values`` that the thinning rule keeps.

    Args:
        values: the series' values in step order (NaN and ±Inf allowed).
        budget: the most points to keep (>= :data:`MIN_POINTS`).

    Returns:
        ``range(len(values))`` when the series fits the budget, else at most
        ``budget`` increasing indices: 0, ``len(values) - 1`` and each bucket's
        lowest and highest value (see the module's docstring).

    Raises:
        ValueError: ``budget`` is below :data:`MIN_POINTS`.
    """
    if budget >= MIN_POINTS and len(values) <= budget:
        return range(len(values))
    return _picks(None, 0, values, len(values), budget)


def thin_series(
    summary: Summary | None,
    base: int,
    columns: tuple[array[int], array[int], array[float], array[float] | None],
    budget: int,
) -> Columns:
    """A series thinned by the rule, from its summary and the points still in memory.

    Args:
        summary: the points before ``base`` that left memory (``None``: none did).
        base: the absolute index of the first point in memory.
        columns: the in-memory steps, epochs, values and times (or ``None``).
        budget: the most points to keep (>= :data:`MIN_POINTS`).

    Returns:
        New arrays holding the kept points, the same as :func:`thin_columns`
        of the whole series would give (but for a bucket a rewind cut into
        the points that left memory: see :meth:`Summary.truncate`).

    Raises:
        ValueError: ``budget`` is below :data:`MIN_POINTS`.
    """
    steps, epochs, values, times = columns
    if summary is None:
        base = 0  # nothing summarised: the rule over what is in memory
    picks = _picks(summary, base, values, base + len(steps), budget)
    if summary is None and len(picks) == len(steps):
        return steps[:], epochs[:], values[:], None if times is None else times[:]
    out: Columns = (
        array(steps.typecode),
        array(epochs.typecode),
        array(values.typecode),
        None if times is None else array("d"),
    )
    for pick in picks:
        if pick >= 0:
            out[0].append(steps[pick])
            out[1].append(epochs[pick])
            out[2].append(values[pick])
            if out[3] is not None and times is not None:
                out[3].append(times[pick])
        else:
            assert summary is not None
            e = ~pick
            out[0].append(summary.steps[e])
            out[1].append(summary.epochs[e])
            out[2].append(summary.values[e])
            if out[3] is not None:
                out[3].append(summary.times[e])
    return out


def thin_columns(
    steps: array[int],
    epochs: array[int],
    values: array[float],
    times: array[float] | None,
    budget: int,
) -> Columns:
    """One series' columns thinned alike: the points :func:`keep_indices` keeps.

    Args:
        steps: the series' steps, in order.
        epochs: its epochs, one a point.
        values: its values, one a point.
        times: its wall-clock times (seconds since the Unix epoch), or ``None``.
        budget: the most points to keep (>= :data:`MIN_POINTS`).

    Returns:
        New arrays (``steps, epochs, values, times``) holding the kept points:
        copies of the whole columns when the series fits the budget.

    Raises:
        ValueError: ``budget`` is below :data:`MIN_POINTS`.
    """
    return thin_series(None, 0, (steps, epochs, values, times), budget)


def budget_for(lengths: Sequence[int], ratio: float) -> int | None:
    """The points-per-series budget that keeps about ``ratio`` of the points sent.

    The longest series are cut first (water-filling): the largest ``b`` such
    that ``sum(min(n, b) for n in lengths) <= ratio * sum(lengths)``, so short
    series (a validation curve) keep every point while long ones give way.

    Args:
        lengths: the points each series had in the body that did not fit.
        ratio: the share of them the next body may hold (0 < ratio < 1).

    Returns:
        The budget, or ``None`` when it would be under :data:`MIN_POINTS` or
        would not cut any series (nothing left to thin). Never raises.
    """
    longest = max(lengths, default=0)
    target = ratio * sum(lengths)
    low, high = 0, longest - 1  # the answer lies in [low, high]; 0 always fits
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(n, mid) for n in lengths) <= target:
            low = mid
        else:
            high = mid - 1
    return low if low >= MIN_POINTS else None


#: The share of a size known to fit that a resized body aims at (room for wider numbers).
_MARGIN = 0.9


def next_budget(
    lengths: Sequence[int], body_bytes: int | None, limit_bytes: int | None
) -> int | None:
    """The points-per-series budget after a body of series ``lengths`` did not fit.

    With a size known to fit (``limit_bytes``, under ``body_bytes``) the next
    body aims at 90 % of it, the points cut in proportion; without one, the
    points sent are halved (so each further refusal halves them again).

    Args:
        lengths: the points each series had in the refused body.
        body_bytes: the refused body's size, bytes, or ``None``.
        limit_bytes: a body size known to fit, bytes, or ``None``.

    Returns:
        The budget (:func:`budget_for`), or ``None`` when nothing is left to thin.
        Never raises.
    """
    ratio = 0.5
    if body_bytes and limit_bytes and limit_bytes < body_bytes:
        ratio = _MARGIN * limit_bytes / body_bytes
    return budget_for(lengths, ratio)
