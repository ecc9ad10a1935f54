"""``time_series_metrics`` exclusions (``!pattern``), the adapters' default lists, and the
one-per-name log of metrics kept as current values only."""

from __future__ import annotations

from typing import Any

import pytest

from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._record._selection import MAX_SCALAR_NOTES, SeriesSelector
from trainreport.integrations import DEFAULT_TIME_SERIES_METRICS
from trainreport.integrations._defaults import COUNTER_EXCLUSIONS
from trainreport.testing import capture_events


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured events called ``name``."""
    return [e for e in events if e["event"] == name]


# --------------------------------------------------------------------------- exclusion rules


def test_an_exclusion_keeps_matching_names_as_current_values() -> None:
    """``["*", "!*_runtime"]``: every metric is charted but runtimes."""
    selector = SeriesSelector(["*", "!*_runtime"])
    assert [True, False, True] == [
        selector.is_series(n) for n in ["train_loss", "val_runtime", "val_loss"]
    ]


def test_the_last_matching_entry_decides() -> None:
    """A later plain pattern re-includes a name an earlier exclusion left out (gitignore rule)."""
    selector = SeriesSelector(["*", "!*_runtime", "val_runtime"])
    assert [True, False, True] == [
        selector.is_series(n) for n in ["train_loss", "eval_runtime", "val_runtime"]
    ]


def test_an_exclusion_after_an_inclusion_wins_over_it() -> None:
    """``["val_*", "!val_runtime"]``: only the later exclusion applies to ``val_runtime``."""
    selector = SeriesSelector(["val_*", "!val_runtime"])
    assert [True, False, False] == [
        selector.is_series(n) for n in ["val_loss", "val_runtime", "train_loss"]
    ]


def test_a_list_starting_with_an_exclusion_starts_from_every_metric() -> None:
    """``["!*_runtime"]`` alone charts everything but runtimes (an implicit ``*`` in front)."""
    selector = SeriesSelector(["!*_runtime"])
    assert [True, False] == [selector.is_series(n) for n in ["train_loss", "val_runtime"]]


def test_a_list_starting_with_a_plain_pattern_starts_from_nothing() -> None:
    """A name no entry matches is a scalar when the first entry is a plain pattern."""
    selector = SeriesSelector(["train_*", "!train_lr"])
    assert [True, False, False] == [
        selector.is_series(n) for n in ["train_loss", "train_lr", "val_loss"]
    ]


def test_a_never_matched_exclusion_is_warned_about_with_its_bang() -> None:
    """An exclusion the user wrote that matched nothing is reported like any pattern."""
    selector = SeriesSelector(["*", "!*_runtim"])
    selector.is_series("val_runtime")
    with capture_events() as events:
        selector.log_unmatched(["val_runtime"])
    assert ["!*_runtim"] == [
        e["pattern"] for e in events_named(events, "trainreport.pattern_never_matched")
    ]


def test_a_shadowed_exclusion_still_counts_as_matched() -> None:
    """Every entry is tried, so an exclusion overridden by a later entry is not 'never matched'."""
    selector = SeriesSelector(["*", "!val_*", "val_loss"])
    selector.is_series("val_loss")
    assert () == selector.unmatched_patterns()


# --------------------------------------------------------------------------- the log


def test_each_scalar_is_logged_once_with_its_rule_and_the_charted_names() -> None:
    """A name kept as a current value is logged once: which rule decided, what is charted."""
    selector = SeriesSelector(["*", "!*_runtime"])
    with capture_events() as events:
        for name in ["train_loss", "val_loss", "val_runtime"]:
            selector.is_series(name)
    (event,) = events_named(events, "trainreport.metric_kept_as_current_value")
    assert ("val_runtime", "!*_runtime", ["train_loss", "val_loss"], "info") == (
        event["name"],
        event["rule"],
        event["charted"],
        event["log_level"],
    )


def test_a_scalar_no_pattern_matched_says_so() -> None:
    """A name left out because no entry matched it names that as the rule."""
    selector = SeriesSelector(["train_*"])
    with capture_events() as events:
        selector.is_series("val_loss")
    (event,) = events_named(events, "trainreport.metric_kept_as_current_value")
    assert "no pattern matched" == event["rule"]


def test_the_scalar_log_is_bounded() -> None:
    """At most MAX_SCALAR_NOTES names are logged, then one limit event, then nothing."""
    selector = SeriesSelector([])
    with capture_events() as events:
        for i in range(MAX_SCALAR_NOTES + 30):
            selector.is_series(f"train_m{i}")
    assert (MAX_SCALAR_NOTES, 1) == (
        len(events_named(events, "trainreport.metric_kept_as_current_value")),
        len(events_named(events, "trainreport.metric_kept_as_current_value_limit")),
    )


def test_the_charted_list_beside_each_event_is_bounded() -> None:
    """The ``charted`` field lists at most 20 names however many are charted."""
    selector = SeriesSelector(["train_*"])
    with capture_events() as events:
        for i in range(40):
            selector.is_series(f"train_m{i:02d}")
        selector.is_series("val_loss")
    (event,) = events_named(events, "trainreport.metric_kept_as_current_value")
    assert [f"train_m{i:02d}" for i in range(20)] == event["charted"]


# --------------------------------------------------------------------------- adapter defaults

DIAGNOSTIC = [
    "train_loss",
    "train_grad_norm",
    "train_learning_rate",
    "val_loss",
    "val_accuracy",
    "train_reward",
    "train_kl_penalty",
    "timing_train_total_step_time",
]
COUNTERS = [
    "val_runtime",
    "val_samples_per_second",
    "val_steps_per_second",
    "train_num_input_tokens_seen",
    "performance_tokens_per_sec_per_gpu",
    "summary_total_flos",
    "train_mem_allocated_gb",
    "train_tps",
    "train_num_valid_samples",
    "train_global_valid_toks",
    "train_global_valid_seqs",
]


@pytest.mark.parametrize("adapter", sorted(DEFAULT_TIME_SERIES_METRICS))
def test_every_adapter_default_charts_diagnostics_and_keeps_counters_current(
    adapter: str,
) -> None:
    """Each adapter's default: losses, rates, rewards, timings charted; counters current only."""
    selector = SeriesSelector(None, default=DEFAULT_TIME_SERIES_METRICS[adapter])
    assert ([True] * len(DIAGNOSTIC), [False] * len(COUNTERS)) == (
        [selector.is_series(n) for n in DIAGNOSTIC],
        [selector.is_series(n) for n in COUNTERS],
    )


