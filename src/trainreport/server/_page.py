"""The live chart page: two static HTML shells, their script and style, and uPlot.

The shells contain no data and no ids, so nothing a client sent is ever
interpolated into HTML: the script takes the job and task ids from the URL
path, fetches JSON, and writes text with ``textContent`` (escaping by
construction). When the server has a token, the page reads it from the URL
fragment (``#token=...``, which browsers never send to a server, so it never
reaches a log) and sends it as a bearer header.

The script, the style and the chart library (uPlot, vendored under
``static/vendor/uplot`` by ``scripts/update_uplot.sh``) are served by this
server under ``/static/``; a strict Content-Security-Policy admits scripts and
styles from this origin only, and no inline code at all. Nothing is loaded from
elsewhere: the page works without internet access.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from trainreport._wire._protocol import PAGE_PATH_TEMPLATE
from trainreport.server._errors import ApiError
from trainreport.server._wire import validate_id

__all__ = [
    "MIN_THINNED_POINTS",
    "STATIC_FILES",
    "downsample_indices",
    "routes",
    "shape_columns",
]

#: The fewest points a thinned series is asked for: one bucket's lowest and highest
#: value plus the series' first and last point (``/series?max_points=`` 1 to 3 is a 400).
MIN_THINNED_POINTS = 4

#: Every file ``GET /static/{path}`` serves (nothing else under the package is reachable),
#: with its media type.
STATIC_FILES: Mapping[str, str] = {
    "page.js": "text/javascript; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
    "vendor/uplot/uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "vendor/uplot/uPlot.min.css": "text/css; charset=utf-8",
    "vendor/uplot/LICENSE": "text/plain; charset=utf-8",
    "vendor/uplot/VERSION": "text/plain; charset=utf-8",
}

_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<link rel="icon" href="data:,">
<title>trainreport</title>
<link rel="stylesheet" href="/static/vendor/uplot/uPlot.min.css?v={v_uplot_css}">
<link rel="stylesheet" href="/static/page.css?v={v_css}">
</head>
<body data-page="{page}">
<header class="top"><a class="brand" href="/">trainreport</a>
<nav id="crumbs" aria-label="breadcrumbs"></nav>
<span id="live" class="live" role="status">connecting…</span></header>
<main id="main"></main>
<script src="/static/vendor/uplot/uPlot.iife.min.js?v={v_uplot}"></script>
<script src="/static/page.js?v={v_js}"></script>
</body>
</html>
"""

#: Scripts and styles from this origin only (no inline code, no eval), data from this
#: origin only; PNG export draws on a canvas, downloads are ``blob:`` links.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self' data: blob:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)


