"""HTTP transport of the job-status sinks: one request, its errors, its credentials.

``HttpTransport`` sends one request and never retries it (no retries, no
redirects): one keep-alive connection per process, held by a urllib3
connection pool of one (created again in a forked child; a ProxyManager when
the environment's proxy applies), timeouts within a deadline, gzip of large
bodies (``sinks/_http/_gzip.py``), and the credentials (a bearer token or a
token file re-read when it changes, else the base URL's userinfo as Basic
auth). urllib3's errors are
mapped here to :class:`~trainreport.exceptions.TransportError` /
:class:`~trainreport.exceptions.ProtocolError`; :func:`classify_failure` turns
a non-2xx answer into a :mod:`trainreport._wire._sink_interface` result
(docs/design.md#failure-handling).
What to send, and what an answer means to the protocol, is ``HttpSink``'s.

Tokens and userinfo never appear in a log event, a result's reason, an
exception message or a ``repr()``: :meth:`HttpTransport.scrub` masks them.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import math
import os
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import attrs
import urllib3

from trainreport._logging import OnceLogger, get_logger
from trainreport._wire._protocol import (
    ENCODING_GZIP,
    ERROR_SERIES_GAP,
    ERROR_STALE_ATTEMPT,
    ERROR_STALE_WRITER,
    base_url_problem,
)
from trainreport._wire._sink_interface import (
    Delivered,
    Opened,
    Rejected,
    Resynchronise,
    RetryLater,
    SendResult,
    Split,
)
from trainreport.exceptions import ProtocolError, SinkError, TransportError
from trainreport.sinks._http._gzip import GZIP_MIN_BYTES, compressor

__all__ = [
    "AMBIGUOUS_USERINFO",
    "GZIP_MIN_BYTES",
    "HttpTransport",
    "Response",
    "UnreachableError",
    "cause",
    "classify_failure",
    "deadline_timeout",
    "error_fields",
    "is_transient",
    "new_pool",
    "one_connection_pool",
    "parse_retry_after",
    "proxy_for",
    "proxy_manager",
    "series_lengths",
    "shown_url",
    "split_userinfo",
    "userinfo_problem",
]

#: Characters of a server's error message kept in a result's reason.
_MESSAGE_CHARS = 200

_log = get_logger()
_once = OnceLogger()
_R = TypeVar("_R", bound=Opened | Delivered | RetryLater | Rejected | Split | Resynchronise)


def parse_retry_after(value: str | None, *, now: datetime.datetime) -> float | None:
    """The delay a ``Retry-After`` header asks for, in seconds (docs/design.md#failure-handling).

    Args:
        value: the header's value: delay-seconds (``"120"``; a non-negative
            decimal such as ``"1.5"`` is accepted too) or an HTTP date
            (``"Wed, 21 Oct 2026 07:28:00 GMT"``), or ``None`` when absent.
        now: the current wall-clock time (timezone-aware, UTC) an HTTP date is
            measured from.

    Returns:
        The delay in seconds (0 for a date in the past), or ``None`` when the
        header is absent or unparseable (the scheduler's backoff applies).
        Never raises.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text[0].isdigit():
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0 and text.replace(".", "", 1).isdigit():
            return seconds
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # Python 3.10 returns None for some unparseable dates
        return None  # type: ignore[unreachable]
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max((when - now).total_seconds(), 0.0)


def error_fields(data: bytes) -> tuple[str | None, str | None, Mapping[str, Any]]:
    """(error code, message, whole body) of an error response; tolerant of non-JSON."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None, None, {}
    if not isinstance(body, dict):
        return None, None, {}
    code, message = body.get("error"), body.get("message")
    return (
        code if isinstance(code, str) else None,
        message if isinstance(message, str) else None,
        body,
    )


def series_lengths(value: object) -> dict[str, int] | None:
    """A ``series_lengths`` object, or ``None`` when it is not ``{str: int >= 0}``."""
    if not isinstance(value, dict):
        return None
    out: dict[str, int] = {}
    for name, length in value.items():
        if not isinstance(name, str) or type(length) is not int or length < 0:
            return None
        out[name] = length
    return out


def is_transient(status: int) -> bool:
    """408, 429 and 5xx but 501 are worth retrying later (docs/design.md#failure-handling)."""
    return status in (408, 429) or (500 <= status < 600 and status != 501)


@attrs.frozen
class Response:
    """What the sink keeps of an HTTP response (header names lower-cased)."""

    status: int
    headers: Mapping[str, str]
    data: bytes


def classify_failure(response: Response, now: datetime.datetime) -> SendResult:
    """Classify a non-2xx response. Pure; never raises.

    See docs/design.md#failure-handling status table.
    """
    status = response.status
    code, message, body = error_fields(response.data)
    reason = f"HTTP {status}"
    if code:
        reason += f" {code[:50]}"
    if message:
        reason += f": {message[:_MESSAGE_CHARS]}"
    if is_transient(status):
        return RetryLater(reason, parse_retry_after(response.headers.get("retry-after"), now=now))
    if status == 413:
        return Split(reason)
    if status == 409:
        if code == ERROR_SERIES_GAP:
            return Resynchronise(reason, series_lengths(body.get("series_lengths")))
        if code in (ERROR_STALE_WRITER, ERROR_STALE_ATTEMPT):  # a later attempt owns the task
            return Rejected(reason, status)
        return Resynchronise(reason)
    return Rejected(reason, status)


class UnreachableError(TransportError):
    """Nothing answered: the connection was refused, the host name did not resolve, or
    the TLS handshake failed."""


#: What ``scheme`` in ``scheme://`` may be (RFC 3986, section 3.1).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")

#: Why a URL with an ``@`` after its authority is refused (the one wording).
AMBIGUOUS_USERINFO = (
    "the URL has an '@' after a raw '/', '?' or '#', so its host is ambiguous: "
    "percent-encode '/', '?', '#' and '@' in the user name and password "
    "(%2F, %3F, %23, %40)"
)


def _authority(url: str) -> tuple[str, str, str]:
    """``(scheme:// or "", authority, the rest)``: the authority ends at the first ``/``,
    ``?`` or ``#`` after ``scheme://`` (RFC 3986, section 3.2). Never raises."""
    scheme, sep, rest = url.partition("://")
    if not (sep and _SCHEME.fullmatch(scheme)):
        scheme, sep, rest = "", "", url
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    return scheme + sep, rest[:end], rest[end:]


def userinfo_problem(url: str) -> str | None:
    """Why ``url``'s userinfo cannot be told from its host, or ``None``. Never raises.

    RFC 3986 ends the authority at the first ``/``, ``?`` or ``#``, so
    ``https://user:s3/cret@host`` names host ``user`` and path ``/cret@host``,
    though ``s3/cret`` was meant as the password. Rather than guess (a wrong
    guess sends the password to another host, or shows it as a path), a URL
    with an ``@`` after its authority is refused: a job-status service's base
    URL has no ``@`` in its path, query or fragment.
    """
    return AMBIGUOUS_USERINFO if "@" in _authority(str(url))[2] else None


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``(url without userinfo, "user:password" percent-decoded or None)``. Never raises.

    The userinfo is what precedes the last ``@`` of the authority (RFC 3986).
    A URL :func:`userinfo_problem` refuses gives ``(shown_url(url), None)``:
    no credentials, and nothing of them in the URL.
    """
    if userinfo_problem(url) is not None:
        return shown_url(url), None
    scheme, authority, rest = _authority(url)
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url, None
    return f"{scheme}{host}{rest}", urllib.parse.unquote(userinfo)


def shown_url(url: str) -> str:
    """``url`` as logs, hints, errors and reprs show it: ``scheme://host[:port][/path]``.

    The one display form of a URL (docs/configuration.md#the-base-url): no userinfo
    (nor a ``***@`` that, copied into a command, would be sent as Basic ``***``),
    no query and no fragment (either may hold a token), no trailing ``/``. A URL
    whose host is ambiguous (:func:`userinfo_problem`) shows as ``scheme://<hidden>``.
    Never raises.
    """
    scheme, authority, rest = _authority(str(url))
    if "@" in rest:
        return f"{scheme}<hidden>"
    path = rest[: min((i for i in map(rest.find, "?#") if i >= 0), default=len(rest))]
    return f"{scheme}{authority.rpartition('@')[2]}{path}".rstrip("/")


def cause(exc: BaseException) -> str:
    """A short description of a urllib3 error: its innermost reason."""
    reason: BaseException = exc
    seen = 0
    while seen < 5:
        inner = getattr(reason, "reason", None) or reason.__context__
        if not isinstance(inner, BaseException):
            break
        reason = inner
        seen += 1
    text = str(reason) or type(reason).__name__
    return f"{type(exc).__name__}: {text[:200]}"


def proxy_for(url: str) -> str | None:
    """The proxy URL the environment configures for ``url``, or ``None`` (``NO_PROXY``)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme)
    if not proxy:
        return None
    host = parts.hostname or ""
    target = f"{host}:{parts.port}" if parts.port else host
    if urllib.request.proxy_bypass_environment(target, proxies):  # type: ignore[attr-defined]
        return None
    return proxy


def deadline_timeout(connect: float, read: float, deadline: float | None) -> urllib3.Timeout:
    """urllib3 timeouts of ``connect``/``read`` seconds, cut to what is left before ``deadline``.

    Raises:
        TransportError: the deadline (``time.monotonic()`` seconds) has passed.
    """
    if deadline is None:
        return urllib3.Timeout(connect=connect, read=read)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TransportError("no time left before the deadline")
    return urllib3.Timeout(
        connect=min(connect, remaining), read=min(read, remaining), total=remaining
    )


#: What urllib3 is told about retries: none, and no redirects followed. A failed request
#: is the scheduler's to retry (docs/design.md#failure-handling); built once, as urllib3
#: would build it from ``retries=False`` on every request.
_NO_RETRIES = urllib3.Retry(total=False, redirect=False)


def one_connection_pool(url: str, ca_certs: str | None) -> urllib3.HTTPConnectionPool:
    """A pool of one kept-alive connection to ``url``'s host, verifying TLS for https.

    urllib3's pool does what a sender holding one connection needs: it replaces a
    connection the server closed while it was idle before using it
    (``is_connection_dropped``), times connecting and sending by the connect timeout and
    the answer by the read timeout (within the total), maps failures to its exceptions
    (``SSLError`` for a failed handshake, ``ProtocolError`` for a connection lost
    mid-request, which it then drops) and hears an answer sent before the whole body
    was read (a 413). ``block=False``: a request never waits for the pool's connection,
    so no deadline is spent there; one driving thread always finds it free.

    Raises:
        urllib3.exceptions.LocationValueError: the URL has no host or a bad port.
    """
    kwargs: dict[str, Any] = {"maxsize": 1, "block": False, "retries": _NO_RETRIES}
    if url.startswith("https:"):
        kwargs.update(cert_reqs="CERT_REQUIRED", ca_certs=ca_certs)
    return urllib3.connection_from_url(url, **kwargs)


def new_pool(url: str, ca_certs: str | None, *, num_pools: int) -> urllib3.PoolManager:
    """A verifying pool for ``url``: a ProxyManager when the environment's proxy applies."""
    proxy = proxy_for(url)
    if proxy is not None:
        return proxy_manager(proxy, ca_certs, num_pools=num_pools)
    kwargs: dict[str, Any] = {"num_pools": num_pools, "maxsize": 1, "cert_reqs": "CERT_REQUIRED"}
    if ca_certs is not None:
        kwargs["ca_certs"] = ca_certs
    return urllib3.PoolManager(**kwargs)


def proxy_manager(proxy: str, ca_certs: str | None, *, num_pools: int) -> urllib3.ProxyManager:
    """A verifying ProxyManager through ``proxy`` (a URL, or ``host:port`` for http).

    Credentials in the proxy URL are sent as ``Proxy-Authorization: Basic``.
    """
    kwargs: dict[str, Any] = {"num_pools": num_pools, "maxsize": 1, "cert_reqs": "CERT_REQUIRED"}
    if ca_certs is not None:
        kwargs["ca_certs"] = ca_certs
    if "://" not in proxy:
        proxy = "http://" + proxy
    parsed = urllib3.util.parse_url(proxy)
    if parsed.auth:
        kwargs["proxy_headers"] = urllib3.util.make_headers(
            proxy_basic_auth=urllib.parse.unquote(parsed.auth)
        )
        proxy = parsed._replace(auth=None).url
    return urllib3.ProxyManager(proxy, **kwargs)


class HttpTransport:
    """One job-status service's HTTP connection: requests, timeouts, credentials.

    Holds no connection pool until the first request, so it pickles (the pool
    is dropped from the pickled state). Driven by one thread; not thread-safe.

    Args:
        base_url: the service's root; credentials in it are split off (see
            :attr:`shown_url`) and sent as ``Authorization: Basic`` when no
            token is given.
        token: bearer token, or ``None``. Never logged, never in ``repr()``.
        token_file: a file holding the token (stripped), re-read when its
            modification time, size or inode changes; used when ``token`` is ``None``.
        headers: extra headers sent with every request.
        auth: a callable returning extra headers for each request; an
            exception from it fails that request with a :class:`SinkError`.
        connect_timeout_seconds: TCP/TLS connect timeout, seconds.
        read_timeout_seconds: timeout of each socket read, seconds.
        ca_certs: a CA bundle file; TLS verification is always on.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: Callable[[], Mapping[str, str]] | None = None,
        connect_timeout_seconds: float = 5.0,
        read_timeout_seconds: float = 10.0,
        ca_certs: str | None = None,
    ) -> None:
        url, userinfo = split_userinfo(base_url.rstrip("/"))
        #: The base URL as shown (repr, logs, hints): :func:`shown_url`.
        self.shown_url = shown_url(base_url)
        self.url = url  # what requests go to: the base URL without its userinfo
        self._userinfo = userinfo  # sent as Basic auth unless there is a token
        self.connect_timeout_seconds = float(connect_timeout_seconds)
        self.read_timeout_seconds = float(read_timeout_seconds)
        self.ca_certs = ca_certs
        self.token = token
        self.token_file = os.fspath(token_file) if token_file is not None else None
        self._token_cache: tuple[tuple[int, int, int], str] | None = None
        self._headers = dict(headers or {})
        self._auth = auth
        # What every request carries, built once (docs/engine.md, "The cost of a send").
        fixed = {
            "User-Agent": "trainreport",
            "Accept": "application/json",
            "Accept-Encoding": ENCODING_GZIP,
        }
        fixed.update(self._headers)
        self._basic = urllib3.util.make_headers(basic_auth=userinfo) if userinfo is not None else {}
        self._fixed_headers = fixed
        parts = urllib.parse.urlsplit(self.url)
        self._prefix, self._netloc = parts.path, parts.netloc
        #: Why the base URL cannot be used, or ``None``.
        self.url_problem = userinfo_problem(base_url) or base_url_problem(self.url)
        #: Compress bodies over :data:`GZIP_MIN_BYTES` (the server accepts gzip).
        self.gzip = False
        #: The gzip compressor (python-isal's when installed, see ``sinks/_http/_gzip.py``).
        self.compress = compressor()
        #: Bytes the last request put on the wire (head and body as sent).
        self.last_bytes = 0
        #: The body of the last request as sent (compressed, if it was), bytes.
        self.last_body_bytes = 0
        # Connection state: created on first use, never pickled. A pool of one connection
        # to the base URL's host (requests name a path), or a ProxyManager when a proxy
        # applies (requests name the whole URL: ``_origin`` + path).
        self.pool: urllib3.HTTPConnectionPool | urllib3.ProxyManager | None = None
        self.pid: int | None = None
        self._origin = ""
        self._no_deadline = urllib3.Timeout(
            connect=self.connect_timeout_seconds, read=self.read_timeout_seconds
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["pool"] = None
        state["pid"] = None
        return state

    @property
    def has_credentials(self) -> bool:
        """A token or token file is configured (for ``repr``: never the token itself)."""
        return self.token is not None or self.token_file is not None

    @property
    def has_userinfo(self) -> bool:
        """The base URL carried userinfo, sent as Basic auth (never the userinfo itself)."""
        return self._userinfo is not None

    def close(self) -> None:
        """Drop the connection pool (closing its idle connections). Idempotent; never raises."""
        pool, self.pool = self.pool, None
        if pool is not None and self.pid == os.getpid():
            try:
                pool.clear() if isinstance(pool, urllib3.PoolManager) else pool.close()
            except Exception as exc:  # closing must not fail the reporter's shutdown
                _log.debug("trainreport.pool_close_failed", error=type(exc).__name__)

    def request(
        self,
        method: str,
        resource: str,
        body: bytes | None,
        deadline: float | None,
    ) -> Response:
        """One request to ``resource`` below the base URL, never retried; sets :attr:`last_bytes`.

        Raises:
            TransportError: connection refused/reset, timeout, TLS or proxy error.
            ProtocolError: the response could not be read as HTTP.
        """
        self.last_bytes = self.last_body_bytes = 0
        timeout = self._no_deadline if deadline is None else self.timeout(deadline)
        pool = self.pool_for_this_process()
        headers = self.request_headers()
        if body is not None:
            headers["Content-Type"] = "application/json"
            if self.gzip and len(body) > GZIP_MIN_BYTES:
                body = self.compress(body)
                headers["Content-Encoding"] = ENCODING_GZIP
            headers["Content-Length"] = str(len(body))
            self.last_body_bytes = len(body)
        target = self._prefix + resource
        self.last_bytes = (
            (len(body) if body is not None else 0)
            + len(method)
            + len(target)
            + len(" HTTP/1.1\r\n")
            + sum(len(k) + len(v) + 4 for k, v in headers.items())
            + len("Host")
            + len(self._netloc)
            + 4
        )
        try:
            response = pool.urlopen(
                method,
                self._origin + target,
                body=body,
                headers=headers,
                timeout=timeout,
                retries=_NO_RETRIES,
                redirect=False,
                preload_content=True,
            )
        except urllib3.exceptions.NewConnectionError as exc:  # before TimeoutError: a subclass
            # Refused, unresolvable or unroutable (a connect timeout is ConnectTimeoutError).
            raise UnreachableError(f"{method} failed to connect: {cause(exc)}") from exc
        except urllib3.exceptions.SSLError as exc:
            # The TLS handshake failed (an https URL of a plain-HTTP server, a certificate
            # that does not verify): no request reached the service, and retrying will
            # not change it, so it counts as unreachable for close_unanswered_seconds.
            raise UnreachableError(f"{method} failed the TLS handshake: {cause(exc)}") from exc
        except urllib3.exceptions.ProxyError as exc:
            raise TransportError(f"{method} failed to connect: {cause(exc)}") from exc
        except urllib3.exceptions.TimeoutError as exc:
            raise TransportError(f"{method} timed out: {type(exc).__name__}") from exc
        except urllib3.exceptions.ProtocolError as exc:
            raise TransportError(f"{method} connection lost: {cause(exc)}") from exc
        except (urllib3.exceptions.DecodeError, urllib3.exceptions.ResponseError) as exc:
            raise ProtocolError(f"{method} response unreadable: {type(exc).__name__}") from exc
        except urllib3.exceptions.LocationValueError:
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportError(f"{method} failed: {cause(exc)}") from exc
        headers = {name.lower(): value for name, value in response.headers.items()}
        return Response(response.status, headers, response.data or b"")

    def timeout(self, deadline: float | None) -> urllib3.Timeout:
        """The request's timeouts, cut to what is left before ``deadline`` (monotonic)."""
        return deadline_timeout(self.connect_timeout_seconds, self.read_timeout_seconds, deadline)

    def pool_for_this_process(self) -> urllib3.HTTPConnectionPool | urllib3.ProxyManager:
        """The pool, created on first use and again in a forked child (never the parent's).

        The parent's pool is dropped in the child, not closed: its socket is the parent's.
        """
        pid = os.getpid()
        if self.pool is None or self.pid != pid:
            self.pool = self.make_pool()
            self.pid = pid
            proxied = isinstance(self.pool, urllib3.ProxyManager)
            self._origin = self.url.removesuffix(self._prefix) if proxied else ""
        return self.pool

    def make_pool(self) -> urllib3.HTTPConnectionPool | urllib3.ProxyManager:
        """A pool of one connection to the base URL's host (:func:`one_connection_pool`), or
        a ProxyManager when the environment's proxy applies to the URL.

        Raises:
            urllib3.exceptions.LocationValueError: the URL has no host or a bad port.
        """
        proxy = proxy_for(self.url)
        if proxy is not None:
            return proxy_manager(proxy, self.ca_certs, num_pools=2)
        return one_connection_pool(self.url, self.ca_certs)

    def request_headers(self) -> dict[str, str]:
        """A fresh dict of the headers this request carries (credentials included)."""
        headers = self._fixed_headers.copy()
        token = self.current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif self._basic:
            headers.update(self._basic)
        if self._auth is not None:
            try:
                extra = dict(self._auth())
            except Exception as exc:  # user code: its failure is a failed request, not a crash
                raise SinkError(f"the auth callable failed: {type(exc).__name__}") from exc
            headers.update({str(k): str(v) for k, v in extra.items()})
        return headers

    def current_token(self) -> str | None:
        """The token: the argument, or the token file's content (re-read when it changes)."""
        if self.token is not None or self.token_file is None:
            return self.token
        path = self.token_file
        try:
            st = os.stat(path)
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if self._token_cache is None or self._token_cache[0] != key:
                with open(path, encoding="utf-8") as handle:
                    self._token_cache = (key, handle.read().strip())
        except (OSError, UnicodeDecodeError) as exc:
            _once.warning(
                ("token_file", path),
                "trainreport.token_file_unreadable",
                path=path,
                error=type(exc).__name__,
            )
            self._token_cache = None
            return None
        return self._token_cache[1] or None

    def scrubbed(self, result: _R) -> _R:
        """``result`` with the token masked in its reason."""
        reason = getattr(result, "reason", None)
        if isinstance(reason, str):
            clean = self.scrub(reason)
            if clean != reason:
                return cast("_R", attrs.evolve(cast(Any, result), reason=clean))
        return result

    def scrub(self, text: str) -> str:
        """``text`` without the token (defence in depth: reasons are logged)."""
        secrets = [self.token, self._token_cache[1] if self._token_cache else None]
        if self._userinfo is not None:  # the password; a user name alone is a token
            user, colon, password = self._userinfo.partition(":")
            secrets += [self._userinfo, password if colon else user]
        for secret in secrets:
            if secret:
                text = text.replace(secret, "***")
        return text[:500]
