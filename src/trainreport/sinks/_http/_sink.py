"""HttpSink: a job-status service over HTTP with urllib3.

See docs/design.md#public-api, #wire-modes, #guarantees, #failure-handling.

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

The sink decides nothing about when to try again (docs/design.md#failure-handling): its
outcome is classified into a :mod:`trainreport._wire._sink_interface` result and the reporter's
scheduler owns backoff. Within one ``send()`` it cuts an update to fit: in series-suffix mode
a 413 halves the request cap and the refused request is planned and sent again (at most 8
times, ``sinks/_http/_send.py``); every other request goes out once.

Five modules share the work: this one (the sink: its settings, the wire mode and writer it
holds, errors turned into
results), ``sinks/_http/_open.py`` (opening: capabilities, the writer claim, the stored
task), ``sinks/_http/_send.py`` (sending one update: the baseline ``PATCH``, or the
numbered suffix requests with the 413 re-planning, and what an answer means),
``sinks/_http/_transport.py`` (one request: connection, timeouts, proxy, gzip,
credentials, urllib3's errors mapped to
:class:`~trainreport.exceptions.TransportError` /
:class:`~trainreport.exceptions.ProtocolError`) and ``sinks/_http/_plan.py`` (splitting
a suffix update into requests that fit the cap). Errors become results at the
boundary: :meth:`HttpSink.open` and :meth:`HttpSink.send` never raise.

The token (``token=`` or a token file re-read when it changes) is sent as
``Authorization: Bearer ...``; credentials in the base URL's userinfo are sent
as ``Authorization: Basic ...`` when there is no token. Neither appears in any
log event, result reason, exception message or ``repr()``.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import urllib3

from trainreport._environment import URL as ENV_URL
from trainreport._environment import HttpDestination, auth_hint, read_http_destination
from trainreport._logging import get_logger
from trainreport._wire._attempt import AttemptIdentity
from trainreport._wire._payloads import without_times
from trainreport._wire._protocol import (
    EXTENSION_SERIES_TIMES,
    PAGE_PATH_TEMPLATE,
    TASK_PATH_TEMPLATE,
    UPDATES_PATH,
    split_api_prefix,
)
from trainreport._wire._sink_interface import (
    Opened,
    OpenResult,
    Rejected,
    RetryLater,
    SendResult,
    Sink,
    Update,
)
from trainreport.exceptions import ClientError, ConfigError, SinkError
from trainreport.sinks._http._open import open_session
from trainreport.sinks._http._read import compact_points, read_task_by_series
from trainreport.sinks._http._send import BodyLimit, SuffixSender, send_patch
from trainreport.sinks._http._transport import (
    AMBIGUOUS_USERINFO,
    HttpTransport,
    UnreachableError,
    parse_retry_after,
    shown_url,
    userinfo_problem,
)

__all__ = ["DEFAULT_TASK_PATH", "HttpSink", "parse_retry_after"]

#: The task resource of the reference server and of the baseline job-status API.
DEFAULT_TASK_PATH = TASK_PATH_TEMPLATE

_log = get_logger()
_R = TypeVar("_R", bound=OpenResult | SendResult)


class _TransportFactory:
    """Makes an :class:`HttpTransport` with the settings it was given (a read-back's own).

    Picklable like the sink (no lambda); its ``repr`` never shows the credentials.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = args
        self._kwargs = kwargs

    def __call__(self) -> HttpTransport:
        return HttpTransport(*self._args, **self._kwargs)

    def __repr__(self) -> str:
        return "_TransportFactory(***)"


class HttpSink(Sink):
    """Sends a run's updates to a job-status service over HTTP.

    See docs/design.md#public-api, #wire-modes.

    Holds no connection pool, lock or thread until :meth:`open`, so an
    unstarted sink pickles (the token and any credentials in the base URL are
    part of the pickled state: treat a pickle like the token itself). Driven by
    one thread (the reporter thread); not thread-safe otherwise.

    Args:
        base_url: the service's root, ``http://host:port`` or
            ``https://host/prefix``; API paths are appended to it. A trailing
            ``/v1`` (the API's own prefix) is removed, with one
            ``trainreport.base_url_normalised`` warning
            (docs/configuration.md#the-base-url). Credentials
            in it (``https://user:password@host``) are sent as
            ``Authorization: Basic`` unless a token is given (percent-encode
            ``/``, ``?``, ``#`` and ``@`` in them), and never shown: ``base_url``,
            ``describe()``, ``repr()``, logs and hints show the URL without
            userinfo, query or fragment (``shown_url``).
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
        max_body_bytes: the largest full-state (baseline ``PATCH``) body the job
            API takes, bytes before compression, or ``None`` (the default: only a
            413 says). A body whose curves would exceed it is not sent: the
            reporter sends them thinned to fit (docs/engine.md, "Thinning under a
            body limit"), as it does after a 413. Series-suffix sends are capped
            by ``max_request_bytes`` instead.
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
            process's start time (moved past a dead attempt's when this
            process took over this job and task's journal from it).

    Raises:
        ConfigError: a non-positive timeout, request cap or body limit, a ``task_path``
            that does not format with ``job_id`` and ``task_id``, or a
            ``base_url`` with an ``@`` after a raw ``/``, ``?`` or ``#``
            (``https://user:s3/cret@host``: its host is ambiguous; write the
            ``/`` in a password as ``%2F``).
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
        max_body_bytes: int | None = None,
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
        if max_body_bytes is not None and not (
            isinstance(max_body_bytes, int)
            and not isinstance(max_body_bytes, bool)
            and max_body_bytes > 0
        ):
            problems.append("expected a positive whole number of bytes or None @ $.max_body_bytes")
        self._quoted = (
            urllib.parse.quote(str(job_id), safe=""),
            urllib.parse.quote(str(task_id), safe=""),
        )
        try:
            path = task_path.format(job_id=self._quoted[0], task_id=self._quoted[1])
        except (KeyError, IndexError, ValueError):
            problems.append("expected a template using only {job_id} and {task_id} @ $.task_path")
            path = ""
        if userinfo_problem(base_url) is not None:  # never guess the host (a password's `/`)
            problems.append(f"{AMBIGUOUS_USERINFO} @ $.base_url")
        if problems:
            raise ConfigError(problems)
        root, removed = split_api_prefix(base_url)
        # A read-back (``read_back``, any thread) makes a transport of its own like this one.
        self._new_transport = _TransportFactory(
            root,
            token=token,
            token_file=token_file,
            headers=headers,
            auth=auth,
            connect_timeout_seconds=connect_timeout_seconds,
            read_timeout_seconds=read_timeout_seconds,
            ca_certs=ca_certs,
        )
        self._transport = self._new_transport()
        #: The base URL as shown (repr, logs, hints): no userinfo, query or fragment.
        self.base_url = self._transport.shown_url
        self.job_id = str(job_id)
        self.task_id = str(task_id)
        self.task_path = task_path
        self.connect_timeout_seconds = float(connect_timeout_seconds)
        self.read_timeout_seconds = float(read_timeout_seconds)
        self.max_request_bytes = int(max_request_bytes)
        self.max_body_bytes = max_body_bytes
        # What the job API's full-state body limit is known to be (configured, 413s).
        self._body_limit = BodyLimit(max_body_bytes)
        self.ca_certs = ca_certs
        self.use_extension = use_extension
        self.attempt = attempt
        self._path = "/" + path.lstrip("/")
        # Protocol state learned at open(): the writer generation (None: baseline mode) and,
        # in the suffix sender, the request cap; its sequence numbers outlive an open.
        self._generation: int | None = None
        # Whether the server keeps each point's time (series-times-v1): else none is sent.
        self._times = False
        self._suffix = SuffixSender(
            self._transport, self._path + UPDATES_PATH, self.max_request_bytes
        )
        if removed:
            _log.warning(
                "trainreport.base_url_normalised",
                base_url=self.base_url,
                removed="/v1",
                hint="give the service's root as the base URL: API paths (/v1/...) are added",
            )

    def __repr__(self) -> str:
        token = "'***'" if self._transport.has_credentials else "None"
        userinfo = ", userinfo='***'" if self._transport.has_userinfo else ""
        return (
            f"HttpSink({self.base_url!r}, job_id={self.job_id!r}, task_id={self.task_id!r}, "
            f"token={token}{userinfo})"
        )

    def read_back(self, timeout_seconds: float) -> Mapping[str, Any] | None:
        """The task on a connection of its own (any thread); ``None`` on failure.

        Read as ``trainreport.client.read_task`` reads it (one reader,
        ``_read.py``): from the reference server without its curves, then the
        curves from ``/series`` in groups, each series kept as
        :class:`~trainreport._wire._payloads.ColumnPoints` (24 bytes a point,
        never the whole task as one JSON document); from a plain job API
        without ``/series``, its plain ``GET`` as it is. Everything within
        ``timeout_seconds``. Never raises.
        """
        transport = self._new_transport()
        deadline = time.monotonic() + timeout_seconds

        def get(path: str) -> Any:
            response = transport.request("GET", path, None, deadline)
            if not 200 <= response.status < 300:
                raise ClientError(
                    f"GET {path} answered {response.status}",
                    url=transport.shown_url,
                    status=response.status,
                )
            return json.loads(response.data)

        try:
            task = read_task_by_series(get, self._path, compact_points)
        except Exception:  # a snapshot never fails for its read-back
            return None
        finally:
            transport.close()
        return task if isinstance(task, dict) else None

    def describe(self) -> str:
        """``job-status service URL job 'J' task 'T'`` (never the token). Never raises."""
        return f"job-status service {self.base_url} job {self.job_id!r} task {self.task_id!r}"

    def upload_command(self, path: str) -> str:
        """``trainreport sync PATH --url URL`` with this service's URL; never a secret.

        The URL as shown (no userinfo, query or fragment: a ``***@`` copied into
        the command would be sent as Basic ``***``); a sink with credentials adds
        ``--token-file`` with its token file, else a ``TOKEN_FILE`` to fill in.
        Never raises.
        """
        transport = self._transport
        command = f"trainreport sync {path} --url {self.base_url}"
        if transport.token_file is not None:
            return f"{command} --token-file {transport.token_file}"
        if transport.has_credentials or transport.has_userinfo:
            return f"{command} --token-file TOKEN_FILE"
        return command

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HttpSink:
        """The sink a job system's environment describes.

        The variables are docs/configuration.md#other-trainreport_-variables.

        Reads ``TRAINREPORT_URL``, ``TRAINREPORT_JOB_ID`` (when missing, a fresh
        unique run id is used and ``trainreport.job_id_missing`` logged),
        ``TRAINREPORT_TASK_ID`` (default ``"train"``), ``TRAINREPORT_TOKEN`` or
        else ``TRAINREPORT_TOKEN_FILE``, ``TRAINREPORT_CONNECT_TIMEOUT_SECONDS``,
        ``TRAINREPORT_READ_TIMEOUT_SECONDS``, ``TRAINREPORT_MAX_BODY_BYTES`` and
        ``TRAINREPORT_CA_CERTS``, through
        the one reader of the environment (``trainreport._environment``).

        Args:
            environ: the environment (default ``os.environ``).

        Lenient: a bad number falls back to its default with one
        ``trainreport.config_field_invalid`` event (``variable=``). Never raises.
        """
        settings = read_http_destination(environ) or HttpDestination(url="")
        if settings.url == "":
            _log.warning(
                "trainreport.config_field_invalid",
                field="url",
                variable=ENV_URL,
                problem="not set; sends will be rejected",
            )
        return cls.from_destination(settings)

    @classmethod
    def from_destination(cls, settings: HttpDestination) -> HttpSink:
        """The sink for destination settings read from the environment (see :meth:`from_env`).

        Never raises: a missing job id becomes a fresh run id (logged), and a URL
        whose host is ambiguous (a raw ``/`` in its password, which the
        constructor refuses) gives a sink that rejects every send, with one
        ``trainreport.config_field_invalid`` event.
        """
        job_id = settings.job_id
        if job_id is None:
            from trainreport.sinks import new_run_id  # noqa: PLC0415 - avoids an import cycle

            job_id = new_run_id()
            _log.warning("trainreport.job_id_missing", job_id=job_id)
        problem = userinfo_problem(settings.url)
        if problem is not None:
            _log.warning(
                "trainreport.config_field_invalid",
                field="url",
                variable=ENV_URL,
                problem=f"{problem}; sends will be rejected",
            )
        sink = cls(
            shown_url(settings.url) if problem is not None else settings.url,
            job_id,
            settings.task_id,
            settings.token,
            token_file=None if settings.token else settings.token_file,
            connect_timeout_seconds=settings.connect_timeout_seconds,
            read_timeout_seconds=settings.read_timeout_seconds,
            max_body_bytes=settings.max_body_bytes,
            ca_certs=settings.ca_certs,
        )
        if problem is not None:  # the URL was refused: nothing of it is sent anywhere
            sink._transport.url_problem = problem
        return sink

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
        if self._transport.url_problem is not None:
            return Rejected(self._transport.url_problem)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        try:
            return self._hinted(self._transport.scrubbed(self._open(deadline)))
        except Exception as exc:
            # a sink never raises into the reporter (docs/design.md#guarantees)
            return self._failure(exc)

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Deliver one update: ``PATCH`` (baseline) or ``POST .../updates`` (extension).

        In series-suffix mode the body is split into several requests when it
        exceeds the request cap (per series, and a long series into
        offset-contiguous chunks; ``status`` and ``status_details`` ride in
        the first request only), and a 413 halves the cap (down to 16 KiB,
        ``sinks/_http/_send.py``'s ``MIN_SPLIT_BYTES``, at most 8 times) and
        retries before :class:`Split` is returned.
        If any request of a split update fails, that failure is returned and
        nothing is claimed delivered (resending is idempotent).

        Args:
            update: the state the server should hold after this call.
            timeout_seconds: bound on the whole call, seconds (``None``: only
                the per-request timeouts apply).

        Returns:
            One of :data:`~trainreport.sinks.SendResult`, classified per
            docs/design.md#failure-handling. Never raises.
        """
        if self._transport.url_problem is not None:
            return Rejected(self._transport.url_problem)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        try:
            if not self._times or self._generation is None:
                update = without_times(update)  # times travel in suffix mode only
            if self._generation is None:
                result = send_patch(self._transport, self._path, update, deadline, self._body_limit)
            else:
                result = self._suffix.send(update, self._generation, deadline)
            return self._hinted(self._transport.scrubbed(result))
        except Exception as exc:
            # a sink never raises into the reporter (docs/design.md#guarantees)
            return self._failure(exc)

    def close(self) -> None:
        """Drop the connection pool (closing its idle connections). Idempotent; never raises."""
        self._transport.close()

    # --- errors become results (docs/design.md#guarantees) ------------------------------

    def _hinted(self, result: _R) -> _R:
        """A refused credential's result with what the library user does about it."""
        if isinstance(result, Rejected) and result.hint is None:
            hint = auth_hint(result.status_code, token_sent=self._transport.has_credentials)
            if hint is not None:
                return attrs.evolve(result, hint=hint)
        return result

    def _failure(self, exc: Exception) -> RetryLater | Rejected:
        """The result an exception from opening or sending means, scrubbed of credentials."""
        if isinstance(exc, SinkError):
            return RetryLater(
                self._transport.scrub(str(exc)), unreachable=isinstance(exc, UnreachableError)
            )
        if isinstance(
            exc, urllib3.exceptions.LocationValueError | urllib3.exceptions.ProxySchemeUnknown
        ):
            return Rejected(self._transport.scrub(f"invalid URL: {type(exc).__name__}: {exc}"))
        return RetryLater(self._transport.scrub(f"unexpected {type(exc).__name__}: {exc}"))

    def _open(self, deadline: float | None) -> OpenResult:
        self._generation = None  # a failed open leaves no writer of an earlier one
        self._times = False
        self._suffix.cap = self.max_request_bytes
        session = open_session(
            self._transport,
            self._path,
            task=(self.job_id, self.task_id),
            use_extension=self.use_extension,
            attempt=self.attempt,
            max_request_bytes=self.max_request_bytes,
            deadline=deadline,
        )
        self.attempt = session.attempt  # read once: every re-open claims as the same attempt
        self._generation = session.generation
        self._suffix.cap = session.cap
        result = session.result
        self._times = isinstance(result, Opened) and EXTENSION_SERIES_TIMES in result.capabilities
        if isinstance(result, Opened) and session.generation is not None:
            # The series-suffix extension is the reference server's: it has the chart page.
            page = PAGE_PATH_TEMPLATE.format(job_id=self._quoted[0], task_id=self._quoted[1])
            result = attrs.evolve(result, page_url=self._transport.shown_url + page)
        return result
