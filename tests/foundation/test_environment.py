"""The environment, read in one place (``trainreport._environment``).

Destination settings are frozen values parsed by the converter that parses
``ReportingConfig``, leniently, with the configuration's event names; a
misspelled ``TRAINREPORT_*`` variable is named once with the closest valid one.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import attrs
import pytest

import trainreport
from helpers import CALLER_ENVIRONMENT_NAMES, CALLER_ENVIRONMENT_PREFIXES, SUITE_KNOBS
from trainreport import HttpSink, Reporter, ReportingConfig
from trainreport import _environment as environment
from trainreport._reporting_config import CONVERTER, env_variable
from trainreport.testing import capture_events

SRC = Path(trainreport.__file__).parent
TOKEN = "s3cret-token-value"


@pytest.mark.parametrize(
    ("misspelled", "meant"),
    [
        ("TRAINREPORT_JOBID", "TRAINREPORT_JOB_ID"),
        ("TRAINREPORT_MIN_REPORT_INTERVAL", "TRAINREPORT_MIN_REPORT_INTERVAL_SECONDS"),
        ("TRAINREPORT_TOKENFILE", "TRAINREPORT_TOKEN_FILE"),
        ("TRAINREPORT_HEARTBEAT", "TRAINREPORT_HEARTBEAT_SECONDS"),
    ],
)
def test_a_misspelled_variable_gets_one_warning_naming_the_closest_valid_one(
    misspelled: str, meant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like an unknown key of ``from_mapping``: ignored, and named once with a suggestion."""
    monkeypatch.chdir(tmp_path)
    with capture_events() as events:
        Reporter.from_env({misspelled: "1", "TRAINREPORT_JOB_ID": "job-1"})
    unknown = [e for e in events if e["event"] == "trainreport.config_field_unknown"]
    assert [(misspelled, meant)] == [(e["variable"], e["did_you_mean"]) for e in unknown]


