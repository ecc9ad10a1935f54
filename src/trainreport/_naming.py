"""Metric naming and value rules (DESIGN §3): pure functions and small stateful helpers.

Everything here runs on the reporter thread, except :func:`caller_value`, which
runs on the training thread for every metric value and is kept as cheap as
possible. Nothing here reads a clock, owns a thread or takes a lock; the
stateful helpers (:class:`DatasetOrder`, :class:`EpochRule`,
:class:`SeriesSelector`) are not thread-safe and belong to the reporter thread.

The rules, in the order a reported metric meets them:

1. :func:`caller_value` turns tensor-like values into plain numbers on the
   caller's thread (``.item()``), so no tensor is ever held in the queue.
2. :func:`check_name` refuses names that cannot be metric names.
3. :func:`qualify` adds the phase prefix (``train_``, ``val_``, ``<phase>_``),
   after stripping one prefix the caller already wrote (``eval_loss`` -> ``val_loss``),
   and :class:`DatasetOrder` supplies the validation dataset qualifier.
4. :class:`SeriesSelector` decides once per qualified name whether it keeps a history.
5. :func:`to_chartable`, :func:`to_step` and :class:`EpochRule` turn values, steps
   and epochs into what the store keeps, or say why not (:class:`NotChartable`).
"""

from __future__ import annotations

import contextlib
import decimal
import enum
import fnmatch
import math
import numbers
import re
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, cast

import attrs

from trainreport._logging import get_logger

__all__ = [
    "EXCLUDE_PREFIX",
    "MAX_CHARTED_LISTED",
    "MAX_NAME_LENGTH",
    "MAX_PARAM_ITEMS",
    "MAX_SCALAR_NOTES",
    "STRIPPED_PREFIXES",
    "UNCONVERTIBLE",
    "UNNAMED_DATASET",
    "DatasetOrder",
    "EpochRule",
    "NotChartable",
    "SeriesSelector",
    "caller_value",
    "canonical_prefix",
    "check_name",
    "flatten_params",
    "flatten_params_bounded",
    "qualify",
    "to_chartable",
    "to_step",
]

# --------------------------------------------------------------------------- names

STRIPPED_PREFIXES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "train": ("train_", "train/"),
        "validation": (
            "val_",
            "val/",
            "eval_",
            "eval/",
            "valid_",
            "validation_",
            "validation/",
        ),
    }
)
"""Per phase, the prefixes stripped from a reported name before the canonical one
is added (DESIGN §3). A phase not listed strips ``"<phase>_"`` and ``"<phase>/"``."""

_CANONICAL_PREFIXES: Final[Mapping[str, str]] = MappingProxyType(
    {"train": "train_", "validation": "val_"}
)

MAX_NAME_LENGTH: Final[int] = 200
"""Longest accepted metric name, in characters (as reported, before the phase prefix)."""

# C0 and C1 control characters, and lone surrogates (they cannot be encoded as UTF-8).
_BAD_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]|([\ud800-\udfff])")


def canonical_prefix(phase: str) -> str:
    """Return the prefix every metric of ``phase`` is stored under (DESIGN §3).

    Args:
        phase: ``"train"``, ``"validation"`` or any other phase name (``"test"``, ``"system"``).

    Returns:
        ``"train_"`` for train, ``"val_"`` for validation, ``f"{phase}_"`` otherwise.
        Never raises for a ``str``.
    """
    return _CANONICAL_PREFIXES.get(phase, f"{phase}_")


def _stripped_prefixes(phase: str) -> tuple[str, ...]:
    prefixes = STRIPPED_PREFIXES.get(phase, (f"{phase}_", f"{phase}/"))
    return tuple(sorted(prefixes, key=len, reverse=True))


