"""Plain-text summaries of stored tasks and jobs, for ``trainreport demo`` and ``trainreport show``.

Readers follow the lifecycle's rule that a terminal status ends the phase
(docs/lifecycle.md): a finished task is shown as phase ``done`` with no ETA,
whatever an older writer stored, and the ETA is shown only while it runs. A
task the reference server marks stale (running, silent past its
``stale_after_seconds``: ``docs/protocol.md``) shows the server's message
("no update for 4 min: the process may have died") in place of the ETA.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainreport._wire._payloads import ColumnPoints

__all__ = [
    "describe_jobs",
    "describe_task",
    "format_duration",
    "shown_phase",
    "sparkline",
]


def _values_of(points: Sequence[Mapping[str, Any]]) -> list[float | None]:
    """A series' values for a sparkline (from the column when it is one)."""
    if isinstance(points, ColumnPoints):
        return points.values()
    return [p.get("value") for p in points]


_SPARKS = "▁▂▃▄▅▆▇█"
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


def sparkline(values: Sequence[float | None], width: int = 48) -> str:
    """A one-line chart of ``values``, at most ``width`` characters, spikes kept.

    Bars are scaled between the lowest and highest finite value. A longer
    series is cut into ``width`` buckets of consecutive points, and each
    character draws its bucket's minimum or maximum, whichever lies farther
    from the bucket's median: a single point of a spike (or a dip) among
    thousands shows as the bar of its bucket, where sampling one point per
    character would miss it (docs/server.md, "Reading tasks in the terminal").
    A bucket without a finite value is a space (a gap), as is a ``None`` or
    non-finite point of a short series. Never raises.
    """
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    top = len(_SPARKS) - 1
    shown = values if len(values) <= width else _extremes(values, width)
    return "".join(
        " " if v is None or not math.isfinite(v) else _SPARKS[min(top, int((v - low) / span * 8))]
        for v in shown
    )


