"""The reporter thread's ingest throughput, and whether it keeps up with a fast loop (issue 23).

A training loop that reports 100 metrics a step every 50 µs hands the reporter
thread two million points a second; the queue's memory guard
(``max_queue_bytes``) drops what arrives while the queue is over its budget
(``queue_full``). This measures:

- **ingest**: ``Recorder.apply_all`` on queues of training reports as
  ``report_train_step`` queues them (the short form), drained in chunks as the
  reporter thread drains, on this thread: points per second of CPU
  (``time.thread_time``). No sends: the work a drain does;
- **sink**: ``FileSink("run.log").send`` alone, on this thread: CPU a send
  and a point, for sends of 100 series of 50 points with their times (every
  tenth one a rewind of one point);
- **loops**: a real ``Reporter`` writing the embedded default's run log
  (``FileSink``), fed by a loop that reports ``width`` metrics a step, either
  paced (one step every ``pace`` µs on average: step n starts ``n * pace``
  µs after the first, spun in pure Python so that it holds the interpreter
  as a training step's Python does) or tight (no work between calls).
  Per loop: the reports dropped by the guard, the reporter thread's CPU (its
  own clock, ``pthread_getcpuclockid``) and the points it recorded per
  second of it, the deepest queue seen (reports, and the guard's estimate in
  MiB), the report call's p50, the loop's achieved µs per step, and the time
  ``close()`` took.

Run:

    python benchmarks/bench_ingest.py                  # 100,000 steps x 100 metrics
    python benchmarks/bench_ingest.py --steps 20000
    pytest benchmarks/bench_ingest.py --benchmark-disable  # a short run
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import percentile
from trainreport import FileSink, MemorySink, Reporter, ReportingConfig
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report
from trainreport._reporting_config import ReportingConfig as _Config
from trainreport._wire._payloads import StoredState
from trainreport._wire._sink_interface import SeriesUpdate, Update

STEPS = 100_000
WIDTH = 100
PACE_US = 50.0
#: Reports per drain in the ingest figure (a send interval's worth at 50 µs a step).
CHUNK = 2_000


def metric_names(width: int) -> list[str]:
    """``width`` metric names, as a large model's loop logs (per-layer norms and the like)."""
    return [f"layer_{i:03d}_grad_norm" for i in range(width)]


def _queued(steps: int, width: int) -> list[Report]:
    """The reports ``report_train_step`` queues for ``steps`` steps of ``width`` metrics."""
    names = metric_names(width)
    reporter = Reporter(MemorySink(), ReportingConfig(), rank=0)  # unstarted: the queue only
    for s in range(1, steps + 1):
        base = 1.0 / s
        reporter.report_train_step(
            step=s, epoch=1, metrics={n: base * i for i, n in enumerate(names, 1)}
        )
    return list(reporter._queue)


def measure_ingest(steps: int = 20_000, width: int = WIDTH) -> dict[str, float]:
    """Points per second of CPU of ``Recorder.apply_all`` (drained ``CHUNK`` reports at a time)."""
    items = _queued(steps, width)
    # Each queue holds the only reference to its reports, so that freeing them is
    # counted, as on the reporter thread.
    queues = [collections.deque(items[start : start + CHUNK]) for start in range(0, steps, CHUNK)]
    del items
    recorder = Recorder(_Config())
    recorder.start_attempt()
    recorder.seed(StoredState(series={}))
    gc.collect()
    t0 = time.thread_time()
    for queue in queues:
        recorder.apply_all(queue)
    elapsed = time.thread_time() - t0
    points = steps * width
    return {
        "points": float(points),
        "cpu_seconds": elapsed,
        "points_per_cpu_second": points / elapsed,
        "cpu_us_per_report": elapsed / steps * 1e6,
    }


