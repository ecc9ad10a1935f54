"""The thinning rule: a series at reduced resolution that still covers the whole run.

Full-state mode sends every curve whole in one body (docs/design.md#wire-modes).
When that body no longer fits the destination's limit (a 413 with nothing left
to split, or ``HttpSink(max_body_bytes=...)``), the reporter sends each series
thinned to a budget of points instead of freezing the curves (docs/engine.md,
"Thinning under a body limit"). The rule, per series of ``n`` points and a
budget of ``b`` points:

- ``n <= b``: every point, unchanged (thinning is exact below the limit);
- else the first and the last point are kept, and the points between them are
  cut into ``(b - 2) // 2`` buckets of consecutive points (equal counts, the
  remainder spread one a bucket); each bucket keeps its lowest and its highest
  value (the first of equals), so a spike survives whatever the resolution.
  A NaN (a diverging loss, sent as JSON ``null``) ranks above ``+Inf``: a
  bucket that holds one keeps it as its highest, so the gap still shows.
- The kept points are in the series' order (step order), none twice, and
  never more than ``b``; the global minimum and maximum are always among them
  (each is its bucket's, or the first or the last point).

Source: the M4 aggregation (Jugel et al., "M4: A Visualization-Oriented Time
Series Data Aggregation", VLDB 2014) keeps the first, last, minimum and maximum
of each pixel column so a line chart drawn from the thinned series differs
from the full one by at most a pixel; keeping only the extremes (and the
series' ends) is its min/max variant, the one TensorBoard and wandb's
"full fidelity" mode use for the same reason (a spike must not vanish at low
resolution). The reference server's ``/series?max_points=`` thins the same
way (``server/_page.py``), keeping one more point per bucket for a gap.

Pure: no I/O, no state. The latest value of a series is its last point, so
it stays exact at every resolution.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import TypeAlias

__all__ = ["MIN_POINTS", "Columns", "budget_for", "keep_indices", "next_budget", "thin_columns"]

#: The smallest budget that keeps a series' first and last point and one bucket's extremes.
MIN_POINTS = 4


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
    if budget < MIN_POINTS:
        raise ValueError(f"a thinning budget is at least {MIN_POINTS} points, not {budget}")
    n = len(values)
    if n <= budget:
        return range(n)
    inner = n - 2
    buckets = (budget - 2) // 2
    keep = [0]
    for i in range(buckets):
        start = 1 + i * inner // buckets
        stop = 1 + (i + 1) * inner // buckets
        low, high = _extremes(values[start:stop])
        keep.append(start + low)
        if high != low:
            keep.append(start + high)
        if high < low:  # the pair in index order
            keep[-2], keep[-1] = keep[-1], keep[-2]
    keep.append(n - 1)
    return keep


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
    keep = keep_indices(values, budget)
    if isinstance(keep, range):
        return steps[:], epochs[:], values[:], None if times is None else times[:]
    return (
        array(steps.typecode, map(steps.__getitem__, keep)),
        array(epochs.typecode, map(epochs.__getitem__, keep)),
        array(values.typecode, map(values.__getitem__, keep)),
        None if times is None else array(times.typecode, map(times.__getitem__, keep)),
    )


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
