"""The thinning rule (``_record/_thinning.py``): first, last, bucket extremes; exact below budget.

Properties over any series and budget (Hypothesis), plus the cases a chart
user cares about by name: a spike survives, a NaN gap survives, the ends stay.
"""

from __future__ import annotations

import math
from array import array
from typing import TypeAlias

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainreport._record._thinning import (
    MIN_POINTS,
    Summary,
    bucket_width,
    budget_for,
    keep_indices,
    thin_columns,
    thin_series,
)

values_lists = st.lists(
    st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=0, max_size=400
)
budgets = st.integers(MIN_POINTS, 120)


def _rank(v: float) -> float:
    """The rule's order: NaN above +Inf."""
    return math.inf if math.isnan(v) else v


@given(values_lists, budgets)
def test_never_more_than_the_budget_in_order_and_no_duplicates(
    values: list[float], budget: int
) -> None:
    """At most ``budget`` indices, strictly increasing (step order, none twice)."""
    keep = list(keep_indices(array("d", values), budget))
    assert len(keep) <= budget
    assert sorted(set(keep)) == keep
    assert all(0 <= i < len(values) for i in keep)


@given(values_lists, budgets)
def test_exact_when_the_series_fits_the_budget(values: list[float], budget: int) -> None:
    """A series of at most ``budget`` points is kept whole."""
    keep = list(keep_indices(array("d", values), budget))
    if len(values) <= budget:
        assert list(range(len(values))) == keep
    else:
        assert len(keep) < len(values)


@given(values_lists.filter(lambda v: len(v) > 0), budgets)
def test_first_last_minimum_and_maximum_are_kept(values: list[float], budget: int) -> None:
    """The first and last point, and the run's lowest and highest value, always survive."""
    keep = set(keep_indices(array("d", values), budget))
    assert {0, len(values) - 1} <= keep
    numbers = [v for v in values if not math.isnan(v)]
    kept_values = [values[i] for i in keep]
    if numbers:
        assert min(numbers) in kept_values
    if any(math.isnan(v) for v in values):
        assert any(math.isnan(v) for v in kept_values)  # NaN ranks highest: its gap shows
    elif numbers:
        assert max(numbers) in kept_values


@given(values_lists.filter(lambda v: len(v) > 2), budgets)
def test_each_bucket_keeps_its_extremes(values: list[float], budget: int) -> None:
    """Between two kept points, no skipped point is outside their bucket's range of values.

    Stated on the buckets themselves: each bucket (``bucket_width`` points,
    aligned at index 1, the last one shorter) keeps its lowest and highest value
    (NaN highest) among its kept points.
    """
    n = len(values)
    if n <= budget:
        return
    keep = set(keep_indices(array("d", values), budget))
    width = bucket_width(n, budget)
    assert (budget - 2) // 2 >= -(-(n - 2) // width)  # no more buckets than the budget holds
    for start in range(1, n - 1, width):
        stop = min(start + width, n - 1)
        ranks = [_rank(values[j]) for j in range(start, stop)]
        kept = [_rank(values[j]) for j in range(start, stop) if j in keep]
        assert min(ranks) == min(kept)
        assert max(ranks) == max(kept)


def test_a_spike_survives_a_hundredfold_thinning() -> None:
    """One loss spike among 10,000 points is kept at a budget of 100."""
    values = array("d", (1.0 / (1 + i) for i in range(10_000)))
    values[6_543] = 50.0
    keep = keep_indices(values, 100)
    assert 6_543 in keep
    assert (0, 9_999) == (keep[0], keep[-1])
    assert 100 >= len(keep)