def qualify(name: str, phase: str, dataset_qualifier: str | None = None) -> str:
    """Return the qualified (stored) name of metric ``name`` reported in ``phase``.

    At most one prefix of the phase's :data:`STRIPPED_PREFIXES` entry is stripped
    (longest match first, and only when something remains after it), then the
    canonical prefix is added, followed by ``dataset_qualifier + "_"`` when a
    qualifier is given (DESIGN §3)::

        qualify("eval_loss", "validation")          == "val_loss"
        qualify("train/loss", "train")              == "train_loss"
        qualify("train_train_loss", "train")        == "train_train_loss"  (one prefix stripped)
        qualify("loss", "validation", "squad")      == "val_squad_loss"
        qualify("val_", "validation")               == "val_val_"  (nothing would remain)

    Args:
        name: the metric name as the caller reported it (already checked with :func:`check_name`).
        phase: the phase the metric was reported in.
        dataset_qualifier: from :meth:`DatasetOrder.qualifier`; ``None`` for plain names.
            The reporter passes one for validation only; any phase accepts it.

    Returns:
        The qualified name. Never raises for ``str`` arguments.
    """
    for prefix in _stripped_prefixes(phase):
        if len(name) > len(prefix) and name.startswith(prefix):
            name = name[len(prefix) :]
            break
    prefix = canonical_prefix(phase)
    if dataset_qualifier:
        return f"{prefix}{dataset_qualifier}_{name}"
    return f"{prefix}{name}"


def check_name(name: object) -> str | None:
    """Say whether ``name`` is usable as a metric name (DESIGN §3).

    A usable name is a ``str`` of 1 to :data:`MAX_NAME_LENGTH` characters with
    no control characters (C0, DEL, C1) and no lone surrogates (which cannot be
    sent as UTF-8).

    Args:
        name: anything the caller used as a key of its metrics mapping.

    Returns:
        ``None`` when usable, otherwise a short reason: ``"not a string"``,
        ``"empty"``, ``"too long"``, ``"control character"`` or
        ``"surrogate character"``. Never raises.
    """
    try:
        if not isinstance(name, str):
            return "not a string"
        if not name:
            return "empty"
        if len(name) > MAX_NAME_LENGTH:
            return "too long"
        bad = _BAD_CHARACTER.search(name)
        if bad is None:
            return None
        return "surrogate character" if bad.group(1) else "control character"
    except Exception:  # a hostile str subclass
        return "not a string"


UNNAMED_DATASET: Final[str] = "unnamed"
"""The name of the unnamed validation dataset (``dataset=None``) in ``val_datasets``
and, when it is not the first dataset, in its metric names (``val_unnamed_<name>``)."""


class DatasetOrder:
    """Order in which validation datasets were seen (stored with the task as ``val_datasets``).

    The unnamed dataset (``None``) is a dataset like any other: whichever dataset
    is seen first, named or not, keeps plain ``val_N`` names, and every later
    distinct dataset gets ``val_<dataset>_N``, so two datasets never share a
    curve. The unnamed dataset is called :data:`UNNAMED_DATASET` (``"unnamed"``)
    in the order and in its names; ``""`` and ``"unnamed"`` name it too. Seeding
    from a resumed task's ``val_datasets`` keeps the names stable across restarts.

    Args:
        seen: dataset names in first-seen order, e.g. the stored ``val_datasets``.
            Entries that are not non-empty strings, and repeats, are skipped.

    Not thread-safe (reporter thread only). Never raises for iterables of str.
    """

    def __init__(self, seen: Iterable[str] = ()) -> None:
        self._order: list[str] = []
        self._known: set[str] = set()
        for dataset in seen:
            if isinstance(dataset, str) and dataset:
                self._remember(str.__str__(dataset))

    def _remember(self, dataset: str) -> None:
        if dataset not in self._known:
            self._known.add(dataset)
            self._order.append(dataset)

    def qualifier(self, dataset: str | None) -> str | None:
        """Return the qualifier for metrics of ``dataset``, remembering it if new.

        Args:
            dataset: the ``dataset`` argument of a validation report; ``None``
                and ``""`` are the unnamed dataset.

        Returns:
            ``None`` (plain ``val_`` names) for the first dataset seen, named
            or not; the dataset's name (``"unnamed"`` for the unnamed one) for
            every later one. Never raises for ``str | None``.
        """
        name = dataset or UNNAMED_DATASET
        self._remember(name)
        return None if name == self._order[0] else name

    def knows(self, dataset: str | None) -> bool:
        """Whether ``dataset`` (``None``: the unnamed one) was seen already."""
        return (dataset or UNNAMED_DATASET) in self._known

    @property
    def datasets(self) -> tuple[str, ...]:
        """Datasets in first-seen order, the unnamed one included (stored as ``val_datasets``)."""
        return tuple(self._order)


