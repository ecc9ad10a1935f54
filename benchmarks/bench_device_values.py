"""What a report call costs with tensors in its metrics (docs/design.md#device-values), no GPU.

Each call is ``report_train_step`` with a loss, a grad norm and a learning rate,
timed from outside with ``perf_counter_ns`` on one running reporter
(``MemorySink``), in variants taken in turn, one per step, so the machine's
noise falls on all alike:

- ``floats``: plain Python floats (the hot path's fast branch);
- ``cpu tensors``: two 0-d CPU torch tensors (``.item()`` on the caller's thread, as before);
- ``cuda stand-in``: two stand-in CUDA tensors (``tests/fake_cuda.py``): the
  Python cost of the deferred path (grouping, the report's wrapper, the calls
  into torch) with torch's own calls costing nothing, i.e. what the library
  adds on top of torch's stack, copy and event record (a few µs each on a real
  GPU, measured by ``bench_gpu_sync.py``).

Run:

    python benchmarks/bench_device_values.py            # 20,000 steps
    pytest benchmarks/bench_device_values.py --benchmark-disable  # a short run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _workload import percentile
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._record import _device

STEPS = 20_000


def measure(steps: int, only: str | None = None) -> dict[str, tuple[float, float]]:
    """Median and p99 (µs) of one call per variant, over ``steps`` calls in all.

    ``only``: measure that variant alone (its reporter thread sees only its reports).
    """
    import fake_cuda  # noqa: PLC0415 - the tests' stand-in, on the path set above

    variants: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
        ("floats", lambda i: {"loss": 1.0 / i, "grad_norm": 0.5, "lr": 1e-3}),
    ]
    try:
        import torch  # noqa: PLC0415 - optional: the row is left out without it

        variants.append(
            (
                "cpu tensors",
                lambda i: {
                    "loss": torch.tensor(1.0 / i),
                    "grad_norm": torch.tensor(0.5),
                    "lr": 1e-3,
                },
            )
        )
    except ImportError:
        pass
    fake = fake_cuda.FakeTorch()
    seam = _device._torch
    _device._torch = lambda: fake
    variants.append(
        (
            "cuda stand-in",
            lambda i: {"loss": fake.tensor(1.0 / i), "grad_norm": fake.tensor(0.5), "lr": 1e-3},
        )
    )
    if only is not None:
        variants = [v for v in variants if v[0] == only]
    timings: dict[str, list[int]] = {name: [] for name, _ in variants}
    reporter = Reporter(MemorySink(), ReportingConfig(min_report_interval_seconds=0.01), rank=0)
    reporter.start()
    try:
        for step in range(1, steps + 1):
            name, make = variants[step % len(variants)]
            metrics = make(step)  # built before the clock starts: the tensors are the caller's
            t0 = time.perf_counter_ns()
            reporter.report_train_step(step=step, metrics=metrics)
            timings[name].append(time.perf_counter_ns() - t0)
            if step % 64 == 0:
                fake.complete()  # the stand-in device catches up
        fake.complete()
        reporter.close(timeout=10)
    finally:
        _device._torch = seam
    return {
        name: (statistics.median(ns) / 1000, percentile(sorted(ns), 0.99) / 1000)
        for name, ns in timings.items()
    }


def table(results: dict[str, tuple[float, float]]) -> str:
    rows = ["| metrics | median µs | p99 µs |", "|---|---:|---:|"]
    rows += [f"| {name} | {p50:.2f} | {p99:.2f} |" for name, (p50, p99) in results.items()]
    return "\n".join(rows)


def test_device_values_calls_are_measured() -> None:
    """A short run measures every variant (the stand-in's values all arrive)."""
    results = measure(600)
    assert {"floats", "cuda stand-in"} <= set(results)
    assert all(p50 > 0 for p50, _ in results.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--only", help="one variant alone: floats, 'cpu tensors', 'cuda stand-in'")
    args = parser.parse_args()
    print(table(measure(args.steps, args.only)))


if __name__ == "__main__":
    main()
