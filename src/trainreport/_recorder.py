"""Recorder: applies queued reports to the store and the task machine, builds updates.

This is the sans-I/O core the reporter thread drives (docs/design.md#shape): it gets
report tuples that the training thread queued (``_reports.py`` declares them),
hands back :class:`~trainreport.sinks.Update` values for each destination and
applies what each destination acknowledged. It reads no clock (times arrive
in the reports and as ``wall`` arguments) and does no I/O.

The recorder owns its lock: every public method takes it, so the reporter
thread (applying, building, acknowledging) and other threads (``snapshot``,
``counts``) never share a mutable attribute. It keeps one record for the run,
and, per destination ``d`` (its position in ``Reporter(sinks=[...])``), what
``d`` is known to hold: the series lengths (in the store), which sticky fields
and which state of the core fields ``d`` holds, and whether ``d`` refused the
full-state curves for size.
"""

from __future__ import annotations

import math
import numbers
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from trainreport._config import ReportingConfig
from trainreport._lifecycle import (
    Outcome,
    TaskEvent,
    TaskMachine,
    TaskStatus,
    forget_running_only_details,
)
from trainreport._logging import OnceLogger, describe_exception, get_logger
from trainreport._naming import DatasetOrder, check_name, qualify
from trainreport._params import MAX_PARAM_ITEMS
from trainreport._payloads import StoredState, encode_details
from trainreport._reports import REPORT_NAME, Kind, Report, dispatch, kind_of, queued_bytes
from trainreport._selection import SeriesSelector
from trainreport._sink import SeriesUpdate, Update
from trainreport._store import MetricStore, Series
from trainreport._values import EpochRule, NotChartable, to_chartable, to_step
from trainreport.exceptions import TransitionError

__all__ = ["RESERVED_KEYS", "Build", "JournalView", "Recorder", "RecorderCounts"]

#: ``status_details`` keys that belong to the reporter; a metric whose
#: qualified name equals one of them is dropped (it would overwrite them).
RESERVED_KEYS = frozenset(
    {
        "phase",
        "step",
        "epoch",
        "max_steps",
        "num_epochs",
        "percentage_done",
        "eta_seconds",
        "updated_at",
        "checkpoint_path",
        "checkpoint_step",
        "metrics",
        "val_datasets",
        "hyperparameters",
        "error",
        "cancel_reason",
    }
)

_EVENT_OF_KIND = {
    Kind.COMPLETED: TaskEvent.COMPLETE,
    Kind.CANCELLED: TaskEvent.CANCEL,
    Kind.FAILED: TaskEvent.FAIL,
}
_MAX_TEXT = 4096
_log = get_logger()


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


_MAX_EPOCH = 2**31 - 1  # epochs are stored as int32 (array('i'))
_MAX_INT_BITS = 256  # larger ints in details become text (JSON readers choke on them)


def _json_safe(value: Any, depth: int = 0) -> Any:
    """A copy of a details value that any strict JSON encoder accepts.

    Lone surrogates (``os.fsdecode`` of undecodable bytes) become U+FFFD, huge
    ints and non-finite floats become text, nesting is cut at 32 levels.
    """
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        bits = value.bit_length()
        return value if bits <= _MAX_INT_BITS else f"<int of {bits} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth >= 32:
        return "<nested too deep>"
    if isinstance(value, dict):
        return {_json_safe(str(k)): _json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value]
    return _json_safe(str(value))


def _points_json(
    steps: Iterable[int], epochs: Iterable[int], values: Iterable[float]
) -> list[dict[str, Any]]:
    """Points in the ``GET`` shape (a non-finite value is ``None``)."""
    return [
        {"step": st, "epoch": ep, "value": _finite(v)}
        for st, ep, v in zip(steps, epochs, values, strict=True)
    ]


#: Unreadable stored series logged one by one before a single summary line.
_MAX_LOGGED_SERIES = 20


def _positive_int(value: object) -> int | NotChartable | None:
    if value is None:
        return None
    step = to_step(value)
    if isinstance(step, NotChartable) or step <= 0:
        return NotChartable("not a positive integer")
    return step


@attrs.define
class _Held:
    """What one destination is known to hold, beside its series lengths (in the store)."""

    #: The recorder's change count the last delivered update was built at (-1: none).
    changes: int = -1
    #: Sticky key -> the version of its value the destination holds.
    sticky: dict[str, int] = attrs.field(factory=dict)
    #: The destination refused full-state ``metrics`` for size (it goes on without them).
    too_large: bool = False
    #: Full-state mode: series the destination holds that this run does not (as
    #: stored), sent back inside ``metrics`` so that a wholesale replace keeps them.
    foreign: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Build:
    """An update built for one destination, and what to acknowledge once it is delivered.

    Args:
        update: what is sent.
        sent: each series in the update -> the length it had when built.
        sticky: each sticky key in the update -> the version of its value.
        changes: the recorder's change count when built.
        details: the ``status_details`` it carries (for ``snapshot()``).
    """

    update: Update
    sent: Mapping[str, int]
    sticky: Mapping[str, int]
    changes: int
    details: Mapping[str, Any]


