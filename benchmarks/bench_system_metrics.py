"""What the system stream costs the training loop (docs/design.md#the-system-stream).

The simulated loop of the whole-run benchmarks (``_loop.busy``: ~200 µs of
pure-Python work a step, then ``report_train_step`` with 14 metrics) against
one reporter (``MemorySink``, 1 s send interval), in two variants run in turn,
A B B A per round, so that drift falls on both alike:

- ``off``: ``system_metrics_seconds=None`` (the default);
- ``1 s``: ``system_metrics_seconds=1.0`` (psutil and, when a driver is
  present, NVML sampled on the reporter thread every second).

Printed: wall time per step of each variant (mean of its runs, µs), the
slowdown of ``1 s`` against ``off``, the spread of ``off`` against itself
(the noise floor), the samples taken, and the median time of one sample
(the reporter thread's work, which holds the GIL, once an interval).

Run:

    python benchmarks/bench_system_metrics.py              # 4 rounds of 4 x 5 s
    python benchmarks/bench_system_metrics.py --seconds 2 --rounds 2
    pytest benchmarks/bench_system_metrics.py --benchmark-disable  # a short run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import BUSY_US, busy, calibrate
from _workload import metrics_for
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._engine._system import SystemSampler, load_nvml, load_psutil


def sample_cost_us(count: int = 200) -> float:
    """Median time of one sample (every stream available here), µs: the GIL time it holds."""
    sampler = SystemSampler(0.0, clock=time.monotonic, psutil=load_psutil(), nvml=load_nvml())
    times = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        sampler.sample()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000


def run(interval: float | None, steps: int, iterations: int) -> tuple[float, int]:
    """One loop of ``steps`` steps; returns (µs per step, system samples recorded)."""
    sink = MemorySink()
    config = ReportingConfig(min_report_interval_seconds=1.0, system_metrics_seconds=interval)
    reporter = Reporter(sink, config, rank=0).start()
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        busy(iterations)
        reporter.report_train_step(step=step, metrics=metrics_for(step))
    wall = time.perf_counter() - t0
    reporter.report_completed()
    reporter.close(timeout=10)
    task = sink.task or {}
    points = task.get("status_details", {}).get("metrics", {}).get("system_cpu_percent", [])
    return 1e6 * wall / steps, len(points)


def measure(seconds: float, rounds: int) -> dict[str, float]:
    """Per-step times of both variants and the slowdown, over ``rounds`` rounds of A B B A."""
    iterations = calibrate()
    steps = max(100, int(seconds * 1e6 / (BUSY_US + 20)))
    off: list[float] = []
    on: list[float] = []
    samples = 0
    for _ in range(rounds):
        off.append(run(None, steps, iterations)[0])
        for _ in range(2):
            per_step, taken = run(1.0, steps, iterations)
            on.append(per_step)
            samples += taken
        off.append(run(None, steps, iterations)[0])
    base = statistics.fmean(off)
    return {
        "steps": float(steps),
        "off_us": base,
        "on_us": statistics.fmean(on),
        "slowdown_percent": 100 * (statistics.fmean(on) / base - 1),
        "noise_percent": 100 * (max(off) - min(off)) / base,
        "samples": float(samples),
        "sample_us": sample_cost_us(),
    }


def test_system_stream_cost_is_measured() -> None:
    """A short run measures both variants."""
    result = measure(0.3, 1)
    assert result["off_us"] > 0
    assert result["on_us"] > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds a run")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    r = measure(args.seconds, args.rounds)
    print("| variant | µs / step |\n|---|---:|")
    print(f"| off | {r['off_us']:.1f} |\n| 1 s | {r['on_us']:.1f} |")
    print(
        f"\nslowdown {r['slowdown_percent']:+.2f} % (noise: off against itself spans "
        f"{r['noise_percent']:.2f} %); {int(r['samples'])} samples, {int(r['steps'])} steps a run"
    )
    print(f"one sample: {r['sample_us']:.0f} µs on the reporter thread (once a second)")


if __name__ == "__main__":
    main()
