"""Fault injection over real sockets: a switchable HTTP/1.1 proxy, a black hole, a closed port.

:class:`FaultProxy` sits between a client and a server and does what the test
asks, switched at run time; every fault is bounded and stops by itself
(counted faults after ``n`` requests, time-boxed ones after their seconds),
and :meth:`FaultProxy.close` ends everything::

    with FaultProxy.for_url(server.url) as proxy:
        proxy.fail_next(3, status=503)
        sink = HttpSink(proxy.url, "job-1")
        ...

The proxy understands just enough HTTP/1.1 for one request at a time per
client connection: the request head and a ``Content-Length`` body (the
client never uses chunked bodies). Each forwarded request opens its own
upstream connection with ``Connection: close`` and reads the response to EOF,
then hands it to the client as a keep-alive response with a
``Content-Length``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import attrs

__all__ = ["FaultProxy", "SeenRequest", "black_hole_server", "closed_port"]

_REASONS = {
    200: "OK",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Content Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
_MAX_HEAD_BYTES = 64 * 1024
_UPSTREAM_TIMEOUT_SECONDS = 30.0


@attrs.frozen
class SeenRequest:
    """One request the proxy read from a client.

    Attributes:
        method: e.g. ``"POST"``.
        path: the request target, e.g. ``"/v1/jobs/j/tasks/t/updates"``.
        headers: header names lower-cased.
        body: the body bytes as received (compressed if the client compressed).
        at: ``time.monotonic()`` when the request was fully read, seconds.
        fault: what the proxy did with it: ``pass``, ``fail``, ``hang``,
            ``reset`` or ``drop``.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    at: float
    fault: str


@attrs.define
class _Fault:
    kind: str = "pass"
    remaining: int | None = None
    skip: int = 0
    status: int = 503
    headers: Mapping[str, str] = attrs.field(factory=dict)
    body: bytes = b""
    path: str | None = None
    until: float | None = None


