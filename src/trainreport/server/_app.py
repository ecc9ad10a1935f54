"""The Starlette application of the reference job-status service (``docs/protocol.md``).

Request handling is the thin I/O shell around two pure layers: ``_wire``
(strict JSON and validation) and ``_db`` (transactions on SQLite or
PostgreSQL; a database that cannot be reached is answered 503 with
``Retry-After``). Parsing,
validation, storage and the encoding of large responses run in the thread
pool, so a big request never stalls the event loop. The shell enforces the
browser rules (``_security``: Host, Origin, JSON-only writes), the body limits
and budget (``_body``) and the bearer token, and renders every error as
``{"error": code, "message": text}``. Slow clients are bounded below the app,
in the protocol (``_connections``).
"""

from __future__ import annotations

import contextlib
import hmac
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from datetime import datetime, timezone
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainreport._logging import get_logger
from trainreport.server import _page
from trainreport.server._body import BodyBudget, BodyLimits, held_body
from trainreport.server._db import (
    Applied,
    Database,
    SeriesGap,
    StaleWriter,
    Stored,
    UpdateOutcome,
)
from trainreport.server._retention import DEFAULT_RETENTION_INTERVAL_SECONDS, RetentionWorker
from trainreport.server._security import RequestGuard, allowed_host_names
from trainreport.server._storage import StorageUnavailable
from trainreport.server._text import check_text
from trainreport.server._wire import (
    EXTENSION_SERIES_SUFFIX,
    ApiError,
    TaskUpdate,
    parse_json,
    validate_id,
    validate_patch,
    validate_update,
)

__all__ = [
    "DEFAULT_BODY_BUDGET_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "create_app",
]

#: Default limit on the request body bytes received (8 MiB).
DEFAULT_MAX_BODY_BYTES = 8 * 2**20
#: Default limit on a gzip request body after decompression (4 MiB: 4x the largest update
#: HttpSink sends by default, see docs/server.md).
DEFAULT_MAX_DECOMPRESSED_BYTES = 4 * 2**20
#: Default budget of request body bytes (after decompression) held at once, server-wide.
DEFAULT_BODY_BUDGET_BYTES = 32 * 2**20
#: ``GET /v1/jobs`` returns at most this many jobs unless ``?limit=`` says otherwise.
_DEFAULT_JOB_LIMIT = 100
_MAX_JOB_LIMIT = 1000
#: Seconds a client is asked to wait when the database cannot be reached (503).
DATABASE_RETRY_AFTER_SECONDS = 1

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def create_app(
    db_path: str | os.PathLike[str],
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    body_budget_bytes: int = DEFAULT_BODY_BUDGET_BYTES,
    allowed_hosts: Iterable[str] = (),
    retain_days: float | None = None,
    retention_interval_seconds: float = DEFAULT_RETENTION_INTERVAL_SECONDS,
) -> Starlette:
    """Build the reference server's ASGI app on a SQLite file or a PostgreSQL database.

    Args:
        db_path: the SQLite database file (created with its tables if missing),
            or a ``postgresql://`` URL (the ``postgres`` extra; the schema is
            migrated at start, see ``docs/server.md``).
        token: when set, every ``/v1`` request except ``GET /v1/capabilities``
            needs ``Authorization: Bearer <token>`` (reads too), else 401.
            The token is never logged.
        max_body_bytes: limit on the request body bytes received (after
            transfer decoding, before gzip decompression), in bytes; larger -> 413.
        max_decompressed_bytes: limit on a gzip body after decompression, in
            bytes; larger -> 413. Inflated in steps checked against it.
        body_budget_bytes: request body bytes (after decompression) the whole
            server holds at once; a request that would exceed it gets 503 with
            ``Retry-After`` (``docs/server.md``).
        allowed_hosts: host names the server answers for besides loopback
            (``localhost``, ``127.0.0.0/8``, ``::1``); a request with any other
            ``Host`` gets 421 (DNS rebinding). ``"*"`` answers every host.
            Requests from another ``Origin`` are always 403, and writes need
            ``Content-Type: application/json`` (415), see ``_security``.
        retain_days: delete finished jobs (no task pending or running) this
            many days after their last write; ``None`` keeps every job.
        retention_interval_seconds: seconds between two retention passes.

    Returns:
        The Starlette app. It closes its database at lifespan shutdown, so
        build a new app for every server run. ``app.state.database`` is the
        :class:`~trainreport.server._db.Database`.

    Raises:
        ValueError: an empty token, a limit below 1 byte, an allowed host
            that is not a plain name, or a retention setting that is not positive.
        sqlite3.Error: the database file cannot be opened.
        StorageUnavailable: the PostgreSQL database cannot be reached.
        RuntimeError: the database was written by a newer server.
    """
    if token is not None and not token:
        raise ValueError("token must be a non-empty string or None")
    if max_body_bytes < 1 or max_decompressed_bytes < 1 or body_budget_bytes < 1:
        raise ValueError("body limits must be at least 1 byte")
    hosts = allowed_host_names(None, allowed_hosts)
    limits = BodyLimits(
        max_body_bytes=max_body_bytes, max_decompressed_bytes=max_decompressed_bytes
    )
    db = Database(db_path)
    try:
        retention = RetentionWorker(
            db, retain_days=retain_days, interval_seconds=retention_interval_seconds
        )
    except ValueError:
        db.close()
        raise
    api = _Api(db, limits, BodyBudget(body_budget_bytes), retention)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        retention.start()
        try:
            yield
        finally:
            retention.stop()
            db.close()

    middleware = [Middleware(_SecurityHeaders), Middleware(RequestGuard, allowed_hosts=hosts)]
    if token is not None:
        middleware.append(Middleware(_BearerAuth, token=token))
    middleware.append(Middleware(GZipMiddleware, minimum_size=1024))
    app = Starlette(
        routes=api.routes() + _page.routes(),
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error_response,
            HTTPException: _http_error_response,
            StorageUnavailable: _unavailable_response,
            Exception: _internal_error_response,
        },
        lifespan=lifespan,
    )
    app.state.database = db
    app.state.retention = retention
    return app


