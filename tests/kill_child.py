"""A training loop to kill: reports steps and writes the wall time of every report to a side file.

Run by ``tests/contracts/test_kill.py`` as ``python tests/kill_child.py SPEC`` where SPEC is
JSON: ``{"sink": "http" | "file", "url", "job", "extension", "path",
"journal_dir", "interval", "side", "steps", "step_seconds", "first_step",
"send_interval", "connect_timeout", "read_timeout", "recover_only", "stop_file",
"sigterm_hook", "attempt", "salt", "clock_offset", "disk_full_file",
"compact_always", "rejected_backoff", "released_file"}``.

Each line of the side file is ``<step> <time.time() after the report call
returned>``, written with one unbuffered ``os.write`` (the kernel has it
when the call returns, so it survives ``kill -9``). Values are a function of
the step (:func:`value_of`), so the parent checks every stored point.

``released_file``: every 50 steps, the number of points that left the
store's memory so far (``docs/engine.md``, "Memory"; the store's
``points_released``, read by test code) is written over this file's first
line, so the parent knows points had left memory before the kill.

``recover_only``: start a reporter on the same job and task, report nothing,
close: the restart that recovers a dead process's journal.

``stop_file``: the loop ends when this file exists; the child then creates
``<stop_file>.closing`` and calls ``close()`` (a kill during the close).
``sigterm_hook``: ``install_failure_hooks(reporter, sigterm=True)`` (a SIGTERM
reports ``preempted`` and closes, within ``atexit_timeout_seconds``).

Faults the child brings on itself (it is test code; the library is not patched
elsewhere):

- ``attempt``: the job system's attempt number (``TRAINREPORT_ATTEMPT``), for
  two attempts on one node; ``salt`` is added to every value, so each process's
  points are told apart from another's at the same step (:func:`value_of`).
- ``clock_offset``: the wall clock stepped by this many seconds (an NTP
  correction between restarts): ``time.time`` and the boot time the process
  start time is computed from (``/proc/stat``'s ``btime`` moves with the clock),
  so the journal's stamps, ``updated_at`` and the attempt's ``started_at``
  all see the stepped clock. The side file keeps the real clock.
- ``disk_full_file``: once this file exists, every write to a file under
  ``journal_dir`` fails as on a full disk: the first one writes half its bytes
  (a short write), every later one raises ``ENOSPC``.
- ``compact_always``: the run log is compacted at every send (the compaction
  that replaces the file a second ``FileSink`` may be about to lock).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time

import trainreport
from trainreport import FileSink, HttpSink, Reporter, ReportingConfig

METRICS = ("loss", "acc", "lr")


#: The real wall clock, kept before ``clock_offset`` steps ``time.time`` (the side file's).
REAL_TIME = time.time
#: The real ``os.write``, kept before ``disk_full_file`` wraps it (the side file's).
REAL_WRITE = os.write


def value_of(step: int, name: str, salt: float = 0.0) -> float:
    """The value a child given ``salt`` reports for ``name`` at ``step``."""
    base = {"loss": 10.0 / step, "acc": step / (step + 1.0), "lr": 1e-3 + step * 1e-9}[name]
    return base + salt


def step_the_wall_clock(offset: float) -> None:
    """``time.time`` and the boot time read from ``/proc/stat`` run ``offset`` seconds off."""
    from trainreport._wire import _attempt  # noqa: PLC0415

    real_boot = _attempt._boot_time
    time.time = lambda: REAL_TIME() + offset

    def boot_time() -> float | None:
        boot = real_boot()
        return None if boot is None else boot + offset

    _attempt._boot_time = boot_time


def fill_the_disk_when(trigger: str, directory: str) -> None:
    """Writes to files under ``directory`` fail as on a full disk once ``trigger`` exists."""
    root = os.path.realpath(directory) + os.sep
    short_written: list[int] = []

    def write(fd: int, data: bytes | bytearray | memoryview) -> int:
        if os.path.exists(trigger):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.startswith(root):
                view = memoryview(data)
                if not short_written and len(view) > 1:
                    short_written.append(fd)
                    return REAL_WRITE(fd, view[: len(view) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return REAL_WRITE(fd, data)

    os.write = write  # type: ignore[assignment]


def main(spec: dict[str, object]) -> None:
    if spec.get("attempt") is not None:
        os.environ["TRAINREPORT_ATTEMPT"] = str(spec["attempt"])
    if spec.get("clock_offset"):
        step_the_wall_clock(float(spec["clock_offset"]))  # type: ignore[arg-type]
    if spec.get("disk_full_file"):
        fill_the_disk_when(str(spec["disk_full_file"]), str(spec["journal_dir"]))
    if spec.get("compact_always"):
        from trainreport._runlog._writer import RunLogWriter  # noqa: PLC0415

        def always(self: RunLogWriter, points: int | None = None) -> bool:
            return True

        RunLogWriter.compaction_due = always  # type: ignore[method-assign]
    salt = float(spec.get("salt", 0.0))  # type: ignore[arg-type]
    interval = float(spec["interval"])  # type: ignore[arg-type]
    config = ReportingConfig(
        min_report_interval_seconds=float(spec.get("send_interval", 0.2)),  # type: ignore[arg-type]
        journal_interval_seconds=interval,
        journal_dir=str(spec.get("journal_dir") or "trainreport-runs/journal"),
        backoff_initial_seconds=0.05,
        backoff_max_seconds=0.3,
        rejected_backoff_seconds=float(spec.get("rejected_backoff", 300.0)),  # type: ignore[arg-type]
        close_timeout_seconds=20.0,
        close_unanswered_seconds=20.0,
        atexit_timeout_seconds=20.0,
    )
    if spec["sink"] == "file":
        sink: trainreport.Sink = FileSink(str(spec["path"]), job_id=str(spec["job"]))
    else:
        sink = HttpSink(
            str(spec["url"]),
            str(spec["job"]),
            use_extension=bool(spec["extension"]),
            connect_timeout_seconds=float(spec.get("connect_timeout", 0.5)),  # type: ignore[arg-type]
            read_timeout_seconds=float(spec.get("read_timeout", 2.0)),  # type: ignore[arg-type]
        )
    reporter = Reporter(sink, config, rank=0).start()
    if spec.get("sigterm_hook"):
        from trainreport.integrations import install_failure_hooks  # noqa: PLC0415

        install_failure_hooks(reporter, sigterm=True)
    stop = str(spec["stop_file"]) if spec.get("stop_file") else None
    if spec.get("recover_only"):
        sys.exit(0 if reporter.close() else 3)
    side = os.open(str(spec["side"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    reporter.report_training_start(max_steps=10**8, num_epochs=1)
    pause = float(spec["step_seconds"])  # type: ignore[arg-type]
    first = int(spec.get("first_step", 1))  # type: ignore[call-overload]
    released = None
    if spec.get("released_file"):
        released = os.open(str(spec["released_file"]), os.O_WRONLY | os.O_CREAT, 0o644)
    for step in range(first, first + int(spec["steps"])):  # type: ignore[call-overload]
        reporter.report_train_step(
            step=step, epoch=1, metrics={name: value_of(step, name, salt) for name in METRICS}
        )
        REAL_WRITE(side, f"{step} {REAL_TIME():.6f}\n".encode())
        if released is not None and step % 50 == 0:
            os.pwrite(released, f"{points_released(reporter):>20}\n".encode(), 0)
        if stop is not None and os.path.exists(stop):
            break
        time.sleep(pause)
    if stop is not None:
        with open(f"{stop}.closing", "w") as marker:
            marker.write(f"{REAL_TIME():.6f}\n")
    reporter.close()


def points_released(reporter: Reporter) -> int:
    """Points that left the reporter's memory so far (test code reads the store's counter)."""
    recorder = reporter._recorder
    return 0 if recorder is None else recorder._record.store.points_released


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
