"""Micro benchmarks of the engine (docs/design.md#performance), pytest-benchmark style.

Run all:   pytest benchmarks/bench_report_call.py --benchmark-only
As a script (prints a table): python benchmarks/bench_report_call.py [--steps N]

Figures:
1. time inside ``report_train_step`` with 14 metrics (median, p99, p99.9, max) over
   20,000 calls, with the reporter thread running and sending to a MemorySink at
   the scaled interval (one send per 50 steps: 10 ms at 0.2 ms a step); the
   same with a queue that is never drained (the sink's ``open`` waits until the
   loop ends, as a hanging or unreachable destination keeps every report
   queued); for both, the garbage collector's pauses on the training thread
   (``gc.callbacks``: their sum and the collections by generation) and the
   timing floor (the median of a no-op call timed the same way after the same
   busy work);
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
import threading
import time
import tracemalloc
from collections.abc import Callable
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
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report
from trainreport._reporting_config import ReportingConfig as _Config
from trainreport._wire._payloads import StoredState, encode_patch_body, encode_suffix_body
from trainreport._wire._sink_interface import OpenResult

STEPS = 20_000
SEND_EVERY = 50


class _NeverOpens(MemorySink):
    """A MemorySink whose ``open`` waits until released: every report stays queued."""

    def __init__(self) -> None:
        super().__init__(series_suffix=True)
        self.release = threading.Event()

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        self.release.wait(600)
        return super().open(timeout_seconds=timeout_seconds)


def _spin(clock: Callable[[], int], ns: int) -> None:
    until = clock() + ns
    while clock() < until:  # the training step's own work
        pass


def _nothing(**_kwargs: Any) -> None:
    return None


def measure_report_call(
    steps: int = STEPS, busy_us: float = 200.0, *, drained: bool = True
) -> dict[str, float]:
    """Time each report_train_step call (µs) while the reporter thread runs for real.

    ``drained=False``: the sink never opens until the loop ends, so no report
    is drained (a hanging or unreachable destination). Also measured: the
    garbage collector's pauses on this thread during the loop, and the timing
    floor (a no-op call with the same arguments, timed the same way after the
    same busy work, ``min(steps, 2000)`` times after the loop).
    """
    sink = MemorySink(series_suffix=True) if drained else _NeverOpens()
    config = ReportingConfig(min_report_interval_seconds=busy_us * 1e-6 * SEND_EVERY)
    reporter = Reporter(sink, config, rank=0).start()
    reporter.report_training_start(max_steps=steps)
    durations: list[float] = []
    clock = time.perf_counter_ns
    busy_ns = int(busy_us * 1000)
    gc_ns = [0, 0]  # total, start of the collection in progress
    collections_by_generation = [0, 0, 0]
    training_thread = threading.get_ident()

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() == training_thread:
            if phase == "start":
                gc_ns[1] = clock()
            else:
                gc_ns[0] += clock() - gc_ns[1]
                collections_by_generation[info["generation"]] += 1

    gc.callbacks.append(on_gc)
    try:
        for step in range(1, steps + 1):
            _spin(clock, busy_ns)
            metrics = metrics_for(step)
            t0 = clock()
            reporter.report_train_step(step=step, epoch=1, metrics=metrics)
            durations.append((clock() - t0) / 1000.0)
    finally:
        gc.callbacks.remove(on_gc)
    queued = len(reporter._queue)
    floor: list[float] = []
    for step in range(1, min(steps, 2000) + 1):
        _spin(clock, busy_ns)
        metrics = metrics_for(step)
        t0 = clock()
        _nothing(step=step, epoch=1, metrics=metrics)
        floor.append((clock() - t0) / 1000.0)
    if isinstance(sink, _NeverOpens):
        sink.release.set()
    reporter.close(timeout=60)
    durations.sort()
    floor.sort()
    return {
        "p50_us": percentile(durations, 0.5),
        "p99_us": percentile(durations, 0.99),
        "p999_us": percentile(durations, 0.999),
        "max_us": durations[-1],
        "sum_ms": sum(durations) / 1000.0,
        "floor_p50_us": percentile(floor, 0.5),
        "gc_pause_ms": gc_ns[0] / 1e6,
        "gc_gen0": float(collections_by_generation[0]),
        "gc_gen1": float(collections_by_generation[1]),
        "gc_gen2": float(collections_by_generation[2]),
        "queued_at_end": float(queued),
        "requests": float(len(sink.requests)),
    }


def _recorded_items(steps: int) -> list[Report]:
    """The reports ``report_train_step`` queues for ``steps`` steps (the hot path's form)."""
    reporter = Reporter(MemorySink(), ReportingConfig(), rank=0)  # unstarted: the queue only
    for s in range(1, steps + 1):
        reporter.report_train_step(step=s, epoch=1, metrics=metrics_for(s))
    return list(reporter._queue)


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
    # The queue: 1,000 reports as report_train_step queues them (an unstarted reporter).
    queuing = Reporter(MemorySink(), ReportingConfig(), rank=0)
    tracemalloc.start()
    q0 = tracemalloc.get_traced_memory()[0]
    for s in range(1, 1001):
        queuing.report_train_step(step=s, epoch=1, metrics=metrics_for(s))
    q1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del queuing
    return {
        "store_bytes_per_point": (after - before) / retained,
        "queue_bytes_per_report": (q1 - q0) / 1000.0,
    }


# --- pytest-benchmark entry points -------------------------------------------------------


def test_report_train_step_14_metrics(benchmark: Any) -> None:
    """Median/p99 of one report call with 14 metrics (the hot path)."""
    result = benchmark.pedantic(measure_report_call, kwargs={"steps": 2_000}, rounds=1)
    benchmark.extra_info.update(result)


def test_report_train_step_14_metrics_never_drained(benchmark: Any) -> None:
    """The same with a queue that is never drained (a hanging or unreachable destination)."""
    result = benchmark.pedantic(
        measure_report_call, kwargs={"steps": 2_000, "drained": False}, rounds=1
    )
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
    stuck = measure_report_call(args.steps, drained=False)
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
    floor = call["floor_p50_us"]
    print(f"| timing floor (no-op call, same timing) | {floor:.2f} µs | (in every figure) |")
    print(
        f"| GC pauses on the training thread | {call['gc_pause_ms']:.1f} ms "
        f"({call['gc_gen0']:.0f}/{call['gc_gen1']:.0f}/{call['gc_gen2']:.0f} collections) | |"
    )
    print(
        f"| never drained: report call p50 / p99 | {stuck['p50_us']:.2f} / "
        f"{stuck['p99_us']:.2f} µs "
        f"| < {TARGET_CALL_P50_US:g} / {TARGET_CALL_P99_US:g} µs |"
    )
    print(
        f"| never drained: GC pauses on the training thread | {stuck['gc_pause_ms']:.1f} ms "
        f"({stuck['gc_gen0']:.0f}/{stuck['gc_gen1']:.0f}/{stuck['gc_gen2']:.0f} collections, "
        f"{stuck['queued_at_end']:.0f} reports queued) | |"
    )
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
