"""Operations: ``/healthz``, ``/readyz`` and Prometheus ``/metrics``, over real sockets.

Health checks are open and cheap; readiness reads the database; metrics come
from a registry per app (two servers in one process never mix their counts)
and sit behind the admin token when one is set.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from trainreport._wire._job_tokens import issue_job_token
from trainreport.server import ServerHandle
from trainreport.server._db._backend import open_backend
from trainreport.server._db._migrations import SCHEMA_VERSION

pytestmark = pytest.mark.both_backends

ADMIN = "ops-admin-token"
SECRET = b"operations-test-secret-0123456789abcdef"
JSON = {"Content-Type": "application/json"}


def _get(
    url: str, path: str, token: str | None = None, headers: dict[str, str] | None = None
) -> urllib3.BaseHTTPResponse:
    all_headers = {"Authorization": f"Bearer {token}"} if token else {}
    all_headers.update(headers or {})
    return urllib3.request("GET", url + path, headers=all_headers, timeout=20.0, retries=False)


def _send(url: str, method: str, path: str, payload: Any, token: str | None = None) -> int:
    headers = {**JSON, **({"Authorization": f"Bearer {token}"} if token else {})}
    response = urllib3.request(
        method,
        url + path,
        body=json.dumps(payload).encode(),
        headers=headers,
        timeout=20.0,
        retries=False,
    )
    return response.status


def _samples(url: str, token: str | None = None) -> dict[tuple[str, frozenset[Any]], float]:
    """``{(sample name, labels): value}`` of one scrape, parsed by prometheus_client's parser."""
    response = _get(url, "/metrics", token)
    assert 200 == response.status
    assert response.headers["Content-Type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.data.decode())
        for sample in family.samples
    }


def _requests(samples: dict[tuple[str, frozenset[Any]], float], **labels: str) -> float:
    return samples.get(("trainreport_http_requests_total", frozenset(labels.items())), 0.0)


