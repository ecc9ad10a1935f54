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

Memory is bounded by what is not yet held everywhere (``docs/engine.md``,
"Memory"): once every destination holds a series' points (and the journal
was given them), :meth:`MetricStore.release` lets them leave memory. A
series keeps its columns from ``base`` (the absolute index of the first point
in memory) on, always at least its newest point, and, for the points that
left, only where each step was: runs of evenly spaced steps (first index,
first step, stride), one run for the usual one point a step. Its length,
the lengths above and every offset count from index 0 of the whole series, so
a rewind to a step that left memory still cuts at the right absolute index
and the next suffix starts there. A destination that takes only the full
state (or a ``MemorySink``) is marked :meth:`MetricStore.keep_every_point`,
and then nothing leaves, until a full-state destination is thinned
(:meth:`MetricStore.thin`): it then needs only each series'
:class:`~trainreport._record._thinning.Summary` of the points that left, and
its body is built from that and the points in memory (:meth:`Series.thinned`).

A series needs sending to ``d`` when either of the first two differs from its
length. The payload builder sends each series from ``delivered[d]`` on (0 in
full-state mode), which makes every send an idempotent suffix
(docs/design.md#wire-modes).

Not thread-safe on its own: the Recorder guards it with its lock.
"""

from __future__ import annotations

import functools
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from typing import TypeAlias

from trainreport._record._thinning import Columns, Summary, bucket_width, thin_series

__all__ = [
    "POINT_COLUMN_BYTES",
    "RELEASE_MIN_POINTS",
    "UNKNOWN_TIME",
    "MetricStore",
    "Rewound",
    "Series",
]

#: The time of a point whose wall-clock time is not known (seeded from a destination
#: that keeps none): NaN in the times column, ``null`` on the wire.
UNKNOWN_TIME = float("nan")

#: One series a rewind cut: (qualified name, its last step before, points removed).
Rewound: TypeAlias = "tuple[str, int, int]"

#: The bytes one point in memory costs the store: one item of each of a series' four
#: columns (step ``q``, epoch ``i``, value ``d``, time ``d``: 8 + 4 + 8 + 8 = 28). The
#: arrays' allocated capacity is a little more (CPython grows an array by about 1/16).
POINT_COLUMN_BYTES = sum(array(code).itemsize for code in "qidd")

#: Points leave memory in batches of at least this many a series (``MetricStore.release``).
RELEASE_MIN_POINTS = 256


class Series:
    """One metric's history, as columns. Steps are non-decreasing and unique.

    ``times`` holds each point's wall-clock time (seconds since the Unix epoch,
    :data:`UNKNOWN_TIME` where unknown), as long as the other columns. The
    columns hold the points from absolute index :attr:`base` on (the earlier
    ones left memory, :meth:`forget`); ``len()`` is the whole series' length.
    """

    __slots__ = (
        "base",
        "delivered",
        "epochs",
        "journaled",
        "low",
        "runs",
        "server_length",
        "steps",
        "summary",
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
        #: The absolute index of ``steps[0]``: the points before it left memory.
        self.base = 0
        #: Where the steps before :attr:`base` were: runs of evenly spaced steps.
        self.runs = _StepRuns()
        #: The points before :attr:`base` as the thinning rule keeps them, when a
        #: thinned full-state destination is sent this series (``None``: not kept).
        self.summary: Summary | None = None

    def __len__(self) -> int:
        return self.base + len(self.steps)

    @property
    def last_step(self) -> int | None:
        """The step of the newest point (in memory or not), or ``None`` for no known point."""
        if self.steps:
            return self.steps[-1]
        return self.runs.step_at(self.base - 1) if self.base else None

    def index_left(self, step: int) -> int:
        """The absolute index of the first point with a step at or after ``step``."""
        steps = self.steps
        if steps and step >= steps[0]:
            return self.base + bisect_left(steps, step)
        return self.runs.index_left(step, self.base)

    def append(self, step: int, epoch: int, value: float, time: float = UNKNOWN_TIME) -> int:
        """Add a point; a point at or before the last step replaces the tail from it on.

        Returns:
            the number of points discarded (0 for a plain append).
        """
        steps = self.steps
        discarded = 0
        last = steps[-1] if steps else self.last_step
        if last is not None and last >= step:
            cut = self.index_left(step)
            discarded = len(self) - cut
            self.truncate(cut)
        steps.append(step)
        self.epochs.append(epoch)
        self.values.append(value)
        self.times.append(time)
        return discarded

    def truncate(self, length: int) -> None:
        """Keep only the first ``length`` points (an absolute count)."""
        if length < len(self):
            cut = length - self.base
            if cut < 0:  # into the points that left memory: none of those in memory stays
                self.runs.truncate(length)
                if self.summary is not None:
                    self.summary.truncate(length)
                self.base = length
                cut = 0
            del self.steps[cut:]
            del self.epochs[cut:]
            del self.values[cut:]
            del self.times[cut:]
            for d, held in enumerate(self.delivered):
                self.delivered[d] = min(held, length)
                self.low[d] = min(self.low[d], length)
            self.journaled = min(self.journaled, length)

    def discard_after(self, step: int) -> int:
        """Discard every point with a step later than ``step``; returns how many."""
        cut = self.index_left(step + 1)
        discarded = len(self) - cut
        self.truncate(cut)
        return discarded

    def forget(self, upto: int, budget: int | None = None) -> int:
        """Let the points before absolute index ``upto`` leave memory (the newest stays).

        Their steps are kept as runs (:class:`_StepRuns`), so that a rewind
        still finds its index; with a ``budget`` (the most points a series is
        sent with to a thinned full-state destination) they are folded into
        :attr:`summary` too, bucketed for that budget. Returns how many points left.
        """
        count = min(upto, len(self) - 1) - self.base
        if count <= 0:
            return 0
        if self.summary is not None and budget is not None:
            self.summary.fold(
                self.base,
                (self.steps, self.epochs, self.values, self.times),
                count,
                bucket_width(len(self), budget),
            )
        self.runs.extend(self.base, self.steps[:count])
        del self.steps[:count]
        del self.epochs[:count]
        del self.values[:count]
        del self.times[:count]
        self.base += count
        return count

    def thinned(self, budget: int) -> Columns:
        """The whole series thinned to ``budget`` points (``_record/_thinning.py``).

        Built from :attr:`summary` (the points that left memory) and the
        points in memory; the same points the rule keeps of the whole series.

        Raises:
            ValueError: ``budget`` is below the rule's minimum.
        """
        columns = (self.steps, self.epochs, self.values, self.times)
        return thin_series(self.summary, self.base, columns, budget)

    def needs_send(self, d: int) -> bool:
        """True when destination ``d`` does not hold exactly this series."""
        n = len(self)
        return self.delivered[d] != n or self.server_length[d] != n

    def nbytes(self) -> int:
        """Bytes held by the columns (allocated capacity is slightly more)."""
        columns = (self.steps, self.epochs, self.values, self.times)
        return sum(a.itemsize * len(a) for a in columns)


#: The longest progression :func:`_progression` keeps for the next series (512 KiB).
_SHARED_PROGRESSION_STEPS = 1 << 16


def _progression(first: int, stride: int, count: int) -> array[int]:
    """``first, first + stride, ...`` (``count`` steps) as an array; never mutated, so shared.

    A release lets the same batch of steps leave every series at once (a report's
    metrics share their steps), so one array serves the whole batch: building it
    costs about 40 ns a point, comparing with it under 1 ns. Longer ones are
    built each time, so what is kept stays bounded (4 of at most 512 KiB).
    """
    if count > _SHARED_PROGRESSION_STEPS:
        return array("q", range(first, first + stride * count, stride))
    return _shared_progression(first, stride, count)


@functools.lru_cache(maxsize=4)
def _shared_progression(first: int, stride: int, count: int) -> array[int]:
    return array("q", range(first, first + stride * count, stride))


class _StepRuns:
    """Where the steps of points that left memory were: runs of evenly spaced steps.

    Run ``i`` starts at absolute index ``index[i]`` with step ``step[i]`` and
    goes up by ``stride[i]`` a point, up to the next run (or the series'
    base). A series reported every step (or every ``k`` steps) needs one run;
    irregular steps need more (at worst one a point, 24 bytes, as before).
    """

    __slots__ = ("index", "step", "stride")

    def __init__(self) -> None:
        self.index: array[int] = array("q")
        self.step: array[int] = array("q")
        self.stride: array[int] = array("q")

    def __len__(self) -> int:
        return len(self.index)

    def step_at(self, i: int) -> int | None:
        """The step of the point at absolute index ``i`` (``None``: not known)."""
        r = bisect_right(self.index, i) - 1
        if r < 0:
            return None
        return self.step[r] + (i - self.index[r]) * self.stride[r]

    def index_left(self, step: int, base: int) -> int:
        """The first absolute index below ``base`` with a step at or after ``step``, or ``base``."""
        if not self.index:
            return base
        r = bisect_right(self.step, step) - 1
        if r < 0:
            return self.index[0]
        end = self.index[r + 1] if r + 1 < len(self.index) else base
        k = -((self.step[r] - step) // self.stride[r])  # ceil((step - first) / stride)
        return min(self.index[r] + k, end)

    def extend(self, start: int, steps: array[int]) -> None:
        """Record ``steps``, the points from absolute index ``start`` on, leaving memory."""
        n = len(steps)
        i = 0
        while i < n:
            first = steps[i]
            if self.index:  # continue the last run when the step fits it
                r = len(self.index) - 1
                count = start + i - self.index[r]
                stride = self.stride[r]
                if count == 1:  # a one-point run takes any stride
                    stride = first - self.step[r]
                if stride > 0 and first == self.step[r] + count * stride:
                    self.stride[r] = stride
                    i += self._run_length(steps, i, first, stride)
                    continue
            self.index.append(start + i)
            self.step.append(first)
            stride = steps[i + 1] - first if i + 1 < n else 1
            self.stride.append(stride if stride > 0 else 1)
            i += self._run_length(steps, i, first, self.stride[-1])

    @staticmethod
    def _run_length(steps: array[int], i: int, first: int, stride: int) -> int:
        """How many points from ``i`` on go ``first``, ``first + stride``, ... (at least 1)."""
        n = len(steps)
        rest = steps if i == 0 else steps[i:]
        if rest == _progression(first, stride, n - i):
            return n - i  # the usual case: one comparison in C
        j = i + 1  # irregular steps: point by point, to where the run ends
        while j < n and steps[j] == steps[j - 1] + stride:
            j += 1
        return j - i

    def truncate(self, length: int) -> None:
        """Forget the runs' points from absolute index ``length`` on."""
        keep = bisect_left(self.index, length)
        del self.index[keep:]
        del self.step[keep:]
        del self.stride[keep:]


