"""Ingest: applies queued reports to the record (the reporter thread's per-report work).

:meth:`Ingest.apply_all` drains the queue. Each report is unpacked by
:func:`~trainreport._record._reports.dispatch` into one of the :class:`ReportHandler`
methods here: the metric reports (train steps, validation, other phases)
record points and scalars in the store; the event reports are applied by
:class:`~trainreport._record._events.EventIngest`. A report that raises is dropped
and counted, never the reporter thread (docs/engine.md). A report whose
device values are still being copied (``_record/_device.py``) stops the drain: it
and everything behind it wait for the next one, so the order of points holds.

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from trainreport._logging import describe_exception
from trainreport._record._columnar import ColumnarIngest
from trainreport._record._device import DeviceReport
from trainreport._record._epochs import EpochResolver
from trainreport._record._events import EventIngest
from trainreport._record._machines import Outcome, TaskEvent
from trainreport._record._name_table import NameTables
from trainreport._record._reports import (
    REPORT_NAME,
    VALUE_BYTES,
    Kind,
    Report,
    dispatch,
    kind_of,
    queued_bytes,
)
from trainreport._record._run_record import RunRecord
from trainreport._record._sticky import json_safe
from trainreport._record._values import NotChartable, to_chartable, to_step
from trainreport._wire._protocol import check_name
from trainreport.exceptions import TransitionError

__all__ = ["Ingest"]


class Ingest:
    """Applies reports to one attempt's record (implements ``ReportHandler``).

    Args:
        record: the attempt's shared record.
        names: the attempt's name tables.
        epochs: the attempt's epoch resolver.
    """

    __slots__ = ("_columnar", "_epochs", "_events", "_names", "_record")

    def __init__(self, record: RunRecord, names: NameTables, epochs: EpochResolver) -> None:
        self._record = record
        self._names = names
        self._epochs = epochs
        self._events = EventIngest(record, epochs)
        self._columnar = ColumnarIngest(record, names, epochs)

    def apply_all(self, queue: deque[Report]) -> tuple[bool, int, bool]:
        """Take every report queued now off ``queue`` and apply them, in order.

        Runs of like training reports are applied as batches
        (``_record/_columnar.py``), everything else one report at a time.

        Returns:
            (an event report was among them, their estimated bytes for the
            memory guard, the run has a point or a scalar now). Never raises.
        """
        urgent = False
        released = 0
        apply = self.apply
        popleft = queue.popleft
        remaining = len(queue)  # the training thread may append meanwhile: never iterate it
        plan_for = self._columnar.plan_for
        item: Report | None = None
        while True:
            if item is None:
                if not remaining:
                    break
                item = popleft()
                remaining -= 1
            if type(item) is DeviceReport:
                if not item.pending.ready():
                    # Its values are still on their way: nothing behind it is
                    # applied either, so points keep their order (the
                    # worker comes back, docs/design.md#device-values).
                    queue.appendleft(item)
                    break
                item, lost = self.settle(item)
                released += VALUE_BYTES * lost  # queued with them, applied without
            plan = plan_for(item)
            if plan is not None:  # a run of like training reports: one batch
                taken, nbytes, left = self._columnar.take(plan, item, popleft, remaining, apply)
                remaining -= taken
                released += nbytes
                if left is not item:
                    item = left
                    continue
            urgent |= apply(item)
            released += queued_bytes(item)
            item = None
        store = self._record.store
        return urgent, released, bool(store.points_recorded or store.scalars)

    def settle(self, item: DeviceReport) -> tuple[Report, int]:
        """The report ``item`` wraps, its device values filled in or, when lost, left out.

        Lost values (a device error, or unfinished at close's deadline) are
        counted under ``device_values`` and logged once per reason. Call once
        ``item.pending.ready()`` (a report not ready is given up on).

        Returns:
            (the report, how many values were lost).
        """
        pending = item.pending
        if not pending.ready():
            pending.give_up("applied before its copy completed")
        lost = pending.fill()
        if lost:
            record = self._record
            record.drops["device_values"] += lost
            error = pending.error or ""
            record.once.warning(
                ("device_values", error.split(":", 1)[0]),
                "trainreport.device_values_dropped",
                values=lost,
                reason=error[:200],
                hint=(
                    "a CUDA tensor's value could not be copied off the device; "
                    "check the device for errors (CUDA_LAUNCH_BLOCKING=1 shows where), "
                    "or give close() more time"
                ),
            )
        return item.report, lost

    def apply(self, item: Report) -> bool:
        """Apply one report. True for an event report. Never raises (but in strict mode)."""
        try:
            if type(item) is DeviceReport:
                item = self.settle(item)[0]
            return dispatch(item, self)
        except TransitionError as exc:  # strict mode (tests): surfaced by Reporter.close()
            self._record.strict_violations.append(str(exc))
            return False
        except Exception as exc:  # a bug or a hostile object must never stop the reporter
            kind: Any = kind_of(item)
            self._record.drops["invalid_report"] += 1
            self._record.once.warning(
                ("apply", kind),
                "trainreport.report_dropped",
                report=REPORT_NAME.get(kind, str(kind)),
                reason=describe_exception(exc),
            )
            return False

    # The event reports (``ReportHandler``), applied by EventIngest.

    def training_start(self, max_steps: object, num_epochs: object) -> bool:
        """Apply ``report_training_start``."""
        return self._events.training_start(max_steps, num_epochs)

    def epoch_end(self, epoch: object) -> bool:
        """Apply ``report_epoch_end``."""
        return self._events.epoch_end(epoch)

    def checkpoint(self, path: object, step: object) -> bool:
        """Apply ``report_checkpoint_saved``."""
        return self._events.checkpoint(path, step)

    def terminal(self, kind: Kind, reason: object, message: object) -> bool:
        """Apply a terminal report."""
        return self._events.terminal(kind, reason, message)

    def hyperparameters(self, flat: dict[str, Any], left_out: int) -> None:
        """Apply ``report_hyperparameters``."""
        self._events.hyperparameters(flat, left_out)

    # The metric reports.

    def _step(self, raw: object, report: str) -> int | None:
        step = to_step(raw)
        if isinstance(step, NotChartable):
            self._record.drop_once("invalid_step", "step", report, step.reason)
            return None
        return step

    def train_step(self, t: float, raw_step: object, raw_epoch: object, metrics: object) -> None:
        """Apply ``report_train_step`` (an omitted step: ``RunRecord.next_train_step``)."""
        record = self._record
        if raw_step is None:
            raw_step = record.next_train_step()
        step = self._step(raw_step, "report_train_step")
        if step is None:
            return
        if record.machine.apply(TaskEvent.TRAIN_STEP) is Outcome.REFUSED:
            record.drops["refused_transition"] += 1
            return
        epoch = self._epochs.resolve(raw_epoch, step, "report_train_step")
        if epoch is not None:
            record.at_epoch = epoch
        if record.first_train_step is None:
            # The run-wide purge: once per process, at its first training step,
            # when it resumes at or below the stored last training step (a run
            # resumed from an earlier checkpoint). Before the stored task is read,
            # seeding applies the same cut.
            record.first_train_step = step
            stored = record.stored_last_train
            if record.seeded and stored is not None and step <= stored:
                cut = record.store.purge_after(step)
                record.rewind_log.rewound(step, cut, first_step=step, resume=True)
                record.first_step = None
        if record.first_step is None or step <= record.first_step[1]:
            record.first_step = (t, step)
        record.at_step = step
        record.last_step_time = t
        record.changes += 1
        self.record(
            metrics,
            "train",
            None,
            step,
            record.at_epoch or 1,
            "report_train_step",
            t + record.wall_offset,
        )

    def validation(
        self, t: float, raw_step: object, raw_epoch: object, metrics: object, dataset: object
    ) -> None:
        """Apply ``report_validation`` (``t``: the report's monotonic time, seconds)."""
        step = self._step(raw_step, "report_validation")
        if step is None:
            return
        record = self._record
        if record.machine.apply(TaskEvent.VALIDATION) is Outcome.REFUSED:
            record.drops["refused_transition"] += 1
            return
        record.changes += 1
        epoch = self._epochs.resolve(raw_epoch, step, "report_validation")
        if dataset is not None and not isinstance(dataset, str):
            record.drop_once("invalid_argument", "dataset", "report_validation", "not a string")
            dataset = str(dataset)
        if isinstance(dataset, str) and check_name(dataset) is not None:
            record.drop_once(
                "invalid_argument", "dataset", "report_validation", "unusable dataset name"
            )
            cleaned = "".join(c if c.isprintable() else "_" for c in json_safe(dataset))[:50]
            dataset = cleaned if cleaned and check_name(cleaned) is None else None
        datasets = record.datasets
        if not datasets.knows(dataset) and record.store.full:
            # A new dataset could not have a curve past the name cap: remember nothing.
            record.refuse_for_name_cap(metrics, f"val_{dataset}_*")
            return
        before = len(datasets.datasets)
        qualifier = datasets.qualifier(dataset)
        if len(datasets.datasets) != before:
            record.sticky.set("val_datasets", list(datasets.datasets))
        self.record(
            metrics,
            "validation",
            qualifier,
            step,
            epoch or record.at_epoch or 1,
            "report_validation",
            t + record.wall_offset,
        )

    def other_metrics(self, t: float, raw_step: object, metrics: object, phase: object) -> None:
        """Apply ``report_metrics`` (``t``: the report's monotonic time, seconds)."""
        record = self._record
        if not isinstance(phase, str) or check_name(phase) is not None or not phase.isidentifier():
            record.drop_once(
                "invalid_argument", "phase", "report_metrics", "phase is not an identifier"
            )
            return
        step = self._step(raw_step, "report_metrics")
        if step is None:
            return
        if record.machine.apply(TaskEvent.OTHER_METRICS) is Outcome.REFUSED:
            record.drops["refused_transition"] += 1
            return
        record.changes += 1  # current values change
        naming_phase = "validation" if phase in ("val", "eval", "validation") else phase
        self.record(
            metrics,
            naming_phase,
            None,
            step,
            record.at_epoch or 1,
            "report_metrics",
            t + record.wall_offset,
        )

    def record(
        self,
        metrics: object,
        phase: str,
        qualifier: str | None,
        step: int,
        epoch: int,
        report: str,
        time: float,
    ) -> None:
        """Record one report's metrics at ``step`` (points of series, values of scalars).

        ``time`` is the points' wall-clock time, seconds since the Unix epoch.
        """
        record = self._record
        if not isinstance(metrics, dict):
            if metrics is not None:
                record.drop_once("invalid_argument", "metrics", report, "metrics is not a mapping")
            return
        names = self._names.table(phase, qualifier)
        store = record.store
        # A step beyond every point recorded so far is a plain append in every series.
        fresh = step > store.max_step
        appended = 0
        # Per point this is the per-point path's hottest loop: the name table holds
        # the series itself, and a fresh step appends without looking at the series'
        # tail; anything else takes store.record().
        for raw_name, raw_value in metrics.items():
            try:
                entry = names[raw_name]
            except KeyError:
                entry = self._names.resolve(raw_name, phase, qualifier, report, names)
            if entry is None:
                continue
            name, series = entry
            value = raw_value if type(raw_value) is float else to_chartable(raw_value)
            if type(value) is not float:
                assert isinstance(value, NotChartable)
                record.drop_once("not_chartable", name, report, value.reason)
                continue
            if series is None:  # a scalar, or a name two keys share ("loss", "eval_loss")
                store.record(name, step, epoch, value, time)
            elif fresh:
                series.steps.append(step)
                series.epochs.append(epoch)
                series.values.append(value)
                series.times.append(time)
                appended += 1
            else:
                store.record(name, step, epoch, value, time)
        store.points_recorded += appended
        if fresh:
            store.max_step = step
        elif store.rewound:  # the step went back in some series: one rewind, said once
            record.rewind_log.rewound(step, store.end_report(), first_step=record.first_train_step)
