"""trainreport as a benchmark target: a real Reporter and HttpSink, with a measuring sink around it.

:class:`MeasuringSink` wraps any sink and samples ``time.thread_time()`` (the
CPU time of the calling thread, which is always the reporter thread) around
``open`` and ``send``, and once more at ``close``, which the reporter thread
calls last. That gives the reporter thread's total CPU over the run and the
CPU of each send (encoding, gzip, urllib3), without touching ``src/``
(docs/design.md#performance, figure 5).
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import ReporterTarget
from _proxy import ProxyProcess
from trainreport import Delivered, HttpSink, Reporter, ReportingConfig, Sink
from trainreport._wire._sink_interface import OpenResult, SendResult, Update

_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)


def _kernel_seconds() -> float:
    """System CPU time of the calling thread (Linux), seconds; 0 where unavailable."""
    if _RUSAGE_THREAD is None:
        return 0.0
    return resource.getrusage(_RUSAGE_THREAD).ru_stime


class MeasuringSink(Sink):
    """Delegates to ``inner`` and records the reporter thread's CPU time (seconds).

    Attributes:
        sends: one ``(cpu_seconds, points, delivered)`` per ``send`` call.
        send_walls: the wall time of each ``send`` call, seconds.
        send_spans: ``(start, end)`` of each ``send`` call, ``time.perf_counter`` seconds.
        send_kernel_s: the part of the sends' CPU spent in the kernel
            (``getrusage(RUSAGE_THREAD)`` system time; NaN where unavailable), seconds.
        open_cpu_s: CPU seconds spent in ``open`` calls.
        thread_cpu_s: the reporter thread's total CPU seconds, read at
            ``close`` (``None`` until the thread closed the sink).
        close_cpu_s: CPU seconds spent in ``close`` (a FileSink writes its
            task record there).
        closed: set once ``close`` ran.
    """

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.sends: list[tuple[float, int, bool]] = []
        self.send_walls: list[float] = []
        self.send_spans: list[tuple[float, float]] = []
        self.send_kernel_s = 0.0 if _RUSAGE_THREAD is not None else float("nan")
        self.open_cpu_s = 0.0
        self.opens = 0
        self.thread_cpu_s: float | None = None
        self.close_cpu_s = 0.0
        self.closed = threading.Event()

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """``inner.open``, timed in thread CPU."""
        t0 = time.thread_time()
        try:
            return self.inner.open(timeout_seconds=timeout_seconds)
        finally:
            self.open_cpu_s += time.thread_time() - t0
            self.opens += 1

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """``inner.send``, timed in thread CPU."""
        w0 = time.perf_counter()
        k0 = _kernel_seconds()
        t0 = time.thread_time()
        result = self.inner.send(update, timeout_seconds=timeout_seconds)
        self.sends.append(
            (time.thread_time() - t0, update.point_count, isinstance(result, Delivered))
        )
        self.send_kernel_s += _kernel_seconds() - k0
        w1 = time.perf_counter()
        self.send_walls.append(w1 - w0)
        self.send_spans.append((w0, w1))
        return result

    def close(self) -> None:
        """``inner.close``, timed in thread CPU, then the thread's total CPU."""
        t0 = time.thread_time()
        try:
            self.inner.close()
        finally:
            self.thread_cpu_s = time.thread_time()
            self.close_cpu_s = self.thread_cpu_s - t0
            self.closed.set()


def stored_state_bytes(server_url: str, job_id: str, task_id: str = "train") -> int | None:
    """Size of the stored task in the ``GET`` shape, compact JSON, uncompressed (bytes).

    Read straight from the server (not through a proxy). ``None`` when the
    task does not exist.
    """
    with urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=60.0)) as pool:
        response = pool.request("GET", f"{server_url}/v1/jobs/{job_id}/tasks/{task_id}")
    if response.status == 404:
        return None
    if response.status != 200:
        raise RuntimeError(f"GET of the stored task answered {response.status}")
    task = json.loads(response.data)
    return len(json.dumps(task, separators=(",", ":"), ensure_ascii=False).encode())


