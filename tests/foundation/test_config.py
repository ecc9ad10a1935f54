"""Tests for ReportingConfig: direct construction, strict and lenient parsing, environment."""

# The house style writes asserts as ``expected == actual``, which SIM300 flags.

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trainreport._reporting_config import ENV_PREFIX, ReportingConfig
from trainreport.exceptions import ConfigError
from trainreport.testing import capture_events

FIELD_NAMES = [field.name for field in attrs.fields(ReportingConfig)]
DURATION_FIELDS = [
    "min_report_interval_seconds",
    "heartbeat_seconds",
    "backoff_initial_seconds",
    "backoff_max_seconds",
    "rejected_backoff_seconds",
    "close_timeout_seconds",
    "close_retry_max_seconds",
    "close_unanswered_seconds",
    "atexit_timeout_seconds",
    "unsent_warning_seconds",
    "journal_interval_seconds",
    "journal_fsync_seconds",
]
COUNT_FIELDS = ["max_metric_names", "max_queue_bytes", "drain_queue_depth"]
FLOAT_FIELDS = [*DURATION_FIELDS, "backoff_multiplier", "backoff_jitter"]
NUMBER_FIELDS = [*FLOAT_FIELDS, *COUNT_FIELDS]

DOCUMENTED_DEFAULTS: dict[str, object] = {
    "min_report_interval_seconds": 10.0,
    "heartbeat_seconds": 60.0,
    "time_series_metrics": None,
    "max_metric_names": 1000,
    "backoff_initial_seconds": 1.0,
    "backoff_max_seconds": 60.0,
    "backoff_multiplier": 2.0,
    "backoff_jitter": 0.2,
    "rejected_backoff_seconds": 300.0,
    "close_timeout_seconds": 30.0,
    "close_retry_max_seconds": 1.0,
    "close_unanswered_seconds": 2.0,
    "atexit_timeout_seconds": 5.0,
    "max_queue_bytes": 256 * 2**20,
    "drain_queue_depth": 10_000,
    "unsent_warning_seconds": 300.0,
    "strict_transitions": False,
    "journal": True,
    "journal_dir": "trainreport-runs/journal",
    "journal_interval_seconds": 1.0,
    "journal_fsync_seconds": 10.0,
    "status_at_close": "outcome",
    "system_metrics_seconds": None,
}

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


def config_with(name: str, value: object) -> ReportingConfig:
    """Construct a config with one field set by name (typed loosely on purpose)."""
    fields: dict[str, Any] = {name: value}
    return ReportingConfig(**fields)


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == name]


def assert_in_range(config: ReportingConfig) -> None:
    """Every number of ``config`` is finite and inside its field's documented range."""
    for name in DURATION_FIELDS:
        value = getattr(config, name)
        assert isinstance(value, float)
        assert math.isfinite(value)
        assert value >= 0.0
    for name in COUNT_FIELDS:
        value = getattr(config, name)
        assert type(value) is int
        assert value >= 1
    assert 1.0 <= config.backoff_multiplier < math.inf
    assert 0.0 <= config.backoff_jitter <= 1.0
    assert isinstance(config.strict_transitions, bool)
    assert config.time_series_metrics is None or isinstance(config.time_series_metrics, tuple)


# --- direct construction ----------------------------------------------------------------


def test_defaults_are_the_documented_ones() -> None:
    """Every field's default is the value the docstring and docs/configuration.md state."""
    assert DOCUMENTED_DEFAULTS == attrs.asdict(ReportingConfig())


def test_bare_string_pattern_is_one_pattern() -> None:
    """A bare string for time_series_metrics is one pattern, not its characters.

    See docs/design.md#metrics.
    """
    assert ("val_*",) == ReportingConfig(time_series_metrics="val_*").time_series_metrics


def test_pattern_list_becomes_tuple_keeping_non_strings() -> None:
    """A list becomes a tuple; non-string entries are kept for the selector to drop."""
    config = ReportingConfig(time_series_metrics=["loss", 3, None])

    assert ("loss", 3, None) == config.time_series_metrics


