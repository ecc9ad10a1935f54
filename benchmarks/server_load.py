"""Reference server under load: two source trees side by side, back to back.

Starts ``trainreport serve`` from each ``--src`` tree in turn (a fresh
database each run, loopback only) and drives it with ``report.run_load``:
N concurrent reporters (threads of two ``_loadgen.py`` processes), each on
its own task and keep-alive connection, posting 50-step x 14-series updates as
fast as the server answers for ``--seconds``. The trees alternate run by run
(A, B, A, B, ...) so that both see the same machine; the table gives the
median of ``--pairs`` runs and the range. It also reports the server
process's CPU time per update. ``--profile DIR`` records each run with py-spy
(GIL-holding samples) when it is installed.

    git archive <old commit> src | tar -x -C /tmp/old
    python benchmarks/server_load.py --src /tmp/old/src --src src --reporters 16 64

Every loop is bounded (``--seconds`` a run); nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(src: str, reporters: int, seconds: float, profile: Path | None) -> dict[str, float]:
    """Start a server from ``src`` in a child process, load it, stop it; the figures."""
    sys.path[:0] = [src, str(HERE)]
    os.environ["PYTHONPATH"] = src
    from report import run_load  # noqa: PLC0415 - after sys.path points at the tree
    from trainreport.server import start_subprocess  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="server-load-") as directory:
        server = start_subprocess(Path(directory) / "load.db")
        assert server.pid is not None
        spy = None
        try:
            if profile is not None and shutil.which("py-spy"):
                spy = subprocess.Popen(
                    [
                        "py-spy", "record", "-p", str(server.pid), "--gil", "--threads",
                        "-f", "raw", "-r", "50", "-d", str(int(seconds) + 2),
                        "-o", str(profile),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            cpu_before = _cpu_seconds(server.pid)
            result = run_load(server.url, reporters, seconds)
            result["server_cpu_ms_per_update"] = (
                (_cpu_seconds(server.pid) - cpu_before) * 1e3 / max(result["requests"], 1)
            )
            if spy is not None:
                spy.wait(seconds + 60)
        finally:
            server.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the pairs and print one markdown table (and the raw runs as JSON lines)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", required=True, help="a tree's src directory")
    parser.add_argument("--reporters", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--profile", type=Path, help="write py-spy raw profiles here")
    args = parser.parse_args(argv)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for reporters in args.reporters:
        for i in range(args.pairs):
            for src in args.src:
                out = None
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    out = args.profile / f"{Path(src).resolve().parent.name}-{reporters}-{i}.txt"
                child = subprocess.run(
                    [sys.executable, __file__, "--one", src, str(reporters), str(args.seconds)]
                    + ([str(out)] if out else []),
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=args.seconds + 300,
                )
                result = json.loads(child.stdout.strip().splitlines()[-1])
                print(json.dumps({"src": src, **result}), file=sys.stderr)
                runs.setdefault((src, reporters), []).append(result)
    print(
        "| tree | reporters | updates/s | p50 latency (ms) | p99 latency (ms) "
        "| server CPU per update (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for (src, reporters), results in runs.items():

        def cell(key: str, results: list[dict[str, Any]] = results) -> str:
            values = [r[key] for r in results]
            return f"{statistics.median(values):,.0f} ({min(values):,.0f} to {max(values):,.0f})"

        cpu = statistics.median(r["server_cpu_ms_per_update"] for r in results)
        print(
            f"| {src} | {reporters} | {cell('per_second')} | {cell('p50_ms')} "
            f"| {cell('p99_ms')} | {cpu:.1f} |"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        profile = Path(sys.argv[5]) if len(sys.argv) > 5 else None
        figures = one_run(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), profile)
        print(json.dumps(figures))
        raise SystemExit(0)
    raise SystemExit(main())
