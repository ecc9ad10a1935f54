"""The same reporter-thread work, back to back and once per send interval: what it costs.

The micro benchmarks (``bench_report_call.py``, ``bench_send.py``) run the
engine's work back to back; the reporter thread does it once per send
interval, beside a training thread. This measures one unit of that work three
ways, in the reporter's own thread CPU time (``time.thread_time()``), so that
the whole-run figures of ``report.py`` can be read against the micro ones:

- **back to back**: one unit after another, as a micro benchmark runs it;
- **10 ms apart, idle**: the thread sleeps 10 ms (the scaled send interval)
  between units and nothing else runs;
- **10 ms apart, beside training**: the same, while the main thread runs the
  whole-run benchmarks' pure-Python step (``_loop.busy``), as a training loop does.

Units: ``file send``, one ``FileSink.send`` of 14 series x 100 points (what the
embedded default writes for 100 steps); ``json``, ``json.dumps`` of 1,400
floats (no trainreport code: a reference). The figure is the median CPU of a
unit, microseconds, and its ratio to back to back.

A second table splits the engine's own CPU in a whole run into a cost per
reporter-thread cycle and a cost per point: the whole-run loop (``_loop.py``,
20,000 steps) reports through a sink that does no I/O (it acknowledges every
point), at send intervals of 10, 30, 100 and 300 ms, so that the number of
cycles varies and the points do not; a least-squares line of the thread's
CPU against its cycles gives both.

Run:

    python benchmarks/bench_periodic.py                # both tables
    pytest benchmarks/bench_periodic.py --benchmark-disable  # a short run
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import VAL_NAMES, VALIDATE_EVERY, ReporterTarget, busy, calibrate, run_loop
from _measuring import MeasuringSink
from trainreport import FileSink, Reporter, ReportingConfig
from trainreport._engine import _worker as worker_module
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    SendResult,
    SeriesUpdate,
    Sink,
    Update,
)

SERIES = 14
POINTS = 100
INTERVAL_S = 0.01
PATTERNS = ("back to back", "10 ms apart, idle", "10 ms apart, beside training")


def _update(k: int) -> Update:
    """The ``k``-th update of 14 series x 100 points, each series continuing the last."""
    start = k * POINTS
    steps = array("q", range(start + 1, start + POINTS + 1))
    epochs = array("i", [1] * POINTS)
    values = array("d", [1.0 / (i + 1) for i in range(start, start + POINTS)])
    series = tuple(SeriesUpdate(f"train_m{i}", start, steps, epochs, values) for i in range(SERIES))
    return Update("Running", {"phase": "training", "step": start + POINTS}, series, False)


def file_send_units(directory: Path, count: int) -> tuple[Callable[[int], None], FileSink]:
    """A unit of work: send the next prepared update to one open ``FileSink`` (returned too).

    Raises:
        RuntimeError: (from the unit) a send was not delivered.
    """
    sink = FileSink(directory / "periodic.log")
    sink.open()
    updates = [_update(k) for k in range(count)]

    def unit(k: int) -> None:
        result = sink.send(updates[k])
        if type(result) is not Delivered:
            raise RuntimeError(f"send {k} was not delivered: {result}")

    return unit, sink


def json_units(count: int) -> Callable[[int], None]:
    """A unit of work with no trainreport code: ``json.dumps`` of 1,400 floats."""
    rows = [
        [1.0 / (k * SERIES * POINTS + i + 1) for i in range(SERIES * POINTS)] for k in range(count)
    ]

    def unit(k: int) -> None:
        json.dumps(rows[k])

    return unit


def run_pattern(
    unit: Callable[[int], None], count: int, pattern: str, iterations: int
) -> list[float]:
    """CPU seconds of each of ``count`` units, run on a thread of their own in ``pattern``."""
    cpu: list[float] = []
    done = threading.Event()

    def worker() -> None:
        try:
            for k in range(count):
                t0 = time.thread_time()
                unit(k)
                cpu.append(time.thread_time() - t0)
                if pattern != PATTERNS[0]:
                    time.sleep(INTERVAL_S)
        finally:
            done.set()  # a unit that raised must not leave the training loop spinning

    thread = threading.Thread(target=worker, name="periodic-unit")
    thread.start()
    if pattern == PATTERNS[2]:
        while not done.is_set():
            busy(iterations)
    thread.join()
    if len(cpu) != count:
        raise RuntimeError(f"{pattern}: {len(cpu)} of {count} units ran (see the thread's error)")
    return cpu


def measure(count: int = 200, rounds: int = 2) -> dict[tuple[str, str], float]:
    """Median CPU per unit (seconds) for each (unit, pattern), over ``rounds`` alternations."""
    iterations = calibrate()
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="trainreport-periodic-") as tmp:
        for r in range(rounds):
            for pattern in PATTERNS:
                directory = Path(tmp) / f"{r}-{PATTERNS.index(pattern)}"
                directory.mkdir()
                file_unit, sink = file_send_units(directory, count)
                units = {"file send": file_unit, "json": json_units(count)}
                try:
                    for name, unit in units.items():
                        got = run_pattern(unit, count, pattern, iterations)
                        samples.setdefault((name, pattern), []).extend(got)
                finally:
                    sink.close()
    return {key: statistics.median(values) for key, values in samples.items()}


def render(medians: dict[tuple[str, str], float]) -> str:
    """A Markdown table: median CPU per unit and its ratio to back to back."""
    lines = ["| unit | " + " | ".join(PATTERNS) + " |", "|---|" + "---|" * len(PATTERNS)]
    for name in sorted({name for name, _ in medians}):
        base = medians[(name, PATTERNS[0])]
        cells = [
            f"{medians[(name, p)] * 1e6:,.0f} µs ({medians[(name, p)] / base:.1f}x)"
            for p in PATTERNS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


class NoIOSink(Sink):
    """A destination that does no I/O: it acknowledges every point it is sent."""

    def __init__(self) -> None:
        self.lengths: dict[str, int] = {}

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """A new task that speaks the series-suffix extension."""
        return Opened(capabilities=frozenset({CAPABILITY_SERIES_SUFFIX}), stored_task=None)

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Acknowledge every series up to the end of its suffix."""
        for s in update.series or ():
            self.lengths[s.name] = s.offset + len(s.values)
        return Delivered(series_lengths=dict(self.lengths))

    def close(self) -> None:
        """Nothing to close."""


