"""The design trainreport replaces: a synchronous full-state reporter.

The baseline of docs/design.md#performance.

From the logging call itself, it ``PATCH``es the whole ``status_details``
with every curve accumulated so far (``metrics`` holding each series in
full, a dict per point), with urllib3, blocking, on every call (no interval)
or at most once per interval. This is what teams do today when they call the
job API from the logging hook (docs/design.md); its cost grows with the
square of the run, which is why the benchmark runs it for a capped number of
steps and extrapolates (``report.py``).
"""

from __future__ import annotations

import json
import math
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import NUM_EPOCHS
from _measuring import stored_state_bytes
from _proxy import ProxyProcess
from _workload import metrics_for


class SyncFullStateReporter:
    """Sends the full accumulated state, synchronously, from the report calls.

    Args:
        url: the job-status service's base URL (here: a proxy's).
        job_id: the job's id.
        task_id: the task's id.
        interval_s: minimum seconds between sends (0: every call sends).
        connect_timeout_s: TCP connect timeout, seconds.
        read_timeout_s: socket read timeout, seconds (as HttpSink's default).

    Attributes:
        sends: ``(step, body bytes)`` of every attempted send.
        failures: sends that raised (refused, timed out) or got a non-2xx answer.
    """

    def __init__(
        self,
        url: str,
        job_id: str,
        task_id: str = "train",
        *,
        interval_s: float = 0.0,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 10.0,
    ) -> None:
        self._url = f"{url}/v1/jobs/{job_id}/tasks/{task_id}"
        self._pool = urllib3.PoolManager(
            retries=False,
            timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s),
        )
        self._interval = interval_s
        self._last_send = -math.inf
        self._status = "running"
        self._details: dict[str, Any] = {"phase": "setup"}
        self._metrics: dict[str, list[dict[str, Any]]] = {}
        self._dirty = False
        self._step = 0
        self.sends: list[tuple[int, int]] = []
        self.failures = 0

    # --- recording (also used alone by measure_sync_memory) ------------------------------

    def record(self, prefix: str, step: int, epoch: int, metrics: dict[str, float]) -> None:
        """Add one point per metric to the curves and set the current values."""
        details = self._details
        curves = self._metrics
        for name, value in metrics.items():
            key = prefix + name
            details[key] = value
            points = curves.get(key)
            if points is None:
                points = curves[key] = []
            points.append({"step": step, "epoch": epoch + 1, "value": value})
        self._dirty = True

    # --- the report calls ------------------------------------------------------------

    def report_training_start(self, *, max_steps: int, num_epochs: int) -> None:
        """Set the phase and plan; sent with the next call."""
        self._details.update(phase="training", max_steps=max_steps, num_epochs=num_epochs)
        self._dirty = True

    def report_train_step(self, *, step: int, epoch: int, metrics: dict[str, float]) -> None:
        """Record the step's metrics and send the whole state if the interval allows."""
        details = self._details
        details["step"] = step
        details["epoch"] = epoch + 1
        max_steps = details.get("max_steps")
        if max_steps:
            details["percentage_done"] = min(100.0, 100.0 * step / max_steps)
        self._step = step
        self.record("train_", step, epoch, metrics)
        self._maybe_send()

    def report_validation(self, *, step: int, epoch: int, metrics: dict[str, float]) -> None:
        """Record validation metrics and send if the interval allows."""
        self.record("val_", step, epoch, metrics)
        self._maybe_send()

    def report_checkpoint_saved(self, *, path: str, step: int) -> None:
        """Set the checkpoint path and send if the interval allows."""
        self._details["checkpoint_path"] = path
        self._dirty = True
        self._maybe_send()

    def report_completed(self) -> None:
        """Set the status; sent at close."""
        self._status = "completed"
        self._dirty = True

    def close(self, *, send: bool = True) -> None:
        """Send what is unsent (when ``send``), then drop the pool."""
        if send and self._dirty:
            self._send()
        self._pool.clear()

    # --- sending ---------------------------------------------------------------------

    def _maybe_send(self) -> None:
        if time.monotonic() - self._last_send >= self._interval:
            self._send()

    def _send(self) -> None:
        details = dict(self._details)
        details["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        details["metrics"] = self._metrics
        body = json.dumps(
            {"status": self._status, "status_details": details}, separators=(",", ":")
        ).encode()
        self.sends.append((self._step, len(body)))
        try:
            response = self._pool.request(
                "PATCH", self._url, body=body, headers={"Content-Type": "application/json"}
            )
            if not 200 <= response.status < 300:
                self.failures += 1
        except urllib3.exceptions.HTTPError:
            self.failures += 1
        self._dirty = False
        self._last_send = time.monotonic()


class SyncTarget:
    """:class:`SyncFullStateReporter` as a benchmark target.

    Args:
        url: where it sends (a proxy, or a closed port).
        server_url: the reference server, to read the final stored state
            (``None`` when nothing can be stored).
        job_id: a fresh job id.
        interval_s: 0 (no interval) or the scaled interval, seconds.
        proxy: the proxy in front of the server, or ``None``.
        send_at_close: make the final send at close (skipped for a hanging
            server, where it would block for the whole read timeout).
        read_timeout_s: the reporter's socket read timeout, seconds.
    """

    def __init__(
        self,
        *,
        url: str,
        server_url: str | None,
        job_id: str,
        interval_s: float,
        proxy: ProxyProcess | None,
        send_at_close: bool = True,
        read_timeout_s: float = 10.0,
    ) -> None:
        self.reporter = SyncFullStateReporter(
            url, job_id, interval_s=interval_s, read_timeout_s=read_timeout_s
        )
        self.server_url = server_url
        self.job_id = job_id
        self.proxy = proxy
        self.send_at_close = send_at_close
        self.train_step = self.reporter.report_train_step
        self.validation = self.reporter.report_validation
        self.checkpoint = self.reporter.report_checkpoint_saved

    def start(self, max_steps: int) -> None:
        """Reset the proxy's counters; record the training start."""
        if self.proxy is not None:
            self.proxy.reset()
        self.reporter.report_training_start(max_steps=max_steps, num_epochs=NUM_EPOCHS)

    def queue_depth(self) -> int:
        """No queue: everything happens in the call."""
        return 0

    def finish(self) -> float:
        """Report completion and close (a final send); returns its latency, seconds."""
        self.reporter.report_completed()
        t0 = time.perf_counter()
        self.reporter.close(send=self.send_at_close)
        return time.perf_counter() - t0

    def extras(self) -> dict[str, Any]:
        """Bytes (proxy and self-counted per send) and the final stored state's size."""
        return {
            "proxy": self.proxy.stats() if self.proxy is not None else None,
            "state_bytes": (
                stored_state_bytes(self.server_url, self.job_id) if self.server_url else None
            ),
            "sends": list(self.reporter.sends),
            "failures": self.reporter.failures,
        }


def measure_sync_memory(steps: int) -> float:
    """Bytes per retained point of the synchronous design's state (a dict per point)."""
    reporter = SyncFullStateReporter("http://127.0.0.1:9", "memory")
    reporter.record("train_", 0, 0, metrics_for(0))  # names and first allocations
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for step in range(1, steps + 1):
        # The metrics are made inside the traced region: the state keeps their floats alive.
        reporter.record("train_", step, 0, metrics_for(step))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / (steps * len(metrics_for(0)))