def _extremes(values: Sequence[float | None], buckets: int) -> list[float | None]:
    """Per bucket of consecutive values, the minimum or maximum farther from its median.

    ``None`` for a bucket without a finite value. ``len(values) > buckets >= 1``.
    """
    n = len(values)
    picked: list[float | None] = []
    for i in range(buckets):
        bucket = sorted(
            v
            for v in values[i * n // buckets : (i + 1) * n // buckets]
            if v is not None and math.isfinite(v)
        )
        if not bucket:
            picked.append(None)
            continue
        median = bucket[len(bucket) // 2]
        lowest, highest = bucket[0], bucket[-1]
        picked.append(highest if highest - median >= median - lowest else lowest)
    return picked


def shown_phase(status: object, phase: object) -> str:
    """The phase to show: ``done`` for a terminal status, else the stored one (``-`` if none)."""
    if status in _TERMINAL:
        return "done"
    return "-" if phase is None else str(phase)


def format_duration(seconds: object) -> str | None:
    """``"1 h 02 min"``, ``"1 min 05 s"``, ``"42 s"``; ``None`` for a non-number. Never raises."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    if not math.isfinite(seconds):
        return None
    s = max(0, round(seconds))
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {s:02d} s"
    return f"{s} s"


def _text(value: object) -> str:
    """A detail value as a person reads it: strings bare, everything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _of(value: object, maximum: object) -> str:
    if value is None:
        return "-"
    return f"{_text(value)} of {_text(maximum)}" if maximum is not None else _text(value)


def _aligned(
    rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: str = ""
) -> list[str]:
    """Rows of cells padded to each column's widest cell (columns in ``right`` right-aligned)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _stale_message(task: Mapping[str, Any]) -> str | None:
    """The reference server's stale message of a task or task summary, or ``None``."""
    stale = task.get("stale")
    message = stale.get("message") if isinstance(stale, Mapping) else None
    return message if isinstance(message, str) and message else None


def _status_line(task: Mapping[str, Any], details: Mapping[str, Any]) -> str:
    status = task.get("status", "-")
    parts = [
        f"status {status}",
        f"phase {shown_phase(status, details.get('phase'))}",
        f"step {_of(details.get('step'), details.get('max_steps'))}",
        f"epoch {_of(details.get('epoch'), details.get('num_epochs'))}",
        f"{_text(details.get('percentage_done', '-'))} % done",
    ]
    stale = _stale_message(task)
    eta = format_duration(details.get("eta_seconds")) if status == "running" else None
    if stale is not None:
        parts.append(stale)
    elif eta is not None:
        parts.append(f"ETA {eta}")
    parts.append(f"updated {_text(details.get('updated_at', '-'))}")
    return ", ".join(parts)


def describe_task(task: Mapping[str, Any]) -> str:
    """Status line, checkpoint, error, each series' points and final value, loss sparklines,
    and the hyperparameters, in aligned columns.

    Args:
        task: a task in the ``GET`` shape (``{"status": ..., "status_details": {...}}``).

    Never raises for a well-formed task; missing fields are shown as ``-``.
    """
    details: Mapping[str, Any] = task.get("status_details") or {}
    metrics: Mapping[str, Sequence[Mapping[str, Any]]] = details.get("metrics") or {}
    lines = [_status_line(task, details)]
    if "checkpoint_path" in details:
        lines.append(f"checkpoint {_text(details['checkpoint_path'])}")
    if "cancel_reason" in details and task.get("status") == "cancelled":
        lines.append(f"cancel reason {_text(details['cancel_reason'])}")
    if "error" in details:
        error = details["error"]
        if isinstance(error, Mapping) and {"type", "message"} <= error.keys():
            lines.append(f"error {error['type']}: {error['message']}")
        else:
            lines.append(f"error {_text(error)}")
    names = sorted(metrics)
    rows = [["series", "points", "final value"]]
    for name in names:
        points = metrics[name]
        last = points[-1].get("value") if points else None
        rows.append([name, str(len(points)), "null" if last is None else f"{last:.6g}"])
    lines.append("")
    lines += _aligned(rows, right=(1,), indent="  ")
    width = len(max(names, key=len, default=""))
    charts = [(n, sparkline(_values_of(metrics[n]))) for n in names if n.endswith("_loss")]
    charts = [(n, chart) for n, chart in charts if chart]
    if charts:
        lines.append("")
        lines += [f"  {name.ljust(width)}  {chart}" for name, chart in charts]
    params = details.get("hyperparameters")
    if isinstance(params, Mapping) and params:
        lines.append(f"\nhyperparameters ({len(params)})")
        lines += _aligned([[str(k), _text(v)] for k, v in sorted(params.items())], indent="  ")
    return "\n".join(lines)


def describe_jobs(jobs: Sequence[Mapping[str, Any]]) -> str:
    """One line per task of each job (newest job first): status, phase, step, progress.

    Args:
        jobs: the ``jobs`` of ``GET /v1/jobs`` (docs/protocol.md).

    Never raises for well-formed jobs.
    """
    if not jobs:
        return "no jobs yet"
    rows = [["job", "task", "status", "phase", "step", "progress", "updated"]]
    for job in jobs:
        tasks = job.get("tasks") or []
        if not tasks:
            rows.append([str(job.get("job_id")), "-", "(no tasks)", "", "", "", ""])
        for t in tasks:
            status = t.get("status")
            pct = t.get("percentage_done")
            rows.append(
                [
                    str(job.get("job_id")),
                    str(t.get("task_id")),
                    _text(status),
                    shown_phase(status, t.get("phase")),
                    _of(t.get("step"), t.get("max_steps")),
                    "-" if pct is None else f"{float(pct):.1f} %",
                    " - ".join(
                        x for x in (_text(t.get("updated_at", "-")), _stale_message(t)) if x
                    ),
                ]
            )
    return "\n".join(_aligned(rows))
