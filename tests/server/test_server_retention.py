"""Retention over HTTP: ``DELETE /v1/jobs/{job}`` and ``trainreport serve --retain-days``.

Both backends. The storage rules behind them (the race with a writer, bounded
batches) are pinned in ``test_server_storage.py``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3

from conftest import opened_writer
from trainreport import cli
from trainreport._wire._job_tokens import issue_job_token
from trainreport.server import ServerHandle
from trainreport.server._db._database import Database
from trainreport.server._wire import SeriesPoints, TaskPatch, TaskUpdate

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(120)]

ADMIN = "admin-s3cret-token"
SECRET = b"0123456789abcdef0123456789abcdef-server-secret"


def call(url: str, method: str, path: str, token: str | None = None, body: Any = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    response = urllib3.request(method, url + path, body=data, headers=headers, timeout=30.0)
    return response.status, json.loads(response.data) if response.data else None


@pytest.fixture
def server(start_server: Callable[..., ServerHandle]) -> ServerHandle:
    return start_server(token=ADMIN, secret=SECRET)


def run(url: str, job: str, token: str, points: int) -> int:
    """A writer's run: open, one update of ``points`` points, completed. Its generation."""
    task = f"/v1/jobs/{job}/tasks/t"
    generation: int = call(url, "POST", task + "/writers", token, {})[1]["writer_generation"]
    steps = list(range(1, points + 1))
    suffix = {"offset": 0, "steps": steps, "epochs": [1] * points, "values": [0.5] * points}
    body = {"writer_generation": generation, "sequence": 1, "status": "completed"}
    assert (
        200 == call(url, "POST", task + "/updates", token, {**body, "series": {"loss": suffix}})[0]
    )
    return generation


def test_delete_removes_a_job_whole_and_fences_its_writer(server: ServerHandle) -> None:
    """The job, its tasks and curves go at once; the writer's next update is stale_writer."""
    job = f"del-{uuid.uuid4().hex[:8]}"
    generation = run(server.url, job, ADMIN, 30)

    status, body = call(server.url, "DELETE", f"/v1/jobs/{job}", ADMIN)

    assert (200, {"job_id": job, "deleted": True}) == (status, body)
    assert 404 == call(server.url, "GET", f"/v1/jobs/{job}", ADMIN)[0]
    assert 404 == call(server.url, "GET", f"/v1/jobs/{job}/tasks/t", ADMIN)[0]
    assert job not in [j["job_id"] for j in call(server.url, "GET", "/v1/jobs", ADMIN)[1]["jobs"]]
    late = {"writer_generation": generation, "sequence": 2, "status": "running"}
    status, body = call(server.url, "POST", f"/v1/jobs/{job}/tasks/t/updates", ADMIN, late)
    assert (409, "stale_writer") == (status, body["error"])


def test_delete_needs_the_admin_token(server: ServerHandle) -> None:
    """No token: 401. The job's own token: 403. Nothing is deleted either way."""
    job = f"del-{uuid.uuid4().hex[:8]}"
    run(server.url, job, ADMIN, 5)

    assert 401 == call(server.url, "DELETE", f"/v1/jobs/{job}")[0]
    status, body = call(server.url, "DELETE", f"/v1/jobs/{job}", issue_job_token(SECRET, job))
    assert (403, "forbidden") == (status, body["error"])
    assert 200 == call(server.url, "GET", f"/v1/jobs/{job}/tasks/t", ADMIN)[0]


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/v1/jobs/no-such-job", 404, "not_found"),
        ("/v1/jobs/bad%20id", 400, "invalid_id"),
        ("/v1/jobs/" + "x" * 200, 400, "invalid_id"),
    ],
)
def test_delete_of_a_missing_job_or_a_bad_id_is_refused(
    server: ServerHandle, path: str, status: int, error: str
) -> None:
    """404 for a job that does not exist, 400 for an id of the wrong shape."""
    reply = call(server.url, "DELETE", path, ADMIN)
    assert (status, error) == (reply[0], reply[1]["error"])


def test_delete_without_a_json_content_type_is_415(server: ServerHandle) -> None:
    """DELETE changes state: the browser rule (JSON only) applies as to every write."""
    job = f"del-{uuid.uuid4().hex[:8]}"
    run(server.url, job, ADMIN, 5)
    response = urllib3.request(
        "DELETE", f"{server.url}/v1/jobs/{job}", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert 415 == response.status
    assert 200 == call(server.url, "GET", f"/v1/jobs/{job}", ADMIN)[0]


def test_the_points_of_a_deleted_job_are_purged_in_the_background(server: ServerHandle) -> None:
    """DELETE answers at once; the server's retention worker then removes the points."""
    job = f"del-{uuid.uuid4().hex[:8]}"
    run(server.url, job, ADMIN, 200)

    assert 200 == call(server.url, "DELETE", f"/v1/jobs/{job}", ADMIN)[0]

    db = Database(server.db_path)
    try:
        deadline = time.monotonic() + 30
        left = -1
        while time.monotonic() < deadline:
            with db.backend.read() as conn:
                left = conn.execute(
                    "SELECT COUNT(*) FROM points WHERE job_id = ?", (job,)
                ).fetchone()[0]
            if left == 0:
                break
            threading.Event().wait(0.05)
        assert 0 == left
    finally:
        db.close()


def test_serve_with_retain_days_removes_old_finished_jobs(
    database_target: str | Path, start_server: Callable[..., ServerHandle]
) -> None:
    """A server started with retain_days deletes a finished job last written 40 days ago
    and keeps a running one of the same age and a finished one of yesterday."""
    db = Database(database_target)
    for job, status, when in (
        ("old-done", "completed", "2026-01-01T00:00:00.000Z"),
        ("old-running", "running", "2026-01-01T00:00:00.000Z"),
        ("recent-done", "completed", "2026-02-09T00:00:00.000Z"),
    ):
        generation = opened_writer(db, job, "t").generation
        update = TaskUpdate(
            writer_generation=generation,
            sequence=1,
            status=status,
            details={},
            series=(SeriesPoints("loss", 0, [1, 2], [1, 1], [0.5, 0.4]),),
        )
        db.tasks.apply_update(job, "t", update, now=when)
        db.tasks.patch_task(job, "t", TaskPatch(status=status, details={}, metrics=None), now=when)
    db.close()
    now = time.mktime(time.strptime("2026-02-10", "%Y-%m-%d")) - time.timezone

    server = start_server(
        database_target, retain_days=30, retention_interval_seconds=0.05, clock=lambda: now
    )

    deadline = time.monotonic() + 30
    while call(server.url, "GET", "/v1/jobs/old-done")[0] != 404:
        assert time.monotonic() < deadline, "retention did not run"
        threading.Event().wait(0.05)
    assert 200 == call(server.url, "GET", "/v1/jobs/old-running")[0]
    assert 200 == call(server.url, "GET", "/v1/jobs/recent-done")[0]


def test_the_cli_reads_the_retention_flags() -> None:
    """--retain-days N (days, positive) and --retention-interval SECONDS."""
    args = cli.build_parser().parse_args(
        ["serve", "--retain-days", "14", "--retention-interval", "60"]
    )
    assert (14.0, 60.0) == (args.retain_days, args.retention_interval)
    assert cli.build_parser().parse_args(["serve"]).retain_days is None
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--retain-days", "0"])