def test_empty_pattern_list_means_no_history() -> None:
    """``[]`` stays an empty tuple, distinct from the ``None`` default (docs/design.md#metrics)."""
    assert () == ReportingConfig(time_series_metrics=[]).time_series_metrics


@pytest.mark.parametrize("name", DURATION_FIELDS)
def test_negative_duration_clamps_to_zero(name: str) -> None:
    """A negative duration passed to the constructor becomes 0.0."""
    assert 0.0 == getattr(config_with(name, -5), name)


@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_int_accepted_for_float_field(name: str) -> None:
    """An int for a float field is stored as a float."""
    value = getattr(config_with(name, 1), name)

    assert 1.0 == value
    assert float is type(value)


@pytest.mark.parametrize(
    ("name", "given_value", "expected"),
    [
        ("max_metric_names", 0, 1),
        ("max_queue_bytes", -10, 2**20),
        ("drain_queue_depth", 0, 1),
        ("backoff_jitter", 1.5, 1.0),
        ("backoff_jitter", -0.5, 0.0),
        ("backoff_multiplier", 0.5, 1.0),
    ],
)
def test_out_of_range_numbers_clamp(name: str, given_value: float, expected: float) -> None:
    """Counts clamp to >= 1, jitter into [0, 1], the multiplier to >= 1."""
    assert expected == getattr(config_with(name, given_value), name)


@pytest.mark.parametrize("name", NUMBER_FIELDS)
def test_bool_for_number_field_raises_type_error(name: str) -> None:
    """Direct construction refuses a bool where a number is expected."""
    with pytest.raises(TypeError):
        config_with(name, True)


def test_nan_duration_raises_value_error() -> None:
    """A NaN duration is refused: no scheduler can wait NaN seconds."""
    with pytest.raises(ValueError, match="finite"):
        ReportingConfig(heartbeat_seconds=math.nan)


def test_config_is_frozen() -> None:
    """Assigning a field raises; configs are changed with evolve."""
    config = ReportingConfig()

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.heartbeat_seconds = 1.0  # type: ignore[misc]


def test_evolve_changes_one_field_and_runs_converters() -> None:
    """evolve returns a new config with the change converted; the original is untouched."""
    config = ReportingConfig()

    changed = config.evolve(heartbeat_seconds=-1, time_series_metrics="loss")

    assert (0.0, ("loss",)) == (changed.heartbeat_seconds, changed.time_series_metrics)
    assert ReportingConfig() == config
    assert config.min_report_interval_seconds == changed.min_report_interval_seconds


def test_evolve_unknown_field_raises_type_error() -> None:
    """A misspelt field name in evolve is an error, not a silent no-op."""
    with pytest.raises(TypeError):
        ReportingConfig().evolve(heartbeat=1.0)


# --- strict mapping ---------------------------------------------------------------------


def test_strict_lists_every_problem_in_one_error() -> None:
    """Several bad fields at once give one ConfigError naming each with its path."""
    data = {
        "heartbeat_seconds": "60",
        "time_series_metrics": ["loss", 3, "val_*", None],
        "max_metric_names": 0,
        "backoff_jitter": 1.5,
        "close_timeout_seconds": -1,
        "strict_transitions": "yes",
        "min_report_interval": 5,
    }

    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping(data)

    assert [
        "expected a number @ $.heartbeat_seconds",
        "expected a string @ $.time_series_metrics[1]",
        "expected a string @ $.time_series_metrics[3]",
        "expected an integer >= 1 (got 0) @ $.max_metric_names",
        "expected a number between 0 and 1 (got 1.5) @ $.backoff_jitter",
        "expected a number >= 0 (got -1.0) @ $.close_timeout_seconds",
        "expected a boolean @ $.strict_transitions",
        "extra fields found (min_report_interval) @ $",
    ] == list(info.value.problems)


