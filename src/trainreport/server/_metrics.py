"""The reference server's Prometheus metrics (``GET /metrics``), one registry per app.

Every app owns its own :class:`prometheus_client.CollectorRegistry` (never the
process-wide default), so several servers in one process (tests, a notebook)
never share or clash over a metric. Labels carry route templates
(``/v1/jobs/{job_id}/tasks/{task_id}``), never job ids or raw paths: the
series count stays bounded and a scrape reveals no job.

Metrics (``docs/server.md``, "Metrics"):

- ``trainreport_http_requests_total{method, route, status}``: every request,
  refusals by the browser rules and authentication included.
- ``trainreport_update_duration_seconds{route}``: time to answer a write of
  task data (``PATCH`` a task, ``POST .../updates``), body reading included.
- ``trainreport_points_stored_total``: points stored by this process
  (duplicates and refused requests do not count).
- ``trainreport_database_errors_total``: database failures seen by requests,
  readiness checks and scrapes.
- ``trainreport_tasks{status}``, ``trainreport_active_tasks`` and
  ``trainreport_stale_tasks``: tasks in the database by status, those running,
  and those running without a write for ``stale_after_seconds`` (the rule of
  ``server/_stale.py``), read at scrape time.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainreport._logging import get_logger
from trainreport._wire._protocol import TASK_PATH_TEMPLATE, UPDATES_PATH, TaskStatus
from trainreport.server._db._backend import StorageUnavailable

__all__ = ["DATABASE_ERRORS", "ServerMetrics", "is_database_error"]

#: Exceptions that mean "the database failed" (the storage layer's errors).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, StorageUnavailable)
with contextlib.suppress(ImportError):  # the postgres extra
    import psycopg

    DATABASE_ERRORS += (psycopg.Error,)
#: Routes whose request duration is the update latency histogram.
_UPDATE_ROUTES = frozenset(
    {
        ("PATCH", TASK_PATH_TEMPLATE),
        ("POST", TASK_PATH_TEMPLATE + UPDATES_PATH),
    }
)
_OTHER_ROUTE = "other"


def is_database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the database rather than of the request. Never raises."""
    return isinstance(exc, DATABASE_ERRORS)


class ServerMetrics:
    """The metrics of one app, in a registry of their own.

    Args:
        task_counts: reads the number of tasks per status from the database
            (``Database.health.count_tasks_by_status``); called at scrape time.
        stale_tasks: counts the stale tasks (``server/_stale.py``: running,
            no write for ``stale_after_seconds``); called at scrape time.
    """

    def __init__(
        self,
        task_counts: Callable[[], Mapping[str, int]],
        stale_tasks: Callable[[], int],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "trainreport_http_requests",
            "HTTP requests answered, by method, route template and status",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.update_duration = Histogram(
            "trainreport_update_duration_seconds",
            "Seconds to answer a write of task data (PATCH a task, POST updates)",
            ("route",),
            registry=self.registry,
        )
        self.points_stored = Counter(
            "trainreport_points_stored",
            "Series points stored by this process",
            registry=self.registry,
        )
        self.database_errors = Counter(
            "trainreport_database_errors",
            "Database failures seen by requests, readiness checks and scrapes",
            registry=self.registry,
        )
        self.registry.register(_TaskCollector(task_counts, stale_tasks, self.database_errors))

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format (version 0.0.4)."""
        return generate_latest(self.registry)


class _TaskCollector(Collector):
    """Task gauges read from the database at scrape time.

    A failed read counts a database error and leaves the gauges out of that
    scrape (the scrape itself still answers).
    """

    def __init__(
        self,
        task_counts: Callable[[], Mapping[str, int]],
        stale_tasks: Callable[[], int],
        errors: Counter,
    ) -> None:
        self._task_counts = task_counts
        self._stale_tasks = stale_tasks
        self._errors = errors

    def describe(self) -> Iterable[Metric]:
        return []  # collected lazily: describing would query the database at registration

    def collect(self) -> Iterable[Metric]:
        try:
            counts = dict(self._task_counts())
            stale = self._stale_tasks()
        except Exception as exc:  # the scrape must answer even when the database does not
            if is_database_error(exc):
                self._errors.inc()
            get_logger().warning("trainreport.metrics_tasks_failed", error=type(exc).__name__)
            return
        by_status = GaugeMetricFamily(
            "trainreport_tasks", "Tasks in the database, by status", labels=("status",)
        )
        for status, count in sorted(counts.items()):
            by_status.add_metric((status,), count)
        yield by_status
        yield GaugeMetricFamily(
            "trainreport_active_tasks",
            "Tasks whose status is running",
            value=counts.get(TaskStatus.RUNNING, 0),
        )
        yield GaugeMetricFamily(
            "trainreport_stale_tasks",
            "Running tasks without a write for longer than stale_after_seconds "
            "(their process may have died)",
            value=stale,
        )


class RequestMetrics:
    """ASGI middleware (outermost): counts every request by route template and status.

    Args:
        app: the wrapped application.
        metrics: where to count.
        routes: the app's routes, matched to find each request's template;
            a path no route matches is counted as ``other``.
    """

    def __init__(self, app: ASGIApp, metrics: ServerMetrics, routes: Sequence[BaseRoute]) -> None:
        self._app = app
        self._metrics = metrics
        self._routes = routes

    def _route(self, scope: Scope) -> str:
        for route in self._routes:
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                return str(getattr(route, "path", _OTHER_ROUTE))
        return _OTHER_ROUTE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees if the app fails before answering

        async def send_and_count(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._app(scope, receive, send_and_count)
        finally:
            method = str(scope.get("method", ""))
            route = self._route(scope)
            self._metrics.requests.labels(method, route, str(status)).inc()
            if (method, route) in _UPDATE_ROUTES:
                self._metrics.update_duration.labels(route).observe(time.perf_counter() - started)