def test_columns_are_thinned_alike_and_the_last_value_is_exact() -> None:
    """Steps, epochs, values and times keep the same points; the latest point is the last one."""
    n = 1_000
    steps = array("q", range(1, n + 1))
    epochs = array("i", (1 + i // 100 for i in range(n)))
    values = array("d", (float(i % 37) for i in range(n)))
    times = array("d", (1e9 + i for i in range(n)))
    out_steps, out_epochs, out_values, out_times = thin_columns(steps, epochs, values, times, 50)
    assert out_times is not None
    assert len(out_steps) == len(out_epochs) == len(out_values) == len(out_times) <= 50
    assert (1, n) == (out_steps[0], out_steps[-1])
    assert values[-1] == out_values[-1]
    for i, e, v, t in zip(out_steps, out_epochs, out_values, out_times, strict=True):
        assert (epochs[i - 1], values[i - 1], times[i - 1]) == (e, v, t)


def test_below_the_budget_columns_are_copied_unchanged() -> None:
    """Exact below the budget: equal columns (copies), ``None`` kept for an absent column."""
    steps, epochs, values = array("q", [1, 2, 3]), array("i", [1, 1, 1]), array("d", [3, 2, 1])
    assert (steps, epochs, values, None) == thin_columns(steps, epochs, values, None, 4)


def test_a_budget_below_the_minimum_is_refused() -> None:
    """A budget that cannot hold the ends and one bucket's extremes is a ValueError."""
    with pytest.raises(ValueError, match="at least 4"):
        keep_indices(array("d", [1.0] * 10), 3)


@given(st.lists(st.integers(0, 5_000), min_size=1, max_size=30), st.floats(0.01, 0.99))
def test_budget_for_keeps_at_most_the_ratio_and_cuts_the_longest_first(
    lengths: list[int], ratio: float
) -> None:
    """The budget keeps at most ``ratio`` of the points; ``None`` when under the minimum."""
    budget = budget_for(lengths, ratio)
    if budget is None:
        assert (
            sum(min(n, MIN_POINTS) for n in lengths) > ratio * sum(lengths)
            or max(lengths) <= MIN_POINTS
        )
        return
    assert MIN_POINTS <= budget < max(lengths)
    assert sum(min(n, budget) for n in lengths) <= ratio * sum(lengths)
    assert sum(min(n, budget + 1) for n in lengths) > ratio * sum(lengths)


# --- the summary of points that left memory (docs/engine.md, "Memory") -----------------

#: One series' four columns.
Cols: TypeAlias = "tuple[array[int], array[int], array[float], array[float]]"


def _columns(values: list[float]) -> Cols:
    """Steps 1.., epochs by hundreds, the values, times 1e9 + index."""
    n = len(values)
    return (
        array("q", range(1, n + 1)),
        array("i", (1 + i // 100 for i in range(n))),
        array("d", values),
        array("d", (1e9 + i for i in range(n))),
    )


def _same(a: object, b: object) -> bool:
    """Equal columns, NaN equal to NaN."""
    return repr(a) == repr(b)


def _tail(columns: Cols, base: int) -> Cols:
    """The columns from index ``base`` on."""
    return columns[0][base:], columns[1][base:], columns[2][base:], columns[3][base:]


def _fold_prefixes(
    columns: Cols,
    cuts: list[int],
    budgets: list[int],
) -> tuple[Summary, int]:
    """Fold the points before each cut into a summary, as ``MetricStore.release`` does."""
    summary, base = Summary(), 0
    for asked, budget in zip(cuts, budgets, strict=False):
        cut = min(asked, len(columns[0]) - 1)  # the newest point stays in memory
        if cut > base:
            summary.fold(base, _tail(columns, base), cut - base, bucket_width(cut + 1, budget))
            base = cut
    return summary, base


@given(
    values_lists.filter(lambda v: len(v) > 0),
    budgets,
    st.lists(st.integers(1, 400), max_size=6).map(sorted),
    st.lists(st.integers(0, 80), min_size=6, max_size=6),
)
def test_a_summary_and_the_points_in_memory_thin_as_the_whole_series_does(
    values: list[float], budget: int, cuts: list[int], extra: list[int]
) -> None:
    """Whatever left memory when, at a budget at least the body's: the same points are sent.

    The min/max rule composes (the extremes of a union of buckets are the
    extremes of their extremes), so a summary folded at a finer budget gives
    the body the whole series would (first of equals, NaN highest).
    """
    columns = _columns(values)
    summary, base = _fold_prefixes(columns, cuts, [budget + e for e in extra])
    assert _same(
        thin_columns(*columns, budget),
        thin_series(summary if base else None, base, _tail(columns, base), budget),
    )


@given(st.integers(1, 20_000), budgets)
def test_a_summary_holds_at_most_twice_the_budget_whatever_the_length(n: int, budget: int) -> None:
    """Buckets merge pairwise as the series grows: the entries stay under ``2 * budget``."""
    columns = _columns([float(i % 97) for i in range(n)])
    summary, _ = _fold_prefixes(columns, [*range(256, n, 256), n - 1], [budget] * n)
    assert len(summary) <= 2 * budget


@given(
    values_lists.filter(lambda v: len(v) > 3),
    budgets,
    st.integers(1, 400),
    st.integers(1, 400),
)
def test_a_rewind_into_a_summary_keeps_the_rule_but_for_the_bucket_it_cuts(
    values: list[float], budget: int, released: int, cut: int
) -> None:
    """Cut at absolute index ``cut`` below the summary's end: at most the budget, in order.

    The points sent are points of the series as it now is (first and last
    kept); cut at a bucket's start, with buckets as wide as its own, they are
    exactly its thinning.
    """
    columns = _columns(values)
    summary, base = _fold_prefixes(columns, [released], [budget])
    if not 1 <= cut < base:
        return
    summary.truncate(cut)
    new_point = (array("q", [10_000]), array("i", [9]), array("d", [-1.0]), array("d", [2e9]))
    kept = thin_series(summary, cut, new_point, budget)
    whole: Cols = (
        columns[0][:cut] + new_point[0],
        columns[1][:cut] + new_point[1],
        columns[2][:cut] + new_point[2],
        columns[3][:cut] + new_point[3],
    )
    pairs = list(zip(whole[0], whole[2], strict=True))
    sent = list(zip(kept[0], kept[2], strict=True))
    assert len(sent) <= budget
    assert (1, 10_000) == (sent[0][0], sent[-1][0])
    assert sorted({s for s, _ in sent}) == [s for s, _ in sent]
    assert all(p in pairs or math.isnan(p[1]) for p in sent)
    if (cut - 1) % summary.width == 0 and summary.width == bucket_width(cut + 1, budget):
        assert _same(thin_columns(*whole, budget), kept)
