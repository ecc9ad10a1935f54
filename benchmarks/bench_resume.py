"""Resuming and reading a long run: the training process's RSS and the time it takes.

Setup (once, in this process): a task of N points (N / 100 steps of 100
metrics) stored on the reference server (a subprocess, series-suffix mode)
and the same run in a run log (``FileSink``).

Figures, each measured in a fresh child process (so that one figure's memory
never counts in another's), per tree:

1. **resume (HTTP)**: ``Reporter(HttpSink(url, job)).start()``, one training
   step with an omitted step number (it continues after the stored last
   step), ``close()``: the peak RSS above the child's RSS just before
   ``start()`` (``ru_maxrss``), and the wall time from ``start()`` to the
   end of ``close()``.
2. **resume (run log)**: the same with ``FileSink(path)``.
3. **read_task (HTTP)**: ``trainreport.client.read_task``: peak RSS above
   the baseline and wall time (what it returns is counted: it is the ``GET``
   shape, a dictionary per point).
4. **read_task (HTTP, columns)**: ``client.read_task(..., columns=True)``:
   each series three arrays (``ColumnPoints``), the same figures.
5. **read_back (HTTP)**: ``HttpSink.read_back`` (what a long run's
   ``Reporter.snapshot()`` reads the points that left memory with).
6. **read_task (run log)**: ``trainreport.read_task(path)``, the same.
7. **read_task (run log, columns)**: ``trainreport.read_task(path, columns=True)``.
8. **show (run log)**: ``trainreport show --file`` (a subprocess of its own):
   its peak RSS (``ru_maxrss`` of the child) and wall time.

Run:

    python benchmarks/bench_resume.py                          # N = 1,000,000
    python benchmarks/bench_resume.py --points 200000
    python benchmarks/bench_resume.py --compare-with OLD_TREE  # side by side

``--compare-with`` takes a checkout of an older version (``git worktree add
/tmp/old <commit>``, or ``git archive <commit> src | tar -x -C /tmp/old``) and
measures its ``src/`` in the children too, against the same stored task.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_SRC = _HERE.parent / "src"
METRICS = 100
JOB = "bench-resume"

#: One figure, in a child: prints {"rss_mb": ..., "seconds": ...}.
_CHILD = r"""
import json, resource, sys, time
kind, url, path, job = sys.argv[1:5]
import trainreport
from trainreport import client

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (resource.getpagesize() // 1024)

if kind.startswith("resume"):
    from trainreport import FileSink, Reporter, ReportingConfig
    from trainreport.sinks._http._sink import HttpSink
    sink = HttpSink(url, job) if kind == "resume-http" else FileSink(path)
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.0), rank=0)
    base = rss_kib()
    t0 = time.perf_counter()
    reporter.start()
    reporter.report_train_step(metrics={"m0": 0.5})
    delivered = reporter.close(timeout=300)
elif kind == "read-http":
    base = rss_kib()
    t0 = time.perf_counter()
    task = client.read_task(url, job, "train", timeout_seconds=600)
    points = sum(len(p) for p in task["status_details"]["metrics"].values())
elif kind == "read-http-columns":
    base = rss_kib()
    t0 = time.perf_counter()
    task = client.read_task(url, job, "train", timeout_seconds=600, columns=True)
    points = sum(len(p) for p in task["status_details"]["metrics"].values())
elif kind == "read-back-http":
    from trainreport.sinks._http._sink import HttpSink
    sink = HttpSink(url, job, read_timeout_seconds=600)
    base = rss_kib()
    t0 = time.perf_counter()
    task = sink.read_back(600)
    points = sum(len(p) for p in task["status_details"]["metrics"].values())
elif kind == "read-file-columns":
    base = rss_kib()
    t0 = time.perf_counter()
    task = trainreport.read_task(path, columns=True)
    points = sum(len(p) for p in task["status_details"]["metrics"].values())
else:
    base = rss_kib()
    t0 = time.perf_counter()
    task = trainreport.read_task(path)
    points = sum(len(p) for p in task["status_details"]["metrics"].values())
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rss_mb": (peak - base) / 1024, "seconds": seconds,
                  "ok": bool(globals().get("delivered", True))}))