class _Static:
    """One static file, read once from the package, with its ``ETag``."""

    def __init__(self, path: str, media_type: str) -> None:
        node = resources.files("trainreport.server") / "static"
        for part in path.split("/"):
            node = node / part
        self.body = node.read_bytes()
        self.media_type = media_type
        self.version = hashlib.sha256(self.body).hexdigest()[:16]
        self.etag = f'"{self.version}"'

    def response(self, request: Request) -> Response:
        headers = {"ETag": self.etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == self.etag:
            return Response(status_code=304, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


_files: dict[str, _Static] = {}


def _file(path: str) -> _Static:
    if path not in _files:
        _files[path] = _Static(path, STATIC_FILES[path])
    return _files[path]


_shells: dict[str, str] = {}


def _shell(page: str) -> Response:
    if page not in _shells:
        _shells[page] = _TEMPLATE.format(
            page=page,
            v_js=_file("page.js").version,
            v_css=_file("page.css").version,
            v_uplot=_file("vendor/uplot/uPlot.iife.min.js").version,
            v_uplot_css=_file("vendor/uplot/uPlot.min.css").version,
        )
    return HTMLResponse(
        _shells[page],
        headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY, "Cache-Control": "no-cache"},
    )


async def _index(_request: Request) -> Response:
    return _shell("index")


async def _task(request: Request) -> Response:
    validate_id(request.path_params["job_id"], "job_id")
    validate_id(request.path_params["task_id"], "task_id")
    return _shell("task")


async def _static(request: Request) -> Response:
    path = request.path_params["path"]
    if path not in STATIC_FILES:
        raise ApiError(404, "not_found", f"no static file {path!r}")
    return _file(path).response(request)


def routes() -> list[Route]:
    """The page routes: ``GET /`` (jobs), ``GET /jobs/{job_id}/tasks/{task_id}`` (a task,
    with ``?run=JOB/TASK`` for more runs side by side) and ``GET /static/{path}``.

    No auth on any of them: the shells and static files hold no data; the data comes
    from ``/v1``.
    """
    return [
        Route("/", _index, methods=["GET"]),
        Route(PAGE_PATH_TEMPLATE, _task, methods=["GET"]),
        Route("/static/{path:path}", _static, methods=["GET"]),
    ]


def downsample_indices(values: Sequence[float | None], max_points: int) -> list[int]:
    """Indices of the points to draw when a series has more than ``max_points`` points.

    The series is cut into ``max_points // 2`` buckets; each bucket keeps its
    lowest and highest finite value (so spikes survive) and its first ``null``
    (so gaps survive), in index order. The first and last points are always kept.

    Args:
        values: the series' values, ``None`` for a non-finite point.
        max_points: the target count (>= :data:`MIN_THINNED_POINTS`; below it,
            every index); the result may slightly exceed it when buckets hold gaps.

    Returns:
        Increasing indices into ``values``; all of them when ``len(values) <= max_points``.
        Never raises.
    """
    n = len(values)
    if n <= max_points or max_points < MIN_THINNED_POINTS:
        return list(range(n))
    buckets = max_points // 2
    size = math.ceil(n / buckets)
    keep: set[int] = {0, n - 1}
    for start in range(0, n, size):
        low = high = gap = -1
        low_value = high_value = 0.0
        for i in range(start, min(start + size, n)):
            v = values[i]
            if v is None:
                if gap < 0:
                    gap = i
                continue
            if low < 0 or v < low_value:
                low, low_value = i, v
            if high < 0 or v > high_value:
                high, high_value = i, v
        keep.update(i for i in (low, high, gap) if i >= 0)
    return sorted(keep)


#: The columns of a series in a ``/series`` answer, each thinned alike.
_COLUMNS = ("steps", "epochs", "values", "times")


def shape_columns(
    columns: Mapping[str, Mapping[str, Any]], max_points: int
) -> dict[str, dict[str, Any]]:
    """Thin each series' columns to ``max_points`` when > 0 (docs/server.md, ``/series``).

    Args:
        columns: ``{name: {"length", "first_index", "steps", "epochs", "values",
            "times"}}`` as read (``TaskStore.series_columns``): the points of the
            range asked for, the series' full stored ``length`` and the stored
            index of the first point read.
        max_points: the most points per series to return (0: all); the points
            read are thinned as one range (each bucket keeps its lowest and
            highest value and its first gap, and the range's first and last
            points are kept: :func:`downsample_indices`).

    Returns:
        ``{name: {"length": n, "first_index": i, "steps": [...], "epochs": [...],
        "values": [...], "times": [...]}}`` (``times``: seconds since the Unix
        epoch, ``null`` where unknown). Never raises.
    """
    shaped: dict[str, dict[str, Any]] = {}
    for name, cols in columns.items():
        values = cols["values"]
        entry: dict[str, Any] = {"length": cols["length"], "first_index": cols["first_index"]}
        if max_points and len(values) > max_points:
            keep = downsample_indices(values, max_points)
            for key in _COLUMNS:
                column = cols[key]
                entry[key] = [column[i] for i in keep]
        else:
            entry.update({key: list(cols[key]) for key in _COLUMNS})
        shaped[name] = entry
    return shaped
