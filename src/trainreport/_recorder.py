"""Recorder: applies queued reports to the store and the task machine, builds updates.

This is the sans-I/O core the reporter thread drives (STYLE habit 3): it gets
report tuples that the training thread queued, and hands back
:class:`~trainreport.sinks.Update` values and applies sink results. It reads no
clock (times arrive in the tuples and as ``wall`` arguments) and does no I/O.

All mutation happens on the reporter thread, under :attr:`Recorder.lock`;
other threads only read (``snapshot``, ``stats``) under the same lock.

Queue items are tuples ``(kind, t, *args)`` where ``t`` is the caller's
monotonic clock reading (seconds) and ``kind`` one of the ``K_*`` constants.
"""

from __future__ import annotations

import math
import numbers
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from trainreport._config import ReportingConfig
from trainreport._lifecycle import (
    Outcome,
    TaskEvent,
    TaskMachine,
    TaskStatus,
    forget_running_only_details,
)
from trainreport._logging import OnceLogger, describe_exception, get_logger
from trainreport._naming import (
    MAX_PARAM_ITEMS,
    DatasetOrder,
    EpochRule,
    NotChartable,
    SeriesSelector,
    check_name,
    qualify,
    to_chartable,
    to_step,
)
from trainreport._payloads import StoredState, encode_details
from trainreport._sink import SeriesUpdate, Update
from trainreport._store import MetricStore, Series
from trainreport.exceptions import TransitionError

__all__ = ["REPORT_BYTES", "RESERVED_KEYS", "VALUE_BYTES", "Recorder", "queued_bytes"]

(
    K_TRAIN,
    K_VALIDATION,
    K_METRICS,
    K_TRAINING_START,
    K_HYPERPARAMETERS,
    K_EPOCH_END,
    K_CHECKPOINT,
    K_COMPLETED,
    K_CANCELLED,
    K_FAILED,
) = range(10)

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
    K_TRAINING_START: TaskEvent.TRAINING_START,
    K_EPOCH_END: TaskEvent.EPOCH_END,
    K_CHECKPOINT: TaskEvent.CHECKPOINT,
    K_COMPLETED: TaskEvent.COMPLETE,
    K_CANCELLED: TaskEvent.CANCEL,
    K_FAILED: TaskEvent.FAIL,
}
_REPORT_NAME = {
    K_TRAIN: "report_train_step",
    K_VALIDATION: "report_validation",
    K_METRICS: "report_metrics",
    K_TRAINING_START: "report_training_start",
    K_HYPERPARAMETERS: "report_hyperparameters",
    K_EPOCH_END: "report_epoch_end",
    K_CHECKPOINT: "report_checkpoint_saved",
    K_COMPLETED: "report_completed",
    K_CANCELLED: "report_cancelled",
    K_FAILED: "report_error",
}
_MAX_TEXT = 4096
_log = get_logger()

#: The queue's memory guard estimates a queued report at this many bytes (the
#: tuple, the copied dict's table and header, the numbers) ...
REPORT_BYTES = 256
#: ... plus this many per metric value it carries (measured: 912 B for 14 metrics).
VALUE_BYTES = 48


def queued_bytes(item: tuple[Any, ...]) -> int:
    """The memory guard's estimate of one queued report, in bytes. Never raises.

    ``Reporter.report_train_step`` inlines the same sum; the reporter thread
    subtracts this for every report it drains, so the two must agree.
    """
    kind = item[0]
    if kind in (K_TRAIN, K_VALIDATION):
        values = item[4]
    elif kind == K_METRICS:
        values = item[3]
    elif kind == K_HYPERPARAMETERS:
        values = item[2]
    else:
        return REPORT_BYTES
    return REPORT_BYTES + VALUE_BYTES * len(values) if type(values) is dict else REPORT_BYTES


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