# --------------------------------------------------------------------------- values


class _Sentinel(enum.Enum):
    # An enum member keeps its identity through pickle and copy (an unstarted
    # Reporter, queued reports included, may be pickled).
    UNCONVERTIBLE = "UNCONVERTIBLE"

    def __repr__(self) -> str:
        return "<UNCONVERTIBLE>"

    __str__ = __repr__


UNCONVERTIBLE: Final[object] = _Sentinel.UNCONVERTIBLE
"""Returned by :func:`caller_value` when a value's ``.item()`` (or attribute lookup) raised."""


def caller_value(value: object) -> object:
    """Copy one metric value on the training thread (DESIGN §1, §3).

    ``int`` and ``float`` (and their subclasses) are returned as they are, at the
    cost of one type check. Any other object with a callable ``item`` attribute
    (0-d torch tensors, numpy scalars and 0-d arrays) is converted with
    ``.item()``, so no tensor is ever queued; for a CUDA tensor this waits for
    the device, as any ``.item()`` does. Everything else is returned unchanged
    and judged later, on the reporter thread, by :func:`to_chartable`.

    Args:
        value: a metric value as the caller passed it.

    Returns:
        The value, its ``.item()``, or :data:`UNCONVERTIBLE` when ``.item()`` or
        looking up an attribute raised. Never raises an ``Exception`` (an
        interrupt raised inside a user's ``.item()`` is left to propagate).
    """
    cls = type(value)
    if cls is float or cls is int:
        return value
    try:
        if isinstance(value, (int, float)):
            return value
        item = getattr(value, "item", None)
        if callable(item):
            return item()
    except Exception:  # whatever a foreign object does is its own problem
        return UNCONVERTIBLE
    return value


@attrs.frozen
class NotChartable:
    """Why a value is not a chartable number (or a step, or an epoch).

    Attributes:
        reason: a short label for log events, such as ``"bool"``, ``"string"``,
            ``"None"``, ``"container"``, ``"object"``, ``"too large for a float"``
            or ``"item() failed"``.
    """

    reason: str


_ITEM_FAILED: Final = NotChartable("item() failed")
_BOOL: Final = NotChartable("bool")
_TOO_LARGE_FOR_FLOAT: Final = NotChartable("too large for a float")
_NEGATIVE: Final = NotChartable("negative")
_NON_FINITE: Final = NotChartable("non-finite")
_OBJECT: Final = NotChartable("object")

MAX_STEP: Final[int] = 2**53
"""Largest accepted step (the largest integer every JSON reader holds exactly)."""


def _is_bool(value: object) -> bool:
    if isinstance(value, bool):
        return True
    cls = type(value)
    # numpy.bool_ (numpy 1) / numpy.bool (numpy 2), without importing numpy.
    return cls.__module__ == "numpy" and cls.__name__ in ("bool_", "bool")


def _not_a_number(value: object) -> NotChartable:
    """Describe a value that is not a real number (bools are handled by the caller)."""
    if value is UNCONVERTIBLE:
        return _ITEM_FAILED
    if value is None:
        return NotChartable("None")
    if isinstance(value, (str, bytes, bytearray)):
        return NotChartable("string")
    if isinstance(value, numbers.Complex):
        return NotChartable("complex")
    if isinstance(value, (Mapping, Collection)):
        return NotChartable("container")
    return _OBJECT


def to_chartable(value: object) -> float | NotChartable:
    """Turn a metric value into the float the store keeps (DESIGN §3).

    Real numbers are chartable: ``int``, ``float``, numpy scalars and any other
    :class:`numbers.Real`, and :class:`decimal.Decimal`. ``bool`` and
    ``numpy.bool_`` are not. NaN and ±Inf are returned as floats (kept as points;
    encoded as JSON ``null`` by the payload builder).

    Args:
        value: a value as returned by :func:`caller_value`.

    Returns:
        The value as a ``float``, or :class:`NotChartable` with the reason
        (``"bool"``, ``"string"``, ``"None"``, ``"container"``, ``"complex"``,
        ``"object"``, ``"too large for a float"``, ``"item() failed"``,
        ``"float() failed"``). Never raises an ``Exception``.
    """
    if type(value) is float:
        return value
    try:
        if type(value) is int:
            return float(value)
        if _is_bool(value):
            return _BOOL
        if isinstance(value, (numbers.Real, decimal.Decimal)):
            return float(value)
        return _not_a_number(value)
    except OverflowError:
        return _TOO_LARGE_FOR_FLOAT
    except Exception:
        return NotChartable("float() failed")


