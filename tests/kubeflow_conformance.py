"""A conformance server for Kubeflow Trainer's TrainJob status endpoint, written from its contract.

It plays Kubeflow Trainer's status server over real sockets, so
:class:`trainreport.KubeflowSink` is tested against the contract rather than
against itself (``docs/integrations.md`` states the contract). Its rules were
re-read in kubeflow/trainer v2.3.0 (tag ``v2.3.0``, commit
658725bdae5c7e3a0854d93ac6ff492e109a22ab): ``pkg/statusserver/server.go``
(route, handler, answers), ``middleware.go`` (the body cap), ``auth.go`` and
``utils.go`` (the token check and its per-TrainJob audience),
``pkg/apis/trainer/v1alpha1/trainjob_types.go`` (``TrainerStatus``, ``Metric``,
``UpdateTrainJobStatusRequest`` and their validation markers) and
``pkg/runtime/framework/plugins/trainjobstatus/trainjobstatus.go`` (the
variables and the projected token, 3600 s). Written from what that code does;
none of it is copied. In upstream's order:

- HTTPS only, with a certificate from a ``trustme`` test CA (the client must
  verify it against the CA file, as in a TrainJob);
- a ``Content-Length`` over 64 KiB is 413 before anything else (the
  middleware wraps the router): whatever the path or the token;
- only ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status``
  is routed; any other method or path is 404;
- the ``Authorization`` header must carry exactly one bearer credential
  (scheme in any case, any whitespace), a token issued with the audience
  :func:`token_audience` of the path's TrainJob, for a pod of that
  namespace, not expired (a projected token lives 3600 s): anything else is
  403 ``Forbidden`` (upstream never answers 401);
- a body that does not decode is 422 ``Invalid payload``; one without
  ``trainerStatus`` (``{}``, ``null``) is 200 and changes nothing;
- a broken field limit is 422 (``Invalid``, as the API server's validation
  answers); every error body is a Kubernetes ``Status``;
- a TrainJob that does not exist (its token may outlive it) is 404 (upstream's
  API server looks the job up before it checks the limits; no client can
  tell the two orders apart on a good body);
- each accepted post replaces the job's stored trainer status (no history is
  kept by the contract; :attr:`KubeflowConformanceServer.accepted` keeps one
  here for the tests).

Tokens are opaque strings here; the server keeps the claims upstream's OIDC
verifier checks (audience, namespace, expiry) beside each one, which is
what the signature check establishes upstream.

It is stricter than upstream in one way, on purpose: unknown fields are a 422
(Go's decoder would ignore them), so a typo in the client's body cannot pass.
Its validator is written here, separately from the client's body builder; only
the limits (constants) are shared.

Fault injection for tests: :meth:`fail_next` answers the next requests with a
status (and ``Retry-After``), :meth:`hang` makes requests wait without an
answer until :meth:`release` or :meth:`stop`, :meth:`rotate_token` expires a
job's tokens and issues a new one (the kubelet's rotation),
:meth:`issue_token` issues a token for a job that need not exist.
"""

from __future__ import annotations

import datetime
import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import trustme

from trainreport.sinks._kubeflow_status import (
    MAX_BODY_BYTES,
    MAX_METRICS,
    MAX_NAME_CHARS,
    MAX_REMAINING_SECONDS,
    MAX_VALUE_CHARS,
)

STATUS_PATH = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status$"
)
#: Bytes of an over-large body read (and dropped) before answering 413.
_DRAIN_BYTES = 1 << 20
_TRAINER_STATUS_FIELDS = frozenset(
    {"progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime"}
)
#: The projected token's lifetime (``tokenExpirySeconds`` of the TrainJobStatus plugin), s.
TOKEN_LIFETIME_SECONDS = 3600.0


