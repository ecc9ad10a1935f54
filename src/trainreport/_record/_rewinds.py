"""RewindLog: each rewind said in the log, bounded; the batch-index mistake named.

A rewind (a point before a series' last step, or the resume purge) deletes the
points it replaces (docs/design.md#metrics). That is right for a run resumed
from an earlier checkpoint and wrong for a per-epoch batch index used as the
step, which keeps only the last epoch. So each rewind is said:

* one ``trainreport.series_rewound`` event (INFO) per report that rewound
  anything, naming at most :data:`MAX_SERIES_NAMED` of the series it rewound
  (``series_count`` says how many), ``from_step`` (the new point's step),
  ``last_step`` (the largest last step before) and ``points_replaced``;
  ``resume`` is True for the resume purge;
* at most :data:`MAX_REWIND_EVENTS` rewind events per process (the warning
  below among them), then one ``trainreport.series_rewound_not_logged`` line
  (the counts go on in ``stats()``);
* the second rewind (not the resume purge) back to a step at or below this
  process's first training step (with no training step yet: at or below
  the step the first rewind went back to) is the batch-index pattern: one
  ``trainreport.step_looks_like_batch_index`` WARNING instead of that
  rewind's INFO event, once per process, logged even past the cap.

The counts themselves (``rewinds``, ``points_replaced_by_rewinds``) live in
the store. Reporter-thread work only: nothing here runs on a report call.

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainreport._logging import get_logger
from trainreport._record._store import Rewound

__all__ = ["MAX_REWIND_EVENTS", "MAX_SERIES_NAMED", "RewindLog"]

#: Rewind events logged per process, the batch-index warning included.
MAX_REWIND_EVENTS = 10
#: Series names one event lists (``series_count`` has them all).
MAX_SERIES_NAMED = 5
#: A name in an event is cut to this many characters.
_NAME_CHARS = 200
#: Rewinds back to a low step that make the pattern.
_LOW_REWINDS_FOR_WARNING = 2

_log = get_logger()


class RewindLog:
    """Says the rewinds of one process in the log (see the module docstring).

    Args:
        max_events: ``trainreport.series_rewound`` events logged before the
            ``..._not_logged`` line.
    """

    __slots__ = ("_first_low", "_limit_said", "_logged", "_lows", "_max_events", "_warned")

    def __init__(self, max_events: int = MAX_REWIND_EVENTS) -> None:
        self._max_events = max_events
        #: Rewind events logged, the warning included.
        self._logged = 0
        self._limit_said = False
        self._lows = 0
        self._first_low: int | None = None
        self._warned = False

    def rewound(
        self,
        step: int,
        rewound: Sequence[Rewound],
        *,
        first_step: int | None,
        resume: bool = False,
    ) -> None:
        """Say one report's (or the resume's) rewind of ``rewound``, back to ``step``.

        Args:
            step: the step the series went back to (the new point's step, or
                the resume's first training step).
            rewound: each series rewound, with its last step before and the
                points removed from it; empty: nothing to say.
            first_step: this process's first training step, or None before one.
            resume: the resume purge (a legitimate rewind: never the pattern).

        Never raises.
        """
        if not rewound:
            return
        fields = {
            "series": [name[:_NAME_CHARS] for name, _, _ in rewound[:MAX_SERIES_NAMED]],
            "series_count": len(rewound),
            "from_step": step,
            "last_step": max(last for _, last, _ in rewound),
            "points_replaced": sum(removed for _, _, removed in rewound),
            "resume": resume,
        }
        if not resume and self._looks_like_batch_index(step, first_step):
            self._warned = True
            self._logged += 1
            _log.warning(
                "trainreport.step_looks_like_batch_index",
                **fields,
                cause=f"the step went back to {step} again: a per-epoch batch index "
                "used as the step? Each time, the points from that step on are replaced",
                fix="pass a global step (epoch * batches_per_epoch + i)",
            )
            return
        if self._logged < self._max_events:
            self._logged += 1
            _log.info(
                "trainreport.series_rewound",
                **fields,
                hint="the points from from_step on were replaced (right for a run resumed "
                "from an earlier checkpoint); if the step was not meant to go back, "
                "report a global step that only grows",
            )
        elif not self._limit_said:
            self._limit_said = True
            _log.info(
                "trainreport.series_rewound_not_logged",
                logged=self._max_events,
                hint="further rewinds are not logged; see Reporter.stats().rewinds "
                "and .points_replaced_by_rewinds",
            )

    def _looks_like_batch_index(self, step: int, first_step: int | None) -> bool:
        """Whether this rewind makes the batch-index pattern (counts low rewinds)."""
        if self._warned:
            return False
        if self._first_low is None and first_step is None:
            self._first_low = step
        floor = first_step if first_step is not None else self._first_low
        if floor is None or step > floor:
            return False
        self._lows += 1
        return self._lows >= _LOW_REWINDS_FOR_WARNING