class MetricStore:
    """Series and scalars of one run, keyed by qualified metric name.

    Args:
        max_names: cap on distinct qualified names per run
            (docs/design.md#metrics); further
            names are refused by :meth:`admit`.
        destinations: how many destinations' holdings each series tracks.
        release_min_points: the least batch of points a series lets leave
            memory at once (:meth:`release`); the default
            :data:`RELEASE_MIN_POINTS`. Tests lower it (the attribute of the
            same name) so that points leave memory within a short run.
    """

    def __init__(
        self,
        max_names: int = 1000,
        destinations: int = 1,
        release_min_points: int = RELEASE_MIN_POINTS,
    ) -> None:
        self.max_names = max_names
        self.destinations = destinations
        #: Points leave memory in batches of at least this many a series (:meth:`release`).
        self.release_min_points = release_min_points
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
        #: Per destination: it needs every point kept (full state, MemorySink).
        self.keeps_every_point = [False] * destinations
        #: Per destination: the full-state budget it is thinned to (``None``: every point);
        #: a thinned destination needs only each series' summary of what left memory.
        self.thinned_to: list[int | None] = [None] * destinations
        #: A journal is fed (:meth:`journaled_up_to`): points it was not given stay.
        self.journal_fed = False
        #: Points that left memory (:meth:`release`), over the run.
        self.points_released = 0

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
        last = steps[-1] if steps else s.last_step
        if last is not None and last > step:  # a rewind: noted for end_report()
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
        series is one rewind (and one log event, ``_record/_rewinds.py``).
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
            last = s.last_step
            discarded = s.discard_after(step)
            if discarded and last is not None:
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
        s.base = 0
        s.runs = _StepRuns()
        s.summary = None
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
        """Points held in memory (the rest left it: :meth:`release`)."""
        return sum(len(s.steps) for s in self.series.values())

    def summarised_points(self) -> int:
        """Entries the series' summaries hold (bounded by the thinned budgets)."""
        return sum(len(s.summary) for s in self.series.values() if s.summary is not None)

    def keep_every_point(self, d: int) -> None:
        """Destination ``d`` needs every point kept in memory (full state, ``MemorySink``)."""
        self.keeps_every_point[d] = True

    def thin(self, d: int, budget: int) -> None:
        """Full-state destination ``d`` is sent every series thinned to ``budget`` points.

        From then on it needs, of the points that left memory, only each
        series' :class:`Summary` (``docs/engine.md``, "Memory").
        """
        self.thinned_to[d] = budget

    def release(self) -> int:
        """Let the points every destination holds (and the journal was given) leave memory.

        A series keeps at least its newest point; nothing leaves while a
        destination :meth:`keep_every_point` and is not thinned (:meth:`thin`).
        With thinned full-state destinations the points that leave are folded
        into each series' summary, bucketed for the largest of their budgets.
        Points leave in batches of at
        least :attr:`release_min_points` (:data:`RELEASE_MIN_POINTS`) a
        series, so the columns' prefix is not moved at every acknowledgement.
        Returns how many left.
        """
        budget: int | None = None
        for keeps, thinned in zip(self.keeps_every_point, self.thinned_to, strict=True):
            if keeps:
                if thinned is None:
                    return 0
                budget = thinned if budget is None else max(budget, thinned)
        released = 0
        journal = self.journal_fed
        batch = self.release_min_points
        for s in self.series.values():
            upto = min(s.delivered)
            if journal and s.journaled < upto:
                upto = s.journaled
            if upto - s.base >= batch:
                if budget is not None and s.summary is None:
                    if s.base:  # left memory before it was summarised: cannot be
                        continue
                    s.summary = Summary()
                released += s.forget(upto, budget)
        self.points_released += released
        return released

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
        if lengths is not None:
            self._confirm(d, sent, lengths)
        self.release()

    def _confirm(self, d: int, sent: Mapping[str, int], lengths: Mapping[str, int]) -> None:
        """Apply ``lengths`` for the series ``d`` holds that the update did not carry."""
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
    """The longest prefix ``s`` shares with the stored columns.

    Points that left memory were held by every destination, so they are
    taken as shared; the comparison starts at the series' base.
    """
    n = min(len(s), len(steps))
    b = s.base
    if n <= b:
        return n
    m = n - b
    if s.steps[:m] == steps[b:n] and s.epochs[:m] == epochs[b:n] and s.values[:m] == values[b:n]:
        return n
    for i in range(m):
        j = b + i
        if s.steps[i] != steps[j] or s.epochs[i] != epochs[j] or s.values[i] != values[j]:
            return j
    return n