def to_step(value: object) -> int | NotChartable:
    """Turn a reported step into the ``int`` the store keeps (DESIGN §3).

    A step is an integer (``int``, numpy integers, any :class:`numbers.Integral`)
    or an integral real number (``50.0`` -> ``50``), from 0 to :data:`MAX_STEP`
    (2**53) inclusive. Steps are what the caller says they are; no offset is applied.

    Args:
        value: a step as returned by :func:`caller_value`.

    Returns:
        The step, or :class:`NotChartable` with the reason (``"bool"``,
        ``"string"`` (``"50"`` is not a step), ``"None"``, ``"negative"``,
        ``"too large"``, ``"not an integer"``, ``"non-finite"``, ``"container"``,
        ``"object"``, ``"item() failed"``). Never raises an ``Exception``.
    """
    try:
        if type(value) is int:
            step: int = value
        elif _is_bool(value):
            return _BOOL
        elif isinstance(value, numbers.Integral):
            step = int(value)
        elif isinstance(value, (numbers.Real, decimal.Decimal)):
            real = float(value)
            if not math.isfinite(real):
                return _NON_FINITE
            if not real.is_integer():
                return NotChartable("not an integer")
            step = int(real)
        else:
            return _not_a_number(value)
    except OverflowError:
        return NotChartable("too large")
    except Exception:
        return _OBJECT
    if step < 0:
        return _NEGATIVE
    if step > MAX_STEP:
        return NotChartable("too large")
    return step


class EpochRule:
    """The epoch rule of DESIGN §3: which 1-based epoch a reported epoch value means.

    - A float epoch ``e`` (``float``, numpy floats, any non-integral
      :class:`numbers.Real`) counts epochs completed so far, as Hugging Face
      reports it, and becomes ``max(1, ceil(e))``: 0.0 -> 1, 1.5 -> 2, 3.0 -> 3.
    - An int epoch (``int``, numpy integers) is an index: 0-based if the first
      int epoch the run reports is 0 (a plain ``for epoch in range(n)``), 1-based
      otherwise. The choice is made once, at the first int epoch, and logged once
      as the INFO event ``trainreport.epoch_rule`` with ``zero_based=...`` and
      ``first_epoch=...``.
    - Either way the result is at least 1, capped at ``num_epochs`` when known,
      and a report at step 0 belongs to epoch 1.

    Args:
        zero_based: the int-epoch choice when already known (otherwise decided
            at the first int epoch).

    Not thread-safe (reporter thread only).
    """

    def __init__(self, zero_based: bool | None = None) -> None:
        self._zero_based = zero_based

    @property
    def zero_based(self) -> bool | None:
        """Whether int epochs are 0-based; ``None`` until the first int epoch arrives."""
        return self._zero_based

    def resolve(
        self, epoch: object, *, step: int, num_epochs: int | None
    ) -> int | NotChartable | None:
        """Return the 1-based epoch that ``step`` falls in.

        Args:
            epoch: the reported epoch, as returned by :func:`caller_value`.
            step: the (already validated) step of the report.
            num_epochs: the run's number of epochs, if known; values below 1 are ignored.

        Returns:
            ``None`` when ``epoch`` is ``None`` (the caller keeps its last epoch);
            an ``int >= 1``; or :class:`NotChartable` for bool, strings,
            non-finite or negative values and other objects. Never raises an
            ``Exception``.
        """
        if epoch is None:
            return None
        try:
            resolved = self._resolve(epoch)
            if isinstance(resolved, NotChartable):
                return resolved
            if step == 0:
                return 1
            if type(num_epochs) is int and num_epochs >= 1:
                resolved = min(resolved, num_epochs)
        except OverflowError:  # e.g. a huge Fraction
            return NotChartable("too large")
        except Exception:
            return _OBJECT
        return resolved

    def _resolve(self, epoch: object) -> int | NotChartable:
        if _is_bool(epoch):
            return _BOOL
        if isinstance(epoch, numbers.Integral):
            index = int(epoch)
            if index < 0:
                return _NEGATIVE
            if self._zero_based is None:
                self._zero_based = index == 0
                get_logger().info(
                    "trainreport.epoch_rule", zero_based=self._zero_based, first_epoch=index
                )
            return max(1, index + 1 if self._zero_based else index)
        if isinstance(epoch, (numbers.Real, decimal.Decimal)):
            completed = float(epoch)
            if not math.isfinite(completed):
                return _NON_FINITE
            if completed < 0:
                return _NEGATIVE
            return max(1, math.ceil(completed))
        return _not_a_number(epoch)


