"""Bytes on the wire over a run: the series-suffix extension against full-state sends.

docs/design.md#performance defines the figure: request bytes over the run (bodies as sent, after
compression, plus headers) divided by the uncompressed size of the final stored
state in the ``GET`` shape; the same figure without compression beside it.

Workload: 20,000 steps, 14 series (``benchmarks/_workload.py``), one send per 50
steps (the scaled interval of docs/design.md#performance: a 10 ms interval at 0.2 ms a step).

Two measurements:

* a real run: ``Reporter`` -> ``HttpSink`` -> the reference server in a separate
  process, sends forced every 50 steps with ``flush()``; bytes from
  ``stats().bytes_sent`` (bodies as sent after gzip, plus request line and
  headers as the sink counts them) and the final ``GET`` body;
* the exact body sizes of the same sends, computed with the engine's own
  encoders on this thread (no network), with and without gzip, for the
  extension and for full-state ``PATCH`` bodies (whose size grows with the
  square of the run; each point's encoding is measured once and summed).

Run: ``python benchmarks/bench_bytes.py [--steps N]``; ``pytest benchmarks/bench_bytes.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import urllib3

from _workload import metrics_for
from trainreport import HttpSink, Reporter, ReportingConfig
from trainreport._record._recorder import Recorder
from trainreport._record._reports import train
from trainreport._reporting_config import ReportingConfig as _Config
from trainreport._wire._payloads import (
    StoredState,
    encode_details,
    encode_points,
    encode_suffix_body,
)
from trainreport.sinks._http._gzip import GZIP_MIN_BYTES, compressor

SEND_EVERY = 50
HEADER_BYTES = 350  # request line + headers per request, as HttpSink counts them (measured below)


def simulate(steps: int) -> dict[str, float]:
    """Exact body bytes of every send of a run, both modes, with and without gzip."""
    compress = compressor()
    recorder = Recorder(_Config())
    recorder.start_attempt()
    recorder.seed(StoredState(series={}))
    suffix_raw = suffix_gz = 0
    full_raw = 0
    sends = 0
    point_bytes = 0  # running size of every series' points in the baseline encoding
    for start in range(1, steps + 1, SEND_EVERY):
        for step in range(start, min(start + SEND_EVERY, steps + 1)):
            recorder.apply(train(0.0, step, 1, metrics_for(step)))
        build = recorder.build_update(0, wall="2026-11-29T00:00:00Z", full_state=False)
        update = build.update
        body = encode_suffix_body(update, writer_generation=1, sequence=sends + 1)
        suffix_raw += len(body)
        # as HttpSink sends it: gzip above the threshold, with the process's compressor
        suffix_gz += len(compress(body)) if len(body) > GZIP_MIN_BYTES else len(body)
        assert update.series is not None
        point_bytes += sum(len(encode_points(s)) - 2 + 1 for s in update.series)
        # the full-state PATCH at this send: details + every series' points so far
        names = sum(len(name) + 4 for name in recorder._record.store.series)
        full_raw += len(encode_details(update.status_details)) + point_bytes + names + 60
        recorder.on_delivered(0, build, None)
        sends += 1
    return {
        "sends": sends,
        "suffix_raw": suffix_raw,
        "suffix_gzip": suffix_gz,
        "full_raw": full_raw,
    }


def real_run(steps: int) -> dict[str, float]:
    """A real run through HttpSink to the reference server in another process."""
    from trainreport.server import start_subprocess  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp, start_subprocess(Path(tmp) / "b.db") as server:
        sink = HttpSink(server.url, "bytes", "train")
        config = ReportingConfig(min_report_interval_seconds=3600.0, heartbeat_seconds=3600.0)
        reporter = Reporter(sink, config, rank=0).start()
        for step in range(1, steps + 1):
            reporter.report_train_step(step=step, epoch=1, metrics=metrics_for(step))
            if step % SEND_EVERY == 0:
                reporter.flush(timeout=60)
        assert reporter.close(timeout=60)
        stats = reporter.stats()
        response = urllib3.request("GET", f"{server.url}/v1/jobs/bytes/tasks/train", timeout=120.0)
        return {
            "bytes_sent": stats.bytes_sent,
            "requests": stats.requests_sent,
            "final_state": len(response.data),
        }


def measure(steps: int) -> dict[str, Any]:
    """Both measurements and the docs/design.md#performance ratios."""
    real = real_run(steps)
    sim = simulate(steps)
    state = real["final_state"]
    headers = sim["sends"] * HEADER_BYTES
    return {
        "steps": steps,
        "final_state_bytes": state,
        "real_wire_ratio": real["bytes_sent"] / state,
        "suffix_gzip_ratio": (sim["suffix_gzip"] + headers) / state,
        "suffix_raw_ratio": (sim["suffix_raw"] + headers) / state,
        "full_raw_ratio": (sim["full_raw"] + headers) / state,
        "real": real,
        "simulated": sim,
    }


def test_bytes_on_the_wire(benchmark: Any) -> None:
    """Bytes ratio of a short run (the figure is printed by main())."""
    result = benchmark.pedantic(measure, kwargs={"steps": 1_000}, rounds=1)
    benchmark.extra_info.update({k: v for k, v in result.items() if isinstance(v, float)})


def main(argv: list[str] | None = None) -> int:
    """Print the bytes table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args(argv)
    r = measure(args.steps)
    print(
        f"{r['steps']} steps, 14 series, one send per {SEND_EVERY} steps; final stored state "
        f"(GET, uncompressed): {r['final_state_bytes']:,} bytes\n"
    )
    print("| design | bytes on the wire / final state | target |")
    print("|---|---|---|")
    print(
        f"| extension, real run (HttpSink, gzip, headers) | {r['real_wire_ratio']:.3f}x | < 1.5x |"
    )
    print(f"| extension, bodies + headers, gzip | {r['suffix_gzip_ratio']:.3f}x | < 1.5x |")
    print(f"| extension, bodies + headers, no compression | {r['suffix_raw_ratio']:.3f}x | |")
    print(f"| full state (baseline PATCH), no compression | {r['full_raw_ratio']:.1f}x | |")
    print(f"\nreal run: {r['real']['requests']} requests, {r['real']['bytes_sent']:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
