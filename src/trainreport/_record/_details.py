"""The ``status_details`` an update carries, and the record as the destinations should hold it.

Progress (step, epoch, percentage, ETA), phase, ``updated_at``, every
metric's current value, the sticky fields, and the keys earlier sends carried
(docs/design.md#wire-modes). Also the two read-only views of the record:
:meth:`DetailsView.snapshot` (the ``GET`` shape) and
:meth:`DetailsView.journal_view` (what the journal appends).

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from trainreport._record._run_record import RunRecord
from trainreport._record._seeding import points_json
from trainreport._wire._protocol import forget_running_only_details
from trainreport._wire._sink_interface import SeriesUpdate

__all__ = ["DetailsView", "JournalView"]


@attrs.frozen
class JournalView:
    """What the journal needs from the record, read under the recorder's lock.

    Attributes:
        version: whether the store was seeded (its indices are then the service's,
            no longer this process's own): when it changed, the journal is rewritten.
        status: the task's status.
        details: every ``status_details`` key an update built now would carry.
        series: ``(name, offset, steps, epochs, values)`` per series that changed
            since the last view: a suffix from the first index that changed (the
            journal's length, or where a rewind cut the series), or, for a
            rewrite, every series from what every destination holds
            (``acknowledged``) on.
        lengths: each series' length (what the journal holds once it appends ``series``).
        acknowledged: per series, the least length every destination is known to hold.
        whole: ``series`` is every series from ``acknowledged`` on (a rewrite, or
            the compaction the journal asked for): the journal is replaced by it.
    """

    version: bool
    status: str
    details: dict[str, Any]
    series: tuple[SeriesUpdate, ...]
    lengths: dict[str, int]
    acknowledged: dict[str, int]
    whole: bool = False


class DetailsView:
    """Builds ``status_details`` and the read-only views of one attempt's record.

    Args:
        record: the attempt's shared record.
    """

    __slots__ = ("_carried", "_record", "delivered_details", "last_updated_at")

    def __init__(self, record: RunRecord) -> None:
        self._record = record
        #: Every details key an update was built with (sticky fields aside), last value.
        self._carried: dict[str, Any] = {}
        #: What a destination was last sent per details key: a shallow merge keeps
        #: a key it was once sent, so snapshot() does too.
        self.delivered_details: dict[str, Any] = {}
        self.last_updated_at: str | None = None

    def progress(self) -> dict[str, Any]:
        """The progress fields: step, epoch, percentage_done, eta_seconds (None omitted).

        No ``eta_seconds`` once the status is terminal: a run that is over has no time left.
        """
        record = self._record
        out: dict[str, Any] = {}
        step = record.at_step
        if step is not None:
            out["step"] = step
        if record.at_epoch is not None:
            out["epoch"] = record.at_epoch
        if step is not None and record.max_steps:
            max_steps = record.max_steps
            out["percentage_done"] = round(min(max(step / max_steps * 100.0, 0.0), 100.0), 2)
            first = record.first_step
            if (
                first is not None
                and record.last_step_time is not None
                and step > first[1]
                and not record.machine.is_terminal
            ):
                per_step = (record.last_step_time - first[0]) / (step - first[1])
                out["eta_seconds"] = round(max(max_steps - step, 0) * per_step, 1)
        return out

    def details(self, wall: str, sticky_keys: Mapping[str, Any]) -> dict[str, Any]:
        """The ``status_details`` an update built now carries, with ``sticky_keys``' values."""
        # Keys an earlier send carried and that cannot be computed now (the ETA after a
        # step went back, the current value of a metric that turned NaN) keep their last
        # value: the destination may hold them from a request whose answer was lost, so
        # every send carries them and the last delivered one decides what it holds.
        record = self._record
        details: dict[str, Any] = dict(self._carried)
        details["phase"] = record.machine.phase.value
        details.update(self.progress())
        details["updated_at"] = wall
        sticky = record.sticky.values
        for key in sticky_keys:
            details[key] = sticky[key]
        for name, value in record.store.current_values():
            if math.isfinite(value):  # never null; the curve shows the gap
                details[name] = value
        # A terminal write makes the destination drop what only a running task has
        # (the ETA), so a finished run neither carries nor sends it.
        forget_running_only_details(record.machine.status, details)
        return details

    def built(self, wall: str, details: Mapping[str, Any]) -> None:
        """An update was built at ``wall`` carrying ``details``: later ones carry its keys."""
        sticky = self._record.sticky.values
        self._carried.update((k, v) for k, v in details.items() if k not in sticky)
        self.last_updated_at = wall

    def snapshot(self) -> dict[str, Any]:
        """The task record the destinations should now hold (the ``GET`` shape).

        Each series from its first point in memory on (``Series.base``).
        """
        record = self._record
        details = dict(record.stored_details)
        details.update(self.delivered_details)
        details.update(self.details(self.last_updated_at or "", record.sticky.values))
        if not self.last_updated_at:
            del details["updated_at"]
        forget_running_only_details(record.machine.status, details)
        # A series with no points is not part of a stored task (a server keeps points, not names).
        store = record.store
        if any(store.series.values()) or record.preserved:
            metrics: dict[str, Any] = {
                name: points_json(s.steps, s.epochs, s.values)
                for name, s in store.series.items()
                if s
            }
            metrics.update(record.preserved)
            details["metrics"] = metrics
        return {"status": record.machine.status.value, "status_details": details}

    def journal_view(
        self, wall: str, lengths: Mapping[str, int], version: bool | None, *, whole: bool = False
    ) -> JournalView:
        """The suffixes the journal lacks (or, when ``version`` is not current, a rewrite).

        Each series is taken from the least of ``lengths`` (what the journal
        holds) and the first index a rewind changed since the last view, so a
        rewind is one suffix in the next record. Marks every series as given
        to the journal up to its length (:attr:`Series.journaled`), then lets
        what every destination holds leave memory (``MetricStore.release``).

        ``whole`` (a journal's compaction) asks for what a rewrite holds, every
        series from ``acknowledged`` on, and gets it (:attr:`JournalView.whole`)
        when the store holds all of those points; when some left memory (a
        destination that lost points it had acknowledged), the suffixes as
        usual, and the journal keeps its file as it is.
        """
        record = self._record
        store = record.store
        current = record.seeded
        acknowledged = {n: min(s.delivered) for n, s in store.series.items()}
        rewrite = current != version
        if whole and not rewrite:
            rewrite = all(s.base <= acknowledged[n] for n, s in store.series.items())
        series = []
        for name, s in store.series.items():
            length = len(s)
            held = lengths.get(name, 0)
            start = acknowledged[name] if rewrite else min(held, s.journaled, length)
            # Points before the base left memory: every destination acknowledged them.
            start = max(start, s.base)
            if rewrite or start < length or start < held:
                i = start - s.base
                series.append(
                    SeriesUpdate(name, start, s.steps[i:], s.epochs[i:], s.values[i:], s.times[i:])
                )
            s.journaled = length
        store.journal_fed = True
        store.release()
        return JournalView(
            current,
            record.machine.status.value,
            self.details(wall, record.sticky.values),
            tuple(series),
            {n: len(s) for n, s in store.series.items()},
            acknowledged,
            rewrite,
        )
