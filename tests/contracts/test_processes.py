"""The promise about processes (docs/design.md#guarantees), in one place: exit, fork, rank.

- exit: a run whose script forgot ``close()`` is still closed at interpreter exit (the
  atexit fallback), completed or failed by how the process ended;
- fork: a child forked from a reporter (a data-loader worker) is inert, never sends
  its copy's reports and never deadlocks on a lock the parent held;
- rank: only global rank 0 (``RANK``, else ``SLURM_PROCID``) reports; other ranks and
  ``TRAINREPORT_DISABLED=1`` give a reporter with no thread that sends nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from helpers import curve, in_a_forked_child
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport.testing import FakeClock

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


# ------------------------------------------------------------------- fork and rank


def test_close_without_start_on_another_rank_sends_nothing() -> None:
    """Only global rank 0 starts anything, at close() too: other ranks stay inert."""
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(), rank=1)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})

    assert reporter.close(timeout=5)
    assert ("inert", []) == (reporter.state, sink.requests)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12+: fork() with threads
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() exists on Linux and macOS only")
def test_close_without_start_in_a_forked_child_leaves_the_reports_to_the_parent(
    tmp_path: Any,
) -> None:
    """A data-loader worker forked from an unstarted reporter never sends its copy's reports.

    The child's ``close()`` sends nothing (the file is not written); the parent's
    ``close()`` delivers them once.
    """
    from trainreport import FileSink  # noqa: PLC0415

    record = tmp_path / "task.json"
    reporter = Reporter(FileSink(record), ReportingConfig(), rank=0)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})

    def child() -> str:
        closed = reporter.close(timeout=2)
        return f"{closed} {reporter.state} {record.exists()}"

    assert "True closed False" == in_a_forked_child(tmp_path, child)
    assert reporter.close(timeout=5)
    assert record.exists()


def test_disabled_and_other_ranks_are_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRAINREPORT_DISABLED=1 and RANK=1 give a reporter with no thread that sends nothing."""
    for variable, value in (("TRAINREPORT_DISABLED", "1"), ("RANK", "1")):
        monkeypatch.setenv(variable, value)
        sink = MemorySink()
        reporter = Reporter(sink)
        threads = threading.active_count()
        reporter.start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        assert threads == threading.active_count()
        assert reporter.close(timeout=1)
        assert "inert" == reporter.state
        assert [] == sink.requests
        monkeypatch.delenv(variable)


def test_slurm_procid_is_read_when_rank_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RANK, SLURM_PROCID decides (docs/design.md#guarantees)."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    reporter = Reporter(MemorySink())
    reporter.start()
    assert "inert" == reporter.state


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12+: fork() with threads
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() exists on Linux and macOS only")
def test_forked_child_is_inert_and_never_deadlocks(tmp_path: Any) -> None:
    """A child forked while the store lock is held can report, snapshot and close at once."""
    sink = MemorySink()
    config = ReportingConfig(min_report_interval_seconds=10.0, backoff_jitter=0.0)
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    recorder = reporter._recorder
    assert recorder is not None
    marker = tmp_path / "child.txt"
    with recorder._lock:  # the child inherits a held lock
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                reporter.report_train_step(step=2, metrics={"loss": 2.0})
                reporter.snapshot()
                ok = reporter.close(timeout=1) and reporter.state == "inert"
                marker.write_text(f"{ok} {threading.active_count()}")
                code = 0
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert 0 == os.waitstatus_to_exitcode(status)
    assert "True 1" == marker.read_text()
    assert reporter.close(timeout=5)
    assert [(1, 1, 1.0)] == curve(sink.task, "train_loss")
