"""Tests for trainreport._record._selection: which names keep a history (docs/design.md#metrics)."""

# House style asserts `expected == actual`, which SIM300 calls a Yoda condition.

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from trainreport._record._selection import SeriesSelector
from trainreport.testing import capture_events

# --------------------------------------------------------------------------- SeriesSelector


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured events called ``name``."""
    return [e for e in events if e["event"] == name]


def test_none_means_every_metric_by_default() -> None:
    """time_series_metrics=None keeps a history of every metric."""
    selector = SeriesSelector(None)
    assert (("*",), True, True) == (
        selector.patterns,
        selector.is_series("train_loss"),
        selector.is_series("system_gpu"),
    )


def test_none_means_the_adapters_default() -> None:
    """With an adapter's default list, None selects only what the default matches."""
    selector = SeriesSelector(None, default=("train_loss", "val_*"))
    assert [True, True, False] == [
        selector.is_series(n) for n in ["train_loss", "val_acc", "train_learning_rate"]
    ]


def test_star_means_every_metric() -> None:
    """['*'] keeps a history of every metric."""
    selector = SeriesSelector(["*"])
    assert [True, True] == [selector.is_series(n) for n in ["train_loss", "test_x"]]


def test_empty_list_means_no_history() -> None:
    """[] keeps no history at all, and has no pattern to warn about."""
    selector = SeriesSelector([])
    assert ((), False, ()) == (
        selector.patterns,
        selector.is_series("train_loss"),
        selector.unmatched_patterns(),
    )


def test_bare_string_is_one_pattern() -> None:
    """A bare str is one pattern, not a list of one-character patterns."""
    selector = SeriesSelector("val_*")
    assert (("val_*",), True, False, False) == (
        selector.patterns,
        selector.is_series("val_loss"),
        selector.is_series("v"),
        selector.is_series("train_loss"),
    )


def test_patterns_match_case_sensitively() -> None:
    """Matching uses fnmatchcase: 'Train_*' does not match 'train_loss'."""
    selector = SeriesSelector(["Train_*"])
    assert (False, True) == (selector.is_series("train_loss"), selector.is_series("Train_loss"))


def test_glob_features_are_supported() -> None:
    """Character classes and '?' work as in fnmatch."""
    selector = SeriesSelector(["train_[lg]?ss", "val_*acc"])
    assert [True, True, False, True, False] == [
        selector.is_series(n)
        for n in ["train_loss", "train_gass", "train_moss", "val_top1_acc", "val_acc_top1"]
    ]


def test_repeated_patterns_are_kept_once() -> None:
    """A pattern listed twice is one pattern (and at most one warning)."""
    assert ("a*", "b") == SeriesSelector(["a*", "b", "a*"]).patterns


def test_non_string_entries_are_dropped_with_one_warning_each() -> None:
    """Non-string entries are dropped, one warning each; the usable ones stay."""
    with capture_events() as events:
        selector = SeriesSelector(["train_*", 3, None, "val_loss"])
    dropped = events_named(events, "trainreport.config_pattern_dropped")
    assert [(1, "int", "warning"), (2, "NoneType", "warning")] == [
        (e["index"], e["type"], e["log_level"]) for e in dropped
    ]
    assert (("train_*", "val_loss"), [], False) == (
        selector.patterns,
        events_named(events, "trainreport.config_patterns_unusable"),
        selector.is_series("test_acc"),
    )


def test_all_entries_unusable_means_every_metric() -> None:
    """If entries were given but none is a string, every metric gets a history, with a warning."""
    with capture_events() as events:
        selector = SeriesSelector([3, None])
    assert 2 == len(events_named(events, "trainreport.config_pattern_dropped"))
    assert 1 == len(events_named(events, "trainreport.config_patterns_unusable"))
    assert (True, True) == (selector.is_series("train_loss"), selector.is_series("x"))


