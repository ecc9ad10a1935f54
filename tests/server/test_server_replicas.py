"""Several ``trainreport serve`` processes on one PostgreSQL database, and its failures.

Real server processes (uvicorn subprocesses), a real PostgreSQL cluster
(``tests/postgres.py``), real clients; nothing mocked. A test that stops
PostgreSQL or cuts its connections gets a cluster of its own.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import urllib3

from helpers import without_updated_at
from trainreport import Reporter, ReportingConfig
from trainreport.server import ServerHandle, start_in_thread
from trainreport.sinks._http._sink import HttpSink

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


class Api:
    """JSON over one keep-alive pool; ``call`` returns ``(status, body, headers)``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=30.0))

    def call(self, method: str, path: str, payload: Any = None) -> tuple[int, Any, Any]:
        headers = {"Content-Type": "application/json"} if method != "GET" else {}
        body = json.dumps(payload).encode() if payload is not None else None
        response = self.pool.request(method, self.url + path, body=body, headers=headers)
        is_json = response.headers.get("content-type", "").startswith("application/json")
        return response.status, json.loads(response.data) if is_json else None, response.headers


def update(generation: int, sequence: int, offset: int, values: list[float]) -> dict[str, Any]:
    steps = list(range(offset + 1, offset + len(values) + 1))
    return {
        "writer_generation": generation,
        "sequence": sequence,
        "status": "running",
        "series": {
            "loss": {"offset": offset, "steps": steps, "epochs": [1] * len(steps), "values": values}
        },
    }


@pytest.fixture
def pg_url(postgres_instance: Any) -> str:
    """A fresh database (schema) on the session's PostgreSQL cluster."""
    url: str = postgres_instance.new_schema()
    return url


@pytest.fixture
def replicas(
    pg_url: str, start_server_process: Callable[..., ServerHandle]
) -> tuple[ServerHandle, ServerHandle]:
    """Two ``trainreport serve`` processes on one PostgreSQL database."""
    return start_server_process(pg_url), start_server_process(pg_url)


