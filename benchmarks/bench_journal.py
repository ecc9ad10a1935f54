"""The journal's cost on top of HttpSink: loop slowdown with and without it.

Workload: the whole-run benchmarks' loop (``_loop.py``): ~200 µs of calibrated
pure-Python work a step, 14 metrics a step, 4 validation metrics every 100
steps, one send per ~50 steps (10 ms), against the reference server started
as a subprocess. Three loops, interleaved with the no-reporting control:

- ``HttpSink``, journal off (``ReportingConfig(journal=False)``);
- ``HttpSink`` with the journal, written every ``JOURNAL_EVERY`` steps: the
  default 1 s interval scaled as the send interval is (a real step takes
  0.1-2 s, so 1 s is a record every few steps; here 5 steps, 1 ms);
- the same with the journal every 50 steps (10 ms, one record per send).

The figure is the loop's slowdown (wall time over the control's), and the
journal's cost is the difference from the journal-off row. Target: up by at
most 0.02.

Run:

    python benchmarks/bench_journal.py                 # N = 2,000 and 20,000
    python benchmarks/bench_journal.py --steps 2000    # one N
    pytest benchmarks/bench_journal.py --benchmark-disable   # a short run
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import NullTarget, ReporterTarget, Scenario, calibrate, run_interleaved
from trainreport import HttpSink, Reporter, ReportingConfig

BUSY_US = 200.0
INTERVAL_S = BUSY_US * 1e-6 * 50
#: Steps per journal record in the scaled default (1 s at a 0.2 s step).
JOURNAL_EVERY = 5
TARGET_EXTRA_SLOWDOWN = 0.02


class HttpTarget(ReporterTarget):
    """``Reporter(HttpSink(...))``, with or without a journal.

    Args:
        url: the reference server.
        job_id: a fresh job for this run.
        journal_dir: where the journal goes; ``None`` for no journal.
        journal_interval_s: ``journal_interval_seconds``.
    """

    def __init__(
        self, url: str, job_id: str, journal_dir: Path | None, journal_interval_s: float
    ) -> None:
        config = ReportingConfig(
            min_report_interval_seconds=INTERVAL_S,
            journal=journal_dir is not None,
            journal_dir=str(journal_dir or "unused"),
            journal_interval_seconds=journal_interval_s,
        )
        super().__init__(Reporter(HttpSink(url, job_id), config, rank=0), close_timeout_s=60.0)

    def extras(self) -> dict[str, Any]:
        """Requests sent (for the table)."""
        return {"requests": self.reporter.stats().requests_sent}


def measure(steps: int, *, rounds: int = 1, iterations: int | None = None) -> dict[str, float]:
    """Slowdowns of the three loops over ``steps`` steps (and the control's own)."""
    from trainreport.server import start_subprocess  # noqa: PLC0415 - the server extra

    # The measured journal must be on: TRAINREPORT_JOURNAL=0 (a test run's default) would
    # turn it off for every reporter of this process.
    os.environ.pop("TRAINREPORT_JOURNAL", None)
    iterations = calibrate(BUSY_US) if iterations is None else iterations
    per_step_s = BUSY_US * 1e-6
    variants = {
        "off": None,
        f"every {JOURNAL_EVERY} steps": JOURNAL_EVERY * per_step_s,
        "every 50 steps": 50 * per_step_s,
    }
    with tempfile.TemporaryDirectory(prefix="trainreport-journal-") as tmp:
        server = start_subprocess(Path(tmp) / "bench.db")
        counter = iter(range(1_000_000))
        try:
            scenarios = [Scenario(("control", "local", steps), steps, NullTarget)]
            for name, interval in variants.items():

                def make(interval: float | None = interval) -> HttpTarget:
                    journal = None if interval is None else Path(tmp) / "journal"
                    job = f"bench-{next(counter)}"
                    return HttpTarget(server.url, job, journal, interval or 1.0)

                scenarios.append(Scenario(("journal", name, steps), steps, make))
            results = run_interleaved(scenarios, iterations, rounds=rounds)
        finally:
            server.stop()
    out = {"steps": float(steps), "control": results[("control", "local", steps)].slowdown}
    for name in variants:
        result = results[("journal", name, steps)]
        assert result.run is not None, result.error
        out[name] = result.slowdown
    return out


def render(rows: list[dict[str, float]]) -> str:
    """A markdown table: one row per N, the slowdowns and the journal's extra."""
    names = [k for k in rows[0] if k not in ("steps", "control", "off")]
    lines = [
        "| N | HttpSink, no journal | "
        + " | ".join(f"journal {n} (extra)" for n in names)
        + " | control |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    for r in rows:
        cells = []
        for n in names:
            extra = r[n] - r["off"]
            mark = "met" if extra <= TARGET_EXTRA_SLOWDOWN else "missed"
            cells.append(f"{r[n]:.3f}x ({extra:+.3f}, {mark})")
        lines.append(
            f"| {int(r['steps']):,} | {r['off']:.3f}x | "
            + " | ".join(cells)
            + f" | {r['control']:.3f}x |"
        )
    return "\n".join(lines)


def test_journal_cost_on_http_sink(benchmark: Any) -> None:
    """A short run (the figures are printed by main())."""
    result = benchmark.pedantic(measure, kwargs={"steps": 500, "iterations": 200}, rounds=1)
    benchmark.extra_info.update(result)
    assert result["off"] > 0


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, action="append", help="N (repeatable)")
    parser.add_argument("--rounds", type=int, default=0, help="rounds per N (default: 3, 1)")
    args = parser.parse_args(argv)
    iterations = calibrate(BUSY_US)
    rows = []
    for n in args.steps or [2_000, 20_000]:
        rows.append(
            measure(n, rounds=args.rounds or (3 if n <= 2_000 else 1), iterations=iterations)
        )
    print(
        f"journal cost on HttpSink, ~{BUSY_US:.0f} µs a step ({iterations:,} iterations), "
        f"14 metrics a step, one send per ~50 steps ({INTERVAL_S * 1000:.0f} ms); slowdown "
        "= loop wall time / the same loop without reporting\n"
    )
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