class _Api:
    """The ``/v1`` endpoints; each validates, then runs one storage call in the thread pool."""

    def __init__(
        self, db: Database, limits: BodyLimits, budget: BodyBudget, retention: RetentionWorker
    ) -> None:
        self._db = db
        self._limits = limits
        self._budget = budget
        self._retention = retention

    def routes(self) -> list[Route]:
        task = "/v1/jobs/{job_id}/tasks/{task_id}"
        return [
            Route("/v1/capabilities", self.capabilities, methods=["GET"]),
            Route("/v1/jobs", self.list_jobs, methods=["GET"]),
            Route("/v1/jobs/{job_id}", self.get_job, methods=["GET"]),
            Route("/v1/jobs/{job_id}", self.put_job, methods=["PUT"]),
            Route("/v1/jobs/{job_id}", self.delete_job, methods=["DELETE"]),
            Route("/v1/jobs/{job_id}/cancel", self.cancel_job, methods=["POST"]),
            Route(task, self.get_task, methods=["GET"]),
            Route(task, self.patch_task, methods=["PATCH"]),
            Route(task + "/writers", self.open_writer, methods=["POST"]),
            Route(task + "/updates", self.post_update, methods=["POST"]),
            Route(task + "/series", self.get_series, methods=["GET"]),
        ]

    async def capabilities(self, _request: Request) -> Response:
        return JSONResponse(
            {
                "extensions": [EXTENSION_SERIES_SUFFIX],
                "encodings": ["gzip"],
                "max_body_bytes": self._limits.max_body_bytes,
                "max_decompressed_bytes": self._limits.max_decompressed_bytes,
            }
        )

    async def list_jobs(self, request: Request) -> Response:
        limit = _int_query(request, "limit", _DEFAULT_JOB_LIMIT, 1, _MAX_JOB_LIMIT)
        return await run_in_threadpool(
            lambda: JSONResponse({"jobs": self._db.list_jobs(limit=limit)})
        )

    async def get_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        job = await run_in_threadpool(self._db.get_job, job_id)
        if job is None:
            raise ApiError(404, "not_found", f"job {job_id!r} does not exist")
        return JSONResponse(job)

    async def put_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        now = _utc_now()
        created, job = await run_in_threadpool(lambda: self._db.put_job(job_id, now=now))
        return JSONResponse(job, status_code=201 if created else 200)

    async def cancel_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        now = _utc_now()
        job = await run_in_threadpool(lambda: self._db.cancel_job(job_id, now=now))
        if job is None:
            raise ApiError(404, "not_found", f"job {job_id!r} does not exist")
        return JSONResponse(job)

    async def delete_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        now = _utc_now()
        deleted = await run_in_threadpool(lambda: self._db.delete_job(job_id, now=now))
        if not deleted:
            raise ApiError(404, "not_found", f"job {job_id!r} does not exist")
        self._retention.wake()  # its points go in the background, in bounded batches
        return JSONResponse({"job_id": job_id, "deleted": True})

    async def get_task(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        include = _bool_query(request, "metrics", default=True)

        def read() -> Response:
            task = self._db.get_task(job_id, task_id, include_metrics=include)
            if task is None:
                raise ApiError(404, "not_found", f"task {job_id}/{task_id} does not exist")
            return JSONResponse(task)  # encoded here, off the event loop

        return await run_in_threadpool(read)

    async def patch_task(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        now = _utc_now()

        def store(body: bytearray) -> Stored:  # one trip to the thread pool: parse to commit
            patch = validate_patch(check_text(parse_json(body), body))
            return self._db.patch_task(job_id, task_id, patch, now=now)

        async with held_body(request, self._limits, self._budget) as body:
            stored = await run_in_threadpool(store, body)
        return JSONResponse({"status": stored.status, "cancel_requested": stored.cancel_requested})

    async def open_writer(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        async with held_body(request, self._limits, self._budget) as body:
            if body.strip() and not isinstance(check_text(parse_json(body), body), dict):
                raise ApiError(422, "invalid_body", "expected an object @ $", {"path": "$"})

        def open_writer() -> Response:
            opened = self._db.open_writer(job_id, task_id)
            return JSONResponse(
                {
                    "writer_generation": opened.generation,
                    "task": opened.task,
                    "series_lengths": opened.series_lengths,
                    "cancel_requested": opened.cancel_requested,
                }
            )

        return await run_in_threadpool(open_writer)

    async def post_update(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        now = _utc_now()

        def apply(body: bytearray) -> tuple[TaskUpdate, UpdateOutcome]:  # one trip, as above
            update = validate_update(check_text(parse_json(body), body))
            return update, self._db.apply_update(job_id, task_id, update, now=now)

        async with held_body(request, self._limits, self._budget) as body:
            update, outcome = await run_in_threadpool(apply, body)
        if isinstance(outcome, StaleWriter):
            current = outcome.current_generation
            raise ApiError(
                409,
                "stale_writer",
                f"writer generation {update.writer_generation} is not the task's current "
                f"generation ({'none issued' if current is None else current}); stop writing",
                {"writer_generation": current},
            )
        if isinstance(outcome, SeriesGap):
            raise ApiError(
                409,
                "series_gap",
                "a series offset is beyond the stored length; resend from series_lengths",
                {"series_lengths": outcome.series_lengths},
            )
        return JSONResponse(_applied_body(outcome))

    async def get_series(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        names: list[str] | None = None
        if "names" in request.query_params or "name" in request.query_params:
            names = [n for v in request.query_params.getlist("names") for n in v.split(",")]
            names += request.query_params.getlist("name")
        max_points = _int_query(request, "max_points", 0, 0, 1_000_000)

        def read() -> Response:
            columns = self._db.series_columns(job_id, task_id, names)
            if columns is None:
                raise ApiError(404, "not_found", f"task {job_id}/{task_id} does not exist")
            return JSONResponse({"series": _page.shape_columns(columns, max_points)})

        return await run_in_threadpool(read)


def _applied_body(outcome: Applied) -> dict[str, Any]:
    body: dict[str, Any] = {
        "series_lengths": outcome.series_lengths,
        "sequence": outcome.sequence,
        "status": outcome.status,
        "cancel_requested": outcome.cancel_requested,
    }
    if outcome.duplicate:
        body["duplicate"] = True
    return body


# -- request helpers --------------------------------------------------------------------


def _utc_now() -> str:
    """The server's wall clock as ISO 8601 UTC with milliseconds (the I/O shell's clock)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _task_ids(request: Request) -> tuple[str, str]:
    return (
        validate_id(request.path_params["job_id"], "job_id"),
        validate_id(request.path_params["task_id"], "task_id"),
    )


def _int_query(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ApiError(400, "invalid_query", f"{name} must be an integer in [{low}, {high}]")
    return value


def _bool_query(request: Request, name: str, *, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise ApiError(400, "invalid_query", f"{name} must be true or false")


# -- errors -----------------------------------------------------------------------------


async def _api_error_response(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": 'Bearer realm="trainreport"'} if exc.status_code == 401 else None
    retry_after = exc.extra.get("retry_after_seconds")
    if exc.status_code == 503 and isinstance(retry_after, int):
        headers = {"Retry-After": str(retry_after)}
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error_response(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return JSONResponse(
        {"error": code, "message": str(exc.detail)},
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _unavailable_response(request: Request, exc: Exception) -> Response:
    get_logger().warning(
        "trainreport.database_unavailable",
        method=request.method,
        path=request.url.path,
        error=str(exc),  # names the database without its password
    )
    return JSONResponse(
        {
            "error": "database_unavailable",
            "message": "the database cannot be reached now; retry later",
        },
        status_code=503,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
    )


async def _internal_error_response(request: Request, exc: Exception) -> Response:
    get_logger().error(
        "trainreport.server_error",
        method=request.method,
        path=request.url.path,
        error=type(exc).__name__,
    )
    return JSONResponse(
        {"error": "internal_error", "message": "the server failed; see its log"}, status_code=500
    )


# -- middleware -------------------------------------------------------------------------


class _BearerAuth:
    """Requires ``Authorization: Bearer <token>`` on every ``/v1`` path but capabilities."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] == "http"
            and (path == "/v1" or path.startswith("/v1/"))
            and path != "/v1/capabilities"
            and not self._authorized(scope)
        ):
            error = ApiError(401, "unauthorized", "a valid 'Authorization: Bearer' token is needed")
            response = await _api_error_response(Request(scope), error)
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, credentials = value.strip().partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    credentials.strip(), self._token
                )
        return False


class _SecurityHeaders:
    """Adds ``nosniff``, ``no-referrer`` and (on the API) ``no-store`` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        api = scope.get("path", "").startswith("/v1")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                if api:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, send_with_headers)
