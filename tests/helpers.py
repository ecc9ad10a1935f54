"""Test helpers shared by the engine tests: a sink whose next results are scripted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainreport import MemorySink
from trainreport._engine import _worker as _worker_module
from trainreport._engine._worker import Worker
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


#: How long a stepping test waits for the reporter thread (or a sender thread) at most,
#: in real seconds, before it fails instead of hanging.
STEP_TIMEOUT_SECONDS = 30.0


class SteppedWorker(Worker):
    """The reporter thread, held between cycles: the test says when it runs the next one.

    A real :class:`Worker` with its real thread, senders and sinks; only its
    one wait between cycles (:meth:`Worker.idle`, production's
    ``Event.wait(timeout)``) is replaced by a wait for the test. So a test
    steps the very code production runs, on the thread production runs it
    on, at the injected clock's ``now``, without a production mode for it:

    - the thread parks after beginning the attempt (before its first cycle)
      and after every cycle; report calls' wakes do not move it;
    - :meth:`cycle`, called from the test's thread, lets it run one cycle
      and returns once it is parked again;
    - it is not held while a request is in flight on a sender thread
      (several destinations, or a journal: production's rule) nor while a
      ``flush()`` waits: it waits as production does, woken when the sender
      ends the request (its answer settled in the cycle that follows, as in
      production), so a test never sees a request ended but not settled;
    - once ``close()`` began it is never held again: the closing pass runs
      on the thread within the real-time deadline and ``close()`` joins it.

    Every wait for the thread is bounded by :data:`STEP_TIMEOUT_SECONDS` and
    fails the test (``AssertionError``) rather than hang.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._turn = threading.Condition()
        self._grants = 0  # cycles the test allowed and the thread has not begun
        self._cycles = 0  # cycles the thread ran
        self._between = False  # between cycles, nothing in flight: the test may look
        self._last_wait = 0.0

    # --- on the reporter thread ------------------------------------------------------

    def _begin(self) -> None:
        first = not self._began
        super()._begin()
        if first and threading.current_thread() is self.thread:
            self._hold()  # the first cycle waits for the test too
            self._leave()

    def idle(self, seconds: float) -> None:
        """Park until the test grants a cycle; otherwise wait as production does."""
        if self._hold() == "run":
            super().idle(seconds)
        self._leave()

    def _hold(self) -> str:
        """``"grant"`` (the test's cycle), ``"stop"`` (close) or ``"run"`` (production's wait)."""
        with self._turn:
            while True:
                if self._stopping:
                    return "stop"
                if self._grants:
                    self._grants -= 1
                    return "grant"
                busy = any(d.job is not None for d in self.destinations)
                self._between = not busy
                self._turn.notify_all()
                if busy or self.core.flush.waiting:
                    return "run"
                self._turn.wait()

    def _leave(self) -> None:
        with self._turn:
            self._between = False

    # --- on the test's thread ----------------------------------------------------------

    def cycle(self) -> float:
        """From the test: one cycle of the reporter thread, then wait until it is between cycles.

        On the reporter thread itself this is :meth:`Worker.cycle`.

        Returns:
            the seconds the thread waits after the last cycle it ran.
        """
        if threading.current_thread() is self.thread:
            wait = super().cycle()
            with self._turn:
                self._last_wait = wait
                self._cycles += 1
            return wait
        assert self.thread.is_alive(), "the reporter thread has ended (close() was called)"
        with self._turn:
            ran = self._cycles
            self._grants += 1
            self._turn.notify_all()
        self.wake.set()  # cuts production's wait short, if the thread is in it
        with self._turn:
            assert self._turn.wait_for(
                lambda: (
                    (self._cycles > ran and self._between and not self._grants)
                    or not self.thread.is_alive()
                ),
                STEP_TIMEOUT_SECONDS,
            ), "the reporter thread did not finish its cycle (a request did not end?)"
            return self._last_wait

    def wait_parked(self) -> None:
        """Wait until the thread is between cycles with nothing in flight (or has ended)."""
        with self._turn:
            assert self._turn.wait_for(
                lambda: self._between or not self.thread.is_alive(), STEP_TIMEOUT_SECONDS
            ), "the reporter thread did not park"

    def everything_delivered(self) -> bool:
        """:meth:`Worker.everything_delivered`, once the requests a flush made are settled.

        ``flush()`` asks it after its wait: the test sees the answers applied.
        """
        if threading.current_thread() is not self.thread and self.thread.is_alive():
            self.wait_parked()
        return super().everything_delivered()

    def request_flush(self) -> threading.Event:
        """:meth:`Worker.request_flush`, and let the held thread go (a flush waits)."""
        done = super().request_flush()
        with self._turn:
            self._turn.notify_all()
        return done

    def stop(self, deadline: float) -> None:
        """:meth:`Worker.stop`, and let the held thread go to its closing pass."""
        super().stop(deadline)
        with self._turn:
            self._turn.notify_all()


def drive(reporter: Any) -> SteppedWorker:
    """Start ``reporter`` with its thread held between cycles (:class:`SteppedWorker`).

    Returns the worker once its thread began the attempt (at the clock's
    ``now``) and parked before its first cycle; the test then runs cycles
    with ``worker.cycle()`` (or ``reporter._worker.cycle()``), and
    ``flush()`` and ``close()`` work as in production. The reporter builds a
    :class:`SteppedWorker` instead of a :class:`Worker` for this one
    ``start()`` (the driver is looked up when the reporter starts).
    """
    original = _worker_module.Worker
    _worker_module.Worker = SteppedWorker  # type: ignore[misc]
    try:
        reporter.start()
    finally:
        _worker_module.Worker = original  # type: ignore[misc]
    worker = reporter._worker
    assert isinstance(worker, SteppedWorker)
    worker.wait_parked()
    return worker


def exited(reporter: Any) -> None:
    """Wait until ``reporter``'s thread ended, as if its process exited as ``close()`` returned.

    ``close(timeout)`` returns by its deadline while the thread ends its closing
    pass (the journal's last record, the sinks closed) just after; a test that
    models the process dying there, and starts the next one in the same
    process, waits for that end first, so the next process finds the
    journal's lock released as the kernel would have.
    """
    worker = reporter._worker
    if worker is not None:
        worker.thread.join(STEP_TIMEOUT_SECONDS)
        assert not worker.thread.is_alive(), "the reporter thread did not end after close()"


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


def kill_at_replace() -> None:
    """From now on, this process kills itself with ``SIGKILL`` at its next ``os.replace``.

    For a child of :func:`killed_in_a_forked_child`: a ``kill -9`` at the moment
    between a compaction's temporary file and its rename, which a random kill
    would hit only now and then. Never call it in the test process itself.
    """

    def die(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    os.replace = die


def killed_in_a_forked_child(body: Callable[[], object]) -> None:
    """``body()`` run in a child made with ``os.fork()``, which must die of ``SIGKILL``.

    The body kills itself where the test wants the ``kill -9`` (say,
    :func:`kill_at_replace`); a child that returns, raises or exits otherwise
    fails the test (asserted). The child shares the test process's open files
    (``fork``): open none that it must not hold.
    """
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            body()
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), f"the child was not killed: {status:#x}"
    assert signal.SIGKILL == os.WTERMSIG(status)
