"""Long runs: memory, reporter CPU, close time and bytes for millions of points.

A run reports ``--metrics`` metrics (default 100) every step for as many steps
as make ``--points`` points (default 2 M: 20,000 steps), through

- ``file``: the embedded default, a ``FileSink`` run log;
- ``http``: ``HttpSink`` to the reference server in another process
  (series-suffix mode, the default 1 s send interval);
- ``http-full`` (only with ``--only``): the same server taken as a plain job
  API with a 1 MiB body limit (``HttpSink(use_extension=False,
  max_body_bytes=2**20)``: full-state mode, every point each send, thinned
  to the limit once the curves no longer fit it);

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
    python benchmarks/bench_long_run.py --points 2e6 --only file+journal --probe 5
        # where the memory is: every 5 % of the run, the RSS, the queue depth,
        # the points the store retains and each destination lacks, what the
        # journal holds, what glibc's heap holds and keeps freed (mallinfo2),
        # and (``--trace N``) tracemalloc's top N by traceback
    pytest benchmarks/bench_long_run.py --benchmark-disable   # a smoke run
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import busy, calibrate

CONFIGS = ("file", "file+journal", "http", "http+journal")
#: Run only when named (``--only``): HTTP to the reference server as to a plain job
#: API (``HttpSink(use_extension=False)``: full-state mode, every point each send).
EXTRA_CONFIGS = ("http-full", "http-full+journal")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SAMPLE_EVERY = 1000
#: The probe's samples after the loop, by the step they stand for (``probe_sample``).
END_OF_LOOP, AFTER_FLUSH, AFTER_CLOSE, AFTER_TRIM = -4, -1, -2, -3
MOMENTS = {
    END_OF_LOOP: "end of loop",
    AFTER_FLUSH: "after flush()",
    AFTER_CLOSE: "after close()",
    AFTER_TRIM: "after malloc_trim",
}


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


def malloc_trim() -> bool:
    """Ask glibc to give freed heap back to the system (False where there is no glibc)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (``man 3 mallinfo2``): every field in bytes or counts."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def allocator_mb() -> dict[str, float] | None:
    """glibc's heap, summed over its arenas: MB in use and MB free but kept (``None``: no glibc).

    ``mallinfo2`` (glibc 2.33+): ``uordblks`` is what the process's live
    ``malloc`` blocks hold (Python's objects, the store's columns, what a send
    builds), ``fordblks`` what was freed and not handed back to the system:
    heap the allocator keeps, counted in the RSS once touched, until
    ``malloc_trim`` returns its whole pages. Blocks above the mmap threshold
    (``hblkhd``) are counted in use.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return {"in_use": (info.uordblks + info.hblkhd) / 1e6, "free": info.fordblks / 1e6}


def probe_sample(reporter: Any, step: int, baseline: int, trace: int) -> dict[str, Any]:
    """Where the memory is now: RSS, queue, store, journal and (``trace``) tracemalloc's top.

    Reads the reporter's private state from the training thread (a benchmark's
    probe, not an API): the queue's length and estimated bytes, the points the
    store retains and each destination lacks, and the points the journal's
    in-memory state holds.
    """
    recorder = reporter._recorder
    watch = getattr(reporter, "_journal_watch", None)
    keeper = getattr(watch, "keeper", None)
    sample: dict[str, Any] = {
        "step": step,
        "t": time.monotonic(),
        "rss_growth_mb": (rss_bytes() - baseline) / 1e6,
        "queue_reports": len(reporter._queue),
        "queue_mb": reporter._queued_bytes / 1e6,
        "retained_points": recorder.retained_points() if recorder is not None else -1,
        "unsent_points": [
            recorder.unsent_points(d) if recorder is not None else -1
            for d in range(len(reporter._sinks))
        ],
        "journal_points": keeper.journal.state.point_count() if keeper is not None else None,
        # Python's live memory blocks (pymalloc and larger): a count that grows with
        # the run while the store and queue hold nothing is something kept per point.
        "allocated_blocks": sys.getallocatedblocks(),
        # What glibc's heap holds (live blocks) and keeps (freed, not handed back): the
        # RSS beyond what the engine holds is the second.
        "malloc": allocator_mb(),
    }
    if trace:
        current, peak = tracemalloc.get_traced_memory()
        sample["traced_mb"] = current / 1e6
        sample["traced_peak_mb"] = peak / 1e6
        stats = tracemalloc.take_snapshot().statistics("traceback")
        sample["top"] = [
            {
                "mb": stat.size / 1e6,
                "blocks": stat.count,
                "where": [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in stat.traceback],
            }
            for stat in stats[:trace]
        ]
    return sample


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
    config: str,
    points: int,
    metrics: int,
    step_us: float,
    url: str | None,
    probe: float = 0.0,
    trace: int = 0,
    flush: bool = False,
    bare_steps: int = 0,
) -> dict[str, Any]:
    """One configuration in this process; returns its figures.

    ``bare_steps`` (0: every step) times the bare loop over that many steps
    and scales its wall time to the run's steps. ``probe`` (a percentage of
    the run's steps, 0: none) adds a :func:`probe_sample` every that many
    steps, and ``trace`` (a count, 0: none) runs tracemalloc with 6 frames
    and keeps its top ``trace`` allocation sites in each sample.
    """
    from trainreport import FileSink, HttpSink, Reporter, ReportingConfig  # noqa: PLC0415

    steps = max(1, points // metrics)
    names = [f"m{i:03d}" for i in range(metrics)]
    iterations = calibrate(step_us) if step_us > 0 else 0
    bare = None
    if iterations:
        timed = min(steps, bare_steps) if bare_steps > 0 else steps
        bare = _loop(timed, names, iterations, lambda **_: None, lambda: None) * steps / timed
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "runs"
        journal = config.endswith("+journal")
        job = f"long-{os.getpid()}"
        sink: Any
        if config.startswith("file"):
            sink = FileSink(run_dir / "run.log")
        else:
            assert url is not None
            full = config.startswith("http-full")  # a plain job API with a 1 MiB body limit
            sink = HttpSink(
                url, job, "train", use_extension=not full, max_body_bytes=2**20 if full else None
            )
        reporter = Reporter(
            sink,
            ReportingConfig(journal=journal, journal_dir=str(Path(tmp) / "journal")),
            rank=0,
        ).start()
        reporter.report_training_start(max_steps=steps)
        time.sleep(0.2)  # the first open settles before the baseline
        if trace:
            tracemalloc.start(6)
        baseline = rss_bytes()
        peak = [baseline]
        probes: list[dict[str, Any]] = []
        probe_every = max(SAMPLE_EVERY, int(steps * probe / 100) // SAMPLE_EVERY * SAMPLE_EVERY)
        samples = [0]

        def sample() -> None:
            if flush:
                reporter.flush(timeout=120)
            peak[0] = max(peak[0], rss_bytes())
            samples[0] += 1
            if probe and (samples[0] * SAMPLE_EVERY) % probe_every == 0:
                probes.append(probe_sample(reporter, samples[0] * SAMPLE_EVERY, baseline, trace))

        wall = _loop(steps, names, iterations, reporter.report_train_step, sample)
        if probe:
            probes.append(probe_sample(reporter, END_OF_LOOP, baseline, trace))
        reporter.flush(timeout=120)
        peak[0] = max(peak[0], rss_bytes())
        if probe:
            probes.append(probe_sample(reporter, AFTER_FLUSH, baseline, trace))
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
        if probe:
            probes.append(probe_sample(reporter, AFTER_CLOSE, baseline, 0))
            malloc_trim()
            probes.append(probe_sample(reporter, AFTER_TRIM, baseline, 0))
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
            "destination": {
                "requests_sent": stats.destinations[0].requests_sent,
                "requests_failed": stats.destinations[0].requests_failed,
                "thinned_to": stats.destinations[0].thinned_to,
                "summary_entries": summarised,
                "last_error": stats.destinations[0].last_error,
            },
            **({"probes": probes} if probe else {}),
        }


def run_config(
    config: str,
    points: int,
    metrics: int,
    step_us: float,
    url: str | None,
    timeout: float,
    probe: float = 0.0,
    trace: int = 0,
    flush: bool = False,
    bare_steps: int = 0,
) -> dict[str, Any]:
    """Run one configuration in a child process (its own baseline)."""
    argv = [sys.executable, __file__, "--child", config, "--points", str(points)]
    argv += ["--metrics", str(metrics), "--step-us", str(step_us)]
    argv += ["--probe", str(probe), "--trace", str(trace), "--bare-steps", str(bare_steps)]
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
    probe: float = 0.0,
    trace: int = 0,
    flush: bool = False,
    bare_steps: int = 0,
) -> list[dict[str, Any]]:
    """Every configuration in ``only``; the HTTP ones against one reference server."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        server_cm: Any = None
        url = None
        if any(c.startswith("http") for c in only):
            from trainreport.server import start_subprocess  # noqa: PLC0415

            server_cm = start_subprocess(Path(tmp) / "long.db")
            url = server_cm.__enter__().url
        try:
            for config in only:
                result = run_config(
                    config, points, metrics, step_us, url, timeout, probe, trace, flush, bare_steps
                )
                results.append(result)
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


