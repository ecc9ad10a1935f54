"""Seeding the record from a stored task (resume, docs/design.md#metrics).

Curves and ``val_datasets`` come from the first destination that holds the
task; never its status (a new process starts a new attempt). Reports applied
before the stored task could be read come after the stored curves, as if
replayed.

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import Any

from trainreport._logging import get_logger
from trainreport._record._name_rules import DatasetOrder
from trainreport._record._name_table import NameTables
from trainreport._record._run_record import RunRecord
from trainreport._record._store import Rewound
from trainreport._wire._payloads import StoredState

__all__ = ["points_json", "seed"]

#: Unreadable stored series logged one by one before a single summary line.
_MAX_LOGGED_SERIES = 20
_log = get_logger()


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def points_json(
    steps: Iterable[int], epochs: Iterable[int], values: Iterable[float]
) -> list[dict[str, Any]]:
    """Points in the ``GET`` shape (a non-finite value is ``None``)."""
    return [
        {"step": st, "epoch": ep, "value": _finite(v)}
        for st, ep, v in zip(steps, epochs, values, strict=True)
    ]


def seed(record: RunRecord, names: NameTables, state: StoredState, d: int) -> None:
    """Seed ``record``'s curves and ``val_datasets`` from destination ``d``'s stored task."""
    store = record.store
    record.stored_epochs = [
        (steps, epochs)
        for name, (steps, epochs, _) in state.series.items()
        if name.startswith("train_") and steps
    ]
    stored_last_train = max((steps[-1] for steps, _ in record.stored_epochs), default=None)
    # Reports applied before the stored task could be read (a long outage at
    # start) come after the stored curves, as if replayed: a first training step
    # below the stored last one rewinds them (docs/design.md#metrics), and each
    # series' own points replace the stored tail from their first step on.
    first = record.first_train_step
    cut = (
        first
        if first is not None and stored_last_train is not None and first <= stored_last_train
        else None
    )
    record.stored_last_train = stored_last_train
    replaced: list[Rewound] = []
    for name, (steps, epochs, values) in state.series.items():
        if name in store.scalar_names:  # a name stored as a series stays a series
            store.make_series(name)
        keep = len(steps) if cut is None else bisect_right(steps, cut)
        current = store.series.get(name)
        if current is not None and current.steps:
            keep = min(keep, bisect_left(steps, current.steps[0]))
        elif current is None and not store.admit(name, as_series=True):
            # Past the name cap: kept on the destination as it is, never deleted.
            record.preserved[name] = points_json(steps, epochs, values)
            continue
        if cut is not None and keep < len(steps):
            replaced.append((name, steps[-1], len(steps) - keep))
        store.seed(name, steps, epochs, values, keep, d)
    if replaced:  # the resume rewind, applied here: counted and said as the purge is
        assert cut is not None
        store.rewinds += 1
        store.points_replaced_by_rewinds += sum(n for _, _, n in replaced)
        record.rewind_log.rewound(cut, replaced, first_step=first, resume=True)
    for name in record.provisional - set(state.series):
        store.demote(name)  # a scalar after all: only its latest value is kept
    record.provisional.clear()
    names.clear()  # cached entries may hold series that were just replaced
    _keep_unreadable(record, state)
    if state.val_datasets:
        if record.datasets.datasets:  # names already given this process keep their curves
            _log.info(
                "trainreport.resume_datasets_kept",
                stored=list(state.val_datasets),
                current=list(record.datasets.datasets),
            )
        else:
            record.datasets = DatasetOrder(state.val_datasets)
    record.stored_details = dict(state.details)
    record.seeded = True


def _keep_unreadable(record: RunRecord, state: StoredState) -> None:
    """Keep stored series the client cannot parse; log each (bounded)."""
    store = record.store
    for count, (name, raw) in enumerate(state.damaged.items()):
        if count < _MAX_LOGGED_SERIES:
            _log.warning(
                "trainreport.stored_series_unreadable",
                series=name[:200],
                reason=state.damage_reasons.get(name, ""),
                kept=name not in store,
            )
        elif count == _MAX_LOGGED_SERIES:
            _log.warning(
                "trainreport.stored_series_unreadable_more",
                more=len(state.damaged) - _MAX_LOGGED_SERIES,
            )
        if name in store:  # recorded by this run before the read: its curve wins
            _log.warning("trainreport.stored_series_replaced", series=name[:200])
        else:
            record.preserved[name] = raw