# --------------------------------------------------------------------------- history


#: Prefix that makes a ``time_series_metrics`` entry an exclusion (``"!*_runtime"``).
EXCLUDE_PREFIX: Final[str] = "!"
#: Names kept as current values only that are logged (one event each) per reporter.
MAX_SCALAR_NOTES: Final[int] = 50
#: Charted names listed beside each of those events.
MAX_CHARTED_LISTED: Final[int] = 20


class SeriesSelector:
    """Decides, once per qualified name, whether a metric keeps a history (DESIGN §3).

    Rules, over qualified names (``train_loss``, ``val_runtime``), matched
    with :func:`fnmatch.fnmatchcase` (case-sensitive globs):

    - an entry ``"pattern"`` selects the names it matches (a series: every
      point kept); an entry ``"!pattern"`` excludes them (a scalar: the latest
      value only);
    - the *last* entry that matches a name decides (gitignore's rule), so
      ``["*", "!*_runtime", "val_runtime"]`` charts everything but runtimes,
      and ``val_runtime`` after all;
    - a name no entry matches is a scalar, except when the first entry is an
      exclusion: then the list starts from "every metric" (an implicit ``*``
      in front), so ``["!*_runtime"]`` alone charts everything but runtimes.

    Args:
        patterns: the ``time_series_metrics`` setting. ``None`` means
            ``default``; ``["*"]`` every metric; ``[]`` no history at all; a bare
            ``str`` is one pattern. Non-string entries are dropped with one
            warning each (``trainreport.config_pattern_dropped``); if entries were
            given but none is usable, or ``patterns`` is not iterable, every
            metric gets a history (warning ``trainreport.config_patterns_unusable``).
        default: the patterns used for ``None`` (an adapter's own default list).

    Each name decided to be a scalar is logged once at INFO
    (``trainreport.metric_kept_as_current_value`` with the ``name``, the
    ``rule`` that decided it and, as ``charted``, up to 20 names charted so
    far), for at most :data:`MAX_SCALAR_NOTES` names; then one
    ``trainreport.metric_kept_as_current_value_limit`` event.

    Only patterns the user gave are reported as never matched; ``default`` and
    the all-unusable fallback are not. Not thread-safe (reporter thread only).
    Never raises an ``Exception``.
    """

    def __init__(self, patterns: object, *, default: tuple[str, ...] = ("*",)) -> None:
        self._explicit = patterns is not None
        if patterns is None:
            chosen: list[str] = list(default)
        else:
            chosen = self._parse(patterns)
        self._patterns = tuple(dict.fromkeys(chosen))
        self._rules = tuple(
            (p, p.startswith(EXCLUDE_PREFIX), p[1:] if p.startswith(EXCLUDE_PREFIX) else p)
            for p in self._patterns
        )
        self._start_as_series = bool(self._rules) and self._rules[0][1]
        self._matched: set[str] = set()
        self._charted: list[str] = []
        self._scalar_notes = 0

    def _parse(self, patterns: object) -> list[str]:
        logger = get_logger()
        if isinstance(patterns, str):
            return [str.__str__(patterns)]
        entries: list[object] = []
        try:
            if isinstance(patterns, (bytes, bytearray)):
                raise TypeError("bytes are not a list of patterns")
            entries = list(cast("Iterable[object]", patterns))
        except Exception:
            self._explicit = False
            logger.warning(
                "trainreport.config_patterns_unusable",
                type=type(patterns).__name__,
                using=["*"],
            )
            return ["*"]
        usable: list[str] = []
        for index, entry in enumerate(entries):
            if isinstance(entry, str):
                usable.append(str.__str__(entry))
            else:
                logger.warning(
                    "trainreport.config_pattern_dropped",
                    index=index,
                    type=type(entry).__name__,
                )
        if entries and not usable:
            self._explicit = False
            logger.warning(
                "trainreport.config_patterns_unusable",
                type=type(patterns).__name__,
                using=["*"],
            )
            return ["*"]
        return usable

    @property
    def patterns(self) -> tuple[str, ...]:
        """The patterns in effect, in the order given, without repeats."""
        return self._patterns

    def is_series(self, name: str) -> bool:
        """Return whether the metric ``name`` keeps a history; remember which patterns matched.

        Every pattern is tried (the last match decides), so a pattern shadowed
        by another is not later reported as never matched. A scalar decision
        is logged (see the class docs).

        Args:
            name: a qualified metric name (``train_loss``).

        Returns:
            ``True`` for a series, ``False`` for a scalar. Never raises for a ``str``.
        """
        series = self._start_as_series
        rule: str | None = None
        for pattern, excludes, glob in self._rules:
            if fnmatch.fnmatchcase(name, glob):
                self._matched.add(pattern)
                series = not excludes
                rule = pattern
        if series:
            if len(self._charted) < MAX_CHARTED_LISTED:
                self._charted.append(name)
        else:
            self._note_scalar(name, rule)
        return series

    def _note_scalar(self, name: str, rule: str | None) -> None:
        self._scalar_notes += 1
        if self._scalar_notes > MAX_SCALAR_NOTES + 1:
            return
        if self._scalar_notes == MAX_SCALAR_NOTES + 1:
            get_logger().info(
                "trainreport.metric_kept_as_current_value_limit", logged=MAX_SCALAR_NOTES
            )
            return
        get_logger().info(
            "trainreport.metric_kept_as_current_value",
            name=name,
            rule=rule if rule is not None else "no pattern matched",
            charted=sorted(self._charted),
        )

    def unmatched_patterns(self) -> tuple[str, ...]:
        """User-given patterns that matched no name passed to :meth:`is_series` so far."""
        if not self._explicit:
            return ()
        return tuple(p for p in self._patterns if p not in self._matched)

    def log_unmatched(self, arrived: Iterable[str]) -> None:
        """Warn once per never-matched pattern (at ``close()``, DESIGN §3).

        Each warning is ``trainreport.pattern_never_matched`` with ``pattern=...``
        and ``arrived=`` the sorted list of at most 20 of the names that did
        arrive (plus ``arrived_count``), so a typo is easy to spot.

        Args:
            arrived: the qualified names the run reported.

        Never raises for an iterable of ``str``.
        """
        unmatched = self.unmatched_patterns()
        if not unmatched:
            return
        names = sorted(set(arrived))
        for pattern in unmatched:
            get_logger().warning(
                "trainreport.pattern_never_matched",
                pattern=pattern,
                arrived=names[:20],
                arrived_count=len(names),
            )


