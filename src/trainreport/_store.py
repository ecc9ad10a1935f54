"""MetricStore: every metric of a run, by qualified name, as series (columns) or scalars.

The first arrival of a name decides, once, whether it keeps a history (a
series) or only its latest value (a scalar) (docs/design.md#metrics). A series stores its
points as four typed columns (``array('q')`` steps, ``array('i')`` epochs,
``array('d')`` values, ``array('d')`` wall-clock times in seconds since the Unix
epoch, NaN where unknown): 28 bytes a point plus the arrays' growth slack.

Each series also tracks what each destination holds (lists indexed by the
destination's position in ``Reporter(sinks=[...])``):

* ``delivered[d]``: the length of the prefix destination ``d`` is known to hold
  exactly as we hold it;
* ``server_length[d]``: how many points ``d`` holds for it (which may be more
  than ``delivered[d]`` after a rewind truncated our copy);
* ``low[d]``: the least length the series had since the update in flight to
  ``d`` was built (a rewind during a send lowers it), so an acknowledgement
  never claims points that changed while the request was on the wire.

and what the journal holds: ``journaled``, the length of the prefix last given
to the journal exactly as held here (a rewind lowers it, so the journal gets a
suffix from there: one record, never a rewrite).

A series needs sending to ``d`` when either of the first two differs from its
length. The payload builder sends each series from ``delivered[d]`` on (0 in
full-state mode), which makes every send an idempotent suffix
(docs/design.md#wire-modes).

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from typing import TypeAlias

__all__ = ["UNKNOWN_TIME", "MetricStore", "Rewound", "Series"]

#: The time of a point whose wall-clock time is not known (seeded from a destination
#: that keeps none): NaN in the times column, ``null`` on the wire.
UNKNOWN_TIME = float("nan")

#: One series a rewind cut: (qualified name, its last step before, points removed).
Rewound: TypeAlias = "tuple[str, int, int]"


class Series:
    """One metric's history, as columns. Steps are non-decreasing and unique.

    ``times`` holds each point's wall-clock time (seconds since the Unix epoch,
    :data:`UNKNOWN_TIME` where unknown), as long as the other columns.
    """

    __slots__ = (
        "delivered",
        "epochs",
        "journaled",
        "low",
        "server_length",
        "steps",
        "times",
        "values",
    )

    def __init__(self, destinations: int = 1) -> None:
        self.steps: array[int] = array("q")
        self.epochs: array[int] = array("i")
        self.values: array[float] = array("d")
        self.times: array[float] = array("d")
        self.delivered = [0] * destinations
        self.server_length = [0] * destinations
        self.low = [0] * destinations
        self.journaled = 0

    def __len__(self) -> int:
        return len(self.steps)

    def append(self, step: int, epoch: int, value: float, time: float = UNKNOWN_TIME) -> int:
        """Add a point; a point at or before the last step replaces the tail from it on.

        Returns:
            the number of points discarded (0 for a plain append).
        """
        steps = self.steps
        discarded = 0
        if steps and steps[-1] >= step:
            cut = bisect_left(steps, step)
            discarded = len(steps) - cut
            self.truncate(cut)
        steps.append(step)
        self.epochs.append(epoch)
        self.values.append(value)
        self.times.append(time)
        return discarded

    def truncate(self, length: int) -> None:
        """Keep only the first ``length`` points."""
        if length < len(self.steps):
            del self.steps[length:]
            del self.epochs[length:]
            del self.values[length:]
            del self.times[length:]
            for d, held in enumerate(self.delivered):
                self.delivered[d] = min(held, length)
                self.low[d] = min(self.low[d], length)
            self.journaled = min(self.journaled, length)

    def discard_after(self, step: int) -> int:
        """Discard every point with a step later than ``step``; returns how many."""
        cut = bisect_right(self.steps, step)
        discarded = len(self.steps) - cut
        self.truncate(cut)
        return discarded

    def needs_send(self, d: int) -> bool:
        """True when destination ``d`` does not hold exactly this series."""
        n = len(self.steps)
        return self.delivered[d] != n or self.server_length[d] != n

    def nbytes(self) -> int:
        """Bytes held by the columns (allocated capacity is slightly more)."""
        columns = (self.steps, self.epochs, self.values, self.times)
        return sum(a.itemsize * len(a) for a in columns)


class MetricStore:
    """Series and scalars of one run, keyed by qualified metric name.

    Args:
        max_names: cap on distinct qualified names per run
            (docs/design.md#metrics); further
            names are refused by :meth:`admit`.
        destinations: how many destinations' holdings each series tracks.
    """

    def __init__(self, max_names: int = 1000, destinations: int = 1) -> None:
        self.max_names = max_names
        self.destinations = destinations
        self.series: dict[str, Series] = {}
        self.scalars: dict[str, float] = {}  # only names that have had a value
        self.scalar_names: set[str] = set()
        #: The largest step of any point recorded (-1: none); a later step appends plainly.
        self.max_step = -1
        #: Reports (and resume cuts) that rewound a series: docs/design.md#metrics.
        self.rewinds = 0
        #: Points those rewinds removed (a re-reported last step is not a rewind).
        self.points_replaced_by_rewinds = 0
        #: The series rewound since :meth:`end_report` last took them.
        self.rewound: list[Rewound] = []
        self.points_recorded = 0
        self.points_discarded = 0

    def __contains__(self, name: str) -> bool:
        return name in self.series or name in self.scalar_names

    @property
    def full(self) -> bool:
        """Whether the distinct-name cap is reached (no new name can be admitted)."""
        return len(self.series) + len(self.scalar_names) >= self.max_names

    def admit(self, name: str, *, as_series: bool) -> bool:
        """Register a new name as a series or a scalar; False when the name cap is reached."""
        if len(self.series) + len(self.scalar_names) >= self.max_names:
            return False
        if as_series:
            self.series[name] = Series(self.destinations)
        else:
            self.scalar_names.add(name)
        return True

    def make_series(self, name: str) -> Series:
        """Turn the scalar ``name`` into an (empty) series: a stored series stays a series."""
        self.scalar_names.discard(name)
        self.scalars.pop(name, None)
        series = self.series[name] = Series(self.destinations)
        return series

    def demote(self, name: str) -> None:
        """Turn the series ``name`` into a scalar that keeps only its latest value."""
        series = self.series.pop(name)
        self.scalar_names.add(name)
        self.points_recorded -= len(series)
        if series.values:
            self.scalars[name] = series.values[-1]

    def record(
        self, name: str, step: int, epoch: int, value: float, time: float = UNKNOWN_TIME
    ) -> None:
        """Store a point (series) or the latest value (scalar) of an admitted name.

        ``time`` is the point's wall-clock time, seconds since the Unix epoch.
        """
        s = self.series.get(name)
        if s is None:
            self.scalars[name] = value
            return
        steps = s.steps
        if steps and steps[-1] > step:  # a rewind: noted for end_report()
            last = steps[-1]
            discarded = s.append(step, epoch, value, time)
            self.points_replaced_by_rewinds += discarded
            self.rewound.append((name, last, discarded))
        else:
            discarded = s.append(step, epoch, value, time)
        self.points_discarded += discarded
        self.points_recorded += 1
        self.max_step = max(self.max_step, step)

    def end_report(self) -> list[Rewound]:
        """The series the report just recorded rewound; counts one rewind if there are any.

        Called once a report's points are recorded: a report that rewinds 100
        series is one rewind (and one log event, ``_rewinds.py``).
        """
        rewound = self.rewound
        if not rewound:
            return rewound
        self.rewinds += 1
        self.rewound = []
        return rewound

    def purge_after(self, step: int) -> list[Rewound]:
        """Discard every point with a step later than ``step``, in every series.

        The run-wide purge of a run resumed from an earlier checkpoint
        (TensorBoard's purge on restart); the recorder decides when it applies
        (once per process, ``docs/engine.md``). Points at ``step`` itself are
        replaced by :meth:`record` as they arrive. Counts one rewind when it
        discards anything.

        Returns:
            Each series that lost points: (name, its last step before, points discarded).
        """
        cut: list[Rewound] = []
        for name, s in self.series.items():
            last = s.steps[-1] if s.steps else step
            discarded = s.discard_after(step)
            if discarded:
                cut.append((name, last, discarded))
        discarded = sum(n for _, _, n in cut)
        self.points_discarded += discarded
        self.points_replaced_by_rewinds += discarded
        self.rewinds += bool(cut)
        return cut

    def seed(
        self,
        name: str,
        steps: array[int],
        epochs: array[int],
        values: array[float],
        keep: int | None = None,
        d: int = 0,
        times: array[float] | None = None,
    ) -> None:
        """Load a stored series (resume) under whatever this process recorded for it.

        Args:
            name: the series.
            steps, epochs, values: the stored columns (destination ``d`` holds them all).
            keep: how many stored points stay (the rest were rewound or replaced
                by this process's points); ``None`` keeps them all.
            times: the stored points' wall-clock times, as long as ``steps``
                (``None``: the destination keeps none, every time unknown).

        Points this process already recorded for ``name`` follow the kept
        prefix; destination ``d`` is known to hold exactly the kept prefix
        (the other destinations are brought up to date by :meth:`adopt`).
        """
        held = len(steps)
        keep = held if keep is None else keep
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series(self.destinations)
        new_steps, new_epochs, new_values, new_times = s.steps, s.epochs, s.values, s.times
        # mutate in place: callers may hold the Series object
        s.steps = steps[:keep]
        s.epochs = epochs[:keep]
        s.values = values[:keep]
        if times is not None and len(times) == held:
            s.times = times[:keep]
        else:
            s.times = array("d", [UNKNOWN_TIME]) * len(s.steps)
        s.steps.extend(new_steps)
        s.epochs.extend(new_epochs)
        s.values.extend(new_values)
        s.times.extend(new_times)
        s.delivered[d] = keep
        s.server_length[d] = held
        if steps:
            self.max_step = max(self.max_step, steps[-1])

    def current_values(self) -> Iterator[tuple[str, float]]:
        """Every metric's current value: each series' newest point and every scalar."""
        for name, s in self.series.items():
            if s.values:
                yield name, s.values[-1]
        yield from self.scalars.items()

    def unsent_points(self, d: int = 0) -> int:
        """Points destination ``d`` is not known to hold."""
        return sum(len(s) - s.delivered[d] for s in self.series.values())

    def delivered_points(self, d: int = 0) -> int:
        """Points destination ``d`` is known to hold."""
        return sum(s.delivered[d] for s in self.series.values())

    def retained_points(self) -> int:
        """Points held in memory."""
        return sum(len(s) for s in self.series.values())

    def mark_built(self, d: int, names: Iterator[str] | list[str]) -> None:
        """An update to ``d`` carrying these series was built: their ``low`` mark starts afresh."""
        series = self.series
        for name in names:
            s = series[name]
            s.low[d] = len(s)

    def acknowledge(
        self, d: int, sent: Mapping[str, int], lengths: Mapping[str, int] | None
    ) -> None:
        """Record that ``d`` applied a send of series prefixes ``sent`` (name -> length sent).

        Args:
            d: the destination.
            sent: for each series in the update, the length the series had when
                the update was built (``offset + points``).
            lengths: what the destination says it now holds, when it says so.
        """
        for name, length in sent.items():
            s = self.series.get(name)
            if s is None:
                continue
            held = length if lengths is None else lengths.get(name, length)
            s.server_length[d] = held
            # A rewind while the request was on the wire: only the prefix kept since holds.
            s.delivered[d] = min(held, length, s.low[d], len(s))
        if lengths is None:
            return
        # The destination's answer covers every series it holds (docs/protocol.md): one
        # it says holds fewer points than we thought (e.g. restored from a backup) is
        # resent from there.
        for name, held in lengths.items():
            s = self.series.get(name)
            if s is not None and name not in sent and held != s.server_length[d]:
                s.server_length[d] = held
                s.delivered[d] = min(s.delivered[d], held, len(s))

    def resynchronise(self, d: int, lengths: Mapping[str, int]) -> None:
        """Destination ``d`` holds ``lengths`` points per series; resend from there."""
        for name, s in self.series.items():
            held = lengths.get(name, 0)
            s.server_length[d] = held
            s.delivered[d] = min(s.delivered[d], held, len(s))

    def adopt(
        self, d: int, stored: Mapping[str, tuple[array[int], array[int], array[float]]]
    ) -> int:
        """Bring destination ``d`` up to date from what it holds (another destination seeded us).

        For each series, ``d`` is known to hold the longest prefix its stored
        points share with ours (steps, epochs and values alike); everything
        after it is sent, from that index on.

        Returns:
            how many of ``d``'s stored points differ from ours past that prefix
            (they are replaced by this run's record).
        """
        replaced = 0
        for name, s in self.series.items():
            steps, epochs, values = stored.get(name, (array("q"), array("i"), array("d")))
            common = _common_prefix(s, steps, epochs, values)
            s.server_length[d] = len(steps)
            s.delivered[d] = common
            replaced += len(steps) - common
        return replaced


def _common_prefix(s: Series, steps: array[int], epochs: array[int], values: array[float]) -> int:
    n = min(len(s), len(steps))
    if s.steps[:n] == steps[:n] and s.epochs[:n] == epochs[:n] and s.values[:n] == values[:n]:
        return n
    for i in range(n):
        if s.steps[i] != steps[i] or s.epochs[i] != epochs[i] or s.values[i] != values[i]:
            return i
    return n