class _CountedTarget(ReporterTarget):
    """A reporter on a :class:`NoIOSink` with its thread's CPU measured."""

    def __init__(self, interval_s: float) -> None:
        self.sink = MeasuringSink(NoIOSink())
        config = ReportingConfig(min_report_interval_seconds=interval_s)
        super().__init__(Reporter(self.sink, config, rank=0), close_timeout_s=60.0)

    def extras(self) -> dict[str, Any]:
        """The reporter thread's CPU over the run, seconds."""
        self.sink.closed.wait(30.0)
        return {"cpu_s": self.sink.thread_cpu_s}


def cycle_cost(
    steps: int = 20_000, intervals: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3), rounds: int = 2
) -> tuple[float, float, list[tuple[float, int, float]]]:
    """(CPU seconds per cycle, CPU seconds per point, the runs as (interval, cycles, CPU)).

    Both figures are NaN when every run counted the same cycles (runs too short
    for their intervals to tell apart). Cycles are counted by wrapping
    ``Worker.cycle`` for the duration of each run.
    """
    iterations = calibrate()
    counted = [0]
    original = worker_module.Worker.cycle

    def counting(self: worker_module.Worker) -> float:
        counted[0] += 1
        return original(self)

    runs: list[tuple[float, int, float]] = []
    for _ in range(rounds):
        for interval in intervals:
            counted[0] = 0
            worker_module.Worker.cycle = counting  # type: ignore[method-assign]
            try:
                result = run_loop(_CountedTarget(interval), steps, iterations)
            finally:
                worker_module.Worker.cycle = original  # type: ignore[method-assign]
            runs.append((interval, counted[0], float(result.extras["cpu_s"])))
    points = 14 * steps + len(VAL_NAMES) * (steps // VALIDATE_EVERY)
    per_cycle, per_point = fit_cycle_cost(runs, points)
    return per_cycle, per_point, runs


def fit_cycle_cost(runs: list[tuple[float, int, float]], points: int) -> tuple[float, float]:
    """(CPU seconds per cycle, per point): the line through the runs' (cycles, CPU).

    NaN for both when every run counted the same cycles (runs too short for
    their intervals to differ): no line fits them.
    """
    cycles = [float(c) for _, c, _ in runs]
    cpu = [c for _, _, c in runs]
    if len(set(cycles)) < 2:
        return math.nan, math.nan
    per_cycle, rest = statistics.linear_regression(cycles, cpu)
    return per_cycle, rest / points


def render_cycle_cost(
    per_cycle: float, per_point: float, runs: list[tuple[float, int, float]]
) -> str:
    """A Markdown table of the runs and the fitted split."""
    lines = ["| send interval | reporter cycles | reporter CPU |", "|---|---|---|"]
    for interval, cycles, cpu in runs:
        lines.append(f"| {interval * 1000:.0f} ms | {cycles} | {cpu:.3f} s |")
    lines.append("")
    lines.append(
        f"fitted: {per_cycle * 1e6:,.0f} µs of CPU per cycle, {per_point * 1e6:.3f} µs per point"
    )
    return "\n".join(lines)


def test_periodic_units_are_measured(benchmark: Any) -> None:
    """A short run: every unit is measured in every pattern (the figures come from main())."""
    medians = benchmark.pedantic(measure, kwargs={"count": 5, "rounds": 1}, rounds=1, iterations=1)
    assert len(medians) == 2 * len(PATTERNS)
    assert all(value > 0 for value in medians.values())


def test_runs_that_counted_the_same_cycles_fit_no_line() -> None:
    """Two runs of 2 cycles each (a loop too short for its intervals): NaN, not a crash."""
    assert all(math.isnan(x) for x in fit_cycle_cost([(0.01, 2, 0.0028), (0.1, 2, 0.0035)], 10))
    per_cycle, per_point = fit_cycle_cost([(0.01, 10, 0.011), (0.1, 2, 0.003)], 10)
    assert math.isclose(0.001, per_cycle)
    assert math.isclose(0.0001, per_point)


def test_cycle_cost_counts_cycles_of_short_runs() -> None:
    """Two short runs at different intervals: each counted its cycles and its CPU."""
    _, _, runs = cycle_cost(steps=300, intervals=(0.01, 0.1), rounds=1)
    assert [interval for interval, _, _ in runs] == [0.01, 0.1]
    assert all(cycles > 0 and cpu > 0 for _, cycles, cpu in runs)


def main(argv: list[str] | None = None) -> int:
    """Print the table for ``--count`` units per pattern."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="units per pattern and round")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the patterns")
    parser.add_argument("--steps", type=int, default=20_000, help="steps of each whole run")
    args = parser.parse_args(argv)
    print(
        f"median reporter-thread CPU of one unit, {args.count} units x {args.rounds} rounds "
        "per pattern (ratio to back to back)\n"
    )
    print(render(measure(args.count, args.rounds)))
    print(
        f"\nthe engine's CPU in whole runs of {args.steps:,} steps through a sink with no I/O, "
        "split into per cycle and per point\n"
    )
    print(render_cycle_cost(*cycle_cost(args.steps, rounds=args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