class FaultProxy:
    """A threaded TCP proxy in front of ``upstream_host:upstream_port`` with switchable faults.

    Args:
        upstream_host: the server's host.
        upstream_port: the server's port.

    Attributes:
        url: ``http://127.0.0.1:<port>`` to point a client at.
        port: the listening port (kept across :meth:`refuse` / :meth:`restore`).

    Thread-safe: tests switch faults while the client's thread sends.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._lock = threading.Condition()
        self._fault = _Fault()
        self._closed = False
        self._seen: list[SeenRequest] = []
        self._clients: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._refused_until: float | None = None
        self._listener: socket.socket | None = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    @classmethod
    def for_url(cls, url: str) -> FaultProxy:
        """A proxy in front of the server at ``url`` (``http://host:port``)."""
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        return cls(parts.hostname, parts.port)

    # --- switching faults -------------------------------------------------------------

    def _set(self, fault: _Fault) -> None:
        with self._lock:
            self._fault = fault
            self._lock.notify_all()

    def pass_through(self) -> None:
        """Forward every request (ends any fault, releases hung requests)."""
        self._set(_Fault())

    def fail_next(
        self,
        n: int,
        status: int = 503,
        headers: Mapping[str, str] | None = None,
        *,
        body: bytes | Mapping[str, Any] | None = None,
        path: str | None = None,
        skip: int = 0,
    ) -> None:
        """Answer the next ``n`` matching requests with ``status`` without forwarding them.

        Args:
            n: how many requests to answer so (then pass-through again).
            status: the HTTP status to answer.
            headers: extra response headers (e.g. ``{"Retry-After": "1"}``).
            body: the response body (a mapping is sent as JSON); default
                ``{"error": "injected", "message": "injected <status>"}``.
            path: only requests whose path contains this string match; others pass.
            skip: let this many matching requests through first.
        """
        if body is None:
            body = {"error": "injected", "message": f"injected {status}"}
        raw = body if isinstance(body, bytes) else json.dumps(dict(body)).encode()
        self._set(
            _Fault(
                "fail",
                remaining=n,
                skip=skip,
                status=status,
                headers=dict(headers or {}),
                body=raw,
                path=path,
            )
        )

    def hang(self, seconds: float = 30.0, *, path: str | None = None) -> None:
        """Read requests and never answer them, for at most ``seconds`` (then close them)."""
        self._set(_Fault("hang", until=time.monotonic() + seconds, path=path))

    def reset_next(self, n: int, *, path: str | None = None, skip: int = 0) -> None:
        """Close the connection of the next ``n`` matching requests abruptly (RST, SO_LINGER 0)."""
        self._set(_Fault("reset", remaining=n, path=path, skip=skip))

    def drop_responses_next(self, n: int, *, path: str | None = None, skip: int = 0) -> None:
        """Forward the next ``n`` matching requests, then close without answering.

        The server applied the request; the client never hears (a lost response).
        """
        self._set(_Fault("drop", remaining=n, path=path, skip=skip))

    def refuse(self, seconds: float | None = None) -> None:
        """Stop listening and drop every open connection (an outage); connects are refused.

        Args:
            seconds: restore by itself after this long (``None``: until :meth:`restore`).
        """
        with self._lock:
            listener, self._listener = self._listener, None
            clients = list(self._clients)
            self._refused_until = None if seconds is None else time.monotonic() + seconds
            self._lock.notify_all()
        if listener is not None:
            _wake(listener)
            _abort(listener)
        for client in clients:
            _wake(client)

    def restore(self) -> None:
        """Listen again on the same port after :meth:`refuse`."""
        with self._lock:
            if self._listener is None and not self._closed:
                self._listener = self._listen(self.port)
                self._refused_until = None
                self._lock.notify_all()

    # --- reading what happened ---------------------------------------------------------

    @property
    def requests(self) -> list[SeenRequest]:
        """Every request read so far, in order (a copy)."""
        with self._lock:
            return list(self._seen)

    @property
    def requests_seen(self) -> int:
        """How many requests were read so far."""
        with self._lock:
            return len(self._seen)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until at least ``count`` requests were read; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._seen) >= count, timeout)

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop listening, close every connection and join the threads. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            listener, self._listener = self._listener, None
            clients = list(self._clients)
            self._lock.notify_all()
        if listener is not None:
            _wake(listener)
            _abort(listener)
        for client in clients:
            _wake(client)
        self._acceptor.join(5)
        for thread in list(self._threads):
            thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- internals ---------------------------------------------------------------------

    @staticmethod
    def _listen(port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
        return sock

    def _accept_loop(self) -> None:
        while True:
            with self._lock:
                while self._listener is None and not self._closed:
                    until = self._refused_until
                    if until is not None and time.monotonic() >= until:
                        self._listener = self._listen(self.port)
                        self._refused_until = None
                        break
                    self._lock.wait(None if until is None else max(until - time.monotonic(), 0))
                if self._closed:
                    return
                listener = self._listener
            assert listener is not None
            try:
                client, _ = listener.accept()
            except OSError:
                continue  # refused or closed meanwhile
            with self._lock:
                if self._is_closed():
                    _abort(client)
                    return
                self._clients.add(client)
                thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
                self._threads.append(thread)
            thread.start()

    def _is_closed(self) -> bool:
        return self._closed

    def _take(self, method: str, path: str) -> _Fault:
        """Decide what to do with one request (and consume a counted fault)."""
        with self._lock:
            fault = self._fault
            if fault.kind == "pass" or (fault.path is not None and fault.path not in path):
                return _Fault()
            if fault.kind == "hang":
                if fault.until is not None and time.monotonic() >= fault.until:
                    self._fault = _Fault()
                    return _Fault()
                return fault
            if fault.skip > 0:
                fault.skip -= 1
                return _Fault()
            assert fault.remaining is not None
            fault.remaining -= 1
            if fault.remaining <= 0:
                self._fault = _Fault()
            return attrs.evolve(fault)

    def _record(
        self, method: str, path: str, headers: dict[str, str], body: bytes, kind: str
    ) -> None:
        with self._lock:
            self._seen.append(SeenRequest(method, path, headers, body, time.monotonic(), kind))
            self._lock.notify_all()

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        try:
            while True:
                request = _read_request(reader)
                if request is None:
                    return
                method, path, headers, head, body = request
                fault = self._take(method, path)
                self._record(method, path, headers, body, fault.kind)
                if fault.kind == "fail":
                    client.sendall(_response(fault.status, fault.headers, fault.body))
                elif fault.kind == "reset":
                    return  # the finally block aborts the connection
                elif fault.kind == "hang":
                    self._hang_until_released(fault)
                    return
                else:
                    answer = self._forward(head, body)
                    if fault.kind == "drop" or answer is None:
                        with contextlib.suppress(OSError):
                            client.shutdown(socket.SHUT_RDWR)
                        return
                    client.sendall(answer)
        except OSError:
            return
        finally:
            with self._lock:
                self._clients.discard(client)
            with contextlib.suppress(OSError):
                reader.close()
            _abort(client)

    def _hang_until_released(self, fault: _Fault) -> None:
        with self._lock:
            while not self._closed and self._fault is fault:
                remaining = None if fault.until is None else fault.until - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self._fault = _Fault()
                    return
                self._lock.wait(remaining)

    def _forward(self, head: bytes, body: bytes) -> bytes | None:
        """Send one request upstream on a fresh connection; the response for a keep-alive client."""
        lines = head.split(b"\r\n")
        kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith(b"connection:")]
        request = b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]) + body
        try:
            with socket.create_connection(self._upstream, timeout=_UPSTREAM_TIMEOUT_SECONDS) as up:
                up.sendall(request)
                chunks = []
                while True:
                    data = up.recv(65536)
                    if not data:
                        break
                    chunks.append(data)
        except OSError:
            return None
        raw = b"".join(chunks)
        response_head, sep, response_body = raw.partition(b"\r\n\r\n")
        if not sep:
            return None
        response_lines = response_head.split(b"\r\n")
        out = [response_lines[0]]
        chunked = False
        for line in response_lines[1:]:
            name = line.split(b":", 1)[0].strip().lower()
            if name in (b"connection", b"content-length", b"keep-alive"):
                continue
            if name == b"transfer-encoding":
                chunked = True
            out.append(line)
        if not chunked:
            out.append(b"Content-Length: %d" % len(response_body))
        return b"\r\n".join([*out, b"", b""]) + response_body