# --------------------------------------------------------------------------- hyperparameters

_MAX_PARAM_TEXT: Final[int] = 1000
_MAX_PARAM_LIST: Final[int] = 1000
_MAX_PARAM_DEPTH: Final[int] = 64
_CYCLE: Final[str] = "<cycle>"

MAX_PARAM_ITEMS: Final[int] = 10_000
"""Most items one ``report_hyperparameters`` call flattens on the caller's thread: each
key and each element of a list value counts one (a real run has a few hundred)."""


class _Budget:
    """Items left to flatten, and keys left out once they ran out."""

    __slots__ = ("dropped", "left")

    def __init__(self, items: int | None) -> None:
        self.left = items
        self.dropped = 0

    def take(self, value: object) -> bool:
        if self.left is None:
            return True
        cost = 1 + (len(value) if isinstance(value, (list, tuple)) else 0)
        if cost > self.left:
            self.dropped += 1
            return False
        self.left -= cost
        return True


def _safe_str(value: object) -> str:
    try:
        return str(value)[:_MAX_PARAM_TEXT]
    except Exception:
        try:
            return f"<unprintable {type(value).__name__}>"
        except Exception:
            return "<unprintable>"


_NOT_SCALAR: Final = object()


def _param_scalar(value: object) -> object:
    """Return the JSON scalar for ``value``, or ``_NOT_SCALAR``."""
    if value is None:
        return None
    if isinstance(value, str):
        return str.__str__(value)
    if _is_bool(value):
        return bool(value)  # bool or numpy.bool_
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        real = float(value)
        return real if math.isfinite(real) else repr(real)
    return _NOT_SCALAR


