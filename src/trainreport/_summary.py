"""Plain-text summaries of a stored task, for ``trainreport demo`` and ``trainreport show``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import urllib3

__all__ = ["describe_task", "fetch_task", "sparkline"]

_SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], width: int = 48) -> str:
    """A one-line chart of ``values``, resampled to at most ``width`` characters.

    ``None`` and non-finite points are drawn as spaces. Never raises.
    """
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return ""
    if len(values) > width:
        values = [values[round(i * (len(values) - 1) / (width - 1))] for i in range(width)]
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    top = len(_SPARKS) - 1
    return "".join(
        " " if v is None or not math.isfinite(v) else _SPARKS[min(top, int((v - low) / span * 8))]
        for v in values
    )


def describe_task(task: Mapping[str, Any]) -> str:
    """Status, progress, each series' point count and final value, loss sparklines.

    Args:
        task: a task in the ``GET`` shape (``{"status": ..., "status_details": {...}}``).

    Never raises for a well-formed task; missing fields are shown as ``-``.
    """
    details: Mapping[str, Any] = task.get("status_details") or {}
    metrics: Mapping[str, list[Mapping[str, Any]]] = details.get("metrics") or {}
    lines = [
        f"status {task.get('status', '-')}, phase {details.get('phase', '-')}, "
        f"step {details.get('step', '-')} of {details.get('max_steps', '-')}, "
        f"epoch {details.get('epoch', '-')}, {details.get('percentage_done', '-')} % done, "
        f"updated {details.get('updated_at', '-')}"
    ]
    if "checkpoint_path" in details:
        lines.append(f"checkpoint {details['checkpoint_path']}")
    if "error" in details:
        lines.append(f"error {details['error']}")
    lines.append("")
    lines.append(f"  {'series':24s} {'points':>7s}   final value")
    for name in sorted(metrics):
        points = metrics[name]
        last = points[-1].get("value") if points else None
        shown = "null" if last is None else f"{last:.6g}"
        lines.append(f"  {name:24s} {len(points):7d}   {shown}")
    for name in sorted(n for n in metrics if n.endswith("_loss")):
        lines.append(f"\n  {name:24s} {sparkline([p.get('value') for p in metrics[name]])}")
    return "\n".join(lines)


def fetch_task(
    base_url: str, job_id: str, task_id: str = "train", token: str | None = None
) -> dict[str, Any]:
    """``GET`` a stored task from a job-status service (10 s timeout, no retries).

    Args:
        base_url: the service's base URL, e.g. ``http://127.0.0.1:8321``.
        job_id: the job.
        task_id: the task (default ``train``).
        token: bearer token, or ``None``.

    Raises:
        urllib3.exceptions.HTTPError: the service could not be reached.
        RuntimeError: it answered anything but 200.
        ValueError: the body is not JSON.
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{base_url.rstrip('/')}/v1/jobs/{job_id}/tasks/{task_id}"
    response = urllib3.request("GET", url, headers=headers, timeout=10.0, retries=False)
    if response.status != 200:
        raise RuntimeError(f"the server answered {response.status}")
    task: dict[str, Any] = json.loads(response.data)
    return task