def probe_table(probes: list[dict[str, Any]]) -> str:
    """The probe samples as a Markdown table, each with its top allocation sites below."""
    lines = [
        "| step | RSS growth | queued reports | queued (estimate) | retained points "
        "| unsent points | journal points | live blocks | malloc in use / free | traced |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    tops = []
    for p in probes:
        traced = f"{p['traced_mb']:.1f} MB" if "traced_mb" in p else "-"
        journal = "-" if p["journal_points"] is None else f"{p['journal_points']:,}"
        malloc = p.get("malloc")
        heap = "-" if malloc is None else f"{malloc['in_use']:.1f} / {malloc['free']:.1f} MB"
        unsent = ", ".join(f"{u:,}" for u in p["unsent_points"])
        moment = MOMENTS.get(p["step"], f"{p['step']:,}")
        lines.append(
            f"| {moment} | {p['rss_growth_mb']:+.1f} MB "
            f"| {p['queue_reports']:,} | {p['queue_mb']:.1f} MB | {p['retained_points']:,} "
            f"| {unsent} | {journal} | {p['allocated_blocks']:,} | {heap} | {traced} |"
        )
        for site in p.get("top", ())[:5]:
            tops.append(
                f"  {moment}: {site['mb']:.1f} MB in {site['blocks']:,} blocks: "
                + " < ".join(site["where"][::-1][:4])
            )
    return "\n".join(lines + (["", *tops] if tops else []))


def test_long_run_smoke(benchmark: Any) -> None:
    """A short run of every configuration: the figures are produced and the runs close."""
    results = benchmark.pedantic(
        measure, kwargs={"points": 20_000, "metrics": 20, "step_us": 0.0}, rounds=1
    )
    assert list(CONFIGS) == [r["config"] for r in results]
    for r in results:
        assert r["closed"], r
        assert r["recorded"] == 20_000, r


def test_long_run_probe_smoke() -> None:
    """The probe samples where the memory is during and after a short run, with tracemalloc."""
    result = child("file+journal", 5_000, 20, 0.0, None, probe=50.0, trace=3)
    after_loop = list(MOMENTS)
    moments = [p["step"] for p in result["probes"]]
    assert after_loop == moments[-4:]
    after_flush = result["probes"][-3]
    nothing_waits = {"queue_reports": 0, "unsent_points": [0]}
    assert nothing_waits == {k: after_flush[k] for k in nothing_waits}
    sites = [site["where"] for site in after_flush["top"]]
    assert 1 <= len(sites) <= 3, sites  # tracemalloc's top 3 ...
    assert all(sites), sites  # ... each with its traceback
    assert "after flush()" in probe_table(result["probes"])
    if platform.libc_ver()[0] == "glibc":  # mallinfo2: glibc 2.33+
        malloc = after_flush["malloc"]
        assert malloc["in_use"] > 0, malloc  # the store, the names, Python's objects
        assert malloc["free"] >= 0, malloc


def main(argv: list[str] | None = None) -> int:
    """Print the table (or, with ``--child``, one configuration's JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=float, default=2e6)
    parser.add_argument("--metrics", type=int, default=100)
    parser.add_argument("--step-us", type=float, default=200.0)
    parser.add_argument("--only", action="append", choices=CONFIGS + EXTRA_CONFIGS)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument(
        "--probe",
        type=float,
        default=0.0,
        metavar="PCT",
        help="sample where the memory is every PCT %% of the steps (printed as a table)",
    )
    parser.add_argument(
        "--trace",
        type=int,
        default=0,
        metavar="N",
        help="with --probe: run tracemalloc, keep its top N sites by traceback (slow)",
    )
    parser.add_argument("--flush", action="store_true", help="flush() at each RSS sample")
    parser.add_argument(
        "--bare-steps",
        type=int,
        default=0,
        metavar="N",
        help="time the bare loop over N steps only, scaled to the run (0: every step)",
    )
    parser.add_argument("--child", choices=CONFIGS + EXTRA_CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    points = int(args.points)
    if args.child:
        figures = child(
            args.child,
            points,
            args.metrics,
            args.step_us,
            args.url,
            args.probe,
            args.trace,
            args.flush,
            args.bare_steps,
        )
        print(json.dumps(figures))
        return 0
    results = measure(
        points,
        args.metrics,
        args.step_us,
        tuple(args.only or CONFIGS),
        probe=args.probe,
        trace=args.trace,
        flush=args.flush,
        bare_steps=args.bare_steps,
    )
    print(
        f"{points:,} points: {args.metrics} metrics a step, "
        f"{args.step_us:g} µs of busy work a step\n"
    )
    print(table(results))
    for r in results:
        if "probes" in r:
            print(f"\n{r['config']}:\n{probe_table(r['probes'])}")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