def test_every_variable_the_library_reads_is_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No warning for any real variable (config fields, destination, attempt, server)."""
    monkeypatch.chdir(tmp_path)
    env = dict.fromkeys(environment.KNOWN_VARIABLES, "1")
    for field in attrs.fields(ReportingConfig):
        assert env_variable(field.name) in environment.KNOWN_VARIABLES
    assert [] == environment.unknown_variables(env)
    assert [("TRAINREPORT_NOTHING_LIKE_IT_AT_ALL", None)] == environment.unknown_variables(
        {"TRAINREPORT_NOTHING_LIKE_IT_AT_ALL": "x", "OTHER_TOOL_JOBID": "y"}
    )


def test_the_reference_servers_variables_are_not_taken_for_misspellings() -> None:
    """``TRAINREPORT_DB`` (``serve --db``) and ``TRAINREPORT_SERVER_TOKEN`` get no warning."""
    served = {"TRAINREPORT_DB": "postgresql://db/trainreport", "TRAINREPORT_SERVER_TOKEN": "t"}
    assert [] == environment.unknown_variables(served)


def test_http_settings_are_a_frozen_value_parsed_by_the_config_converter() -> None:
    """Every variable lands in its field; the token stays out of the repr."""
    settings = environment.read_http_destination(
        {
            "TRAINREPORT_URL": " https://jobs.example ",
            "TRAINREPORT_JOB_ID": "job-7",
            "TRAINREPORT_TASK_ID": "eval",
            "TRAINREPORT_TOKEN": TOKEN,
            "TRAINREPORT_CA_CERTS": "/etc/ca.pem",
            "TRAINREPORT_CONNECT_TIMEOUT_SECONDS": "2.5",
            "TRAINREPORT_READ_TIMEOUT_SECONDS": "30",
        }
    )
    assert (
        environment.HttpDestination(
            url="https://jobs.example",
            job_id="job-7",
            task_id="eval",
            token=TOKEN,
            ca_certs="/etc/ca.pem",
            connect_timeout_seconds=2.5,
            read_timeout_seconds=30.0,
        )
        == settings
    )
    assert TOKEN not in repr(settings)
    assert CONVERTER.get_structure_hook(environment.HttpDestination) is not None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        settings.url = "x"  # type: ignore[misc]


def test_bad_values_keep_their_defaults_with_one_config_event_each() -> None:
    """A bad timeout is named with its variable; the other fields are kept."""
    with capture_events() as events:
        settings = environment.read_http_destination(
            {
                "TRAINREPORT_URL": "http://127.0.0.1:1",
                "TRAINREPORT_CONNECT_TIMEOUT_SECONDS": "soon",
                "TRAINREPORT_READ_TIMEOUT_SECONDS": "-1",
                "TRAINREPORT_TOKEN_FILE": "/run/token",
            }
        )
    assert settings is not None
    assert (5.0, 10.0, "/run/token") == (
        settings.connect_timeout_seconds,
        settings.read_timeout_seconds,
        settings.token_file,
    )
    invalid = [e for e in events if e["event"] == "trainreport.config_field_invalid"]
    assert [
        ("TRAINREPORT_CONNECT_TIMEOUT_SECONDS", "expected a positive number of seconds"),
        ("TRAINREPORT_READ_TIMEOUT_SECONDS", "expected a positive number of seconds"),
    ] == sorted((e["variable"], e["problem"]) for e in invalid)


def test_both_destinations_are_parsed_when_both_are_set() -> None:
    """``read_destinations`` returns the service and the Kubeflow endpoint together."""
    settings = environment.read_destinations(
        {
            "TRAINREPORT_URL": "http://jobs:8321",
            "TRAINREPORT_JOB_ID": "j",
            "KUBEFLOW_TRAINER_SERVER_URL": "https://kf/status",
            "KUBEFLOW_TRAINER_SERVER_TOKEN": "/var/run/token",
        }
    )
    assert settings.http is not None
    assert settings.kubeflow is not None
    assert ("http://jobs:8321", "https://kf/status", "/var/run/token", "j", "train") == (
        settings.http.url,
        settings.kubeflow.url,
        settings.kubeflow.token_file,
        settings.job_id,
        settings.task_id,
    )
    assert environment.DestinationSettings(None, None) == environment.read_destinations({})


def test_http_sink_from_env_uses_the_settings() -> None:
    """``HttpSink.from_env`` is ``from_destination(read_http_destination(env))``."""
    sink = HttpSink.from_env(
        {"TRAINREPORT_URL": "http://jobs:1", "TRAINREPORT_JOB_ID": "j", "TRAINREPORT_TOKEN": TOKEN}
    )
    assert ("http://jobs:1", "j", "train", TOKEN) == (
        sink.base_url,
        sink.job_id,
        sink.task_id,
        sink._transport.current_token(),
    )


def _variable_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(("TRAINREPORT_", "KUBEFLOW_TRAINER_"))
        and node.value.replace("_", "").isalpha()
        and node.value.isupper()
    ]


def test_variables_are_named_only_where_the_environment_is_read() -> None:
    """Variable names live in ``_environment.py``; config fields derive theirs from the field.

    The exceptions are named: ``trainreport/_reporting_config.py`` (the prefix every config field's
    variable is made of, and a replaced variable), ``_wire/_attempt.py`` (the attempt
    number's variables, read with the other job systems' ones), ``_wire/_protocol.py`` (the
    reference server's two: the server reads them and may import only the wire layer, and
    ``_environment.py`` lists them from there).
    """
    allowed = {"_environment.py", "_reporting_config.py", "_attempt.py", "_protocol.py"}
    elsewhere = {
        f"{path.relative_to(SRC)}: {literal}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name not in allowed
        for literal in _variable_literals(path)
    }
    assert set() == elsewhere


def test_tests_do_not_see_the_callers_reporting_environment() -> None:
    """The suite runs as in a fresh shell: nothing the library reads from the environment
    (a developer's ``TRAINREPORT_URL``, a rank, a proxy) reaches a test unless the test
    sets it (``tests/conftest.py``); only the suite's own knobs and the journal switch are
    left."""
    leaked = {
        name
        for name in os.environ
        if name.startswith(CALLER_ENVIRONMENT_PREFIXES) or name in CALLER_ENVIRONMENT_NAMES
    }
    assert {"TRAINREPORT_JOURNAL"} == leaked - SUITE_KNOBS


# --- Reporter.from_env(config=...) ------------------------------------------------------


def test_from_env_takes_an_explicit_config_as_its_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``config=`` replaces the defaults; no config variable set: it is used as given."""
    monkeypatch.chdir(tmp_path)
    config = ReportingConfig(heartbeat_seconds=7.0, time_series_metrics=("train_*",))
    with capture_events() as events:
        reporter = Reporter.from_env({}, config=config)
    assert config == reporter.config
    assert [] == [e for e in events if e["event"] == "trainreport.config_overridden"]


def test_a_config_variable_that_is_set_overrides_the_explicit_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job system's variable wins over the script's value, field by field, with one event."""
    monkeypatch.chdir(tmp_path)
    config = ReportingConfig(heartbeat_seconds=7.0, max_metric_names=50)
    env = {"TRAINREPORT_HEARTBEAT_SECONDS": "9", "TRAINREPORT_MAX_METRIC_NAMES": "50"}
    with capture_events() as events:
        reporter = Reporter.from_env(env, config=config)
    assert config.evolve(heartbeat_seconds=9.0) == reporter.config
    overridden = [e for e in events if e["event"] == "trainreport.config_overridden"]
    assert [(["heartbeat_seconds"], ["TRAINREPORT_HEARTBEAT_SECONDS"])] == [
        (e["fields"], e["variables"]) for e in overridden
    ]


def test_a_bad_config_variable_keeps_the_explicit_configs_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leniently, as without ``config=``: the field keeps the given value, not the default."""
    monkeypatch.chdir(tmp_path)
    config = ReportingConfig(heartbeat_seconds=7.0)
    with capture_events() as events:
        reporter = Reporter.from_env({"TRAINREPORT_HEARTBEAT_SECONDS": "soon"}, config=config)
    assert 7.0 == reporter.config.heartbeat_seconds
    invalid = [e for e in events if e["event"] == "trainreport.config_field_invalid"]
    assert ["TRAINREPORT_HEARTBEAT_SECONDS"] == [e["variable"] for e in invalid]


def test_from_env_without_a_config_is_from_env_with_the_default_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``from_env(env)`` and ``from_env(env, config=ReportingConfig())`` read the same config."""
    monkeypatch.chdir(tmp_path)
    env = {"TRAINREPORT_HEARTBEAT_SECONDS": "9", "TRAINREPORT_TIME_SERIES_METRICS": "a,b"}
    assert (
        Reporter.from_env(env).config
        == Reporter.from_env(env, config=ReportingConfig()).config
        == ReportingConfig(heartbeat_seconds=9.0, time_series_metrics=("a", "b"))
    )


def test_a_positional_config_is_a_config_error_that_says_pass_it_as_config() -> None:
    """The first argument is the environment: a ``ReportingConfig`` there is named, with the fix."""
    with pytest.raises(trainreport.ConfigError) as info:
        Reporter.from_env(ReportingConfig(heartbeat_seconds=7.0))  # type: ignore[arg-type]
    assert "pass it as config=" in str(info.value)
    assert "ReportingConfig" in str(info.value)


@pytest.mark.parametrize("environ", ["TRAINREPORT_URL=http://x", ["TRAINREPORT_URL"], 3])
def test_an_environment_that_is_not_a_mapping_is_a_config_error(environ: object) -> None:
    """Anything but a mapping (or ``None``) as ``environ`` is named at setup time."""
    with pytest.raises(trainreport.ConfigError, match="environ must be a mapping"):
        Reporter.from_env(environ)  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [{"heartbeat_seconds": 7.0}, "heartbeat_seconds=7"])
def test_a_config_that_is_not_a_reporting_config_is_a_config_error(config: object) -> None:
    """``config=`` takes a ``ReportingConfig``; the message says how to parse a mapping."""
    with pytest.raises(trainreport.ConfigError, match=r"ReportingConfig\.from_mapping"):
        Reporter.from_env({}, config=config)  # type: ignore[arg-type]
