"""LagWatch: a destination that falls behind says so, a bounded number of times (clock-free).

The store keeps in memory every point some destination has not acknowledged
(docs/engine.md, "Memory"). With a destination that keeps up that is bounded
(the backlog rule, ``BACKLOG_SEND_POINTS``); with one that takes fewer points a
second than the run makes (a slow or overloaded service answers 2xx: no
``send_failed``) or that is down for hours, the points it lacks pile up in the
training process's memory, and the first sign would be the job's RSS. So the
engine core asks :meth:`LagWatch.check` at every pass of the reporter thread
(it counts at most once per :data:`CHECK_SECONDS`), fed ``(state, now)``: when
one destination lacks more than :data:`BEHIND_WARNING_POINTS`' first threshold
(1,000,000 points), one ``trainreport.destination_behind`` warning says how
many, the memory they hold, whether its requests fail or succeed, the rates it
takes and the run makes points at, and what to do; again past 10 M and 100 M.
The memory (``unsent_memory_bytes``) is those points at what the store really
costs a point, its four columns (``POINT_COLUMN_BYTES`` in ``_record/_store.py``,
28 bytes): the arrays' capacity is up to 1/16 more (a journal's in-memory
state holds none of them: its compaction reads them from the store). Each threshold warns once
per destination per reporter: the warning cannot repeat per step, however the
destination swings around a threshold. Once a destination that warned lacks
fewer than the first threshold again, one ``trainreport.destination_caught_up``
(INFO) says so; it follows a warning, so it is bounded the same way.

It reads the recorder's counts and the destinations' state and logs; it owns
no thread and reads no clock. Owned by the reporter thread.
"""

from __future__ import annotations

import collections
from bisect import bisect_left
from collections.abc import Sequence

import attrs

from trainreport._engine._destination import Destination
from trainreport._logging import get_logger
from trainreport._record._recorder import Recorder
from trainreport._record._store import POINT_COLUMN_BYTES

__all__ = [
    "BEHIND_WARNING_POINTS",
    "CHECK_SECONDS",
    "RATE_WINDOW_SECONDS",
    "LagWatch",
    "behind_cause",
]

_log = get_logger()

#: A destination lacking more than each of these many points (in the store: points it
#: has not acknowledged) gets one ``trainreport.destination_behind``, once per threshold.
#: 1 M points is about 28 MB of columns (``POINT_COLUMN_BYTES``), far past the backlog
#: rule's 100,000 (a destination that keeps up never gets there); each next one is a
#: decade more memory.
BEHIND_WARNING_POINTS: tuple[int, ...] = (1_000_000, 10_000_000, 100_000_000)
#: The rates a warning gives are over about this long (scheduling clock, seconds): the
#: counts are sampled every quarter of it, and the oldest of five samples is the base.
RATE_WINDOW_SECONDS = 60.0
_SAMPLE_SECONDS = RATE_WINDOW_SECONDS / 4
_SAMPLES = 5
#: The points lacked are counted at most this often (scheduling clock, seconds): a pass
#: can come every 50 ms, and a destination falls behind by a million points in seconds
#: at the fastest (docs/performance.md: 500,000 points a second), so a warning comes at
#: most this late while the count's cost (one sum over the series per destination,
#: ``benchmarks/bench_lag_watch.py``) stays bounded however often the thread wakes.
CHECK_SECONDS = 1.0

#: What a slow destination (its last request was delivered) should make the user do,
#: by wire mode; a longer ``min_report_interval_seconds`` would not help either.
_SLOW = (
    "the destination answers but takes fewer points a second than the run makes; a "
    "longer min_report_interval_seconds does not help "
)
_FEWER_POINTS = (
    "or make fewer points: keep fewer histories (ReportingConfig(time_series_metrics="
    "...): the other metrics keep only their current value) or report every few steps "
    "instead of every step"
)
_SLOW_SUFFIX_HINT = (
    _SLOW + "(a series-suffix destination that lacks many points is sent to as soon as "
    "its last request ends). Give it a service that keeps up (a faster or less loaded "
    "server, nearer the job), " + _FEWER_POINTS
)
_SLOW_FULL_STATE_HINT = (
    _SLOW + "(a full-state destination is sent every point at every send). Use a "
    "service that takes series suffixes (the reference server, `trainreport serve`: "
    "only the points it lacks at each send), " + _FEWER_POINTS
)
_FAILING_HINT = (
    "its requests fail (last_error): the points wait in memory until it answers "
    "again, and are then sent from the store; make the service reachable, or "
    "report to one that is"
)
_SUPERSEDED_HINT = (
    "a later attempt owns the task at this destination: nothing more is sent to "
    "it, yet the store keeps the points it lacks; end this process, or report this "
    "attempt to another task"
)
_REFUSED_HINT = (
    "the destination refused the curves for size even thinned "
    "(trainreport.metrics_too_large): it is sent no more points, yet the store "
    "keeps them; raise its body limit or use the reference server "
    "(series suffixes, split to fit)"
)
_JOURNAL = (
    "; the journal {journal} holds them on disk too: a kill loses at most the last "
    "journal_interval_seconds of them"
)
_NO_JOURNAL = (
    "; a kill loses them: keep the journal (ReportingConfig(journal=True), with a job "
    "and task id) or add a FileSink for a copy on disk"
)


def behind_cause(dest: Destination, recorder: Recorder) -> str:
    """Why ``dest`` lacks points, in one word. Never raises.

    - ``superseded``: a later attempt owns the task there (nothing more is sent);
    - ``metrics_refused``: a full-state destination refused the curves for
      size even thinned (sent no more of them);
    - ``failing``: its last requests failed (``consecutive_failures`` > 0: down,
      refusing, or a resend that keeps disagreeing);
    - ``slow``: its last request was delivered (or none ended yet): it takes
      points slower than the run makes them.
    """
    if dest.superseded:
        return "superseded"
    if recorder.metrics_refused(dest.index):
        return "metrics_refused"
    return "failing" if dest.scheduler.consecutive_failures else "slow"


