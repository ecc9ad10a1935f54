"""The sink's one keep-alive connection (sinks/_http_connection.py), against real servers.

A standard-library HTTP/1.1 server stands in for a job-status API where the
reference server cannot do what is pinned: close idle connections without
saying so, or serve TLS with a test CA (trustme). No mocks.
"""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from trainreport import Delivered, Opened, RetryLater
from trainreport._sink import Update
from trainreport.sinks._http import HttpSink

pytestmark = pytest.mark.timeout(60)


class _Handler(http.server.BaseHTTPRequestHandler):
    """A plain job API: no capabilities (baseline), no stored task, every PATCH applied."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def finish(self) -> None:
        super().finish()
        with self.server.lock:
            self.server.closed += 1
            self.server.lock.notify_all()

    def _answer(self, status: int, body: bytes, *, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        # Closing without "Connection: close": the client finds out when it next looks.
        self.close_connection = close

    def do_GET(self) -> None:
        self._answer(404, b'{"error":"not_found"}')

    def do_PATCH(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.patches += 1
        self._answer(200, b"{}", close=self.server.close_after_response)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, close_after_response: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.close_after_response = close_after_response
        self.lock = threading.Condition()
        self.connections = 0
        self.closed = 0
        self.patches = 0

    def wait_closed(self, count: int) -> None:
        """Wait until the server has closed ``count`` connections (the test's own clock: 10 s)."""
        with self.lock:
            assert self.lock.wait_for(lambda: self.closed >= count, timeout=10.0), self.closed


@pytest.fixture
def serve() -> Iterator[Callable[..., _Server]]:
    started: list[_Server] = []

    def start(*, close_after_response: bool = False, tls: ssl.SSLContext | None = None) -> _Server:
        server = _Server(close_after_response)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def _update(step: int) -> Update:
    return Update("running", {"step": step}, None, True)


def test_a_kept_alive_connection_serves_every_request(serve: Callable[..., _Server]) -> None:
    """Opening and three sends go over one connection."""
    server = serve()
    sink = HttpSink(f"http://127.0.0.1:{server.server_address[1]}", "job")
    assert isinstance(sink.open(), Opened)
    for step in range(3):
        assert isinstance(sink.send(_update(step)), Delivered)
    sink.close()
    assert 3 == server.patches
    assert 1 == server.connections


def test_a_connection_the_server_closed_while_idle_is_replaced_not_failed(
    serve: Callable[..., _Server],
) -> None:
    """A server that closes a connection while it is idle (after answering a PATCH, without
    saying so) costs a new connection for the next request, never a failed send."""
    server = serve(close_after_response=True)
    sink = HttpSink(f"http://127.0.0.1:{server.server_address[1]}", "job")
    assert isinstance(sink.open(), Opened)  # two GETs over one kept connection
    results = []
    for step in range(3):
        results.append(sink.send(_update(step)))
        server.wait_closed(step + 1)  # closed while idle: the race with the next request is not
    sink.close()
    assert all(isinstance(r, Delivered) for r in results), results
    assert 3 == server.patches
    assert 3 == server.connections  # the opening one (then the first send), two new ones


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    """A server TLS context for 127.0.0.1 and the file of the CA that signed it."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return context, str(ca_file)


def test_https_verifies_the_server_against_the_given_ca(
    serve: Callable[..., _Server], tls: tuple[ssl.SSLContext, str]
) -> None:
    """With the CA file the sink sends over TLS; without it the handshake fails, and the
    send is unreachable (a TLS failure that retrying will not change)."""
    context, ca_file = tls
    server = serve(tls=context)
    url = f"https://127.0.0.1:{server.server_address[1]}"
    sink = HttpSink(url, "job", ca_certs=ca_file)
    assert isinstance(sink.open(), Opened)
    assert isinstance(sink.send(_update(1)), Delivered)
    assert isinstance(sink.send(_update(2)), Delivered)
    sink.close()
    assert 1 == server.connections

    untrusting = HttpSink(url, "job")
    result = untrusting.open()
    untrusting.close()
    assert isinstance(result, RetryLater)
    assert result.unreachable
    assert "TLS handshake" in result.reason