def measure_sink(sends: int = 400, width: int = WIDTH, steps: int = 50) -> dict[str, float]:
    """CPU of ``FileSink("run.log").send`` on this thread: ``sends`` suffixes of ``steps`` points.

    Each send carries ``width`` series of ``steps`` new points with their times,
    as the engine sends a send interval's worth to the embedded default; every
    tenth send starts one point early (a rewind of the last point). The figure
    is the sink's own share of the reporter thread: encoding the record, the
    ``write()`` and the log's state (no fsync: the interval is infinite).
    """
    names = metric_names(width)
    with tempfile.TemporaryDirectory() as tmp:
        sink = FileSink(Path(tmp) / "run.log", fsync_interval_seconds=float("inf"))
        sink.open()
        updates = []
        for k in range(sends):
            first = k * steps + 1 - (1 if k and not k % 10 else 0)
            step_col = array("q", range(first, (k + 1) * steps + 1))
            count = len(step_col)
            series = tuple(
                SeriesUpdate(
                    n,
                    first - 1,
                    step_col,
                    array("i", [1]) * count,
                    array("d", [1.0 / (i + 1)]) * count,
                    array("d", [1.7e9]) * count,
                )
                for i, n in enumerate(names)
            )
            updates.append(Update("running", {"step": (k + 1) * steps}, series, False))
        gc.collect()
        t0 = time.thread_time()
        for update in updates:
            sink.send(update)
        elapsed = time.thread_time() - t0
        sink.close()
    points = sum(u.point_count for u in updates)
    return {
        "points": float(points),
        "cpu_seconds": elapsed,
        "sends": float(sends),
        "cpu_us_per_send": elapsed / sends * 1e6,
        "cpu_ns_per_point": elapsed / points * 1e9,
    }


def _thread_cpu(thread: threading.Thread | None) -> float:
    """CPU seconds ``thread`` has used so far (0.0 once it ended or if unknown)."""
    if thread is None or thread.ident is None:
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, AttributeError):  # ended meanwhile, or not a POSIX system
        return 0.0


def measure_loop(
    steps: int = STEPS, width: int = WIDTH, pace_us: float = PACE_US, **config: Any
) -> dict[str, float]:
    """A real Reporter (FileSink) fed ``steps`` steps of ``width`` metrics, one every ``pace_us``.

    ``pace_us=0``: a tight loop. ``config``: ``ReportingConfig`` fields (defaults otherwise).
    """
    names = metric_names(width)
    pace_ns = int(pace_us * 1000)
    clock = time.perf_counter_ns
    durations: list[float] = []
    deepest = 0
    with tempfile.TemporaryDirectory() as tmp:
        reporter = Reporter(
            FileSink(Path(tmp) / "run.log"), ReportingConfig(**config), rank=0
        ).start()
        reporter.report_training_start(max_steps=steps)
        worker = reporter._worker
        thread = worker.thread if worker is not None else None
        cpu0 = _thread_cpu(thread)
        gc.collect()
        start = clock()
        for step in range(1, steps + 1):
            if pace_ns:
                # The loop holds its rate: step n starts at start + n * pace (one that
                # waited for the interpreter is made up for by the steps after it).
                until = start + step * pace_ns
                while clock() < until:  # the step's own work, holding the interpreter
                    pass
            base = 1.0 / step
            metrics = {n: base * i for i, n in enumerate(names, 1)}
            t0 = clock()
            reporter.report_train_step(step=step, epoch=1, metrics=metrics)
            durations.append((clock() - t0) / 1000.0)
            if not step % 500:
                deepest = max(deepest, len(reporter._queue))
        loop_s = (clock() - start) / 1e9
        cpu_loop = _thread_cpu(thread) - cpu0
        left = len(reporter._queue)  # still queued: not in the loop's reporter CPU
        deepest_bytes = deepest * (256 + 48 * width)
        t_close = time.perf_counter()
        delivered = reporter.close(timeout=120)
        close_s = time.perf_counter() - t_close
        stats = reporter.stats()
    drops = int(stats.drops.get("queue_full", 0))
    applied = (steps - drops - left) * width  # points the thread recorded during the loop
    durations.sort()
    return {
        "steps": float(steps),
        "drops": float(drops),
        "delivered": float(delivered),
        "reporter_cpu_s": cpu_loop,
        "points_per_cpu_second": applied / cpu_loop if cpu_loop else 0.0,
        "left_at_loop_end": float(left),
        "deepest_queue": float(deepest),
        "deepest_queue_mib": deepest_bytes / 2**20,
        "call_p50_us": percentile(durations, 0.5),
        "call_p99_us": percentile(durations, 0.99),
        "us_per_step": loop_s / steps * 1e6,
        "close_s": close_s,
    }


