"""Whole-run benchmarks: trainreport beside the synchronous design and the peers.

The targets are docs/design.md#performance.

    python benchmarks/report.py            # N = 2,000 and 20,000 (under 15 minutes on 2 cores)
    python benchmarks/report.py --quick    # N = 2,000, shorter load test (under 2 minutes)

Prints a markdown table and writes it to ``docs/performance.md`` with the
machine, the versions, the command and the notes (``--no-write`` to skip).

Workload (``_loop.py``): ~200 µs of calibrated pure-Python work per step, 14
metrics reported per step, 4 validation metrics every 100 steps, a checkpoint
every 1,000 steps; the send interval is scaled to one send per 50 steps
(10 ms). The reference server runs in its own process; each server mode is a
proxy in its own process in front of it (``_proxy.py``): healthy, slow (100 ms
per response), hanging (never answers), down (a closed port). The peers write
locally. The synchronous full-state design (``_sync_baseline.py``) runs for a
capped number of steps where its cost explodes, and is extrapolated to N.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import importlib.metadata
import io
import json
import math
import os
import platform
import pstats
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _figures import (
    COLUMNS,
    FIGURES,
    MODE_FREE,
    PEER_COLUMNS,
    STATE_FIGURES,
    TARGET_CALL_P50_US,
    TARGET_CALL_P99_US,
    Cell,
    Context,
    peer_cells,
    render_table,
    summarise,
    sync_cells,
    target_text,
    trainreport_cells,
)
from _loop import (
    BUSY_US,
    CHECKPOINT_EVERY,
    SEND_EVERY,
    VALIDATE_EVERY,
    NullTarget,
    Scenario,
    ScenarioResult,
    Target,
    calibrate,
    run_interleaved,
    run_loop,
)
from _measuring import TrainreportTarget
from _peers import PEER_TARGETS, peer_version
from _proxy import ProxyProcess
from _sync_baseline import SyncTarget, measure_sync_memory
from _workload import metrics_for, percentile
from bench_journal import measure as measure_journal
from bench_journal import render as render_journal
from bench_report_call import measure_memory
from bench_run_log import measure as measure_embedded
from bench_run_log import render as render_embedded
from trainreport import MemorySink, Reporter, ReportingConfig

HERE = Path(__file__).resolve().parent
MODES = ("healthy", "slow", "hanging", "down")
SLOW_DELAY_S = 0.1
HANG_CLOSE_TIMEOUT_S = 2.0
HEALTHY_CLOSE_TIMEOUT_S = 30.0
INTERVAL_S = BUSY_US * 1e-6 * SEND_EVERY
DOC = HERE.parent / "docs" / "performance.md"
LOADGEN = HERE / "_loadgen.py"

#: Steps the synchronous design runs per server mode: (no interval, scaled interval).
SYNC_CAPS_FULL = {
    "healthy": (400, 2000),
    "slow": (100, 2000),
    "hanging": (2, 2),
    "down": (400, 2000),
}
SYNC_CAPS_QUICK = {
    "healthy": (200, 1000),
    "slow": (40, 500),
    "hanging": (1, 1),
    "down": (200, 1000),
}


@attrs.frozen
class Plan:
    """What one invocation runs (from the command line)."""

    sizes: tuple[int, ...]
    rounds_small: int
    rounds_large: int
    modes: tuple[str, ...]
    peers: bool
    load_seconds: float
    load: bool
    sync_caps: dict[str, tuple[int, int]]
    sync_read_timeout_s: float
    profile: bool


def _say(message: str, started: float = time.monotonic()) -> None:
    sys.stderr.write(f"[{time.monotonic() - started:6.1f} s] {message}\n")
    sys.stderr.flush()


def _job_id(*parts: object) -> str:
    return "bench-" + "-".join(str(p) for p in parts) + "-" + uuid.uuid4().hex[:8]


def _closed_port() -> tuple[socket.socket, str]:
    """A TCP port bound but never listening (connects are refused), and its URL.

    The socket stays bound for the whole run, so that no other process on a
    shared machine can take the port and turn "down" into something else.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def _round_trip_s(url: str, count: int = 30) -> float:
    """Median time of ``GET /v1/capabilities`` on a keep-alive connection, seconds."""
    times: list[float] = []
    with urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=10.0)) as pool:
        pool.request("GET", url + "/v1/capabilities")
        for _ in range(count):
            t0 = time.perf_counter()
            pool.request("GET", url + "/v1/capabilities")
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _update_round_trip_s(url: str, count: int = 20) -> float:
    """Median time of one series-suffix update (50 steps x 14 series) posted alone, seconds."""
    from _loadgen import update_body  # noqa: PLC0415 - shares the load test's body

    task = f"{url}/v1/jobs/{_job_id('rtt')}/tasks/train"
    headers = {"Content-Type": "application/json"}
    times: list[float] = []
    with urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=30.0)) as pool:
        opened = pool.request("POST", task + "/writers", body=b"{}", headers=headers)
        generation = int(json.loads(opened.data)["writer_generation"])
        for i in range(count):
            body = update_body(generation, i + 1, i * 50)
            t0 = time.perf_counter()
            pool.request("POST", task + "/updates", body=body, headers=headers)
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