@attrs.frozen
class RecorderCounts:
    """Counters for ``Reporter.stats()``, read under the recorder's lock.

    Args:
        points_recorded: series points applied to the store.
        delivered: per destination, the points it is known to hold.
        unsent: per destination, the points it is not known to hold.
        drops: dropped items by reason.
        rewinds: rewinds and tail replacements.
    """

    points_recorded: int
    delivered: tuple[int, ...]
    unsent: tuple[int, ...]
    drops: Mapping[str, int]
    rewinds: int


@attrs.frozen
class JournalView:
    """What the journal needs from the record, read under the recorder's lock.

    Attributes:
        version: changes whenever points were discarded or the store was seeded:
            the journal's lengths no longer describe the store, and it is rewritten.
        status: the task's status.
        details: every ``status_details`` key an update built now would carry.
        series: ``(name, offset, steps, epochs, values)`` per series with points past
            ``lengths`` (a suffix at that offset), or, for a rewrite, every series
            from what every destination holds (``acknowledged``) on.
        lengths: each series' length (what the journal holds once it appends ``series``).
        acknowledged: per series, the least length every destination is known to hold.
    """

    version: tuple[int, int, bool]
    status: str
    details: dict[str, Any]
    series: tuple[SeriesUpdate, ...]
    lengths: dict[str, int]
    acknowledged: dict[str, int]


