"""Browser-facing defences of the reference server: ``Host``, ``Origin`` and JSON-only writes.

A server on loopback without a token is still reachable from every web page
the user's browser opens. Three rules close that door (``docs/server.md``,
"Security"), checked before authentication and before any body is read:

1. **Host.** The ``Host`` header must name the server: a loopback name or
   address (``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``::1``), the
   address it listens on, or a name given with ``--allowed-hosts``. Anything
   else is 421: a page on ``evil.example`` whose DNS is rebound to 127.0.0.1
   reaches the socket but gets no answer, so it reads nothing.
2. **Origin.** A request that carries an ``Origin`` (browsers add it to every
   cross-origin request and to every same-origin one but GET/HEAD) must come
   from the server's own origin, the scheme and ``Host`` it was reached at
   (so a TLS proxy that keeps ``Host`` works); else 403. Non-browser clients
   send no ``Origin`` and are unaffected.
3. **JSON only.** Every state-changing request (any method but GET, HEAD and
   OPTIONS) needs ``Content-Type: application/json``, else 415. A cross-origin
   page can send ``text/plain``, form or multipart bodies without asking
   (a "simple" request); ``application/json`` needs a CORS preflight, which
   this server never grants (it sends no ``Access-Control-Allow-*`` headers).

Rule 2 alone stops today's browsers; rule 3 also stops a browser or plugin
that omits ``Origin``, and rule 1 stops DNS rebinding, which rule 2 cannot see
(the rebound page is same-origin with itself).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from trainreport.server._wire import ApiError

__all__ = ["RequestGuard", "allowed_host_names"]

#: Methods that change nothing; every other method needs a JSON body type.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def allowed_host_names(listen_host: str | None, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names (lower case, no port, IPv6 without brackets) the server answers for.

    Loopback names and addresses are always answered for (see
    :func:`is_loopback_name`); this returns what comes on top.

    Args:
        listen_host: the address the server listens on (``--host``); a
            wildcard (``0.0.0.0``, ``::``) or ``None`` adds nothing.
        extra: further names (``--allowed-hosts``); ``"*"`` answers any host.

    Raises:
        ValueError: an empty name or one that contains a port, a path or spaces.
    """
    names: set[str] = set()
    for raw in extra:
        name = raw.strip().lower()
        if name == "*":
            names.add(name)
            continue
        if not name or any(c in name for c in "/ \t@?#") or _split_host(name)[1] is not None:
            raise ValueError(f"not a host name: {raw!r} (give names without port or scheme)")
        names.add(_strip_brackets(name))
    if listen_host and listen_host not in ("0.0.0.0", "::", ""):  # noqa: S104 - a comparison
        names.add(_strip_brackets(listen_host.lower()))
    return frozenset(names)


def is_loopback_name(host: str) -> bool:
    """``localhost``, ``*.localhost`` (RFC 6761) or a loopback address. Never raises."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _strip_brackets(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _split_host(value: str) -> tuple[str, int | None]:
    """``"Host: name[:port]"`` -> (name in lower case without brackets, port or None).

    Raises:
        ValueError: a port that is not a number.
    """
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError("unterminated IPv6 literal")
        host, rest = value[1:end], value[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError("junk after an IPv6 literal")
        return host, int(rest[1:])
    if value.count(":") > 1:  # a bare IPv6 address (not valid in Host, but unambiguous)
        return value, None
    host, sep, port = value.partition(":")
    return host, int(port) if sep else None


class RequestGuard:
    """ASGI middleware enforcing the three rules above on every HTTP request.

    Args:
        app: the wrapped application.
        allowed_hosts: from :func:`allowed_host_names`; loopback is always allowed.

    Refusals are JSON errors in the API's shape: ``unknown_host`` (421),
    ``cross_origin`` (403), ``unsupported_media_type`` (415).
    """

    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str]) -> None:
        self._app = app
        self._allowed = allowed_hosts
        self._any_host = "*" in allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name, value)
        error = self._check(scope, headers)
        if error is not None:
            response = JSONResponse(error.body(), status_code=error.status_code)
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _check(self, scope: Scope, headers: dict[bytes, bytes]) -> ApiError | None:
        host_header = headers.get(b"host", b"").decode("latin-1")
        try:
            host, port = _split_host(host_header)
        except ValueError:
            host, port = "", None
        if not host or not (self._any_host or host in self._allowed or is_loopback_name(host)):
            return ApiError(
                421,
                "unknown_host",
                "this server does not answer for that Host header; start it with "
                "--allowed-hosts to add a name",
            )
        origin = headers.get(b"origin")
        if origin is not None and not _same_origin(origin.decode("latin-1"), host, port):
            return ApiError(
                403,
                "cross_origin",
                "requests from another origin are refused (the server grants no CORS)",
            )
        if scope.get("method", "GET") not in SAFE_METHODS:
            media_type = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            if media_type != b"application/json":
                return ApiError(
                    415,
                    "unsupported_media_type",
                    "a request that changes state needs 'Content-Type: application/json'",
                )
        return None


def _same_origin(origin: str, host: str, port: int | None) -> bool:
    """Whether ``Origin`` names the server as reached: the same host and port as ``Host``."""
    try:
        parts = urllib.parse.urlsplit(origin.strip())
        scheme = parts.scheme.lower()
        origin_port = parts.port
    except ValueError:
        return False
    if scheme not in _DEFAULT_PORTS or parts.hostname is None or parts.path or parts.query:
        return False
    default = _DEFAULT_PORTS[scheme]
    return parts.hostname.lower() == host and (origin_port or default) == (port or default)
