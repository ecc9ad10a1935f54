"""The embedded default over a whole run: bytes FileSink writes, reporter CPU, loop slowdown.

Workload: the whole-run benchmarks' loop (``_loop.py``): ~200 µs of calibrated
pure-Python work a step, 14 metrics a step, 4 validation metrics every 100
steps, a checkpoint every 1,000, and the send interval scaled to one send per
~50 steps (10 ms). The reporter is ``Reporter(FileSink(...))``, what
``Reporter.from_env()`` builds without a URL, on a local temporary directory.

Figures, per run length N:

1. **bytes written / final record**: every byte the sink wrote over the run
   (log appends, compactions, the task record at close; for a FileSink that
   predates the run log, every rewrite of the record) divided by the final
   task record (compact JSON, the ``GET`` shape). Target: under 1.5x, at every N.
2. **reporter CPU per point**: the reporter thread's CPU time over the run
   (``time.thread_time()`` read when the thread closes the sink), less the
   sink's ``close`` (which writes the task record once, after the loop: every
   point formatted as decimal text), divided by the points recorded
   (14 N + 4 N / 100), microseconds; the close's share in brackets.
3. **loop slowdown**: the loop's wall time over the same loop with no
   reporting, run just before and after it (noise hits both).

4. **open beside N files** (``--open-beside N``, repeatable): one
   ``RunLogWriter.open`` and ``close`` of a small log in a directory holding N
   other run logs, microseconds (median of 5 samples of 200 opens): the open
   lists its directory for the temporaries a kill during a compaction left
   (``docs/engine.md``, "Writing, flushing, fsync, compaction").

Run:

    python benchmarks/bench_run_log.py                          # N = 2,000 and 20,000
    python benchmarks/bench_run_log.py --compare-with OLD_TREE  # side by side
    python benchmarks/bench_run_log.py --open-beside 1 --open-beside 10000 --compare-with OLD
    pytest benchmarks/bench_run_log.py --benchmark-disable      # a short run

``--compare-with`` takes a checkout of an older version (for example ``git
worktree add /tmp/old <commit>``) and measures its ``src/`` in a subprocess,
alternating with this tree's, in the same sitting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _figures import TARGET_BYTES_RATIO, TARGET_CPU_POINT_US, TARGET_SLOWDOWN
from _loop import (
    VAL_NAMES,
    VALIDATE_EVERY,
    NullTarget,
    ReporterTarget,
    Scenario,
    calibrate,
    run_interleaved,
)
from _measuring import MeasuringSink
from trainreport import FileSink, Reporter, ReportingConfig, read_task

HERE = Path(__file__).resolve().parent
BUSY_US = 200.0
SEND_EVERY = 50
INTERVAL_S = BUSY_US * 1e-6 * SEND_EVERY


def record_bytes(path: Path) -> int:
    """Size of the task that ``path`` (a run log or a JSON record) holds as compact JSON, bytes.

    The ``GET`` shape, read with ``trainreport.read_task``: the run log is the record
    (a ``FileSink`` writes no JSON record by default).
    """
    task = read_task(path)
    return len(json.dumps(task, separators=(",", ":"), ensure_ascii=False).encode())


class EmbeddedTarget(ReporterTarget):
    """``Reporter(FileSink(...))`` in a fresh directory, with the reporter thread's CPU measured.

    Args:
        directory: where the run's files go.
        interval_s: ``min_report_interval_seconds`` (the scaled interval).
    """

    def __init__(self, directory: Path, interval_s: float = INTERVAL_S) -> None:
        self.file_sink = FileSink(directory / "run.log")
        self.sink = MeasuringSink(self.file_sink)
        reporter = Reporter(
            self.sink, ReportingConfig(min_report_interval_seconds=interval_s), rank=0
        )
        super().__init__(reporter, close_timeout_s=120.0)

    def extras(self) -> dict[str, Any]:
        """Bytes written, the final record's size, the reporter thread's CPU."""
        self.sink.closed.wait(30.0)
        stats = self.reporter.stats()
        sink = self.file_sink
        # A FileSink that predates the run log has no bytes_written and no
        # record_path: every send rewrote the record at its path.
        written = getattr(sink, "bytes_written", None)
        record = Path(getattr(sink, "record_path", sink.path))
        if not record.exists():  # no JSON record written (the default): the log is the record
            record = Path(sink.path)
        return {
            "bytes_written": stats.bytes_sent if written is None else written,
            "record_bytes": record_bytes(record),
            "thread_cpu_s": self.sink.thread_cpu_s,
            "close_cpu_s": self.sink.close_cpu_s,
            "points_recorded": stats.points_recorded,
            "sends": len(self.sink.sends),
        }


def points_recorded(steps: int) -> int:
    """Series points the loop records over ``steps`` steps."""
    return 14 * steps + len(VAL_NAMES) * (steps // VALIDATE_EVERY)


def measure(steps: int, *, rounds: int = 1, iterations: int | None = None) -> dict[str, float]:
    """One design (the importable trainreport) over ``steps`` steps; the three figures."""
    iterations = calibrate() if iterations is None else iterations
    with tempfile.TemporaryDirectory(prefix="trainreport-runlog-") as tmp:
        counter = iter(range(1_000_000))

        def make() -> EmbeddedTarget:
            return EmbeddedTarget(Path(tmp) / f"r{next(counter)}")

        results = run_interleaved(
            [
                Scenario(("control", "local", steps), steps, NullTarget),
                Scenario(("embedded", "local", steps), steps, make),
            ],
            iterations,
            rounds=rounds,
        )
    result = results[("embedded", "local", steps)]
    assert result.run is not None, result.error
    extras = result.run.extras
    cpu = extras["thread_cpu_s"]
    return {
        "steps": float(steps),
        "bytes_written": float(extras["bytes_written"]),
        "record_bytes": float(extras["record_bytes"]),
        "bytes_ratio": extras["bytes_written"] / extras["record_bytes"],
        "reporter_cpu_s": math.nan if cpu is None else cpu,
        # The run's CPU per point, without the task record written once at close
        # (the record's text: every point formatted as decimal once), shown beside it.
        "cpu_us_per_point": (
            math.nan
            if cpu is None
            else (cpu - extras["close_cpu_s"]) / points_recorded(steps) * 1e6
        ),
        "close_cpu_us_per_point": extras["close_cpu_s"] / points_recorded(steps) * 1e6,
        "loop_s": result.run.wall_s,
        "slowdown": result.slowdown,
        "control": results[("control", "local", steps)].slowdown,
        "sends": float(extras["sends"]),
    }


def measure_open(others: int, *, opens: int = 200, samples: int = 5) -> float:
    """Median microseconds of one ``RunLogWriter.open`` and ``close`` of a small log
    in a directory holding ``others`` other (one-byte) files."""
    from trainreport._runlog._writer import RunLogWriter  # noqa: PLC0415 - the tree measured

    with tempfile.TemporaryDirectory(prefix="trainreport-open-") as tmp:
        directory = Path(tmp)
        for i in range(others):
            (directory / f"run-{i}.log").write_bytes(b"x")
        path = directory / "r.log"
        RunLogWriter.open(path).close()

        def once() -> None:
            RunLogWriter.open(path).close()

        runs = [timeit.timeit(once, number=opens) / opens * 1e6 for _ in range(samples)]
    return statistics.median(runs)


def _open_in(tree: Path | None, others: int) -> float:
    """:func:`measure_open` in a subprocess importing ``tree/src`` (``None``: this tree)."""
    src = (tree if tree is not None else HERE.parent) / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = [sys.executable, str(Path(__file__).resolve()), "--json", "--open-beside", str(others)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1])


def _render_opens(older: Path | None, sizes: list[int]) -> str:
    """The open's cost beside each N files, this tree and ``older`` alternating, 3 sittings."""
    trees = [("this tree", None)] + ([(f"older ({older.name})", older)] if older else [])
    lines = ["| N other files | " + " | ".join(n for n, _ in trees) + " |"]
    lines.append("|---|" + "---|" * len(trees))
    for n in sizes:
        figures: dict[str, list[float]] = {name: [] for name, _ in trees}
        for _ in range(3):
            for name, tree in trees:
                figures[name].append(_open_in(tree, n))
        cells = [f"{statistics.median(figures[name]):,.1f} µs" for name, _ in trees]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _measure_in(tree: Path | None, steps: int, rounds: int, iterations: int) -> dict[str, float]:
    """:func:`measure` in a subprocess importing ``tree/src`` (``None``: this tree)."""
    src = (tree if tree is not None else HERE.parent) / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = [sys.executable, str(Path(__file__).resolve()), "--json", "--steps", str(steps)]
    args += ["--rounds", str(rounds), "--iterations", str(iterations)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True, timeout=3600)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def render(rows: list[tuple[str, dict[str, float]]]) -> str:
    """A markdown table: one row per (design, N)."""
    lines = [
        "| design | N | bytes written | final record | written / record | "
        "reporter CPU / point [the record at close] | loop slowdown | sends |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:

        def mark(value: float, limit: float) -> str:
            return f"{'met' if value < limit else 'missed'}: < {limit:g}"

        lines.append(
            f"| {name} | {int(r['steps']):,} | {r['bytes_written'] / 1e6:,.2f} MB | "
            f"{r['record_bytes'] / 1e6:,.2f} MB | {r['bytes_ratio']:.2f}x "
            f"({mark(r['bytes_ratio'], TARGET_BYTES_RATIO)}x) | "
            f"{r['cpu_us_per_point']:.2f} µs "
            f"({mark(r['cpu_us_per_point'], TARGET_CPU_POINT_US)}) "
            f"[{r.get('close_cpu_us_per_point', math.nan):.2f} µs] | "
            f"{r['slowdown']:.2f}x ({mark(r['slowdown'], TARGET_SLOWDOWN)}x) | "
            f"{int(r['sends']):,} |"
        )
    return "\n".join(lines)


def test_embedded_default_bytes_and_cpu(benchmark: Any) -> None:
    """A short run of the embedded default (the figures are printed by main())."""
    result = benchmark.pedantic(measure, kwargs={"steps": 500, "iterations": 200}, rounds=1)
    benchmark.extra_info.update(result)
    assert result["record_bytes"] > 0


def main(argv: list[str] | None = None) -> int:
    """Print the table (or, with --json, one run's figures as JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, action="append", help="N (repeatable)")
    parser.add_argument("--rounds", type=int, default=0, help="rounds per N (default: 3, 1)")
    parser.add_argument("--iterations", type=int, default=0, help="busy-loop iterations a step")
    parser.add_argument("--compare-with", type=Path, help="an older checkout to measure beside")
    parser.add_argument(
        "--open-beside", type=int, action="append", help="time an open beside N files instead"
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.open_beside:
        if args.json:
            print(measure_open(args.open_beside[0]))
        else:
            print("RunLogWriter.open + close of a small log, median of 3 sittings\n")
            print(_render_opens(args.compare_with, args.open_beside))
        return 0
    sizes = args.steps or [2_000, 20_000]
    iterations = args.iterations or calibrate(BUSY_US)
    if args.json:
        rounds = args.rounds or (3 if sizes[0] <= 2_000 else 1)
        print(json.dumps(measure(sizes[0], rounds=rounds, iterations=iterations)))
        return 0
    rows = []
    for n in sizes:
        rounds = args.rounds or (3 if n <= 2_000 else 1)
        if args.compare_with is not None:
            rows.append(
                (
                    f"older ({args.compare_with.name})",
                    _measure_in(args.compare_with, n, rounds, iterations),
                )
            )
        rows.append(("this tree", _measure_in(None, n, rounds, iterations)))
    print(
        f"embedded default (FileSink), ~{BUSY_US:.0f} µs a step ({iterations:,} iterations), "
        f"14 metrics a step, validation every {VALIDATE_EVERY}, one send per ~{SEND_EVERY} "
        f"steps ({INTERVAL_S * 1000:.0f} ms)\n"
    )
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
