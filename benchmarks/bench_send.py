"""The CPU of one send: fixed (per request) and per point, for HttpSink and FileSink.

The whole-run benchmark (``benchmarks/report.py``) measures the send cost
inside a training loop; this one isolates it. A sink is opened and sent
realistic updates of 0, 1, 50 and 500 steps x 14 series, in shuffled order,
each timed with ``time.thread_time()`` around ``sink.send`` (the sends run on
this thread, so that is exactly their CPU: request building, encoding,
compression, the urllib3/http.client round trip, response parsing). The fixed
cost is the intercept of a least-squares line of send CPU against points
sent, the per-point cost its slope, as ``benchmarks/_measuring.py`` fits them
(target: docs/design.md#performance, at most 300 µs fixed per HTTP send).

Sinks:

* ``http``: ``HttpSink`` against the reference server (``trainreport serve``
  in a subprocess, real sockets), series-suffix mode with gzip offered;
* ``file``: ``FileSink`` (the embedded default's run log) in a temporary
  directory, fsync at close only (its interval is the run's, not a send's).

``--contended`` runs a pure-Python busy thread beside the sends, as the
training loop of the whole-run benchmark does, so the sends pay for GIL
hand-offs too.

Run:

    python benchmarks/bench_send.py                          # this tree
    python benchmarks/bench_send.py --compare-with OLD_TREE  # side by side
    python benchmarks/bench_send.py --profile http           # cProfile of 0-step sends
    pytest benchmarks/bench_send.py --benchmark-disable      # a short run

``--compare-with`` takes a checkout of an older version (``git worktree add
/tmp/old <commit>``) and measures its ``src/`` in subprocesses alternating
with this tree's (one reference server, from this tree, serves both), then
prints the medians over the repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _figures import TARGET_CPU_SEND_US
from _workload import METRIC_NAMES, metrics_for
from trainreport import Delivered, FileSink, HttpSink, Sink
from trainreport._wire._protocol import EPOCHS_TYPECODE, STEPS_TYPECODE, VALUES_TYPECODE
from trainreport._wire._sink_interface import SeriesUpdate, Update

HERE = Path(__file__).resolve().parent
SIZES = (0, 1, 50, 500)
SINKS = ("http", "file")


def update_for(first_step: int, steps: int, *, max_steps: int = 1_000_000) -> Update:
    """The update a reporter builds after ``steps`` steps from ``first_step`` (14 series).

    ``status_details`` holds what the recorder puts there (phase, progress,
    ETA, the wall clock and each metric's current value); with ``steps == 0``
    the update carries no metrics (``series=None``), as an update of details
    alone does.
    """
    last = first_step + steps - 1
    details: dict[str, Any] = {
        "phase": "training",
        "step": max(last, 0),
        "epoch": 1,
        "percentage_done": round(last / max_steps * 100.0, 2),
        "eta_seconds": 1234.5,
        "updated_at": f"2026-12-01T07:{first_step % 60:02d}:00.000000+00:00",
    }
    details.update(metrics_for(max(last, 1)))
    if steps == 0:
        return Update("running", details, None, full_state=False)
    series = []
    for name in METRIC_NAMES:
        rows = [metrics_for(step)[name] for step in range(first_step, first_step + steps)]
        series.append(
            SeriesUpdate(
                name,
                first_step - 1,
                array(STEPS_TYPECODE, range(first_step, first_step + steps)),
                array(EPOCHS_TYPECODE, [1] * steps),
                array(VALUES_TYPECODE, rows),
            )
        )
    return Update("running", details, tuple(series), full_state=False)


def make_sink(kind: str, url: str | None, directory: Path) -> Sink:
    """A sink of ``kind`` (:data:`SINKS`), not yet opened."""
    if kind == "http":
        assert url is not None, "the http sink needs a server URL"
        return HttpSink(url, job_id=f"bench-send-{uuid.uuid4().hex[:12]}")
    return FileSink(directory / "run.log", fsync_interval_seconds=float("inf"))


def fit(samples: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line of CPU seconds against points."""
    n = len(samples)
    mx = sum(p for p, _ in samples) / n
    my = sum(c for _, c in samples) / n
    sxx = sum((p - mx) ** 2 for p, _ in samples)
    if sxx == 0:
        return my, float("nan")
    slope = sum((p - mx) * (c - my) for p, c in samples) / sxx
    return my - slope * mx, slope


@contextlib.contextmanager
def _busy_thread(enabled: bool) -> Iterator[None]:
    """A pure-Python busy loop on another thread while the block runs (when enabled)."""
    if not enabled:
        yield
        return
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(2_000):
                x += i * i

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def measure(
    kind: str,
    url: str | None,
    *,
    rounds: int = 40,
    sizes: tuple[int, ...] = SIZES,
    contended: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Send ``rounds`` updates of each size to a fresh sink; CPU per send, fitted.

    Returns:
        ``{"fixed_us", "per_point_us", "median_us": {size: µs}, "sends"}``.
    """
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="trainreport-send-") as tmp:
        sink = make_sink(kind, url, Path(tmp))
        opened = sink.open(timeout_seconds=30.0)
        assert not hasattr(opened, "reason"), opened
        step = 1
        samples: list[tuple[int, float]] = []
        by_size: dict[int, list[float]] = {k: [] for k in sizes}
        # Two warm-up sends (the first request of a pool connects).
        for k in (1, 0):
            result = sink.send(update_for(step, k))
            assert isinstance(result, Delivered), result
            step += k
        order = [k for _ in range(rounds) for k in sizes]
        rng.shuffle(order)
        updates = []
        for k in order:
            updates.append((k, update_for(step, k)))
            step += k
        thread_time = time.thread_time
        with _busy_thread(contended):
            for k, update in updates:
                t0 = thread_time()
                result = sink.send(update)
                cpu = thread_time() - t0
                assert isinstance(result, Delivered), result
                samples.append((k * len(METRIC_NAMES), cpu))
                by_size[k].append(cpu)
        sink.close()
    intercept, slope = fit(samples)
    return {
        "sink": kind,
        "contended": contended,
        "fixed_us": intercept * 1e6,
        "per_point_us": slope * 1e6,
        "median_us": {str(k): statistics.median(v) * 1e6 for k, v in by_size.items()},
        "sends": len(samples),
    }


def profile(kind: str, url: str | None, *, sends: int = 300, steps: int = 0, top: int = 30) -> str:
    """cProfile of ``sends`` sends of ``steps`` steps each; the top entries by own time."""
    with tempfile.TemporaryDirectory(prefix="trainreport-send-") as tmp:
        sink = make_sink(kind, url, Path(tmp))
        sink.open(timeout_seconds=30.0)
        step = 1
        updates = []
        sink.send(update_for(step, 1))
        step += 1
        for _ in range(sends):
            updates.append(update_for(step, steps))
            step += steps
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        for update in updates:
            sink.send(update)
        profiler.disable()
        sink.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    out.write("\n")
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


@contextlib.contextmanager
def reference_server() -> Iterator[str]:
    """``trainreport serve`` in a subprocess on a temporary database; yields its URL."""
    from trainreport.server import start_subprocess  # noqa: PLC0415 - the server extra

    with tempfile.TemporaryDirectory(prefix="trainreport-send-db-") as tmp:
        server = start_subprocess(Path(tmp) / "bench.db")
        try:
            yield server.url
        finally:
            server.stop()


def _measure_in(
    tree: Path, kind: str, url: str | None, rounds: int, contended: bool, seed: int
) -> dict[str, Any]:
    """:func:`measure` in a subprocess importing ``tree/src``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    args = [sys.executable, str(Path(__file__).resolve()), "--json", "--sink", kind]
    args += ["--rounds", str(rounds), "--seed", str(seed)]
    if url is not None:
        args += ["--url", url]
    if contended:
        args.append("--contended")
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True, timeout=600)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeated runs."""
    return {
        "fixed_us": statistics.median(r["fixed_us"] for r in runs),
        "per_point_us": statistics.median(r["per_point_us"] for r in runs),
        "median_us": {
            k: statistics.median(r["median_us"][k] for r in runs) for k in runs[0]["median_us"]
        },
        "repeats": len(runs),
    }


def render(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
    """A markdown table: one row per (tree, sink)."""
    sizes = list(rows[0][2]["median_us"])
    head = " | ".join(f"median send, {k} steps (µs)" for k in sizes)
    lines = [
        f"| tree | sink | fixed CPU / send (µs) | CPU / point (µs) | {head} |",
        "|---|---|---|---|" + "---|" * len(sizes),
    ]
    for tree, kind, r in rows:
        fixed = r["fixed_us"]
        mark = ""
        if kind == "http":
            met = "met" if fixed < TARGET_CPU_SEND_US else "missed"
            mark = f" ({met}: < {TARGET_CPU_SEND_US:g})"
        medians = " | ".join(f"{r['median_us'][k]:,.0f}" for k in sizes)
        lines.append(
            f"| {tree} | {kind} | {fixed:,.0f}{mark} | {r['per_point_us']:.3f} | {medians} |"
        )
    return "\n".join(lines)


def test_send_cost(benchmark: Any) -> None:
    """A short run of both sinks (the figures are printed by main())."""
    with reference_server() as url:

        def both() -> dict[str, dict[str, Any]]:
            return {kind: measure(kind, url, rounds=3, sizes=(0, 1, 50)) for kind in SINKS}

        result = benchmark.pedantic(both, rounds=1)
        benchmark.extra_info.update(result)
        assert all(result[kind]["sends"] == 9 for kind in SINKS)


def main(argv: list[str] | None = None) -> int:
    """Print the table (or, with --json, one run's figures as JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sink", action="append", choices=SINKS, help="repeatable")
    parser.add_argument("--rounds", type=int, default=40, help="sends of each size per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per tree and sink")
    parser.add_argument("--contended", action="store_true", help="a busy thread beside the sends")
    parser.add_argument("--compare-with", type=Path, help="an older checkout to measure beside")
    parser.add_argument("--profile", choices=SINKS, help="print a cProfile of sends instead")
    parser.add_argument("--profile-steps", type=int, default=0, help="steps per profiled send")
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    kinds = args.sink or list(SINKS)
    if args.json:
        result = measure(
            kinds[0], args.url, rounds=args.rounds, contended=args.contended, seed=args.seed
        )
        print(json.dumps(result))
        return 0
    with reference_server() as url:
        if args.profile:
            print(profile(args.profile, url, steps=args.profile_steps))
            return 0
        trees = [("this tree", HERE.parent)]
        if args.compare_with is not None:
            trees.insert(0, (f"older ({args.compare_with.name})", args.compare_with))
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for repeat in range(args.repeats):
            for kind in kinds:
                for name, tree in trees if repeat % 2 else trees[::-1]:
                    runs.setdefault((name, kind), []).append(
                        _measure_in(tree, kind, url, args.rounds, args.contended, repeat)
                    )
    load = os.getloadavg()
    print(
        f"CPU of one send, {args.rounds} sends of each of {', '.join(map(str, SIZES))} steps "
        f"x 14 series per run, medians of {args.repeats} runs per tree"
        f"{', a busy thread beside the sends' if args.contended else ''}; "
        f"load average {load[0]:.2f}\n"
    )
    print(render([(name, kind, _summary(r)) for (name, kind), r in runs.items()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