def test_the_same_suffix_sent_through_both_replicas_at_once_is_stored_once(
    replicas: tuple[ServerHandle, ServerHandle],
) -> None:
    """A client retrying through the other replica while the first still works: 40 updates,
    each posted to both replicas at the same moment; one applies it, the other answers
    duplicate, and every point is stored once."""
    a, b = Api(replicas[0].url), Api(replicas[1].url)
    task = f"/v1/jobs/j-{uuid.uuid4().hex[:8]}/tasks/train"
    generation = a.call("POST", task + "/writers", {})[1]["writer_generation"]
    barrier = threading.Barrier(2)

    def post(api: Api, body: dict[str, Any]) -> tuple[int, Any, Any]:
        barrier.wait(timeout=30)
        return api.call("POST", task + "/updates", body)

    with ThreadPoolExecutor(2) as pool:
        for sequence in range(1, 41):
            body = update(generation, sequence, (sequence - 1) * 5, [float(sequence)] * 5)
            replies = list(pool.map(post, (a, b), (body, body)))
            assert [200, 200] == [status for status, _, _ in replies]
            assert [False, True] == sorted(bool(r[1].get("duplicate")) for r in replies)

    stored = b.call("GET", task)[1]["status_details"]["metrics"]["loss"]
    assert [(s, float(1 + (s - 1) // 5)) for s in range(1, 201)] == [
        (p["step"], p["value"]) for p in stored
    ]


def test_a_zombie_on_replica_a_cannot_overwrite_a_newer_attempt_on_replica_b(
    replicas: tuple[ServerHandle, ServerHandle],
) -> None:
    """Old attempt via A, new attempt via B: A refuses the old one from then on, and the
    task holds the new attempt's curve whatever replica is asked."""
    a, b = Api(replicas[0].url), Api(replicas[1].url)
    task = f"/v1/jobs/j-{uuid.uuid4().hex[:8]}/tasks/train"
    old = a.call("POST", task + "/writers", {})[1]["writer_generation"]
    assert 200 == a.call("POST", task + "/updates", update(old, 1, 0, [-1.0] * 10))[0]

    opened = b.call("POST", task + "/writers", {})[1]
    new = opened["writer_generation"]
    assert {"loss": 10} == opened["series_lengths"]
    assert 200 == b.call("POST", task + "/updates", update(new, 1, 0, [7.0] * 20))[0]
    status, body, _ = a.call("POST", task + "/updates", update(old, 2, 10, [-1.0] * 30))

    assert (409, "stale_writer", new) == (
        status,
        body["error"],
        body["details"]["writer_generation"] if "details" in body else body["writer_generation"],
    )
    for api in (a, b):
        values = [p["value"] for p in api.call("GET", task)[1]["status_details"]["metrics"]["loss"]]
        assert [7.0] * 20 == values


def test_a_small_load_through_two_replicas_with_one_killed_loses_nothing(pg_url: str) -> None:
    """benchmarks/bench_replicas.py, small: 8 reporters x 200 steps x 14 series and a zombie
    pair, random replica per request, replica A killed -9 and restarted mid-run."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    run_scenario = importlib.import_module("bench_replicas").run_scenario  # not a package

    figures: dict[str, Any] = run_scenario("postgresql", reporters=8, steps=200, pg_url=pg_url)

    assert 9 * 200 * 14 == figures["points_stored"]  # 8 tasks and the zombie pair's one
    assert figures["refused_409"] >= 1  # the zombie was refused


# -- failures -----------------------------------------------------------------------------


def test_an_unreachable_postgres_url_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    """Nothing listens there: one line on stderr naming the URL without its password."""
    import socket  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://trainer:hunter2-secret@127.0.0.1:{port}/runs"
    result = subprocess.run(
        [sys.executable, "-m", "trainreport.cli", "serve", "--port", "0", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert 2 == result.returncode
    lines = result.stderr.strip().splitlines()
    assert 1 == len(lines), result.stderr
    assert lines[0].startswith("trainreport serve: cannot connect to PostgreSQL at ")
    assert f"postgresql://trainer:***@127.0.0.1:{port}/runs" in lines[0]
    assert "hunter2" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    """A PostgreSQL cluster this test may stop and restart."""
    from postgres import PostgresInstance  # noqa: PLC0415

    instance = PostgresInstance({"fsync": "off"})
    yield instance
    instance.destroy()


CONFIG = ReportingConfig(
    min_report_interval_seconds=0.02,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.5,
    heartbeat_seconds=30.0,
)


def _train(reporter: Reporter, steps: range) -> None:
    for step in steps:
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})


def test_a_database_that_goes_away_mid_run_is_503_and_nothing_acknowledged_is_lost(
    own_postgres: Any,
) -> None:
    """PostgreSQL stops while a run reports: the server answers 503 with Retry-After, the
    reporter retries, PostgreSQL comes back, and the task equals the reporter's record."""
    with start_in_thread(own_postgres.url) as server:
        api = Api(server.url)
        reporter = Reporter(
            HttpSink(server.url, "outage", read_timeout_seconds=10.0), CONFIG, rank=0
        ).start()
        _train(reporter, range(1, 51))
        assert reporter.flush(timeout=30)

        own_postgres.stop("fast")
        _train(reporter, range(51, 101))
        status, body, headers = api.call("GET", "/v1/jobs/outage/tasks/train")
        assert (503, "database_unavailable", "1") == (
            status,
            body["error"],
            headers.get("retry-after"),
        )
        status, body, headers = api.call("GET", "/readyz")
        assert (503, "unavailable") == (status, body["status"])
        assert "PostgreSQL at postgresql://postgres@127.0.0.1" in body["reason"]
        assert not reporter.flush(timeout=0.5)  # held, not dropped
        own_postgres.start()

        # ready again: at most one request meets a connection that died with the restart
        assert 200 == api.call("GET", "/readyz")[0] or 200 == api.call("GET", "/readyz")[0]
        _train(reporter, range(101, 151))
        assert reporter.close(timeout=60)
        stored = api.call("GET", "/v1/jobs/outage/tasks/train")[1]
        assert without_updated_at(reporter.snapshot()) == without_updated_at(stored)
        assert list(range(1, 151)) == [
            p["step"] for p in stored["status_details"]["metrics"]["train_loss"]
        ]


def test_connections_cut_by_the_database_are_replaced_without_losing_a_point(
    own_postgres: Any,
) -> None:
    """pg_terminate_backend on every server connection, twice during a run: the requests
    caught by it get 503 and are retried; the pool reconnects; nothing is lost."""
    import psycopg  # noqa: PLC0415

    with start_in_thread(own_postgres.url) as server:
        reporter = Reporter(HttpSink(server.url, "cut"), CONFIG, rank=0).start()
        for round_ in range(3):
            _train(reporter, range(1 + 100 * round_, 101 + 100 * round_))
            with psycopg.connect(own_postgres.url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'trainreport-server'"
                )
        assert reporter.close(timeout=60)
        stored = Api(server.url).call("GET", "/v1/jobs/cut/tasks/train")[1]
        assert without_updated_at(reporter.snapshot()) == without_updated_at(stored)
        assert 300 == len(stored["status_details"]["metrics"]["train_loss"])
