"""From measured runs to table cells: figures, extrapolation, targets (docs/design.md#performance).

Pure functions over :class:`_loop.ScenarioResult` values; ``report.py`` runs
the scenarios and prints what this module formats.

Extrapolation (the synchronous design only, whose cost grows with the square
of the run): a quadratic is fitted by least squares to the measured
cumulative time inside the report calls against the step (a straight line
through the origin for runs under 10 steps, such as the hanging server's,
where every call waits for the whole read timeout), and evaluated at N. Bytes
are extrapolated the same way from the bytes of each send, and the final
state's size with a straight line. Extrapolated cells say so.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import ScenarioResult

MET, MISSED = "met", "missed"
#: What ``close()`` may spend besides its one send with a healthy server (drain, encode), s.
CLOSE_OVERHEAD_S = 0.1

#: (figure id, label) in table order.
FIGURES: tuple[tuple[str, str], ...] = (
    ("call_p50", "report call p50 (µs)"),
    ("call_p99", "report call p99 (µs)"),
    ("call_p999", "report call p99.9 (µs)"),
    ("call_max", "report call max (µs)"),
    ("call_sum", "time in report calls, sum (s)"),
    ("slowdown", "loop slowdown (x baseline)"),
    ("cpu_ratio", "loop CPU of this process, all threads (x baseline)"),
    ("gc", "GC pauses on the training thread, sum (s) [baseline loop]"),
    ("bytes_ratio", "request bytes / final state, as sent (gzip)"),
    ("bytes_plain", "request bytes / final state, uncompressed"),
    ("bytes_wire", "request bytes on the wire: proxy [sink-counted]"),
    ("requests", "HTTP requests (proxy) / steps per request"),
    ("memory", "store bytes / retained point"),
    ("queue_peak", "queue peak: reports [≈ bytes]"),
    ("cpu_point", "reporter CPU / recorded point (µs) [incl. send cost]"),
    ("cpu_send", "fixed CPU / HTTP send (µs) [median send; kernel share]"),
    ("send_wall", "HTTP send wall time, median (ms) [one update alone]"),
    ("close", "close() latency (s)"),
)

#: Figures that are per run, not per server mode.
MODE_FREE = frozenset({"memory"})
#: Figures that need a stored final state (healthy and slow servers only).
STATE_FIGURES = frozenset({"bytes_ratio", "bytes_plain"})

COLUMNS: tuple[tuple[str, str], ...] = (
    ("trainreport", "trainreport"),
    ("sync", "sync full-state, no interval"),
    ("sync_interval", "sync full-state, scaled interval"),
    ("wandb", "wandb offline"),
    ("mlflow", "MLflow async"),
    ("tensorboardX", "tensorboardX"),
)
PEER_COLUMNS = ("wandb", "mlflow", "tensorboardX")


@attrs.frozen
class Cell:
    """One table cell: text, and met/missed for a trainreport figure with a target."""

    text: str
    status: str | None = None

    def render(self) -> str:
        """The cell's markdown."""
        if self.status == MET:
            return f"{self.text} ✅ met"
        if self.status == MISSED:
            return f"{self.text} ❌ **missed**"
        return self.text


NA = Cell("n/a")


@attrs.frozen
class Context:
    """What the cells need besides the runs.

    Attributes:
        rtt_s: one ``GET /v1/capabilities`` round trip through the healthy proxy
            (median), seconds.
        update_rtt_s: one series-suffix update (50 steps x 14 series) through
            the healthy proxy, measured alone (median), seconds.
        slow_delay_s: the slow server's added delay per response, seconds.
        hang_timeout_s: ``close(timeout=...)`` with a hanging or down server, seconds.
        memory: per N, ``measure_memory`` figures (store bytes/point, queue bytes/report).
        sync_memory_bpp: the synchronous design's bytes per retained point.
        sync_read_timeout_s: the synchronous reporter's read timeout, seconds.
    """

    rtt_s: float
    update_rtt_s: float
    slow_delay_s: float
    hang_timeout_s: float
    memory: dict[int, dict[str, float]]
    sync_memory_bpp: float
    sync_read_timeout_s: float


# --- number formatting -----------------------------------------------------------------


