"""Test helpers shared by the engine tests: a sink whose next results are scripted."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainreport import MemorySink
from trainreport._facade._reporter import RANK_VARIABLES
from trainreport._runlog._format import HEADER, MAGIC
from trainreport._wire._sink_interface import OpenResult, SendResult, Sink, Update

# What the library reads from a process's environment, and the caller's shell may have
# set: a developer's own TRAINREPORT_URL, a rank from an enclosing job, a proxy that would
# route the tests' loopback requests elsewhere. No test may see them unless it sets them.
# The suite's own knobs (README's soak, the screenshot, PostgreSQL's binaries) stay.
CALLER_ENVIRONMENT_PREFIXES = ("TRAINREPORT_", "KUBEFLOW_TRAINER_")
SUITE_KNOBS = frozenset(
    f"TRAINREPORT_{knob}"
    for knob in ("STATEFUL_EXAMPLES", "KILLS", "SKIP_POSTGRES", "PG_BIN", "SAVE_SCREENSHOT")
)
CALLER_ENVIRONMENT_NAMES = (
    *RANK_VARIABLES,
    *(f"{name}_PROXY" for name in ("HTTP", "HTTPS", "ALL", "NO")),
    *(f"{name}_proxy" for name in ("http", "https", "all", "no")),
)


class ScriptedSink(Sink):
    """A MemorySink behind a script: queued results are returned instead of delivering.

    ``fail_sends.append(RetryLater("boom"))`` makes the next send fail that way
    (nothing is applied); when the script is empty, sends reach the MemorySink.
    ``open_results`` does the same for ``open()``. ``gate`` (an Event), when
    set up, makes every send wait for it (to hold a send in flight);
    ``open_gate`` does the same for every ``open()``. ``held`` is set when a
    request starts waiting at a gate.
    """

    def __init__(self, inner: MemorySink | None = None) -> None:
        self.inner = inner if inner is not None else MemorySink()
        self.fail_sends: deque[SendResult] = deque()
        self.open_results: deque[OpenResult] = deque()
        self.sent: list[Update] = []
        self.results: list[SendResult] = []
        self.gate: threading.Event | None = None
        self.open_gate: threading.Event | None = None
        self.held = threading.Event()
        self.closed = 0

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        if self.open_gate is not None:
            self.held.set()
            self.open_gate.wait(timeout_seconds if timeout_seconds is not None else 30)
        if self.open_results:
            return self.open_results.popleft()
        return self.inner.open(timeout_seconds=timeout_seconds)

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        if self.gate is not None:
            self.held.set()
            self.gate.wait(timeout_seconds if timeout_seconds is not None else 30)
        self.sent.append(update)
        result = self.fail_sends.popleft() if self.fail_sends else self.inner.send(update)
        self.results.append(result)
        return result

    def close(self) -> None:
        self.closed += 1

    @property
    def task(self) -> dict[str, Any] | None:
        return self.inner.task


def without_updated_at(task: dict[str, Any] | None) -> dict[str, Any] | None:
    """The task with ``status_details.updated_at`` removed (it is a send-time stamp)."""
    if task is None:
        return None
    details = dict(task["status_details"])
    details.pop("updated_at", None)
    return {**task, "status_details": details}


def held(sink: Any) -> dict[str, Any]:
    """The task record a sink holds (``MemorySink.task``), asserting there is one."""
    task = sink.task
    assert task is not None, "the sink holds no task"
    return dict(task)


def curve(task: dict[str, Any] | None, name: str) -> list[tuple[int, int | None, float | None]]:
    """A stored series as (step, epoch, value) tuples."""
    assert task is not None
    return [(p["step"], p["epoch"], p["value"]) for p in task["status_details"]["metrics"][name]]


def drive(reporter: Any) -> Any:
    """Start ``reporter`` without its thread; return the worker the test steps with ``cycle()``.

    Each ``worker.cycle()`` is one pass of the reporter thread (drain, settle,
    send what is due) run on the test's thread, at the reporter's clock's
    ``now``; ``close()`` and ``flush()`` run the closing pass and one cycle
    on the caller's thread.
    """
    reporter._start(threaded=False)
    worker = reporter._worker
    assert worker is not None
    return worker


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child: no TRAINREPORT_* variable, plus ``extra``.

    ``PYTHONPATH`` is this process's ``sys.path``, so the child imports the
    same trainreport as the test.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINREPORT_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m trainreport.cli ARGS`` with its output captured; never raises on exit codes.

    Args:
        args: the command line after ``trainreport``.
        env: the child's environment; :func:`clean_env` when ``None``.
    """
    return subprocess.run(
        [sys.executable, "-m", "trainreport.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=clean_env() if env is None else env,
    )


def record_ends(data: bytes) -> list[int]:
    """The offsets at which each record of a run log's bytes ends (after ``MAGIC``)."""
    ends, position = [], len(MAGIC)
    while position < len(data):
        length = HEADER.unpack_from(data, position)[3]
        position += HEADER.size + length
        ends.append(position)
    return ends


def in_a_forked_child(tmp_path: Path, body: Callable[[], str]) -> str:
    """``body()`` run in a child made with ``os.fork()``; returns the text it returned.

    The child writes the text to ``tmp_path / "child.txt"`` and leaves with
    ``os._exit`` (0, or 1 if ``body`` raised); the exit code 0 is asserted.
    """
    marker = tmp_path / "child.txt"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            marker.write_text(body())
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert 0 == os.waitstatus_to_exitcode(status)
    return marker.read_text()