@pytest.mark.parametrize("patterns", [5, 1.5, True, b"train_*", object()])
def test_non_iterable_patterns_mean_every_metric(patterns: object) -> None:
    """Any other non-list input is treated like all-unusable: every metric, one warning."""
    with capture_events() as events:
        selector = SeriesSelector(patterns)
    assert 1 == len(events_named(events, "trainreport.config_patterns_unusable"))
    assert (True, ()) == (selector.is_series("train_loss"), selector.unmatched_patterns())


def test_iterable_that_fails_midway_means_every_metric() -> None:
    """An iterable that raises while being read is treated like all-unusable."""

    def broken() -> Iterator[str]:
        yield "train_*"
        raise RuntimeError("broken config source")

    with capture_events() as events:
        selector = SeriesSelector(broken())
    assert 1 == len(events_named(events, "trainreport.config_patterns_unusable"))
    assert True is selector.is_series("val_loss")


def test_tuple_and_generator_inputs_are_lists_of_patterns() -> None:
    """Any iterable of strings is accepted as the pattern list."""
    assert ("a", "b") == SeriesSelector(("a", "b")).patterns
    assert ("a", "b") == SeriesSelector(p for p in ["a", "b"]).patterns


def test_never_matched_patterns_are_warned_about_naming_arrived_metrics() -> None:
    """At close, each pattern that never matched gets one warning listing the arrived names."""
    selector = SeriesSelector(["train_*", "val_acc*", "tset_*"])
    arrived = ["val_loss", "train_loss", "train_lr"]
    for name in arrived:
        selector.is_series(name)
    with capture_events() as events:
        selector.log_unmatched(arrived)
    warned = events_named(events, "trainreport.pattern_never_matched")
    expected_arrived = ["train_loss", "train_lr", "val_loss"]
    assert [
        ("val_acc*", expected_arrived, 3, "warning"),
        ("tset_*", expected_arrived, 3, "warning"),
    ] == [(e["pattern"], e["arrived"], e["arrived_count"], e["log_level"]) for e in warned]


def test_never_matched_warning_lists_at_most_20_sorted_names() -> None:
    """The arrived list is sorted and cut at 20 names; the full count is a field."""
    selector = SeriesSelector(["nothing_*"])
    arrived = [f"train_m{i:02d}" for i in reversed(range(25))]
    for name in arrived:
        selector.is_series(name)
    with capture_events() as events:
        selector.log_unmatched(arrived)
    (warned,) = events_named(events, "trainreport.pattern_never_matched")
    assert ([f"train_m{i:02d}" for i in range(20)], 25) == (
        warned["arrived"],
        warned["arrived_count"],
    )


def test_pattern_shadowed_by_an_earlier_one_still_counts_as_matched() -> None:
    """A pattern matching a name that an earlier pattern already selected is not 'never matched'."""
    selector = SeriesSelector(["*", "train_loss", "val_*"])
    selector.is_series("train_loss")
    assert ("val_*",) == selector.unmatched_patterns()


def test_every_pattern_is_unmatched_before_any_metric() -> None:
    """Before any name is checked, every user-given pattern is unmatched."""
    assert ("a", "b*") == SeriesSelector(["a", "b*"]).unmatched_patterns()


def test_nothing_is_warned_when_every_pattern_matched() -> None:
    """No never-matched warning when each pattern selected something."""
    selector = SeriesSelector(["train_*"])
    selector.is_series("train_loss")
    with capture_events() as events:
        selector.log_unmatched(["train_loss"])
    assert [] == events_named(events, "trainreport.pattern_never_matched")


@pytest.mark.parametrize("selector_args", [(None, ("val_*",)), (None, ("*",)), ([3], ("*",))])
def test_default_and_fallback_patterns_are_never_warned_about(
    selector_args: tuple[object, tuple[str, ...]],
) -> None:
    """Only patterns the user wrote are reported as never matched, not defaults or fallbacks."""
    patterns, default = selector_args
    selector = SeriesSelector(patterns, default=default)
    with capture_events() as events:
        selector.log_unmatched([])
    assert ((), []) == (
        selector.unmatched_patterns(),
        events_named(events, "trainreport.pattern_never_matched"),
    )