"""


#: The figures measured in a child, in the table's order.
_KINDS = (
    "resume-http",
    "resume-file",
    "read-http",
    "read-http-columns",
    "read-back-http",
    "read-file",
    "read-file-columns",
)


def _store(url: str, log: Path, points: int) -> None:
    """The run, N points, on the server and in a run log (this tree's reporter)."""
    sys.path.insert(0, str(_SRC))
    from trainreport import FileSink, Reporter, ReportingConfig  # noqa: PLC0415
    from trainreport.sinks._http._sink import HttpSink  # noqa: PLC0415

    config = ReportingConfig(min_report_interval_seconds=1.0)
    for sink in (HttpSink(url, JOB), FileSink(log)):
        reporter = Reporter(sink, config, rank=0).start()
        for step in range(1, points // METRICS + 1):
            reporter.report_train_step(
                step=step, metrics={f"m{i}": 1.0 / (step + i) for i in range(METRICS)}
            )
            if step % 200 == 0:
                reporter.flush(timeout=60)
        reporter.report_completed()
        assert reporter.close(timeout=300)


def _child(tree: Path, kind: str, url: str, log: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "TRAINREPORT_JOURNAL": "0"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, url, str(log), JOB],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if out.returncode:
        tail = out.stderr.strip().splitlines()[-1:] or ["?"]
        return {"rss_mb": math.nan, "seconds": math.nan, "ok": False, "error": tail[0][:200]}
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def _show(tree: Path, log: Path) -> dict[str, Any]:
    """``trainreport show --file`` in a child: its peak RSS (MB) and wall time."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    code = (
        "import resource, subprocess, sys, time, json\n"
        "t0 = time.perf_counter()\n"
        "subprocess.run([sys.executable, '-m', 'trainreport.cli', 'show', '--file', sys.argv[1]],"
        " check=True, stdout=subprocess.DEVNULL)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'rss_mb': peak / 1024, 'seconds': time.perf_counter() - t0}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(log)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    """Store the run once, then measure each figure for each tree; print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--compare-with", type=Path, default=None, help="an older checkout")
    args = parser.parse_args(argv)
    # This tree first: an older tree's whole-task reads leave the server with
    # gigabytes of its own to give back, which would slow what follows.
    trees = [("this tree", _SRC.parent)]
    if args.compare_with is not None:
        trees.append(("old tree", args.compare_with.resolve()))
    sys.path.insert(0, str(_SRC))
    from trainreport.server import start_subprocess  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        # A response budget that holds the whole task's GET (an older tree's resume
        # reads it; the default 256 MiB answers a 1M-point GET with 503 server_busy).
        server = start_subprocess(str(Path(tmp) / "bench.db"), max_response_memory_bytes=8 << 30)
        try:
            log = Path(tmp) / "run.log"
            t0 = time.perf_counter()
            _store(server.url, log, args.points)
            print(f"stored {args.points:,} points in {time.perf_counter() - t0:.1f} s")
            rows = []
            for label, tree in trees:
                for kind in _KINDS:
                    rows.append((label, kind, _child(tree, kind, server.url, log)))
                rows.append((label, "show-file", _show(tree, log)))
        finally:
            server.stop()
    print(f"\n{'tree':<10} {'figure':<17} {'RSS MB':>9} {'seconds':>8}")
    for label, kind, fig in rows:
        said = "" if fig.get("ok", True) else f"  not delivered {fig.get('error', '')}"
        print(f"{label:<10} {kind:<17} {fig['rss_mb']:>9.1f} {fig['seconds']:>8.2f}{said}")
    return 0


def test_resume_and_reads_run_at_a_small_size(capsys: Any) -> None:
    """A short run of every figure (``pytest benchmarks/bench_resume.py``): each one completes."""
    assert main(["--points", "2000"]) == 0
    table = capsys.readouterr().out
    assert "not delivered" not in table
    assert sum(f" {kind} " in table for kind in (*_KINDS, "show-file")) == len(_KINDS) + 1


if __name__ == "__main__":
    raise SystemExit(main())
