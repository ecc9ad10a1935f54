"""Who may write what: the admin token, per-job tokens from a server secret, over real sockets.

A job token (``trainreport token JOB --secret-file F``) reads and writes its
own job only; the admin token reads and writes everything and cancels. Every
refusal is a JSON 401 or 403 before any body is read, so nothing is written.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from hypothesis import given
from hypothesis import strategies as st

from trainreport import HttpSink, Reporter, ReportingConfig, cli
from trainreport._wire._job_tokens import (
    TokenRefusedError,
    issue_job_token,
    read_secret_file,
    verify_job_token,
)
from trainreport.server import ServerHandle
from trainreport.server._auth import Access
from trainreport.server._routes import ENDPOINTS

ADMIN = "admin-s3cret-token"
SECRET = b"0123456789abcdef0123456789abcdef-server-secret"
OTHER_SECRET = b"fedcba9876543210fedcba9876543210-other-secret"
NOW = 1_800_000_000.0


def _call(
    url: str, method: str, path: str, token: str | None, payload: Any = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    body = None
    if method not in ("GET", "HEAD"):
        headers["Content-Type"] = "application/json"
        body = json.dumps(payload if payload is not None else {}).encode()
    response = urllib3.request(
        method, url + path, body=body, headers=headers, timeout=20.0, retries=False
    )
    is_json = response.headers.get("content-type", "").startswith("application/json")
    return response.status, json.loads(response.data) if is_json else response.data


@pytest.fixture
def server(start_server: Callable[..., ServerHandle]) -> ServerHandle:
    """A server with an admin token and a secret for job tokens."""
    return start_server(token=ADMIN, secret=SECRET)


@pytest.fixture
def job() -> str:
    return f"job-{uuid.uuid4().hex[:10]}"


# -- the token format (pure) -------------------------------------------------------------


def test_a_job_token_verifies_to_its_job_and_expiry() -> None:
    """An issued token names its job and expiry; the server needs nothing stored to check it."""
    token = issue_job_token(SECRET, "job.1-a_b", expires_at=int(NOW) + 60)

    verified = verify_job_token(SECRET, token, now=NOW)

    assert ("job.1-a_b", int(NOW) + 60) == (verified.job_id, verified.expires_at)
    assert token.startswith("trj1.")


def test_a_token_without_expiry_never_expires() -> None:
    """``expires`` 0 means never."""
    token = issue_job_token(SECRET, "j")

    assert verify_job_token(SECRET, token, now=1e11).expires_at is None


def _tampered(token: str, field: int, value: str) -> str:
    parts = token.split(".")
    parts[field] = value
    return ".".join(parts)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda t: _tampered(t, 1, issue_job_token(SECRET, "other").split(".")[1]), "secret"),
        (lambda t: _tampered(t, 2, str(int(NOW) + 10**6)), "secret"),
        (lambda t: _tampered(t, 3, "A" * 43), "secret"),
        (lambda t: issue_job_token(OTHER_SECRET, "j", expires_at=int(NOW) + 60), "secret"),
        (lambda t: issue_job_token(SECRET, "j", expires_at=int(NOW) - 1), "expired"),
        (lambda t: t + ".x", "malformed"),
        (lambda t: t.replace("trj1", "trj2"), "malformed"),
        (lambda t: _tampered(t, 2, "0060"), "malformed"),
        (lambda t: _tampered(t, 1, "!!"), "malformed"),
        (lambda t: _tampered(t, 3, "A" * 42), "malformed"),
        (lambda t: _tampered(t, 1, "Lg"), "malformed"),  # "." is not a job id
    ],
)
def test_a_tampered_wrong_or_expired_token_is_refused_saying_why(
    make: Callable[[str], str], reason: str
) -> None:
    """Changing the job, the expiry or the signature, another secret, or time: refused."""
    token = make(issue_job_token(SECRET, "j", expires_at=int(NOW) + 60))

    with pytest.raises(TokenRefusedError) as refused:
        verify_job_token(SECRET, token, now=NOW)

    assert reason in str(refused.value)
    assert token not in str(refused.value)


@given(st.text(max_size=300))
def test_any_text_verifies_or_is_refused_never_crashes(text: str) -> None:
    """Whatever a client sends as a token, verification refuses it cleanly."""
    with pytest.raises(TokenRefusedError):
        verify_job_token(SECRET, text, now=NOW)


def test_a_short_secret_is_refused(tmp_path: Path) -> None:
    """A secret under 32 bytes cannot issue or verify tokens (it could be guessed)."""
    short = tmp_path / "secret"
    short.write_text("  too-short \n")

    with pytest.raises(ValueError, match="at least 32"):
        read_secret_file(short)
    with pytest.raises(ValueError, match="at least 32"):
        issue_job_token(b"x" * 31, "j")


# -- the server --------------------------------------------------------------------------


def test_a_job_token_reads_and_writes_its_own_job(server: ServerHandle, job: str) -> None:
    """PATCH, writers, updates, GET task, series, job and PUT all work with the job's token."""
    token = issue_job_token(SECRET, job)
    task = f"/v1/jobs/{job}/tasks/train"

    assert 200 == _call(server.url, "PATCH", task, token, {"status": "running"})[0]
    opened = _call(server.url, "POST", task + "/writers", token, {})[1]
    update = {
        "writer_generation": opened["writer_generation"],
        "sequence": 1,
        "series": {"loss": {"offset": 0, "steps": [1], "epochs": [1], "values": [0.5]}},
    }
    assert 200 == _call(server.url, "POST", task + "/updates", token, update)[0]
    assert 200 == _call(server.url, "GET", task, token)[0]
    assert 200 == _call(server.url, "GET", task + "/series", token)[0]
    assert 200 == _call(server.url, "GET", f"/v1/jobs/{job}", token)[0]
    assert 200 == _call(server.url, "PUT", f"/v1/jobs/{job}", token)[0]


