"""The Starlette application of the reference job-status service (``docs/protocol.md``).

Request handling is the thin I/O shell around two pure layers: ``_wire``
(strict JSON and validation) and ``_db`` (storage transactions). Parsing,
validation, storage and the encoding of large responses run in the thread
pool, so a big request never stalls the event loop. The shell enforces the
browser rules (``_security``: Host, Origin, JSON-only writes), the body limits
and budget (``_body``) and the bearer token, and renders every error as
``{"error": code, "message": text}``. Slow clients are bounded below the app,
in the protocol (``_connections``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from datetime import datetime, timezone
from typing import Any, NamedTuple

from prometheus_client import CONTENT_TYPE_LATEST
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
from trainreport._wire._protocol import (
    ENCODING_GZIP,
    ERROR_SERIES_GAP,
    ERROR_STALE_ATTEMPT,
    ERROR_STALE_WRITER,
    EXTENSION_SERIES_SUFFIX,
    EXTENSION_SERIES_TIMES,
    TaskStatus,
)
from trainreport.server import _page
from trainreport.server._auth import (
    WWW_AUTHENTICATE,
    Access,
    Authentication,
    Authenticator,
    principal_of,
)
from trainreport.server._body import BodyLimits, MemoryBudget, held_body
from trainreport.server._config import ServerConfig, server_config
from trainreport.server._contract import openapi_document, to_json
from trainreport.server._db._backend import StorageUnavailable
from trainreport.server._db._database import (
    Applied,
    Database,
    SeriesGap,
    StaleAttempt,
    StaleWriter,
    UpdateOutcome,
)
from trainreport.server._metrics import (
    DATABASE_ERRORS,
    RequestMetrics,
    ServerMetrics,
    is_database_error,
)
from trainreport.server._responses import HeldResponse, estimated_bytes, hold_response
from trainreport.server._retention import RetentionWorker
from trainreport.server._routes import (
    ENDPOINTS,
    LIMIT,
    METRICS,
    NAME,
    NAMES,
    Endpoint,
    read_max_points,
    read_series_range,
)
from trainreport.server._security import RequestGuard, allowed_host_names
from trainreport.server._stale import STALE_KEY, staleness
from trainreport.server._text import check_text
from trainreport.server._wire import (
    ApiError,
    SeriesPoints,
    TaskUpdate,
    parse_json,
    validate_id,
    validate_patch,
    validate_update,
    validate_writer_claim,
)

__all__ = ["create_app"]

#: Seconds a client is asked to wait when the database cannot be reached (503).
DATABASE_RETRY_AFTER_SECONDS = 1

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def create_app(
    config: ServerConfig | str | os.PathLike[str],
    /,
    *,
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> Starlette:
    """Build the reference server's ASGI app.

    Args:
        config: the server's configuration (:class:`ServerConfig`: the
            database, tokens, limits, staleness and retention; its address,
            timeouts and connection cap are the ASGI server's business), or
            only the database: a SQLite file (created with its tables if
            missing) or a ``postgresql://`` URL (the ``postgres`` extra; the
            schema is migrated at start, see ``docs/server.md``).
        clock: wall-clock seconds since the Unix epoch (``time.time`` when
            ``None``): job token expiries, the time stored with every write,
            and staleness.
        options: fields of :class:`ServerConfig` set on top of ``config``
            (``token=``, ``max_body_bytes=``, ...). When ``config.token`` or
            ``config.secret`` is set, every ``/v1`` request except
            ``GET /v1/capabilities`` and ``GET /v1/openapi.json`` needs
            ``Authorization: Bearer <token>`` (reads too), else 401; a job
            token reads and writes its own job only (403 elsewhere). A
            request with a ``Host`` that is neither loopback, the listen
            address nor in ``allowed_hosts`` gets 421 (DNS rebinding);
            requests from another ``Origin`` are always 403, and writes need
            ``Content-Type: application/json`` (415), see ``_security``.

    Returns:
        The Starlette app. It closes its database at lifespan shutdown, so
        build a new app for every server run. ``app.state.database`` is the
        :class:`~trainreport.server._db._database.Database`.

    Raises:
        ValueError: a value :class:`ServerConfig` refuses (an empty token, a
            secret under 32 bytes, a limit below 1 byte, a time that is not a
            positive number), or an allowed host that is not a plain name.
        TypeError: an option that is not a field of :class:`ServerConfig`.
        sqlite3.Error: the database file cannot be opened.
        StorageUnavailable: the PostgreSQL database cannot be reached.
        RuntimeError: the database was written by a newer server.
    """
    config = server_config(config, **options)
    wall_clock = time.time if clock is None else clock
    authenticator = Authenticator(config.token, config.secret, wall_clock)
    hosts = allowed_host_names(config.host, config.allowed_hosts)
    limits = BodyLimits(
        max_body_bytes=config.max_body_bytes, max_decompressed_bytes=config.max_decompressed_bytes
    )
    db = Database(config.db)
    try:
        retention = RetentionWorker(
            db,
            retain_days=config.retain_days,
            interval_seconds=config.retention_interval_seconds,
            clock=lambda: datetime.fromtimestamp(wall_clock(), timezone.utc),
        )
    except ValueError:
        db.close()
        raise

    def count_stale() -> int:
        now = wall_clock()
        return sum(
            staleness(TaskStatus.RUNNING, t, now=now, stale_after_seconds=stale_after) is not None
            for t in db.health.running_task_update_times()
        )

    stale_after = config.stale_after_seconds
    metrics = ServerMetrics(db.health.count_tasks_by_status, count_stale)
    api = _Api(
        db,
        limits,
        MemoryBudget(config.body_budget_bytes),
        MemoryBudget(config.max_response_memory_bytes, alone_may_exceed=True),
        authenticator,
        metrics,
        clock=wall_clock,
        stale_after_seconds=stale_after,
        retention=retention,
    )
    routes = api.routes() + _page.routes()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        retention.start()
        try:
            yield
        finally:
            retention.stop()
            db.close()

    middleware = [
        Middleware(RequestMetrics, metrics=metrics, routes=routes),
        Middleware(_SecurityHeaders),
        Middleware(RequestGuard, allowed_hosts=hosts),
        Middleware(
            Authentication,
            authenticator=authenticator,
            protected=lambda path: _protected(path, authenticator.has_admin_token),
        ),
        Middleware(GZipMiddleware, minimum_size=1024),
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error_response,
            HTTPException: _http_error_response,
            # Database errors are answered where Starlette does not re-raise (a re-raised
            # error closes the connection, which a client may see as a reset, not a 500).
            **dict.fromkeys(DATABASE_ERRORS, _internal_error_response),
            StorageUnavailable: _unavailable_response,
            Exception: _internal_error_response,
        },
        lifespan=lifespan,
    )
    app.state.database = db
    app.state.metrics = metrics
    app.state.retention = retention
    app.state.response_budget = api.responses
    return app


#: ``/v1`` paths that need no token (discovery and the contract).
_OPEN_V1_PATHS = frozenset(e.path for e in ENDPOINTS if e.access is Access.OPEN)


def _protected(path: str, has_admin_token: bool) -> bool:
    """Whether a request path needs a token (when the server has any token or secret).

    Every ``/v1`` path but the open ones, unknown ones included (so a 404
    tells an anonymous client nothing), and ``/metrics`` when an admin token
    is set. Health checks and the page's HTML shells stay open.
    """
    if path == "/v1" or path.startswith("/v1/"):
        return path not in _OPEN_V1_PATHS
    return path == "/metrics" and has_admin_token


class _Api:
    """The endpoints of :data:`ENDPOINTS`; each validates, then runs one storage call off-loop."""

    def __init__(
        self,
        db: Database,
        limits: BodyLimits,
        budget: MemoryBudget,
        responses: MemoryBudget,
        auth: Authenticator,
        metrics: ServerMetrics,
        *,
        clock: Callable[[], float],
        stale_after_seconds: float,
        retention: RetentionWorker,
    ) -> None:
        self._db = db
        self._retention = retention
        self._clock = clock
        self._stale_after = stale_after_seconds
        self._limits = limits
        self._budget = budget
        self.responses = responses
        self._auth = auth
        self._metrics = metrics

    def routes(self) -> list[Route]:
        """One route per endpoint, each behind its access rule."""
        return [
            Route(e.path, self._guarded(e), methods=[e.method], name=e.handler) for e in ENDPOINTS
        ]

    def _guarded(self, endpoint: Endpoint) -> Handler:
        """The endpoint's handler behind its access rule, checked before any body is read."""
        handler: Handler = getattr(self, endpoint.handler)
        access = endpoint.access

        async def guarded(request: Request) -> Response:
            raw_job = request.path_params.get("job_id")
            job_id = None if raw_job is None else validate_id(raw_job, "job_id")
            self._auth.authorize(principal_of(request), access, job_id)
            return await handler(request)

        return guarded

    def _utc_now(self) -> str:
        """The server's clock as ISO 8601 UTC with milliseconds (stored with every write)."""
        moment = datetime.fromtimestamp(self._clock(), timezone.utc)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    async def _budgeted(self, points: Callable[[], int], build: Callable[[], Response]) -> Response:
        """``build()`` in the thread pool, its memory (from ``points()``) held until it is sent.

        Raises:
            ApiError: 503 ``server_busy`` when the response memory budget has
                no room for it now (nothing is built).
        """
        release = hold_response(self.responses, estimated_bytes(await run_in_threadpool(points)))
        try:
            response = await run_in_threadpool(build)
        except BaseException:
            release()
            raise
        return HeldResponse(response, release)

    def _stale(self, status: str, updated_at: str) -> dict[str, Any] | None:
        return staleness(
            status, updated_at, now=self._clock(), stale_after_seconds=self._stale_after
        )

    def _with_stale(self, job: dict[str, Any]) -> dict[str, Any]:
        """A job document whose stale task summaries carry their ``stale`` object."""
        for task in job["tasks"]:
            stale = self._stale(task["status"], task["updated_at"])
            if stale is not None:
                task[STALE_KEY] = stale
        return job

    async def openapi(self, _request: Request) -> Response:
        return Response(_openapi_bytes(), media_type="application/json")

    async def capabilities(self, _request: Request) -> Response:
        return JSONResponse(
            {
                "extensions": [EXTENSION_SERIES_SUFFIX, EXTENSION_SERIES_TIMES],
                "encodings": [ENCODING_GZIP],
                "max_body_bytes": self._limits.max_body_bytes,
                "max_decompressed_bytes": self._limits.max_decompressed_bytes,
            }
        )

    async def list_jobs(self, request: Request) -> Response:
        limit = LIMIT.read_int(request.query_params)
        principal = principal_of(request)
        own_job = None if principal is None or principal.admin else principal.job_id

        def read() -> Response:
            if own_job is None:
                jobs = self._db.jobs.list_jobs(limit=limit)
            else:
                job = self._db.jobs.get_job(own_job)  # a job token lists its own job, if it exists
                jobs = [] if job is None else [job]
            return JSONResponse({"jobs": [self._with_stale(job) for job in jobs]})

        return await run_in_threadpool(read)

    async def get_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        job = await run_in_threadpool(self._db.jobs.get_job, job_id)
        if job is None:
            raise ApiError(404, "not_found", f"job {job_id!r} does not exist")
        return JSONResponse(self._with_stale(job))

    async def put_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        now = self._utc_now()
        created, job = await run_in_threadpool(lambda: self._db.jobs.put_job(job_id, now=now))
        return JSONResponse(self._with_stale(job), status_code=201 if created else 200)

    async def cancel_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        now = self._utc_now()
        job = await run_in_threadpool(lambda: self._db.jobs.cancel_job(job_id, now=now))
        if job is None:
            raise ApiError(404, "not_found", f"job {job_id!r} does not exist")
        return JSONResponse(self._with_stale(job))

    async def delete_job(self, request: Request) -> Response:
        job_id = validate_id(request.path_params["job_id"], "job_id")
        now = self._utc_now()
        deleted = await run_in_threadpool(lambda: self._db.jobs.delete_job(job_id, now=now))
        if not deleted:
            raise ApiError(404, "not_found", f"job {job_id!r} does not exist")
        self._retention.wake()  # its points go in the background, in bounded batches
        return JSONResponse({"job_id": job_id, "deleted": True})

    async def get_task(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        include = METRICS.read_bool(request.query_params)

        def read() -> Response:
            found = self._db.tasks.read_task(job_id, task_id, include_metrics=include)
            if found is None:
                raise ApiError(404, "not_found", f"task {job_id}/{task_id} does not exist")
            task, updated_at = found
            stale = self._stale(task["status"], updated_at)
            if stale is not None:  # outside status_details: a plain job API never sends it
                task[STALE_KEY] = stale
            return JSONResponse(task)  # encoded here, off the event loop

        if not include:
            return await run_in_threadpool(read)
        return await self._budgeted(lambda: self._db.tasks.point_count(job_id, task_id), read)

    async def patch_task(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        now = self._utc_now()

        def store(body: bytearray) -> _Patched:  # one trip to the thread pool: parse to commit
            patch = validate_patch(check_text(parse_json(body), body))
            stored = self._db.tasks.patch_task(job_id, task_id, patch, now=now)
            return _Patched(stored.status, stored.cancel_requested, _points(patch.metrics or ()))

        async with held_body(request, self._limits, self._budget) as body:
            stored = await run_in_threadpool(store, body)
        self._metrics.points_stored.inc(stored.points)
        return JSONResponse({"status": stored.status, "cancel_requested": stored.cancel_requested})

    async def open_writer(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        # ?metrics=false: the task without its curves (a resuming client reads them
        # series by series from GET .../series, never as one giant document).
        include = METRICS.read_bool(request.query_params)
        async with held_body(request, self._limits, self._budget) as body:
            claim = validate_writer_claim(
                check_text(parse_json(body), body) if body.strip() else None
            )

        def open_writer() -> Response:
            opened = self._db.tasks.open_writer(job_id, task_id, claim, include_metrics=include)
            if isinstance(opened, StaleAttempt):
                raise ApiError(
                    409,
                    ERROR_STALE_ATTEMPT,
                    "an earlier attempt cannot take the task from a later one; stop writing",
                    {
                        "writer_generation": opened.current_generation,
                        "holder": opened.holder.to_json(),
                    },
                )
            return JSONResponse(
                {
                    "writer_generation": opened.generation,
                    "last_writer_generation": opened.last_writer_generation,
                    "task": opened.task,
                    "series_lengths": opened.series_lengths,
                    "cancel_requested": opened.cancel_requested,
                }
            )

        return await self._budgeted(
            lambda: self._db.tasks.point_count(job_id, task_id) if include else 0, open_writer
        )

    async def post_update(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        now = self._utc_now()

        def apply(body: bytearray) -> tuple[TaskUpdate, UpdateOutcome]:  # one trip, as above
            update = validate_update(check_text(parse_json(body), body))
            return update, self._db.tasks.apply_update(job_id, task_id, update, now=now)

        async with held_body(request, self._limits, self._budget) as body:
            update, outcome = await run_in_threadpool(apply, body)
        if isinstance(outcome, StaleWriter):
            current = outcome.current_generation
            raise ApiError(
                409,
                ERROR_STALE_WRITER,
                f"writer generation {update.writer_generation} is not the task's current "
                f"generation ({'none issued' if current is None else current}); stop writing",
                {"writer_generation": current},
            )
        if isinstance(outcome, SeriesGap):
            raise ApiError(
                409,
                ERROR_SERIES_GAP,
                "a series offset is beyond the stored length; resend from series_lengths",
                {"series_lengths": outcome.series_lengths},
            )
        if not outcome.duplicate:
            self._metrics.points_stored.inc(_points(update.series))
        return JSONResponse(_applied_body(outcome))

    async def get_series(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)
        names: list[str] | None = None
        params = request.query_params
        if NAMES.name in params or NAME.name in params:
            names = [n for v in params.getlist(NAMES.name) for n in v.split(",")]
            names += params.getlist(NAME.name)
        max_points = read_max_points(params)
        low, high, after = read_series_range(params)

        def read() -> Response:
            columns = self._db.tasks.series_columns(
                job_id, task_id, names, from_step=low, to_step=high, after=after
            )
            if columns is None:
                raise ApiError(404, "not_found", f"task {job_id}/{task_id} does not exist")
            return JSONResponse({"series": _page.shape_columns(columns, max_points)})

        # The columns are read in full whatever the thinning: every point is budgeted.
        return await self._budgeted(
            lambda: self._db.tasks.point_count(job_id, task_id, names), read
        )

    async def get_series_summary(self, request: Request) -> Response:
        job_id, task_id = _task_ids(request)

        def read() -> Response:
            summary = self._db.tasks.series_summary(job_id, task_id)
            if summary is None:
                raise ApiError(404, "not_found", f"task {job_id}/{task_id} does not exist")
            return JSONResponse({"series": summary})

        # One point read per series: budgeted as that many points.
        return await self._budgeted(lambda: self._db.tasks.series_count(job_id, task_id), read)

    # -- operations -----------------------------------------------------------------------

    async def healthz(self, _request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, _request: Request) -> Response:
        try:
            await run_in_threadpool(self._db.health.check_ready)
        except Exception as exc:  # any failure means "not ready"; the probe must answer
            if is_database_error(exc):
                self._metrics.database_errors.inc()
            get_logger().warning("trainreport.not_ready", error=type(exc).__name__)
            # A StorageUnavailable names the database without its password.
            reason = (
                str(exc)
                if isinstance(exc, (RuntimeError, StorageUnavailable))
                else "the database did not answer"
            )
            return JSONResponse(
                {"status": "unavailable", "reason": reason},
                status_code=503,
                headers={"Retry-After": "5"},
            )
        return JSONResponse({"status": "ok"})

    async def metrics(self, _request: Request) -> Response:
        body = await run_in_threadpool(self._metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)


class _Patched(NamedTuple):
    status: str
    cancel_requested: bool
    points: int


def _points(series: Iterable[SeriesPoints]) -> int:
    return sum(len(s) for s in series)


@functools.cache
def _openapi_bytes() -> bytes:
    """The contract, generated once per process (it depends on the code only)."""
    return to_json(openapi_document()).encode("utf-8")


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


def _task_ids(request: Request) -> tuple[str, str]:
    return (
        validate_id(request.path_params["job_id"], "job_id"),
        validate_id(request.path_params["task_id"], "task_id"),
    )


# -- errors -----------------------------------------------------------------------------


async def _api_error_response(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": WWW_AUTHENTICATE} if exc.status_code == 401 else None
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
    """503 with ``Retry-After``: the database cannot be reached now; the client retries."""
    request.app.state.metrics.database_errors.inc()
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
    if is_database_error(exc):
        request.app.state.metrics.database_errors.inc()
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