class Recorder:
    """The state of one reporting attempt: metrics, status, phase and details.

    Args:
        config: the reporter's configuration.
        destinations: how many destinations the reporter sends to.
        series_default: the ``time_series_metrics`` used when the config's is
            ``None`` (an adapter's own default list; every metric otherwise).

    Thread-safety: every public method takes the recorder's own lock.
    """

    def __init__(
        self,
        config: ReportingConfig,
        *,
        destinations: int = 1,
        series_default: tuple[str, ...] = ("*",),
    ) -> None:
        self._lock = threading.Lock()
        self._config = config
        self._store = MetricStore(config.max_metric_names, destinations)
        self._held = [_Held() for _ in range(destinations)]
        self._changes = 0
        self._sticky_version: dict[str, int] = {}
        self._versions = 0
        self._selector = SeriesSelector(config.time_series_metrics, default=series_default)
        self._machine = TaskMachine(strict=config.strict_transitions)
        self._datasets = DatasetOrder()
        self._epoch_rule = EpochRule()
        self._once = OnceLogger()
        self._drops: Counter[str] = Counter()
        self._strict_violations: list[str] = []
        self._at_step: int | None = None
        self._at_epoch: int | None = None
        self._max_steps: int | None = None
        self._num_epochs: int | None = None
        self._cancel_reason: str | None = None
        # Details sent until delivered once (shallow merge keeps them afterwards).
        self._sticky: dict[str, Any] = {}
        self._stored_details: dict[str, Any] = {}
        # Stored series the client cannot parse, exactly as stored: never overwritten
        # (sent back unchanged in full-state mode) unless this run records the name.
        self._preserved: dict[str, Any] = {}
        # Names admitted as series only because the stored task was not read yet:
        # seeding makes them scalars again unless the stored task has them as series.
        self._provisional: set[str] = set()
        self._seeded = False
        self._last_updated_at: str | None = None
        self._first_step: tuple[float, int] | None = None
        self._first_train_step: int | None = None  # the first this process recorded
        self._stored_last_train: int | None = None  # the stored task's, once seeded
        # (steps, epochs) of every stored training series: the int-epoch base of a
        # resumed process is read from them (see _decide_epoch_base).
        self._stored_epochs: list[tuple[array[int], array[int]]] = []
        self._last_step_time: float | None = None
        self._names: dict[
            tuple[str, str | None], dict[object, tuple[str, Series | None] | None]
        ] = {}
        # The name cap applies before anything per name is kept: refused names are
        # cached only up to this many in all, and name tables (one per phase and
        # dataset) only up to this many, so a loop that logs metric_{step}, or a
        # new phase or dataset per step, cannot grow memory past the cap.
        self._max_cached_names = 4 * config.max_metric_names
        self._refused_cached = 0
        # What the destination was last sent per details key: a shallow merge keeps
        # a key it was once sent, so snapshot() does too.
        self._delivered_details: dict[str, Any] = {}
        # Every details key an update was built with (sticky fields aside), last value.
        self._carried: dict[str, Any] = {}

    # --- seeding (resume) ----------------------------------------------------------

    def start_attempt(self) -> None:
        """Begin a new attempt: status ``running``, phase ``setup`` (docs/design.md#lifecycle)."""
        with self._lock:
            self._machine.apply(TaskEvent.ATTEMPT_START)
            self._changes += 1

    @property
    def seeded(self) -> bool:
        """Whether the store was seeded from a stored task (or found none)."""
        return self._seeded

    def seed(self, state: StoredState, d: int = 0) -> None:
        """Seed curves and ``val_datasets`` from destination ``d``'s stored task.

        Resume as docs/design.md#metrics describes it. Never the stored status:
        a new process starts a new attempt. Series continue; other stored fields
        are left as they are on the destination.
        """
        with self._lock:
            self._seed(state, d)

    def _seed(self, state: StoredState, d: int) -> None:
        store = self._store
        self._stored_epochs = [
            (steps, epochs)
            for name, (steps, epochs, _) in state.series.items()
            if name.startswith("train_") and steps
        ]
        stored_last_train = max((steps[-1] for steps, _ in self._stored_epochs), default=None)
        # Reports applied before the stored task could be read (a long outage at
        # start) come after the stored curves, as if replayed: a first training step
        # below the stored last one rewinds them (docs/design.md#metrics), and each series' own
        # points replace the stored tail from their first step on.
        first = self._first_train_step
        cut = (
            first
            if first is not None and stored_last_train is not None and first <= stored_last_train
            else None
        )
        if cut is not None:
            store.rewinds += 1
        self._stored_last_train = stored_last_train
        for name, (steps, epochs, values) in state.series.items():
            if name in store.scalar_names:  # a name stored as a series stays a series
                store.make_series(name)
            keep = len(steps) if cut is None else bisect_right(steps, cut)
            current = store.series.get(name)
            if current is not None and current.steps:
                keep = min(keep, bisect_left(steps, current.steps[0]))
            elif current is None and not store.admit(name, as_series=True):
                # Past the name cap: kept on the destination as it is, never deleted.
                self._preserved[name] = _points_json(steps, epochs, values)
                continue
            store.seed(name, steps, epochs, values, keep, d)
        for name in self._provisional - set(state.series):
            store.demote(name)  # a scalar after all: only its latest value is kept
        self._provisional.clear()
        self._names.clear()  # cached entries may hold series that were just replaced
        self._keep_unreadable(state)
        if state.val_datasets:
            if self._datasets.datasets:  # names already given this process keep their curves
                _log.info(
                    "trainreport.resume_datasets_kept",
                    stored=list(state.val_datasets),
                    current=list(self._datasets.datasets),
                )
            else:
                self._datasets = DatasetOrder(state.val_datasets)
        self._stored_details = dict(state.details)
        self._seeded = True

    def _keep_unreadable(self, state: StoredState) -> None:
        """Keep stored series the client cannot parse; log each (bounded)."""
        for count, (name, raw) in enumerate(state.damaged.items()):
            if count < _MAX_LOGGED_SERIES:
                _log.warning(
                    "trainreport.stored_series_unreadable",
                    series=name[:200],
                    reason=state.damage_reasons.get(name, ""),
                    kept=name not in self._store,
                )
            elif count == _MAX_LOGGED_SERIES:
                _log.warning(
                    "trainreport.stored_series_unreadable_more",
                    more=len(state.damaged) - _MAX_LOGGED_SERIES,
                )
            if name in self._store:  # recorded by this run before the read: its curve wins
                _log.warning("trainreport.stored_series_replaced", series=name[:200])
            else:
                self._preserved[name] = raw

    # --- applying reports ----------------------------------------------------------

    def apply_all(self, queue: deque[Report]) -> tuple[bool, int, bool]:
        """Take every report queued now off ``queue`` and apply them, in order, under the lock.

        Returns:
            (an event report was among them, their estimated bytes for the
            memory guard, the run has a point or a scalar now). Never raises.
        """
        urgent = False
        released = 0
        apply = self._apply
        popleft = queue.popleft
        with self._lock:
            for _ in range(len(queue)):
                item = popleft()
                urgent |= apply(item)
                released += queued_bytes(item)
            store = self._store
            return urgent, released, bool(store.points_recorded or store.scalars)

    def apply(self, item: Report) -> bool:
        """Apply one report (see :meth:`apply_all`). True for an event report."""
        with self._lock:
            return self._apply(item)

    def _apply(self, item: Report) -> bool:
        try:
            return dispatch(item, self)
        except TransitionError as exc:  # strict mode (tests): surfaced by Reporter.close()
            self._strict_violations.append(str(exc))
            return False
        except Exception as exc:  # a bug or a hostile object must never stop the reporter
            kind: Any = kind_of(item)
            self._drops["invalid_report"] += 1
            self._once.warning(
                ("apply", kind),
                "trainreport.report_dropped",
                report=REPORT_NAME.get(kind, str(kind)),
                reason=describe_exception(exc),
            )
            return False

    # The ReportHandler methods (``_reports.dispatch``), called under the lock.

    def training_start(self, raw_max_steps: object, raw_num_epochs: object) -> bool:
        """Apply ``report_training_start``. Returns True (an event)."""
        max_steps, num_epochs = _positive_int(raw_max_steps), _positive_int(raw_num_epochs)
        for field, value in (("max_steps", max_steps), ("num_epochs", num_epochs)):
            if isinstance(value, NotChartable):
                self._drop_once("invalid_argument", field, "report_training_start", value.reason)
        if not self._event(TaskEvent.TRAINING_START):
            return False
        if isinstance(max_steps, int):
            self._max_steps = max_steps
            self._set_sticky("max_steps", max_steps)
        if isinstance(num_epochs, int):
            self._num_epochs = num_epochs
            self._set_sticky("num_epochs", num_epochs)
        return True

    def epoch_end(self, raw_epoch: object) -> bool:
        """Apply ``report_epoch_end``. Returns True (an event) unless refused."""
        if not self._event(TaskEvent.EPOCH_END):
            return False
        epoch = self._resolve_epoch(raw_epoch, self._at_step or 0, "report_epoch_end")
        if epoch is not None:
            self._at_epoch = epoch
        return True

    def checkpoint(self, path: object, raw_step: object) -> bool:
        """Apply ``report_checkpoint_saved``. Returns True (an event) unless refused."""
        if not self._event(TaskEvent.CHECKPOINT):
            return False
        if not isinstance(path, str) or not path.strip():
            # A missing path is never sent: the last good one stays on the destination.
            self._drop_once(
                "invalid_argument", "path", "report_checkpoint_saved", "missing checkpoint path"
            )
            return True
        self._set_sticky("checkpoint_path", path[:_MAX_TEXT])
        step = to_step(raw_step) if raw_step is not None else None
        if isinstance(step, int):
            self._set_sticky("checkpoint_step", step)
        return True

    def terminal(self, kind: Kind, reason: object, message: object) -> bool:
        """Apply ``report_completed`` / ``report_cancelled`` / ``report_error``."""
        if not self._event(_EVENT_OF_KIND[kind]):
            return False
        if kind is Kind.CANCELLED:
            self._set_sticky("cancel_reason", str(reason)[:_MAX_TEXT])
        elif kind is Kind.FAILED:
            self._set_sticky(
                "error", {"type": str(reason)[:200], "message": str(message)[:_MAX_TEXT]}
            )
        return True

    def _event(self, event: TaskEvent) -> bool:
        if self._machine.apply(event) is Outcome.REFUSED:
            self._drops["refused_transition"] += 1
            return False
        self._changes += 1
        return True

    def hyperparameters(self, flat: dict[str, Any], left_out: int) -> None:
        """Apply ``report_hyperparameters`` (merged into the record, bounded)."""
        merged = {**self._sticky.get("hyperparameters", {}), **flat}
        if len(merged) > MAX_PARAM_ITEMS:  # many calls: the merged record is bounded too
            left_out += len(merged) - MAX_PARAM_ITEMS
            merged = dict(list(merged.items())[:MAX_PARAM_ITEMS])
        if left_out:
            self._drop_once(
                "hyperparameters_truncated",
                "params",
                "report_hyperparameters",
                f"more than {MAX_PARAM_ITEMS} items; {left_out} keys left out",
            )
            self._drops["hyperparameters_truncated"] += left_out - 1
        self._set_sticky("hyperparameters", merged)

    def drop_field(self, d: int, update: Update, metrics_bytes: int, floor: int) -> bool:
        """Destination ``d`` refused ``update``'s size: drop its largest once-sent field, if any.

        The largest once-sent field (``hyperparameters``, ...) in ``update``,
        when it is at least ``floor`` bytes and at least ``metrics_bytes``
        (the curves it carries), is dropped: it goes back to its last
        delivered value (or to nothing), so a later report merges into what
        the destinations hold; ``d`` is known to hold that value, the others
        are sent it. Counted as ``field_too_large`` and logged once per field.

        Returns:
            True when a field was dropped (the rest is to be resent at once).
        """
        with self._lock:
            best: tuple[str, int] | None = None
            for key, version in self._dirty_sticky(d).items():
                if key in update.status_details and version == self._sticky_version.get(key):
                    size = len(encode_details({key: update.status_details[key]}).encode())
                    if best is None or size > best[1]:
                        best = (key, size)
            if best is None or best[1] < max(metrics_bytes, floor):
                return False
            key, size = best
            self._drops["field_too_large"] += 1
            self._once.warning(
                ("field_too_large", key),
                "trainreport.field_too_large",
                field=key,
                encoded_bytes=size,
            )
            if key in self._delivered_details:
                self._set_sticky(key, self._delivered_details[key])
            else:
                self._sticky.pop(key, None)
                self._sticky_version.pop(key, None)
            if key in self._sticky_version:
                self._held[d].sticky[key] = self._sticky_version[key]
            else:
                self._held[d].sticky.pop(key, None)
            return True

    def refuse_metrics(self, d: int) -> None:
        """Destination ``d`` cannot take the full-state ``metrics`` (413): go on without them."""
        with self._lock:
            self._held[d].too_large = True
            self._drops["metrics_too_large"] += 1

    def _set_sticky(self, key: str, value: Any) -> None:
        self._sticky[key] = _json_safe(value)
        self._versions += 1
        self._sticky_version[key] = self._versions

    def _dirty_sticky(self, d: int) -> dict[str, int]:
        """Sticky keys ``d`` does not hold in their current version -> that version."""
        held = self._held[d].sticky
        return {k: v for k, v in self._sticky_version.items() if held.get(k) != v}

    def _drop_once(self, reason: str, key: object, report: str, detail: str) -> None:
        self._drops[reason] += 1
        self._once.warning(
            (reason, report, key),
            "trainreport.report_dropped",
            report=report,
            field=str(key)[:100],
            reason=detail,
        )

    def _decide_epoch_base(self, raw: object, step: int) -> None:
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
                for steps, epochs in self._stored_epochs
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
        self._epoch_rule = EpochRule(zero_based=zero_based)
        _log.info(
            "trainreport.epoch_rule",
            zero_based=zero_based,
            first_epoch=index,
            stored_epoch=stored_epoch,
            stored_step=stored_step,
        )

    def _resolve_epoch(self, raw: object, step: int, report: str) -> int | None:
        if self._epoch_rule.zero_based is None:
            self._decide_epoch_base(raw, step)
        epoch = self._epoch_rule.resolve(raw, step=step, num_epochs=self._num_epochs)
        if isinstance(epoch, NotChartable):
            self._drop_once("invalid_epoch", "epoch", report, epoch.reason)
            return None
        if epoch is not None and epoch > _MAX_EPOCH:
            self._drop_once("invalid_epoch", "epoch", report, "too large")
            return None
        return epoch

    def _step(self, raw: object, report: str) -> int | None:
        step = to_step(raw)
        if isinstance(step, NotChartable):
            self._drop_once("invalid_step", "step", report, step.reason)
            return None
        return step

    def train_step(self, t: float, raw_step: object, raw_epoch: object, metrics: object) -> None:
        """Apply ``report_train_step``."""
        step = self._step(raw_step, "report_train_step")
        if step is None:
            return
        if self._machine.apply(TaskEvent.TRAIN_STEP) is Outcome.REFUSED:
            self._drops["refused_transition"] += 1
            return
        epoch = self._resolve_epoch(raw_epoch, step, "report_train_step")
        if epoch is not None:
            self._at_epoch = epoch
        if self._first_train_step is None:
            # The run-wide purge: once per process, at its first training step,
            # when it resumes at or below the stored last training step (a run
            # resumed from an earlier checkpoint). Before the stored task is read,
            # seed() applies the same cut.
            self._first_train_step = step
            stored = self._stored_last_train
            if self._seeded and stored is not None and step <= stored:
                self._store.purge_after(step)
                self._first_step = None
        if self._first_step is None or step <= self._first_step[1]:
            self._first_step = (t, step)
        self._at_step = step
        self._last_step_time = t
        self._changes += 1
        self._record(metrics, "train", None, step, self._at_epoch or 1, "report_train_step")

    def validation(
        self, raw_step: object, raw_epoch: object, metrics: object, dataset: object
    ) -> None:
        """Apply ``report_validation``."""
        step = self._step(raw_step, "report_validation")
        if step is None:
            return
        if self._machine.apply(TaskEvent.VALIDATION) is Outcome.REFUSED:
            self._drops["refused_transition"] += 1
            return
        self._changes += 1
        epoch = self._resolve_epoch(raw_epoch, step, "report_validation")
        if dataset is not None and not isinstance(dataset, str):
            self._drop_once("invalid_argument", "dataset", "report_validation", "not a string")
            dataset = str(dataset)
        if isinstance(dataset, str) and check_name(dataset) is not None:
            self._drop_once(
                "invalid_argument", "dataset", "report_validation", "unusable dataset name"
            )
            cleaned = "".join(c if c.isprintable() else "_" for c in _json_safe(dataset))[:50]
            dataset = cleaned if cleaned and check_name(cleaned) is None else None
        if not self._datasets.knows(dataset) and self._store.full:
            # A new dataset could not have a curve past the name cap: remember nothing.
            self._refuse_for_name_cap(metrics, f"val_{dataset}_*")
            return
        before = len(self._datasets.datasets)
        qualifier = self._datasets.qualifier(dataset)
        if len(self._datasets.datasets) != before:
            self._set_sticky("val_datasets", list(self._datasets.datasets))
        self._record(
            metrics,
            "validation",
            qualifier,
            step,
            epoch or self._at_epoch or 1,
            "report_validation",
        )

    def other_metrics(self, raw_step: object, metrics: object, phase: object) -> None:
        """Apply ``report_metrics``."""
        if not isinstance(phase, str) or check_name(phase) is not None or not phase.isidentifier():
            self._drop_once(
                "invalid_argument", "phase", "report_metrics", "phase is not an identifier"
            )
            return
        step = self._step(raw_step, "report_metrics")
        if step is None:
            return
        if self._machine.apply(TaskEvent.OTHER_METRICS) is Outcome.REFUSED:
            self._drops["refused_transition"] += 1
            return
        self._changes += 1  # current values change
        naming_phase = "validation" if phase in ("val", "eval", "validation") else phase
        self._record(metrics, naming_phase, None, step, self._at_epoch or 1, "report_metrics")

    def _record(
        self, metrics: object, phase: str, qualifier: str | None, step: int, epoch: int, report: str
    ) -> None:
        if not isinstance(metrics, dict):
            if metrics is not None:
                self._drop_once("invalid_argument", "metrics", report, "metrics is not a mapping")
            return
        names = self._names.get((phase, qualifier))
        if names is None:
            names = {}
            if len(self._names) < self._max_cached_names:
                self._names[(phase, qualifier)] = names
        store = self._store
        # A step beyond every point recorded so far is a plain append in every series.
        fresh = step > store.max_step
        appended = 0
        # Per point this is the reporter thread's hottest loop (docs/design.md#performance: < 1 µs a
        # point): the name cache holds the series itself, and a fresh step appends
        # without looking at the series' tail; anything else takes store.record().
        for raw_name, raw_value in metrics.items():
            try:
                entry = names[raw_name]
            except KeyError:
                entry = self._resolve_name(raw_name, phase, qualifier, report, names)
                if entry is not None:
                    names[raw_name] = entry
                elif self._refused_cached < self._max_cached_names:
                    names[raw_name] = entry
                    self._refused_cached += 1
            if entry is None:
                continue
            name, series = entry
            value = raw_value if type(raw_value) is float else to_chartable(raw_value)
            if type(value) is not float:
                assert isinstance(value, NotChartable)
                self._drop_once("not_chartable", name, report, value.reason)
                continue
            if series is None:  # a scalar, or a name two keys share ("loss", "eval_loss")
                store.record(name, step, epoch, value)
            elif fresh:
                series.steps.append(step)
                series.epochs.append(epoch)
                series.values.append(value)
                appended += 1
            else:
                store.record(name, step, epoch, value)
        store.points_recorded += appended
        if fresh:
            store.max_step = step

    def _resolve_name(
        self,
        raw_name: object,
        phase: str,
        qualifier: str | None,
        report: str,
        names: dict[object, tuple[str, Series | None] | None],
    ) -> tuple[str, Series | None] | None:
        name = self._admit_guarded(raw_name, phase, qualifier, report)
        if name is None:
            return None
        if any(entry is not None and entry[0] == name for entry in names.values()):
            # Two keys of one report can share a series (``loss`` and ``eval_loss`` both
            # become ``val_loss``): the shared one takes store.record(), which replaces
            # a point at the same step instead of appending it twice.
            for key, entry in list(names.items()):
                if entry is not None and entry[0] == name:
                    names[key] = (name, None)
            return (name, None)
        return (name, self._store.series.get(name))

    def _admit_guarded(
        self, raw_name: object, phase: str, qualifier: str | None, report: str
    ) -> str | None:
        try:
            return self._admit(raw_name, phase, qualifier, report)
        except Exception as exc:  # a hostile key (its repr or hash raises) drops only itself
            self._drops["invalid_name"] += 1
            self._once.warning(
                ("admit", report),
                "trainreport.report_dropped",
                report=report,
                reason=describe_exception(exc),
            )
            return None

    def _admit(
        self, raw_name: object, phase: str, qualifier: str | None, report: str
    ) -> str | None:
        reason = check_name(raw_name)
        if reason is not None:
            self._drop_once("invalid_name", repr(raw_name)[:100], report, reason)
            return None
        assert isinstance(raw_name, str)
        name = qualify(raw_name, phase, qualifier)
        if name in RESERVED_KEYS or check_name(name) is not None:
            self._drop_once("invalid_name", name, report, "reserved or unusable qualified name")
            return None
        if name in self._store:
            return name
        as_series = self._selector.is_series(name)
        # Before the stored task is read every name keeps its points: a name stored
        # as a series must stay one, whatever arrives first.
        provisional = not as_series and not self._seeded
        replaces = name in self._preserved  # a stored series this client cannot parse
        if not self._store.admit(name, as_series=as_series or provisional or replaces):
            self._refuse_for_name_cap(None, name)
            return None
        if provisional and not replaces:
            self._provisional.add(name)
        if replaces:
            del self._preserved[name]
            _log.warning("trainreport.stored_series_replaced", series=name[:200])
        return name

    def _refuse_for_name_cap(self, metrics: object, name: str) -> None:
        """Count the names refused by the distinct-name cap (all of ``metrics``, or one)."""
        self._drops["name_cap"] += len(metrics) if isinstance(metrics, dict) else 1
        self._once.warning(
            "name_cap",
            "trainreport.metric_name_cap_reached",
            cap=self._store.max_names,
            first_refused=name[:200],
        )

    # --- building updates ----------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        """The progress fields: step, epoch, percentage_done, eta_seconds (None omitted).

        No ``eta_seconds`` once the status is terminal: a run that is over has no time left.
        """
        out: dict[str, Any] = {}
        step = self._at_step
        if step is not None:
            out["step"] = step
        if self._at_epoch is not None:
            out["epoch"] = self._at_epoch
        if step is not None and self._max_steps:
            out["percentage_done"] = round(min(max(step / self._max_steps * 100.0, 0.0), 100.0), 2)
            first = self._first_step
            if (
                first is not None
                and self._last_step_time is not None
                and step > first[1]
                and not self._machine.is_terminal
            ):
                per_step = (self._last_step_time - first[0]) / (step - first[1])
                out["eta_seconds"] = round(max(self._max_steps - step, 0) * per_step, 1)
        return out

    def _details(self, wall: str, sticky_keys: set[str] | dict[str, Any]) -> dict[str, Any]:
        # Keys an earlier send carried and that cannot be computed now (the ETA after a
        # step went back, the current value of a metric that turned NaN) keep their last
        # value: the destination may hold them from a request whose answer was lost, so
        # every send carries them and the last delivered one decides what it holds.
        details: dict[str, Any] = dict(self._carried)
        details["phase"] = self._machine.phase.value
        details.update(self.progress())
        details["updated_at"] = wall
        for key in sticky_keys:
            details[key] = self._sticky[key]
        for name, value in self._store.current_values():
            if math.isfinite(value):  # never null; the curve shows the gap
                details[name] = value
        # A terminal write makes the destination drop what only a running task has
        # (the ETA), so a finished run neither carries nor sends it.
        forget_running_only_details(self._machine.status, details)
        return details

    def journal_view(
        self, wall: str, lengths: Mapping[str, int], version: tuple[int, int, bool] | None
    ) -> JournalView:
        """The suffixes past ``lengths`` (or, when ``version`` is not current, a rewrite).

        For the journal (``_journal_feed.py``): ``lengths`` is what it holds,
        ``version`` the :attr:`JournalView.version` it last wrote. Changes nothing.
        """
        with self._lock:
            store = self._store
            current = (store.points_discarded, store.rewinds, self._seeded)
            acknowledged = {n: min(s.delivered) for n, s in store.series.items()}
            rewrite = current != version
            series = []
            for name, s in store.series.items():
                start = acknowledged[name] if rewrite else lengths.get(name, 0)
                if rewrite or len(s.steps) > start:
                    series.append(
                        SeriesUpdate(
                            name, start, s.steps[start:], s.epochs[start:], s.values[start:]
                        )
                    )
            return JournalView(
                current,
                self._machine.status.value,
                self._details(wall, self._sticky),
                tuple(series),
                {n: len(s.steps) for n, s in store.series.items()},
                acknowledged,
            )

    def has_changes(self, d: int = 0) -> bool:
        """True when something recorded could still be sent to ``d`` and is not known delivered.

        Curves that can never be sent (full-state ``metrics`` over the
        destination's body limit) do not count here, or the reporter would
        resend forever; they do count in :meth:`all_delivered`.
        """
        with self._lock:
            return self._has_changes(d)

    def _has_changes(self, d: int) -> bool:
        held = self._held[d]
        if held.changes != self._changes or self._dirty_sticky(d):
            return True
        return not held.too_large and any(s.needs_send(d) for s in self._store.series.values())

    def all_delivered(self, d: int = 0) -> bool:
        """True when ``d`` holds everything recorded (close() and flush() say so)."""
        with self._lock:
            return not self._has_changes(d) and not any(
                s.needs_send(d) for s in self._store.series.values()
            )

    def build_update(
        self, d: int, *, wall: str, full_state: bool, include_metrics: bool = True
    ) -> Build:
        """Build the next update for destination ``d``.

        Args:
            d: the destination.
            wall: the wall-clock time to send as ``updated_at`` (ISO 8601, UTC).
            full_state: True for the baseline mode (complete ``metrics`` or none),
                False for series suffixes from what ``d`` holds.
            include_metrics: False to leave curves out (an event send in
                full-state mode: event reports send only what they change,
                docs/design.md#wire-modes).

        Returns:
            the update and what to acknowledge when it is delivered (:meth:`on_delivered`).
        """
        with self._lock:
            sticky = self._dirty_sticky(d)
            details = self._details(wall, sticky)
            self._carried.update((k, v) for k, v in details.items() if k not in self._sticky)
            self._last_updated_at = wall
            held = self._held[d]
            series_updates: tuple[SeriesUpdate, ...] | None = None
            sent: dict[str, int] = {}
            store_series = self._store.series
            if include_metrics and any(s.needs_send(d) for s in store_series.values()):
                if full_state:
                    if self._seeded and not held.too_large:
                        series_updates = tuple(
                            SeriesUpdate(n, 0, s.steps[:], s.epochs[:], s.values[:])
                            for n, s in store_series.items()
                            if s
                        )
                else:
                    series_updates = tuple(
                        SeriesUpdate(
                            n,
                            s.delivered[d],
                            s.steps[s.delivered[d] :],
                            s.epochs[s.delivered[d] :],
                            s.values[s.delivered[d] :],
                        )
                        for n, s in store_series.items()
                        if s.needs_send(d)
                    )
                if series_updates is not None:
                    sent = (
                        {n: len(s) for n, s in store_series.items()}
                        if full_state
                        else {u.name: u.offset + len(u) for u in series_updates}
                    )
                    self._store.mark_built(d, list(sent))
            foreign: dict[str, Any] = {}
            if full_state and series_updates:
                foreign = {n: p for n, p in held.foreign.items() if n not in store_series}
                foreign.update(self._preserved)
            update = Update(
                status=self._machine.status.value,
                status_details=details,
                series=series_updates,
                full_state=full_state,
                foreign_series=foreign,
            )
            return Build(update, sent, sticky, self._changes, details)

    def on_delivered(self, d: int, build: Build, lengths: Mapping[str, int] | None) -> None:
        """Destination ``d`` applied ``build``'s update (holding ``lengths``, if it says)."""
        with self._lock:
            self._store.acknowledge(d, build.sent, lengths)
            held = self._held[d]
            held.sticky.update(build.sticky)
            held.changes = build.changes
            self._delivered_details.update(build.details)

    def resynchronise(self, d: int, lengths: Mapping[str, int] | None) -> None:
        """``d``'s state disagrees with ours: resend from ``lengths`` and every sticky field.

        ``lengths`` ``None``: the destination is to be opened again, which says them.
        """
        with self._lock:
            if lengths is not None:
                self._store.resynchronise(d, lengths)
            self._mark_all_dirty(d)

    def adopt(self, d: int, state: StoredState, full_state: bool) -> int:
        """Bring ``d`` up to date from its own stored task (the store was seeded from another).

        Each series is sent from the longest prefix ``d`` holds as we do. In
        full-state mode, series ``d`` holds and this run does not are kept as
        stored (sent back inside ``metrics``). Every sticky field is sent.

        Returns:
            how many of ``d``'s stored points this run's record replaces.
        """
        with self._lock:
            replaced = self._store.adopt(d, state.series)
            held = self._held[d]
            if full_state:
                held.foreign = dict(state.damaged)
                for name, (steps, epochs, values) in state.series.items():
                    if name not in self._store.series:
                        held.foreign[name] = _points_json(steps, epochs, values)
            self._mark_all_dirty(d)
            return replaced

    def _mark_all_dirty(self, d: int) -> None:
        held = self._held[d]
        held.sticky.clear()
        held.changes = -1

    def metrics_refused(self, d: int) -> bool:
        """Whether ``d`` refused the full-state ``metrics`` for size."""
        return self._held[d].too_large

    # --- reading -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The task record the destinations should now hold (the ``GET`` shape)."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        details = dict(self._stored_details)
        details.update(self._delivered_details)
        details.update(self._details(self._last_updated_at or "", self._sticky))
        if not self._last_updated_at:
            del details["updated_at"]
        forget_running_only_details(self._machine.status, details)
        # A series with no points is not part of a stored task (a server keeps points, not names).
        if any(self._store.series.values()) or self._preserved:
            metrics: dict[str, Any] = {
                name: _points_json(s.steps, s.epochs, s.values)
                for name, s in self._store.series.items()
                if s
            }
            metrics.update(self._preserved)
            details["metrics"] = metrics
        return {"status": self._machine.status.value, "status_details": details}

    def counts(self) -> RecorderCounts:
        """Counters for ``Reporter.stats()``."""
        with self._lock:
            store = self._store
            n = store.destinations
            return RecorderCounts(
                points_recorded=store.points_recorded,
                delivered=tuple(store.delivered_points(d) for d in range(n)),
                unsent=tuple(store.unsent_points(d) for d in range(n)),
                drops=dict(self._drops),
                rewinds=store.rewinds,
            )

    def unsent_points(self, d: int) -> int:
        """Points ``d`` is not known to hold."""
        with self._lock:
            return self._store.unsent_points(d)

    @property
    def is_terminal(self) -> bool:
        """Whether a terminal report was applied."""
        return self._machine.is_terminal

    @property
    def status(self) -> TaskStatus:
        """The attempt's current status."""
        return self._machine.status

    def strict_violations(self) -> tuple[str, ...]:
        """Reports the lifecycle tables refused, in strict mode."""
        with self._lock:
            return tuple(self._strict_violations)

    def finish(self) -> None:
        """At close: log never-matched ``time_series_metrics`` patterns and what was suppressed."""
        with self._lock:
            arrived = [*self._store.series, *self._store.scalar_names]
        self._selector.log_unmatched(arrived)
        self._once.summarize()

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held at the fork)."""
        self._lock = threading.Lock()