def test_strict_unknown_keys_are_listed_sorted() -> None:
    """Unknown keys, string or not, are reported together at the root path."""
    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping(cast(Any, {"min_report_interval": 5, "heartbeat": 1, 7: 0}))

    assert ("extra fields found (7, heartbeat, min_report_interval) @ $",) == info.value.problems


@pytest.mark.parametrize("name", NUMBER_FIELDS)
def test_strict_rejects_bool_as_number(name: str) -> None:
    """``true`` is not a number in strict mode, though bool subclasses int."""
    expected_noun = "an integer" if name in COUNT_FIELDS else "a number"

    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping({name: True})

    assert (f"expected {expected_noun} @ $.{name}",) == info.value.problems


@pytest.mark.parametrize("text", ["10", "1e3", " 5 ", "ten"])
def test_strict_rejects_numeric_strings(text: str) -> None:
    """Strict mode requires real numbers, not text that parses as one."""
    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping({"min_report_interval_seconds": text})

    assert ("expected a number @ $.min_report_interval_seconds",) == info.value.problems


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_strict_rejects_non_finite_numbers(value: float) -> None:
    """NaN and infinities are not durations."""
    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping({"backoff_max_seconds": value})

    assert ("expected a finite number @ $.backoff_max_seconds",) == info.value.problems


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("heartbeat_seconds", -0.5, "expected a number >= 0 (got -0.5)"),
        ("max_queue_bytes", 0, "expected an integer >= 1048576 (got 0)"),
        ("drain_queue_depth", -3, "expected an integer >= 1 (got -3)"),
        ("max_metric_names", 2.5, "expected an integer"),
        ("backoff_multiplier", 0.9, "expected a number >= 1 (got 0.9)"),
        ("backoff_jitter", -0.1, "expected a number between 0 and 1 (got -0.1)"),
        ("time_series_metrics", 5, "expected a list of glob patterns, a string or null"),
        ("strict_transitions", 1, "expected a boolean"),
    ],
)
def test_strict_rejects_out_of_range_and_wrong_type(name: str, value: object, problem: str) -> None:
    """Each field's range and type is enforced, with the path in the message."""
    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping({name: value})

    assert (f"{problem} @ $.{name}",) == info.value.problems


def test_strict_accepts_a_full_valid_mapping() -> None:
    """A mapping of every field with valid values round-trips through attrs.asdict."""
    config = ReportingConfig(
        min_report_interval_seconds=0.5,
        heartbeat_seconds=0,
        time_series_metrics=["*loss*"],
        max_metric_names=7,
        backoff_initial_seconds=0.1,
        backoff_max_seconds=2,
        backoff_multiplier=1,
        backoff_jitter=0,
        rejected_backoff_seconds=3,
        close_timeout_seconds=1,
        close_retry_max_seconds=0.5,
        close_unanswered_seconds=0.5,
        atexit_timeout_seconds=1,
        max_queue_bytes=2**21,
        drain_queue_depth=10,
        unsent_warning_seconds=9,
        strict_transitions=True,
    )

    assert config == ReportingConfig.from_mapping(attrs.asdict(config))


def test_strict_accepts_integral_float_for_count_and_bare_string_pattern() -> None:
    """``1e6`` (a float from YAML/JSON tools) is a valid count; a bare string is one pattern."""
    config = ReportingConfig.from_mapping({"max_queue_bytes": 1e8, "time_series_metrics": "loss"})

    assert (100_000_000, ("loss",)) == (config.max_queue_bytes, config.time_series_metrics)


def test_strict_non_mapping_is_one_problem_at_root() -> None:
    """A list where a mapping belongs is reported at ``$``."""
    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping(cast(Any, ["heartbeat_seconds"]))

    assert ("expected a mapping @ $",) == info.value.problems


