"""The chart page's speed in a real browser (issue 24): time to first chart, frame time.

Runs the reference server in a thread and Debian's Chromium through Playwright
(``/usr/bin/chromium``, as the page tests do), and prints one Markdown table:

- time to first chart: from navigation to the first uPlot chart drawn, for the
  demo run (4 series x 600 points), a 1,000-metric run (1,000 series x 100
  points) and one series of 1,000,000 points;
- frame time while a live run updates: the longest and the 99th-percentile gap
  between animation frames over 20 s while a writer appends 20 points to 30
  series every 0.5 s (the page polls every 2 s).

    python benchmarks/bench_page.py [--quick]

Not a test: nothing is asserted; ``docs/performance.md`` ("The chart page")
holds the figures of one sitting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from browser import Browser
from trainreport.server import start_in_thread

JOB, TASK = "bench-page", "train"
FIRST_CHART = "window.trainreportPage && window.trainreportPage.charts().some((c) => c.built)"


def _post(pool: urllib3.PoolManager, url: str, body: Any) -> Any:
    response = pool.request(
        "POST", url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    assert response.status == 200, response.data[:300]
    return json.loads(response.data)


class Writer:
    """A series-suffix writer of one task (sequence numbers counted here)."""

    def __init__(self, pool: urllib3.PoolManager, base: str, task: str) -> None:
        self.pool, self.url = pool, f"{base}/v1/jobs/{JOB}/tasks/{task}"
        self.gen = _post(pool, self.url + "/writers", {})["writer_generation"]
        self.sequence = 0

    def send(self, series: dict[str, tuple[int, list[int], list[float]]]) -> None:
        self.sequence += 1
        body = {
            "writer_generation": self.gen,
            "sequence": self.sequence,
            "status": "running",
            "status_details": {"phase": "training"},
            "series": {
                n: {"offset": o, "steps": s, "epochs": [1] * len(s), "values": v}
                for n, (o, s, v) in series.items()
            },
        }
        _post(self.pool, self.url + "/updates", body)


def _first_chart(url: str) -> float:
    with Browser(timeout_seconds=120) as browser:
        started = time.perf_counter()
        browser.open(url)
        browser.wait_for(FIRST_CHART)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    args = parser.parse_args()
    scale = 100 if args.quick else 1
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp, urllib3.PoolManager() as pool:
        handle = start_in_thread(str(Path(tmp) / "bench.db"))
        base = handle.url
        page = f"{base}/jobs/{JOB}/tasks/"

        w = Writer(pool, base, "demo")
        steps = list(range(1, 601))
        w.send(
            {
                n: (0, steps, [1.0 / s for s in steps])
                for n in ("train_loss", "val_loss", "train_lr", "train_grad_norm")
            }
        )
        rows.append(
            (
                "first chart, demo run (4 series x 600 points)",
                f"{_first_chart(page + 'demo'):.2f} s",
            )
        )

        w = Writer(pool, base, "wide")
        steps = list(range(1, 101))
        n = 1000 // scale
        w.send(
            {
                f"layer{i // 10:02d}/m{i % 10}": (0, steps, [float(i + s) for s in steps])
                for i in range(n)
            }
        )
        rows.append(
            (
                f"first chart, {n:,}-metric run (x 100 points)",
                f"{_first_chart(page + 'wide'):.2f} s",
            )
        )

        w = Writer(pool, base, "long")
        total, chunk = 1_000_000 // scale, 50_000 // scale
        for start in range(0, total, chunk):
            s = list(range(start + 1, start + chunk + 1))
            w.send({"train_loss": (start, s, [1.0 + (x % 97) / 100 for x in s])})
        rows.append(
            (f"first chart, one {total:,}-point series", f"{_first_chart(page + 'long'):.2f} s")
        )

        w = Writer(pool, base, "live")
        names = [f"train_m{i}" for i in range(30)]
        length = 200
        steps = list(range(1, length + 1))
        w.send({m: (0, steps, [float(x) for x in steps]) for m in names})
        with Browser(timeout_seconds=120) as browser:
            browser.open(page + "live")
            browser.wait_for(FIRST_CHART)
            browser.evaluate(
                "window.__gaps = []; (() => { let last = performance.now();"
                " const tick = (t) => { window.__gaps.push(t - last); last = t;"
                " requestAnimationFrame(tick); }; requestAnimationFrame(tick); })()"
            )
            seconds = 2 if args.quick else 20
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                more = list(range(length + 1, length + 21))
                w.send({m: (length, more, [float(x) for x in more]) for m in names})
                length += 20
                browser.page.wait_for_timeout(500)
            gaps = sorted(browser.evaluate("window.__gaps"))
        p99 = gaps[int(len(gaps) * 0.99) - 1] if gaps else float("nan")
        rows.append(
            (
                f"frame time during live updates (30 series, {seconds} s)",
                f"median {statistics.median(gaps):.1f} ms, p99 {p99:.1f} ms, max {gaps[-1]:.1f} ms",
            )
        )
        handle.stop()
    print("| measurement | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