def _param_value(value: object) -> object:
    scalar = _param_scalar(value)
    if scalar is not _NOT_SCALAR:
        return scalar
    if isinstance(value, (list, tuple)) and len(value) <= _MAX_PARAM_LIST:
        items = [_param_scalar(item) for item in value]
        if all(item is not _NOT_SCALAR for item in items):
            return items
    return _safe_str(value)


def _flatten_into(
    out: dict[str, object],
    params: Mapping[Any, object],
    prefix: str,
    sep: str,
    path: list[int],
    budget: _Budget,
) -> None:
    path.append(id(params))
    try:
        for key, value in params.items():
            name = f"{prefix}{_safe_str(key)}"
            try:
                if isinstance(value, Mapping):
                    if id(value) in path:
                        out[name] = _CYCLE
                    elif len(path) >= _MAX_PARAM_DEPTH:
                        out[name] = _safe_str(value)
                    else:
                        _flatten_into(out, value, f"{name}{sep}", sep, path, budget)
                elif budget.take(value):
                    out[name] = _param_value(value)
            except Exception:
                out[name] = _safe_str(value)
    finally:
        path.pop()


def flatten_params(params: Mapping[str, object], sep: str = "/") -> dict[str, object]:
    """Flatten nested hyperparameters into one level of JSON scalars (DESIGN §2).

    ``{"opt": {"lr": 1e-4}}`` -> ``{"opt/lr": 1e-4}``. Keys that are not ``str``
    are converted with ``str()``. Values:

    - JSON scalars (``str``, ``int``, finite ``float``, ``bool``, ``None``) are
      kept; numpy scalars become the matching Python scalar;
    - non-finite floats become their repr (``"nan"``, ``"inf"``, ``"-inf"``);
    - lists and tuples of at most 1000 scalars are kept as lists (elements
      converted as above);
    - anything else becomes ``str(value)`` truncated to 1000 characters;
    - a mapping that contains itself is cut with the value ``"<cycle>"``;
      nesting deeper than 64 levels is kept as text; empty mappings contribute
      nothing. When two paths flatten to the same key, the later one wins.

    Args:
        params: the hyperparameters, possibly nested mappings.
        sep: the separator between the keys of nested mappings.

    Returns:
        A new flat ``dict``; ``{}`` when ``params`` is not a mapping.
        Never raises an ``Exception``.
    """
    return flatten_params_bounded(params, None, sep)[0]


def flatten_params_bounded(
    params: Mapping[str, object], max_items: int | None, sep: str = "/"
) -> tuple[dict[str, object], int]:
    """:func:`flatten_params` with a bound on the work done (the caller's thread does it).

    Args:
        params: the hyperparameters, possibly nested mappings.
        max_items: the most items flattened (each key and each element of a
            list value counts one; :data:`MAX_PARAM_ITEMS` for report calls), or
            ``None`` for no bound. A key that no longer fits is left out.
        sep: the separator between the keys of nested mappings.

    Returns:
        ``(flat, dropped)``: the flat ``dict`` and how many keys were left out.
        Never raises an ``Exception``.
    """
    out: dict[str, object] = {}
    budget = _Budget(max_items)
    # A mapping whose iteration fails keeps what was read before it failed.
    with contextlib.suppress(Exception):
        if isinstance(params, Mapping):
            _flatten_into(out, params, "", sep, [], budget)
    return out, budget.dropped