class Recorder:
    """The state of one reporting attempt: metrics, status, phase and details.

    Args:
        config: the reporter's configuration.
        series_default: the ``time_series_metrics`` used when the config's is
            ``None`` (an adapter's own default list; every metric otherwise).
    """

    def __init__(
        self, config: ReportingConfig, *, series_default: tuple[str, ...] = ("*",)
    ) -> None:
        self.lock = threading.Lock()
        self.config = config
        self.store = MetricStore(config.max_metric_names)
        self.selector = SeriesSelector(config.time_series_metrics, default=series_default)
        self.machine = TaskMachine(strict=config.strict_transitions)
        self.datasets = DatasetOrder()
        self.epoch_rule = EpochRule()
        self.once = OnceLogger()
        self.drops: Counter[str] = Counter()
        self.strict_violations: list[str] = []
        self.step: int | None = None
        self.epoch: int | None = None
        self.max_steps: int | None = None
        self.num_epochs: int | None = None
        self.cancel_reason: str | None = None
        # Details sent until delivered once (shallow merge keeps them afterwards).
        self.sticky: dict[str, Any] = {}
        self.sticky_dirty: set[str] = set()
        self.core_dirty = True
        self.stored_details: dict[str, Any] = {}
        # Stored series the client cannot parse, exactly as stored: never overwritten
        # (sent back unchanged in full-state mode) unless this run records the name.
        self.preserved: dict[str, Any] = {}
        # Names admitted as series only because the stored task was not read yet:
        # seeding makes them scalars again unless the stored task has them as series.
        self._provisional: set[str] = set()
        self.seeded = False
        self.metrics_too_large = False
        self.last_updated_at: str | None = None
        self._first_step: tuple[float, int] | None = None
        self._first_train_step: int | None = None  # the first this process recorded
        self._stored_last_train: int | None = None  # the stored task's, once seeded
        # (steps, epochs) of the longest stored training series: the int-epoch base
        # of a resumed process is read from it (see _decide_epoch_base).
        self._stored_epochs: tuple[array[int], array[int]] | None = None
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
        self.delivered_details: dict[str, Any] = {}
        self._pending_details: dict[str, Any] = {}
        # Every details key an update was built with (sticky fields aside), last value.
        self._carried: dict[str, Any] = {}

    # --- seeding (resume) ----------------------------------------------------------

    def start_attempt(self) -> None:
        """Begin a new attempt: status ``running``, phase ``setup`` (DESIGN §4)."""
        self.machine.apply(TaskEvent.ATTEMPT_START)
        self.core_dirty = True

    def seed(self, state: StoredState) -> None:
        """Seed curves and ``val_datasets`` from a stored task (DESIGN §3 resume).

        Never the stored status: a new process starts a new attempt. Series
        continue; other stored fields are left as they are on the destination.
        """
        store = self.store
        stored_train = [
            st[-1] for n, (st, _, _) in state.series.items() if n.startswith("train_") and st
        ]
        stored_last_train = max(stored_train) if stored_train else None
        # Reports applied before the stored task could be read (a long outage at
        # start) come after the stored curves, as if replayed: a first training step
        # below the stored last one rewinds them (DESIGN §3), and each series' own
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
        train = [cols for n, cols in state.series.items() if n.startswith("train_") and cols[0]]
        if train:
            steps, epochs, _ = max(train, key=lambda cols: len(cols[0]))
            self._stored_epochs = (steps, epochs)
        for name, (steps, epochs, values) in state.series.items():
            if name in store.scalar_names:  # a name stored as a series stays a series
                store.make_series(name)
            keep = len(steps) if cut is None else bisect_right(steps, cut)
            current = store.series.get(name)
            if current is not None and current.steps:
                keep = min(keep, bisect_left(steps, current.steps[0]))
            elif current is None and not store.admit(name, as_series=True):
                # Past the name cap: kept on the destination as it is, never deleted.
                self.preserved[name] = _points_json(steps, epochs, values)
                continue
            store.seed(name, steps, epochs, values, keep)
        for name in self._provisional - set(state.series):
            store.demote(name)  # a scalar after all: only its latest value is kept
        self._provisional.clear()
        self._names.clear()  # cached entries may hold series that were just replaced
        self._keep_unreadable(state)
        if state.val_datasets:
            if self.datasets.datasets:  # names already given this process keep their curves
                _log.info(
                    "trainreport.resume_datasets_kept",
                    stored=list(state.val_datasets),
                    current=list(self.datasets.datasets),
                )
            else:
                self.datasets = DatasetOrder(state.val_datasets)
        self.stored_details = dict(state.details)
        self.seeded = True

    def _keep_unreadable(self, state: StoredState) -> None:
        """Keep stored series the client cannot parse; log each (bounded)."""
        for count, (name, raw) in enumerate(state.damaged.items()):
            if count < _MAX_LOGGED_SERIES:
                _log.warning(
                    "trainreport.stored_series_unreadable",
                    series=name[:200],
                    reason=state.damage_reasons.get(name, ""),
                    kept=name not in self.store,
                )
            elif count == _MAX_LOGGED_SERIES:
                _log.warning(
                    "trainreport.stored_series_unreadable_more",
                    more=len(state.damaged) - _MAX_LOGGED_SERIES,
                )
            if name in self.store:  # recorded by this run before the read: its curve wins
                _log.warning("trainreport.stored_series_replaced", series=name[:200])
            else:
                self.preserved[name] = raw

    # --- applying reports ----------------------------------------------------------

    def apply(self, item: tuple[Any, ...]) -> bool:
        """Apply one queued report. Returns True for an event report (bypasses the debounce).

        Never raises: a malformed item is logged once per report kind and dropped.
        """
        kind = item[0]
        try:
            if kind == K_TRAIN:
                self._train_step(item[1], item[2], item[3], item[4])
                return False
            if kind == K_VALIDATION:
                self._validation(item[2], item[3], item[4], item[5])
                return False
            if kind == K_METRICS:
                self._metrics(item[2], item[3], item[4])
                return False
            if kind == K_HYPERPARAMETERS:
                self._hyperparameters(item[2], item[3] if len(item) > 3 else 0)
                return False
            return self._event(kind, item)
        except TransitionError as exc:  # strict mode (tests): surfaced by Reporter.close()
            self.strict_violations.append(str(exc))
            return False
        except Exception as exc:  # a bug or a hostile object must never stop the reporter
            self.drops["invalid_report"] += 1
            self.once.warning(
                ("apply", kind),
                "trainreport.report_dropped",
                report=_REPORT_NAME.get(kind, str(kind)),
                reason=describe_exception(exc),
            )
            return False

    def _event(self, kind: int, item: tuple[Any, ...]) -> bool:
        event = _EVENT_OF_KIND[kind]
        if kind == K_TRAINING_START:
            max_steps, num_epochs = _positive_int(item[2]), _positive_int(item[3])
            for field, value in (("max_steps", max_steps), ("num_epochs", num_epochs)):
                if isinstance(value, NotChartable):
                    self._drop_once(
                        "invalid_argument", field, "report_training_start", value.reason
                    )
        if self.machine.apply(event) is Outcome.REFUSED:
            self.drops["refused_transition"] += 1
            return False
        self.core_dirty = True
        if kind == K_TRAINING_START:
            if isinstance(max_steps, int):
                self.max_steps = max_steps
                self._set_sticky("max_steps", max_steps)
            if isinstance(num_epochs, int):
                self.num_epochs = num_epochs
                self._set_sticky("num_epochs", num_epochs)
        elif kind == K_EPOCH_END:
            epoch = self._resolve_epoch(item[2], self.step or 0, "report_epoch_end")
            if epoch is not None:
                self.epoch = epoch
        elif kind == K_CHECKPOINT:
            path = item[2]
            if not isinstance(path, str) or not path.strip():
                # A missing path is never sent: the last good one stays on the destination.
                self._drop_once(
                    "invalid_argument", "path", "report_checkpoint_saved", "missing checkpoint path"
                )
                return True
            self._set_sticky("checkpoint_path", path[:_MAX_TEXT])
            step = to_step(item[3]) if item[3] is not None else None
            if isinstance(step, int):
                self._set_sticky("checkpoint_step", step)
        elif kind == K_CANCELLED:
            self._set_sticky("cancel_reason", str(item[2])[:_MAX_TEXT])
        elif kind == K_FAILED:
            self._set_sticky(
                "error", {"type": str(item[2])[:200], "message": str(item[3])[:_MAX_TEXT]}
            )
        return True

    def _hyperparameters(self, flat: dict[str, Any], left_out: int) -> None:
        merged = {**self.sticky.get("hyperparameters", {}), **flat}
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
            self.drops["hyperparameters_truncated"] += left_out - 1
        self._set_sticky("hyperparameters", merged)

    def drop_field(self, key: str, size: int) -> None:
        """Drop ``key`` from what is sent: it cannot fit any request to the destination.

        The field goes back to its last delivered value (or to nothing), so a
        later report merges into what the destination holds. Counted as
        ``field_too_large`` and logged once per field.
        """
        self.drops["field_too_large"] += 1
        self.once.warning(
            ("field_too_large", key),
            "trainreport.field_too_large",
            field=key,
            encoded_bytes=size,
        )
        if key in self.delivered_details:
            self.sticky[key] = self.delivered_details[key]
        else:
            self.sticky.pop(key, None)
        self.sticky_dirty.discard(key)

    def largest_field(self, update: Update) -> tuple[str, int] | None:
        """The largest once-sent field (``hyperparameters``, ...) in ``update``, encoded bytes."""
        best: tuple[str, int] | None = None
        for key in self.sticky_dirty:
            if key in update.status_details:
                size = len(encode_details({key: update.status_details[key]}).encode())
                if best is None or size > best[1]:
                    best = (key, size)
        return best

    def _set_sticky(self, key: str, value: Any) -> None:
        self.sticky[key] = _json_safe(value)
        self.sticky_dirty.add(key)

    def _drop_once(self, reason: str, key: object, report: str, detail: str) -> None:
        self.drops[reason] += 1
        self.once.warning(
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
        training point at or before ``step``, the base is the one whose epoch is not
        below that point's (epochs never go back within a run), the smaller of the
        two when both qualify. Otherwise :class:`EpochRule` decides as for a new run.
        """
        stored = self._stored_epochs
        if stored is None or isinstance(raw, bool) or not isinstance(raw, numbers.Integral):
            return
        steps, epochs = stored
        at = bisect_right(steps, step) - 1
        if at < 0 or epochs[at] < 1:
            return
        try:
            index = int(raw)
        except Exception:  # a hostile Integral: EpochRule drops it
            return
        if index < 0:
            return
        candidates = [
            (value, zero_based)
            for value, zero_based in ((index + 1, True), (max(1, index), False))
            if value >= epochs[at]
        ]
        if not candidates:  # below the stored epoch either way: the new-run rule
            return
        _, zero_based = min(candidates, key=lambda c: (c[0], not c[1]))
        self.epoch_rule = EpochRule(zero_based=zero_based)
        _log.info(
            "trainreport.epoch_rule",
            zero_based=zero_based,
            first_epoch=index,
            stored_epoch=epochs[at],
            stored_step=steps[at],
        )

    def _resolve_epoch(self, raw: object, step: int, report: str) -> int | None:
        if self.epoch_rule.zero_based is None:
            self._decide_epoch_base(raw, step)
        epoch = self.epoch_rule.resolve(raw, step=step, num_epochs=self.num_epochs)
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

    def _train_step(self, t: float, raw_step: object, raw_epoch: object, metrics: object) -> None:
        step = self._step(raw_step, "report_train_step")
        if step is None:
            return
        if self.machine.apply(TaskEvent.TRAIN_STEP) is Outcome.REFUSED:
            self.drops["refused_transition"] += 1
            return
        epoch = self._resolve_epoch(raw_epoch, step, "report_train_step")
        if epoch is not None:
            self.epoch = epoch
        if self._first_train_step is None:
            # The run-wide purge: once per process, at its first training step,
            # when it resumes at or below the stored last training step (a run
            # resumed from an earlier checkpoint). Before the stored task is read,
            # seed() applies the same cut.
            self._first_train_step = step
            stored = self._stored_last_train
            if self.seeded and stored is not None and step <= stored:
                self.store.purge_after(step)
                self._first_step = None
        if self._first_step is None or step <= self._first_step[1]:
            self._first_step = (t, step)
        self.step = step
        self._last_step_time = t
        self.core_dirty = True
        self._record(metrics, "train", None, step, self.epoch or 1, "report_train_step")

    def _validation(
        self, raw_step: object, raw_epoch: object, metrics: object, dataset: object
    ) -> None:
        step = self._step(raw_step, "report_validation")
        if step is None:
            return
        if self.machine.apply(TaskEvent.VALIDATION) is Outcome.REFUSED:
            self.drops["refused_transition"] += 1
            return
        self.core_dirty = True
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
        if not self.datasets.knows(dataset) and self.store.full:
            # A new dataset could not have a curve past the name cap: remember nothing.
            self._refuse_for_name_cap(metrics, f"val_{dataset}_*")
            return
        before = len(self.datasets.datasets)
        qualifier = self.datasets.qualifier(dataset)
        if len(self.datasets.datasets) != before:
            self._set_sticky("val_datasets", list(self.datasets.datasets))
        self._record(
            metrics, "validation", qualifier, step, epoch or self.epoch or 1, "report_validation"
        )

    def _metrics(self, raw_step: object, metrics: object, phase: object) -> None:
        if not isinstance(phase, str) or check_name(phase) is not None or not phase.isidentifier():
            self._drop_once(
                "invalid_argument", "phase", "report_metrics", "phase is not an identifier"
            )
            return
        step = self._step(raw_step, "report_metrics")
        if step is None:
            return
        if self.machine.apply(TaskEvent.OTHER_METRICS) is Outcome.REFUSED:
            self.drops["refused_transition"] += 1
            return
        self.core_dirty = True  # current values change
        naming_phase = "validation" if phase in ("val", "eval", "validation") else phase
        self._record(metrics, naming_phase, None, step, self.epoch or 1, "report_metrics")

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
        store = self.store
        # A step beyond every point recorded so far is a plain append in every series.
        fresh = step > store.max_step
        appended = 0
        # Per point this is the reporter thread's hottest loop (DESIGN §6: < 1 µs a
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
        return (name, self.store.series.get(name))

    def _admit_guarded(
        self, raw_name: object, phase: str, qualifier: str | None, report: str
    ) -> str | None:
        try:
            return self._admit(raw_name, phase, qualifier, report)
        except Exception as exc:  # a hostile key (its repr or hash raises) drops only itself
            self.drops["invalid_name"] += 1
            self.once.warning(
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
        if name in self.store:
            return name
        as_series = self.selector.is_series(name)
        # Before the stored task is read every name keeps its points: a name stored
        # as a series must stay one, whatever arrives first.
        provisional = not as_series and not self.seeded
        replaces = name in self.preserved  # a stored series this client cannot parse
        if not self.store.admit(name, as_series=as_series or provisional or replaces):
            self._refuse_for_name_cap(None, name)
            return None
        if provisional and not replaces:
            self._provisional.add(name)
        if replaces:
            del self.preserved[name]
            _log.warning("trainreport.stored_series_replaced", series=name[:200])
        return name

    def _refuse_for_name_cap(self, metrics: object, name: str) -> None:
        """Count the names refused by the distinct-name cap (all of ``metrics``, or one)."""
        self.drops["name_cap"] += len(metrics) if isinstance(metrics, dict) else 1
        self.once.warning(
            "name_cap",
            "trainreport.metric_name_cap_reached",
            cap=self.store.max_names,
            first_refused=name[:200],
        )

    # --- building updates ----------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        """The progress fields: step, epoch, percentage_done, eta_seconds (None omitted).

        No ``eta_seconds`` once the status is terminal: a run that is over has no time left.
        """
        out: dict[str, Any] = {}
        step = self.step
        if step is not None:
            out["step"] = step
        if self.epoch is not None:
            out["epoch"] = self.epoch
        if step is not None and self.max_steps:
            out["percentage_done"] = round(min(max(step / self.max_steps * 100.0, 0.0), 100.0), 2)
            first = self._first_step
            if (
                first is not None
                and self._last_step_time is not None
                and step > first[1]
                and not self.machine.is_terminal
            ):
                per_step = (self._last_step_time - first[0]) / (step - first[1])
                out["eta_seconds"] = round(max(self.max_steps - step, 0) * per_step, 1)
        return out

    def _details(self, wall: str, sticky_keys: set[str] | dict[str, Any]) -> dict[str, Any]:
        # Keys an earlier send carried and that cannot be computed now (the ETA after a
        # step went back, the current value of a metric that turned NaN) keep their last
        # value: the destination may hold them from a request whose answer was lost, so
        # every send carries them and the last delivered one decides what it holds.
        details: dict[str, Any] = dict(self._carried)
        details["phase"] = self.machine.phase.value
        details.update(self.progress())
        details["updated_at"] = wall
        for key in sticky_keys:
            details[key] = self.sticky[key]
        for name, value in self.store.current_values():
            if math.isfinite(value):  # never null; the curve shows the gap
                details[name] = value
        # A terminal write makes the destination drop what only a running task has
        # (the ETA), so a finished run neither carries nor sends it.
        forget_running_only_details(self.machine.status, details)
        return details

    def task_fields(self, wall: str) -> tuple[str, dict[str, Any]]:
        """The status and every ``status_details`` key an update built now would carry.

        For the journal, which records what the destination should hold
        (``updated_at`` is ``wall``). Call under :attr:`lock`; changes nothing.
        """
        return self.machine.status.value, self._details(wall, self.sticky)

    def has_changes(self) -> bool:
        """True when something recorded could still be sent and is not known delivered.

        Curves that can never be sent (full-state ``metrics`` over the server's
        body limit) do not count here, or the reporter would resend forever; they
        do count in :meth:`all_delivered`.
        """
        return (
            self.core_dirty
            or bool(self.sticky_dirty)
            or (
                not self.metrics_too_large and any(s.needs_send for s in self.store.series.values())
            )
        )

    def all_delivered(self) -> bool:
        """True when the destination holds everything recorded (close() and flush() say so)."""
        return not self.has_changes() and not any(s.needs_send for s in self.store.series.values())

    def build_update(
        self, *, wall: str, full_state: bool, include_metrics: bool = True
    ) -> tuple[Update, dict[str, int], frozenset[str]]:
        """Build the next update.

        Args:
            wall: the wall-clock time to send as ``updated_at`` (ISO 8601, UTC).
            full_state: True for the baseline mode (complete ``metrics`` or none),
                False for series suffixes from what the destination holds.
            include_metrics: False to leave curves out (an event send in
                full-state mode, DESIGN §5 "event reports send only what they change").

        Returns:
            (update, sent, sticky keys) where ``sent`` maps each included
            series to the length it had, for :meth:`on_delivered`.
        """
        sticky = set(self.sticky_dirty)
        details = self._details(wall, sticky)
        self._carried.update((k, v) for k, v in details.items() if k not in self.sticky)
        self._pending_details = details
        self.last_updated_at = wall
        series_updates: tuple[SeriesUpdate, ...] | None = None
        sent: dict[str, int] = {}
        store_series = self.store.series
        if include_metrics and any(s.needs_send for s in store_series.values()):
            if full_state:
                if self.seeded and not self.metrics_too_large:
                    series_updates = tuple(
                        SeriesUpdate(n, 0, s.steps[:], s.epochs[:], s.values[:])
                        for n, s in store_series.items()
                        if s
                    )
            else:
                series_updates = tuple(
                    SeriesUpdate(
                        n,
                        s.delivered,
                        s.steps[s.delivered :],
                        s.epochs[s.delivered :],
                        s.values[s.delivered :],
                    )
                    for n, s in store_series.items()
                    if s.needs_send
                )
            if series_updates is not None:
                sent = (
                    {n: len(s) for n, s in store_series.items()}
                    if full_state
                    else {u.name: u.offset + len(u) for u in series_updates}
                )
        update = Update(
            status=self.machine.status.value,
            status_details=details,
            series=series_updates,
            full_state=full_state,
            foreign_series=dict(self.preserved) if full_state and series_updates else {},
        )
        return update, sent, frozenset(sticky)

    def on_delivered(
        self, sent: Mapping[str, int], sticky: frozenset[str], lengths: Mapping[str, int] | None
    ) -> None:
        """Apply a ``Delivered`` result for an update built by :meth:`build_update`."""
        self.store.acknowledge(sent, lengths)
        self.sticky_dirty -= sticky
        self.core_dirty = False
        self.delivered_details.update(self._pending_details)

    def mark_all_dirty(self) -> None:
        """Resend every sticky field (after a resynchronise: the destination may have lost them)."""
        self.sticky_dirty = set(self.sticky)
        self.core_dirty = True

    # --- reading -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The task record the destination should now hold (the ``GET`` shape)."""
        details = dict(self.stored_details)
        details.update(self.delivered_details)
        details.update(self._details(self.last_updated_at or "", self.sticky))
        if not self.last_updated_at:
            del details["updated_at"]
        forget_running_only_details(self.machine.status, details)
        # A series with no points is not part of a stored task (a server keeps points, not names).
        if any(self.store.series.values()) or self.preserved:
            metrics: dict[str, Any] = {
                name: _points_json(s.steps, s.epochs, s.values)
                for name, s in self.store.series.items()
                if s
            }
            metrics.update(self.preserved)
            details["metrics"] = metrics
        return {"status": self.machine.status.value, "status_details": details}

    @property
    def status(self) -> TaskStatus:
        """The attempt's current status."""
        return self.machine.status
