"""HttpSink: a job-status service over HTTP with urllib3 (DESIGN §2, §5, §7, §8).

The sink speaks two wire modes (``docs/protocol.md``):

* baseline: ``GET`` the task at open, ``PATCH`` it on every send with the
  full-state body; any job-status API with a shallow-merged ``status_details``
  understands it;
* ``series-suffix-v1`` (the reference server's extension, discovered from
  ``GET /v1/capabilities``): ``POST .../writers`` at open issues a writer
  generation, and every send is ``POST .../updates`` carrying per-series
  suffixes, a strictly increasing sequence number, and at most
  ``max_request_bytes`` of body (larger updates are split per series and per
  run of points).

The sink decides nothing about retries (STYLE habit 9): every request goes out
once (``retries=False``, no redirects) and its outcome is classified into a
:mod:`trainreport._sink` result; the reporter's scheduler owns backoff.
urllib3 errors are mapped to :class:`~trainreport.exceptions.TransportError` /
:class:`~trainreport.exceptions.ProtocolError` inside, and turned into
results at the boundary: :meth:`HttpSink.open` and :meth:`HttpSink.send`
never raise.

The token (``token=`` or a token file re-read when it changes) is sent as
``Authorization: Bearer ...``; credentials in the base URL's userinfo are sent
as ``Authorization: Basic ...`` when there is no token. Neither appears in any
log event, result reason, exception message or ``repr()``.
"""

from __future__ import annotations

import datetime
import email.utils
import gzip
import json
import math
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import attrs
import cattrs
import urllib3

from trainreport._attempt import AttemptIdentity, current_attempt
from trainreport._logging import OnceLogger, get_logger
from trainreport._payloads import (
    UpdateResponse,
    WriterResponse,
    encode_patch_body,
    encode_suffix_body,
    encode_suffix_series,
    structure_response,
)
from trainreport._sink import (
    CAPABILITY_GZIP,
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Rejected,
    Resynchronise,
    RetryLater,
    SendResult,
    SeriesUpdate,
    Sink,
    Split,
    Update,
)
from trainreport.exceptions import ConfigError, ProtocolError, SinkError, TransportError

__all__ = ["DEFAULT_TASK_PATH", "HttpSink", "parse_retry_after"]

#: The task resource of the reference server and of the baseline job-status API.
DEFAULT_TASK_PATH = "/v1/jobs/{job_id}/tasks/{task_id}"
#: Bodies above this size (bytes, before compression) are gzip-compressed when allowed.
GZIP_MIN_BYTES = 1024
#: The smallest request cap (bytes) a 413 halves down to before giving up with ``Split``.
MIN_SPLIT_BYTES = 16 * 1024
#: Characters of a server's error message kept in a result's reason.
_MESSAGE_CHARS = 200
#: 413 answers one send absorbs (halving its cap each time) before returning ``Split``.
_MAX_413 = 8
#: Bytes reserved in a split request for the envelope's variable parts (sequence digits).
_ENVELOPE_SLACK = 64

_log = get_logger()
_once = OnceLogger()
_R = TypeVar("_R", bound=Opened | Delivered | RetryLater | Rejected | Split | Resynchronise)


# --- pure helpers ---------------------------------------------------------------------


