"""``trainreport.client``: reading tasks and jobs back from the real reference server.

Every error is one of the package's own exceptions, and its message names the
URL (userinfo redacted) and the job; ``to_pandas`` gives one tidy frame.
"""

from __future__ import annotations

import http.server
import json
import math
import socket
import sys
import threading
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest
import urllib3

from faults import FaultProxy
from trainreport import (
    ClientError,
    HttpSink,
    NotFoundError,
    Reporter,
    ReportingConfig,
    TrainReportError,
    UnauthorizedError,
    UnreachableError,
    client,
)
from trainreport._wire._job_tokens import issue_job_token
from trainreport._wire._payloads import ColumnPoints
from trainreport.server import ServerHandle
from trainreport.sinks._http import _open as _http_open

ADMIN = "client-admin-token"
SECRET = b"client-test-secret-0123456789abcdef0123"


def _run(url: str, job: str, token: str | None = None, steps: int = 20) -> Reporter:
    reporter = Reporter(
        HttpSink(url, job, "train", token=token),
        ReportingConfig(min_report_interval_seconds=0.01),
        rank=0,
    )
    reporter.start()
    reporter.report_training_start(max_steps=steps, num_epochs=2)
    for step in range(1, steps + 1):
        loss = math.nan if step == 5 else 1.0 / step
        reporter.report_train_step(step=step, epoch=1 + step // 11, metrics={"loss": loss})
        if step % 10 == 0:
            reporter.report_validation(step=step, epoch=1, metrics={"loss": 0.5})
    reporter.report_completed()
    assert reporter.close(timeout=20.0)
    return reporter


@pytest.fixture
def secured(start_server: Callable[..., ServerHandle]) -> ServerHandle:
    return start_server(token=ADMIN, secret=SECRET)


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A URL on which nothing listens (the port is bound, not listening: refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_read_task_returns_what_get_returns(server: ServerHandle) -> None:
    """The task record in the GET shape, every point included."""
    _run(server.url, "read-1")
    raw = json.loads(urllib3.request("GET", f"{server.url}/v1/jobs/read-1/tasks/train").data)

    task = client.read_task(server.url + "/", "read-1", "train")

    assert raw == task
    assert 20 == len(task["status_details"]["metrics"]["train_loss"])


@pytest.mark.parametrize(("per_read", "reads"), [(200_000, 1), (15, 2)])
def test_read_task_reads_the_curves_as_columns_and_equals_the_plain_get(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch, per_read: int, reads: int
) -> None:
    """?metrics=false, the summary, then GET .../series in groups: never the whole task's GET.

    train_loss holds 20 points and val_loss 2: in groups of 15 points, two reads.
    """
    monkeypatch.setattr(_http_open, "_POINTS_PER_READ", per_read)
    _run(server.url, "columns")
    raw = json.loads(urllib3.request("GET", f"{server.url}/v1/jobs/columns/tasks/train").data)
    with FaultProxy.for_url(server.url) as proxy:
        task = client.read_task(proxy.url, "columns", "train")
        paths = [r.path for r in proxy.requests]

    assert raw == task
    assert [
        "/v1/jobs/columns/tasks/train?metrics=false",
        "/v1/jobs/columns/tasks/train/series/summary",
    ] == paths[:2]
    assert reads == len(paths) - 2
    assert all("/series?name=" in p for p in paths[2:])


def test_read_task_with_columns_holds_each_series_as_three_arrays(server: ServerHandle) -> None:
    """``columns=True``: each series is a ``ColumnPoints`` of int64/int64/float64 arrays.

    About 24 bytes a point instead of a dictionary a point (~280 bytes), and
    it still reads as (and compares equal to) the ``GET`` shape: the null
    value at step 5 is ``None``, an item is ``{"step", "epoch", "value"}``.
    """
    _run(server.url, "compact")
    raw = json.loads(urllib3.request("GET", f"{server.url}/v1/jobs/compact/tasks/train").data)

    task = client.read_task(server.url, "compact", "train", columns=True)

    series = task["status_details"]["metrics"]
    assert {"train_loss", "val_loss"} == set(series)
    for points in series.values():
        assert isinstance(points, ColumnPoints)
        assert ("q", "q", "d") == tuple(
            c.typecode if isinstance(c, array) else type(c).__name__ for c in points.columns()
        )
    assert raw == task
    assert raw["status_details"]["metrics"]["train_loss"] == list(series["train_loss"])
    assert None is series["train_loss"][4]["value"]


def test_to_pandas_of_columns_builds_no_point_dictionary(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``to_pandas`` of ``ColumnPoints`` reads their arrays: the same frame, no item built."""
    _run(server.url, "compact-frame")
    plain = client.to_pandas(client.read_task(server.url, "compact-frame", "train"))
    task = client.read_task(server.url, "compact-frame", "train", columns=True)

    def no_items(self: ColumnPoints, index: Any) -> Any:
        raise AssertionError("to_pandas read a point of a ColumnPoints one by one")

    monkeypatch.setattr(ColumnPoints, "__getitem__", no_items)
    monkeypatch.setattr(ColumnPoints, "__iter__", no_items)
    frame = client.to_pandas(task)

    pd.testing.assert_frame_equal(plain, frame)


def test_read_task_without_the_series_endpoints_is_the_plain_get(server: ServerHandle) -> None:
    """A 404 from .../series/summary (a service without it): the whole task's GET, equal."""
    _run(server.url, "plain")
    raw = json.loads(urllib3.request("GET", f"{server.url}/v1/jobs/plain/tasks/train").data)
    with FaultProxy.for_url(server.url) as proxy:
        proxy.fail_next(1, 404, path="/series/summary")
        task = client.read_task(proxy.url, "plain", "train")
        paths = [r.path for r in proxy.requests]

    assert raw == task
    assert "/v1/jobs/plain/tasks/train" == paths[-1]


#: What the plain job API of ``plain_api`` answers to every GET.
PLAIN_TASK = {"status": "running", "status_details": {"metrics": {"a": [{"step": 1}]}}}


@pytest.fixture
def plain_api() -> Iterator[tuple[str, list[str]]]:
    """A plain job API that answers every GET with ``PLAIN_TASK``: its URL and the paths read."""
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            body = json.dumps(PLAIN_TASK).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", paths
    httpd.shutdown()
    httpd.server_close()


def test_read_task_from_a_job_api_that_ignores_the_query_is_one_get(
    plain_api: tuple[str, list[str]],
) -> None:
    """A plain job API answers ?metrics=false with every point: that answer, one request."""
    url, paths = plain_api

    assert PLAIN_TASK == client.read_task(url, "j", "train")
    assert ["/v1/jobs/j/tasks/train?metrics=false"] == paths


def test_list_jobs_and_read_job_return_the_jobs_with_their_tasks(server: ServerHandle) -> None:
    """Newest first, with task summaries; ``limit`` is passed through."""
    _run(server.url, "older", steps=2)
    _run(server.url, "newer", steps=2)

    jobs = client.list_jobs(server.url)
    job = client.read_job(server.url, "older")

    assert ["newer", "older"] == [j["job_id"] for j in jobs]
    assert [["newer"]] == [[j["job_id"] for j in client.list_jobs(server.url, limit=1)]]
    assert ("older", "completed") == (job["job_id"], job["tasks"][0]["status"])


def test_a_job_token_reads_its_job_and_lists_only_it(secured: ServerHandle) -> None:
    """The client takes the admin token or a job token alike."""
    _run(secured.url, "mine", token=ADMIN, steps=2)
    _run(secured.url, "theirs", token=ADMIN, steps=2)
    token = issue_job_token(SECRET, "mine")

    assert "completed" == client.read_task(secured.url, "mine", "train", token)["status"]
    assert ["mine"] == [j["job_id"] for j in client.list_jobs(secured.url, token)]


def test_an_unreachable_service_names_the_url_and_the_job(closed_url: str) -> None:
    """Connection refused: UnreachableError, a ClientError and a TrainReportError."""
    with pytest.raises(UnreachableError) as raised:
        client.read_task(closed_url, "job-x", "train", timeout_seconds=2.0)

    assert isinstance(raised.value, ClientError)
    assert isinstance(raised.value, TrainReportError)
    assert closed_url in str(raised.value)
    assert "'job-x'" in str(raised.value)
    assert str(raised.value).endswith("cannot reach it (connection refused)")
    assert (closed_url, "job-x", "train", None) == (
        raised.value.url,
        raised.value.job_id,
        raised.value.task_id,
        raised.value.status,
    )


def test_userinfo_in_the_url_is_redacted_from_every_message(closed_url: str) -> None:
    """``user:password@`` never appears in an error; the URL does, without it."""
    url = closed_url.replace("://", "://alice:hunter2@")

    with pytest.raises(UnreachableError) as raised:
        client.list_jobs(url, timeout_seconds=2.0)

    assert "hunter2" not in str(raised.value)
    assert "alice" not in str(raised.value)
    assert f"at {closed_url}:" in str(raised.value)
    assert closed_url == raised.value.url


def test_an_ambiguous_userinfo_is_refused_before_any_request() -> None:
    """A raw ``/`` in the password: which host is meant is unclear, so nothing is sent."""
    with pytest.raises(ClientError) as raised:
        client.list_jobs("http://alice:hun/ter2@127.0.0.1:9", timeout_seconds=2.0)

    assert "hun" not in str(raised.value)
    assert "%2F" in str(raised.value)


def test_no_token_a_wrong_token_and_another_jobs_token_are_unauthorized(
    secured: ServerHandle,
) -> None:
    """401 without or with a refused token, 403 with a job token for another job."""
    _run(secured.url, "guarded", token=ADMIN, steps=2)
    wrong = "not-the-admin-token"
    answers = []
    for token in (None, wrong, issue_job_token(SECRET, "elsewhere")):
        with pytest.raises(UnauthorizedError) as raised:
            client.read_task(secured.url, "guarded", "train", token)
        answers.append((raised.value.status, str(raised.value)))

    assert [401, 401, 403] == [status for status, _ in answers]
    assert "requires a token" in answers[0][1]
    assert "refused the token" in answers[1][1]
    assert all(secured.url in text and "'guarded'" in text for _, text in answers)
    assert all(wrong not in text for _, text in answers)


def test_a_missing_task_or_job_is_not_found_naming_them(server: ServerHandle) -> None:
    """404: NotFoundError naming the task and the job."""
    with pytest.raises(NotFoundError) as task:
        client.read_task(server.url, "no-such-job", "eval")
    with pytest.raises(NotFoundError) as job:
        client.read_job(server.url, "no-such-job")

    assert "task 'eval' of job 'no-such-job'" in str(task.value)
    assert "job 'no-such-job'" in str(job.value)
    assert 404 == task.value.status


def test_a_malformed_id_is_a_client_error_with_the_servers_reason(server: ServerHandle) -> None:
    """400 ``invalid_id`` is a ClientError carrying the status and the server's message."""
    with pytest.raises(ClientError) as raised:
        client.read_task(server.url, "bad id!", "train")

    assert 400 == raised.value.status
    assert "job_id must match" in str(raised.value)


@pytest.fixture
def not_json_url() -> Iterator[str]:
    """A real HTTP server that answers every GET with 200 and an HTML body."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>a login page</html>")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_an_answer_that_is_not_json_is_a_client_error(not_json_url: str) -> None:
    """A proxy's login page, say: ClientError naming the URL, never a ValueError."""
    with pytest.raises(ClientError) as raised:
        client.read_task(not_json_url, "j", "train")

    assert "not JSON" in str(raised.value)
    assert not_json_url in str(raised.value)


def test_to_pandas_gives_one_tidy_frame_of_every_point(server: ServerHandle) -> None:
    """Columns series, step, epoch, value; one row per point; NaN where the value was null."""
    _run(server.url, "frame")
    task = client.read_task(server.url, "frame", "train")

    frame = client.to_pandas(task)

    assert ["series", "step", "epoch", "value"] == list(frame.columns)
    assert {"train_loss": 20, "val_loss": 2} == frame["series"].value_counts().to_dict()
    assert ("int64", "Int64", "float64") == tuple(str(frame[c].dtype) for c in frame.columns[1:])
    train = frame[frame["series"] == "train_loss"].set_index("step")
    assert math.isnan(train.loc[5, "value"])
    assert 0.5 == train.loc[2, "value"]
    assert [1, 2] == sorted(train["epoch"].unique().tolist())


def test_to_pandas_of_a_task_without_series_is_an_empty_frame_with_the_columns() -> None:
    """No metrics yet: an empty frame, not an error; an epoch-less point is <NA>."""
    empty = client.to_pandas({"status": "pending", "status_details": {}})
    no_epoch = client.to_pandas(
        {"status_details": {"metrics": {"a": [{"step": 3, "epoch": None, "value": 1}]}}}
    )

    assert (0, ["series", "step", "epoch", "value"]) == (len(empty), list(empty.columns))
    assert pd.isna(no_epoch.loc[0, "epoch"])


@pytest.mark.parametrize("field", ["step", "epoch"])
def test_to_pandas_refuses_a_step_or_epoch_that_is_not_an_integer(field: str) -> None:
    """A step (or epoch) of 1.5 is an error, as the frame's integer columns always made it:
    never silently truncated to 1 (a whole float, 2.0, is the integer 2)."""
    point = {"step": 3, "epoch": 1, "value": 1.0}
    whole = client.to_pandas({"status_details": {"metrics": {"a": [{**point, field: 2.0}]}}})

    with pytest.raises(ValueError, match="integer"):
        client.to_pandas({"status_details": {"metrics": {"a": [{**point, field: 1.5}]}}})
    assert 2 == whole.loc[0, field]


def test_to_pandas_without_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """pandas missing: ImportError that says which extra to install."""
    monkeypatch.setitem(sys.modules, "pandas", None)

    with pytest.raises(ImportError, match=r"trainreport\[pandas\]"):
        client.to_pandas({"status_details": {}})


def test_show_and_the_demo_read_through_the_client() -> None:
    """No private fetch helpers are left: one way to read a task."""
    import trainreport.cli._summary as summary  # noqa: PLC0415

    assert [] == [name for name in dir(summary) if name.startswith("fetch")]
