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
    server = start_server(head_timeout_seconds=1.0, body_timeout_seconds=1.5)
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
    server = start_server(head_timeout_seconds=1.0)
    client = slow_clients(server.url)
    client.sock.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    while b"\r\n\r\n" not in client.received and not client._poll():
        pass
    assert client.received.startswith(b"HTTP/1.1 200 ")
    client.received = b""
    second = time.monotonic()

    client.trickle(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 500)

    assert client.closed_after is not None
    assert time.monotonic() - second < 1.0 + SLACK_SECONDS
    assert b"HTTP/1.1 408 " in client.received  # after the rest of the first response


def test_connections_beyond_the_cap_get_503_and_the_server_recovers(
    start_server: Callable[..., ServerHandle], slow_clients: Callable[[str], SlowClient]
) -> None:
    """With ``max_connections`` held by idle clients, a new one is refused (503 or closed).

    Once the head deadline has closed the idle ones, a normal client is served again.
    """
    server = start_server(max_connections=4, head_timeout_seconds=2.0)
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
    server = start_server(head_timeout_seconds=1.0, body_timeout_seconds=1.0)
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
