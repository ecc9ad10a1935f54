"""The reference server's endpoints as one table: path, method, handler, access rule, contract.

The app builds its routes from :data:`ENDPOINTS` (``_app``), each behind the
authorization its :class:`~trainreport.server._auth.Access` declares, and the
OpenAPI document is generated from the same table (``_contract``), so the
published contract lists exactly the endpoints that exist, with the access
rule each one enforces. Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from trainreport._wire._protocol import (
    CAPABILITIES_PATH,
    EXTENSION_SERIES_SUFFIX,
    JOB_PATH_TEMPLATE,
    JOBS_PATH,
    TASK_PATH_TEMPLATE,
    UPDATES_PATH,
    WRITERS_PATH,
)
from trainreport.server._auth import Access
from trainreport.server._errors import ApiError
from trainreport.server._page import MIN_THINNED_POINTS
from trainreport.server._schema import Enum, Integer, Text

__all__ = [
    "ENDPOINTS",
    "LIMIT",
    "MAX_POINTS",
    "METRICS",
    "NAME",
    "NAMES",
    "SERIES_AFTER",
    "SERIES_FROM",
    "SERIES_TO",
    "Endpoint",
    "Query",
    "Reply",
    "read_max_points",
    "read_series_range",
]


@attrs.frozen
class Query:
    """A query parameter: its rule (read by the handler, published in the contract).

    Args:
        name: the parameter.
        node: its rule once read: an :class:`Integer` (parsed from decimal text),
            an :class:`Enum` of words (compared in lower case) or :class:`Text`.
        default: the value when absent (``None``: absent means "not given").
        description: for the contract.
        repeated: whether it may be given several times (read with ``getlist``).
    """

    name: str
    node: Integer | Enum | Text
    default: object
    description: str
    repeated: bool = False

    def read_int(self, params: Mapping[str, str]) -> int:
        """The parameter as an integer within the node's bounds, or its default.

        Raises:
            ApiError: 400 ``invalid_query``.
        """
        assert isinstance(self.node, Integer)
        assert isinstance(self.default, int)
        raw = params.get(self.name)
        if raw is None:
            return self.default
        try:
            value = int(raw)
        except ValueError:
            value = self.node.minimum - 1
        if not self.node.minimum <= value <= self.node.maximum:
            raise ApiError(
                400,
                "invalid_query",
                f"{self.name} must be an integer in [{self.node.minimum}, {self.node.maximum}]",
            )
        return value

    def read_optional_int(self, params: Mapping[str, str]) -> int | None:
        """The parameter as an integer within the node's bounds, or ``None`` when absent.

        Raises:
            ApiError: 400 ``invalid_query`` (not a decimal integer, or out of bounds).
        """
        if self.name not in params:
            return None
        return attrs.evolve(self, default=0).read_int(params)

    def read_bool(self, params: Mapping[str, str]) -> bool:
        """The parameter as a boolean (``1/true/yes``, ``0/false/no``), or its default.

        Raises:
            ApiError: 400 ``invalid_query``.
        """
        raw = params.get(self.name)
        if raw is None:
            return bool(self.default)
        if raw.lower() in _TRUE_WORDS:
            return True
        if raw.lower() in _FALSE_WORDS:
            return False
        raise ApiError(400, "invalid_query", f"{self.name} must be true or false")


_TRUE_WORDS = ("1", "true", "yes")
_FALSE_WORDS = ("0", "false", "no")

#: ``GET /v1/jobs?limit=``.
LIMIT = Query("limit", Integer(1, 1000), 100, "the most jobs returned, newest first")
#: ``GET .../tasks/{task_id}?metrics=`` and ``POST .../writers?metrics=``.
METRICS = Query(
    "metrics",
    Enum(_TRUE_WORDS + _FALSE_WORDS),
    True,
    "false leaves status_details.metrics out (the page's poll; a resuming writer, which reads "
    "the series from GET .../series); case-insensitive",
)
#: ``GET .../series?names=``.
NAMES = Query("names", Text(), None, "comma-separated series names to return")
#: ``GET .../series?name=``.
NAME = Query("name", Text(), None, "one series name (repeat it; for names with a comma)", True)
#: ``GET .../series?max_points=``.
MAX_POINTS = Query(
    "max_points",
    Integer(0, 1_000_000),
    0,
    "thin each series to about this many points for drawing, keeping spikes and gaps: 0 "
    f"(the default) returns every point, otherwise at least {MIN_THINNED_POINTS} (each bucket "
    f"keeps its lowest and highest value, and the first and last points are kept); 1 to "
    f"{MIN_THINNED_POINTS - 1} are refused with 400 invalid_query",
)


#: ``GET .../series?from=``.
SERIES_FROM = Query(
    "from",
    Integer(0),
    None,
    "only the points whose step is at least this (inclusive); max_points thins within the range",
)
#: ``GET .../series?to=``.
SERIES_TO = Query(
    "to",
    Integer(0),
    None,
    "only the points whose step is at most this (inclusive); max_points thins within the range",
)
#: ``GET .../series?after=``.
SERIES_AFTER = Query(
    "after",
    Integer(0),
    0,
    "only the points at index >= this (a live page asks for what came after the length it has; "
    "first_index in the answer says where the points returned start)",
)


def read_series_range(params: Mapping[str, str]) -> tuple[int | None, int | None, int]:
    """``?from=``, ``?to=`` and ``?after=`` of ``GET .../series``: ``(from, to, after)``.

    Raises:
        ApiError: 400 ``invalid_query`` for a value that is not an integer >= 0,
            or a ``from`` above ``to``.
    """
    low = SERIES_FROM.read_optional_int(params)
    high = SERIES_TO.read_optional_int(params)
    after = SERIES_AFTER.read_int(params)
    if low is not None and high is not None and low > high:
        raise ApiError(400, "invalid_query", f"from ({low}) must not be above to ({high})")
    return low, high, after


def read_max_points(params: Mapping[str, str]) -> int:
    """``?max_points=``: 0 (every point) or an integer in ``[MIN_THINNED_POINTS, 1000000]``.

    1 to 3 are refused rather than clamped: no thinning can keep a bucket's
    lowest and highest value and the first and last points in fewer than 4, and
    answering with every point (what they did before) is the opposite of what
    was asked.

    Raises:
        ApiError: 400 ``invalid_query`` for anything else (a non-integer too).
    """
    node = MAX_POINTS.node
    assert isinstance(node, Integer)
    try:
        value = MAX_POINTS.read_int(params)
    except ApiError:
        value = -1
    if value == 0 or MIN_THINNED_POINTS <= value <= node.maximum:
        return value
    raise ApiError(
        400,
        "invalid_query",
        f"{MAX_POINTS.name} must be 0 (every point) or an integer in "
        f"[{MIN_THINNED_POINTS}, {node.maximum}]",
    )


@attrs.frozen
class Reply:
    """One documented answer of an endpoint.

    Args:
        status: the HTTP status.
        description: when it is given.
        schema: the name of its body's schema in the OpenAPI components
            (``None``: the error body for 4xx/5xx, nothing for others).
        media_type: the body's media type.
    """

    status: int
    description: str
    schema: str | None = None
    media_type: str = "application/json"


@attrs.frozen
class Endpoint:
    """One route of the server.

    Args:
        method: the HTTP method.
        path: the Starlette path template, e.g. ``/v1/jobs/{job_id}``.
        handler: the name of the ``_Api`` method that answers it.
        access: who may call it (enforced before the handler runs).
        summary: one line for the contract.
        request: the name of the request body's schema, or ``None`` (no body).
        replies: the answers, besides the errors every endpoint may give.
        tags: the contract's grouping.
        query: the query parameters it reads.
    """

    method: str
    path: str
    handler: str
    access: Access
    summary: str
    request: str | None = None
    replies: tuple[Reply, ...] = ()
    tags: tuple[str, ...] = ()
    query: tuple[Query, ...] = ()


_TASK = TASK_PATH_TEMPLATE
_NOT_FOUND_TASK = Reply(404, "the task does not exist")
_NOT_FOUND_JOB = Reply(404, "the job does not exist")
_INVALID = Reply(422, "the body is not a valid request (`path` names the problem)")

#: Every endpoint of the server (the chart page's HTML shells aside, see ``_page``).
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "GET",
        CAPABILITIES_PATH,
        "capabilities",
        Access.OPEN,
        "Discover the extensions, request encodings and body limits",
        replies=(Reply(200, "what this server accepts", "Capabilities"),),
        tags=("discovery",),
    ),
    Endpoint(
        "GET",
        "/v1/openapi.json",
        "openapi",
        Access.OPEN,
        "This contract, as an OpenAPI 3.1 document",
        replies=(Reply(200, "the OpenAPI document", "OpenApiDocument"),),
        tags=("discovery",),
    ),
    Endpoint(
        "GET",
        JOBS_PATH,
        "list_jobs",
        Access.JOB_LIST,
        "List the newest jobs (a job token sees its own job only)",
        replies=(Reply(200, "the jobs, newest first", "JobList"),),
        tags=("jobs",),
        query=(LIMIT,),
    ),
    Endpoint(
        "GET",
        JOB_PATH_TEMPLATE,
        "get_job",
        Access.JOB,
        "Read a job and its task summaries",
        replies=(Reply(200, "the job", "Job"), _NOT_FOUND_JOB),
        tags=("jobs",),
    ),
    Endpoint(
        "PUT",
        JOB_PATH_TEMPLATE,
        "put_job",
        Access.JOB,
        "Create a job (idempotent; any body is ignored)",
        replies=(Reply(201, "created", "Job"), Reply(200, "it existed", "Job")),
        tags=("jobs",),
    ),
    Endpoint(
        "DELETE",
        JOB_PATH_TEMPLATE,
        "delete_job",
        Access.ADMIN,
        "Delete a job, its tasks and their curves at once, whatever their state (admin "
        "token only); its writers are fenced (409 stale_writer)",
        replies=(
            Reply(200, "deleted (its points are purged in the background)", "JobDeleted"),
            _NOT_FOUND_JOB,
        ),
        tags=("jobs",),
    ),
    Endpoint(
        "POST",
        JOB_PATH_TEMPLATE + "/cancel",
        "cancel_job",
        Access.ADMIN,
        "Ask a job's runs to stop (admin token only)",
        replies=(Reply(200, "the job, now cancel-requested", "Job"), _NOT_FOUND_JOB),
        tags=("jobs",),
    ),
    Endpoint(
        "GET",
        _TASK,
        "get_task",
        Access.JOB,
        "Read a task in the baseline shape (?metrics=false leaves out the curves)",
        replies=(Reply(200, "the stored task", "Task"), _NOT_FOUND_TASK),
        tags=("baseline",),
        query=(METRICS,),
    ),
    Endpoint(
        "PATCH",
        _TASK,
        "patch_task",
        Access.JOB,
        "Write a task: merge status_details shallowly; metrics replace every series",
        request="TaskPatch",
        replies=(Reply(200, "stored", "PatchResult"), _INVALID),
        tags=("baseline",),
    ),
    Endpoint(
        "POST",
        _TASK + WRITERS_PATH,
        "open_writer",
        Access.JOB,
        f"{EXTENSION_SERIES_SUFFIX}: open a writer (issues the next writer generation)",
        request="WriterOpen",
        replies=(Reply(200, "the generation, stored task and lengths", "WriterOpened"), _INVALID),
        tags=(EXTENSION_SERIES_SUFFIX,),
        query=(METRICS,),
    ),
    Endpoint(
        "POST",
        _TASK + UPDATES_PATH,
        "post_update",
        Access.JOB,
        f"{EXTENSION_SERIES_SUFFIX}: apply series suffixes and details, fenced and sequenced",
        request="TaskUpdate",
        replies=(
            Reply(200, "applied, or a duplicate (`duplicate: true`)", "UpdateResult"),
            Reply(409, "`stale_writer` or `series_gap`"),
            _INVALID,
        ),
        tags=(EXTENSION_SERIES_SUFFIX,),
    ),
    Endpoint(
        "GET",
        _TASK + "/series",
        "get_series",
        Access.JOB,
        "Read series as columns, thinned for drawing "
        "(?names=, ?name=, ?max_points=, ?from=, ?to=, ?after=)",
        replies=(Reply(200, "the columns", "SeriesColumns"), _NOT_FOUND_TASK),
        tags=("page",),
        query=(NAMES, NAME, MAX_POINTS, SERIES_FROM, SERIES_TO, SERIES_AFTER),
    ),
    Endpoint(
        "GET",
        _TASK + "/series/summary",
        "get_series_summary",
        Access.JOB,
        "List the task's series: each one's length and last point, without reading its points "
        "(the page's first read)",
        replies=(
            Reply(200, "per series, its length and last point", "SeriesSummary"),
            _NOT_FOUND_TASK,
        ),
        tags=("page",),
    ),
    Endpoint(
        "GET",
        "/healthz",
        "healthz",
        Access.OPEN,
        "Liveness: the process answers",
        replies=(Reply(200, "alive", "Health"),),
        tags=("operations",),
    ),
    Endpoint(
        "GET",
        "/readyz",
        "readyz",
        Access.OPEN,
        "Readiness: the database is reachable and its migrations are applied",
        replies=(
            Reply(200, "ready", "Health"),
            Reply(503, "not ready (`reason` says why)", "Health"),
        ),
        tags=("operations",),
    ),
    Endpoint(
        "GET",
        "/metrics",
        "metrics",
        Access.OPERATOR,
        "Prometheus metrics (the admin token when one is set)",
        replies=(
            Reply(
                200,
                "the Prometheus text exposition format",
                "PrometheusText",
                media_type="text/plain",
            ),
        ),
        tags=("operations",),
    ),
)
