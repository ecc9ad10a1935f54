"""Tests for trainreport.integrations.install_failure_hooks (process hooks).

Process-ending behaviour (an uncaught exception, SIGTERM) is tested in child
processes that report to a FileSink in ``tmp_path``; chaining and uninstalling
are tested in-process with recording stand-ins for the previous hooks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from trainreport import MemorySink, Reporter, ReportingConfig, read_task
from trainreport.integrations import PREEMPTED, install_failure_hooks
from trainreport.testing import capture_events

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

CHILD_PRELUDE = """
import sys, threading
from trainreport import FileSink, Reporter, ReportingConfig
from trainreport.integrations import install_failure_hooks
reporter = Reporter(
    FileSink(sys.argv[1]), ReportingConfig(min_report_interval_seconds=0.01)
).start()
reporter.report_train_step(step=1, metrics={"loss": 1.0})
"""


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINREPORT_")}
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        env.pop(name, None)
    return env


def run_child(body: str, record: Path) -> subprocess.CompletedProcess[str]:
    code = CHILD_PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code, str(record)],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
        check=False,
    )


def start_child(body: str, record: Path) -> subprocess.Popen[str]:
    code = CHILD_PRELUDE + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", code, str(record)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def stored(record: Path) -> dict[str, Any]:
    """The task the child's FileSink holds: its run log (the record exists only after close)."""
    return read_task(record.with_suffix(".log"))


def test_importing_trainreport_imports_no_framework() -> None:
    """``import trainreport`` and ``trainreport.integrations`` import no training framework."""
    code = (
        "import sys, trainreport, trainreport.integrations\n"
        "print(sorted(m for m in ('torch', 'transformers', 'lightning') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "[]" == out.stdout.strip()


@pytest.mark.slow
def test_uncaught_exception_is_reported_at_once_even_while_a_thread_keeps_the_process(
    tmp_path: Path,
) -> None:
    """The excepthook reports ``failed`` when the exception escapes, not at interpreter exit.

    A non-daemon thread keeps the crashed process alive (exit, and the
    reporter's ``atexit`` fallback, wait for it); it watches the reporter's
    record and prints what it saw, so the report must come from the hook.
    """
    record = tmp_path / "run.json"
    result = run_child(
        """
        install_failure_hooks(reporter)
        def watch():
            seen, waited = "nothing", threading.Event()
            for _ in range(500):  # at most 10 s
                if reporter.snapshot()["status"] == "failed":
                    seen = "failed"
                    break
                waited.wait(0.02)
            print("watcher saw:", seen, flush=True)
        threading.Thread(target=watch).start()
        raise ValueError("exploded at step 1")
        """,
        record,
    )
    task = stored(record)
    assert 1 == result.returncode
    assert "watcher saw: failed" in result.stdout
    assert "ValueError: exploded at step 1" in result.stderr  # the previous hook still ran
    assert "failed" == task["status"]
    assert {"type": "ValueError", "message": "exploded at step 1"} == task["status_details"][
        "error"
    ]


@pytest.mark.slow
def test_sigterm_reports_preempted_then_dies_of_sigterm(tmp_path: Path) -> None:
    """SIGTERM: cancelled with reason ``preempted``, delivered, then the default action."""
    record = tmp_path / "run.json"
    child = start_child(
        """
        install_failure_hooks(reporter, sigterm=True)
        print("ready", flush=True)
        threading.Event().wait(15)
        print("not killed", flush=True)
        """,
        record,
    )
    assert child.stdout is not None
    assert "ready" == child.stdout.readline().strip()
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=30)
    task = stored(record)
    assert -signal.SIGTERM == child.returncode
    assert "not killed" not in out
    assert ("cancelled", PREEMPTED) == (task["status"], task["status_details"]["cancel_reason"])
    assert [1] == [p["step"] for p in task["status_details"]["metrics"]["train_loss"]]


@pytest.mark.slow
def test_sigterm_calls_the_previous_python_handler_after_reporting(tmp_path: Path) -> None:
    """A handler installed before the hook still runs (here: it exits with status 3)."""
    record = tmp_path / "run.json"
    child = start_child(
        """
        import signal
        def previous(signum, frame):
            print("previous handler ran", flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, previous)
        install_failure_hooks(reporter, sigterm=True)
        print("ready", flush=True)
        threading.Event().wait(15)
        """,
        record,
    )
    assert child.stdout is not None
    assert "ready" == child.stdout.readline().strip()
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=30)
    assert 3 == child.returncode
    assert "previous handler ran" in out
    assert "cancelled" == stored(record)["status"]


