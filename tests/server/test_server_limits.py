"""Resource limits of the reference server: slow clients, connection cap, decompression budget.

Slow clients are real sockets that send a request a byte at a time; the
deadlines are the behaviour under test, so each is checked against a
generous upper bound (and a lower one: the server did wait for the client).
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3

from trainreport.server import ServerHandle

pytestmark = pytest.mark.timeout(120)

JSON = {"Content-Type": "application/json"}
#: Slack for a deadline on a shared 2-core machine: the server must close within it.
SLACK_SECONDS = 6.0


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


class SlowClient:
    """A raw socket that sends a request in small pieces, one every ``pause`` seconds."""

    def __init__(self, url: str) -> None:
        self.sock = socket.create_connection(_address(url), timeout=30)
        self.sock.settimeout(0.05)
        self.received = b""
        self.closed_after: float | None = None
        self._opened = time.monotonic()
        self._wait = threading.Event()

    def trickle(self, data: bytes, *, pause: float = 0.2, give_up_after: float = 30.0) -> None:
        """Send ``data`` a byte per ``pause`` until it is all sent or the server closes."""
        deadline = self._opened + give_up_after
        for i in range(len(data)):
            if self._poll() or time.monotonic() > deadline:
                return
            try:
                self.sock.sendall(data[i : i + 1])
            except OSError:
                self._closed()
                return
            self._wait.wait(pause)

    def wait_closed(self, give_up_after: float = 30.0) -> None:
        """Read until the server closes the connection (or the time is up)."""
        deadline = self._opened + give_up_after
        while not self._poll() and time.monotonic() < deadline:
            pass

    def _poll(self) -> bool:
        if self.closed_after is not None:
            return True
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            chunk = b""
        if chunk:
            self.received += chunk
            return False
        self._closed()
        return True

    def _closed(self) -> None:
        self.closed_after = time.monotonic() - self._opened

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def slow_clients() -> Iterator[Callable[[str], SlowClient]]:
    made: list[SlowClient] = []

    def make(url: str) -> SlowClient:
        made.append(SlowClient(url))
        return made[-1]

    yield make
    for client in made:
        client.close()


def _status(url: str, method: str = "GET", path: str = "/v1/jobs", body: Any = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    response = urllib3.request(
        method, url + path, body=data, headers=JSON, timeout=10.0, retries=False
    )
    return response.status


def test_a_head_sent_a_byte_at_a_time_is_closed_at_the_head_deadline(
    start_server: Callable[..., ServerHandle], slow_clients: Callable[[str], SlowClient]
) -> None:
    """Slowloris: a head trickling in is answered 408 and closed after ``head_timeout_seconds``.

    A normal client is served while the slow one holds its connection.
    """
    server = start_server(head_timeout_seconds=1.0)
    slow = slow_clients(server.url)
    served: list[int] = []
    normal = threading.Thread(target=lambda: served.append(_status(server.url)))

    normal.start()
    slow.trickle(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 500)
    normal.join(30)

    assert slow.closed_after is not None, "the slow connection is still open"
    assert 1.0 <= slow.closed_after < 1.0 + SLACK_SECONDS
    assert slow.received.startswith(b"HTTP/1.1 408 ")
    assert b'"request_timeout"' in slow.received
    assert [200] == served


def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline(
    start_server: Callable[..., ServerHandle], slow_clients: Callable[[str], SlowClient]
) -> None:
    """An idle connection never started a request: it is closed at the head deadline too."""
    server = start_server(head_timeout_seconds=1.0)
    idle = slow_clients(server.url)

    idle.wait_closed()

    assert idle.closed_after is not None
    assert 1.0 <= idle.closed_after < 1.0 + SLACK_SECONDS


def test_a_body_sent_a_byte_at_a_time_is_closed_at_the_body_deadline(
    start_server: Callable[..., ServerHandle], slow_clients: Callable[[str], SlowClient]
) -> None:
    """A body trickling in (a total deadline, not an idle one) gets 408; nothing is stored."""
    server = start_server(head_timeout_seconds=3.0, body_timeout_seconds=1.5)
    body = json.dumps({"status": "running", "status_details": {"pad": "x" * 300}}).encode()
    head = (
        "PATCH /v1/jobs/slow/tasks/t HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    slow = slow_clients(server.url)
    slow.sock.sendall(head)
    started = time.monotonic()

    slow.trickle(body)
    body_seconds = time.monotonic() - started

    assert slow.closed_after is not None, "the slow connection is still open"
    assert 1.5 <= body_seconds < 1.5 + SLACK_SECONDS
    assert slow.received.startswith(b"HTTP/1.1 408 ")
    assert 404 == _status(server.url, path="/v1/jobs/slow/tasks/t")


def test_a_kept_alive_connection_gets_a_fresh_head_deadline_per_request(
    start_server: Callable[..., ServerHandle], slow_clients: Callable[[str], SlowClient]
) -> None:
    """After a served request, a second head trickling in on the same connection is cut off too."""
    server = start_server(head_timeout_seconds=2.0)
    client = slow_clients(server.url)
    client.sock.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    while b"\r\n\r\n" not in client.received and not client._poll():
        pass
    assert client.received.startswith(b"HTTP/1.1 200 ")
    client.received = b""
    second = time.monotonic()

    client.trickle(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 500)

    assert client.closed_after is not None
    assert time.monotonic() - second < 2.0 + SLACK_SECONDS
    assert b"HTTP/1.1 408 " in client.received  # after the rest of the first response


def test_connections_beyond_the_cap_get_503_and_the_server_recovers(
    start_server: Callable[..., ServerHandle], slow_clients: Callable[[str], SlowClient]
) -> None:
    """With ``max_connections`` held by idle clients, a new one is refused (503 or closed).

    Once the head deadline has closed the idle ones, a normal client is served again.
    """
    server = start_server(max_connections=4, head_timeout_seconds=4.0)
    idle = [slow_clients(server.url) for _ in range(4)]
    assert 200 != _first_status_or_reset(server.url)

    for client in idle:
        client.wait_closed()

    assert all(c.closed_after is not None for c in idle)
    assert 200 == _status(server.url)


def _first_status_or_reset(url: str) -> int:
    """The status of a GET on a fresh connection, or 0 when the server closed it first."""
    with socket.create_connection(_address(url), timeout=10) as sock:
        try:
            sock.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = sock.recv(200)
        except OSError:
            return 0
    if data.startswith(b"HTTP/1.1 503 "):
        assert b"retry-after: 1" in data.lower()
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


def test_the_deadlines_leave_a_normal_client_alone(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Ordinary requests, bodies included, on one kept-alive connection are unaffected."""
    server = start_server(head_timeout_seconds=3.0, body_timeout_seconds=3.0)
    host, port = _address(server.url)
    body = gzip.compress(json.dumps({"status_details": {"pad": "y" * 100_000}}).encode())
    with urllib3.HTTPConnectionPool(host, port, maxsize=1, retries=False) as pool:
        for _ in range(3):
            response = pool.urlopen(
                "PATCH",
                "/v1/jobs/normal/tasks/t",
                body=body,
                headers={**JSON, "Content-Encoding": "gzip"},
            )
            assert 200 == response.status
        assert 1 == pool.num_connections


