"""Reference server under load with a replica killed: SQLite (one server) vs PostgreSQL (two).

Drives R concurrent reporters, each a separate process running the real
``Reporter`` + ``HttpSink`` (2,000 steps x 14 series by default, a flush every
50 steps, so one send per 50 steps), through a random-choice load balancer
(``_balancer.py``, its own process) to:

- ``sqlite``: one ``trainreport serve`` on a SQLite file;
- ``postgresql``: two ``trainreport serve`` replicas on one PostgreSQL
  database (a throwaway cluster, ``tests/postgres.py``, default settings:
  ``fsync=on``).

Mid-run (once 40% of the updates are in) the first server is killed with
SIGKILL and restarted on the same port two seconds later; the clients' retry
takes over. One reporter in eight is a zombie: at step 1,000 a second attempt
of its task starts (a new process, the same job and task) and the old one,
released once the new one wrote, keeps sending and must be refused.

Checks, for every task: the stored task equals the final writer's
``snapshot()`` (every point stored exactly once, none lost), each series holds
steps 1..N once, and no zombie write was applied after the new attempt
opened. Reports updates/s, points/s, p50/p99 update latency (at the balancer)
and errors per backend, side by side.

    python benchmarks/bench_replicas.py                     # 64 reporters, both backends
    python benchmarks/bench_replicas.py --reporters 8 --steps 200 --backend postgresql

Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SERIES = 14


# -- one reporter (a child process) ------------------------------------------------------


def reporter_main(args: argparse.Namespace) -> int:
    """Report ``--steps`` steps of 14 series, flushing every ``--every`` steps; write the result."""
    from trainreport import Reporter, ReportingConfig  # noqa: PLC0415 - child only
    from trainreport.sinks._http._sink import HttpSink  # noqa: PLC0415

    config = ReportingConfig(
        min_report_interval_seconds=0.05,
        backoff_initial_seconds=0.05,
        backoff_max_seconds=1.0,
        heartbeat_seconds=30.0,
    )
    sink = HttpSink(args.url, args.job, connect_timeout_seconds=2.0, read_timeout_seconds=30.0)
    reporter = Reporter(sink, config, rank=0).start()
    reporter.report_training_start(max_steps=args.steps)
    hold = threading.Event()
    timeout = 120.0  # a zombie, once released, is refused: it waits no longer for its sends
    for step in range(1, args.steps + 1):
        metrics = {f"m{k:02d}": args.tag * (step + k / 100) for k in range(SERIES)}
        reporter.report_train_step(step=step, epoch=1 + (step - 1) // 1000, metrics=metrics)
        if step % args.every == 0:
            reporter.flush(timeout=timeout)
            if args.signal_file and step == args.every:
                Path(args.signal_file).touch()  # the new attempt has opened and written
            if args.wait_file and step == args.steps // 2:
                Path(args.wait_file + ".waiting").touch()  # the parent may start the new attempt
                deadline = time.monotonic() + 300
                while not Path(args.wait_file).exists() and time.monotonic() < deadline:
                    hold.wait(0.05)
                timeout = 2.0
    reporter.report_completed()
    delivered = reporter.close(timeout=timeout)
    stats = reporter.stats()
    result = {
        "delivered": delivered,
        "snapshot": reporter.snapshot(),
        "requests_failed": stats.requests_failed,
    }
    Path(args.out).write_text(json.dumps(result))
    return 0


# -- servers -----------------------------------------------------------------------------


class Servers:
    """One SQLite server, or two replicas on a PostgreSQL database; each restartable."""

    def __init__(self, backend: str, directory: Path, pg_url: str | None) -> None:
        from trainreport.server import start_subprocess  # noqa: PLC0415

        self._start = start_subprocess
        self.instance: Any = None
        if backend == "sqlite":
            self.target: str | Path = directory / "bench.db"
            count = 1
        else:
            if pg_url is None:
                self.instance = _from_tests("postgres").PostgresInstance()
                pg_url = self.instance.new_schema()
            self.target = pg_url
            count = 2
        self.handles = [self._start(self.target) for _ in range(count)]
        self.ports = [int(h.url.rsplit(":", 1)[1]) for h in self.handles]

    @property
    def urls(self) -> list[str]:
        return [h.url for h in self.handles]

    def kill(self, index: int) -> None:
        handle = self.handles[index]
        assert handle.pid is not None
        os.kill(handle.pid, signal.SIGKILL)
        handle.stop()

    def restart(self, index: int) -> None:
        self.handles[index] = self._start(self.target, port=self.ports[index])

    def close(self) -> None:
        for handle in self.handles:
            handle.stop()
        if self.instance is not None:
            self.instance.destroy()


@contextlib.contextmanager
def balancer(upstreams: list[str]) -> Iterator[str]:
    argv = [sys.executable, str(HERE / "_balancer.py")]
    for upstream in upstreams:
        argv += ["--upstream", upstream]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().split()
        yield f"http://127.0.0.1:{line[1]}"
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def _records(url: str) -> list[tuple[str, str, int, float]]:
    response = urllib3.request("GET", url + "/__stats", timeout=10.0)
    return [tuple(r) for r in json.loads(response.data)]


# -- one scenario --------------------------------------------------------------------------


def run_scenario(
    backend: str,
    *,
    reporters: int,
    steps: int,
    every: int = 50,
    kill: bool = True,
    pg_url: str | None = None,
    timeout_seconds: float = 1200.0,
) -> dict[str, Any]:
    """Run the load on one backend; check every task; return the figures.

    Raises:
        AssertionError: a point lost or duplicated, or fencing violated.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    zombies = max(1, reporters // 8)
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as temp:
        directory = Path(temp)
        servers = Servers(backend, directory, pg_url)
        try:
            with balancer(servers.urls) as url:

                def spawn(job: str, name: str, tag: int, **extra: str) -> subprocess.Popen[bytes]:
                    argv = [
                        sys.executable, __file__, "--reporter", "--url", url, "--job", job,
                        "--steps", str(steps), "--every", str(every), "--tag", str(tag),
                        "--out", str(directory / f"{name}.json"),
                    ]  # fmt: skip
                    for key, value in extra.items():
                        argv += [f"--{key.replace('_', '-')}", value]
                    with (directory / f"{name}.log").open("wb") as log:
                        return subprocess.Popen(argv, env=env, stderr=log)

                started = time.monotonic()
                children = {f"r{i}": spawn(f"bench-r{i}", f"r{i}", 1) for i in range(reporters)}
                for z in range(zombies):
                    children[f"z{z}"] = spawn(
                        f"bench-z{z}", f"z{z}", -1, wait_file=str(directory / f"z{z}.go")
                    )
                expected = (reporters + zombies) * (steps // every)
                poll = threading.Event()
                killed = False
                while not killed and time.monotonic() - started < timeout_seconds:
                    done = sum(1 for r in _records(url) if r[1] == "updates" and r[2] == 200)
                    if done >= 0.4 * expected:
                        for z in range(zombies):  # the old attempt must have opened first
                            waiting = directory / f"z{z}.go.waiting"
                            while (
                                not waiting.exists()
                                and time.monotonic() - started < timeout_seconds
                            ):
                                poll.wait(0.05)
                        if kill:
                            servers.kill(0)
                        for z in range(zombies):  # the new attempts, zombies still alive
                            children[f"n{z}"] = spawn(
                                f"bench-z{z}", f"n{z}", 1, signal_file=str(directory / f"z{z}.go")
                            )
                        if kill:
                            poll.wait(2.0)
                            servers.restart(0)
                        killed = True
                    poll.wait(0.2)
                for child in children.values():
                    child.wait(max(1.0, timeout_seconds - (time.monotonic() - started)))
                elapsed = time.monotonic() - started
                records = _records(url)
            results = {
                name: json.loads((directory / f"{name}.json").read_text()) for name in children
            }
            try:
                points = _check(servers.urls[-1], reporters, zombies, steps, results)
            except AssertionError:
                for log in sorted(directory.glob("*.log")):
                    sys.stderr.write(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
                raise
        finally:
            servers.close()
    updates = [r for r in records if r[1] == "updates"]
    latencies = sorted(r[3] * 1000 for r in updates if r[2] == 200)
    return {
        "backend": backend,
        "servers": 1 if backend == "sqlite" else 2,
        "reporters": reporters + 2 * zombies,
        "steps": steps,
        "elapsed_s": round(elapsed, 1),
        "updates_ok": len(latencies),
        "updates_per_s": round(len(latencies) / elapsed, 1),
        "points_per_s": round(points / elapsed),
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 1),
        "errors_5xx": sum(1 for r in records if r[2] >= 500),
        "refused_409": sum(1 for r in records if r[2] == 409),
        "points_stored": points,
    }


def _from_tests(name: str) -> Any:
    """The test suite's module ``name`` (a PostgreSQL it starts, its task helpers)."""
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    return importlib.import_module(name)


def _check(url: str, reporters: int, zombies: int, steps: int, results: dict[str, Any]) -> int:
    """Every task equals its final writer's snapshot, each series steps 1..N once."""
    without_updated_at = _from_tests("helpers").without_updated_at
    pool = urllib3.PoolManager(timeout=urllib3.Timeout(total=60.0))
    total = 0
    finals = [(f"bench-r{i}", f"r{i}") for i in range(reporters)]
    finals += [(f"bench-z{z}", f"n{z}") for z in range(zombies)]
    for job, name in finals:
        task = json.loads(pool.request("GET", f"{url}/v1/jobs/{job}/tasks/train").data)
        result = results[name]
        assert result["delivered"], f"{name}: close() did not deliver everything"
        assert without_updated_at(result["snapshot"]) == without_updated_at(task), name
        metrics = task["status_details"]["metrics"]
        assert len(metrics) == SERIES, name
        for series, stored in metrics.items():
            assert list(range(1, steps + 1)) == [p["step"] for p in stored], (name, series)
            total += len(stored)
    for z in range(zombies):  # the old attempt was refused once the new one took over
        assert not results[f"z{z}"]["delivered"], f"zombie z{z} delivered everything"
        values = [
            p["value"]
            for p in json.loads(pool.request("GET", f"{url}/v1/jobs/bench-z{z}/tasks/train").data)[
                "status_details"
            ]["metrics"]["train_m00"]
        ]
        steps_by_zombie = sum(1 for v in values if v < 0)
        assert steps_by_zombie <= steps // 2, "a zombie write landed after the new attempt"
    return total


def _table(rows: list[dict[str, Any]]) -> str:
    keys = [
        ("servers", "servers"), ("reporters", "reporters"), ("elapsed_s", "wall s"),
        ("updates_per_s", "updates/s"), ("points_per_s", "points/s"), ("p50_ms", "p50 ms"),
        ("p99_ms", "p99 ms"), ("errors_5xx", "5xx/502"), ("refused_409", "409 (zombies)"),
        ("points_stored", "points stored"),
    ]  # fmt: skip
    lines = ["| | " + " | ".join(row["backend"] for row in rows) + " |"]
    lines.append("|---|" + "---:|" * len(rows))
    for key, label in keys:
        lines.append(f"| {label} | " + " | ".join(str(row[key]) for row in rows) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reporter", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--tag", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--wait-file", help=argparse.SUPPRESS)
    parser.add_argument("--signal-file", help=argparse.SUPPRESS)
    parser.add_argument("--reporters", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--no-kill", action="store_true", help="keep every server up")
    args = parser.parse_args(argv)
    if args.reporter:
        return reporter_main(args)
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    rows = []
    for backend in backends:
        row = run_scenario(
            backend,
            reporters=args.reporters,
            steps=args.steps,
            every=args.every,
            kill=not args.no_kill,
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
