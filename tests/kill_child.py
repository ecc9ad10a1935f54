"""A training loop to kill: reports steps and writes the wall time of every report to a side file.

Run by ``tests/test_kill.py`` as ``python tests/kill_child.py SPEC`` where SPEC is
JSON: ``{"sink": "http" | "file", "url", "job", "extension", "path",
"journal_dir", "interval", "side", "steps", "step_seconds", "first_step",
"send_interval", "connect_timeout", "read_timeout", "recover_only", "stop_file",
"sigterm_hook"}``.

Each line of the side file is ``<step> <time.time() after the report call
returned>``, written with one unbuffered ``os.write`` (the kernel has it
when the call returns, so it survives ``kill -9``). Values are a function of
the step (:func:`value_of`), so the parent checks every stored point.

``recover_only``: start a reporter on the same job and task, report nothing,
close: the restart that recovers a dead process's journal.

``stop_file``: the loop ends when this file exists; the child then creates
``<stop_file>.closing`` and calls ``close()`` (a kill during the close).
``sigterm_hook``: ``install_failure_hooks(reporter, sigterm=True)`` (a SIGTERM
reports ``preempted`` and closes, within ``atexit_timeout_seconds``).
"""

from __future__ import annotations

import json
import os
import sys
import time

import trainreport
from trainreport import FileSink, HttpSink, Reporter, ReportingConfig

METRICS = ("loss", "acc", "lr")


def value_of(step: int, name: str) -> float:
    """The value a child reports for ``name`` at ``step``."""
    return {"loss": 10.0 / step, "acc": step / (step + 1.0), "lr": 1e-3 + step * 1e-9}[name]


def main(spec: dict[str, object]) -> None:
    interval = float(spec["interval"])  # type: ignore[arg-type]
    config = ReportingConfig(
        min_report_interval_seconds=float(spec.get("send_interval", 0.2)),  # type: ignore[arg-type]
        journal_interval_seconds=interval,
        journal_dir=str(spec.get("journal_dir") or "trainreport-runs/journal"),
        backoff_initial_seconds=0.05,
        backoff_max_seconds=0.3,
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
    for step in range(first, first + int(spec["steps"])):  # type: ignore[call-overload]
        reporter.report_train_step(
            step=step, epoch=1, metrics={name: value_of(step, name) for name in METRICS}
        )
        os.write(side, f"{step} {time.time():.6f}\n".encode())
        if stop is not None and os.path.exists(stop):
            break
        time.sleep(pause)
    if stop is not None:
        with open(f"{stop}.closing", "w") as marker:
            marker.write(f"{time.time():.6f}\n")
    reporter.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