def _job_paths(job: str) -> list[tuple[str, str, Any]]:
    """Every endpoint that names a job, with a valid body where it takes one."""
    bodies = {
        "TaskPatch": {"status": "running"},
        "TaskUpdate": {"writer_generation": 1, "sequence": 1},
        "WriterOpen": {},
    }
    return [
        (
            e.method,
            e.path.replace("{job_id}", job).replace("{task_id}", "train"),
            bodies.get(e.request or ""),
        )
        for e in ENDPOINTS
        if "{job_id}" in e.path
    ]


def test_every_endpoint_of_a_job_refuses_another_jobs_token_and_writes_nothing(
    server: ServerHandle, job: str
) -> None:
    """403 with a JSON body naming both jobs, on every route with a job id; nothing stored."""
    foreign = issue_job_token(SECRET, "someone-else")
    answers = [
        (method, path, *_call(server.url, method, path, foreign, body))
        for method, path, body in _job_paths(job)
    ]

    assert [] == [a for a in answers if a[2] != 403 or a[3]["error"] != "forbidden"]
    assert all("someone-else" in a[3]["message"] for a in answers)
    assert 404 == _call(server.url, "GET", f"/v1/jobs/{job}", ADMIN)[0]


def test_the_route_table_declares_an_access_rule_for_every_endpoint() -> None:
    """A route naming a job is job-scoped or admin-only, never open."""
    job_routes = [e for e in ENDPOINTS if "{job_id}" in e.path]

    assert job_routes
    assert {Access.JOB, Access.ADMIN} >= {e.access for e in job_routes}


def test_only_the_admin_token_cancels(server: ServerHandle, job: str) -> None:
    """A job token may not cancel even its own job (403); the admin token may."""
    token = issue_job_token(SECRET, job)
    _call(server.url, "PUT", f"/v1/jobs/{job}", token)

    status, body = _call(server.url, "POST", f"/v1/jobs/{job}/cancel", token)

    assert (403, "forbidden") == (status, body["error"])
    assert "admin token" in body["message"]
    assert not _call(server.url, "GET", f"/v1/jobs/{job}", ADMIN)[1]["cancel_requested"]
    assert 200 == _call(server.url, "POST", f"/v1/jobs/{job}/cancel", ADMIN)[0]


