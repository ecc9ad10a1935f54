"""A web page of another origin must not write to the reference server (no token, the default).

The attack this pins (issue 9): a page the user happens to visit sends
"simple" cross-origin requests (``mode: "no-cors"``, no preflight) to the
server on loopback. Before the fix they opened a writer (fencing the live
run), emptied a series, failed the task and cancelled the job. Here a real
headless Chromium loads a real page served from another loopback origin while
a real run reports to the server; afterwards the run's data is whole and
nothing was cancelled. The server's access log proves the requests did reach
it and were refused.

Also pinned: DNS rebinding (a ``Host`` the server does not answer for), and
the same three rules over plain HTTP, where every case can be named.
"""

from __future__ import annotations

import http.server
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from browser import dump_dom, needs_chromium
from trainreport import Reporter, ReportingConfig
from trainreport.server import ServerHandle
from trainreport.sinks._http._sink import HttpSink

pytestmark = pytest.mark.timeout(120)

JOB, TASK = "live-run", "train"
CONFIG = ReportingConfig(min_report_interval_seconds=0.02, heartbeat_seconds=30.0)

# The attacker's script: every write the issue describes as a simple request
# (text/plain and form-urlencoded bodies, a body-less cancel), then the same
# writes preflighted (JSON content type, PATCH), then a cross-origin read.
# Each outcome is written into the page: "sent" (an opaque response: the
# browser cannot tell the status), "blocked" (the fetch rejected) or "read:".
ATTACK_PAGE = """<!doctype html>
<html><head><title>cute cats</title></head>
<body><h1>Nothing to see here</h1><pre id="log"></pre>
<script>
const base = "__SERVER__";
const task = base + "/v1/jobs/__JOB__/tasks/__TASK__";
const wipe = (generation) => JSON.stringify({
  writer_generation: generation, sequence: 1, status: "failed",
  series: {train_loss: {offset: 0, steps: [], epochs: [], values: []}}});
const simple = [];
for (const type of ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]) {
  simple.push(["writer " + type, task + "/writers", {body: "{}", headers: {"Content-Type": type}}]);
  for (const generation of [1, 2, 3, 4]) {
    simple.push(["update gen " + generation + " " + type, task + "/updates",
                 {body: wipe(generation), headers: {"Content-Type": type}}]);
  }
  simple.push(["patch-as-post " + type, task,
               {body: '{"status": "failed"}', headers: {"Content-Type": type}}]);
}
simple.push(["cancel", base + "/v1/jobs/__JOB__/cancel", {}]);
simple.push(["writer no content type", task + "/writers", {body: new Blob(["{}"])}]);
const preflighted = [
  ["update json", task + "/updates",
   {method: "POST", body: wipe(2), headers: {"Content-Type": "application/json"}}],
  ["patch json", task,
   {method: "PATCH", body: '{"status": "failed"}', headers: {"Content-Type": "application/json"}}],
  ["cancel json", base + "/v1/jobs/__JOB__/cancel",
   {method: "POST", body: "{}", headers: {"Content-Type": "application/json"}}],
  ["put job", base + "/v1/jobs/__JOB__", {method: "PUT"}],
];
const log = [];
async function attack() {
  for (const [name, url, init] of simple) {
    try {
      await fetch(url, Object.assign({method: "POST", mode: "no-cors"}, init));
      log.push([name, "sent"]);
    } catch (e) { log.push([name, "blocked"]); }
  }
  for (const [name, url, init] of preflighted) {
    try { await fetch(url, init); log.push([name, "sent"]); }
    catch (e) { log.push([name, "blocked"]); }
  }
  try {
    const response = await fetch(task);
    log.push(["read", "read:" + (await response.text()).slice(0, 40)]);
  } catch (e) { log.push(["read", "blocked"]); }
  document.getElementById("log").textContent = JSON.stringify(log);
  document.title = "done";
}
attack();
</script></body></html>
"""


@pytest.fixture
def attacker_origin() -> Iterator[Callable[[str], str]]:
    """Serves the attack page from another loopback origin (its own port); returns its URL."""
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def publish(html: str) -> str:
        pages["/cats.html"] = html.encode()
        return f"http://127.0.0.1:{httpd.server_address[1]}/cats.html"

    yield publish
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


@pytest.fixture
def access_log() -> Iterator[list[str]]:
    """The lines uvicorn's access logger emits while the test runs (whatever configured it)."""
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.access")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(previous)


def _stored(url: str, path: str) -> Any:
    response = urllib3.request("GET", url + path, timeout=10.0, retries=False)
    return response.status, json.loads(response.data)


def _report(reporter: Reporter, steps: range) -> None:
    for step in steps:
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})


