"""The published contract: the OpenAPI 3.1 document and JSON Schemas, generated from the code.

Nothing here is written twice: the endpoints, their access rules and query
parameters come from the route table (``_routes.ENDPOINTS``), the request
bodies from the declarations that validate them (``_wire.REQUEST_BODIES``,
``_wire.STATUS_DETAILS``), and the responses from the declarations below,
which ``tests/server/test_server_contract.py`` checks real answers against.
``python scripts/make_contract.py`` writes the checked-in copies
(``docs/openapi.json``, ``docs/schemas/*.schema.json``); a test fails when
they drift from what this module generates. The server serves the same
document at ``GET /v1/openapi.json``.

Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from trainreport._wire._protocol import EXTENSION_SERIES_SUFFIX, TASK_PATH_TEMPLATE, UPDATES_PATH
from trainreport.server._auth import Access
from trainreport.server._routes import ENDPOINTS, Endpoint, Query
from trainreport.server._schema import (
    Boolean,
    Enum,
    Field,
    Integer,
    List,
    MapOf,
    Node,
    Nullable,
    Number,
    Open,
    Record,
    Text,
)
from trainreport.server._stale import STALE_KEY
from trainreport.server._wire import (
    ID_PATTERN,
    REQUEST_BODIES,
    SERIES_NAME,
    STATUS_DETAILS,
    TASK_PATCH,
    TASK_STATUSES,
    TASK_UPDATE,
)

__all__ = ["RESPONSES", "STANDALONE_SCHEMAS", "openapi_document", "standalone_schema", "to_json"]

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_VERSION = "1"
_STATUS = Enum(tuple(sorted(TASK_STATUSES)))
_TIMESTAMP = Text(description="the server's clock, ISO 8601 UTC with milliseconds")
_LENGTHS = MapOf(SERIES_NAME, Integer(0), description="points stored per series (every series)")

_STALE = Record(
    (
        Field("seconds_since_update", Integer(0, description="since the last write"), True),
        Field("last_update_at", _TIMESTAMP, True),
        Field(
            "message",
            Text(description='for people: "no update for 4 min: the process may have died"'),
            True,
        ),
    ),
    description=(
        "Present only while the task is running and has had no write for longer than the "
        "server's stale_after_seconds (default 180): its process may have died. Outside "
        "status_details: a plain job API never sends it."
    ),
)
#: ``GET`` of a task: the baseline shape (and ``stale`` from the reference server).
TASK = Record(
    (
        Field("status", _STATUS, True),
        Field("status_details", STATUS_DETAILS, True),
        Field(STALE_KEY, _STALE),
    ),
    description="A task as stored; status_details.metrics lists every series in full.",
)
_TASK_SUMMARY = Record(
    (
        Field("task_id", Text(pattern=ID_PATTERN), True),
        Field("status", _STATUS, True),
        Field("phase", Open("status_details.phase, or null"), True),
        Field("step", Open("status_details.step, or null"), True),
        Field("max_steps", Open("status_details.max_steps, or null"), True),
        Field("percentage_done", Open("status_details.percentage_done, or null"), True),
        Field("updated_at", _TIMESTAMP, True),
        Field(STALE_KEY, _STALE),
    ),
)
_JOB = Record(
    (
        Field("job_id", Text(pattern=ID_PATTERN), True),
        Field("created_at", _TIMESTAMP, True),
        Field("updated_at", _TIMESTAMP, True),
        Field("cancel_requested", Boolean(), True),
        Field("tasks", List(_TASK_SUMMARY), True),
    ),
)
#: One series in ``GET .../series/summary``: its length and last point, no columns.
_SERIES_SUMMARY = Record(
    (
        Field("length", Integer(0, description="points stored"), True),
        Field("last_step", Integer(0, description="the last point's step"), True),
        Field("last_epoch", Integer(0, nullable=True, description="the last point's epoch"), True),
        Field(
            "last_value",
            Number(description="the last point's value; null when not finite"),
            True,
        ),
        Field(
            "last_time",
            Number(
                description=(
                    "the last point's wall-clock time, seconds since the Unix epoch; null "
                    "when unknown"
                )
            ),
            True,
        ),
    )
)

_SERIES_COLUMNS = Record(
    (
        Field(
            "length",
            Integer(0, description="the stored length, whatever the range and the thinning"),
            True,
        ),
        Field(
            "first_index",
            Integer(
                0,
                description=(
                    "the stored index of the first point returned (0 without from/after; "
                    "after itself when no point matches)"
                ),
            ),
            True,
        ),
        Field("steps", List(Integer(0)), True),
        Field("epochs", List(Integer(0, nullable=True)), True),
        Field("values", List(Number()), True),
        Field(
            "times",
            List(
                Number(
                    description=(
                        "the point's wall-clock time, seconds since the Unix epoch; null when "
                        "unknown (recorded by a client that sent no times)"
                    )
                )
            ),
            True,
        ),
    ),
)

#: Every response body, by the name the OpenAPI document gives it.
RESPONSES: dict[str, Node] = {
    "Capabilities": Record(
        (
            Field("extensions", List(Text()), True),
            Field("encodings", List(Text()), True),
            Field("max_body_bytes", Integer(1), True),
            Field("max_decompressed_bytes", Integer(1), True),
        ),
    ),
    "OpenApiDocument": Open("this document"),
    "Task": TASK,
    "PatchResult": Record(
        (Field("status", _STATUS, True), Field("cancel_requested", Boolean(), True)),
    ),
    "WriterOpened": Record(
        (
            Field("writer_generation", Integer(1), True),
            Field(
                "last_writer_generation",
                Integer(
                    1,
                    nullable=True,
                    description="the generation whose update the task's last write was; "
                    "null when none is recorded or a baseline PATCH came last",
                ),
            ),
            Field("task", Nullable(TASK, "null when the task does not exist yet"), True),
            Field("series_lengths", _LENGTHS, True),
            Field("cancel_requested", Boolean(), True),
        ),
    ),
    "UpdateResult": Record(
        (
            Field("series_lengths", _LENGTHS, True),
            Field("sequence", Integer(1), True),
            Field("status", _STATUS, True),
            Field("cancel_requested", Boolean(), True),
            Field("duplicate", Boolean("present (true) when nothing was applied")),
        ),
    ),
    "Job": _JOB,
    "JobList": Record((Field("jobs", List(_JOB), True),)),
    "JobDeleted": Record(
        (
            Field("job_id", Text(pattern=ID_PATTERN), True),
            Field("deleted", Boolean(), True),
        ),
    ),
    "SeriesColumns": Record((Field("series", MapOf(SERIES_NAME, _SERIES_COLUMNS), True),)),
    "SeriesSummary": Record((Field("series", MapOf(SERIES_NAME, _SERIES_SUMMARY), True),)),
    "Health": Record(
        (
            Field("status", Enum(("ok", "unavailable")), True),
            Field("reason", Text(description="why the server is not ready")),
        ),
    ),
    "PrometheusText": Text(description="the Prometheus text exposition format, version 0.0.4"),
    "Error": Record(
        (
            Field(
                "error", Text(description="the code, e.g. invalid_body (docs/protocol.md)"), True
            ),
            Field("message", Text(description="for people; never contains a token"), True),
        ),
        extra=Open("more fields for some codes, e.g. path, series_lengths, limit_bytes"),
    ),
}

#: The standalone JSON Schemas written to ``docs/schemas/`` (file stem -> node, title).
STANDALONE_SCHEMAS: dict[str, tuple[Node, str]] = {
    "status_details": (STATUS_DETAILS, "trainreport status_details (the baseline task details)"),
    "task_patch": (TASK_PATCH, f"trainreport PATCH {TASK_PATH_TEMPLATE} body"),
    "task_update": (
        TASK_UPDATE,
        f"trainreport {EXTENSION_SERIES_SUFFIX} POST {TASK_PATH_TEMPLATE}{UPDATES_PATH} body",
    ),
}

_ACCESS_TEXT = {
    Access.OPEN: "No token needed.",
    Access.JOB: (
        "The admin token, or a job token for this job (another job's token: 403). "
        "A server started without tokens needs none."
    ),
    Access.JOB_LIST: (
        "The admin token lists every job; a job token lists its own job only. "
        "A server started without tokens needs none."
    ),
    Access.ADMIN: "The admin token only (a job token: 403). A server without tokens needs none.",
    Access.OPERATOR: "The admin token when the server has one (a job token: 403); else none.",
}


def standalone_schema(stem: str) -> dict[str, Any]:
    """One of :data:`STANDALONE_SCHEMAS` as a JSON Schema document (draft 2020-12)."""
    node, title = STANDALONE_SCHEMAS[stem]
    schema = node.schema()
    assert isinstance(schema, dict)
    return {"$schema": _DRAFT, "title": title, **schema}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _parameters(endpoint: Endpoint) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": Text(pattern=ID_PATTERN).schema(),
            "description": f"the {name.removesuffix('_id')} id",
        }
        for name in ("job_id", "task_id")
        if "{" + name + "}" in endpoint.path
    ]
    params += [_query(q) for q in endpoint.query]
    return params


def _query(query: Query) -> dict[str, Any]:
    schema = query.node.schema()
    if query.default is not None:  # as the text of a query string
        default = query.default
        schema = {**schema, "default": str(default).lower() if default is True else default}
    if query.repeated:
        schema = {"type": "array", "items": schema}
    return {
        "name": query.name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": query.description,
        **({"explode": True} if query.repeated else {}),
    }


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for reply in endpoint.replies:
        schema = _ref(reply.schema or "Error")
        if reply.schema is None and reply.status < 400:
            responses[str(reply.status)] = {"description": reply.description}
            continue
        responses[str(reply.status)] = {
            "description": reply.description,
            "content": {reply.media_type: {"schema": schema}},
        }
    errors = {"application/json": {"schema": _ref("Error")}}
    responses.setdefault("4XX", {"description": "refused", "content": errors})
    responses.setdefault(
        "5XX",
        {"description": "the server failed or is busy (503: Retry-After)", "content": errors},
    )
    operation: dict[str, Any] = {
        "operationId": endpoint.handler,
        "summary": endpoint.summary,
        "description": _ACCESS_TEXT[endpoint.access],
        "tags": list(endpoint.tags),
        "x-trainreport-access": endpoint.access.value,
        "security": _security(endpoint.access),
        "responses": responses,
    }
    parameters = _parameters(endpoint)
    if parameters:
        operation["parameters"] = parameters
    if endpoint.request is not None:
        operation["requestBody"] = {
            "required": endpoint.request != "WriterOpen",
            "content": {"application/json": {"schema": _ref(endpoint.request)}},
        }
    return operation


def _security(access: Access) -> list[dict[str, list[str]]]:
    if access is Access.OPEN:
        return []
    return [{"bearer": []}, {}]  # {}: a server started without tokens asks for none


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the reference server (``GET /v1/openapi.json``)."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    schemas: dict[str, Any] = {name: node.schema() for name, node in REQUEST_BODIES.items()}
    schemas["StatusDetails"] = STATUS_DETAILS.schema()
    schemas.update({name: node.schema() for name, node in RESPONSES.items()})
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": _DRAFT,
        "info": {
            "title": "trainreport reference job-status service",
            "version": _VERSION,
            "summary": "Job and task status with metric curves (docs/protocol.md)",
            "description": (
                "Generated from the server's code (scripts/make_contract.py). The wire rules "
                "and error codes are in docs/protocol.md; tokens, health checks and metrics "
                "in docs/server.md."
            ),
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": [{"url": "http://127.0.0.1:8321", "description": "trainreport serve"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "The admin token (--token-file) or a job token "
                        "(trainreport token JOB_ID: trj1.<job>.<expires>.<signature>)"
                    ),
                }
            },
        },
    }


def to_json(document: Any) -> str:
    """The text written to ``docs/``: sorted keys, two-space indent, a final newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