@pytest.mark.slow
def test_uninstalled_sigterm_hook_reports_nothing(tmp_path: Path) -> None:
    """After uninstall, SIGTERM kills the child as before and the task is not cancelled."""
    record = tmp_path / "run.json"
    child = start_child(
        """
        uninstall = install_failure_hooks(reporter, sigterm=True)
        uninstall()
        assert reporter.flush(10.0)
        print("ready", flush=True)
        threading.Event().wait(15)
        """,
        record,
    )
    assert child.stdout is not None
    assert "ready" == child.stdout.readline().strip()
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=30)
    assert -signal.SIGTERM == child.returncode
    assert "running" == stored(record)["status"]


@pytest.fixture
def reporter() -> Any:
    sink = MemorySink()
    started = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01)).start()
    yield started
    started.close(10.0)


def test_thread_exception_is_reported_and_chained(
    reporter: Reporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception that ends a thread reports ``failed``; the previous hook gets it too."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    uninstall = install_failure_hooks(reporter)

    def work() -> None:
        raise RuntimeError("loader died")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    uninstall()
    assert reporter.close(10.0)
    task = reporter.sink.task  # type: ignore[attr-defined]
    assert 1 == len(seen)
    assert isinstance(seen[0], RuntimeError)
    assert "failed" == task["status"]
    assert {"type": "RuntimeError", "message": "loader died"} == task["status_details"]["error"]


def test_system_exit_in_a_thread_is_not_a_failure(
    reporter: Reporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SystemExit`` ending a thread is no error (Python ignores it too): close() completes it."""
    monkeypatch.setattr(threading, "excepthook", lambda args: None)
    uninstall = install_failure_hooks(reporter)
    hook = threading.excepthook
    hook(threading.ExceptHookArgs([SystemExit, SystemExit(0), None, None]))
    uninstall()
    assert reporter.close(10.0)
    # A failure reported by the hook would win over close()'s completion.
    assert "completed" == reporter.sink.task["status"]  # type: ignore[attr-defined]


def test_keyboard_interrupt_is_reported_as_interrupted(
    reporter: Reporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An uncaught ``KeyboardInterrupt`` is ``cancelled`` with reason ``interrupted``."""
    previous: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "excepthook", lambda t, e, tb: previous.append(t))
    uninstall = install_failure_hooks(reporter)
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)
    uninstall()
    assert reporter.close(10.0)
    task = reporter.sink.task  # type: ignore[attr-defined]
    assert [KeyboardInterrupt] == previous
    assert ("cancelled", "interrupted") == (task["status"], task["status_details"]["cancel_reason"])


def test_uninstall_restores_every_previous_hook(reporter: Reporter) -> None:
    """Install changes the three hooks; uninstall puts the previous ones back; twice is fine."""
    before = (sys.excepthook, threading.excepthook, signal.getsignal(signal.SIGTERM))
    uninstall = install_failure_hooks(reporter, sigterm=True)
    during = (sys.excepthook, threading.excepthook, signal.getsignal(signal.SIGTERM))
    uninstall()
    after = (sys.excepthook, threading.excepthook, signal.getsignal(signal.SIGTERM))
    uninstall()
    assert [False, False, False] == [a is b for a, b in zip(before, during, strict=True)]
    assert [True, True, True] == [a is b for a, b in zip(before, after, strict=True)]


def test_uninstall_under_a_later_hook_leaves_ours_passing_through(
    reporter: Reporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When another hook was chained on top, ours stays but no longer reports."""
    calls: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "excepthook", lambda t, e, tb: calls.append(t))
    uninstall = install_failure_hooks(reporter)
    ours = sys.excepthook

    def later(t: type[BaseException], e: BaseException, tb: Any) -> None:
        ours(t, e, tb)

    sys.excepthook = later
    uninstall()
    assert later is sys.excepthook
    sys.excepthook(ValueError, ValueError("after uninstall"), None)
    assert reporter.close(10.0)
    assert [ValueError] == calls
    # A failure reported by the hook would win over close()'s completion.
    assert "completed" == reporter.sink.task["status"]  # type: ignore[attr-defined]


def test_sigterm_hook_outside_the_main_thread_is_skipped_and_logged(reporter: Reporter) -> None:
    """Signal handlers exist only in the main thread; elsewhere the SIGTERM part is skipped."""
    before = signal.getsignal(signal.SIGTERM)
    results: list[object] = []

    def install() -> None:
        results.append(install_failure_hooks(reporter, sigterm=True))

    with capture_events() as events:
        thread = threading.Thread(target=install)
        thread.start()
        thread.join()
    uninstall = results[0]
    assert callable(uninstall)
    uninstall()
    assert before is signal.getsignal(signal.SIGTERM)
    assert ["trainreport.sigterm_hook_skipped"] == [
        e["event"] for e in events if e["event"].startswith("trainreport.sigterm")
    ]