@needs_chromium
def test_a_page_of_another_origin_cannot_write_to_or_cancel_a_live_run(
    start_server: Callable[..., ServerHandle],
    attacker_origin: Callable[[str], str],
    tmp_path: Path,
    access_log: list[str],
) -> None:
    """No token (the default): a cross-origin page's writes, simple or preflighted, all fail.

    The live run keeps its writer (``close()`` is True), every point, its
    status; the job is not cancel-requested; the access log shows each
    attack request arrived and was refused (403), so the browser did send them.
    """
    server = start_server(access_log=True)
    reporter = Reporter(HttpSink(server.url, JOB, TASK), CONFIG, rank=0).start()
    reporter.report_training_start(max_steps=600, num_epochs=1)
    _report(reporter, range(1, 301))
    assert reporter.flush(timeout=10)
    page = attacker_origin(
        ATTACK_PAGE.replace("__SERVER__", server.url)
        .replace("__JOB__", JOB)
        .replace("__TASK__", TASK)
    )

    dom = dump_dom(page, tmp_path / "profile", budget_ms=10_000)

    _report(reporter, range(301, 601))
    reporter.report_completed()
    closed = reporter.close(timeout=10)
    match = re.search(r'<pre id="log">(.*?)</pre>', dom, re.DOTALL)
    assert match is not None, dom[:2000]
    outcomes = dict(json.loads(match.group(1).replace("&quot;", '"')))
    assert 25 == len(outcomes)  # every attempt ran
    assert {"blocked"} == {
        outcomes[name] for name in ("update json", "patch json", "cancel json", "put job", "read")
    }
    assert closed
    status, task = _stored(server.url, f"/v1/jobs/{JOB}/tasks/{TASK}")
    assert (200, "completed") == (status, task["status"])
    points = task["status_details"]["metrics"]["train_loss"]
    assert list(range(1, 601)) == [p["step"] for p in points]
    assert False is _stored(server.url, f"/v1/jobs/{JOB}")[1]["cancel_requested"]
    log = re.findall(r'"(\w+) (/v1/jobs/live-run\S*) HTTP/1.1" (\d{3})', "\n".join(access_log))
    refused = [(method, path) for method, path, code in log if code == "403"]
    assert 20 <= len(refused)  # every simple request reached the server and was refused
    assert [] == [
        entry
        for entry in log
        if entry[2].startswith("2") and (entry[0] in ("OPTIONS", "PUT") or "cancel" in entry[1])
    ]


@needs_chromium
def test_a_dns_rebinding_name_gets_no_answer_in_a_real_browser(
    server: ServerHandle, tmp_path: Path
) -> None:
    """``evil.example`` resolved to the server's address (rebinding): the browser gets 421, no data.

    Chromium's ``--host-resolver-rules`` plays the attacker's DNS: the page
    at ``http://evil.example:<port>/`` is the server itself, with a ``Host``
    it does not answer for.
    """
    urllib3.request(
        "PATCH",
        f"{server.url}/v1/jobs/secret-job/tasks/t",
        body=b'{"status": "running"}',
        headers={"Content-Type": "application/json"},
        timeout=10.0,
    )
    port = server.url.rsplit(":", 1)[1]

    dom = dump_dom(
        f"http://evil.example:{port}/v1/jobs",
        tmp_path / "profile",
        extra=["--host-resolver-rules=MAP evil.example 127.0.0.1"],
    )

    assert "unknown_host" in dom
    assert "secret-job" not in dom


# -- the three rules over plain HTTP ------------------------------------------------------


def _raw(url: str, method: str, path: str, headers: dict[str, str], body: bytes | None) -> Any:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with urllib3.HTTPConnectionPool(host, int(port), retries=False, timeout=10.0) as pool:
        response = pool.urlopen(method, path, body=body, headers=headers)
        return response.status, response.data


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("evil.example", 421),
        ("evil.example:{port}", 421),
        ("127.0.0.1.evil.example:{port}", 421),
        ("localhost.evil.example", 421),
        ("", 421),
        ("[::1", 421),
        ("127.0.0.1:{port}", 200),
        ("127.8.9.10:{port}", 200),
        ("localhost:{port}", 200),
        ("LOCALHOST", 200),
        ("my-app.localhost:{port}", 200),
        ("[::1]:{port}", 200),
    ],
)
def test_only_hosts_the_server_answers_for_get_an_answer(
    module_server: ServerHandle, host: str, expected: int
) -> None:
    """A ``Host`` that is not loopback (or allowed) is 421 ``unknown_host``, reads included."""
    port = module_server.url.rsplit(":", 1)[1]

    status, data = _raw(
        module_server.url, "GET", "/v1/jobs", {"Host": host.format(port=port)}, None
    )

    assert expected == status
    if expected == 421:
        assert "unknown_host" == json.loads(data)["error"]


