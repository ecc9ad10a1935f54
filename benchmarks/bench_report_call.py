"""Micro benchmarks of the engine (docs/design.md#performance), pytest-benchmark style.

Run all:   pytest benchmarks/bench_report_call.py --benchmark-only
As a script (prints a table): python benchmarks/bench_report_call.py [--steps N]

Figures:
1. time inside ``report_train_step`` with 14 metrics (median, p99, p99.9, max) over
   20,000 calls, with the reporter thread running and sending to a MemorySink at
   the scaled interval (one send per 50 steps: 10 ms at 0.2 ms a step);
2. reporter-thread CPU per recorded point: applying the queued reports to the
   store, building updates every 50 steps and encoding them (both wire modes),
   run on this thread so ``time.process_time`` measures exactly that work;
3. store memory per retained point (tracemalloc), the queue's peak separately.
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _figures import (
    TARGET_BYTES_PER_POINT,
    TARGET_CALL_P50_US,
    TARGET_CALL_P99_US,
    TARGET_CPU_POINT_US,
)
from _workload import metrics_for, percentile
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._config import ReportingConfig as _Config
from trainreport._payloads import StoredState, encode_patch_body, encode_suffix_body
from trainreport._recorder import Recorder
from trainreport._reports import train

STEPS = 20_000
SEND_EVERY = 50


def measure_report_call(steps: int = STEPS, busy_us: float = 200.0) -> dict[str, float]:
    """Time each report_train_step call (µs) while the reporter thread runs for real."""
    sink = MemorySink(series_suffix=True)
    config = ReportingConfig(min_report_interval_seconds=busy_us * 1e-6 * SEND_EVERY)
    reporter = Reporter(sink, config, rank=0).start()
    reporter.report_training_start(max_steps=steps)
    durations: list[float] = []
    clock = time.perf_counter_ns
    work_until = 0
    for step in range(1, steps + 1):
        work_until = clock() + int(busy_us * 1000)
        while clock() < work_until:  # the training step's own work
            pass
        metrics = metrics_for(step)
        t0 = clock()
        reporter.report_train_step(step=step, epoch=1, metrics=metrics)
        durations.append((clock() - t0) / 1000.0)
    reporter.close(timeout=30)
    durations.sort()
    return {
        "p50_us": percentile(durations, 0.5),
        "p99_us": percentile(durations, 0.99),
        "p999_us": percentile(durations, 0.999),
        "max_us": durations[-1],
        "sum_ms": sum(durations) / 1000.0,
        "requests": float(len(sink.requests)),
    }


def _recorded_items(steps: int) -> list[tuple[Any, ...]]:
    return [train(0.0, s, 1, metrics_for(s)) for s in range(1, steps + 1)]


def measure_reporter_cpu(steps: int = STEPS, *, suffix: bool = True) -> dict[str, float]:
    """CPU seconds of the reporter-thread work per recorded point (µs), one wire mode."""
    items = _recorded_items(steps)
    recorder = Recorder(_Config())
    recorder.start_attempt()
    recorder.seed(StoredState(series={}))
    points = 0
    gc.collect()
    t0 = time.process_time()
    for start in range(0, steps, SEND_EVERY):
        # as the reporter thread drains: the whole queue under one acquisition of the lock
        recorder.apply_all(collections.deque(items[start : start + SEND_EVERY]))
        build = recorder.build_update(0, wall="2026-11-29T00:00:00Z", full_state=not suffix)
        update = build.update
        points += update.point_count
        body = (
            encode_suffix_body(update, writer_generation=1, sequence=start)
            if suffix
            else encode_patch_body(update)
        )
        recorder.on_delivered(0, build, None)
        del body
    elapsed = time.process_time() - t0
    recorded = steps * 14
    return {
        "cpu_us_per_recorded_point": elapsed / recorded * 1e6,
        "points_encoded": float(points),
        "cpu_seconds": elapsed,
    }


def measure_memory(steps: int = STEPS) -> dict[str, float]:
    """Bytes per retained point in the store (tracemalloc), and the queue's peak bytes."""
    items = _recorded_items(steps)
    recorder = Recorder(_Config())
    recorder.start_attempt()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for item in items:
        recorder.apply(item)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    retained = recorder.retained_points()
    # The queue: the same reports waiting in a deque (copied dicts, as the hot path makes).
    tracemalloc.start()
    q0 = tracemalloc.get_traced_memory()[0]
    queue: collections.deque[tuple[Any, ...]] = collections.deque(
        train(0.0, s, 1, metrics_for(s)) for s in range(1, 1001)
    )
    q1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del queue
    return {
        "store_bytes_per_point": (after - before) / retained,
        "queue_bytes_per_report": (q1 - q0) / 1000.0,
    }


# --- pytest-benchmark entry points -------------------------------------------------------


def test_report_train_step_14_metrics(benchmark: Any) -> None:
    """Median/p99 of one report call with 14 metrics (the hot path)."""
    result = benchmark.pedantic(measure_report_call, kwargs={"steps": 2_000}, rounds=1)
    benchmark.extra_info.update(result)


def test_reporter_cpu_per_point_suffix(benchmark: Any) -> None:
    """Reporter-thread CPU per recorded point with the series-suffix extension."""
    result = benchmark.pedantic(measure_reporter_cpu, kwargs={"steps": 5_000}, rounds=1)
    benchmark.extra_info.update(result)


def test_store_memory_per_point(benchmark: Any) -> None:
    """Store bytes per retained point."""
    result = benchmark.pedantic(measure_memory, kwargs={"steps": 5_000}, rounds=1)
    benchmark.extra_info.update(result)


def main(argv: list[str] | None = None) -> int:
    """Print the engine figures as a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args(argv)
    call = measure_report_call(args.steps)
    cpu_suffix = measure_reporter_cpu(args.steps, suffix=True)
    cpu_full = measure_reporter_cpu(min(args.steps, 5_000), suffix=False)
    memory = measure_memory(args.steps)
    print(
        f"report_train_step, 14 metrics, {args.steps} steps, reporter thread sending "
        f"every {SEND_EVERY} steps (MemorySink)\n"
    )
    print("| figure | measured | target |")
    print("|---|---|---|")
    print(f"| report call p50 | {call['p50_us']:.2f} µs | < {TARGET_CALL_P50_US:g} µs |")
    print(f"| report call p99 | {call['p99_us']:.2f} µs | < {TARGET_CALL_P99_US:g} µs |")
    print(f"| report call p99.9 | {call['p999_us']:.2f} µs | (GIL switch bound) |")
    print(f"| report call max | {call['max_us']:.1f} µs | (GIL switch bound) |")
    print(
        f"| reporter CPU / point (suffix) | {cpu_suffix['cpu_us_per_recorded_point']:.3f} µs "
        f"| < {TARGET_CPU_POINT_US:g} µs |"
    )
    print(
        f"| reporter CPU / point (full state, {min(args.steps, 5_000)} steps) | "
        f"{cpu_full['cpu_us_per_recorded_point']:.3f} µs | (quadratic: reference) |"
    )
    print(
        f"| store bytes / retained point | {memory['store_bytes_per_point']:.1f} B "
        f"| < {TARGET_BYTES_PER_POINT:g} B |"
    )
    print(
        f"| queue bytes / queued report (14 metrics) | {memory['queue_bytes_per_report']:.0f} B "
        "| (measured separately) |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
