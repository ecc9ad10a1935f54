"""KubeflowSink: a run's progress and current values to Kubeflow Trainer's TrainJob status.

A latest-values sink: each post replaces the TrainJob's ``status.trainerStatus``
(progress, ETA, every current value), so it keeps no history and reads
nothing back. The contract and the body are in
:mod:`trainreport.sinks._kubeflow_status`; ``docs/integrations.md`` compares
it with Kubeflow's own Hugging Face callback.

How it rides on the engine:

- It announces the series-suffix capability, so each update carries only the
  points not yet sent (cheap on the reporter thread) and
  ``status_details`` carries every current value (the engine's rule); the sink
  keeps the sticky details (``max_steps``, ``checkpoint_step``, ``error``...)
  merged, and remembers which names are series (the run's
  ``time_series_metrics``) and in which order names arrived, to order them
  (:class:`~trainreport.sinks._kubeflow_status.MetricPriority`).
- ``min_interval_seconds`` is 5 s: the reporter never posts more often,
  whatever ``ReportingConfig`` says (``Sink.min_interval_seconds``).
- 400/401/403/404/413/422 are :class:`~trainreport.Rejected` (the reporter's
  long backoff, one log event, retried only with new data; a 401 or 403 also
  makes the token file be read again before the next attempt, even when it
  looks unchanged); 408/429/5xx (but 501), timeouts and
  connection errors are :class:`~trainreport.RetryLater` (``Retry-After``
  honoured).
- TLS is always verified, against the CA file when one is given. The token
  file is ``stat``-ed before every post and read again whenever it changed:
  Kubeflow Trainer v2.3 projects a token that expires after an hour
  (``expirationSeconds: 3600``, audience per TrainJob), and the kubelet
  swaps in a fresh one well before that. It is never logged or shown in
  ``repr()``.
"""

from __future__ import annotations

import datetime
import math
import os
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import urllib3

from trainreport._environment import KubeflowDestination, read_kubeflow_destination
from trainreport._logging import OnceLogger, get_logger
from trainreport._record._recorder import RESERVED_KEYS
from trainreport._record._selection import check_globs
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Rejected,
    RetryLater,
    SendResult,
    Sink,
    Update,
)
from trainreport.exceptions import ConfigError, TransportError
from trainreport.sinks._http._transport import cause as _cause
from trainreport.sinks._http._transport import deadline_timeout, new_pool, shown_url
from trainreport.sinks._http._transport import error_fields as _error_fields
from trainreport.sinks._http._transport import is_transient as _is_transient
from trainreport.sinks._http._transport import parse_retry_after as _parse_retry_after
from trainreport.sinks._kubeflow_status import (
    MIN_INTERVAL_SECONDS,
    MetricPriority,
    build_body,
)
from trainreport.sinks._token import TokenFile

__all__ = ["KubeflowSink"]

_log = get_logger()
#: Names of left-out metrics listed in one log event.
_LISTED = 20
_MESSAGE_CHARS = 200


