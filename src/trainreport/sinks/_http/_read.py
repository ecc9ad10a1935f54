"""Reading a stored task back as columns: ``client.read_task`` and ``HttpSink.read_back``.

One reader for both (docs/protocol.md, ``GET .../series``): ``GET
{task}?metrics=false``, then ``GET {task}/series/summary``, then ``GET
{task}/series?name=...`` for groups of about 200,000 points
(:func:`~trainreport.sinks._http._open.series_groups`); each series becomes
its points (the caller's ``points``) as soon as its group is read, so a
read holds one group's JSON at a time, never the whole task as one
document. A service without these endpoints (a plain job API) is read with
one plain ``GET``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainreport._wire._payloads import ColumnPoints
from trainreport.exceptions import ClientError
from trainreport.sinks._http._open import series_groups

__all__ = ["Get", "Points", "compact_points", "dict_points", "read_task_by_series"]

#: ``path -> the decoded JSON of a 200 answer``; any other answer raises
#: :class:`~trainreport.exceptions.ClientError` with its ``status``.
Get = Callable[[str], Any]
#: A ``GET .../series`` column (``{"steps": [...], "epochs": [...], "values": [...]}``)
#: -> the series' points in the ``GET`` shape.
Points = Callable[[Mapping[str, Any]], Sequence[Mapping[str, Any]]]

#: The answers to ``GET .../series/summary`` that mean "no such endpoint here".
_NO_ENDPOINT = (404, 405, 501)


def dict_points(column: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A column as the ``GET`` shape's list of point dictionaries (~280 bytes a point)."""
    return [
        {"step": st, "epoch": ep, "value": v}
        for st, ep, v in zip(column["steps"], column["epochs"], column["values"], strict=True)
    ]


def compact_points(column: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """A column as :class:`ColumnPoints` of three arrays (24 bytes a point).

    A column the arrays cannot hold (a step that is not an int64, a value
    that is not a number) is given as :func:`dict_points`, as read.

    Raises:
        ValueError: the columns differ in length (as :func:`dict_points`).
    """
    try:
        return ColumnPoints.from_json(column["steps"], column["epochs"], column["values"])
    except (TypeError, ValueError, OverflowError):
        return dict_points(column)


def read_task_by_series(get: Get, path: str, points: Points) -> Any:
    """The task at ``path``, its curves read as columns where the service offers them.

    The answer equals the task's plain ``GET`` (its series' points made by
    ``points``); of a task still being written, each group of series is as
    of its own read.

    Args:
        get: reads one path (see :data:`Get`).
        path: the task's path, its ids quoted (``/v1/jobs/J/tasks/T``).
        points: makes a series' points from its column (:func:`dict_points`,
            :func:`compact_points`).

    Returns:
        The decoded answer, not judged: the caller refuses one that is not an object.

    Raises:
        ClientError: what ``get`` raised, except the answers that select the
            plain ``GET`` (400 to ``?metrics=false``, 404/405/501 from the summary).
    """
    try:
        task = get(path + "?metrics=false")
    except ClientError as exc:
        if exc.status != 400:  # a service that refuses the query: the plain GET
            raise
        task = None
    details = task.get("status_details") if isinstance(task, dict) else None
    if isinstance(task, dict) and isinstance(details, dict) and "metrics" not in details:
        metrics = _read_series(get, path, points)
        if metrics is not None:
            if metrics:
                details["metrics"] = metrics
            return task
    elif isinstance(task, dict):
        return task  # the query was ignored: every point is there
    return get(path)


def _read_series(get: Get, path: str, points: Points) -> dict[str, Any] | None:
    """The task's series from ``GET .../series``, in groups; ``None``: not offered here."""
    try:
        summary = get(path + "/series/summary")
    except ClientError as exc:
        if exc.status in _NO_ENDPOINT:  # no such endpoint (or the task went: GET says)
            return None
        raise
    listed = summary.get("series") if isinstance(summary, dict) else None
    if not isinstance(listed, dict):
        return None
    lengths: dict[str, int] = {
        str(name): entry["length"]
        for name, entry in listed.items()
        if isinstance(entry, dict) and type(entry.get("length")) is int
    }
    metrics: dict[str, Any] = {}
    for names in series_groups(lengths):
        query = "&".join(f"name={urllib.parse.quote(n, safe='')}" for n in names)
        doc = get(f"{path}/series?{query}")
        columns = doc.get("series") if isinstance(doc, dict) else None
        del doc
        if not isinstance(columns, dict):
            return None
        for name in names:
            column = columns.pop(name, None)
            if column is None:
                continue  # removed between the reads (a rewind emptied it)
            if not isinstance(column, dict) or column.get("first_index", 0) != 0:
                return None
            metrics[name] = points(column)
            del column  # each series' JSON goes as soon as it is points
    return metrics