# --- pytest-benchmark entry points -------------------------------------------------------


def test_ingest_points_per_cpu_second(benchmark: Any) -> None:
    """Ingest throughput of a drain, 100 metrics a report (a short run)."""
    result = benchmark.pedantic(measure_ingest, kwargs={"steps": 2_000}, rounds=1)
    benchmark.extra_info.update(result)
    assert result["points"] == 2_000 * WIDTH


def test_file_sink_send_cost(benchmark: Any) -> None:
    """CPU of the embedded default's send, 100 series of 50 points (a short run)."""
    result = benchmark.pedantic(measure_sink, kwargs={"sends": 20}, rounds=1)
    benchmark.extra_info.update(result)
    assert result["points"] == 20 * WIDTH * 50 + 1 * WIDTH


def test_paced_loop_keeps_up(benchmark: Any) -> None:
    """A paced loop of 100 metrics every 50 µs through a real Reporter (a short run)."""
    result = benchmark.pedantic(measure_loop, kwargs={"steps": 2_000}, rounds=1)
    benchmark.extra_info.update(result)
    assert result["delivered"] == 1.0


def test_tight_loop_counts_its_drops(benchmark: Any) -> None:
    """A tight loop against a tiny guard: whatever is dropped is counted, close still returns."""
    result = benchmark.pedantic(
        measure_loop,
        kwargs={"steps": 2_000, "pace_us": 0.0, "max_queue_bytes": 2**20},
        rounds=1,
    )
    benchmark.extra_info.update(result)
    assert (result["drops"] == 0) == (result["delivered"] == 1.0)


def main(argv: list[str] | None = None) -> int:
    """Print the ingest figures as a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--pace-us", type=float, default=PACE_US)
    parser.add_argument(
        "--only",
        choices=["ingest", "sink", "paced", "tight"],
        action="append",
        help="(repeatable)",
    )
    args = parser.parse_args(argv)
    only = set(args.only or ["ingest", "sink", "paced", "tight"])
    ingest = measure_ingest(min(args.steps, 20_000), args.width) if "ingest" in only else None
    sink = measure_sink(width=args.width) if "sink" in only else None
    loops = []
    if "paced" in only:
        loops.append(
            (f"paced, {args.pace_us:g} µs", measure_loop(args.steps, args.width, args.pace_us))
        )
    if "tight" in only:
        loops.append(("tight", measure_loop(args.steps, args.width, 0.0)))
    print(
        f"{args.steps} steps x {args.width} metrics, FileSink, default guard "
        f"({ReportingConfig().max_queue_bytes / 2**20:.0f} MiB)\n"
    )
    if ingest is not None:
        print(
            f"ingest (apply_all, {CHUNK} reports a drain): "
            f"{ingest['points_per_cpu_second'] / 1e6:.2f} M points / s of CPU "
            f"({ingest['cpu_us_per_report']:.1f} µs a report)\n"
        )
    if sink is not None:
        print(
            f"sink (FileSink.send, {sink['points'] / sink['sends']:,.0f} points a send): "
            f"{sink['cpu_us_per_send']:.0f} µs of CPU a send, "
            f"{sink['cpu_ns_per_point']:.1f} ns a point\n"
        )
    if not loops:
        return 0
    print(
        "| loop | µs / step | dropped (queue_full) | reporter CPU | points / s of reporter CPU "
        "| deepest queue | report call p50 / p99 | close |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in loops:
        print(
            f"| {label} | {r['us_per_step']:.1f} | {r['drops']:.0f} "
            f"| {r['reporter_cpu_s']:.2f} s | {r['points_per_cpu_second'] / 1e6:.2f} M "
            f"| {r['deepest_queue']:.0f} ({r['deepest_queue_mib']:.0f} MiB) "
            f"| {r['call_p50_us']:.2f} / {r['call_p99_us']:.2f} µs | {r['close_s']:.2f} s |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