def test_a_job_token_lists_only_its_own_job(server: ServerHandle, job: str) -> None:
    """GET /v1/jobs with a job token shows that job alone; the admin token shows all."""
    for name in (job, job + "-b", job + "-c"):
        _call(server.url, "PUT", f"/v1/jobs/{name}", ADMIN)

    own = _call(server.url, "GET", "/v1/jobs", issue_job_token(SECRET, job))[1]["jobs"]
    missing = _call(server.url, "GET", "/v1/jobs", issue_job_token(SECRET, job + "-z"))[1]
    every = _call(server.url, "GET", "/v1/jobs", ADMIN)[1]["jobs"]

    assert [job] == [j["job_id"] for j in own]
    assert {"jobs": []} == missing
    assert {job, job + "-b", job + "-c"} <= {j["job_id"] for j in every}


def test_an_expired_job_token_is_401_and_writes_nothing(server: ServerHandle, job: str) -> None:
    """The expiry inside the token is enforced by the server's clock."""
    token = issue_job_token(SECRET, job, expires_at=int(time.time()) - 1)

    status, body = _call(server.url, "PATCH", f"/v1/jobs/{job}/tasks/t", token, {})

    assert (401, "unauthorized") == (status, body["error"])
    assert "expired" in body["message"]
    assert 404 == _call(server.url, "GET", f"/v1/jobs/{job}", ADMIN)[0]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer trj1.",
        "Bearer trj1.a.b.c",
        "Bearer trj1...",
        "Bearer " + "x" * 5000,
        "Bearer trj1." + "A" * 600,
        "Bearer ÿÿÿ",
        "Bearer " + ADMIN + "x",
        "Bearer " + issue_job_token(OTHER_SECRET, "j"),
    ],
)
def test_malformed_or_wrong_tokens_are_a_clean_401(
    server: ServerHandle, job: str, authorization: str | None
) -> None:
    """Every shape of bad credential: 401 JSON with WWW-Authenticate, never a 500."""
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    response = urllib3.request(
        "PATCH",
        f"{server.url}/v1/jobs/{job}/tasks/t",
        body=b"{}",
        headers=headers,
        timeout=20.0,
        retries=False,
    )

    assert 401 == response.status
    assert "unauthorized" == json.loads(response.data)["error"]
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert 404 == _call(server.url, "GET", f"/v1/jobs/{job}", ADMIN)[0]


def test_a_secret_only_server_takes_job_tokens_and_refuses_anything_else(
    start_server: Callable[..., ServerHandle], job: str
) -> None:
    """Without an admin token, job tokens work and nobody else gets in."""
    handle = start_server(secret=SECRET)
    path = f"/v1/jobs/{job}/tasks/t"

    assert 200 == _call(handle.url, "PATCH", path, issue_job_token(SECRET, job), {})[0]
    assert 401 == _call(handle.url, "GET", path, None)[0]
    assert 401 == _call(handle.url, "GET", path, ADMIN)[0]


def test_a_token_only_server_says_it_issues_no_job_tokens(
    start_server: Callable[..., ServerHandle], job: str
) -> None:
    """A job token sent to a server without a secret: 401 saying why."""
    handle = start_server(token=ADMIN)

    status, body = _call(handle.url, "GET", "/v1/jobs", issue_job_token(SECRET, job))

    assert 401 == status
    assert "no job tokens" in body["message"]


def test_a_run_reports_through_httpsink_with_a_job_token(server: ServerHandle, job: str) -> None:
    """The client needs nothing new: a job token is a bearer token like any other."""
    sink = HttpSink(server.url, job, "train", token=issue_job_token(SECRET, job))
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01), rank=0)
    reporter.start()
    for step in range(1, 51):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    reporter.report_completed()

    assert reporter.close(timeout=20.0)
    stored = _call(server.url, "GET", f"/v1/jobs/{job}/tasks/train", ADMIN)[1]
    assert ("completed", 50) == (
        stored["status"],
        len(stored["status_details"]["metrics"]["train_loss"]),
    )