def _write_run(url: str, job: str, points: int, token: str | None = None) -> None:
    task = f"/v1/jobs/{job}/tasks/train"
    response = urllib3.request(
        "POST", url + task + "/writers", body=b"{}", headers=JSON | _auth(token), retries=False
    )
    generation = json.loads(response.data)["writer_generation"]
    update = {
        "writer_generation": generation,
        "sequence": 1,
        "status": "running",
        "series": {
            "loss": {
                "offset": 0,
                "steps": list(range(points)),
                "epochs": [1] * points,
                "values": [0.5] * points,
            }
        },
    }
    assert 200 == _send(url, "POST", task + "/updates", update, token)
    assert 200 == _send(url, "POST", task + "/updates", update, token)  # a duplicate


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def test_healthz_and_readyz_answer_ok_without_a_token(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Open even on a server with tokens: probes carry no credentials."""
    handle = start_server(token=ADMIN, secret=SECRET)

    for path in ("/healthz", "/readyz"):
        response = _get(handle.url, path)
        assert (200, {"status": "ok"}) == (response.status, json.loads(response.data))


def test_readyz_is_503_when_the_schema_is_not_this_servers(server: ServerHandle) -> None:
    """Migrations not applied (another schema version): not ready, saying why; alive still."""
    backend = open_backend(server.db_path)
    with backend.write(None) as conn:
        conn.execute("DELETE FROM schema_version WHERE version = ?", (SCHEMA_VERSION,))
    backend.close()

    response = _get(server.url, "/readyz")

    assert 503 == response.status
    assert f"schema version {SCHEMA_VERSION - 1}" in json.loads(response.data)["reason"]
    assert response.headers["Retry-After"]
    assert 200 == _get(server.url, "/healthz").status


def test_health_checks_pass_through_the_host_rule(server: ServerHandle) -> None:
    """The browser defences apply to the new endpoints too: an unknown Host is 421."""
    for path in ("/healthz", "/readyz", "/metrics"):
        assert 421 == _get(server.url, path, headers={"Host": "evil.example"}).status


def test_metrics_count_requests_points_and_tasks(server: ServerHandle) -> None:
    """Requests by route template and status, points stored once, tasks by status."""
    job = f"m-{uuid.uuid4().hex[:8]}"
    _write_run(server.url, job, points=25)
    _send(server.url, "PATCH", f"/v1/jobs/{job}/tasks/done", {"status": "completed"})
    _send(server.url, "PATCH", f"/v1/jobs/{job}/tasks/bad", {"status": "nope"})
    _get(server.url, "/v1/nowhere")

    samples = _samples(server.url)

    updates = "/v1/jobs/{job_id}/tasks/{task_id}/updates"
    task = "/v1/jobs/{job_id}/tasks/{task_id}"
    assert 2 == _requests(samples, method="POST", route=updates, status="200")
    assert 1 == _requests(samples, method="PATCH", route=task, status="422")
    assert 1 == _requests(samples, method="GET", route="other", status="404")
    assert 25 == samples[("trainreport_points_stored_total", frozenset())]
    durations = "trainreport_update_duration_seconds_count"
    assert 2 == samples[(durations, frozenset({("route", updates)}))]
    assert 2 == samples[(durations, frozenset({("route", task)}))]
    assert 1 == samples[("trainreport_tasks", frozenset({("status", "running")}))]
    assert 1 == samples[("trainreport_tasks", frozenset({("status", "completed")}))]
    assert 1 == samples[("trainreport_active_tasks", frozenset())]
    assert not any(job in str(labels) for _name, labels in samples)


def test_metrics_count_refusals_by_the_browser_rules(server: ServerHandle) -> None:
    """A 421 from the Host rule never reaches a handler, and is counted all the same."""
    _get(server.url, "/v1/jobs", headers={"Host": "evil.example"})

    samples = _samples(server.url)

    assert 1 == _requests(samples, method="GET", route="/v1/jobs", status="421")


def test_metrics_count_database_errors(server: ServerHandle) -> None:
    """A failing database (a table gone) is a 500 to the client and a counted error."""
    job = f"e-{uuid.uuid4().hex[:8]}"
    backend = open_backend(server.db_path)
    with backend.write(None) as conn:
        conn.execute("DROP TABLE tasks")
    backend.close()

    assert 500 == _send(server.url, "PATCH", f"/v1/jobs/{job}/tasks/t", {"status": "running"})
    first = _samples(server.url)
    second = _samples(server.url)

    errors: tuple[str, frozenset[tuple[str, str]]] = (
        "trainreport_database_errors_total",
        frozenset(),
    )
    assert 1 == first[errors]  # the write
    assert 2 == second[errors]  # and the first scrape's task count
    assert ("trainreport_active_tasks", frozenset()) not in second


def test_two_servers_in_one_process_keep_their_own_metrics(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Each app has its own registry: writes to one never show in the other."""
    first, second = start_server(), start_server()
    _write_run(first.url, "only-first", points=7)

    assert 7 == _samples(first.url)[("trainreport_points_stored_total", frozenset())]
    assert 0 == _samples(second.url)[("trainreport_points_stored_total", frozenset())]


def test_metrics_need_the_admin_token_when_one_is_set(
    start_server: Callable[..., ServerHandle],
) -> None:
    """No token: 401; a job token: 403; the admin token: 200."""
    handle = start_server(token=ADMIN, secret=SECRET)

    assert 401 == _get(handle.url, "/metrics").status
    assert 403 == _get(handle.url, "/metrics", issue_job_token(SECRET, "j")).status
    assert 200 == _get(handle.url, "/metrics", ADMIN).status


def test_metrics_are_open_on_a_server_with_only_a_secret(
    start_server: Callable[..., ServerHandle],
) -> None:
    """No admin token to require: the metrics (which name no job) stay readable."""
    handle = start_server(secret=SECRET)

    assert 200 == _get(handle.url, "/metrics").status


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/healthz"),
        ("DELETE", "/readyz"),
        ("PUT", "/metrics"),
        ("GET", "/healthz/x"),
        ("GET", "/metrics?name=%ff"),
        ("GET", "/readyz?" + "x" * 4000),
    ],
)
def test_bad_requests_to_the_operations_endpoints_are_clean_4xx(
    server: ServerHandle, method: str, path: str
) -> None:
    """Other methods, extra segments, odd queries: 4xx JSON or the normal answer, never 500."""
    response = urllib3.request(
        method, server.url + path, headers=JSON, body=b"{}", timeout=20.0, retries=False
    )

    assert response.status < 500
