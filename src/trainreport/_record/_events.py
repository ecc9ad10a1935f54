"""Event reports for the recorder: lifecycle moves and the sticky details they set.

``report_training_start``, ``report_epoch_end``, ``report_checkpoint_saved``,
``report_hyperparameters`` and the terminal reports move the task machine
(docs/design.md#lifecycle) and set sticky ``status_details`` fields
(``_record/_sticky.py``). Bad arguments are dropped with one log event each.

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from typing import Any

from trainreport._record._epochs import EpochResolver
from trainreport._record._machines import Outcome, TaskEvent
from trainreport._record._params import MAX_PARAM_ITEMS
from trainreport._record._reports import Kind
from trainreport._record._run_record import RunRecord
from trainreport._record._values import NotChartable, to_step

__all__ = ["MAX_TEXT", "EventIngest"]

_EVENT_OF_KIND = {
    Kind.COMPLETED: TaskEvent.COMPLETE,
    Kind.CANCELLED: TaskEvent.CANCEL,
    Kind.FAILED: TaskEvent.FAIL,
}
#: Longest text kept for a checkpoint path, cancel reason or error message.
MAX_TEXT = 4096


def _positive_int(value: object) -> int | NotChartable | None:
    if value is None:
        return None
    step = to_step(value)
    if isinstance(step, NotChartable) or step <= 0:
        return NotChartable("not a positive integer")
    return step


class EventIngest:
    """Applies the event reports (and ``report_hyperparameters``) to the record.

    Args:
        record: the attempt's shared record.
        epochs: the attempt's epoch resolver.
    """

    __slots__ = ("_epochs", "_record")

    def __init__(self, record: RunRecord, epochs: EpochResolver) -> None:
        self._record = record
        self._epochs = epochs

    def event(self, event: TaskEvent) -> bool:
        """Move the task machine; False (counted) when the tables refuse ``event``."""
        record = self._record
        if record.machine.apply(event) is Outcome.REFUSED:
            record.drops["refused_transition"] += 1
            return False
        record.changes += 1
        return True

    def training_start(self, raw_max_steps: object, raw_num_epochs: object) -> bool:
        """Apply ``report_training_start``. Returns True (an event) unless refused."""
        record = self._record
        max_steps, num_epochs = _positive_int(raw_max_steps), _positive_int(raw_num_epochs)
        for field, value in (("max_steps", max_steps), ("num_epochs", num_epochs)):
            if isinstance(value, NotChartable):
                record.drop_once("invalid_argument", field, "report_training_start", value.reason)
        if not self.event(TaskEvent.TRAINING_START):
            return False
        if isinstance(max_steps, int):
            record.max_steps = max_steps
            record.sticky.set("max_steps", max_steps)
        if isinstance(num_epochs, int):
            record.num_epochs = num_epochs
            record.sticky.set("num_epochs", num_epochs)
        return True

    def epoch_end(self, raw_epoch: object) -> bool:
        """Apply ``report_epoch_end``. Returns True (an event) unless refused."""
        if not self.event(TaskEvent.EPOCH_END):
            return False
        record = self._record
        epoch = self._epochs.resolve(raw_epoch, record.at_step or 0, "report_epoch_end")
        if epoch is not None:
            record.at_epoch = epoch
        return True

    def checkpoint(self, path: object, raw_step: object) -> bool:
        """Apply ``report_checkpoint_saved``. Returns True (an event) unless refused."""
        if not self.event(TaskEvent.CHECKPOINT):
            return False
        record = self._record
        if not isinstance(path, str) or not path.strip():
            # A missing path is never sent: the last good one stays on the destination.
            record.drop_once(
                "invalid_argument", "path", "report_checkpoint_saved", "missing checkpoint path"
            )
            return True
        record.sticky.set("checkpoint_path", path[:MAX_TEXT])
        step = to_step(raw_step) if raw_step is not None else None
        if isinstance(step, int):
            record.sticky.set("checkpoint_step", step)
        return True

    def terminal(self, kind: Kind, reason: object, message: object) -> bool:
        """Apply ``report_completed`` / ``report_cancelled`` / ``report_error``."""
        if not self.event(_EVENT_OF_KIND[kind]):
            return False
        sticky = self._record.sticky
        if kind is Kind.CANCELLED:
            sticky.set("cancel_reason", str(reason)[:MAX_TEXT])
        elif kind is Kind.FAILED:
            sticky.set("error", {"type": str(reason)[:200], "message": str(message)[:MAX_TEXT]})
        return True

    def hyperparameters(self, flat: dict[str, Any], left_out: int) -> None:
        """Apply ``report_hyperparameters`` (merged into the record, bounded)."""
        record = self._record
        merged = {**record.sticky.values.get("hyperparameters", {}), **flat}
        if len(merged) > MAX_PARAM_ITEMS:  # many calls: the merged record is bounded too
            left_out += len(merged) - MAX_PARAM_ITEMS
            merged = dict(list(merged.items())[:MAX_PARAM_ITEMS])
        if left_out:
            record.drop_once(
                "hyperparameters_truncated",
                "params",
                "report_hyperparameters",
                f"more than {MAX_PARAM_ITEMS} items; {left_out} keys left out",
            )
            record.drops["hyperparameters_truncated"] += left_out - 1
        record.sticky.set("hyperparameters", merged)
