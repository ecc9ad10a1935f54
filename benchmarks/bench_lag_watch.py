"""What the ``destination_behind`` check costs the reporter thread, per pass.

Every pass of the reporter thread (``Worker.cycle``) asks the engine core
``check_behind(now)`` (``_engine/_behind.py``): each destination's unacknowledged
points are counted (one sum over the series, under the recorder's lock) and,
every 15 s of the scheduling clock, the recorder's counts are sampled for the
rates; it counts at most once a second (``CHECK_SECONDS``: a pass sooner after
the last one returns at once), so this is the most it costs a second. This
times that call on a core whose destinations are open and lack a few points
of each series, beside the count the backlog rule already makes at each pass
for a series-suffix destination (``Recorder.unsent_points``), the two taken in
turn, round after round, so that the machine's noise falls on both alike. The
clock moves 1 s a call, so every call counts and one in 15 samples.

Run:

    python benchmarks/bench_lag_watch.py   # 14, 100 and 1,000 series; 1 and 2 destinations
    pytest benchmarks/bench_lag_watch.py --benchmark-disable   # a short run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

# the test suite's core driver (tests/core_driving.py), as bench_page.py takes tests/browser.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from core_driving import make_suffix_core
from trainreport._engine._core import EngineCore
from trainreport._record import _reports as reports
from trainreport._record._reports import Report


def make_core(series: int, destinations: int) -> EngineCore:
    """A core over ``destinations`` open series-suffix sinks, lacking 10 points of each series."""
    core = make_suffix_core(destinations, max_metric_names=max(series, 1))
    metrics = {f"m{i}": 0.5 for i in range(series)}
    queue: deque[Report] = deque(reports.train(0.0, step, None, metrics) for step in range(10))
    core.recorder.apply_all(queue)
    return core


def measure(series: int, destinations: int, *, calls: int, rounds: int) -> dict[str, float]:
    """Median µs a call of ``check_behind`` and of one ``unsent_points``, over ``rounds``."""
    core = make_core(series, destinations)
    recorder = core.recorder
    check, count = [], []
    t = 0.0
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            t += 1.0
            core.check_behind(t)
        check.append((time.perf_counter_ns() - start) / calls / 1000)
        start = time.perf_counter_ns()
        for _ in range(calls):
            recorder.unsent_points(0)
        count.append((time.perf_counter_ns() - start) / calls / 1000)
    return {"check_us": statistics.median(check), "unsent_points_us": statistics.median(count)}


def main(argv: list[str] | None = None) -> int:
    """Print the table (markdown). Returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3_000, help="calls a round")
    parser.add_argument("--rounds", type=int, default=15, help="rounds (the median is quoted)")
    args = parser.parse_args(argv)
    print("| series | destinations | check_behind (µs) | one unsent_points (µs) | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for series in (14, 100, 1_000):
        for destinations in (1, 2):
            r = measure(series, destinations, calls=args.calls, rounds=args.rounds)
            print(
                f"| {series:,} | {destinations} | {r['check_us']:.2f} "
                f"| {r['unsent_points_us']:.2f} | {r['check_us'] / r['unsent_points_us']:.2f} |"
            )
    return 0


def test_the_check_is_timed_beside_the_count(benchmark: Any) -> None:
    """A short run gives both figures for two destinations (no timing asserted)."""
    figures = benchmark.pedantic(
        measure, args=(14, 2), kwargs={"calls": 20, "rounds": 2}, rounds=1, iterations=1
    )
    assert {"check_us", "unsent_points_us"} == set(figures)


if __name__ == "__main__":
    raise SystemExit(main())