# -- decompression: the per-request limit and the server-wide budget ----------------------


def _gzip_patch(inflated_bytes: int) -> bytes:
    """A gzip PATCH body that inflates to about ``inflated_bytes`` (it compresses ~1000x)."""
    return gzip.compress(
        json.dumps({"status_details": {"pad": "x" * inflated_bytes}}).encode(), compresslevel=9
    )


def test_the_default_decompressed_limit_refuses_a_60_mib_expansion(server: ServerHandle) -> None:
    """A 60 KiB gzip body that inflates to 60 MiB is 413 under the default limits (issue 9)."""
    from trainreport.server import DEFAULT_MAX_DECOMPRESSED_BYTES  # noqa: PLC0415

    bomb = _gzip_patch(60 * 2**20)
    assert len(bomb) < 100 * 1024

    response = urllib3.request(
        "PATCH",
        server.url + "/v1/jobs/bomb/tasks/t",
        body=bomb,
        headers={**JSON, "Content-Encoding": "gzip"},
        timeout=30.0,
    )

    assert 413 == response.status
    assert DEFAULT_MAX_DECOMPRESSED_BYTES == json.loads(response.data)["limit_bytes"]


def test_the_largest_update_the_client_sends_fits_the_default_limit_four_times(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decompressed limit is the client's largest update with a 4x margin (docs/server.md).

    A run whose whole backlog (20,000 steps x 14 series, 200 hyperparameters)
    goes out at once is split by HttpSink's default request cap; every update
    body (before compression) must fit a quarter of the default limit.
    """
    from trainreport import Reporter, ReportingConfig  # noqa: PLC0415
    from trainreport.server import DEFAULT_MAX_DECOMPRESSED_BYTES  # noqa: PLC0415
    from trainreport.sinks._http._sink import HttpSink  # noqa: PLC0415
    from trainreport.sinks._http._transport import HttpTransport  # noqa: PLC0415

    sizes: list[int] = []
    request = HttpTransport.request

    def measured(
        self: HttpTransport, method: str, resource: str, body: Any, *args: Any, **kw: Any
    ) -> Any:
        if resource.endswith("/updates") and body is not None:
            sizes.append(len(body))
        return request(self, method, resource, body, *args, **kw)

    monkeypatch.setattr(HttpTransport, "request", measured)
    reporter = Reporter(
        HttpSink(server.url, "largest-update"),
        ReportingConfig(min_report_interval_seconds=0.05),
        rank=0,
    )
    reporter.report_training_start(max_steps=20_000, num_epochs=3)
    reporter.report_hyperparameters(
        params={f"group{i}/param{j}": 0.001 * j for i in range(10) for j in range(20)}
    )
    for step in range(1, 20_001):
        metrics = {f"metric_{i}": 1.0 / (step + i) for i in range(14)}
        reporter.report_train_step(step=step, epoch=1 + step // 7000, metrics=metrics)

    reporter.start()
    assert reporter.close(timeout=60)

    assert len(sizes) > 3  # the backlog was split
    assert max(sizes) <= 2**20  # HttpSink's default request cap
    assert 4 * max(sizes) <= DEFAULT_MAX_DECOMPRESSED_BYTES


class _Holder:
    """A raw connection that sends most of a gzip body (inflating to ~1 MB) and then stalls."""

    def __init__(self, url: str, inflated_bytes: int) -> None:
        body = _gzip_patch(inflated_bytes)
        self.sock = socket.create_connection(_address(url), timeout=10)
        head = (
            "PATCH /v1/jobs/held/tasks/t HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.sock.sendall(head + body[:-8])  # everything but the gzip trailer

    def close(self) -> None:
        self.sock.close()


def test_bodies_over_the_server_wide_budget_get_503_with_retry_after(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Two stalled uploads hold ~2 MB of a 2.2 MB budget: a third body is 503, Retry-After 1.

    Each body is within the per-request limits; only together do they
    exceed the budget. Once the stalled uploads go away, the same body is stored.
    """
    server = start_server(
        max_decompressed_bytes=2**20 + 2**19, body_budget_bytes=2_200_000, body_timeout_seconds=30
    )
    holders = [_Holder(server.url, 1_000_000), _Holder(server.url, 1_000_000)]
    third = _gzip_patch(500_000)

    def send() -> urllib3.BaseHTTPResponse:
        return urllib3.request(
            "PATCH",
            server.url + "/v1/jobs/third/tasks/t",
            body=third,
            headers={**JSON, "Content-Encoding": "gzip"},
            timeout=10.0,
            retries=False,
        )

    deadline = time.monotonic() + 20
    response = send()
    while response.status != 503 and time.monotonic() < deadline:
        response = send()  # until the server has inflated what the holders sent
    try:
        assert 503 == response.status
        assert "1" == response.headers["retry-after"]
        assert "server_busy" == json.loads(response.data)["error"]
    finally:
        for holder in holders:
            holder.close()
    deadline = time.monotonic() + 20
    while (response := send()).status == 503 and time.monotonic() < deadline:
        pass
    assert 200 == response.status


@pytest.mark.parametrize("inflated", [1, 65_536 - 31, 65_536, 3 * 65_536, 3 * 65_536 + 7, 10**6])
@pytest.mark.parametrize("piece", [None, 7, 1000])
def test_a_gzip_body_inflated_in_steps_arrives_whole(
    module_server: ServerHandle, inflated: int, piece: int | None
) -> None:
    """Inflating in 64 KiB steps, whatever the chunking, loses and adds no byte."""
    body = json.dumps({"status_details": {"pad": "x" * inflated}}).encode()
    wire = gzip.compress(body, compresslevel=9)
    chunks = [wire] if piece is None else [wire[i : i + piece] for i in range(0, len(wire), piece)]
    path = f"/v1/jobs/steps-{inflated}-{piece}/tasks/t"

    host, port = _address(module_server.url)
    with urllib3.HTTPConnectionPool(host, port, retries=False, timeout=30.0) as pool:
        response = pool.urlopen(
            "PATCH",
            path,
            body=iter(chunks),
            chunked=True,
            headers={**JSON, "Content-Encoding": "gzip"},
        )
        stored = pool.urlopen("GET", path)

    assert 200 == response.status, response.data
    assert inflated == len(json.loads(stored.data)["status_details"]["pad"])


def test_output_still_pending_when_a_chunk_is_used_up_is_not_lost() -> None:
    """A chunk that ends exactly where a 64 KiB step fills up leaves output pending in zlib.

    The cut is searched for (it depends on zlib's output), then the body is
    fed to the reader in two messages, as the server receives it.
    """
    import asyncio  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    from starlette.requests import Request  # noqa: PLC0415

    from trainreport.server._body import (  # noqa: PLC0415
        INFLATE_STEP_BYTES,
        BodyLimits,
        MemoryBudget,
        held_body,
    )

    body = json.dumps({"status_details": {"pad": "x" * 1_000_000}}).encode()
    wire = gzip.compress(body, compresslevel=9)
    cuts = []
    for cut in range(1, len(wire)):
        probe = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = probe.decompress(wire[:cut], INFLATE_STEP_BYTES)
        full = len(out) == INFLATE_STEP_BYTES and not probe.unconsumed_tail
        if full and probe.decompress(b"", INFLATE_STEP_BYTES):
            cuts.append(cut)
    assert cuts, "no cut leaves output pending: the edge is not exercised"
    messages = [wire[: cuts[0]], wire[cuts[0] :]]

    async def receive() -> dict[str, Any]:
        data = messages.pop(0)
        return {"type": "http.request", "body": data, "more_body": bool(messages)}

    scope = {
        "type": "http",
        "method": "PATCH",
        "headers": [(b"content-encoding", b"gzip")],
        "path": "/",
        "query_string": b"",
    }

    async def read() -> bytes:
        limits = BodyLimits(max_body_bytes=2**20, max_decompressed_bytes=2**21)
        async with held_body(Request(scope, receive), limits, MemoryBudget(2**22)) as held:
            return bytes(held)

    assert body == asyncio.run(read())


def _load_points(url: str, task: str, points: int) -> int:
    """Store ``points`` points in one series of ``task``, 50,000 an update; its generation."""
    pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=60.0))
    opened = pool.request("POST", url + task + "/writers", body=b"{}", headers=JSON)
    generation: int = json.loads(opened.data)["writer_generation"]
    for sequence, offset in enumerate(range(0, points, 50_000), start=1):
        steps = list(range(offset + 1, min(offset + 50_000, points) + 1))
        update = {
            "writer_generation": generation,
            "sequence": sequence,
            "series": {
                "loss": {
                    "offset": offset,
                    "steps": steps,
                    "epochs": [1] * len(steps),
                    "values": [1.0 / s for s in steps],
                }
            },
        }
        response = pool.request(
            "POST", url + task + "/updates", body=json.dumps(update).encode(), headers=JSON
        )
        assert 200 == response.status, response.data[:200]
    return generation