def test_config_error_message_lists_problems() -> None:
    """str(ConfigError) shows every problem, one per line."""
    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_mapping({"heartbeat_seconds": False, "x": 1})

    assert (
        "invalid trainreport configuration:\n"
        "  - expected a number @ $.heartbeat_seconds\n"
        "  - extra fields found (x) @ $"
    ) == str(info.value)


# --- lenient mapping --------------------------------------------------------------------


def test_lenient_replaces_each_bad_field_by_default_with_one_event() -> None:
    """Bad fields fall back to defaults, one config_field_invalid event each; good ones stay."""
    data = {"heartbeat_seconds": "soon", "max_queue_bytes": True, "backoff_initial_seconds": 2}

    with capture_events() as events:
        config = ReportingConfig.from_mapping(data, strict=False)

    assert ReportingConfig(backoff_initial_seconds=2.0) == config
    assert [
        ("heartbeat_seconds", "expected a number"),
        ("max_queue_bytes", "expected an integer"),
    ] == [
        (e["field"], e["problem"]) for e in events_named(events, "trainreport.config_field_invalid")
    ]
    assert {"warning"} == {e["log_level"] for e in events}


def test_lenient_ignores_unknown_keys_with_one_event_each() -> None:
    """Unknown keys are ignored, each named once in config_field_unknown."""
    with capture_events() as events:
        data = cast(Any, {"min_report_interval": 5, 3: "x"})
        config = ReportingConfig.from_mapping(data, strict=False)

    assert ReportingConfig() == config
    assert ["min_report_interval", "3"] == [
        e["field"] for e in events_named(events, "trainreport.config_field_unknown")
    ]


def test_lenient_clamps_negatives_to_zero_and_logs() -> None:
    """A negative duration becomes 0 with one config_field_clamped event."""
    with capture_events() as events:
        config = ReportingConfig.from_mapping({"close_timeout_seconds": -4}, strict=False)

    assert 0.0 == config.close_timeout_seconds
    assert [
        {
            "event": "trainreport.config_field_clamped",
            "log_level": "warning",
            "field": "close_timeout_seconds",
            "problem": "expected a number >= 0 (got -4.0)",
            "value": 0.0,
        }
    ] == events


def test_lenient_accepts_numeric_and_boolean_strings() -> None:
    """Text that parses as the field's type is accepted (environment values are text)."""
    data = {
        "heartbeat_seconds": " 12.5 ",
        "max_metric_names": "1e3",
        "strict_transitions": "Yes",
        "time_series_metrics": "loss",
    }

    config = ReportingConfig.from_mapping(data, strict=False)

    assert (
        ReportingConfig(
            heartbeat_seconds=12.5,
            max_metric_names=1000,
            strict_transitions=True,
            time_series_metrics=("loss",),
        )
        == config
    )


def test_lenient_non_mapping_gives_defaults_with_one_event() -> None:
    """A non-mapping gives the defaults and one config_not_a_mapping event."""
    with capture_events() as events:
        config = ReportingConfig.from_mapping(cast(Any, "heartbeat_seconds=5"), strict=False)

    assert ReportingConfig() == config
    assert ["trainreport.config_not_a_mapping"] == [e["event"] for e in events]


class _ExplodingMapping(Mapping[str, object]):
    def __getitem__(self, key: str) -> object:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        return iter(["heartbeat_seconds"])

    def __len__(self) -> int:
        return 1


def test_lenient_survives_a_mapping_that_raises() -> None:
    """Even a mapping whose lookups raise gives the defaults, with one event."""
    with capture_events() as events:
        config = ReportingConfig.from_mapping(_ExplodingMapping(), strict=False)

    assert ReportingConfig() == config
    assert ["trainreport.config_unreadable"] == [e["event"] for e in events]


