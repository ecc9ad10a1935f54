"""The sink's one keep-alive connection (a urllib3 pool of one, sinks/_http/_transport.py).

Against real servers: a standard-library HTTP/1.1 server stands in for a job-status API
where the reference server cannot do what is pinned: close idle connections without
saying so, drop a connection before answering, redirect, or serve TLS with a test CA
(trustme). No mocks.
"""

from __future__ import annotations

import http.server
import os
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import urllib3

from helpers import in_a_forked_child
from trainreport import Delivered, Opened, Rejected, RetryLater
from trainreport._wire._sink_interface import Update
from trainreport.sinks._http._sink import HttpSink

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
            drop, self.server.drop_next = self.server.drop_next, False
            redirect = self.server.redirect
        if drop:  # the request was read; the connection closes before any answer
            self.close_connection = True
        elif redirect:
            self.send_response(307)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
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
        self.drop_next = False
        self.redirect = False

    def shutdown_request(self, request: Any) -> None:
        """Count a connection closed once its socket is shut down (the client can see it):
        ``finish()`` runs before, and a count there let the next request race the close."""
        super().shutdown_request(request)
        with self.lock:
            self.closed += 1
            self.lock.notify_all()

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


def test_the_sink_holds_one_urllib3_pool_of_one_connection_that_never_retries(
    serve: Callable[..., _Server],
) -> None:
    """The connection is urllib3's pool for the base URL's host: one connection kept, never
    waited for, no retries and no redirects inside urllib3 (the scheduler decides)."""
    server = serve()
    sink = HttpSink(f"http://127.0.0.1:{server.server_address[1]}/prefix", "job")
    assert isinstance(sink.open(), Opened)
    pool = sink._transport.pool
    assert isinstance(pool, urllib3.HTTPConnectionPool)
    assert ("127.0.0.1", server.server_address[1]) == (pool.host, pool.port)
    assert (1, False) == (pool.pool.maxsize if pool.pool else None, pool.block)
    assert isinstance(pool.retries, urllib3.Retry)
    assert (False, False) == (pool.retries.total, pool.retries.redirect)
    sink.close()


def test_a_connection_closed_before_any_answer_fails_the_send_once_and_is_replaced(
    serve: Callable[..., _Server],
) -> None:
    """The keep-alive race as the client sees it (the server read the request, then closed
    the connection without answering; RFC 9112 section 9.3.1): the send is a RetryLater for
    the scheduler to retry, the request went out once (no retry inside urllib3), and the
    next send connects anew and is delivered."""
    server = serve()
    sink = HttpSink(f"http://127.0.0.1:{server.server_address[1]}", "job")
    assert isinstance(sink.open(), Opened)
    server.drop_next = True
    lost = sink.send(_update(1))
    assert 1 == server.patches
    delivered = sink.send(_update(2))
    sink.close()
    assert isinstance(lost, RetryLater), lost
    assert "connection lost" in lost.reason
    assert not lost.unreachable
    assert isinstance(delivered, Delivered), delivered
    assert 2 == server.patches
    assert 2 == server.connections


def test_a_redirect_is_not_followed(serve: Callable[..., _Server]) -> None:
    """A 307 answer is the sink's to judge (a rejection), never followed by urllib3."""
    server = serve()
    server.redirect = True
    sink = HttpSink(f"http://127.0.0.1:{server.server_address[1]}", "job")
    assert isinstance(sink.open(), Opened)
    result = sink.send(_update(1))
    sink.close()
    assert Rejected("HTTP 307", 307) == result
    assert 1 == server.patches


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12+: fork() with threads
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() exists on Linux and macOS only")
def test_a_forked_child_connects_anew_and_leaves_the_parents_connection_alone(
    serve: Callable[..., _Server], tmp_path: Path
) -> None:
    """A child sends over a connection of its own (the pool is made again for its pid); the
    parent's kept-alive connection still serves the parent afterwards."""
    server = serve()
    sink = HttpSink(f"http://127.0.0.1:{server.server_address[1]}", "job")
    assert isinstance(sink.open(), Opened)
    assert isinstance(sink.send(_update(1)), Delivered)
    assert "Delivered" == in_a_forked_child(tmp_path, lambda: type(sink.send(_update(2))).__name__)
    assert isinstance(sink.send(_update(3)), Delivered)
    sink.close()
    assert 3 == server.patches
    assert 2 == server.connections  # the parent's, reused before and after; the child's


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
