"""One keep-alive connection to a destination, driven without urllib3's pool machinery.

A sink sends from one thread, over one connection, and never retries a request
(docs/design.md#failure-handling). urllib3's connection pool serves many threads,
connections, retries and redirects, and that generality costs about a fifth of a small
send's CPU on the reporter thread (its queue, retry, timeout and release objects;
``benchmarks/bench_send.py``, docs/engine.md "The cost of a send"). :class:`KeepAlive`
does, for such a request, what the pool does, with urllib3's own connection and
response classes (TLS verification, TCP_NODELAY, header and body handling are theirs):

* reuse the connection unless the server closed it while it was idle;
* the connect timeout while connecting and sending, the read timeout (within the
  total, when there is one) while waiting for the answer;
* urllib3's exceptions for what the pool would report: ``SSLError`` for a failed TLS
  handshake, ``ReadTimeoutError``, ``ProtocolError`` for a connection lost mid-request
  (the connection is then dropped);
* a body the server stops reading (it answered early, a 413) is not a failure: its
  answer is read.

A proxy is not handled here: the transport sends through urllib3's ProxyManager then.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import ssl
import weakref
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ProtocolError, ReadTimeoutError, SSLError
from urllib3.util.ssl_match_hostname import CertificateError

__all__ = ["KeepAlive"]


class KeepAlive:
    """Requests over one reused connection to ``host:port``.

    Args:
        scheme: ``"http"`` or ``"https"``.
        host: the host name or address.
        port: the TCP port, or ``None`` for the scheme's default.
        ca_certs: a CA bundle file for https (``None``: the system's); TLS
            verification is always on.

    Not thread-safe (one reporter thread drives it); holds no socket until the first
    request.
    """

    def __init__(self, scheme: str, host: str, port: int | None, ca_certs: str | None) -> None:
        self._scheme = scheme
        self._host = host
        self._port = port
        self._ca_certs = ca_certs
        # The connection, in a slot a finalizer closes when the KeepAlive is dropped
        # unclosed (as urllib3's pools close theirs).
        self._slot: list[HTTPConnection | None] = [None]
        weakref.finalize(self, _close_slot, self._slot)

    def _connection(self) -> HTTPConnection:
        conn = self._slot[0]
        if conn is not None and conn.is_connected:
            return conn
        if conn is not None:  # closed by the server while idle, or never connected
            conn.close()
        if self._scheme == "https":
            conn = HTTPSConnection(
                self._host, self._port, cert_reqs="CERT_REQUIRED", ca_certs=self._ca_certs
            )
        else:
            conn = HTTPConnection(self._host, self._port)
        self._slot[0] = conn
        return conn

    def close(self) -> None:
        """Close the connection, if any. Idempotent; never raises."""
        _close_slot(self._slot)

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: urllib3.Timeout,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request to ``target`` (a path) and read its whole answer; never retried.

        Raises:
            urllib3.exceptions.HTTPError: ``NewConnectionError``,
                ``ConnectTimeoutError``, ``SSLError``, ``ReadTimeoutError``,
                ``ProtocolError`` and the response's own errors, as the pool raises them.
        """
        conn = self._connection()
        timing = timeout.clone()
        timing.start_connect()
        conn.timeout = urllib3.Timeout.resolve_default_timeout(timing.connect_timeout)
        try:
            try:
                if self._scheme == "https" and conn.is_closed:
                    conn.connect()  # the handshake's failures are told apart from the request's
                conn.request(method, target, body=body, headers=headers, preload_content=True)
            except BrokenPipeError:
                pass  # the server stopped reading the body and answered (a 413): read it
            except OSError as exc:
                if exc.errno not in (errno.EPROTOTYPE, errno.ECONNRESET):
                    raise
            read_timeout = timing.read_timeout
            if not conn.is_closed:
                if read_timeout == 0:  # the total is spent: a zero timeout would not block
                    raise ReadTimeoutError(_NO_POOL, target, "Read timed out. (read timeout=0)")
                conn.timeout = read_timeout
            try:
                return conn.getresponse()
            except (TimeoutError, ssl.SSLError) as exc:
                if isinstance(exc, TimeoutError) or "timed out" in str(exc):
                    raise ReadTimeoutError(
                        _NO_POOL, target, f"Read timed out. (read timeout={read_timeout})"
                    ) from exc
                raise
        except (ssl.SSLError, CertificateError) as exc:
            self.close()
            raise SSLError(exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise ProtocolError("Connection aborted.", exc) from exc
        except BaseException:
            self.close()
            raise


#: urllib3's timeout error names a pool; a KeepAlive has none.
_NO_POOL: Any = None


def _close_slot(slot: list[HTTPConnection | None]) -> None:
    conn, slot[0] = slot[0], None
    if conn is not None:
        with contextlib.suppress(OSError):  # closing must never fail a sink
            conn.close()