@given(
    st.dictionaries(
        st.sampled_from(FIELD_NAMES) | st.text(max_size=8) | st.integers(),
        JSON_VALUES,
        max_size=8,
    )
)
def test_lenient_never_raises_for_any_json_like_mapping(data: dict[Any, Any]) -> None:
    """Any JSON-like mapping gives an in-range config; every unknown key is logged once."""
    with capture_events() as events:
        config = ReportingConfig.from_mapping(data, strict=False)

    assert_in_range(config)
    unknown = sorted(str(key) for key in data if key not in FIELD_NAMES)
    assert unknown == sorted(
        e["field"] for e in events_named(events, "trainreport.config_field_unknown")
    )


@given(JSON_VALUES.filter(lambda v: not isinstance(v, dict)) | st.binary() | st.builds(object))
def test_lenient_never_raises_for_non_mappings(data: object) -> None:
    """Anything that is not a mapping gives the default config."""
    with capture_events():
        assert ReportingConfig() == ReportingConfig.from_mapping(cast(Any, data), strict=False)


@given(st.dictionaries(st.sampled_from(FIELD_NAMES), JSON_VALUES, max_size=6))
def test_lenient_agrees_with_strict_whenever_strict_accepts(data: dict[str, Any]) -> None:
    """Lenient parsing only differs from strict parsing on input strict parsing refuses."""
    try:
        strict = ReportingConfig.from_mapping(data)
    except ConfigError:
        return
    with capture_events() as events:
        assert strict == ReportingConfig.from_mapping(data, strict=False)
    assert [] == events


# --- environment ------------------------------------------------------------------------


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def test_env_variable_names_follow_field_names() -> None:
    """Each field is read from TRAINREPORT_<FIELD NAME UPPERCASED>."""
    assert "TRAINREPORT_MIN_REPORT_INTERVAL_SECONDS" == env_name("min_report_interval_seconds")
    config = ReportingConfig.from_env({"TRAINREPORT_HEARTBEAT_SECONDS": "7"})
    assert 7.0 == config.heartbeat_seconds


def test_env_parses_every_field_type() -> None:
    """Durations, counts, fractions, factors, flags and pattern lists parse from text."""
    environ = {
        "TRAINREPORT_MIN_REPORT_INTERVAL_SECONDS": "0.25",
        "TRAINREPORT_HEARTBEAT_SECONDS": "30",
        "TRAINREPORT_TIME_SERIES_METRICS": "train_loss, val_* ,,",
        "TRAINREPORT_MAX_METRIC_NAMES": "50",
        "TRAINREPORT_BACKOFF_INITIAL_SECONDS": "0.5",
        "TRAINREPORT_BACKOFF_MAX_SECONDS": "8",
        "TRAINREPORT_BACKOFF_MULTIPLIER": "3",
        "TRAINREPORT_BACKOFF_JITTER": "0",
        "TRAINREPORT_REJECTED_BACKOFF_SECONDS": "60",
        "TRAINREPORT_CLOSE_TIMEOUT_SECONDS": "4",
        "TRAINREPORT_ATEXIT_TIMEOUT_SECONDS": "2",
        "TRAINREPORT_MAX_QUEUE_BYTES": "1e8",
        "TRAINREPORT_DRAIN_QUEUE_DEPTH": "100",
        "TRAINREPORT_UNSENT_WARNING_SECONDS": "120",
        "TRAINREPORT_STRICT_TRANSITIONS": "true",
        "TRAINREPORT_JOURNAL": "0",
        "TRAINREPORT_JOURNAL_DIR": "/var/tmp/journals",
        "TRAINREPORT_JOURNAL_INTERVAL_SECONDS": "0.5",
        "TRAINREPORT_JOURNAL_FSYNC_SECONDS": "30",
    }

    config = ReportingConfig.from_env(environ, strict=True)

    assert (
        ReportingConfig(
            min_report_interval_seconds=0.25,
            heartbeat_seconds=30,
            time_series_metrics=("train_loss", "val_*"),
            max_metric_names=50,
            backoff_initial_seconds=0.5,
            backoff_max_seconds=8,
            backoff_multiplier=3,
            backoff_jitter=0,
            rejected_backoff_seconds=60,
            close_timeout_seconds=4,
            atexit_timeout_seconds=2,
            max_queue_bytes=100_000_000,
            drain_queue_depth=100,
            unsent_warning_seconds=120,
            strict_transitions=True,
            journal=False,
            journal_dir="/var/tmp/journals",
            journal_interval_seconds=0.5,
            journal_fsync_seconds=30,
        )
        == config
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", True), ("0", False), ("true", True), ("FALSE", False), ("yes", True), ("No", False)],
)
def test_env_flag_words(text: str, expected: bool) -> None:
    """TRAINREPORT_STRICT_TRANSITIONS takes 1/0/true/false/yes/no in any case."""
    environ = {"TRAINREPORT_STRICT_TRANSITIONS": text}

    assert expected is ReportingConfig.from_env(environ, strict=True).strict_transitions