def _read_request(reader: Any) -> tuple[str, str, dict[str, str], bytes, bytes] | None:
    """(method, path, headers, raw head, body) of the next request, or None at EOF."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = reader.readline(_MAX_HEAD_BYTES)
        if not line:
            return None
        size += len(line)
        if size > _MAX_HEAD_BYTES:
            return None
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue  # tolerate blank lines between requests
            break
        lines.append(line.rstrip(b"\r\n"))
    method, target, _version = lines[0].decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    body = reader.read(length) if length else b""
    if len(body) < length:
        return None
    return method, target, headers, b"\r\n".join(lines), body


def _response(status: int, headers: Mapping[str, str], body: bytes) -> bytes:
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Injected')}"]
    head.append("Content-Type: application/json")
    head.append(f"Content-Length: {len(body)}")
    head.extend(f"{k}: {v}" for k, v in headers.items())
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _wake(sock: socket.socket) -> None:
    """Shut ``sock`` down so that a thread blocked on it (accept, recv) returns; never raises."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _abort(sock: socket.socket) -> None:
    """Close ``sock`` with an RST (SO_LINGER 0) from the thread that owns it; never raises."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def black_hole_server() -> Iterator[str]:
    """A server that accepts connections and never answers; yields its URL.

    Connections are held until the block ends, then closed.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        _wake(listener)
        _abort(listener)
        thread.join(5)
        for conn in held:
            _abort(conn)


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A local port with nothing listening (connects are refused); yields the port number.

    The port stays bound (not listening) for the block, so nothing else takes it.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()
