"""Two destinations, one hanging: does the healthy one keep its send cadence?

    python benchmarks/bench_destinations.py [--seconds 4] [--interval 0.1]

A training loop (2 ms a step, 14 metrics) reports to the reference server
(in-process, real sockets) and, as the first destination, to a listener that
accepts connections into its backlog and never answers (reads time out after
10 s). Printed per setup: the healthy destination's sends, and the gaps
between its delivered sends (median, max), against the configured interval:

* ``healthy alone``: the reference;
* ``+ hanging, sender threads``: the engine as built (one sender thread per
  destination when there are several);
* ``+ hanging, one thread``: the same engine with every request made on the
  reporter thread (the alternative that was measured and not chosen).
"""

from __future__ import annotations

import argparse
import itertools
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import metrics_for
from trainreport import Delivered, HttpSink, Reporter, ReportingConfig
from trainreport._engine import _worker as worker_module
from trainreport._engine._sender import Sender
from trainreport._wire._sink_interface import SendResult, Update
from trainreport.server import start_in_thread


class _Timed(HttpSink):
    """An HttpSink that notes when each delivered send returned."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.delivered_at: list[float] = []

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        result = super().send(update, timeout_seconds=timeout_seconds)
        if isinstance(result, Delivered):
            self.delivered_at.append(time.monotonic())
        return result


def _run(url: str, hole: str | None, seconds: float, interval: float, job: str) -> dict[str, Any]:
    healthy = _Timed(url, job)
    sinks: list[HttpSink] = [healthy]
    if hole is not None:
        sinks.insert(0, HttpSink(hole, job, connect_timeout_seconds=10, read_timeout_seconds=10))
    config = ReportingConfig(min_report_interval_seconds=interval, backoff_jitter=0.0)
    reporter = Reporter(sinks=sinks, config=config, rank=0).start()
    step = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        step += 1
        reporter.report_train_step(step=step, metrics=metrics_for(step))
        threading.Event().wait(0.002)
    ended = time.monotonic()
    reporter.close(timeout=1.0)
    times = [t for t in healthy.delivered_at if started <= t <= ended]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    first = times[0] - started if times else float("nan")
    return {
        "sends": len(times),
        "first_s": first,
        "gap_median_s": statistics.median(gaps) if gaps else float("nan"),
        "gap_max_s": max(gaps) if gaps else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args(argv)
    hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hole.bind(("127.0.0.1", 0))
    hole.listen(1024)  # never accepted: connects complete, reads never answer
    hole_url = f"http://127.0.0.1:{hole.getsockname()[1]}"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = start_in_thread(Path(tmp) / "bench.db")
        try:
            rows.append(("healthy alone", _run(server.url, None, args.seconds, args.interval, "a")))
            rows.append(
                (
                    "+ hanging, sender threads",
                    _run(server.url, hole_url, args.seconds, args.interval, "b"),
                )
            )

            def one_thread(sink: Any, **kwargs: Any) -> Sender:
                return Sender(sink, **{**kwargs, "threaded": False})

            # The worker builds its senders by the name it imported: one thread for all.
            with mock.patch.object(worker_module, "Sender", one_thread):
                rows.append(
                    (
                        "+ hanging, one thread",
                        _run(server.url, hole_url, args.seconds, args.interval, "c"),
                    )
                )
        finally:
            server.stop()
    hole.close()
    print(f"healthy destination's sends over {args.seconds:g} s, interval {args.interval:g} s")
    print()
    print("| setup | sends | first send after (s) | gap median (s) | gap max (s) |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        print(
            f"| {name} | {r['sends']} | {r['first_s']:.3f} | {r['gap_median_s']:.3f} "
            f"| {r['gap_max_s']:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