def test_env_empty_pattern_list_means_no_history() -> None:
    """An empty TRAINREPORT_TIME_SERIES_METRICS is ``()``, not the ``None`` default."""
    config = ReportingConfig.from_env({"TRAINREPORT_TIME_SERIES_METRICS": ""})

    assert () == config.time_series_metrics


def test_env_unset_and_unrelated_variables_keep_defaults() -> None:
    """Unset variables keep defaults; TRAINREPORT_URL and friends are not config fields."""
    environ = {
        "TRAINREPORT_URL": "http://127.0.0.1:8321",
        "TRAINREPORT_JOB_ID": "job-1",
        "TRAINREPORT_TASK_ID": "train",
        "TRAINREPORT_TOKEN": "secret",
        "TRAINREPORT_TOKEN_FILE": "/run/token",
        "TRAINREPORT_DISABLED": "1",
        "PATH": "/usr/bin",
    }

    with capture_events() as events:
        config = ReportingConfig.from_env(environ, strict=True)

    assert ReportingConfig() == config
    assert [] == events


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit mapping, os.environ is read."""
    monkeypatch.setenv("TRAINREPORT_DRAIN_QUEUE_DEPTH", "42")

    assert 42 == ReportingConfig.from_env().drain_queue_depth


def test_env_lenient_bad_variable_falls_back_with_event_naming_it() -> None:
    """A bad variable keeps its default, with one event naming field and variable."""
    environ = {"TRAINREPORT_HEARTBEAT_SECONDS": "ten", "TRAINREPORT_CLOSE_TIMEOUT_SECONDS": "3"}

    with capture_events() as events:
        config = ReportingConfig.from_env(environ)

    assert ReportingConfig(close_timeout_seconds=3) == config
    assert [
        {
            "event": "trainreport.config_field_invalid",
            "log_level": "warning",
            "field": "heartbeat_seconds",
            "variable": "TRAINREPORT_HEARTBEAT_SECONDS",
            "problem": "expected a number",
        }
    ] == events


def test_env_lenient_clamps_negative_duration() -> None:
    """A negative duration from the environment is clamped to 0 in lenient mode."""
    with capture_events() as events:
        config = ReportingConfig.from_env({"TRAINREPORT_ATEXIT_TIMEOUT_SECONDS": "-1"})

    assert 0.0 == config.atexit_timeout_seconds
    assert ["trainreport.config_field_clamped"] == [e["event"] for e in events]


def test_env_strict_lists_every_bad_variable_by_name() -> None:
    """Strict from_env raises one ConfigError naming each bad variable."""
    environ = {
        "TRAINREPORT_HEARTBEAT_SECONDS": "ten",
        "TRAINREPORT_BACKOFF_JITTER": "2",
        "TRAINREPORT_MAX_METRIC_NAMES": "0",
        "TRAINREPORT_STRICT_TRANSITIONS": "maybe",
        "TRAINREPORT_CLOSE_TIMEOUT_SECONDS": "5",
    }

    with pytest.raises(ConfigError) as info:
        ReportingConfig.from_env(environ, strict=True)

    assert (
        "expected a number @ TRAINREPORT_HEARTBEAT_SECONDS",
        "expected an integer >= 1 (got 0) @ TRAINREPORT_MAX_METRIC_NAMES",
        "expected a number between 0 and 1 (got 2.0) @ TRAINREPORT_BACKOFF_JITTER",
        "expected a boolean (1/0/true/false/yes/no) @ TRAINREPORT_STRICT_TRANSITIONS",
    ) == info.value.problems


@given(st.dictionaries(st.sampled_from([env_name(n) for n in FIELD_NAMES]), st.text()))
def test_env_lenient_never_raises(environ: dict[str, str]) -> None:
    """Any text in any config variable gives an in-range config."""
    with capture_events():
        assert_in_range(ReportingConfig.from_env(environ))


# --- documentation ----------------------------------------------------------------------


def test_docs_table_lists_every_field_with_variable_and_default() -> None:
    """docs/configuration.md has a table row per field, with its variable and default."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    rows = {
        match.group(1): match.group(0)
        for match in re.finditer(r"^\| `([a-z_]+)` \|.*$", docs.read_text(), re.MULTILINE)
    }

    assert sorted(FIELD_NAMES) == sorted(rows)
    for name in FIELD_NAMES:
        assert f"`{env_name(name)}`" in rows[name]
        assert shown_default(DOCUMENTED_DEFAULTS[name]) in rows[name]