class KubeflowSink(Sink):
    """Posts a run's progress and current values to Kubeflow Trainer's TrainJob status endpoint.

    Use :meth:`from_env` inside a TrainJob (``Reporter.from_env()`` does when
    ``KUBEFLOW_TRAINER_SERVER_URL`` is set and ``TRAINREPORT_URL`` is not).
    Holds no connection until the first send, so an unstarted sink pickles.
    Driven by one thread (the reporter thread).

    What it posts (each post replaces the stored trainer status):
    ``progressPercentage`` (the reporter's ``percentage_done`` rounded down;
    100 once completed), ``estimatedRemainingSeconds`` (its ``eta_seconds``;
    0 once completed, left out after a failure), ``lastUpdatedTime`` and, as
    ``metrics``, ``status``, ``phase``, ``step``, ``max_steps``, ``epoch``,
    ``num_epochs``, ``checkpoint_step``, ``cancel_reason``, ``error``, then
    every current value (:func:`~trainreport.sinks._kubeflow_status.format_value`):
    ``metrics``' names, losses, learning rates, series, the rest
    (:class:`~trainreport.sinks._kubeflow_status.MetricPriority`). Metrics
    beyond 256, beyond 64 KiB, or with names over 64 characters are left out,
    each logged once by name (``trainreport.kubeflow_metrics_left_out``).

    Args:
        url: the endpoint's full ``https://`` URL (``KUBEFLOW_TRAINER_SERVER_URL``).
        token_file: the projected token's path (``KUBEFLOW_TRAINER_SERVER_TOKEN``),
            read again whenever it changes; or ``None``.
        token: a fixed token instead of a file (tests); never logged.
        ca_certs: the CA file to verify the endpoint with
            (``KUBEFLOW_TRAINER_SERVER_CA_CERT``); the system's CAs when ``None``.
        connect_timeout_seconds: TCP/TLS connect timeout, seconds (> 0).
        read_timeout_seconds: timeout of each socket read, seconds (> 0).
        min_interval_seconds: least time between two posts, seconds; raised
            to 5.0 when lower (the endpoint's guidance).
        metrics: globs over qualified names (``["train_loss", "val_*"]``, matched as
            ``time_series_metrics`` is, no ``!``) of the metrics posted first, in order.

    Raises:
        ConfigError: a non-positive timeout, a URL that is not
            ``https://host/...``, or an empty, non-string or ``!`` entry in ``metrics``.
    """

    def __init__(
        self,
        url: str,
        *,
        token_file: str | os.PathLike[str] | None = None,
        token: str | None = None,
        ca_certs: str | os.PathLike[str] | None = None,
        connect_timeout_seconds: float = 5.0,
        read_timeout_seconds: float = 10.0,
        min_interval_seconds: float = MIN_INTERVAL_SECONDS,
        metrics: Iterable[str] = (),
    ) -> None:
        first, problems = check_globs(metrics, field="metrics")
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme != "https" or not parts.hostname:
            problems.append("expected an https://host/... URL @ $.url")
        for name, value in (
            ("connect_timeout_seconds", connect_timeout_seconds),
            ("read_timeout_seconds", read_timeout_seconds),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                problems.append(f"expected a positive number @ $.{name}")
        if problems:
            raise ConfigError(problems)
        self.url = url.strip()
        self.ca_certs = os.fspath(ca_certs) if ca_certs is not None else None
        self.connect_timeout_seconds = float(connect_timeout_seconds)
        self.read_timeout_seconds = float(read_timeout_seconds)
        floor = min_interval_seconds if math.isfinite(min_interval_seconds) else 0.0
        self.min_interval_seconds = max(float(floor), MIN_INTERVAL_SECONDS)
        self._token = token
        self._token_file = TokenFile(token_file) if token_file is not None else None
        self._pool: urllib3.PoolManager | None = None
        self._pid: int | None = None
        self._details: dict[str, Any] = {}
        self._status: str | None = None
        self.metrics = first
        self._priority = MetricPriority(first)
        self._series: set[str] = set()
        #: Every metric name seen, in arrival order (its value: its place).
        self._arrival: dict[str, int] = {}
        self._non_finite: dict[str, float] = {}
        self._left_out_logged: set[str] = set()
        self._once = OnceLogger()

    def __repr__(self) -> str:
        secret = self._token is not None or self._token_file is not None
        return f"KubeflowSink({shown_url(self.url)!r}, token={'***' if secret else None!r})"

    def describe(self) -> str:
        """``Kubeflow TrainJob status URL`` (never a token: the URL as
        :func:`~trainreport.sinks._http._transport.shown_url` shows it). Never raises."""
        return f"Kubeflow TrainJob status {shown_url(self.url)}"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None
        state["_pid"] = None
        return state

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KubeflowSink:
        """The sink a Kubeflow TrainJob's environment describes.

        Reads ``KUBEFLOW_TRAINER_SERVER_URL``, ``KUBEFLOW_TRAINER_SERVER_CA_CERT``
        (a path) and ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (a path), which Kubeflow
        Trainer's ``TrainJobStatus`` runtime plugin injects into every trainer
        container, and ``TRAINREPORT_KUBEFLOW_METRICS`` (comma-separated globs:
        ``metrics``; a bad list is logged and ignored).

        Args:
            environ: the environment (default ``os.environ``).

        Raises:
            ConfigError: the URL is missing or not ``https://``.
        """
        settings = read_kubeflow_destination(environ) or KubeflowDestination(url="")
        return cls.from_destination(settings)

    @classmethod
    def from_destination(cls, settings: KubeflowDestination) -> KubeflowSink:
        """The sink for destination settings read from the environment (see :meth:`from_env`).

        Raises:
            ConfigError: the URL is missing or not ``https://``.
        """
        return cls(
            settings.url,
            token_file=settings.token_file,
            ca_certs=settings.ca_certs,
            metrics=settings.metrics,
        )

    # --- the Sink interface --------------------------------------------------------

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """Nothing to read (the endpoint keeps no history): opens at once. Never raises."""
        return Opened(capabilities=frozenset({CAPABILITY_SERIES_SUFFIX}), stored_task=None)

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Post the current state (replacing the stored trainer status). Never raises.

        Returns:
            :class:`Delivered` on 2xx; :class:`Rejected` on 400/401/403/404/413/422
            (and other 4xx); :class:`RetryLater` on 408/429/5xx but 501, a
            timeout or a connection error.
        """
        metrics = self._merge(update)
        updated_at = str(self._details.get("updated_at") or _now_rfc3339())
        body = build_body(
            status=self._status, details=self._details, metrics=metrics, updated_at=updated_at
        )
        self._log_left_out(body.left_out)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        try:
            status, headers, data, sent = self._post(body.data, deadline)
        except TransportError as exc:
            return RetryLater(self._scrub(str(exc)))
        except Exception as exc:  # a bug or an odd urllib3 error must not kill the thread
            return RetryLater(self._scrub(f"POST failed: {type(exc).__name__}: {exc}"))
        if 200 <= status < 300:
            return Delivered(bytes_sent=sent)
        return self._classify(status, headers, data)

    def close(self) -> None:
        """Release the connection pool. Idempotent."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.clear()

    # --- state -----------------------------------------------------------------------

    def _merge(self, update: Update) -> list[tuple[str, object]]:
        """Merge ``update``; return the current metrics in posting order (``MetricPriority``)."""
        if update.status is not None:
            self._status = update.status
        current: dict[str, object] = {}
        for key, value in update.status_details.items():
            if key in RESERVED_KEYS:
                self._details[key] = value
            else:
                current[key] = value
        for series in update.series or ():
            self._series.add(series.name)
            if len(series):
                newest = series.values[-1]
                if math.isfinite(newest):
                    self._non_finite.pop(series.name, None)
                else:
                    self._non_finite[series.name] = newest
        # The engine omits non-finite current values (and may carry the last finite
        # one it sent): the newest point wins.
        current.update(self._non_finite)
        arrival = self._arrival
        for name in current:
            arrival.setdefault(name, len(arrival))
        arrived = sorted(current.items(), key=lambda item: arrival[item[0]])
        return self._priority.order(arrived, series=self._series)

    def _log_left_out(self, left_out: tuple[tuple[str, str], ...]) -> None:
        fresh = [(n, r) for n, r in left_out if n not in self._left_out_logged]
        if not fresh:
            return
        self._left_out_logged.update(n for n, _ in fresh)
        by_reason: dict[str, list[str]] = {}
        for name, reason in fresh:
            by_reason.setdefault(reason, []).append(name)
        for reason, names in by_reason.items():
            _log.warning(
                "trainreport.kubeflow_metrics_left_out",
                reason=reason,
                names=[n[:100] for n in names[:_LISTED]],
                count=len(names),
            )

    # --- HTTP -------------------------------------------------------------------------

    def _classify(self, status: int, headers: Mapping[str, str], data: bytes) -> SendResult:
        _, message, body = _error_fields(data)
        reason_field = body.get("reason")
        reason = f"HTTP {status}"
        if isinstance(reason_field, str) and reason_field:
            reason += f" {reason_field[:50]}"
        if message:
            reason += f": {message[:_MESSAGE_CHARS]}"
        reason = self._scrub(reason)
        if _is_transient(status):
            now = datetime.datetime.now(datetime.timezone.utc)
            return RetryLater(reason, _parse_retry_after(headers.get("retry-after"), now=now))
        if status in (401, 403) and self._token_file is not None:
            self._token_file.forget()  # a refused token: read the file again next time
        return Rejected(reason, status)

    def _post(
        self, body: bytes, deadline: float | None
    ) -> tuple[int, Mapping[str, str], bytes, int]:
        """One POST, never retried: (status, lower-cased headers, body, bytes sent).

        Raises:
            TransportError: connection refused/reset, timeout, TLS or proxy error.
        """
        headers = {
            "User-Agent": "trainreport",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        token = self._token if self._token is not None else self._read_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        pool = self._pool_for_this_process()
        try:
            response = pool.request(
                "POST",
                self.url,
                body=body,
                headers=headers,
                timeout=self._timeout(deadline),
                retries=False,
                redirect=False,
                preload_content=True,
            )
        except urllib3.exceptions.TimeoutError as exc:
            if isinstance(exc, urllib3.exceptions.NewConnectionError):
                raise TransportError(f"POST failed to connect: {_cause(exc)}") from exc
            raise TransportError(f"POST timed out: {type(exc).__name__}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportError(f"POST failed: {_cause(exc)}") from exc
        sent = len(body) + sum(len(k) + len(v) + 4 for k, v in headers.items()) + len(self.url)
        lowered = {k.lower(): v for k, v in response.headers.items()}
        return response.status, lowered, response.data or b"", sent

    def _read_token(self) -> str | None:
        token_file = self._token_file
        if token_file is None:
            return None
        token, error = token_file.read()
        if error is not None:
            self._once.warning(
                ("token_file", error),
                "trainreport.token_file_unreadable",
                path=token_file.path,
                error=error,
            )
        return token

    def _timeout(self, deadline: float | None) -> urllib3.Timeout:
        return deadline_timeout(self.connect_timeout_seconds, self.read_timeout_seconds, deadline)

    def _pool_for_this_process(self) -> urllib3.PoolManager:
        """The pool, created on first use and again in a forked child (never the parent's)."""
        pid = os.getpid()
        if self._pool is None or self._pid != pid:
            self._pool = new_pool(self.url, self.ca_certs, num_pools=1)
            self._pid = pid
        return self._pool

    def _scrub(self, text: str) -> str:
        """``text`` without the token (defence in depth: reasons are logged)."""
        secrets = [self._token, self._token_file.last if self._token_file else None]
        for secret in secrets:
            if secret:
                text = text.replace(secret, "***")
        return text[:500]


def _now_rfc3339() -> str:
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return now.isoformat().replace("+00:00", "Z")
