"""Slow clients: a deadline for each request's head and body, and a cap on open connections.

uvicorn bounds how long an idle keep-alive connection stays open, but nothing
bounds a client that sends its request slowly: one byte of header every few
seconds (slowloris) or a body that trickles in holds a connection, a file
descriptor and, for a body, a request task forever. This module adds the
missing deadlines at the protocol level, where they apply to every request
whether or not the application reads its body (``docs/server.md``, "Security"):

* **head**: from the moment the connection opens, or the first byte of a
  further request on a kept-alive connection arrives, the whole request head
  (request line and headers) must arrive within ``head_timeout_seconds``;
* **body**: from the end of the head, the whole body must arrive within
  ``body_timeout_seconds`` (a total, not an idle timeout: a trickle does not
  extend it);
* **connections**: beyond ``max_connections`` open connections, a new one is
  answered 503 (``Retry-After: 1``) and closed at once, so slow connections can
  never use up the process's file descriptors.

A missed deadline answers 408 ``request_timeout`` (unless a response has
already started) and closes the connection. The protocol is uvicorn's h11
protocol with timers added; what it relies on (``conn``, ``cycle``,
``connections``, ``on_response_complete``) is pinned by
``tests/server/test_server_limits.py`` against the uvicorn version installed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["guarded_protocol"]

_HEAD, _BODY = "head", "body"


def _raw_response(status: int, reason: str, error: dict[str, str], extra: str = "") -> bytes:
    """A complete ``Connection: close`` JSON response, for states where h11 cannot send one."""
    body = json.dumps(error).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode("ascii") + body


_TIMEOUT_ERROR = {
    "error": "request_timeout",
    "message": "the request was not received in time; the connection is closed",
}
_REQUEST_TIMEOUT = _raw_response(408, "Request Timeout", _TIMEOUT_ERROR)
_TOO_MANY = _raw_response(
    503,
    "Service Unavailable",
    {"error": "too_many_connections", "message": "too many open connections; retry shortly"},
    "retry-after: 1\r\n",
)


def guarded_protocol(
    *, head_timeout_seconds: float, body_timeout_seconds: float, max_connections: int
) -> type[asyncio.Protocol]:
    """An HTTP/1.1 protocol class for ``uvicorn.Config(http=...)`` with the limits above.

    Args:
        head_timeout_seconds: time to receive a request's head, in seconds (> 0).
        body_timeout_seconds: time to receive a request's body after its head,
            in seconds (> 0).
        max_connections: open connections allowed at once (>= 1); more get 503.

    Raises:
        ValueError: a limit out of range.
    """
    if not (head_timeout_seconds > 0 and body_timeout_seconds > 0 and max_connections >= 1):
        raise ValueError("timeouts must be positive and max_connections at least 1")

    class GuardedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol with head and body deadlines and a connection cap."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._timer: asyncio.TimerHandle | None = None
            self._phase: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(_TOO_MANY)
                transport.close()
                return
            self._arm(_HEAD)

        def data_received(self, data: bytes) -> None:
            if self._phase is None and self.conn.their_state is h11.IDLE:
                self._arm(_HEAD)  # the first bytes of a further request on this connection
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _follow(self) -> None:
            """Move the deadline along with the client's side of the h11 state machine."""
            state = self.conn.their_state
            if state is h11.IDLE:
                return  # (more of) a head is awaited; a running head deadline keeps running
            if state is h11.SEND_BODY:
                if self._phase != _BODY:
                    self._arm(_BODY)
                return
            self._disarm()  # the request is in (DONE), or the connection is ending

        def _arm(self, phase: str) -> None:
            self._disarm()
            seconds = head_timeout_seconds if phase == _HEAD else body_timeout_seconds
            self._phase = phase
            self._timer = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._phase = None, None

        def _expired(self) -> None:
            phase = self._phase
            self._timer, self._phase = None, None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if phase == _BODY and cycle is not None and not cycle.response_started:
                # The application is still waiting for the body: it now sees a
                # disconnect (and its own answer is dropped); the client gets a 408.
                cycle.disconnected = True
                cycle.message_event.set()
                self.transport.write(self._h11_timeout_response())
            elif phase == _HEAD:
                self.transport.write(_REQUEST_TIMEOUT)
            self.transport.close()

        def _h11_timeout_response(self) -> bytes:
            body = json.dumps(_TIMEOUT_ERROR).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ]
            try:
                out = self.conn.send(h11.Response(status_code=408, headers=headers))
                out = (out or b"") + (self.conn.send(h11.Data(data=body)) or b"")
                return out + (self.conn.send(h11.EndOfMessage()) or b"")
            except h11.LocalProtocolError:
                return b""

    return GuardedH11Protocol