def test_allowed_hosts_adds_names_and_the_listening_address(
    start_server: Callable[..., ServerHandle],
) -> None:
    """``allowed_hosts`` names are answered for, other names still are not."""
    handle = start_server(allowed_hosts=["jobs.internal"])

    assert 200 == _raw(handle.url, "GET", "/v1/jobs", {"Host": "jobs.internal:80"}, None)[0]
    assert 200 == _raw(handle.url, "GET", "/v1/jobs", {"Host": "JOBS.internal"}, None)[0]
    assert 421 == _raw(handle.url, "GET", "/v1/jobs", {"Host": "jobs.internal.evil"}, None)[0]


@pytest.mark.parametrize(
    ("method", "origin", "expected"),
    [
        ("PATCH", "http://127.0.0.1:{port}", 200),
        ("PATCH", "https://127.0.0.1:{port}", 200),
        ("PATCH", "http://127.0.0.1:{other}", 403),
        ("PATCH", "http://localhost:{port}", 403),
        ("PATCH", "null", 403),
        ("PATCH", "http://evil.example", 403),
        ("PATCH", "file://", 403),
        ("GET", "http://evil.example", 403),
        ("GET", "http://127.0.0.1:{port}", 200),
    ],
)
def test_a_request_from_another_origin_is_403(
    module_server: ServerHandle, method: str, origin: str, expected: int
) -> None:
    """``Origin`` must be the server's own (scheme-agnostic host and port of ``Host``)."""
    port = int(module_server.url.rsplit(":", 1)[1])
    headers = {**JSON, "Origin": origin.format(port=port, other=port + 1)}
    body = b'{"status": "running"}' if method == "PATCH" else None

    status, data = _raw(module_server.url, method, "/v1/jobs/origin-job/tasks/t", headers, body)

    assert expected == status
    if expected == 403:
        assert "cross_origin" == json.loads(data)["error"]


@pytest.mark.parametrize(
    ("method", "path", "content_type", "expected"),
    [
        ("PATCH", "/v1/jobs/ct/tasks/t", None, 415),
        ("PATCH", "/v1/jobs/ct/tasks/t", "text/plain", 415),
        ("PATCH", "/v1/jobs/ct/tasks/t", "application/x-www-form-urlencoded", 415),
        ("PATCH", "/v1/jobs/ct/tasks/t", "multipart/form-data; boundary=x", 415),
        ("PATCH", "/v1/jobs/ct/tasks/t", "application/jsonp", 415),
        ("POST", "/v1/jobs/ct/cancel", None, 415),
        ("PUT", "/v1/jobs/ct", "text/plain", 415),
        ("POST", "/v1/jobs/ct/tasks/t/writers", "text/plain;charset=UTF-8", 415),
        ("PATCH", "/v1/jobs/ct/tasks/t", "application/json", 200),
        ("PATCH", "/v1/jobs/ct/tasks/t", "Application/JSON; charset=utf-8", 200),
        ("PUT", "/v1/jobs/ct-put", "application/json", 201),
    ],
)
def test_a_write_without_a_json_content_type_is_415_and_changes_nothing(
    module_server: ServerHandle, method: str, path: str, content_type: str | None, expected: int
) -> None:
    """Simple-request body types (and none at all) are refused before the body is read."""
    headers = {"Content-Type": content_type} if content_type else {}
    body = b'{"status": "failed"}' if method == "PATCH" else b"{}"

    status, data = _raw(module_server.url, method, path, headers, body)

    assert expected == status
    if expected == 415:
        assert "unsupported_media_type" == json.loads(data)["error"]
        task = _raw(module_server.url, "GET", "/v1/jobs/ct/tasks/t", {}, None)
        assert task[0] == 404 or json.loads(task[1])["status"] != "failed"


def test_trainreport_serve_with_no_options_applies_every_rule(
    server_process: ServerHandle,
) -> None:
    """The CLI server (the one a laptop runs) refuses rebinding, other origins and text bodies."""
    url = server_process.url
    port = url.rsplit(":", 1)[1]
    body = b'{"status": "failed"}'
    path = "/v1/jobs/cli/tasks/t"

    assert 421 == _raw(url, "GET", "/v1/jobs", {"Host": f"evil.example:{port}"}, None)[0]
    assert 403 == _raw(url, "PATCH", path, {**JSON, "Origin": "http://evil.example"}, body)[0]
    assert 415 == _raw(url, "PATCH", path, {"Content-Type": "text/plain"}, body)[0]
    assert 404 == _raw(url, "GET", path, {}, None)[0]
    assert 200 == _raw(url, "PATCH", path, JSON, body)[0]
