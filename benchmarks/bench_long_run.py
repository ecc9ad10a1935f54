"""Long runs: memory, reporter CPU, close time and bytes for millions of points.

A run reports ``--metrics`` metrics (default 100) every step for as many steps
as make ``--points`` points (default 2 M: 20,000 steps), through

- ``file``: the embedded default, a ``FileSink`` run log;
- ``http``: ``HttpSink`` to the reference server in another process
  (series-suffix mode, the default 1 s send interval);
- ``full-state`` (only with ``--only full-state``): the same server as a
  plain job API (``use_extension=False``) with
  ``max_body_bytes=1 MiB``, so the curves are sent thinned once the state
  outgrows it (docs/engine.md, "Thinning under a body limit");

each with the journal on and off (``ReportingConfig(journal=...)``; a
``FileSink`` is its own journal, so "on" sends to it at least every
``journal_interval_seconds``). Each configuration runs in a child process of
its own, so its baseline and growth are its own:

- **RSS growth**: the process's resident set size, sampled every 1,000 steps
  (``/proc/self/statm``), its peak minus the baseline read after
  ``Reporter.start()`` and before the first report, MB;
- **retained points**: ``Recorder.retained_points()`` just before ``close()``
  (the points the store holds in memory: a structural figure, not a timing);
- **reporter CPU per point**: the reporter thread's CPU time (user + system,
  ``/proc/self/task/<tid>/stat``) just before ``close()``, over the points, µs;
- **close**: the wall time of ``close(timeout=120)``, seconds;
- **bytes per point**: bytes written to the run directory (log, ``.json``)
  or ``stats().bytes_sent`` (HTTP), over the points;
- **slowdown**: with ``--step-us`` busy work a step (default 200 µs, the
  paced loop of docs/performance.md), the loop's wall time over the bare
  loop's (the same work, no reporter), measured in the same child; ``--step-us 0``
  is the tight loop (no slowdown figure);
- ``--flush``: ``flush()`` before each RSS sample (every 1,000 steps), so the
  queue between drains stays short and the growth is what the engine keeps.

The store keeps what a destination has not acknowledged: with ``http`` the
figure holds only while the server keeps up. The reference server takes
about 95,000 points/s on 2 shared cores (docs/performance.md, "Reference
server ingest"), and 100 metrics every 200 µs are 500,000 points/s; measure
``http`` at a rate it takes (``--step-us 2000``), or against a server on
another machine.

Run:

    python benchmarks/bench_long_run.py                    # 2 M points, every configuration
    python benchmarks/bench_long_run.py --points 10e6      # the issue's 10 M
    python benchmarks/bench_long_run.py --points 50e6 --only file
    pytest benchmarks/bench_long_run.py --benchmark-disable   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import busy, calibrate

CONFIGS = ("file", "file+journal", "http", "http+journal")
#: Measured only when asked (``--only``): not part of the default table.
EXTRA_CONFIGS = ("full-state",)
#: The body limit of the ``full-state`` configuration, bytes.
FULL_STATE_LIMIT = 1 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SAMPLE_EVERY = 1000


def rss_bytes() -> int:
    """The process's resident set size now, bytes (0 where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


def thread_cpu_seconds(name: str) -> float:
    """CPU seconds (user + system) of the live thread called ``name`` (NaN if none)."""
    for thread in threading.enumerate():
        if thread.name == name and thread.native_id is not None:
            try:
                with open(f"/proc/self/task/{thread.native_id}/stat", encoding="ascii") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                return float("nan")
            return (int(fields[11]) + int(fields[12])) / _TICK
    return float("nan")


def _loop(steps: int, names: list[str], iterations: int, report: Any, sample: Any) -> float:
    """The training loop: busy work, then one report of every metric; wall seconds."""
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        if iterations:
            busy(iterations)
        base = step * 1e-4
        report(step=step, epoch=1, metrics={n: base + i for i, n in enumerate(names)})
        if step % SAMPLE_EVERY == 0:
            sample()
    return time.perf_counter() - t0


