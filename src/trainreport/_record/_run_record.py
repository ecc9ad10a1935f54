"""RunRecord: the state of one reporting attempt that the recorder's parts share.

The recorder (``_record/_recorder.py``) is split by concern into parts that each own
one responsibility (ingest, events, names, epochs, seeding, updates); what
more than one of them reads or writes lives here, in one place. Plain data
with the two drop-counting helpers every part uses.

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

import attrs

from trainreport._logging import OnceLogger
from trainreport._record._machines import TaskMachine
from trainreport._record._name_rules import DatasetOrder
from trainreport._record._rewinds import RewindLog
from trainreport._record._selection import SeriesSelector
from trainreport._record._sticky import StickyFields
from trainreport._record._store import MetricStore
from trainreport._reporting_config import ReportingConfig

__all__ = ["RunRecord"]


@attrs.define(eq=False)
class RunRecord:
    """Everything one attempt has recorded, shared by the recorder's parts.

    Args:
        config: the reporter's configuration.
        destinations: how many destinations the reporter sends to.
        series_default: the ``time_series_metrics`` used when the config's is ``None``.
    """

    config: ReportingConfig
    store: MetricStore
    machine: TaskMachine
    selector: SeriesSelector
    once: OnceLogger = attrs.field(factory=OnceLogger)
    #: Says each rewind in the log, bounded (``_record/_rewinds.py``).
    rewind_log: RewindLog = attrs.field(factory=RewindLog)
    drops: Counter[str] = attrs.field(factory=Counter)
    strict_violations: list[str] = attrs.field(factory=list)
    datasets: DatasetOrder = attrs.field(factory=DatasetOrder)
    sticky: StickyFields = attrs.field(factory=StickyFields)
    #: Seconds to add to a report's monotonic time ``t`` for its wall-clock time (seconds
    #: since the Unix epoch): taken once when the reporter starts, so each point's time
    #: costs the training thread no clock read (docs/engine.md, "The hot path").
    wall_offset: float = 0.0
    #: Bumped by every report that changes what an update carries.
    changes: int = 0
    at_step: int | None = None
    at_epoch: int | None = None
    max_steps: int | None = None
    num_epochs: int | None = None
    #: (monotonic time, step) of the first training step of the ETA's window.
    first_step: tuple[float, int] | None = None
    #: The first training step this process recorded.
    first_train_step: int | None = None
    last_step_time: float | None = None
    #: Whether the store was seeded from a stored task (or found none).
    seeded: bool = False
    #: The stored task's last training step, once seeded.
    stored_last_train: int | None = None
    #: (steps, epochs) of every stored training series: the int-epoch base of a
    #: resumed process is read from them (``_record/_epochs.py``).
    stored_epochs: list[tuple[array[int], array[int]]] = attrs.field(factory=list)
    #: The stored task's ``status_details``.
    stored_details: dict[str, Any] = attrs.field(factory=dict)
    #: Stored series the client cannot parse, exactly as stored: never overwritten
    #: (sent back unchanged in full-state mode) unless this run records the name.
    preserved: dict[str, Any] = attrs.field(factory=dict)
    #: Names admitted as series only because the stored task was not read yet:
    #: seeding makes them scalars again unless the stored task has them as series.
    provisional: set[str] = attrs.field(factory=set)

    @classmethod
    def new(
        cls,
        config: ReportingConfig,
        destinations: int,
        series_default: tuple[str, ...],
        wall_offset: float = 0.0,
    ) -> RunRecord:
        """An empty record for ``destinations`` destinations (``wall_offset``: see the field)."""
        return cls(
            wall_offset=wall_offset,
            config=config,
            store=MetricStore(config.max_metric_names, destinations),
            machine=TaskMachine(strict=config.strict_transitions),
            selector=SeriesSelector(config.time_series_metrics, default=series_default),
        )

    def next_train_step(self) -> int:
        """The step an omitted ``report_train_step(step=...)`` stands for (docs/design.md#metrics).

        The last training step recorded + 1, whether that step was given or
        omitted (after a rewind, the rewound step + 1); before this attempt's
        first training step, the stored task's last training step + 1 (a
        resumed run continues its curves), else 1. The one definition: the
        per-point path and the batch path (``_columnar``) both use it.
        """
        last = self.at_step
        if last is None:
            last = self.stored_last_train or 0
        return last + 1

    def drop_once(self, reason: str, key: object, report: str, detail: str) -> None:
        """Count one dropped item under ``reason``; log it once per (reason, report, key)."""
        self.drops[reason] += 1
        self.once.warning(
            (reason, report, key),
            "trainreport.report_dropped",
            report=report,
            field=str(key)[:100],
            reason=detail,
        )

    def refuse_for_name_cap(self, metrics: object, name: str) -> None:
        """Count the names refused by the distinct-name cap (all of ``metrics``, or one)."""
        self.drops["name_cap"] += len(metrics) if isinstance(metrics, dict) else 1
        self.once.warning(
            "name_cap",
            "trainreport.metric_name_cap_reached",
            cap=self.store.max_names,
            first_refused=name[:200],
        )