@attrs.frozen
class _Sample:
    """The counts at one time: the points recorded, and each destination's points delivered."""

    at: float
    recorded: int
    delivered: tuple[int, ...]


class LagWatch:
    """Which destinations fell how far behind, and the counts of the last minute.

    Args:
        destinations: how many destinations the reporter sends to.
        thresholds: the points lacked past which a destination warns, once
            each (:data:`BEHIND_WARNING_POINTS`; a test passes small ones).

    Owned by the reporter thread.
    """

    def __init__(
        self, destinations: int, thresholds: Sequence[int] = BEHIND_WARNING_POINTS
    ) -> None:
        self.thresholds = tuple(sorted(thresholds))
        #: Per destination: how many thresholds it has crossed (each warned once).
        self._spent = [0] * destinations
        #: Per destination: when it last warned, while it has not caught up since.
        self._behind_since: list[float | None] = [None] * destinations
        self._samples: collections.deque[_Sample] = collections.deque(maxlen=_SAMPLES)
        self._checked_at: float | None = None

    def check(
        self,
        destinations: Sequence[Destination],
        recorder: Recorder,
        now: float,
        *,
        journal: str | None = None,
        journal_destination: int = 0,
    ) -> None:
        """Warn for each destination past a threshold it has not warned at; note who caught up.

        At most once per :data:`CHECK_SECONDS` of ``now``: a call sooner after
        the last one does nothing.

        Args:
            destinations: the reporter's destinations.
            recorder: the attempt's state (its counts are read, under its lock).
            now: the scheduling clock's time (seconds).
            journal: the journal's path when one is kept and has not failed
                (it holds on disk what destination ``journal_destination``
                lacks), else ``None``.
            journal_destination: the destination the journal is kept for.

        Never raises (a count that cannot be read is a bug the core's pass catches).
        """
        last = self._checked_at
        if not self.thresholds or (last is not None and 0 <= now - last < CHECK_SECONDS):
            return
        self._checked_at = now
        samples = self._samples
        if not samples or now - samples[-1].at >= _SAMPLE_SECONDS:
            samples.append(self._sample(recorder, now))
        first = self.thresholds[0]
        for dest in destinations:
            d = dest.index
            lacking = recorder.unsent_points(d)
            crossed = bisect_left(self.thresholds, lacking)  # thresholds it lacks more than
            since = self._behind_since[d]
            if since is not None and lacking < first:
                self._behind_since[d] = None
                _log.info(
                    "trainreport.destination_caught_up",
                    destination=dest.label,
                    points_unsent=lacking,
                    behind_seconds=round(max(now - since, 0.0), 1),
                    consequence="the points it holds now leave memory (the process's RSS "
                    "may not shrink: the allocator keeps its high-water mark)",
                )
            if crossed <= self._spent[d]:
                continue
            self._spent[d] = crossed
            self._behind_since[d] = now
            kept = journal if d == journal_destination else None
            self._warn(dest, recorder, now, lacking, self.thresholds[crossed - 1], kept)

    @staticmethod
    def _sample(recorder: Recorder, now: float) -> _Sample:
        counts = recorder.counts()
        return _Sample(now, counts.points_recorded, counts.delivered)

    def _rates(self, recorder: Recorder, now: float, d: int) -> dict[str, float | None]:
        """The points a second ``d`` took and the run recorded, over the sampled window."""
        base = self._samples[0]
        window = now - base.at
        if window <= 0:
            return {
                "points_taken_per_second": None,
                "points_recorded_per_second": None,
                "rate_window_seconds": None,
            }
        current = self._sample(recorder, now)
        taken = max(current.delivered[d] - base.delivered[d], 0)  # a rewind can lower it
        recorded = max(current.recorded - base.recorded, 0)
        return {
            "points_taken_per_second": round(taken / window, 1),
            "points_recorded_per_second": round(recorded / window, 1),
            "rate_window_seconds": round(window, 1),
        }

    def _warn(
        self,
        dest: Destination,
        recorder: Recorder,
        now: float,
        lacking: int,
        threshold: int,
        journal: str | None,
    ) -> None:
        cause = behind_cause(dest, recorder)
        if cause == "slow":
            full_state = dest.full_state and not dest.never_opened
            hint = _SLOW_FULL_STATE_HINT if full_state else _SLOW_SUFFIX_HINT
        elif cause == "failing":
            hint = _FAILING_HINT
        elif cause == "superseded":
            hint = _SUPERSEDED_HINT
        else:
            hint = _REFUSED_HINT
        hint += _NO_JOURNAL if journal is None else _JOURNAL.format(journal=journal)
        if dest.never_opened:
            wire_mode = None  # its open says which
        else:
            wire_mode = "full-state" if dest.full_state else "series-suffix"
        _log.warning(
            "trainreport.destination_behind",
            destination=dest.label,
            points_unsent=lacking,
            threshold=threshold,
            unsent_memory_bytes=lacking * POINT_COLUMN_BYTES,
            cause=cause,
            wire_mode=wire_mode,
            consecutive_failures=dest.scheduler.consecutive_failures,
            last_error=dest.last_error,
            **self._rates(recorder, now, dest.index),
            journal=journal,
            consequence="the store keeps in memory every point a destination has not "
            "acknowledged: this memory grows with the run while it stays behind",
            hint=hint,
        )