def shown_default(default: object) -> str:
    """How the docs table writes a default: ints with ``_`` separators, others as repr."""
    if type(default) is int:
        return f"`{default:_}`"
    return f"`{default!r}`"


@pytest.mark.parametrize("text", ["0", "100", "-5", "1048575"])
def test_a_queue_guard_that_would_throw_the_run_away_falls_back_to_the_default(
    text: str,
) -> None:
    """TRAINREPORT_MAX_QUEUE_BYTES below 1 MiB: the default, with one warning (never clamped)."""
    with capture_events() as events:
        config = ReportingConfig.from_env({"TRAINREPORT_MAX_QUEUE_BYTES": text})

    assert 256 * 2**20 == config.max_queue_bytes
    invalid = events_named(events, "trainreport.config_field_invalid")
    assert [("max_queue_bytes", "TRAINREPORT_MAX_QUEUE_BYTES")] == [
        (e["field"], e["variable"]) for e in invalid
    ]
    assert "1048576" in invalid[0]["problem"]
    assert not events_named(events, "trainreport.config_field_clamped")


def test_the_replaced_item_guard_variable_is_ignored_with_one_warning() -> None:
    """TRAINREPORT_MAX_QUEUE_ITEMS=0 no longer drops reports: it is ignored, and said so."""
    with capture_events() as events:
        config = ReportingConfig.from_env({"TRAINREPORT_MAX_QUEUE_ITEMS": "0"})

    assert ReportingConfig() == config
    replaced = events_named(events, "trainreport.config_variable_replaced")
    assert [("TRAINREPORT_MAX_QUEUE_ITEMS", "TRAINREPORT_MAX_QUEUE_BYTES")] == [
        (e["variable"], e["use"]) for e in replaced
    ]


@pytest.mark.parametrize("value", ["", "   ", "a\0b", 3, None, ["dir"]])
def test_a_journal_dir_that_is_not_a_usable_path_is_refused_strictly_and_defaulted_leniently(
    value: object,
) -> None:
    """journal_dir is non-empty text without NUL: strict lists it, lenient keeps the default."""
    with pytest.raises(ConfigError) as raised:
        ReportingConfig.from_mapping({"journal_dir": value})
    with capture_events() as events:
        lenient = ReportingConfig.from_mapping({"journal_dir": value}, strict=False)

    invalid = events_named(events, "trainreport.config_field_invalid")
    assert ("expected a directory path (non-empty text) @ $.journal_dir",) == raised.value.problems
    assert "trainreport-runs/journal" == lenient.journal_dir
    assert ["journal_dir"] == [e["field"] for e in invalid]


