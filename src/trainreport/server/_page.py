"""The live chart page: two static HTML shells whose inline script reads the ``/v1`` API.

The shells contain no data and no ids, so nothing a client sent is ever
interpolated into HTML: the script takes the job and task ids from the URL
path, fetches JSON, and writes text with ``textContent`` (escaping by
construction). When the server has a token, the page reads it from the URL
fragment (``#token=...``, which browsers never send to a server, so it never
reaches a log) and sends it as a bearer header.

The inline style and script are allowed by their SHA-256 hashes in a strict
Content-Security-Policy; nothing is loaded from elsewhere (the page works
without internet access).
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from trainreport._protocol import PAGE_PATH_TEMPLATE
from trainreport.server._wire import validate_id

__all__ = ["MIN_THINNED_POINTS", "downsample_indices", "routes", "shape_columns"]

#: The fewest points a thinned series is asked for: one bucket's lowest and highest
#: value plus the series' first and last point (``/series?max_points=`` 1 to 3 is a 400).
MIN_THINNED_POINTS = 4

_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>trainreport</title>
<style>{style}</style>
</head>
<body data-page="{page}">
<header class="top"><a class="brand" href="/">trainreport</a>
<nav id="crumbs"></nav><span id="live" class="live">connecting…</span></header>
<main id="main"></main>
<script>{script}</script>
</body>
</html>
"""


def _static(name: str) -> str:
    return (resources.files("trainreport.server") / "static" / name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


class _Shell:
    """One page's HTML and the Content-Security-Policy that admits exactly its inline code."""

    def __init__(self, page: str) -> None:
        style, script = _static("page.css"), _static("page.js")
        self.html = _TEMPLATE.format(style=style, script=script, page=page)
        self.csp = "; ".join(
            (
                "default-src 'none'",
                f"script-src {_sha256(script)}",
                f"style-src {_sha256(style)}",
                "connect-src 'self'",
                "img-src 'self' data:",
                "base-uri 'none'",
                "form-action 'none'",
                "frame-ancestors 'none'",
            )
        )

    def response(self) -> Response:
        return HTMLResponse(
            self.html,
            headers={"Content-Security-Policy": self.csp, "Cache-Control": "no-cache"},
        )


_shells: dict[str, _Shell] = {}


def _shell(page: str) -> _Shell:
    if page not in _shells:
        _shells[page] = _Shell(page)
    return _shells[page]


async def _index(_request: Request) -> Response:
    return _shell("index").response()


async def _task(request: Request) -> Response:
    validate_id(request.path_params["job_id"], "job_id")
    validate_id(request.path_params["task_id"], "task_id")
    return _shell("task").response()


def routes() -> list[Route]:
    """The page routes: ``GET /`` (jobs) and ``GET /jobs/{job_id}/tasks/{task_id}`` (a task).

    No auth on the HTML shells themselves; their data comes from ``/v1``.
    """
    return [
        Route("/", _index, methods=["GET"]),
        Route(PAGE_PATH_TEMPLATE, _task, methods=["GET"]),
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
