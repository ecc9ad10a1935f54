"""What ``close()``, ``with Reporter(...)`` and the exit hook do with a run that reported no end.

The rule (docs/design.md#lifecycle): a ``close()`` with no terminal report made
reports what ``report_outcome`` would for the exception being handled when it
is called (a ``finally`` while the run's exception propagates), and otherwise
``completed`` with one ``trainreport.completed_at_close`` warning;
``ReportingConfig(status_at_close="keep")`` leaves the status as it is.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport.exceptions import ConfigError
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(60)


def started(**config: Any) -> tuple[Reporter, MemorySink]:
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(**config), rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    return reporter, sink


def status(sink: MemorySink) -> str:
    assert sink.task is not None
    status = sink.task["status"]
    assert isinstance(status, str)
    return status


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


def close_while_raising(reporter: Reporter, error: BaseException) -> None:
    """``try: raise error finally: reporter.close()``; close() never swallows or replaces it."""

    def run() -> None:
        try:
            raise error
        finally:
            assert reporter.close(timeout=10)

    with pytest.raises(type(error)) as raised:
        run()
    assert error is raised.value


def test_close_without_a_terminal_report_marks_the_run_completed_and_warns_once() -> None:
    """A plain ``close()`` ends the run ``completed``, with one warning naming the fix."""
    reporter, sink = started()
    with capture_events() as events:
        assert reporter.close(timeout=10)
        assert reporter.close(timeout=10)
    assert "completed" == status(sink)
    warnings = named(events, "trainreport.completed_at_close")
    assert ["close"] == [w["at"] for w in warnings]
    assert "report_completed()" in warnings[0]["hint"]
    assert "status_at_close='keep'" in warnings[0]["hint"]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("diverged"), ("failed", {"type": "RuntimeError", "message": "diverged"})),
        (KeyboardInterrupt(), ("cancelled", None)),
        (SystemExit(0), ("completed", None)),
        (SystemExit(2), ("failed", {"type": "SystemExit", "message": "2"})),
    ],
)
def test_close_in_a_finally_reports_the_propagating_exceptions_outcome(
    error: BaseException, expected: tuple[str, object]
) -> None:
    """``finally: close()`` while an exception propagates: report_outcome's rule, no warning."""
    reporter, sink = started()
    with capture_events() as events:
        close_while_raising(reporter, error)
    assert sink.task is not None
    assert expected == (status(sink), sink.task["status_details"].get("error"))
    if isinstance(error, KeyboardInterrupt):
        assert "interrupted" == sink.task["status_details"]["cancel_reason"]
    assert [] == named(events, "trainreport.completed_at_close")
    assert [type(error).__name__] == [
        e["error_type"] for e in named(events, "trainreport.outcome_at_close")
    ]


def test_a_terminal_report_made_before_close_is_kept_without_a_warning() -> None:
    """``report_error`` then ``close()`` in a ``finally``: failed as reported, nothing added."""
    reporter, sink = started(strict_transitions=True)
    reporter.report_cancelled(reason="user stop")
    with capture_events() as events:
        close_while_raising(reporter, RuntimeError("later"))  # strict: a second end would raise
    assert sink.task is not None
    assert ("cancelled", "user stop") == (
        status(sink),
        sink.task["status_details"]["cancel_reason"],
    )
    assert [] == [e for e in events if e["event"].endswith("_at_close")]


def test_status_at_close_keep_leaves_the_run_running() -> None:
    """``status_at_close="keep"``: close() adds no terminal report, with or without an error."""
    reporter, sink = started(status_at_close="keep")
    with capture_events() as events:
        assert reporter.close(timeout=10)
    assert "running" == status(sink)
    other, other_sink = started(status_at_close="keep")
    close_while_raising(other, RuntimeError("diverged"))
    assert "running" == status(other_sink)
    assert [] == [e for e in events if e["event"].endswith("_at_close")]


