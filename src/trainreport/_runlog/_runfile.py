"""Reading a run's file: a run log, or the JSON task record an older ``FileSink`` wrote.

:func:`read_task` is the public entry point (``trainreport show --file``
uses it); :func:`load_run_file` gives the CLI what it needs beyond the task
(the damage found, the replayed state for ``trainreport sync``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from trainreport._logging import get_logger
from trainreport._runlog._replay import Damage, DamageKind, Replayed, replay
from trainreport._runlog._state import LogState
from trainreport._wire._payloads import ColumnPoints, parse_stored_task
from trainreport.exceptions import RunLogError

__all__ = [
    "LOG_SUFFIX",
    "RECORD_SUFFIX",
    "RunFile",
    "load_run_file",
    "log_and_record_paths",
    "read_task",
]

#: The suffix of a run log.
LOG_SUFFIX = ".log"
#: The suffix of a task record in the ``GET`` shape (written beside a log at close).
RECORD_SUFFIX = ".json"
_log = get_logger()


def log_and_record_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The run log and the task record a ``FileSink(path)`` uses.

    - ``run.json`` (a task record, as older versions wrote): the log is
      ``run.log`` beside it;
    - ``run.log``: the record is ``run.json`` beside it;
    - any other name is the log itself, and the record is ``<name>.json``.

    Never raises.
    """
    path = Path(path)
    if path.suffix == RECORD_SUFFIX:
        return path.with_suffix(LOG_SUFFIX), path
    if path.suffix == LOG_SUFFIX:
        return path, path.with_suffix(RECORD_SUFFIX)
    return path, path.with_name(path.name + RECORD_SUFFIX)


@attrs.frozen
class RunFile:
    """A run's file, read.

    Attributes:
        path: the file read.
        is_log: True for a run log, False for a JSON task record.
        task: the task in the ``GET`` shape; for a run log built from
            :attr:`state` when first read (a dictionary per point: what
            :func:`read_task` returns), ``None`` to the constructor.
        state: the task as columns (for ``trainreport sync``, the journal's
            recovery, and :meth:`shown_task`).
        records: intact records replayed (0 for a JSON record), before any
            damage and after it.
        damage: the first damage of a damaged log (``None``: read to its end).
        run: the log's ``job_id`` and ``task_id``, when it recorded them.
        salvaged: records read after the damage (:mod:`~trainreport._runlog._replay`).
        unplaced: per series, points after the damage that could not be placed.
        lost: what the damage cost, in one sentence (``""``: nothing).
    """

    path: Path
    is_log: bool
    _task: dict[str, Any] | None
    state: LogState
    records: int = 0
    damage: Damage | None = None
    run: dict[str, str] = attrs.field(factory=dict)
    salvaged: int = 0
    unplaced: dict[str, int] = attrs.field(factory=dict)
    lost: str = ""

    @property
    def task(self) -> dict[str, Any]:
        """The task in the ``GET`` shape (built from the columns once, on first read)."""
        task = self._task
        if task is None:
            task = self.state.to_task()
            assert task is not None  # load_run_file refuses a log that holds no task
            object.__setattr__(self, "_task", task)  # a cache of the frozen state
        return task

    def shown_task(self) -> Mapping[str, Any]:
        """The task for ``trainreport show``: its series as :class:`ColumnPoints`, not dicts.

        A run log's points stay in their columns (28 bytes a point against
        about 240 for a point dictionary), so ``show`` on a 10-million-point
        log costs what the replay costs; a JSON task record is shown as read.
        Never raises.
        """
        if self._task is not None or not self.is_log:
            return self.task
        record = self.state.task
        details: dict[str, Any] = dict(record.details)
        if any(cols[0] for cols in record.series.values()) or record.foreign:
            metrics: dict[str, Any] = {
                name: ColumnPoints(cols[0], cols[1], cols[2])
                for name, cols in record.series.items()
                if cols[0]
            }
            metrics.update(record.foreign)
            details["metrics"] = metrics
        return {"status": record.status, "status_details": details}

    @property
    def trimmed(self) -> dict[str, int]:
        """Series whose points start past index 0 (a journal trimmed after delivery)."""
        return dict(self.state.bases)