def parse_retry_after(value: str | None, *, now: datetime.datetime) -> float | None:
    """The delay a ``Retry-After`` header asks for, in seconds (DESIGN §8).

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


def _error_fields(data: bytes) -> tuple[str | None, str | None, Mapping[str, Any]]:
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


def _lengths(value: object) -> dict[str, int] | None:
    """A ``series_lengths`` object, or ``None`` when it is not ``{str: int >= 0}``."""
    if not isinstance(value, dict):
        return None
    out: dict[str, int] = {}
    for name, length in value.items():
        if not isinstance(name, str) or type(length) is not int or length < 0:
            return None
        out[name] = length
    return out


def _is_transient(status: int) -> bool:
    """408, 429 and 5xx but 501 are worth retrying later (DESIGN §8)."""
    return status in (408, 429) or (500 <= status < 600 and status != 501)


@attrs.frozen
class _Response:
    """What the sink keeps of an HTTP response (header names lower-cased)."""

    status: int
    headers: Mapping[str, str]
    data: bytes


def _classify_failure(response: _Response, now: datetime.datetime) -> SendResult:
    """Classify a non-2xx response (DESIGN §8 status table). Pure; never raises."""
    status = response.status
    code, message, body = _error_fields(response.data)
    reason = f"HTTP {status}"
    if code:
        reason += f" {code[:50]}"
    if message:
        reason += f": {message[:_MESSAGE_CHARS]}"
    if _is_transient(status):
        return RetryLater(reason, parse_retry_after(response.headers.get("retry-after"), now=now))
    if status == 413:
        return Split(reason)
    if status == 409:
        if code == "series_gap":
            return Resynchronise(reason, _lengths(body.get("series_lengths")))
        if code in ("stale_writer", "stale_attempt"):  # a later attempt owns the task
            return Rejected(reason, status)
        return Resynchronise(reason)
    return Rejected(reason, status)


def _piece_bytes(series: SeriesUpdate) -> int:
    """Encoded size of one series member ``"name":{...},`` of a suffix body, in bytes."""
    return (
        len(json.dumps(series.name, ensure_ascii=False).encode())
        + 2
        + len(encode_suffix_series(series).encode())
    )


def _slice(series: SeriesUpdate, start: int, stop: int) -> SeriesUpdate:
    """Points ``[start, stop)`` of ``series`` as a suffix at ``offset + start``."""
    return SeriesUpdate(
        series.name,
        series.offset + start,
        series.steps[start:stop],
        series.epochs[start:stop],
        series.values[start:stop],
    )


def _head_that_fits(series: SeriesUpdate, space: int) -> tuple[SeriesUpdate | None, SeriesUpdate]:
    """The longest prefix of ``series`` (>= 1 point, not all) whose member fits ``space`` bytes.

    Returns:
        (head, rest); head is ``None`` when not even one point fits.
    """
    n = len(series)
    if n <= 1 or space <= 0:
        return None, series
    per_point = max(_piece_bytes(series) / n, 1.0)
    k = min(int(space / per_point * 0.95), n - 1)
    while k >= 1:
        head = _slice(series, 0, k)
        if _piece_bytes(head) <= space:
            return head, _slice(series, k, n)
        k = min(k - 1, int(k * 0.8))
    return None, series


# --- the sink ---------------------------------------------------------------------------


class HttpSink(Sink):
    """Sends a run's updates to a job-status service over HTTP (DESIGN §2, §5).

    Holds no connection pool, lock or thread until :meth:`open`, so an
    unstarted sink pickles (the token and any credentials in the base URL are
    part of the pickled state: treat a pickle like the token itself). Driven by
    one thread (the reporter thread); not thread-safe otherwise.

    Args:
        base_url: the service's root, ``http://host:port`` or
            ``https://host/prefix``; API paths are appended to it. Credentials
            in it (``https://user:password@host``) are sent as
            ``Authorization: Basic`` unless a token is given, and shown as
            ``***`` everywhere (``base_url``, ``repr()``, logs, reasons).
        job_id: the job's id (URL-quoted into ``task_path``).
        task_id: the task's id within the job (default ``"train"``).
        token: bearer token sent as ``Authorization: Bearer <token>``, or
            ``None``. Never logged, never in ``repr()``.
        token_file: a file holding the token (stripped), re-read whenever its
            modification time or size changes (job systems rotate tokens);
            used when ``token`` is ``None``.
        task_path: the task resource as a template with ``{job_id}`` and
            ``{task_id}`` (in-house job APIs differ).
        headers: extra headers sent with every request.
        auth: a callable returning extra headers for each request (in-house
            authentication); it is called on the reporter thread, and an
            exception from it makes that request a :class:`RetryLater`.
        connect_timeout_seconds: TCP/TLS connect timeout, seconds (> 0).
        read_timeout_seconds: timeout of each socket read, seconds (> 0).
        max_request_bytes: cap on one request's body in series-suffix mode,
            bytes before compression (also bounded by the server's advertised
            limits); larger updates are split per series and per run of points.
        ca_certs: a CA bundle file to verify the server with; TLS verification
            is always on (the system's CAs when ``None``).
        use_extension: ``False`` forces the baseline ``PATCH`` mode even when
            the server offers ``series-suffix-v1``.
        attempt: the attempt identity this writer claims the task with
            (series-suffix mode): a server refuses a claim older than the
            current writer's (409 ``stale_attempt``), so a zombie of an earlier
            attempt that opens late never takes the task. ``None`` reads it at
            the first :meth:`open`: the attempt number from
            ``TRAINREPORT_ATTEMPT``, ``TORCHELASTIC_RESTART_COUNT``,
            ``SLURM_RESTART_COUNT`` or ``AWS_BATCH_JOB_ATTEMPT``, and the
            process's start time.

    Raises:
        ConfigError: a non-positive timeout or request cap, or a ``task_path``
            that does not format with ``job_id`` and ``task_id``.
    """

    def __init__(
        self,
        base_url: str,
        job_id: str,
        task_id: str = "train",
        token: str | None = None,
        *,
        token_file: str | os.PathLike[str] | None = None,
        task_path: str = DEFAULT_TASK_PATH,
        headers: Mapping[str, str] | None = None,
        auth: Callable[[], Mapping[str, str]] | None = None,
        connect_timeout_seconds: float = 5.0,
        read_timeout_seconds: float = 10.0,
        max_request_bytes: int = 1 << 20,
        ca_certs: str | None = None,
        use_extension: bool = True,
        attempt: AttemptIdentity | None = None,
    ) -> None:
        problems = []
        for name, value in (
            ("connect_timeout_seconds", connect_timeout_seconds),
            ("read_timeout_seconds", read_timeout_seconds),
            ("max_request_bytes", max_request_bytes),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                problems.append(f"expected a positive number @ $.{name}")
        try:
            path = task_path.format(
                job_id=urllib.parse.quote(str(job_id), safe=""),
                task_id=urllib.parse.quote(str(task_id), safe=""),
            )
        except (KeyError, IndexError, ValueError):
            problems.append("expected a template using only {job_id} and {task_id} @ $.task_path")
            path = ""
        if problems:
            raise ConfigError(problems)
        url, userinfo = _split_userinfo(base_url.rstrip("/"))
        #: The base URL as shown (repr, logs): any userinfo replaced by ``***``.
        self.base_url = url if userinfo is None else url.replace("://", "://***@", 1)
        self._url = url  # what requests go to: the base URL without its userinfo
        self._userinfo = userinfo  # sent as Basic auth unless there is a token
        self.job_id = str(job_id)
        self.task_id = str(task_id)
        self.task_path = task_path
        self.connect_timeout_seconds = float(connect_timeout_seconds)
        self.read_timeout_seconds = float(read_timeout_seconds)
        self.max_request_bytes = int(max_request_bytes)
        self.ca_certs = ca_certs
        self.use_extension = use_extension
        self.attempt = attempt
        self._token = token
        self._token_file = os.fspath(token_file) if token_file is not None else None
        self._token_cache: tuple[tuple[int, int, int], str] | None = None
        self._headers = dict(headers or {})
        self._auth = auth
        self._path = "/" + path.lstrip("/")
        parts = urllib.parse.urlsplit(self._url)
        self._prefix, self._netloc = parts.path, parts.netloc
        self._url_problem = (
            None
            if parts.scheme in ("http", "https") and parts.hostname
            else "the base URL is not http(s)://host[:port][/prefix]"
        )
        # Connection state: created in open(), never pickled.
        self._pool: urllib3.PoolManager | None = None
        self._pid: int | None = None
        # Protocol state learned at open().
        self._generation: int | None = None
        self._gzip = False
        self._cap = self.max_request_bytes
        self._sequence = 0
        self._last_bytes = 0

    def __repr__(self) -> str:
        token = "'***'" if self._token is not None or self._token_file is not None else "None"
        return (
            f"HttpSink({self.base_url!r}, job_id={self.job_id!r}, task_id={self.task_id!r}, "
            f"token={token})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None
        state["_pid"] = None
        return state

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HttpSink:
        """The sink a job system's environment describes (DESIGN §2, §7).

        Reads ``TRAINREPORT_URL``, ``TRAINREPORT_JOB_ID`` (when missing, a fresh
        unique run id is used and a warning logged), ``TRAINREPORT_TASK_ID``
        (default ``"train"``), ``TRAINREPORT_TOKEN`` or else
        ``TRAINREPORT_TOKEN_FILE``, ``TRAINREPORT_CONNECT_TIMEOUT_SECONDS``,
        ``TRAINREPORT_READ_TIMEOUT_SECONDS`` and ``TRAINREPORT_CA_CERTS``.

        Args:
            environ: the environment (default ``os.environ``).

        Lenient: a bad number falls back to its default with one
        ``trainreport.invalid_environment`` event. Never raises.
        """
        env = os.environ if environ is None else environ
        url = env.get("TRAINREPORT_URL", "").strip()
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            _log.warning(
                "trainreport.invalid_environment",
                variable="TRAINREPORT_URL",
                reason="not an http:// or https:// URL; sends will be rejected",
            )
        job_id = env.get("TRAINREPORT_JOB_ID", "").strip()
        if not job_id:
            from trainreport.sinks import new_run_id  # noqa: PLC0415 - avoids an import cycle

            job_id = new_run_id()
            _log.warning("trainreport.job_id_missing", job_id=job_id)
        task_id = env.get("TRAINREPORT_TASK_ID", "").strip() or "train"
        token = env.get("TRAINREPORT_TOKEN", "").strip() or None
        token_file = None if token else env.get("TRAINREPORT_TOKEN_FILE", "").strip() or None
        timeouts = {}
        for name, default in (("connect_timeout_seconds", 5.0), ("read_timeout_seconds", 10.0)):
            variable = f"TRAINREPORT_{name.upper()}"
            raw = env.get(variable, "").strip()
            timeouts[name] = default
            if not raw:
                continue
            try:
                value = float(raw)
            except ValueError:
                value = math.nan
            if math.isfinite(value) and value > 0:
                timeouts[name] = value
            else:
                _log.warning(
                    "trainreport.invalid_environment",
                    variable=variable,
                    value=raw[:50],
                    reason="expected a positive number of seconds",
                    default=default,
                )
        return cls(
            url,
            job_id,
            task_id,
            token,
            token_file=token_file,
            connect_timeout_seconds=timeouts["connect_timeout_seconds"],
            read_timeout_seconds=timeouts["read_timeout_seconds"],
            ca_certs=env.get("TRAINREPORT_CA_CERTS", "").strip() or None,
        )

    # --- the Sink interface -----------------------------------------------------------

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """Learn the server's capabilities, open a writer (extension) or read the task.

        ``GET /v1/capabilities`` decides the mode (a non-2xx answer other than
        408/429/5xx means a plain server: baseline). With the extension,
        ``POST {task}/writers`` issues a writer generation and returns the
        stored task; in baseline mode ``GET {task}`` returns it, and a 404 is a
        new task (``stored_task=None``), not a failure.

        Args:
            timeout_seconds: bound on the whole call, seconds (``None``: only
                the per-request timeouts apply).

        Returns:
            :class:`Opened`, :class:`RetryLater` (connection errors, timeouts,
            408/429/5xx) or :class:`Rejected` (401/403/..., a bad URL).
            Never raises.
        """
        if self._url_problem is not None:
            return Rejected(self._url_problem)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        try:
            return self._scrubbed(self._open(deadline))
        except SinkError as exc:
            return RetryLater(self._scrub(str(exc)), unreachable=isinstance(exc, _UnreachableError))
        except (urllib3.exceptions.LocationValueError, urllib3.exceptions.ProxySchemeUnknown) as e:
            return Rejected(self._scrub(f"invalid URL: {type(e).__name__}: {e}"))
        except Exception as exc:  # a sink never raises into the reporter (DESIGN §7)
            return RetryLater(self._scrub(f"unexpected {type(exc).__name__}: {exc}"))

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Deliver one update: ``PATCH`` (baseline) or ``POST .../updates`` (extension).

        In series-suffix mode the body is split into several requests when it
        exceeds the request cap (per series, and a long series into
        offset-contiguous chunks; ``status`` and ``status_details`` ride in
        the first request only), and a 413 halves the cap (down to
        ``MIN_SPLIT_BYTES``) and retries before :class:`Split` is returned.
        If any request of a split update fails, that failure is returned and
        nothing is claimed delivered (resending is idempotent).

        Args:
            update: the state the server should hold after this call.
            timeout_seconds: bound on the whole call, seconds (``None``: only
                the per-request timeouts apply).

        Returns:
            One of :data:`~trainreport.sinks.SendResult`, classified per
            DESIGN §8. Never raises.
        """
        if self._url_problem is not None:
            return Rejected(self._url_problem)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        try:
            if self._generation is None:
                return self._scrubbed(self._send_patch(update, deadline))
            return self._scrubbed(self._send_suffix(update, self._generation, deadline))
        except SinkError as exc:
            return RetryLater(self._scrub(str(exc)), unreachable=isinstance(exc, _UnreachableError))
        except (urllib3.exceptions.LocationValueError, urllib3.exceptions.ProxySchemeUnknown) as e:
            return Rejected(self._scrub(f"invalid URL: {type(e).__name__}: {e}"))
        except Exception as exc:  # a sink never raises into the reporter (DESIGN §7)
            return RetryLater(self._scrub(f"unexpected {type(exc).__name__}: {exc}"))

    def close(self) -> None:
        """Drop the connection pool (closing its idle connections). Idempotent; never raises."""
        pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            try:
                pool.clear()
            except Exception as exc:  # closing must not fail the reporter's shutdown
                _log.debug("trainreport.pool_close_failed", error=type(exc).__name__)

    # --- opening --------------------------------------------------------------------

    def _open(self, deadline: float | None) -> OpenResult:
        self._generation = None
        self._gzip = False
        self._cap = self.max_request_bytes
        extension = False
        response = self._request("GET", "/v1/capabilities", None, deadline, task=False)
        now = datetime.datetime.now(datetime.timezone.utc)
        if 200 <= response.status < 300:
            extension = self._read_capabilities(response.data)
        elif _is_transient(response.status):
            failure = _classify_failure(response, now)
            assert isinstance(failure, RetryLater)
            return failure
        caps = frozenset({CAPABILITY_GZIP}) if self._gzip else frozenset()
        if extension and self.use_extension:
            if self.attempt is None:  # read once: every re-open claims as the same attempt
                self.attempt = current_attempt()
            claim = json.dumps({"attempt": self.attempt.to_json()}).encode()
            response = self._request("POST", "/writers", claim, deadline)
            if 200 <= response.status < 300:
                try:
                    writer = structure_response(json.loads(response.data), WriterResponse)
                except (ValueError, RecursionError, cattrs.BaseValidationError) as exc:
                    raise ProtocolError("malformed response to POST .../writers") from exc
                self._generation = writer.writer_generation
                return Opened(
                    capabilities=caps | {CAPABILITY_SERIES_SUFFIX},
                    writer_generation=writer.writer_generation,
                    stored_task=writer.task,
                )
            if response.status not in (404, 405, 501):
                return _open_result(_classify_failure(response, now))
            _once.info(
                ("no_writers", self.base_url),
                "trainreport.extension_unavailable",
                status_code=response.status,
            )
        response = self._request("GET", "", None, deadline)
        if response.status == 404:
            return Opened(capabilities=caps, stored_task=None)
        if not 200 <= response.status < 300:
            return _open_result(_classify_failure(response, now))
        try:
            stored = json.loads(response.data)
        except (ValueError, RecursionError) as exc:
            raise ProtocolError("malformed response: the stored task is not JSON") from exc
        if not isinstance(stored, dict):
            _log.warning("trainreport.stored_task_malformed", reason="the task is not an object")
            stored = {}
        return Opened(capabilities=caps, stored_task=stored)

    def _read_capabilities(self, data: bytes) -> bool:
        """Parse ``GET /v1/capabilities``; sets gzip and the cap; True when the extension is on."""
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return False
        if not isinstance(doc, dict):
            return False
        extensions, encodings = doc.get("extensions"), doc.get("encodings")
        self._gzip = isinstance(encodings, list) and "gzip" in encodings
        for key in ("max_body_bytes", "max_decompressed_bytes"):
            limit = doc.get(key)
            if type(limit) is int and limit > 0:
                self._cap = max(min(self._cap, limit), 1)
        return isinstance(extensions, list) and CAPABILITY_SERIES_SUFFIX in extensions

    # --- sending --------------------------------------------------------------------

    def _send_patch(self, update: Update, deadline: float | None) -> SendResult:
        response = self._request("PATCH", "", encode_patch_body(update), deadline)
        sent = self._last_bytes
        if not 200 <= response.status < 300:
            return _classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
        cancel = False
        try:
            doc = json.loads(response.data) if response.data else None
        except (ValueError, RecursionError):
            doc = None  # a plain server may answer anything on success
        if isinstance(doc, dict):
            cancel = doc.get("cancel_requested") is True
        return Delivered(cancel_requested=cancel, bytes_sent=sent)

    def _send_suffix(self, update: Update, generation: int, deadline: float | None) -> SendResult:
        # Each part: (series or None for all of the update's, carries details, already planned).
        parts: list[tuple[tuple[SeriesUpdate, ...] | None, bool, bool]] = [(None, True, False)]
        lengths: dict[str, int] = {}
        cancel = False
        sent = 0
        refusals = 0
        while parts:
            series, details, planned = parts.pop(0)
            self._sequence += 1  # never reused, even for a resend after a lost response
            body = encode_suffix_body(
                update,
                writer_generation=generation,
                sequence=self._sequence,
                series=series,
                include_details=details,
            )
            if len(body) > self._cap and not planned:
                parts[:0] = self._plan(update, series, details, generation)
                continue
            response = self._request("POST", "/updates", body, deadline)
            sent += self._last_bytes
            carries_series = bool(update.series) if series is None else bool(series)
            if response.status == 413 and not carries_series:
                # Details alone are too large: splitting cannot help; the reporter drops the field.
                return _classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
            if response.status == 413 and len(body) > MIN_SPLIT_BYTES and refusals < _MAX_413:
                refusals += 1
                self._cap = max(min(self._cap, len(body)) // 2, MIN_SPLIT_BYTES)
                _log.info("trainreport.request_too_large", request_cap_bytes=self._cap)
                parts[:0] = self._plan(update, series, details, generation)
                continue
            if not 200 <= response.status < 300:
                return _classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
            try:
                answer = structure_response(json.loads(response.data), UpdateResponse)
            except (ValueError, RecursionError, cattrs.BaseValidationError):
                return RetryLater("malformed response to POST .../updates")
            if answer.duplicate:
                return Resynchronise("the server saw this sequence already", answer.series_lengths)
            lengths.update(answer.series_lengths)
            cancel |= answer.cancel_requested
        return Delivered(series_lengths=lengths, cancel_requested=cancel, bytes_sent=sent)

    def _plan(
        self,
        update: Update,
        series: Sequence[SeriesUpdate] | None,
        details: bool,
        generation: int,
    ) -> list[tuple[tuple[SeriesUpdate, ...] | None, bool, bool]]:
        """Split ``series`` (+ details) into requests whose bodies fit the cap.

        Series stay in order; a series larger than one request is cut into
        offset-contiguous chunks, each in its own request (a JSON object
        cannot name a series twice). Only the first request carries details.
        """
        chosen = tuple(update.series or ()) if series is None else tuple(series)

        def envelope(with_details: bool) -> int:
            empty = encode_suffix_body(
                update,
                writer_generation=generation,
                sequence=self._sequence,
                series=(),
                include_details=with_details,
            )
            return len(empty) + len('"series":{}') + _ENVELOPE_SLACK

        sizes = {True: envelope(True) if details else 0, False: envelope(False)}
        plan: list[tuple[tuple[SeriesUpdate, ...] | None, bool, bool]] = []
        current: list[SeriesUpdate] = []
        used = 0
        with_details = details

        def flush() -> None:
            nonlocal used, with_details
            plan.append((tuple(current), with_details, True))
            current.clear()
            used = 0
            with_details = False

        for whole in chosen:
            rest: SeriesUpdate | None = whole
            while rest is not None:
                space = self._cap - sizes[with_details] - used
                size = _piece_bytes(rest)
                if size <= space:
                    current.append(rest)
                    used += size
                    rest = None
                    continue
                head, tail = _head_that_fits(rest, space)
                if head is None:
                    if current or with_details:
                        flush()
                        continue
                    head, tail = _slice(rest, 0, 1), _slice(rest, 1, len(rest))
                    if not len(tail):
                        current.append(head)
                        flush()
                        break
                current.append(head)
                flush()
                rest = tail
        if current or with_details or not plan:
            flush()
        return plan

    # --- HTTP -------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        deadline: float | None,
        *,
        task: bool = True,
    ) -> _Response:
        """One request, never retried. Sets ``self._last_bytes``.

        Raises:
            TransportError: connection refused/reset, timeout, TLS or proxy error.
            ProtocolError: the response could not be read as HTTP.
        """
        self._last_bytes = 0
        timeout = self._timeout(deadline)
        pool = self._pool_for_this_process()
        headers = self._request_headers()
        if body is not None:
            headers["Content-Type"] = "application/json"
            if self._gzip and len(body) > GZIP_MIN_BYTES:
                body = gzip.compress(body, compresslevel=6)
                headers["Content-Encoding"] = "gzip"
            headers["Content-Length"] = str(len(body))
        resource = (self._path if task else "") + path
        url = self._url + resource
        self._last_bytes = (
            (len(body) if body is not None else 0)
            + len(method)
            + len(self._prefix)
            + len(resource)
            + len(" HTTP/1.1\r\n")
            + sum(len(k) + len(v) + 4 for k, v in headers.items())
            + len("Host")
            + len(self._netloc)
            + 4
        )
        try:
            response = pool.request(
                method,
                url,
                body=body,
                headers=headers,
                timeout=timeout,
                retries=False,
                redirect=False,
                preload_content=True,
            )
        except urllib3.exceptions.NewConnectionError as exc:  # before TimeoutError: a subclass
            # Refused, unresolvable or unroutable (a connect timeout is ConnectTimeoutError).
            raise _UnreachableError(f"{method} failed to connect: {_cause(exc)}") from exc
        except urllib3.exceptions.SSLError as exc:
            # The TLS handshake failed (an https URL of a plain-HTTP server, a certificate
            # that does not verify): no request reached the service, and retrying will
            # not change it, so it counts as unreachable for close_unanswered_seconds.
            raise _UnreachableError(f"{method} failed the TLS handshake: {_cause(exc)}") from exc
        except urllib3.exceptions.ProxyError as exc:
            raise TransportError(f"{method} failed to connect: {_cause(exc)}") from exc
        except urllib3.exceptions.TimeoutError as exc:
            raise TransportError(f"{method} timed out: {type(exc).__name__}") from exc
        except urllib3.exceptions.ProtocolError as exc:
            raise TransportError(f"{method} connection lost: {_cause(exc)}") from exc
        except (urllib3.exceptions.DecodeError, urllib3.exceptions.ResponseError) as exc:
            raise ProtocolError(f"{method} response unreadable: {type(exc).__name__}") from exc
        except urllib3.exceptions.LocationValueError:
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportError(f"{method} failed: {_cause(exc)}") from exc
        headers = {name.lower(): value for name, value in response.headers.items()}
        return _Response(response.status, headers, response.data or b"")

    def _timeout(self, deadline: float | None) -> urllib3.Timeout:
        connect, read = self.connect_timeout_seconds, self.read_timeout_seconds
        if deadline is None:
            return urllib3.Timeout(connect=connect, read=read)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransportError("no time left before the deadline")
        return urllib3.Timeout(
            connect=min(connect, remaining), read=min(read, remaining), total=remaining
        )

    def _pool_for_this_process(self) -> urllib3.PoolManager:
        """The pool, created on first use and again in a forked child (never the parent's)."""
        pid = os.getpid()
        if self._pool is None or self._pid != pid:
            self._pool = self._make_pool()
            self._pid = pid
        return self._pool

    def _make_pool(self) -> urllib3.PoolManager:
        """A PoolManager, or a ProxyManager when the environment's proxy applies to the URL."""
        kwargs: dict[str, Any] = {"num_pools": 2, "maxsize": 1, "cert_reqs": "CERT_REQUIRED"}
        if self.ca_certs is not None:
            kwargs["ca_certs"] = self.ca_certs
        proxy = _proxy_for(self._url)
        if proxy is None:
            return urllib3.PoolManager(**kwargs)
        if "://" not in proxy:
            proxy = "http://" + proxy
        parsed = urllib3.util.parse_url(proxy)
        if parsed.auth:
            kwargs["proxy_headers"] = urllib3.util.make_headers(
                proxy_basic_auth=urllib.parse.unquote(parsed.auth)
            )
            proxy = parsed._replace(auth=None).url
        return urllib3.ProxyManager(proxy, **kwargs)

    def _request_headers(self) -> dict[str, str]:
        headers = {
            "User-Agent": "trainreport",
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
        }
        headers.update(self._headers)
        token = self._current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif self._userinfo is not None:
            headers.update(urllib3.util.make_headers(basic_auth=self._userinfo))
        if self._auth is not None:
            try:
                extra = dict(self._auth())
            except Exception as exc:  # user code: its failure is a failed request, not a crash
                raise SinkError(f"the auth callable failed: {type(exc).__name__}") from exc
            headers.update({str(k): str(v) for k, v in extra.items()})
        return headers

    def _current_token(self) -> str | None:
        """The token: the argument, or the token file's content (re-read when it changes)."""
        if self._token is not None or self._token_file is None:
            return self._token
        path = self._token_file
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

    def _scrubbed(self, result: _R) -> _R:
        """``result`` with the token masked in its reason."""
        reason = getattr(result, "reason", None)
        if isinstance(reason, str):
            clean = self._scrub(reason)
            if clean != reason:
                return cast("_R", attrs.evolve(cast(Any, result), reason=clean))
        return result

    def _scrub(self, text: str) -> str:
        """``text`` without the token (defence in depth: reasons are logged)."""
        secrets = [self._token, self._token_cache[1] if self._token_cache else None]
        if self._userinfo is not None:
            secrets += self._userinfo.split(":", 1)
        for secret in secrets:
            if secret:
                text = text.replace(secret, "***")
        return text[:500]


class _UnreachableError(TransportError):
    """Nothing answered: the connection was refused, the host name did not resolve, or
    the TLS handshake failed."""


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """``(url without userinfo, "user:password" percent-decoded or None)``. Never raises."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not sep or not at:
        return url, None
    return f"{scheme}://{host}{slash}{path}", urllib.parse.unquote(userinfo)


def _open_result(result: SendResult) -> OpenResult:
    """Narrow a classified failure to what ``open()`` may return."""
    if isinstance(result, RetryLater | Rejected):
        return result
    if isinstance(result, Split):
        return Rejected(result.reason, 413)
    return RetryLater(getattr(result, "reason", "unexpected answer"))


def _cause(exc: BaseException) -> str:
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


def _proxy_for(url: str) -> str | None:
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
