"""A lean load generator for the reference server's ingest (docs/design.md#performance, figure 7).

Each thread plays one reporter: it opens a writer on its own task
(``POST .../writers``), then posts series-suffix updates of 50 steps x 14
series as fast as the server answers (``POST .../updates``, binary base64
columns as ``HttpSink`` sends them, uncompressed to keep the generator lean),
one request at a time on its own keep-alive connection, for a fixed time.

Run in separate processes (``report.py`` starts two), so the generator's GIL
is not the server's. Prints one JSON line: requests, errors, elapsed seconds
and every request's latency in milliseconds.

    python benchmarks/_loadgen.py --url http://127.0.0.1:8321 --threads 8 --seconds 5
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
import uuid
from array import array
from urllib.parse import urlsplit

import urllib3

SERIES = 14
STEPS_PER_UPDATE = 50


def _b64(column: array[int] | array[float]) -> str:
    return base64.b64encode(column.tobytes()).decode("ascii")


def update_body(generation: int, sequence: int, offset: int) -> bytes:
    """One suffix update: ``STEPS_PER_UPDATE`` points from ``offset`` on, for 14 series."""
    steps = array("q", range(offset + 1, offset + STEPS_PER_UPDATE + 1))
    epochs = array("i", [1] * STEPS_PER_UPDATE)
    steps_b64, epochs_b64 = _b64(steps), _b64(epochs)
    series = {
        f"train_m{i}": {
            "offset": offset,
            "steps": steps_b64,
            "epochs": epochs_b64,
            "values": _b64(array("d", [1.0 / (s + i) for s in steps])),
        }
        for i in range(SERIES)
    }
    step = offset + STEPS_PER_UPDATE
    return json.dumps(
        {
            "writer_generation": generation,
            "sequence": sequence,
            "status": "running",
            "status_details": {"phase": "training", "step": step, "train_m0": 1.0 / step},
            "series": series,
        },
        separators=(",", ":"),
    ).encode()


def _reporter(
    url: str, job_id: str, deadline: float, latencies: list[float], errors: list[int]
) -> None:
    parts = urlsplit(url)
    pool = urllib3.HTTPConnectionPool(
        parts.hostname or "127.0.0.1",
        parts.port,
        maxsize=1,
        retries=False,
        timeout=urllib3.Timeout(total=30.0),
    )
    task = f"/v1/jobs/{job_id}/tasks/train"
    headers = {"Content-Type": "application/json"}
    try:
        opened = pool.request("POST", task + "/writers", body=b"{}", headers=headers)
        generation = int(json.loads(opened.data)["writer_generation"])
    except Exception:  # the server is down: count it and stop this reporter
        errors.append(1)
        return
    sequence = 0
    mine: list[float] = []
    failed = 0
    while time.monotonic() < deadline:
        sequence += 1
        body = update_body(generation, sequence, (sequence - 1) * STEPS_PER_UPDATE)
        t0 = time.perf_counter()
        try:
            response = pool.request("POST", task + "/updates", body=body, headers=headers)
            ok = response.status == 200
        except urllib3.exceptions.HTTPError:
            ok = False
        mine.append((time.perf_counter() - t0) * 1000.0)
        if not ok:
            failed += 1
    pool.close()
    latencies.extend(mine)
    errors.append(failed)


def main(argv: list[str] | None = None) -> int:
    """Run ``--threads`` reporters for ``--seconds`` and print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--start-at",
        type=float,
        default=0.0,
        help="time.time() to begin at (synchronises processes)",
    )
    args = parser.parse_args(argv)
    wait = args.start_at - time.time()
    if wait > 0:
        threading.Event().wait(wait)
    deadline = time.monotonic() + args.seconds
    latencies: list[float] = []
    errors: list[int] = []
    prefix = f"load-{uuid.uuid4().hex[:10]}"
    threads = [
        threading.Thread(
            target=_reporter, args=(args.url, f"{prefix}-{i}", deadline, latencies, errors)
        )
        for i in range(args.threads)
    ]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    sys.stdout.write(
        json.dumps(
            {
                "requests": len(latencies),
                "errors": sum(errors),
                "elapsed_s": elapsed,
                "latencies_ms": latencies,
            }
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