def fmt(x: float) -> str:
    """A number with about three significant digits; large ones in scientific form."""
    if math.isnan(x):
        return "n/a"
    a = abs(x)
    if a >= 1e5:
        return f"{x:.1e}".replace("e+0", "e").replace("e+", "e")
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}" if a >= 0.01 else f"{x:.2g}"


def fmt_bytes(n: float) -> str:
    """Bytes as B, kB, MB or GB (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def extrap(text: str) -> str:
    """Mark an extrapolated value."""
    return f"≈ {text} (extrap.)"


#: The targets of docs/design.md#performance, written once for every benchmark script.
TARGET_CALL_P50_US = 1.5
TARGET_CALL_P99_US = 10.0
TARGET_SLOWDOWN = 1.05
TARGET_CPU_POINT_US = 0.3
TARGET_CPU_SEND_US = 300.0
TARGET_BYTES_RATIO = 1.5
TARGET_BYTES_PER_POINT = 40.0


def _check(value: float, limit: float) -> str:
    return MET if value < limit else MISSED


# --- fitting -----------------------------------------------------------------------------


def _solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a 3x3 linear system by Gaussian elimination with partial pivoting."""
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if m[col][col] == 0:
            return [math.nan] * 3
        for r in range(3):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][3] / m[i][i] for i in range(3)]