def child(
    config: str, points: int, metrics: int, step_us: float, url: str | None, flush: bool = False
) -> dict[str, Any]:
    """One configuration in this process; returns its figures."""
    from trainreport import FileSink, HttpSink, Reporter, ReportingConfig  # noqa: PLC0415

    steps = max(1, points // metrics)
    names = [f"m{i:03d}" for i in range(metrics)]
    iterations = calibrate(step_us) if step_us > 0 else 0
    bare = None
    if iterations:
        bare = _loop(steps, names, iterations, lambda **_: None, lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "runs"
        journal = config.endswith("+journal")
        job = f"long-{os.getpid()}"
        sink: Any
        if config.startswith("file"):
            sink = FileSink(run_dir / "run.log")
        elif config == "full-state":
            assert url is not None
            sink = HttpSink(url, job, "train", use_extension=False, max_body_bytes=FULL_STATE_LIMIT)
        else:
            assert url is not None
            sink = HttpSink(url, job, "train")
        reporter = Reporter(
            sink,
            ReportingConfig(journal=journal, journal_dir=str(Path(tmp) / "journal")),
            rank=0,
        ).start()
        reporter.report_training_start(max_steps=steps)
        time.sleep(0.2)  # the first open settles before the baseline
        baseline = rss_bytes()
        peak = [baseline]

        def sample() -> None:
            if flush:
                reporter.flush(timeout=120)
            peak[0] = max(peak[0], rss_bytes())

        wall = _loop(steps, names, iterations, reporter.report_train_step, sample)
        reporter.flush(timeout=120)
        sample()
        recorder = reporter._recorder
        retained = recorder.retained_points() if recorder is not None else -1
        store = recorder._record.store if recorder is not None else None
        summarised = getattr(store, "summarised_points", lambda: 0)()
        cpu = thread_cpu_seconds("trainreport-reporter")
        reporter.report_completed()
        t0 = time.perf_counter()
        closed = reporter.close(timeout=120)
        close_s = time.perf_counter() - t0
        stats = reporter.stats()
        if config.startswith("file"):
            written = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
        else:
            written = stats.bytes_sent
        recorded = recorder.counts().points_recorded if recorder is not None else 0
        return {
            "config": config,
            "points": steps * metrics,
            "recorded": recorded,
            "steps": steps,
            "rss_growth_mb": (peak[0] - baseline) / 1e6,
            "retained_points": retained,
            "reporter_cpu_us_per_point": cpu / max(recorded, 1) * 1e6,
            "close_s": close_s,
            "closed": closed,
            "bytes_per_point": written / max(recorded, 1),
            "loop_s": wall,
            "bare_s": bare,
            "slowdown_pct": None if bare is None else (wall / bare - 1) * 100,
            "drops": dict(stats.drops),
            "thinned_to": stats.destinations[0].thinned_to,
            "summary_entries": summarised,
        }


def run_config(
    config: str,
    points: int,
    metrics: int,
    step_us: float,
    url: str | None,
    timeout: float,
    flush: bool = False,
) -> dict[str, Any]:
    """Run one configuration in a child process (its own baseline)."""
    argv = [sys.executable, __file__, "--child", config, "--points", str(points)]
    argv += ["--metrics", str(metrics), "--step-us", str(step_us)]
    argv += ["--flush"] if flush else []
    if url:
        argv += ["--url", url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode:
        raise RuntimeError(f"{config} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(
    points: int,
    metrics: int = 100,
    step_us: float = 200.0,
    only: tuple[str, ...] = CONFIGS,
    timeout: float = 3600.0,
    flush: bool = False,
) -> list[dict[str, Any]]:
    """Every configuration in ``only``; the HTTP ones against one reference server."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        server_cm: Any = None
        url = None
        if any(c.startswith("http") or c == "full-state" for c in only):
            from trainreport.server import start_subprocess  # noqa: PLC0415

            server_cm = start_subprocess(Path(tmp) / "long.db")
            url = server_cm.__enter__().url
        try:
            for config in only:
                results.append(run_config(config, points, metrics, step_us, url, timeout, flush))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # as each ends
        finally:
            if server_cm is not None:
                server_cm.__exit__(None, None, None)
    return results


def table(results: list[dict[str, Any]]) -> str:
    """The Markdown table of docs/performance.md."""
    lines = [
        "| configuration | points | RSS growth | retained points | reporter CPU / point "
        "| `close()` | bytes / point | loop slowdown |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        slowdown = "-" if r["slowdown_pct"] is None else f"{r['slowdown_pct']:+.1f} %"
        lines.append(
            f"| {r['config']} | {r['points']:,} | {r['rss_growth_mb']:+.0f} MB "
            f"| {r['retained_points']:,} | {r['reporter_cpu_us_per_point']:.2f} µs "
            f"| {r['close_s']:.2f} s | {r['bytes_per_point']:.1f} | {slowdown} |"
        )
    return "\n".join(lines)


def test_long_run_smoke(benchmark: Any) -> None:
    """A short run of every configuration: the figures are produced and the runs close."""
    results = benchmark.pedantic(
        measure, kwargs={"points": 20_000, "metrics": 20, "step_us": 0.0}, rounds=1
    )
    assert list(CONFIGS) == [r["config"] for r in results]
    for r in results:
        assert r["closed"], r
        assert r["recorded"] == 20_000, r


def main(argv: list[str] | None = None) -> int:
    """Print the table (or, with ``--child``, one configuration's JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=float, default=2e6)
    parser.add_argument("--metrics", type=int, default=100)
    parser.add_argument("--step-us", type=float, default=200.0)
    parser.add_argument("--flush", action="store_true", help="flush() at each RSS sample")
    parser.add_argument("--only", action="append", choices=CONFIGS + EXTRA_CONFIGS)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--child", choices=CONFIGS + EXTRA_CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    points = int(args.points)
    if args.child:
        print(
            json.dumps(child(args.child, points, args.metrics, args.step_us, args.url, args.flush))
        )
        return 0
    only = tuple(args.only or CONFIGS)
    results = measure(points, args.metrics, args.step_us, only, flush=args.flush)
    print(
        f"{points:,} points: {args.metrics} metrics a step, "
        f"{args.step_us:g} µs of busy work a step\n"
    )
    print(table(results))
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