# --- scenarios ---------------------------------------------------------------------------


class _Servers:
    """The reference server (a subprocess) and one proxy process per server mode."""

    def __init__(self, directory: Path, modes: Sequence[str]) -> None:
        from trainreport.server import start_subprocess  # noqa: PLC0415 - the server extra

        self.server = start_subprocess(directory / "bench.db")
        upstream = self.server.url.removeprefix("http://")
        self.proxies: dict[str, ProxyProcess] = {}
        kinds = {"healthy": ("pass", 0.0), "slow": ("slow", SLOW_DELAY_S), "hanging": ("hang", 0.0)}
        for mode in modes:
            if mode in kinds:
                kind, delay = kinds[mode]
                self.proxies[mode] = ProxyProcess(upstream, kind, delay)
        self._reserved, self.down_url = _closed_port()

    def url(self, mode: str) -> str:
        proxy = self.proxies.get(mode)
        return proxy.url if proxy is not None else self.down_url

    def storing(self, mode: str) -> str | None:
        return self.server.url if mode in ("healthy", "slow") else None

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        self._reserved.close()
        self.server.stop()


def trainreport_scenario(servers: _Servers, mode: str, n: int) -> Scenario:
    """trainreport (Reporter + HttpSink) in one server mode for N steps."""

    def make() -> Target:
        return TrainreportTarget(
            url=servers.url(mode),
            server_url=servers.storing(mode),
            job_id=_job_id("tr", mode, n),
            interval_s=INTERVAL_S,
            close_timeout_s=(
                HANG_CLOSE_TIMEOUT_S if mode in ("hanging", "down") else HEALTHY_CLOSE_TIMEOUT_S
            ),
            proxy=servers.proxies.get(mode),
        )

    return Scenario(("trainreport", mode, n), n, make)


def sync_scenario(
    servers: _Servers, mode: str, variant: str, steps: int, read_timeout_s: float
) -> Scenario:
    """The synchronous full-state design, ``variant`` "sync" or "sync_interval"."""

    def make() -> Target:
        return SyncTarget(
            url=servers.url(mode),
            server_url=servers.storing(mode),
            job_id=_job_id(variant, mode, steps),
            interval_s=INTERVAL_S if variant == "sync_interval" else 0.0,
            proxy=servers.proxies.get(mode),
            send_at_close=mode != "hanging",
            read_timeout_s=read_timeout_s,
        )

    after = None
    proxy = servers.proxies.get(mode)
    if mode == "hanging" and proxy is not None:
        after = proxy.drop
    return Scenario((variant, mode, steps), steps, make, after)


def peer_scenario(name: str, n: int) -> Scenario:
    """A peer writing locally for N steps."""
    return Scenario((name, "local", n), n, PEER_TARGETS[name])


# --- load test ---------------------------------------------------------------------------


