"""Epoch resolution for the recorder: the epoch rule, and a resumed run's int-epoch base.

:class:`~trainreport._record._values.EpochRule` says which 1-based epoch a reported
epoch means; a resumed process first decides its int-epoch base from the
stored training curves (:meth:`EpochResolver.decide_base`). Bad epochs are
dropped with one log event each (docs/design.md#metrics).

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

import numbers
from bisect import bisect_left

from trainreport._logging import get_logger
from trainreport._record._run_record import RunRecord
from trainreport._record._values import EpochRule, NotChartable

__all__ = ["MAX_EPOCH", "EpochResolver"]

MAX_EPOCH = 2**31 - 1  # epochs are stored as int32 (array('i'))
_log = get_logger()


class EpochResolver:
    """Resolves reported epochs for one attempt (the rule is decided once per process).

    Args:
        record: the attempt's shared record.
    """

    __slots__ = ("_record", "rule")

    def __init__(self, record: RunRecord) -> None:
        self._record = record
        self.rule = EpochRule()

    def resolve(self, raw: object, step: int, report: str) -> int | None:
        """The 1-based epoch ``raw`` means at ``step``; None (dropped and logged, or ``None``)."""
        if self.rule.zero_based is None:
            self.decide_base(raw, step)
        epoch = self.rule.resolve(raw, step=step, num_epochs=self._record.num_epochs)
        if isinstance(epoch, NotChartable):
            self._record.drop_once("invalid_epoch", "epoch", report, epoch.reason)
            return None
        if epoch is not None and epoch > MAX_EPOCH:
            self._record.drop_once("invalid_epoch", "epoch", report, "too large")
            return None
        return epoch

    def settled(self, raw: object) -> int | None:
        """The epoch :meth:`resolve` gives ``raw`` at a step above 0, when nothing is logged.

        For a plain ``int`` (once the rule is decided) or ``float`` epoch that
        resolves quietly to a storable epoch; None when :meth:`resolve` must
        decide (``None``, other types, a first int epoch, a bad or huge one).
        Changes nothing.
        """
        epoch = self.rule.settled(raw, self._record.num_epochs)
        return epoch if epoch is not None and epoch <= MAX_EPOCH else None

    def decide_base(self, raw: object, step: int) -> None:
        """Choose the int-epoch base of a resumed process from the stored curve.

        The first int epoch alone cannot tell ``range(n)`` counting (0-based) from
        1-based counting once a run resumes past its first epoch: index 1 is epoch 2
        of a 0-based loop and epoch 1 of a 1-based one. When the stored task has a
        training point before ``step`` (the latest such point of any training series;
        the larger epoch on a tie; a point at ``step`` or later is one a resume from an
        earlier checkpoint replaces), the base is the one whose epoch is not
        below that point's (epochs never go back within a run), the smaller of the
        two when both qualify. Otherwise :class:`EpochRule` decides as for a new run.
        """
        if isinstance(raw, bool) or not isinstance(raw, numbers.Integral):
            return
        latest = max(
            (
                (steps[at], epochs[at])
                for steps, epochs in self._record.stored_epochs
                if (at := bisect_left(steps, step) - 1) >= 0
            ),
            default=None,
        )
        if latest is None or latest[1] < 1:
            return
        stored_step, stored_epoch = latest
        try:
            index = int(raw)
        except Exception:  # a hostile Integral: EpochRule drops it
            return
        if index < 0:
            return
        candidates = [
            (value, zero_based)
            for value, zero_based in ((index + 1, True), (max(1, index), False))
            if value >= stored_epoch
        ]
        if not candidates:  # below the stored epoch either way: the new-run rule
            return
        _, zero_based = min(candidates, key=lambda c: (c[0], not c[1]))
        self.rule = EpochRule(zero_based=zero_based)
        _log.info(
            "trainreport.epoch_rule",
            zero_based=zero_based,
            first_epoch=index,
            stored_epoch=stored_epoch,
            stored_step=stored_step,
        )