def test_neither_token_reaches_the_logs(
    start_server: Callable[..., ServerHandle], job: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the access log on, admin, job, expired and forged tokens are never logged."""
    handle = start_server(token=ADMIN, secret=SECRET, access_log=True)
    caplog.set_level("DEBUG")
    tokens = [
        ADMIN,
        issue_job_token(SECRET, job),
        issue_job_token(SECRET, job, expires_at=int(time.time()) - 5),
        issue_job_token(OTHER_SECRET, job),
    ]
    for token in tokens:
        _call(handle.url, "PATCH", f"/v1/jobs/{job}/tasks/t", token, {})
        _call(handle.url, "GET", "/v1/jobs/other", token)
    handle.stop()

    assert f"/v1/jobs/{job}/tasks/t" in caplog.text  # the requests were logged
    assert [] == [t for t in tokens if t in caplog.text or t.split(".")[-1] in caplog.text]


# -- the command line --------------------------------------------------------------------


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    return path


def test_trainreport_token_prints_a_token_for_the_job(
    secret_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trainreport token JOB --secret-file F --expires-in S`` prints one verifiable line."""
    before = time.time()

    assert 0 == cli.main(
        ["token", "job-7", "--secret-file", str(secret_file), "--expires-in", "60"]
    )

    token = capsys.readouterr().out.strip()
    verified = verify_job_token(SECRET, token, now=before)
    assert "job-7" == verified.job_id
    assert verified.expires_at is not None
    assert before + 59 <= verified.expires_at <= time.time() + 61


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["token", "../etc", "--secret-file", "{secret}"], "job id"),
        (["token", "j", "--secret-file", "{short}"], "at least 32"),
        (["token", "j", "--secret-file", "{missing}"], "No such file"),
    ],
)
def test_trainreport_token_refuses_bad_input_with_status_2(
    secret_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    """A bad job id, a short secret or a missing file: one line on stderr, exit 2."""
    short = tmp_path / "short"
    short.write_text("abc")
    paths = {"{secret}": secret_file, "{short}": short, "{missing}": tmp_path / "nope"}
    argv = [str(paths.get(a, a)) for a in argv]

    assert 2 == cli.main(argv)

    captured = capsys.readouterr()
    assert "" == captured.out
    assert message in captured.err
    assert 1 == len(captured.err.strip().splitlines())


def test_a_tokenless_server_refuses_to_listen_beyond_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--host 0.0.0.0`` with neither token nor secret: exit 2, nothing created."""
    db = tmp_path / "t.db"

    assert 2 == cli.main(["serve", "--db", str(db), "--host", "0.0.0.0", "--port", "0"])

    assert "without a token" in capsys.readouterr().err
    assert not db.exists()


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*extra: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "trainreport.cli", "serve", "--port", "0"]
        argv += ["--db", str(tmp_path / f"{len(started)}.db"), *extra]
        started.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.communicate(timeout=10)  # waits and closes the pipes


def test_a_tokenless_server_says_so_loudly_at_start(
    serve_process: Callable[..., subprocess.Popen[str]],
) -> None:
    """One WARNING line on stderr names the risk and the fix."""
    process = serve_process()
    assert process.stdout is not None
    assert process.stderr is not None
    assert "listening on http://127.0.0.1:" in process.stdout.readline()

    warning = process.stderr.readline()

    assert warning.startswith("WARNING: no token and no secret")
    assert "--secret-file" in warning


def test_a_server_with_a_secret_says_job_tokens_at_start(
    serve_process: Callable[..., subprocess.Popen[str]], secret_file: Path
) -> None:
    """``--secret-file`` is reported on the start line, and no warning is printed."""
    process = serve_process("--secret-file", str(secret_file))
    assert process.stdout is not None

    assert "tokens: job tokens)" in process.stdout.readline()


def test_serve_refuses_a_short_secret_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A secret under 32 bytes is a usage error, before anything listens."""
    short = tmp_path / "short"
    short.write_text("abc")

    assert 2 == cli.main(["serve", "--db", str(tmp_path / "d.db"), "--secret-file", str(short)])

    assert "at least 32" in capsys.readouterr().err