def test_journal_dir_takes_a_path_object_and_refuses_other_types_directly() -> None:
    """Direct construction: a ``Path`` becomes text; a number raises TypeError, '' ValueError."""
    assert "runs/j" == ReportingConfig(journal_dir=Path("runs/j")).journal_dir
    with pytest.raises(TypeError):
        config_with("journal_dir", 3)
    with pytest.raises(ValueError, match="non-empty"):
        config_with("journal_dir", "")


# --- one parser: the same problem in every mode -----------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("heartbeat_seconds", math.nan, "expected a finite number"),
        ("heartbeat_seconds", [1], "expected a number"),
        ("max_metric_names", 2.5, "expected an integer"),
        ("time_series_metrics", 5, "expected a list of glob patterns, a string or null"),
        ("strict_transitions", 2, "expected a boolean"),
        ("journal_dir", "", "expected a directory path (non-empty text)"),
        ("journal_dir", 3, "expected a directory path (non-empty text)"),
        ("status_at_close", "sometimes", "expected one of 'outcome', 'keep'"),
        ("status_at_close", 3, "expected one of 'outcome', 'keep'"),
    ],
)
def test_a_problem_is_worded_the_same_in_every_mode(name: str, value: object, problem: str) -> None:
    """Direct construction, strict and lenient parsing report one parser's problem text.

    Direct construction adds the value (``", got 3"``), a strict mapping the path,
    a lenient one the field (``config_field_invalid``).
    """
    with pytest.raises((TypeError, ValueError)) as direct:
        config_with(name, value)
    with pytest.raises(ConfigError) as strict:
        ReportingConfig.from_mapping({name: value})
    with capture_events() as events:
        ReportingConfig.from_mapping({name: value}, strict=False)

    assert (f"{problem}, got {value!r}", (f"{problem} @ $.{name}",), [(name, problem)]) == (
        str(direct.value),
        strict.value.problems,
        [
            (e["field"], e["problem"])
            for e in events_named(events, "trainreport.config_field_invalid")
        ],
    )


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("heartbeat_seconds", "ten", "expected a number"),
        ("max_metric_names", "2.5", "expected an integer"),
        ("max_queue_bytes", "0", "expected an integer >= 1048576 (got 0)"),
        ("strict_transitions", "maybe", "expected a boolean (1/0/true/false/yes/no)"),
        ("status_at_close", "never", "expected one of 'outcome', 'keep'"),
        ("journal_dir", " ", "expected a directory path (non-empty text)"),
    ],
)
def test_a_problem_in_text_is_worded_the_same_in_the_environment_and_a_lenient_mapping(
    name: str, text: str, problem: str
) -> None:
    """Text parses one way, so ``from_env`` (strict and lenient) and a lenient mapping agree."""
    variable = env_name(name)
    with pytest.raises(ConfigError) as strict:
        ReportingConfig.from_env({variable: text}, strict=True)
    with capture_events() as events:
        ReportingConfig.from_env({variable: text})
        ReportingConfig.from_mapping({name: text}, strict=False)

    assert (f"{problem} @ {variable}",) == strict.value.problems
    assert [(name, variable, problem), (name, None, problem)] == [
        (e["field"], e.get("variable"), e["problem"])
        for e in events_named(events, "trainreport.config_field_invalid")
    ]


@given(st.dictionaries(st.sampled_from(FIELD_NAMES), JSON_VALUES, max_size=6))
@example({"max_metric_names": 5.0, "journal_dir": "runs"})
def test_direct_construction_agrees_with_strict_whenever_strict_accepts(
    data: dict[str, Any],
) -> None:
    """What a job spec may hold, ``ReportingConfig(**spec)`` takes as strict parsing does."""
    try:
        strict = ReportingConfig.from_mapping(data)
    except ConfigError:
        return
    assert strict == ReportingConfig(**data)
