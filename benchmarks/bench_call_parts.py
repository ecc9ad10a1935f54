"""What each part of ``report_train_step``'s hot path costs, call by call, in a training loop.

The real method's source is compiled as it is and in variants with one part
left out, each bound to one running reporter (``MemorySink``, the scaled 10 ms
interval). The loop (``_loop.busy``: ~200 µs of pure-Python work, then one
call with 14 metrics) takes the variants in turn, one per step, so that the
machine's noise falls on all of them alike; each call is timed from outside
with ``perf_counter_ns``, the timing floor (a no-op call timed the same way)
included. Variants:

- ``as shipped``: the method as it is (one call in ``TIMED_EVERY`` timed);
- ``every call timed``: the clock read before and after every call (before the sample);
- ``no plainness check``: the ``sum()`` that finds tensors and numpy scalars left out;
- ``neither``: no timing and no plainness check (the copy, headers and append alone).

A variant leaves out a part by replacing its lines in the source; if the
source no longer has those lines, the benchmark stops with an error (the hot
path changed: update the replacements here).

Run:

    python benchmarks/bench_call_parts.py            # 24,000 steps
    pytest benchmarks/bench_call_parts.py --benchmark-disable  # a short run
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import busy, calibrate
from _workload import metrics_for
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._facade import _reporter as calls_module

_SAMPLED = "t0 = 0 if calls & UNTIMED_MASK else self._timer()"
_TIMED_END = "if t0:\n        self._sampled.append(self._timer() - t0)"
_CHECK = "if type(sum(copied.values(), 0.0)) is not float:"

#: (variant, [(text in the source, its replacement), ...]).
VARIANTS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("as shipped", ()),
    ("every call timed", ((_SAMPLED, "t0 = self._timer()"),)),
    ("no plainness check", ((_CHECK, "if False:"),)),
    ("neither", ((_SAMPLED, "t0 = 0"), (_TIMED_END, "pass"), (_CHECK, "if False:"))),
)


def compile_variants(reporter: Reporter) -> list[tuple[str, Callable[..., None]]]:
    """Each variant of ``report_train_step`` compiled in its module and bound to ``reporter``.

    Raises:
        RuntimeError: a part to leave out is no longer in the source.
    """
    source = textwrap.dedent(inspect.getsource(calls_module.Reporter.report_train_step))
    out: list[tuple[str, Callable[..., None]]] = []
    for name, replacements in VARIANTS:
        text = source
        for old, new in replacements:
            if old not in text:
                raise RuntimeError(f"{name}: the hot path no longer has {old!r}")
            text = text.replace(old, new)
        namespace = dict(vars(calls_module))
        exec(compile(text, f"<report_train_step: {name}>", "exec"), namespace)
        out.append((name, types.MethodType(namespace["report_train_step"], reporter)))
    return out


def _no_op(**_kwargs: Any) -> None:
    return None


def measure(steps: int = 24_000) -> dict[str, list[float]]:
    """Per variant (and the no-op floor), the durations of its calls, microseconds."""
    reporter = Reporter(
        MemorySink(series_suffix=True), ReportingConfig(min_report_interval_seconds=0.01), rank=0
    )
    variants: list[tuple[str, Callable[..., None]]] = [("no-op call (floor)", _no_op)]
    variants += compile_variants(reporter)
    iterations = calibrate()
    clock = time.perf_counter_ns
    durations: dict[str, list[float]] = {name: [] for name, _ in variants}
    reporter.start()
    reporter.report_training_start(max_steps=steps)
    try:
        # Each variant keeps its own count of calls, as if it were the only one: the
        # sample (one call in TIMED_EVERY timed) must fall on its own calls.
        counts = dict.fromkeys(durations, 0)
        for step in range(1, steps + 1):
            name, call = variants[step % len(variants)]
            busy(iterations)
            metrics = metrics_for(step)
            reporter._train_calls = counts[name]
            t0 = clock()
            call(step=step, epoch=0, metrics=metrics)
            durations[name].append((clock() - t0) / 1000.0)
            counts[name] = reporter._train_calls
    finally:
        reporter.close(timeout=30)
    return durations


def render(durations: dict[str, list[float]]) -> str:
    """A Markdown table: p25, p50 and p99 of each variant, microseconds."""
    lines = ["| variant | p25 | p50 | p99 |", "|---|---|---|---|"]
    for name, values in durations.items():
        q = statistics.quantiles(values, n=100)
        lines.append(f"| {name} | {q[24]:.2f} µs | {q[49]:.2f} µs | {q[98]:.2f} µs |")
    return "\n".join(lines)


def test_every_variant_compiles_and_reports(benchmark: Any) -> None:
    """A short run: every variant's calls were timed (the figures come from main())."""
    durations = benchmark.pedantic(measure, kwargs={"steps": 250}, rounds=1, iterations=1)
    assert set(durations) == {"no-op call (floor)", *(name for name, _ in VARIANTS)}
    assert all(len(values) == 50 for values in durations.values())


def main(argv: list[str] | None = None) -> int:
    """Print the table for ``--steps`` steps."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24_000, help="steps (variants take turns)")
    args = parser.parse_args(argv)
    print(f"report_train_step, 14 metrics, variants in turn over {args.steps:,} steps\n")
    print(render(measure(args.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