def load_run_file(path: str | os.PathLike[str]) -> RunFile:
    """Read a run log or a JSON task record (told apart by content, not by name).

    A damaged log yields every intact record, before the damage and after it
    (a damaged file header or record is skipped: records carry their own
    checksums), and logs ``trainreport.run_log_damaged`` (WARNING) saying what
    was lost.

    Raises:
        OSError: the file cannot be read (``FileNotFoundError`` when missing).
        RunLogError: nothing in it can be read: not a log and not JSON, a
            log with no intact record or whose first is of a newer format
            version, a log that holds no task yet, a JSON value that is not a task.
    """
    path = Path(path)
    data = path.read_bytes()
    if not data:
        raise RunLogError(f"{path} is empty")
    replayed = replay(data)
    if replayed.damage is None or replayed.damage.kind is not DamageKind.NOT_A_LOG:
        del data  # the columns hold the run now: the file's bytes go
        return _load_log(path, replayed)  # a log, maybe with a damaged file header
    try:
        task = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RunLogError(
            f"{path} is neither a run log (it does not start with the run log header) "
            f"nor a JSON task record ({exc})"
        ) from None
    if not (
        isinstance(task, dict)
        and isinstance(task.get("status_details", {}), dict)
        and isinstance(task.get("status", ""), str)
    ):
        raise RunLogError(
            f"{path} is JSON but not a task ({{'status': ..., 'status_details': ...}})"
        )
    parsed = parse_stored_task(task)
    if isinstance(parsed, str):
        raise RunLogError(f"{path} is a task record whose curves are malformed: {parsed}")
    return RunFile(path, False, task, LogState.from_task(task))


def _load_log(path: Path, replayed: Replayed) -> RunFile:
    damage = replayed.damage
    if not replayed.state.exists:
        if damage is None:
            raise RunLogError(f"{path} holds no task yet: the run recorded nothing before it ended")
        raise RunLogError(f"{path}: nothing could be read: {damage.describe()}")
    if damage is not None:
        _log.warning(
            "trainreport.run_log_damaged",
            path=str(path),
            damage=damage.kind.name.lower(),
            detail=damage.describe(),
            kept_records=replayed.records,
            salvaged_records=replayed.salvaged,
            lost=replayed.lost(),
            set_aside=None,
        )
    return RunFile(
        path,
        True,
        None,  # the GET shape is built only if someone reads it (RunFile.task)
        replayed.state,
        replayed.records,
        damage,
        dict(replayed.run),
        replayed.salvaged,
        dict(replayed.unplaced),
        replayed.lost(),
    )


def read_task(path: str | os.PathLike[str], *, columns: bool = False) -> dict[str, Any]:
    """The task a run's file holds, in the ``GET`` shape of a job-status service.

    Reads a run log (``FileSink``'s ``<run id>.log``, the embedded default) by
    replaying it, or a task record (``<run id>.json``, written at ``close()``;
    older versions wrote only that), telling them apart by content. A log cut
    short by a crash yields every intact record before the cut; one damaged
    in the middle (or in its file header) every intact record before and
    after the damage; ``trainreport.run_log_damaged`` (WARNING) says what was
    lost (see ``docs/engine.md``, "The run log").

    A journal trimmed after its service acknowledged points holds only the
    rest: its series then start past their first point.

    Args:
        path: the file (``str`` or ``os.PathLike``).
        columns: keep each series of a run log as the replay's columns, a
            :class:`~trainreport._wire._payloads.ColumnPoints` (20 bytes a
            point, against about 280 for a dictionary a point) that reads and
            compares as the list of points and that ``client.to_pandas``
            reads from its arrays; as ``client.read_task(..., columns=True)``.
            A JSON task record is returned as read.

    Returns:
        ``{"status": str, "status_details": {..., "metrics": {name: [{"step":
        int, "epoch": int, "value": float | None}, ...]}}}``.

    Raises:
        OSError: the file cannot be read (``FileNotFoundError`` when missing).
        RunLogError: nothing in it can be read: not a run log and not a JSON
            task, a log with no intact record or whose first is from a newer
            format version, or a log that holds no task yet.

    Example:
        >>> task = trainreport.read_task("trainreport-runs/job-7.log")  # doctest: +SKIP
        >>> task["status"], len(task["status_details"]["metrics"]["train_loss"])  # doctest: +SKIP
        ('completed', 2000)
    """
    run = load_run_file(path)
    return dict(run.shown_task()) if columns else run.task