def fit_quadratic(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares ``y = c0 + c1 x + c2 x²`` (x scaled internally for conditioning)."""
    scale = max(xs) or 1.0
    u = [x / scale for x in xs]
    sums = [math.fsum(v**k for v in u) for k in range(5)]
    rhs = [math.fsum(y * v**k for v, y in zip(u, ys, strict=True)) for k in range(3)]
    a = [[sums[i + j] for j in range(3)] for i in range(3)]
    c0, c1, c2 = _solve3(a, rhs)
    return c0, c1 / scale, c2 / scale**2


def extrapolate_cumulative(per_step: Sequence[float], n: int) -> float:
    """The cumulative sum of ``per_step`` extrapolated from its length to ``n`` steps.

    A quadratic fit of the running total against the step; under 10 steps, a
    straight line through the origin. Never below the measured total.
    """
    k = len(per_step)
    total = math.fsum(per_step)
    if k == 0:
        return math.nan
    if n <= k:
        return math.fsum(per_step[:n])
    if k < 10:
        return total / k * n
    stride = max(1, k // 400)
    xs: list[float] = []
    ys: list[float] = []
    running = 0.0
    for i, v in enumerate(per_step, start=1):
        running += v
        if i % stride == 0 or i == k:
            xs.append(float(i))
            ys.append(running)
    c0, c1, c2 = fit_quadratic(xs, ys)
    value = c0 + c1 * n + c2 * n * n
    return max(value, total) if math.isfinite(value) else total / k * n


def _step_series(sends: Sequence[tuple[int, int]], steps: int) -> list[float]:
    """Bytes sent at each step 1..steps from ``(step, bytes)`` records."""
    out = [0.0] * steps
    for step, size in sends:
        out[min(max(step, 1), steps) - 1] += size
    return out


# --- trainreport -------------------------------------------------------------------------


def _call_cells(result: ScenarioResult, checked: bool) -> dict[str, Cell]:
    run = result.run
    assert run is not None
    p50, p99 = run.call_percentile(0.5), run.call_percentile(0.99)
    return {
        "call_p50": Cell(fmt(p50), _check(p50, TARGET_CALL_P50_US) if checked else None),
        "call_p99": Cell(fmt(p99), _check(p99, TARGET_CALL_P99_US) if checked else None),
        "call_p999": Cell(fmt(run.call_percentile(0.999))),
        "call_max": Cell(fmt(run.calls_us[-1] if run.calls_us else math.nan)),
        "call_sum": Cell(fmt(run.call_sum_s)),
        "slowdown": Cell(
            f"{result.slowdown:.3f}", _check(result.slowdown, TARGET_SLOWDOWN) if checked else None
        ),
        "cpu_ratio": Cell(f"{result.cpu_ratio:.3f}"),
        "gc": Cell(f"{fmt(run.gc_s)} [{fmt(result.baseline_gc_s)}]"),
    }


def close_target(mode: str, ctx: Context) -> tuple[str, float | None]:
    """(target text, limit in seconds or None) for ``close()`` in a server mode.

    The targets are docs/design.md#performance.

    Healthy: one round trip plus encoding, checked as: after any send already in
    flight when ``close()`` was called, exactly one send, and at most
    :data:`CLOSE_OVERHEAD_S` besides it (draining the queue, encoding, joining).
    Hanging and down: at its timeout (+ 0.25 s). Slow: no target.
    """
    if mode == "healthy":
        return (
            f"≈ 1 round trip + encoding: after any send in flight, one send and "
            f"≤ {CLOSE_OVERHEAD_S * 1000:.0f} ms besides it",
            CLOSE_OVERHEAD_S,
        )
    if mode == "slow":
        return "— (no target)", None
    limit = ctx.hang_timeout_s + 0.25
    return f"at its timeout ({ctx.hang_timeout_s:g} s; ≤ {limit:g} s)", limit


def trainreport_cells(result: ScenarioResult, mode: str, n: int, ctx: Context) -> dict[str, Cell]:
    """Every figure of one trainreport run."""
    run = result.run
    if run is None:
        return dict.fromkeys((f for f, _ in FIGURES), Cell(f"failed: {result.error}"))
    cells = _call_cells(result, checked=True)
    ex = run.extras
    stats = ex["stats"]
    proxy = ex["proxy"]
    state = ex["state_bytes"]
    if proxy is not None and state:
        ratio = proxy.wire_bytes / state
        cells["bytes_ratio"] = Cell(f"{ratio:.3f}", _check(ratio, TARGET_BYTES_RATIO))
        cells["bytes_plain"] = Cell(f"{proxy.uncompressed_bytes / state:.3f}")
    else:
        cells["bytes_ratio"] = cells["bytes_plain"] = Cell("n/a (nothing stored)")
    if proxy is not None:
        cells["bytes_wire"] = Cell(f"{fmt_bytes(proxy.wire_bytes)} [{fmt_bytes(stats.bytes_sent)}]")
        per = n / proxy.requests if proxy.requests else math.nan
        cells["requests"] = Cell(f"{proxy.requests} / {fmt(per)}")
    else:
        cells["bytes_wire"] = Cell(f"0 B (refused) [{fmt_bytes(stats.bytes_sent)}]")
        cells["requests"] = Cell(f"0 (refused; {stats.requests_sent} attempts)")
    memory = ctx.memory.get(n, {})
    bpp = memory.get("store_bytes_per_point", math.nan)
    cells["memory"] = Cell(f"{bpp:.1f}", _check(bpp, TARGET_BYTES_PER_POINT))
    per_report = memory.get("queue_bytes_per_report", math.nan)
    cells["queue_peak"] = Cell(
        f"{run.queue_peak:,} [{fmt_bytes(run.queue_peak * per_report)}]"
        if math.isfinite(per_report)
        else f"{run.queue_peak:,}"
    )
    cpu = ex["thread_cpu_s"]
    recorded = stats.points_recorded
    sends = ex["sends"]
    fixed = ex["send_fixed_cpu_s"]
    if cpu is not None and recorded:
        fixed_total = len(sends) * fixed if math.isfinite(fixed) else 0.0
        per_point = (cpu - ex["open_cpu_s"] - fixed_total) / recorded * 1e6
        cells["cpu_point"] = Cell(
            f"{fmt(per_point)} [{fmt(cpu / recorded * 1e6)}]",
            _check(per_point, TARGET_CPU_POINT_US),
        )
    else:
        cells["cpu_point"] = Cell(
            "n/a (thread still running)"
            if cpu is None
            else "n/a (no point applied: the stored task was never read)"
        )
    if sends:
        send_cpus = sorted(c for c, _, _ in sends)
        median_send = send_cpus[len(send_cpus) // 2]
        kernel = ex["send_kernel_s"] / math.fsum(send_cpus) if math.fsum(send_cpus) else math.nan
        share = f"; {kernel:.0%} in the kernel" if math.isfinite(kernel) else ""
        cells["cpu_send"] = Cell(
            f"{fmt(fixed * 1e6)} [{fmt(median_send * 1e6)}{share}]",
            _check(fixed * 1e6, TARGET_CPU_SEND_US) if math.isfinite(fixed) else None,
        )
    else:
        cells["cpu_send"] = Cell("n/a (no send: open never succeeded)")
    walls = sorted(ex["send_walls"])
    cells["send_wall"] = Cell(
        f"{fmt(walls[len(walls) // 2] * 1000)} [{fmt(ctx.update_rtt_s * 1000)}]"
        if walls
        else "n/a (no send)"
    )
    _, limit = close_target(mode, ctx)
    waited = ex["close_in_flight_s"]
    sends_after = ex["close_sends"]
    other = run.close_s - waited - math.fsum(sends_after)
    if mode in ("healthy", "slow"):
        text = (
            f"{run.close_s:.3f} ({waited:.3f} in flight, {len(sends_after)} send "
            f"{math.fsum(sends_after):.3f}, {max(other, 0.0):.3f} besides)"
        )
        ok = len(sends_after) == 1 and other <= CLOSE_OVERHEAD_S
    else:
        text = f"{run.close_s:.3f}"
        ok = limit is not None and run.close_s <= limit
    cells["close"] = Cell(text, None if limit is None else (MET if ok else MISSED))
    return cells


# --- the synchronous design -------------------------------------------------------------


def sync_cells(result: ScenarioResult, mode: str, n: int, ctx: Context) -> dict[str, Cell]:
    """Every figure of the synchronous design at N, measured or extrapolated from its run."""
    run = result.run
    if run is None:
        return dict.fromkeys((f for f, _ in FIGURES), Cell(f"failed: {result.error}"))
    ex = run.extras
    measured = run.steps >= n
    cells: dict[str, Cell] = {}
    if measured:
        cells.update(_call_cells(result, checked=False))
    else:
        note = f" (first {run.steps} steps)"
        cells["call_p50"] = Cell(fmt(run.call_percentile(0.5)) + note)
        cells["call_p99"] = Cell(fmt(run.call_percentile(0.99)) + note)
        cells["call_p999"] = Cell(fmt(run.call_percentile(0.999)) + note)
        cells["call_max"] = Cell(fmt(run.calls_us[-1]) + note)
        total = extrapolate_cumulative(run.per_step_us, n) / 1e6
        cells["call_sum"] = Cell(extrap(fmt(total)))
        base_per_step = result.baseline_s / run.steps
        cells["slowdown"] = Cell(extrap(fmt(1.0 + total / (base_per_step * n))))
        cells["gc"] = Cell(f"{fmt(run.gc_s)} [{fmt(result.baseline_gc_s)}] (first {run.steps})")
        cells["cpu_ratio"] = Cell(f"{result.cpu_ratio:.3f} (first {run.steps})")
    proxy = ex["proxy"]
    state = ex["state_bytes"]
    sends: list[tuple[int, int]] = ex["sends"]
    heads = proxy.head_bytes / proxy.requests if proxy is not None and proxy.requests else 0.0
    if proxy is not None and proxy.requests:
        if measured:
            cells["bytes_wire"] = Cell(fmt_bytes(proxy.wire_bytes))
            cells["requests"] = Cell(f"{proxy.requests} / {fmt(n / proxy.requests)}")
        else:
            body = extrapolate_cumulative(_step_series(sends, run.steps), n)
            count = len(sends) / run.steps * n
            cells["bytes_wire"] = Cell(extrap(fmt_bytes(body + heads * count)))
            cells["requests"] = Cell(extrap(f"{count:.3g} / {fmt(n / count)}"))
    else:
        cells["bytes_wire"] = Cell("0 B (nothing answered)")
        cells["requests"] = Cell(f"0 ({len(sends)} attempts)")
    if proxy is not None and state:
        if measured:
            ratio = proxy.wire_bytes / state
            cells["bytes_ratio"] = cells["bytes_plain"] = Cell(f"{fmt(ratio)} (no gzip)")
        else:
            body = extrapolate_cumulative(_step_series(sends, run.steps), n)
            count = len(sends) / run.steps * n
            # The state grows linearly with the steps: scale the measured one.
            state_n = state * n / run.steps
            ratio = (body + heads * count) / state_n
            cells["bytes_ratio"] = cells["bytes_plain"] = Cell(extrap(fmt(ratio)) + " (no gzip)")
    else:
        cells["bytes_ratio"] = cells["bytes_plain"] = Cell("n/a (nothing stored)")
    cells["memory"] = Cell(f"{ctx.sync_memory_bpp:.0f} (a dict per point)")
    cells["queue_peak"] = Cell("0 (no queue: blocks)")
    cells["cpu_point"] = Cell("n/a (all on the training thread: see sum)")
    cells["cpu_send"] = Cell("n/a (on the training thread)")
    cells["send_wall"] = Cell("see report call times (it blocks)")
    if mode == "hanging":
        cells["close"] = Cell(f"≈ {ctx.sync_read_timeout_s:g} (read timeout; not run)")
    else:
        cells["close"] = Cell(f"{run.close_s:.3f}")
    return cells


# --- peers -------------------------------------------------------------------------------


def peer_cells(result: ScenarioResult | None, status: str | None) -> dict[str, Cell]:
    """A peer's figures (local writes: the bytes, memory and CPU figures do not apply)."""
    if result is None or result.run is None:
        text = status or (f"failed: {result.error}" if result is not None else "not run")
        return dict.fromkeys((f for f, _ in FIGURES), Cell(text))
    cells = _call_cells(result, checked=False)
    for figure in ("bytes_ratio", "bytes_plain", "bytes_wire", "requests"):
        cells[figure] = Cell("n/a (local files)")
    cells["memory"] = Cell("n/a")
    cells["queue_peak"] = Cell("n/a (internal)")
    cells["cpu_point"] = Cell("n/a")
    cells["cpu_send"] = Cell("n/a")
    cells["send_wall"] = Cell("n/a")
    cells["close"] = Cell(f"{result.run.close_s:.3f}")
    return cells


def target_text(figure: str, mode: str, ctx: Context) -> str:
    """The target column for a figure in a server mode (docs/design.md#performance)."""
    return {
        "call_p50": f"< {TARGET_CALL_P50_US:g}",
        "call_p99": f"< {TARGET_CALL_P99_US:g}",
        "call_p999": "— (bounded by the 5 ms switch interval)",
        "call_max": "— (same)",
        "call_sum": "—",
        "slowdown": f"< {TARGET_SLOWDOWN:g}",
        "gc": "—",
        "cpu_ratio": "— (cross-check of the slowdown)",
        "bytes_ratio": f"< {TARGET_BYTES_RATIO:g} (with the suffix extension)",
        "bytes_plain": "— (reported beside it)",
        "bytes_wire": "—",
        "requests": "— (one send per ~50 steps)",
        "memory": f"< {TARGET_BYTES_PER_POINT:g}",
        "queue_peak": "— (measured separately)",
        "cpu_point": f"< {TARGET_CPU_POINT_US:g}",
        "cpu_send": f"< {TARGET_CPU_SEND_US:g}",
        "send_wall": "—",
        "close": close_target(mode, ctx)[0],
    }[figure]


def render_table(
    rows: Sequence[tuple[str, int, str, str, dict[str, Cell]]],
    columns: Sequence[tuple[str, str]] = COLUMNS,
) -> str:
    """Markdown for rows of ``(figure label, N, server mode, target, cells by column)``."""
    header = ["figure", "N", "server", "target"] + [label for _, label in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, n, mode, target, cells in rows:
        values = [label, f"{n:,}", mode, target] + [
            cells.get(key, Cell("—")).render() for key, _ in columns
        ]
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines)


def summarise(
    rows: Sequence[tuple[str, int, str, str, dict[str, Cell]]],
) -> tuple[list[str], list[str]]:
    """(met, missed) descriptions of the trainreport cells that carry a target."""
    met: list[str] = []
    missed: list[str] = []
    for label, n, mode, _target, cells in rows:
        cell = cells.get("trainreport")
        if cell is None or cell.status is None:
            continue
        line = f"{label}, N={n:,}, {mode}: {cell.text}"
        (met if cell.status == MET else missed).append(line)
    return met, missed


def as_dict(cells: dict[str, Cell]) -> dict[str, Any]:
    """Cells as plain JSON-able values (for ``--json``)."""
    return {k: {"text": c.text, "status": c.status} for k, c in cells.items()}