def fit_send_cost(sends: list[tuple[float, int, bool]]) -> tuple[float, float]:
    """(fixed CPU seconds per send, CPU seconds per point) from a least-squares line.

    Fitted over delivered sends; when the sends' sizes do not vary enough for a
    line (or it gives a negative intercept), the fixed cost is the cheapest of
    the smallest sends and the per-point cost is NaN.
    """
    points = [(float(p), c) for c, p, ok in sends if ok] or [(float(p), c) for c, p, _ in sends]
    if not points:
        return float("nan"), float("nan")
    xs = [p for p, _ in points]
    if len(points) >= 5 and max(xs) > min(xs):
        n = len(points)
        mx = sum(xs) / n
        my = sum(c for _, c in points) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        sxy = sum((x - mx) * (c - my) for x, c in points)
        slope = sxy / sxx
        intercept = my - slope * mx
        if intercept > 0 and slope >= 0:
            return intercept, slope
    smallest = min(xs)
    return min(c for p, c in points if p == smallest), float("nan")


class TrainreportTarget(ReporterTarget):
    """A started :class:`trainreport.Reporter` over :class:`trainreport.HttpSink`.

    See docs/design.md#public-api.

    Args:
        url: where the sink sends (a proxy's URL, or a closed port).
        server_url: the reference server itself, to read the final stored
            state; ``None`` when nothing can be stored (down, hanging).
        job_id: a fresh job id for this run.
        interval_s: ``min_report_interval_seconds`` (the scaled interval).
        close_timeout_s: the ``close(timeout=...)`` budget, seconds.
        proxy: the proxy in front of the server, whose counters are reset at
            start and read at the end; ``None`` for a closed port.
    """

    def __init__(
        self,
        *,
        url: str,
        server_url: str | None,
        job_id: str,
        interval_s: float,
        close_timeout_s: float,
        proxy: ProxyProcess | None,
    ) -> None:
        self.sink = MeasuringSink(HttpSink(url, job_id=job_id, task_id="train"))
        reporter = Reporter(
            self.sink, ReportingConfig(min_report_interval_seconds=interval_s), rank=0
        )
        super().__init__(reporter, close_timeout_s=close_timeout_s, must_close=False)
        self.job_id = job_id
        self.server_url = server_url
        self.proxy = proxy

    def start(self, max_steps: int) -> None:
        """Reset the proxy's counters, start the reporter, report the training start."""
        if self.proxy is not None:
            self.proxy.reset()
        super().start(max_steps)

    def extras(self) -> dict[str, Any]:
        """Bytes (proxy and sink), CPU, final stored state; releases a hung thread first."""
        proxy_stats = self.proxy.stats() if self.proxy is not None else None
        if self.proxy is not None and self.proxy.mode == "hang":
            self.proxy.drop()  # the thread still waits on a response: let it finish now
        self.sink.closed.wait(30.0)
        stats = self.reporter.stats()
        fixed, per_point = fit_send_cost(self.sink.sends)
        started = self.close_started
        in_flight = [end - started for start, end in self.sink.send_spans if start < started < end]
        return {
            "stats": stats,
            "proxy": proxy_stats,
            "state_bytes": (
                stored_state_bytes(self.server_url, self.job_id) if self.server_url else None
            ),
            "thread_cpu_s": self.sink.thread_cpu_s,
            "open_cpu_s": self.sink.open_cpu_s,
            "sends": list(self.sink.sends),
            "send_walls": list(self.sink.send_walls),
            "send_kernel_s": self.sink.send_kernel_s,
            "close_in_flight_s": max(in_flight, default=0.0),
            "close_sends": [end - start for start, end in self.sink.send_spans if start >= started],
            "send_fixed_cpu_s": fixed,
            "send_point_cpu_s": per_point,
        }