def test_a_with_block_reports_its_outcome_whatever_status_at_close_says() -> None:
    """``with Reporter(...)`` reports the block's outcome itself: completed, even with "keep"."""
    sink = MemorySink()
    with (
        capture_events() as events,
        Reporter(sink, ReportingConfig(status_at_close="keep"), rank=0) as reporter,
    ):
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert "completed" == status(sink)
    assert [] == named(events, "trainreport.completed_at_close")


@pytest.mark.parametrize("error", [None, RuntimeError("after the end")])
def test_a_with_block_keeps_a_terminal_report_made_inside_it_without_a_refusal(
    error: BaseException | None,
) -> None:
    """``report_completed()`` inside ``with Reporter(...)``: leaving the block (normally or
    with an exception raised after the end) adds no second end, so no ``transition_refused``
    is logged and the run stays completed."""
    sink = MemorySink()
    with capture_events() as events:
        try:
            with Reporter(sink, ReportingConfig(strict_transitions=True), rank=0) as reporter:
                reporter.report_train_step(step=1, metrics={"loss": 1.0})
                reporter.report_completed()
                if error is not None:
                    raise error
        except RuntimeError:
            pass
    assert "completed" == status(sink)
    assert [] == named(events, "trainreport.transition_refused")


def test_an_unstarted_reporter_with_nothing_reported_sends_nothing_at_close() -> None:
    """Nothing reported, never started: close() sends nothing, so the task stays as stored."""
    sink = MemorySink()
    with capture_events() as events:
        assert Reporter(sink, rank=0).close(timeout=10)
    assert sink.task is None
    assert [] == [e for e in events if e["event"].endswith("_at_close")]


def test_status_at_close_is_parsed_by_the_one_converter() -> None:
    """Strict parsing lists a bad value, lenient falls back to "outcome", the env takes any case."""
    with pytest.raises(ConfigError) as raised:
        ReportingConfig.from_mapping({"status_at_close": "sometimes"})
    assert ("expected one of 'outcome', 'keep' @ $.status_at_close",) == raised.value.problems
    with capture_events() as events:
        lenient = ReportingConfig.from_mapping({"status_at_close": 3}, strict=False)
    assert "outcome" == lenient.status_at_close
    assert ["status_at_close"] == [
        e["field"] for e in named(events, "trainreport.config_field_invalid")
    ]
    assert (
        "keep"
        == ReportingConfig.from_env({"TRAINREPORT_STATUS_AT_CLOSE": " Keep "}).status_at_close
    )
    with pytest.raises(ValueError, match="expected one of"):
        ReportingConfig(status_at_close="sometimes")


SCRIPT = """
import logging, trainreport
logging.basicConfig()
config = trainreport.ReportingConfig.from_env()
reporter = trainreport.Reporter(trainreport.FileSink("task.json"), config, rank=0)
reporter.start()
reporter.report_train_step(step=1, metrics={{"loss": 1.0}})
{ending}
"""


def run_script(tmp_path: Path, ending: str, **env: str) -> tuple[dict[str, Any], str]:
    import os  # noqa: PLC0415 - next to its only use

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT.format(ending=ending))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )
    task: dict[str, Any] = json.loads((tmp_path / "task.json").read_text())
    return task, proc.stderr


def test_the_exit_hook_follows_the_same_rule_as_close(tmp_path: Path) -> None:
    """A forgotten close() at a normal exit: completed, with the same warning, ``at=exit``."""
    task, stderr = run_script(tmp_path, "")
    assert "completed" == task["status"]
    assert "trainreport.completed_at_close at='exit'" in stderr
    assert "run_ended_without_status" not in stderr


def test_the_exit_hook_with_status_at_close_keep_leaves_running(tmp_path: Path) -> None:
    """``TRAINREPORT_STATUS_AT_CLOSE=keep``: the exit hook keeps ``running`` and says so."""
    task, stderr = run_script(tmp_path, "", TRAINREPORT_STATUS_AT_CLOSE="keep")
    assert "running" == task["status"]
    assert "trainreport.run_ended_without_status" in stderr
    assert "completed_at_close" not in stderr