def test_large_responses_over_the_response_memory_budget_get_503_until_one_is_sent(
    start_server: Callable[..., ServerHandle],
) -> None:
    """A reader that does not read holds a 150,000-point answer: a second is 503, Retry-After 1.

    The budget fits one such answer (estimated from the point count before it
    is built) and a small one. While the first is unsent, a second ``GET`` of
    the big task and a writer's open of it (a reporter resuming) get 503
    ``server_busy``, and that open issues no generation; a small task is still
    read. Once the slow reader goes away the bytes are given back: the big
    task is read twice in a row (a leaked hold would refuse the second).
    """
    from trainreport.server._responses import estimated_bytes  # noqa: PLC0415

    points = 150_000  # ~8.4 MB of JSON: more than the sockets' buffers take
    server = start_server(
        max_response_memory_bytes=estimated_bytes(points) + estimated_bytes(10),
        body_timeout_seconds=30,
    )
    big, small = "/v1/jobs/big/tasks/train", "/v1/jobs/small/tasks/train"
    generation = _load_points(server.url, big, points)
    _load_points(server.url, small, 10)
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(_address(server.url))
    slow.sendall(f"GET {big} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())

    def call(method: str, path: str) -> urllib3.BaseHTTPResponse:
        body = b"{}" if method == "POST" else None
        return urllib3.request(
            method, server.url + path, body=body, headers=JSON, timeout=30.0, retries=False
        )

    deadline = time.monotonic() + 20
    while (second := call("GET", big)).status != 503 and time.monotonic() < deadline:
        pass  # until the slow reader's answer is being built or sent
    try:
        opened = call("POST", big + "/writers")
        read_small = call("GET", small)
        assert (503, "1", "server_busy") == (
            second.status,
            second.headers["retry-after"],
            json.loads(second.data)["error"],
        )
        assert "large responses" in json.loads(second.data)["message"]
        assert (503, 200) == (opened.status, read_small.status)
    finally:
        slow.close()
    deadline = time.monotonic() + 20
    while (first := call("GET", big)).status == 503 and time.monotonic() < deadline:
        pass
    again = call("GET", big)
    reopened = call("POST", big + "/writers")
    assert (200, 200, 200) == (first.status, again.status, reopened.status)
    assert points == len(json.loads(again.data)["status_details"]["metrics"]["loss"])
    assert generation + 1 == json.loads(reopened.data)["writer_generation"]