def run_load(url: str, concurrency: int, seconds: float, processes: int = 2) -> dict[str, float]:
    """Drive the server with ``concurrency`` reporters in ``processes`` processes."""
    start_at = time.time() + 1.5
    per = [
        concurrency // processes + (1 if i < concurrency % processes else 0)
        for i in range(processes)
    ]
    children = [
        subprocess.Popen(
            [
                sys.executable,
                str(LOADGEN),
                "--url",
                url,
                "--threads",
                str(k),
                "--seconds",
                str(seconds),
                "--start-at",
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in per
        if k
    ]
    outputs = []
    for child in children:
        out, _ = child.communicate(timeout=seconds + 120)
        outputs.append(json.loads(out))
    latencies = sorted(x for o in outputs for x in o["latencies_ms"])
    requests = sum(o["requests"] for o in outputs)
    elapsed = max(o["elapsed_s"] for o in outputs)
    return {
        "concurrency": concurrency,
        "requests": requests,
        "errors": sum(o["errors"] for o in outputs),
        "per_second": requests / elapsed if elapsed else math.nan,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
    }


# --- profiles of missed targets ------------------------------------------------------------


class _UnstartedTarget(NullTarget):
    """report_train_step of a reporter whose thread never runs: the hot path alone."""

    def __init__(self) -> None:
        self.reporter = Reporter(MemorySink(), ReportingConfig(), rank=0)

    def start(self, max_steps: int) -> None:
        """Bind the report methods."""
        self.train_step = self.reporter.report_train_step  # type: ignore[assignment]
        self.validation = self.reporter.report_validation  # type: ignore[assignment]
        self.checkpoint = self.reporter.report_checkpoint_saved  # type: ignore[assignment]


def _top(profiler: cProfile.Profile, lines: int = 15) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(lines)
    text = out.getvalue().strip().splitlines()
    start = next((i for i, line in enumerate(text) if "ncalls" in line), 0)
    return "\n".join(line.rstrip() for line in text[start:])


def profile_hot_path(steps: int, iterations: int) -> str:
    """The hot path without the reporter thread (GIL free), its cProfile top lines, a reading."""
    alone = run_loop(_UnstartedTarget(), steps, iterations)
    reporter = Reporter(MemorySink(), ReportingConfig(), rank=0)
    items = [metrics_for(s) for s in range(1, steps + 1)]
    profiler = cProfile.Profile()
    profiler.enable()
    for step, metrics in enumerate(items, start=1):
        reporter.report_train_step(step=step, epoch=0, metrics=metrics)
    profiler.disable()
    p50, p99 = alone.call_percentile(0.5), alone.call_percentile(0.99)
    if p50 >= TARGET_CALL_P50_US or p99 >= TARGET_CALL_P99_US:
        reading = (
            "The hot path alone misses the target on this machine at this time too: the "
            "call's own work (copying the 14-entry dict, the plain-number check with `sum()`, "
            "the deque append and, one call in 16, its duration appended, all listed above) "
            "takes that long here; `python benchmarks/bench_report_call.py` shows the same, and "
            "`python benchmarks/bench_call_parts.py` what each part costs. In the runs, "
            "the reporter thread, the server and the proxy share the machine's two cores with "
            "the training thread, which adds to it."
        )
    else:
        reading = (
            "The hot path alone meets the target, so the difference in the runs is time the "
            "training thread spent waiting for the GIL while the reporter thread ran Python "
            "code, and cache and core sharing with the reporter thread, the server and the "
            "proxy on two cores (or, on a busy machine, other work)."
        )
    return (
        f"Hot path alone (reporter thread not started, same loop, {steps:,} steps): "
        f"p50 {p50:.2f} µs, p99 {p99:.2f} µs, p99.9 {alone.call_percentile(0.999):.2f} µs.\n\n"
        f"cProfile of {steps:,} `report_train_step` calls (by own time):\n\n```\n"
        f"{_top(profiler, 10)}\n```\n\n{reading}"
    )


def _top_python(profiler: cProfile.Profile) -> str:
    """The Python function (not a built-in) with the most own time, as ``file:line(name)``."""
    stats: Any = pstats.Stats(profiler)
    best = max(
        ((key, value) for key, value in stats.stats.items() if key[0] != "~"),
        key=lambda item: item[1][2],
        default=None,
    )
    if best is None:
        return "n/a"
    (filename, line, name), _ = best
    return f"{Path(filename).name}:{line}({name})"


def profile_reporter_thread(
    make: Callable[[], Target], steps: int, iterations: int
) -> tuple[str, str]:
    """cProfile of the reporter thread during a healthy run (enabled inside that thread).

    Returns:
        (the top lines by own time, the Python function with the most own time).
    """
    profiler = cProfile.Profile()

    def hook(_frame: FrameType, _event: str, _arg: object) -> None:
        sys.setprofile(None)
        if threading.current_thread().name == "trainreport-reporter":
            profiler.enable()

    threading.setprofile(hook)
    try:
        run_loop(make(), steps, iterations)
    finally:
        threading.setprofile(None)
    try:
        return _top(profiler, 18), _top_python(profiler)
    except Exception as exc:  # a profile is a diagnostic: its failure is reported, not raised
        return f"(profile unavailable: {type(exc).__name__}: {exc})", "n/a"


# --- the document ----------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_lines(command: str, load_before: str) -> list[str]:
    """The machine, versions, date and command, as markdown list items."""
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in (
            "trainreport",
            "urllib3",
            "starlette",
            "uvicorn",
            "wandb",
            "mlflow",
            "tensorboardX",
        )
    )
    return [
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- Command: `{command}`",
        f"- Machine: {platform.platform()}; CPU: {_cpu_model()}; {os.cpu_count()} cores; "
        f"load average before the run: {load_before}",
        f"- Python {platform.python_version()} ({platform.python_implementation()})",
        f"- Versions: {versions}",
    ]


@contextlib.contextmanager
def _cleanup(servers: _Servers | None) -> Iterator[None]:
    try:
        yield
    finally:
        if servers is not None:
            servers.close()


def build_rows(
    plan: Plan,
    results: dict[tuple[str, str, int], ScenarioResult],
    sync_results: dict[tuple[str, str], ScenarioResult],
    peer_status: dict[str, str | None],
    ctx: Context,
) -> list[tuple[str, int, str, str, dict[str, Cell]]]:
    """One row per figure, N and server mode, with a cell per design."""
    rows: list[tuple[str, int, str, str, dict[str, Cell]]] = []
    per_scenario: dict[tuple[str, str, int], dict[str, Cell]] = {}
    for n in plan.sizes:
        for mode in plan.modes:
            cells: dict[str, dict[str, Cell]] = {}
            tr = results.get(("trainreport", mode, n))
            if tr is not None:
                cells["trainreport"] = trainreport_cells(tr, mode, n, ctx)
            for variant in ("sync", "sync_interval"):
                sync = sync_results.get((variant, mode))
                if sync is not None:
                    cells[variant] = sync_cells(sync, mode, n, ctx)
            if mode == "healthy":
                for name in PEER_COLUMNS:
                    if peer_status.get(name) is None:
                        cells[name] = peer_cells(results.get((name, "local", n)), None)
                    else:
                        cells[name] = peer_cells(None, peer_status[name])
            for column, figures in cells.items():
                per_scenario[(column, mode, n)] = figures
    for figure, label in FIGURES:
        for n in plan.sizes:
            for mode in plan.modes:
                if figure in MODE_FREE and mode != plan.modes[0]:
                    continue
                if figure in STATE_FIGURES and mode not in ("healthy", "slow"):
                    continue
                row = {
                    column: per_scenario[(column, mode, n)][figure]
                    for column, _ in COLUMNS
                    if (column, mode, n) in per_scenario
                }
                shown = "any" if figure in MODE_FREE else mode
                if mode == "healthy" and figure not in MODE_FREE:
                    shown = "healthy (peers: local)"
                rows.append((label, n, shown, target_text(figure, mode, ctx), row))
    return rows


def render_load(load: Sequence[dict[str, float]]) -> str:
    """The server ingest table."""
    lines = [
        "| concurrent reporters | updates/s | points/s | p50 latency (ms) | p99 latency (ms) "
        "| updates | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in load:
        lines.append(
            f"| {r['concurrency']:.0f} | {r['per_second']:.0f} | "
            f"{r['per_second'] * 50 * 14:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['requests']:.0f} | {r['errors']:.0f} |"
        )
    return "\n".join(lines)


def notes(
    plan: Plan,
    ctx: Context,
    iterations: int,
    quick: bool,
    floor_us: float,
    controls: dict[int, float],
) -> list[str]:
    """What the reader must know to read the table (method, scaling, caps)."""
    caps = ", ".join(
        f"{mode}: {a:,} / {b:,}" for mode, (a, b) in plan.sync_caps.items() if mode in plan.modes
    )
    return [
        f"- **Interval scaling.** A benchmark step takes ~{BUSY_US:.0f} µs, thousands of times "
        "shorter than a real training step (0.1 to 2 s), so a 10 s interval would mean one "
        f"send per run and flatter every design. The send interval is scaled to keep one send per "
        f"{SEND_EVERY} steps: `min_report_interval_seconds = {INTERVAL_S * 1000:g} ms` "
        "(docs/design.md#performance), for trainreport and for the synchronous design's "
        "interval variant.",
        f"- **Workload.** Each step runs {iterations:,} iterations of a pure-Python loop "
        f"(calibrated to ~{BUSY_US:.0f} µs here; it holds the GIL, so time the reporter thread "
        f"takes lengthens the step), then reports 14 metrics; validation with 4 metrics every "
        f"{VALIDATE_EVERY} steps, a checkpoint every {CHECKPOINT_EVERY:,} steps. Figure 1 "
        "covers every report call on the training thread, timed with `perf_counter_ns`; a "
        f"no-op call timed the same way in the baseline loop has a median of {floor_us:.2f} µs "
        "(the timing floor, included in every figure).",
        "- **Server modes.** The reference server (`trainreport serve`) runs in its own process; "
        "each mode is a proxy process in front of it (`benchmarks/_proxy.py`), so neither takes "
        f"the measured process's GIL: healthy (forwards), slow (each response held "
        f"{SLOW_DELAY_S * 1000:.0f} ms), hanging (accepts, never answers), down (a closed port). "
        f"Round trips through the healthy proxy, measured alone: `GET /v1/capabilities` "
        f"{ctx.rtt_s * 1000:.2f} ms, one 50-step x 14-series update {ctx.update_rtt_s * 1000:.1f} "
        "ms. The peers write locally (their cells are on the healthy rows).",
        "- **Sends while the loop runs** take far longer in wall time than alone (the send "
        "wall time row): at every blocking socket call the reporter thread releases the GIL, "
        "and to take it back it must wait for the training thread's switch interval (5 ms), "
        "since the loop is pure Python. So trainreport sends less often than the interval "
        "allows (the steps per request row) and each send carries more points; the waiting "
        "itself costs the training thread nothing.",
        "- **Loop slowdown** is the loop's wall time with the reporter over the mean of the same "
        "loop without it (every report a no-op call) run just before and just after, in the same "
        "process"
        + (
            ""
            if quick
            else f"; over {plan.rounds_small} rounds at N = {min(plan.sizes):,} and "
            f"{plan.rounds_large} at larger N, as the ratio of the summed wall times (the other "
            "figures come from the round closest to it)"
        )
        + ". It includes the GIL time the reporter thread takes. Noise control: the baseline "
        "loop itself, run as a scenario the same way, gave "
        + (", ".join(f"{r:.3f} (N={n:,})" for n, r in controls.items()) or "n/a")
        + ".",
        "- **Loop CPU** (a cross-check of the slowdown): the process's CPU time, every "
        "thread, during the loop, over the baselines' in the same way. Time the process is "
        "descheduled by other work on the machine counts in neither, so on a noisy machine it "
        "is steadier than the wall-time ratio; it counts the reporter thread's CPU whether or "
        "not it held the GIL (its socket and gzip time need not stop the training thread), and "
        "it does not count work the peers do in other processes (wandb's service).",
        "- **GC pauses**: time the training thread spent in garbage collections during the "
        "loop (`gc.callbacks`), the baseline loop's in brackets. Reports waiting in the queue "
        "are GC-tracked containers (a copied dict each), so a queue the reporter thread does "
        "not drain makes collections on the training thread longer. With a hanging or down "
        "server the queue is not drained at all until the stored task has been read (the "
        "engine applies no report before it, docs/design.md#metrics resume), so it holds "
        "every report of "
        "the run (the queue peak row).",
        "- **Bytes** are counted by the proxy as requests arrive (heads plus bodies as sent, "
        "gzip where the sink compressed; the uncompressed row inflates the bodies), over the "
        "whole run including the opening requests, divided by the final stored task in the "
        "`GET` shape (compact JSON, uncompressed). The sink's own count (`stats().bytes_sent`) "
        "is in brackets.",
        "- **Reporter CPU** is `time.thread_time()` of the reporter thread, read by a measuring "
        "sink wrapped around `HttpSink` (`benchmarks/_measuring.py`): the thread's total at "
        "close, and around every send. The fixed cost per send is the intercept of a "
        "least-squares line of send CPU against points sent; the per-point figure subtracts "
        "it (and the opening requests) from the total, the bracketed one does not.",
        "- **Memory** is `bench_report_call.measure_memory` (tracemalloc around the store; the "
        "queue separately, bytes per queued report); the queue peak is sampled every step. "
        "The synchronous design's figure is tracemalloc around its state (a dict per point).",
        f"- **close()**: `close(timeout={HEALTHY_CLOSE_TIMEOUT_S:g})` with a healthy or slow "
        f"server, `close(timeout={HANG_CLOSE_TIMEOUT_S:g})` with a hanging or down one.",
        "- **The synchronous design** (`benchmarks/_sync_baseline.py`) PATCHes the whole "
        "`status_details`, every curve in full, with urllib3 from the report call. Its cost "
        f"grows with the square of the run, so it runs a capped number of steps per mode "
        f"(no interval / scaled interval: {caps}); cells at a larger N are extrapolated "
        "(a quadratic least-squares fit of the cumulative time in report calls, and of bytes, "
        'against the step) and marked "(extrap.)"; its percentiles then cover the steps run. '
        "With a hanging server every call waits for its read timeout "
        f"({ctx.sync_read_timeout_s:g} s), so both variants are the same run.",
        "- **2 shared cores.** The server, the proxies and the load generator share the "
        "machine's cores with the measured loop; figures taken on a busy machine are inflated. "
        "The ingest figures in particular are indicative only.",
    ]


# --- main ----------------------------------------------------------------------------------


def make_plan(args: argparse.Namespace) -> Plan:
    """The plan the command line asks for."""
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes: {sorted(unknown)} (choose from {MODES})")
    sizes = (args.steps,) if args.steps else ((2000,) if args.quick else (2000, 20000))
    caps = dict(SYNC_CAPS_QUICK if args.quick else SYNC_CAPS_FULL)
    small = min(sizes)
    caps = {m: (min(a, small), min(b, small)) for m, (a, b) in caps.items()}
    return Plan(
        sizes=sizes,
        rounds_small=1 if args.quick or args.steps else 3,
        rounds_large=2,
        modes=modes,
        peers=not args.no_peers,
        load_seconds=args.load_seconds or (2.0 if args.quick else 8.0),
        load=not args.no_load,
        sync_caps=caps,
        sync_read_timeout_s=args.sync_read_timeout,
        profile=not args.no_profile,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the whole-run benchmarks, print the table, write docs/performance.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 2,000 only (< 2 min)")
    parser.add_argument("--steps", type=int, default=0, help="run this one N instead")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated server modes")
    parser.add_argument("--no-peers", action="store_true", help="skip wandb, MLflow, tensorboardX")
    parser.add_argument("--no-load", action="store_true", help="skip the server ingest test")
    parser.add_argument(
        "--no-embedded", action="store_true", help="skip the embedded default (FileSink run log)"
    )
    parser.add_argument(
        "--no-journal", action="store_true", help="skip the journal's cost on HttpSink"
    )
    parser.add_argument("--load-seconds", type=float, default=0.0, help="per concurrency level")
    parser.add_argument("--no-profile", action="store_true", help="no profiles of missed targets")
    parser.add_argument("--no-write", action="store_true", help="do not write docs/performance.md")
    parser.add_argument("--output", type=Path, default=DOC, help="where to write the document")
    parser.add_argument(
        "--sync-read-timeout",
        type=float,
        default=10.0,
        help="the synchronous reporter's read timeout, seconds (as HttpSink's default)",
    )
    args = parser.parse_args(argv)
    plan = make_plan(args)
    command = shlex.join(
        ["python", "benchmarks/report.py", *(sys.argv[1:] if argv is None else argv)]
    )
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())

    iterations = calibrate()
    _say(f"calibrated: {iterations:,} iterations ≈ {BUSY_US:.0f} µs of work per step")
    memory = {n: measure_memory(n) for n in plan.sizes}
    sync_bpp = measure_sync_memory(min(plan.sizes))
    peer_status: dict[str, str | None] = {}
    for name in PEER_COLUMNS:
        installed = peer_version(name)
        if not plan.peers:
            peer_status[name] = "not run (--no-peers)"
        elif installed is None:
            peer_status[name] = "not installed"
        else:
            peer_status[name] = None
    results: dict[tuple[str, str, int], ScenarioResult] = {}
    sync_results: dict[tuple[str, str], ScenarioResult] = {}
    load: list[dict[str, float]] = []
    profiles: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trainreport-bench-") as tmp:
        servers = _Servers(Path(tmp), plan.modes)
        with _cleanup(servers):
            near = servers.url("healthy") if "healthy" in plan.modes else servers.server.url
            ctx = Context(
                rtt_s=_round_trip_s(near),
                update_rtt_s=_update_round_trip_s(near),
                slow_delay_s=SLOW_DELAY_S,
                hang_timeout_s=HANG_CLOSE_TIMEOUT_S,
                memory=memory,
                sync_memory_bpp=sync_bpp,
                sync_read_timeout_s=plan.sync_read_timeout_s,
            )
            for n in plan.sizes:
                small = n == min(plan.sizes)
                scenarios = [Scenario(("control", "local", n), n, NullTarget)]
                scenarios += [trainreport_scenario(servers, mode, n) for mode in plan.modes]
                results.update(
                    run_interleaved(
                        scenarios,
                        iterations,
                        rounds=plan.rounds_small if small else plan.rounds_large,
                        progress=_say,
                    )
                )
                if small:
                    sync: list[Scenario] = []
                    for mode in plan.modes:
                        a, b = plan.sync_caps[mode]
                        sync.append(
                            sync_scenario(servers, mode, "sync", a, plan.sync_read_timeout_s)
                        )
                        if mode != "hanging":
                            sync.append(
                                sync_scenario(
                                    servers, mode, "sync_interval", b, plan.sync_read_timeout_s
                                )
                            )
                    done = run_interleaved(sync, iterations, progress=_say)
                    for (variant, mode, _steps), result in done.items():
                        sync_results[(variant, mode)] = result
                        if mode == "hanging":
                            sync_results[("sync_interval", mode)] = result
            # The peers last: their background threads and processes must not
            # disturb trainreport's runs.
            for n in plan.sizes:
                peers = [
                    peer_scenario(name, n) for name in PEER_COLUMNS if peer_status[name] is None
                ]
                results.update(run_interleaved(peers, iterations, progress=_say))
            if plan.load:
                for concurrency in (16, 64):
                    _say(f"server ingest, {concurrency} concurrent reporters")
                    load.append(run_load(servers.server.url, concurrency, plan.load_seconds))
            rows = build_rows(plan, results, sync_results, peer_status, ctx)
            met, missed = summarise(rows)
            if missed and plan.profile:
                profiles = explain_misses(missed, plan, servers, results, ctx, iterations)

    embedded_table = ""
    if not args.no_embedded:
        embedded = []
        for n in plan.sizes:
            _say(f"embedded default (FileSink run log) / {n} steps")
            rounds = plan.rounds_small if n == min(plan.sizes) else 1
            embedded.append(
                ("trainreport", measure_embedded(n, rounds=rounds, iterations=iterations))
            )
        embedded_table = render_embedded(embedded)
    journal_table = ""
    if not args.no_journal:
        journal_rows = []
        for n in plan.sizes:
            _say(f"journal on HttpSink / {n} steps")
            rounds = plan.rounds_small if n == min(plan.sizes) else 1
            journal_rows.append(measure_journal(n, rounds=rounds, iterations=iterations))
        journal_table = render_journal(journal_rows)
    controls = {key[2]: r.slowdown for key, r in results.items() if key[0] == "control" and r.run}
    table = render_table(rows)
    load_table = render_load(load) if load else ""
    sys.stdout.write(table + "\n")
    if load_table:
        sys.stdout.write(
            "\nReference server ingest (indicative on 2 cores):\n\n" + load_table + "\n"
        )
    if embedded_table:
        sys.stdout.write("\nThe embedded default (FileSink run log):\n\n" + embedded_table + "\n")
    if journal_table:
        sys.stdout.write("\nThe journal's cost on HttpSink:\n\n" + journal_table + "\n")
    sys.stdout.write(
        "\nnoise control (baseline vs itself): "
        + ", ".join(f"{r:.3f} at N={n:,}" for n, r in controls.items())
        + f"\ntrainreport targets: {len(met)} met, {len(missed)} missed\n"
        + "".join(f"  missed: {line}\n" for line in missed)
    )
    if not args.no_write:
        floors = [r.floor_p50_us for r in results.values() if not math.isnan(r.floor_p50_us)]
        doc = render_doc(
            plan,
            ctx,
            sorted(floors)[len(floors) // 2] if floors else math.nan,
            controls,
            iterations,
            command,
            load_before,
            table,
            load_table,
            met,
            missed,
            profiles,
            quick=args.quick,
            embedded_table=embedded_table,
            journal_table=journal_table,
            kept=hand_written_sections(
                args.output.read_text(encoding="utf-8") if args.output.exists() else ""
            ),
        )
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(doc, encoding="utf-8")
        _say(f"wrote {args.output}")
    return 0


def _slowdown_reading(result: ScenarioResult | None, top: str) -> str:
    """The slowdown explained by the reporter thread's measured CPU (healthy run)."""
    if result is None or result.run is None or result.run.extras.get("thread_cpu_s") is None:
        return ""
    ex = result.run.extras
    run = result.run
    cpu = ex["thread_cpu_s"]
    per_step_us = cpu / run.steps * 1e6
    step_us = result.baseline_s / run.steps * 1e6
    recorded = ex["stats"].points_recorded
    sends = len(ex["sends"])
    send_cpu = math.fsum(c for c, _, _ in ex["sends"])
    return (
        f"In the healthy run at N = {run.steps:,}, the reporter thread used {cpu:.2f} s of CPU: "
        f"{per_step_us:.1f} µs per step against a {step_us:.0f} µs step "
        f"({per_step_us / step_us:.0%}), of which {send_cpu:.2f} s in {sends} sends "
        f"({send_cpu / max(sends, 1) * 1e3:.1f} ms each: encoding, gzip, urllib3 and "
        f"http.client, the socket calls) and the rest, mostly applying {recorded:,} points to the "
        "store, "
        f"{(cpu - send_cpu) / max(recorded, 1) * 1e6:.2f} µs a point. Whatever part of it is "
        "Python holds the GIL, and the training loop, pure Python too, waits for it: the loop "
        f"slowdown was {result.slowdown:.3f} and the process CPU ratio {result.cpu_ratio:.3f}. "
        "The same cost against a real step (20 ms and up) is "
        f"{per_step_us / 20000:.2%} or less. The profile below shows where the thread's Python "
        f"time goes; the most own time is in `{top}`."
    )


def explain_misses(
    missed: list[str],
    plan: Plan,
    servers: _Servers,
    results: dict[tuple[str, str, int], ScenarioResult],
    ctx: Context,
    iterations: int,
) -> list[str]:
    """Profiles and breakdowns for the figures whose targets were missed."""
    out: list[str] = []
    n = max(plan.sizes)
    text = "\n".join(missed)
    if "report call p50" in text or "report call p99" in text:
        _say("profiling the hot path")
        out.append("### Report call\n\n" + profile_hot_path(n, iterations))
    if ("slowdown" in text or "reporter CPU" in text) and "healthy" in plan.modes:
        _say("profiling the reporter thread")
        steps = min(n, 20000)
        profile, top = profile_reporter_thread(
            trainreport_scenario(servers, "healthy", steps).make, steps, iterations
        )
        out.append(
            "### Reporter thread and loop slowdown\n\n"
            + _slowdown_reading(results.get(("trainreport", "healthy", n)), top)
            + f"\n\ncProfile of the reporter thread over a healthy run of "
            f"{steps:,} steps, by own time. Socket calls (`recv_into`, `sendall`, "
            "`connect`) and lock waits show time blocked with the GIL released; the rest is "
            "Python time, which is GIL time taken from the training loop. cProfile inflates "
            f"small functions.\n\n```\n{profile}\n```"
        )
    if "request bytes" in text:
        lines = []
        for mode in ("healthy", "slow"):
            r = results.get(("trainreport", mode, n))
            if r is None or r.run is None or r.run.extras.get("proxy") is None:
                continue
            p = r.run.extras["proxy"]
            lines.append(
                f"- {mode}: {p.requests} requests, heads {p.head_bytes:,} B, bodies "
                f"{p.body_bytes:,} B (uncompressed {p.uncompressed_bytes:,} B), final state "
                f"{r.run.extras['state_bytes']:,} B"
            )
        out.append("### Bytes\n\n" + "\n".join(lines))
    if "store bytes" in text:
        m = ctx.memory.get(n, {})
        out.append(
            f"### Memory\n\nmeasure_memory({n}): {m.get('store_bytes_per_point', math.nan):.1f} "
            "B per retained point (three typed columns: 8 + 4 + 8 bytes a point, plus the "
            "arrays' growth slack and the per-series objects)."
        )
    if "close()" in text:
        out.append(
            f"### close()\n\nOne round trip through the healthy proxy: {ctx.rtt_s * 1000:.2f} ms."
        )
    return out


#: The line under a heading of docs/performance.md that marks a section written by hand:
#: render_doc carries such sections over from the previous document unchanged.
HAND_WRITTEN = "<!-- written by hand: benchmarks/report.py keeps this section -->"


def hand_written_sections(previous: str) -> list[str]:
    """The ``## `` sections of ``previous`` (a document) marked :data:`HAND_WRITTEN`, in order.

    Each is returned whole (heading to the line before the next ``## `` heading),
    without trailing blank lines.
    """
    sections: list[list[str]] = []
    current: list[str] | None = None
    for line in previous.splitlines():
        if line.startswith("## "):
            current = [line]
            sections.append(current)
        elif current is not None:
            current.append(line)
    return [
        "\n".join(section).rstrip()
        for section in sections
        if any(line.strip() == HAND_WRITTEN for line in section[1:3])
    ]


def render_doc(
    plan: Plan,
    ctx: Context,
    floor_us: float,
    controls: dict[int, float],
    iterations: int,
    command: str,
    load_before: str,
    table: str,
    load_table: str,
    met: list[str],
    missed: list[str],
    profiles: list[str],
    *,
    quick: bool,
    embedded_table: str = "",
    journal_table: str = "",
    kept: Sequence[str] = (),
) -> str:
    """docs/performance.md; ``kept``: hand-written sections, placed before the targets."""
    parts = [
        "# Performance",
        "",
        "Generated by `benchmarks/report.py`; do not edit by hand. "
        "The targets are docs/design.md#performance. "
        "Micro benchmarks of the engine alone: `pytest benchmarks/bench_*.py --benchmark-only` "
        "or `python benchmarks/bench_report_call.py`.",
        "",
        "## Machine",
        "",
        *machine_lines(command, load_before),
        "",
        "## Read this first",
        "",
        *notes(plan, ctx, iterations, quick, floor_us, controls),
        "",
        "## Results",
        "",
        f"Send interval scaled to {INTERVAL_S * 1000:g} ms (one send per {SEND_EVERY} steps at "
        f"~{BUSY_US:.0f} µs a step), see above. ✅/❌ mark trainreport's figures against the "
        "docs/design.md#performance targets.",
        "",
        table,
        "",
    ]
    if load_table:
        parts += [
            "## Reference server ingest",
            "",
            "Series-suffix updates of 50 steps x 14 series (binary columns, uncompressed), each "
            "reporter on its own task and keep-alive connection, posting as fast as the server "
            f"answers for {plan.load_seconds:g} s, driven from two separate processes. On 2 "
            "shared cores (server, load generator and SQLite on the same machine) these figures "
            "are indicative only.",
            "",
            load_table,
            "",
        ]
    if embedded_table:
        parts += [
            "## The embedded default (FileSink run log)",
            "",
            "`Reporter(FileSink(...))` on a local temporary directory, in the same loop: every "
            "byte the sink wrote (log appends, compactions, the task record at close) over the "
            "final record (compact JSON, the `GET` shape); the reporter thread's CPU over the "
            "points recorded, less the sink's close (the task record written once after the "
            "loop, every point as decimal text), whose share is in brackets; the loop's "
            "slowdown. `python benchmarks/bench_run_log.py "
            "--compare-with OLD_CHECKOUT` measures an earlier version beside it.",
            "",
            embedded_table,
            "",
        ]
    if journal_table:
        parts += [
            "## The journal's cost on HttpSink",
            "",
            "`Reporter(HttpSink(...))` against the reference server, with the journal off and "
            "on (`benchmarks/bench_journal.py`): the loop's slowdown, and the journal's extra "
            "over the row without it (target: at most +0.02). The journal interval is scaled "
            "like the send interval: the 1 s default at a 0.2 s step is a record every 5 steps.",
            "",
            journal_table,
            "",
        ]
    for section in kept:
        parts += [section, ""]
    parts += ["## Targets", ""]
    parts.append(f"{len(met)} trainreport figures met their target, {len(missed)} missed.")
    parts.append("")
    if missed:
        parts += ["Missed:", "", *(f"- {line}" for line in missed), ""]
        parts += [
            "What limits them (profiles taken in the same run):",
            "",
            "\n\n".join(profiles or ["(profiles were not taken: --no-profile)"]),
            "",
        ]
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