@pytest.mark.parametrize("counter", [p[1:] for p in COUNTER_EXCLUSIONS])
def test_each_counter_exclusion_is_needed(counter: str) -> None:
    """Every counter pattern of the defaults leaves out a name no other pattern does."""
    example = counter.replace("*", "x")
    others = [p for p in COUNTER_EXCLUSIONS if p[1:] != counter]
    assert (False, True) == (
        SeriesSelector(["*", *COUNTER_EXCLUSIONS]).is_series(example),
        SeriesSelector(["*", *others]).is_series(example),
    )


def test_only_the_huggingface_default_leaves_out_the_summary() -> None:
    """The end-of-training summary is a current value under the HF default."""
    assert [False, True] == [
        SeriesSelector(None, default=DEFAULT_TIME_SERIES_METRICS[a]).is_series("summary_train_loss")
        for a in ("huggingface", "lightning")
    ]


def test_star_still_charts_every_metric_whatever_the_adapter_default() -> None:
    """A user's ``["*"]`` replaces the adapter's default whole."""
    selector = SeriesSelector(["*"], default=DEFAULT_TIME_SERIES_METRICS["huggingface"])
    assert all(selector.is_series(n) for n in [*DIAGNOSTIC, *COUNTERS])


def run_with_default(config: ReportingConfig, *, started_before: bool) -> dict[str, Any]:
    """Report a counter and a loss through a reporter given the HF default; the stored details."""
    sink = MemorySink()
    reporter = Reporter(sink, config)
    if started_before:
        reporter.start()
    applied = reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS["huggingface"])
    reporter.start()
    reporter.report_validation(step=1, metrics={"loss": 0.5, "runtime": 3.0})
    assert reporter.close(10)
    assert applied is not started_before
    task = sink.task
    assert task is not None
    details: dict[str, Any] = task["status_details"]
    return details


def test_reporter_uses_the_adapter_default_when_the_config_says_none() -> None:
    """Through a real reporter: the default keeps ``val_runtime`` as a current value only."""
    details = run_with_default(ReportingConfig(), started_before=False)
    assert (["val_loss"], 3.0) == (sorted(details["metrics"]), details["val_runtime"])


def test_the_users_list_wins_over_the_adapter_default() -> None:
    """``time_series_metrics=["*"]`` in the config charts the counter too."""
    details = run_with_default(ReportingConfig(time_series_metrics=["*"]), started_before=False)
    assert ["val_loss", "val_runtime"] == sorted(details["metrics"])


def test_the_default_cannot_change_a_started_reporter() -> None:
    """After start the choice is made: the default is refused (returns False)."""
    details = run_with_default(ReportingConfig(), started_before=True)
    assert ["val_loss", "val_runtime"] == sorted(details["metrics"])


def test_an_exclusion_can_be_given_from_the_environment() -> None:
    """``TRAINREPORT_TIME_SERIES_METRICS='*,!*_runtime'`` is the list with its exclusion."""
    config = ReportingConfig.from_env({"TRAINREPORT_TIME_SERIES_METRICS": "*, !*_runtime"})
    selector = SeriesSelector(config.time_series_metrics)
    assert (("*", "!*_runtime"), False) == (
        config.time_series_metrics,
        selector.is_series("val_runtime"),
    )
