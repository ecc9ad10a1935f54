"""The atexit fallback, heartbeats and the unsent-data warning."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import ScriptedSink, drive
from trainreport import MemorySink, Reporter, ReportingConfig, RetryLater
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)

SCRIPT = """
import trainreport
reporter = trainreport.Reporter(trainreport.FileSink("task.json"), rank=0)
reporter.start()
reporter.report_train_step(step=1, metrics={{"loss": 1.0}})
{ending}
"""


def run_script(tmp_path: Path, ending: str) -> tuple[dict[str, object], str]:
    code = textwrap.dedent(SCRIPT.format(ending=ending))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return json.loads((tmp_path / "task.json").read_text()), proc.stderr


def test_forgotten_close_with_an_uncaught_exception_marks_the_task_failed(tmp_path: Path) -> None:
    """atexit closes a reporter the user forgot; an uncaught exception makes it failed."""
    task, stderr = run_script(tmp_path, 'raise RuntimeError("diverged")')
    assert "RuntimeError: diverged" in stderr
    assert "failed" == task["status"]
    assert {"type": "RuntimeError", "message": "diverged"} == task["status_details"]["error"]  # type: ignore[index]
    assert [1] == [p["step"] for p in task["status_details"]["metrics"]["train_loss"]]  # type: ignore[index]


def test_forgotten_close_on_normal_exit_marks_the_run_completed_and_logs(tmp_path: Path) -> None:
    """Without an exception, atexit delivers the data, marks it completed and logs why."""
    task, stderr = run_script(tmp_path, "import logging; logging.basicConfig()")
    assert "completed" == task["status"]
    assert "trainreport.completed_at_close" in stderr
    assert [1] == [p["step"] for p in task["status_details"]["metrics"]["train_loss"]]  # type: ignore[index]


def test_a_completed_run_without_close_logs_no_missing_status(tmp_path: Path) -> None:
    """The exit hook sees the completion still queued: no ``completed_at_close``."""
    ending = "reporter.report_completed(); import logging; logging.basicConfig()"
    task, stderr = run_script(tmp_path, ending)
    assert "completed" == task["status"]
    assert "trainreport.completed_at_close" not in stderr


LOCAL_SCRIPT = """
import gc, logging, trainreport
logging.basicConfig()

def main():
    reporter = trainreport.Reporter(trainreport.FileSink("task.json"), rank=0).start()
    for step in range(1, 301):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})

main()
gc.collect()
"""


def test_a_reporter_held_only_by_a_local_variable_is_closed_at_exit(tmp_path: Path) -> None:
    """A started, unclosed reporter stays reachable: atexit delivers all 300 points."""
    proc = subprocess.run(
        [sys.executable, "-c", LOCAL_SCRIPT],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr
    task = json.loads((tmp_path / "task.json").read_text())
    steps = [p["step"] for p in task["status_details"]["metrics"]["train_loss"]]
    assert list(range(1, 301)) == steps
    assert "trainreport.completed_at_close" in proc.stderr


def test_heartbeat_sends_when_nothing_changed() -> None:
    """With no new data a send still goes every heartbeat_seconds (docs/design.md#debounce)."""
    clock = FakeClock()
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(heartbeat_seconds=60.0), clock=clock, rank=0)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    drive(reporter)
    worker = reporter._worker
    assert worker is not None
    worker.cycle()
    sent = len(sink.requests)
    clock.advance(59.0)
    worker.cycle()
    assert sent == len(sink.requests)
    clock.advance(1.0)
    worker.cycle()
    assert sent + 1 == len(sink.requests)
    reporter.close(timeout=5)


def test_old_unsent_data_is_warned_about_at_a_limited_rate() -> None:
    """When data stays undelivered past unsent_warning_seconds, one warning per period."""
    clock = FakeClock()
    sink = ScriptedSink()
    sink.fail_sends.extend(RetryLater("down") for _ in range(1000))
    config = ReportingConfig(
        unsent_warning_seconds=100.0,
        backoff_initial_seconds=1.0,
        backoff_max_seconds=1.0,
        backoff_jitter=0.0,
    )
    reporter = Reporter(sink, config, clock=clock, rank=0)
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker = reporter._worker
    assert worker is not None
    with capture_events() as events:
        for _ in range(25):
            clock.advance(10.0)
            worker.cycle()
    warnings = [e for e in events if e["event"] == "trainreport.unsent_data_old"]
    assert 2 == len(warnings)  # at ~100 s and ~200 s of the 250 s
    assert 1 == warnings[0]["unsent_points"]
    reporter.close(timeout=0.5)