def status_path(namespace: str, name: str) -> str:
    """The endpoint's path for one TrainJob (upstream's ``StatusUrl``)."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def token_audience(namespace: str, name: str) -> str:
    """The audience a TrainJob's projected token is issued for (upstream's ``TokenAudience``)."""
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def bearer_credential(header: str) -> str:
    """The one credential of a ``Bearer`` header, or ``""`` (upstream's ``extractRawToken``)."""
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return ""
    return parts[1]


@attrs.frozen
class Claims:
    """What the verifier checks of a token: its audience, its pod's namespace, its expiry."""

    audience: str
    namespace: str
    expires_at: float


@attrs.define
class Seen:
    """One request as the server saw it (the token itself is not kept)."""

    path: str
    had_token: bool
    token_ok: bool
    body_bytes: int
    answer: int


class InvalidError(ValueError):
    """A field limit of the contract is broken (answered with 422)."""


def _is_int(value: object) -> bool:
    return type(value) is int


def _rfc3339(value: object) -> bool:
    if not isinstance(value, str) or "T" not in value:
        return False
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.tzinfo is not None


def validate(document: object) -> dict[str, Any] | None:
    """Check a decoded body against the contract; return its ``trainerStatus``.

    Returns:
        The ``trainerStatus``, or ``None`` when the body has none (upstream
        answers 200 and applies nothing).

    Raises:
        InvalidError: with the first broken rule, in the API server's words.
    """
    if document is None:
        return None
    if not isinstance(document, dict) or not set(document) <= {"trainerStatus"}:
        raise InvalidError("body must be an object with only trainerStatus")
    status = document.get("trainerStatus")
    if status is None:
        return None
    if not isinstance(status, dict):
        raise InvalidError("trainerStatus: must be an object")
    unknown = set(status) - _TRAINER_STATUS_FIELDS
    if unknown:
        raise InvalidError(f"trainerStatus: unknown fields {sorted(unknown)}")
    if "lastUpdatedTime" not in status or not _rfc3339(status["lastUpdatedTime"]):
        raise InvalidError("lastUpdatedTime is required when trainerStatus is present")
    if "progressPercentage" in status:
        value = status["progressPercentage"]
        if not _is_int(value) or not 0 <= value <= 100:
            raise InvalidError("trainerStatus.progressPercentage: must be 0..100")
    if "estimatedRemainingSeconds" in status:
        value = status["estimatedRemainingSeconds"]
        if not _is_int(value) or not 0 <= value <= MAX_REMAINING_SECONDS:
            raise InvalidError("trainerStatus.estimatedRemainingSeconds: must be >= 0 (int32)")
    metrics = status.get("metrics", [])
    if not isinstance(metrics, list):
        raise InvalidError("trainerStatus.metrics: must be a list")
    if len(metrics) > MAX_METRICS:
        raise InvalidError(f"trainerStatus.metrics: must have at most {MAX_METRICS} items")
    for i, metric in enumerate(metrics):
        if not isinstance(metric, dict) or set(metric) != {"name", "value"}:
            raise InvalidError(f"trainerStatus.metrics[{i}]: must have exactly name and value")
        for key, limit in (("name", MAX_NAME_CHARS), ("value", MAX_VALUE_CHARS)):
            text = metric[key]
            if not isinstance(text, str) or not 1 <= len(text) <= limit:
                raise InvalidError(f"trainerStatus.metrics[{i}].{key}: must be 1..{limit} chars")
    return status


class KubeflowConformanceServer:
    """The status endpoint on 127.0.0.1 over TLS; see the module docstring.

    Args:
        directory: where the CA file is written.
        jobs: ``{(namespace, name): token}`` of the TrainJobs that exist, each
            with a token issued for it now (good for an hour).
        clock: the time tokens expire by, seconds (default ``time.time``).

    Attributes:
        ca_path: the CA file a client must trust (``KUBEFLOW_TRAINER_SERVER_CA_CERT``).
        stored: ``{(namespace, name): trainerStatus}`` after each accepted post.
        accepted: every accepted ``trainerStatus``, in order, per job.
        seen: every request, in order.
    """

    def __init__(
        self,
        directory: Path,
        jobs: Mapping[tuple[str, str], str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ca = trustme.CA()
        self.ca_path = directory / "kubeflow-ca.crt"
        self._ca.cert_pem.write_to_path(str(self.ca_path))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        self._lock = threading.Lock()
        self._clock = clock
        self._jobs = set(jobs)
        self._tokens: dict[str, Claims] = {}
        for job, token in jobs.items():
            self.issue_token(job, token)
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.accepted: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.seen: list[Seen] = []
        self._failures: list[tuple[int, str | None]] = []
        self._hanging = False
        self._release = threading.Event()
        self.requests_in_flight = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"

    def url(self, namespace: str, name: str) -> str:
        """The full status URL of a job (``KUBEFLOW_TRAINER_SERVER_URL``)."""
        return self.base_url + status_path(namespace, name)

    # --- fault injection ---------------------------------------------------------------

    def fail_next(self, status: int, count: int = 1, retry_after: str | None = None) -> None:
        """Answer the next ``count`` requests with ``status`` (and ``Retry-After``)."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * count)

    def issue_token(
        self, job: tuple[str, str], token: str, lifetime_seconds: float = TOKEN_LIFETIME_SECONDS
    ) -> None:
        """Issue ``token`` for ``job``'s pods (the job need not exist) for ``lifetime_seconds``."""
        claims = Claims(token_audience(*job), job[0], self._clock() + lifetime_seconds)
        with self._lock:
            self._tokens[token] = claims

    def rotate_token(self, job: tuple[str, str], token: str) -> None:
        """The hour is up: ``job``'s tokens expire, and the kubelet's new ``token`` is good."""
        audience = token_audience(*job)
        with self._lock:
            for old, claims in list(self._tokens.items()):
                if claims.audience == audience:
                    self._tokens[old] = attrs.evolve(claims, expires_at=-1.0)
        self.issue_token(job, token)

    def hang(self) -> None:
        """Make every request wait, unanswered, until :meth:`release` or :meth:`stop`."""
        self._release.clear()
        self._hanging = True

    def release(self) -> None:
        """Let hanging requests go on and answer normally again."""
        self._hanging = False
        self._release.set()

    def stop(self) -> None:
        """Release hanging requests and shut the server down."""
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)

    # --- handling ------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a slow client cannot hold a thread forever

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read ``seen``."""

            def do_POST(self) -> None:
                """Handle one status update."""
                server._handle(self)

            def do_GET(self) -> None:
                """Nothing can be read from the endpoint: only POST is routed."""
                server._not_routed(self)

        return Handler

    def _answer(
        self,
        handler: BaseHTTPRequestHandler,
        code: int,
        message: str,
        reason: str,
        *,
        retry_after: str | None = None,
        body: bytes | None = None,
    ) -> None:
        if body is None:  # a metav1.Status as upstream encodes it (no kind, no apiVersion)
            body = json.dumps(
                {
                    "metadata": {},
                    "status": "Failure",
                    "message": message,
                    "reason": reason,
                    "code": code,
                }
            ).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            handler.send_header("Retry-After", retry_after)
        handler.end_headers()
        handler.wfile.write(body)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests_in_flight += 1
        try:
            if self._hanging:
                self._release.wait(60)
            self._handle_now(handler)
        finally:
            with self._lock:
                self.requests_in_flight -= 1

    def _not_routed(self, handler: BaseHTTPRequestHandler) -> None:
        """Any method but POST: the size cap still comes first, then 404."""
        length = int(handler.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._too_large(handler, length, has_token=False)
            return
        with self._lock:
            self.seen.append(Seen(handler.path, False, False, 0, 404))
        self._answer(handler, 404, "Not found", "NotFound")

    def _too_large(self, handler: BaseHTTPRequestHandler, length: int, *, has_token: bool) -> None:
        handler.rfile.read(min(length, _DRAIN_BYTES))  # let the client finish sending
        with self._lock:
            self.seen.append(Seen(handler.path, has_token, False, length, 413))
        self._answer(handler, 413, "Payload too large", "RequestEntityTooLarge")

    def _authorized(self, token: str, job: tuple[str, str]) -> bool:
        """Upstream's checks of a verified token: audience, namespace, expiry."""
        with self._lock:
            claims = self._tokens.get(token) if token else None
        return (
            claims is not None
            and claims.audience == token_audience(*job)
            and claims.namespace == job[0]
            and self._clock() < claims.expires_at
        )

    def _handle_now(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path
        token = bearer_credential(handler.headers.get("Authorization", ""))
        match = STATUS_PATH.match(path)
        job = (match.group(1), match.group(2)) if match else None
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
        token_ok = job is not None and self._authorized(token, job)
        length = int(handler.headers.get("Content-Length") or 0)

        def seen(answer: int, size: int = 0) -> None:
            with self._lock:
                self.seen.append(Seen(path, bool(token), token_ok, size, answer))

        if failure is not None:
            handler.rfile.read(min(length, MAX_BODY_BYTES))
            seen(failure[0], length)
            self._answer(handler, failure[0], "injected", "InternalError", retry_after=failure[1])
            return
        if length > MAX_BODY_BYTES:  # the middleware, before routing and auth
            self._too_large(handler, length, has_token=bool(token))
            return
        if job is None:
            seen(404)
            self._answer(handler, 404, "Not found", "NotFound")
            return
        if not token_ok:
            seen(403)
            self._answer(handler, 403, "Forbidden", "Forbidden")
            return
        data = handler.rfile.read(length)
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):
            seen(422, len(data))
            self._answer(handler, 422, "Invalid payload", "Invalid")
            return
        try:
            status = validate(document)
        except InvalidError as exc:
            seen(422, len(data))
            self._answer(handler, 422, str(exc), "Invalid")
            return
        if status is not None:
            with self._lock:
                exists = job in self._jobs
            if not exists:
                seen(404, len(data))
                self._answer(handler, 404, "Train job not found", "NotFound")
                return
            with self._lock:
                self.stored[job] = status  # replace: the contract keeps no history
                self.accepted.setdefault(job, []).append(status)
        seen(200, len(data))
        self._answer(handler, 200, "", "", body=json.dumps(document).encode())
