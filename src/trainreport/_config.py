"""ReportingConfig: how a Reporter schedules and shapes its sends (docs/design.md#layout).

Three ways in, one value out:

- ``ReportingConfig(...)``: direct construction. Forgiving where docs/design.md#metrics asks
  for it (a bare string pattern, a list of patterns, ints for float fields) and
  clamping where a number is out of range (a negative duration becomes 0);
  a value of the wrong type raises.
- ``ReportingConfig.from_mapping(data, strict=True)``: the submission-side
  check. One private cattrs converter (``forbid_extra_keys``, detailed
  validation) parses the mapping; every problem is collected into one
  :class:`~trainreport.exceptions.ConfigError` whose lines read like cattrs'
  ``transform_error`` output (``"expected a number @ $.heartbeat_seconds"``).
- ``from_mapping(data, strict=False)`` and ``from_env()``: the runtime side, in
  the training process. Never raises: a bad field falls back to its default and
  an unknown key is ignored, each with one log event.

Every field's kind (and so its parser, range and clamp) lives in the field's
attrs metadata, so the class definition is the single table of fields.
"""

from __future__ import annotations

import enum
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias, cast

import attrs
import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override
from cattrs.v import format_exception as _cattrs_format_exception
from cattrs.v import transform_error

from trainreport._logging import get_logger
from trainreport.exceptions import ConfigError

__all__ = [
    "CONVERTER",
    "ENV_PREFIX",
    "REPLACED_VARIABLES",
    "STATUS_AT_CLOSE_CHOICES",
    "ReportingConfig",
    "StatusAtClose",
    "env_variable",
    "from_env_over",
]

ENV_PREFIX: Final = "TRAINREPORT_"
"""Prefix of every configuration environment variable: ``TRAINREPORT_<FIELD NAME UPPERCASED>``."""

#: What ``close()`` (and the exit hook) does with a run that made no terminal report
#: (docs/design.md#lifecycle): ``"outcome"`` reports what ``report_outcome`` would
#: (the exception being handled, else ``completed``); ``"keep"`` leaves the status.
STATUS_AT_CLOSE_CHOICES: Final = ("outcome", "keep")
#: The type of ``ReportingConfig.status_at_close``.
StatusAtClose: TypeAlias = Literal["outcome", "keep"]

_TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS: Final = frozenset({"0", "false", "no", "off"})


class _Kind(enum.Enum):
    """What a field holds; decides its parser, its valid range and its clamp."""

    DURATION = "duration"  # float seconds, >= 0
    FRACTION = "fraction"  # float in [0, 1]
    FACTOR = "factor"  # float >= 1
    COUNT = "count"  # int >= 1
    GUARD_BYTES = "guard bytes"  # int >= MIN_QUEUE_BYTES; below it would throw the run away
    FLAG = "flag"  # bool
    PATTERNS = "patterns"  # None, or a tuple of glob patterns
    DIRECTORY = "directory"  # a directory path as text: non-empty, no NUL
    STATUS_AT_CLOSE = "status at close"  # one of STATUS_AT_CLOSE_CHOICES


class _FieldError(ValueError):
    """One value's problem, worded like cattrs' ``transform_error`` lines (without the path)."""

    __notes__: list[str]  # declared for mypy's 3.10 target; cattrs reads it on every version


# --- direct construction: attrs converters (clamp, never log) ---------------------------


def _real(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {number!r}")
    return number


def _to_duration(value: float) -> float:
    return max(0.0, _real(value))


def _to_fraction(value: float) -> float:
    return min(1.0, max(0.0, _real(value)))


def _to_factor(value: float) -> float:
    return max(1.0, _real(value))


def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return int(value)


def _to_count(value: int) -> int:
    return max(1, _integer(value))


MIN_QUEUE_BYTES: Final = 2**20
"""The smallest queue memory guard accepted (1 MiB, about a thousand reports of 14
metrics). A smaller one would drop most of a run's reports: lenient parsing falls
back to the default instead, with a warning."""


def _to_guard_bytes(value: int) -> int:
    return max(MIN_QUEUE_BYTES, _integer(value))


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool, got {type(value).__name__}")
    return value


def _to_flag(value: bool) -> bool:
    return _boolean(value)


def _to_directory(value: str | os.PathLike[str]) -> str:
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"expected a directory path, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise TypeError("expected a directory path as text, got bytes")
    if not text.strip() or "\0" in text:
        raise ValueError(f"expected a non-empty directory path without NUL, got {text!r}")
    return text


def _to_status_at_close(value: str) -> StatusAtClose:
    if not isinstance(value, str):
        raise TypeError(f"expected one of {STATUS_AT_CLOSE_CHOICES}, got {type(value).__name__}")
    if value not in STATUS_AT_CLOSE_CHOICES:
        raise ValueError(f"expected one of {STATUS_AT_CLOSE_CHOICES}, got {value!r}")
    return cast("StatusAtClose", value)


def _to_patterns(value: str | Iterable[object] | None) -> tuple[object, ...] | None:
    # docs/design.md#metrics: a bare string is one pattern; entries are kept as given (the
    # selector drops non-string entries with a warning).
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise TypeError(
            f"expected a list of glob patterns, a string or None, got {type(value).__name__}"
        )
    return tuple(value)


_CONVERTERS: Final[Mapping[_Kind, Callable[[Any], object]]] = {
    _Kind.DURATION: _to_duration,
    _Kind.FRACTION: _to_fraction,
    _Kind.FACTOR: _to_factor,
    _Kind.COUNT: _to_count,
    _Kind.GUARD_BYTES: _to_guard_bytes,
    _Kind.FLAG: _to_flag,
    _Kind.PATTERNS: _to_patterns,
    _Kind.DIRECTORY: _to_directory,
    _Kind.STATUS_AT_CLOSE: _to_status_at_close,
}


def _kind(field: attrs.Attribute[Any]) -> _Kind:
    kind = field.metadata["kind"]
    assert isinstance(kind, _Kind)
    return kind


@attrs.frozen(kw_only=True)
class ReportingConfig:
    """How a Reporter schedules and shapes its sends. Every duration is in seconds.

    A frozen value: change it with :meth:`evolve`. Each field can also be set
    from the environment variable ``TRAINREPORT_<FIELD NAME UPPERCASED>``
    (:meth:`from_env`); ``docs/configuration.md`` has the full table.

    Direct construction accepts ints for float fields, a bare string for
    ``time_series_metrics`` (one pattern) and any iterable of patterns (made a
    tuple, entries kept as given). Out-of-range numbers are clamped: durations
    to >= 0, counts to >= 1, ``max_queue_bytes`` to >= 1 MiB,
    ``backoff_multiplier`` to >= 1, ``backoff_jitter`` into [0, 1].

    Attributes:
        min_report_interval_seconds: debounce; regular sends go at most this
            often (the first report and events go at once). Seconds, default
            10.0. docs/design.md#shape.
        heartbeat_seconds: send at least this often even when nothing changed,
            so a job system can tell a hung run from a slow one. Seconds,
            default 60.0. docs/design.md#metrics (liveness).
        time_series_metrics: glob patterns over qualified metric names
            (``fnmatch.fnmatchcase``) whose history is kept; ``None`` is the
            default (every metric, or an adapter's own list), ``("*",)`` every
            metric, ``()`` no history. Non-string entries are kept here and
            dropped with a warning by the selector. Default None. docs/design.md#metrics.
        max_metric_names: distinct qualified metric names per run; names beyond
            it are dropped and counted. Count (>= 1), default 1000. docs/design.md#failure-handling.
        backoff_initial_seconds: first retry delay after a failed send.
            Seconds, default 1.0. docs/design.md#failure-handling.
        backoff_max_seconds: cap of the exponential backoff. Seconds, default
            60.0. docs/design.md#failure-handling.
        backoff_multiplier: factor between consecutive retry delays. Ratio
            (>= 1), default 2.0. docs/design.md#failure-handling.
        backoff_jitter: each delay is multiplied by a random factor in
            ``[1 - j, 1 + j]``. Fraction in [0, 1], default 0.2. docs/design.md#failure-handling.
        rejected_backoff_seconds: the long backoff after a rejection
            (400/401/403/404/422); a retry of a send also waits for new data. Seconds,
            default 300.0. docs/design.md#failure-handling.
        close_timeout_seconds: budget of ``Reporter.close()`` when no timeout
            is passed. Seconds, default 30.0. docs/design.md#shape, #failure-handling.
        close_retry_max_seconds: while closing, attempts are at most this far
            apart, whatever the backoff had grown to, and one last attempt is
            made before the deadline when there is time for one. Seconds,
            default 1.0.
        close_unanswered_seconds: budget of ``close()`` while the destination
            has never answered since ``start()`` (every attempt refused at
            connect, its name unresolvable or its TLS handshake failed: a wrong
            URL); a destination that
            answered once, or that accepts and hangs, gets the whole close
            timeout. Seconds, default 2.0.
        atexit_timeout_seconds: budget of the ``atexit`` fallback close of a
            reporter the user forgot to close. Seconds, default 5.0.
            docs/design.md#failure-handling.
        max_queue_bytes: the queue's memory guard, in bytes of queued reports
            (estimated cheaply on the caller's thread: about 256 bytes a report
            plus 48 a metric value); a report arriving past it is dropped and
            counted (``queue_full``), and ``close()`` returns False. Bytes
            (>= 1 MiB; a smaller value falls back to the default in lenient
            parsing, with a warning), default 256 MiB.
        drain_queue_depth: the reporter thread wakes to drain (not send) when
            this many reports are queued. Count (>= 1), default 10_000.
            docs/design.md#shape, #failure-handling.
        unsent_warning_seconds: warn (rate-limited) when undelivered data is
            older than this. Seconds, default 300.0. docs/design.md#failure-handling.
        strict_transitions: raise ``TransitionError`` on refused status or
            phase transitions instead of logging them; for tests only. Default
            False. docs/design.md#lifecycle.
        journal: keep a journal (a local run log of what the reporter
            recorded) in front of a destination that is not itself a local
            file, so a killed process loses at most ``journal_interval_seconds``
            of points; the next process on the same job and task sends what it
            holds (``docs/engine.md``, "The journal"). ``TRAINREPORT_JOURNAL=0``
            turns it off for every reporter of the process. Default True.
        journal_dir: the directory journals go to, as
            ``<journal_dir>/<job id>/<task id>.log``; relative to the working
            directory. Text, default ``"trainreport-runs/journal"``.
        journal_interval_seconds: the reporter thread drains the queue and
            appends to the journal (one ``write()``) at least this often.
            Seconds, default 1.0.
        journal_fsync_seconds: the journal is ``fsync``-ed at most this often
            (and at close), bounding what a power loss, not a killed process,
            can take. Seconds, default 10.0.
        status_at_close: what ``close()`` and the exit hook do with a run
            that made no terminal report (docs/design.md#lifecycle):
            ``"outcome"`` reports what :meth:`Reporter.report_outcome` would
            for the exception being handled when ``close()`` is called (in a
            ``finally`` or ``except`` while it propagates: ``failed``, or
            ``cancelled`` for Ctrl-C) and otherwise ``completed``, with one
            ``trainreport.completed_at_close`` warning; ``"keep"`` leaves the
            status as it is (``running``). One of ``"outcome"``, ``"keep"``;
            default ``"outcome"``.
    """

    min_report_interval_seconds: float = attrs.field(
        default=10.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    heartbeat_seconds: float = attrs.field(
        default=60.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    time_series_metrics: tuple[object, ...] | None = attrs.field(
        default=None, converter=_to_patterns, metadata={"kind": _Kind.PATTERNS}
    )
    max_metric_names: int = attrs.field(
        default=1000, converter=_to_count, metadata={"kind": _Kind.COUNT}
    )
    backoff_initial_seconds: float = attrs.field(
        default=1.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    backoff_max_seconds: float = attrs.field(
        default=60.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    backoff_multiplier: float = attrs.field(
        default=2.0, converter=_to_factor, metadata={"kind": _Kind.FACTOR}
    )
    backoff_jitter: float = attrs.field(
        default=0.2, converter=_to_fraction, metadata={"kind": _Kind.FRACTION}
    )
    rejected_backoff_seconds: float = attrs.field(
        default=300.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    close_timeout_seconds: float = attrs.field(
        default=30.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    close_retry_max_seconds: float = attrs.field(
        default=1.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    close_unanswered_seconds: float = attrs.field(
        default=2.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    atexit_timeout_seconds: float = attrs.field(
        default=5.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    max_queue_bytes: int = attrs.field(
        default=256 * 2**20, converter=_to_guard_bytes, metadata={"kind": _Kind.GUARD_BYTES}
    )
    drain_queue_depth: int = attrs.field(
        default=10_000, converter=_to_count, metadata={"kind": _Kind.COUNT}
    )
    unsent_warning_seconds: float = attrs.field(
        default=300.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    strict_transitions: bool = attrs.field(
        default=False, converter=_to_flag, metadata={"kind": _Kind.FLAG}
    )
    journal: bool = attrs.field(default=True, converter=_to_flag, metadata={"kind": _Kind.FLAG})
    journal_dir: str = attrs.field(
        default="trainreport-runs/journal",
        converter=_to_directory,
        metadata={"kind": _Kind.DIRECTORY},
    )
    journal_interval_seconds: float = attrs.field(
        default=1.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    journal_fsync_seconds: float = attrs.field(
        default=10.0, converter=_to_duration, metadata={"kind": _Kind.DURATION}
    )
    status_at_close: StatusAtClose = attrs.field(
        default="outcome", converter=_to_status_at_close, metadata={"kind": _Kind.STATUS_AT_CLOSE}
    )

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], *, strict: bool = True) -> ReportingConfig:
        """Parse a configuration mapping (for example a job spec's JSON or YAML section).

        Args:
            data: field name -> value. Missing fields keep their defaults.
            strict: ``True`` (submission side): unknown keys, wrong types (a
                bool is not a number, nor is a numeric string), non-finite and
                out-of-range numbers and non-string patterns are all errors.
                ``False`` (runtime side): a bad field falls back to its default
                (log event ``trainreport.config_field_invalid``), an unknown
                key is ignored (``trainreport.config_field_unknown``), an
                out-of-range number is clamped (``trainreport.config_field_clamped``),
                numeric and boolean strings are accepted, and a non-mapping gives
                the defaults (``trainreport.config_not_a_mapping``).

        Returns:
            The parsed configuration.

        Raises:
            ConfigError: only when ``strict``; one error listing every problem,
                each as ``"<problem> @ <path>"``, e.g.
                ``"expected a number @ $.heartbeat_seconds"``. With
                ``strict=False`` this never raises, whatever ``data`` is.
        """
        if not strict:
            return _lenient(data, env=False)
        if not isinstance(data, Mapping):
            raise ConfigError(["expected a mapping @ $"])
        try:
            return CONVERTER.structure(dict(data), cls)
        except (ClassValidationError, IterableValidationError) as exc:
            raise ConfigError(transform_error(exc, "$", _format_problem)) from None

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, strict: bool = False
    ) -> ReportingConfig:
        """Read ``TRAINREPORT_<FIELD NAME UPPERCASED>`` for every field.

        Unset variables keep their defaults; other variables (``TRAINREPORT_URL``,
        ``TRAINREPORT_TOKEN``, ...) are read elsewhere and ignored here. Numbers
        are parsed from their text; ``TRAINREPORT_STRICT_TRANSITIONS`` takes
        1/0/true/false/yes/no/on/off (any case); ``TRAINREPORT_TIME_SERIES_METRICS``
        is a comma-separated list of patterns (blanks stripped, empty items
        dropped), where an empty value means ``()``: no history.

        Args:
            environ: the environment to read; ``None`` means ``os.environ``.
            strict: ``False`` (default, the training process): a bad variable
                falls back to its default with one log event
                (``trainreport.config_field_invalid``, with ``variable=``), an
                out-of-range number is clamped (logged). ``True``: raise.

        Returns:
            The parsed configuration.

        Raises:
            ConfigError: only when ``strict``; one error listing every bad
                variable, e.g. ``"expected a number @ TRAINREPORT_HEARTBEAT_SECONDS"``.
                With ``strict=False`` this never raises.
        """
        env: Mapping[str, object] = os.environ if environ is None else environ
        if not strict:
            return _lenient(env, env=True)
        values: dict[str, Any] = {}
        problems: list[str] = []
        for field in attrs.fields(cls):
            variable = env_variable(field.name)
            if variable not in env:
                continue
            try:
                values[field.name] = _check(_kind(field), _env_value(field, env[variable]))
            except _FieldError as exc:
                problems.append(f"{exc} @ {variable}")
        if problems:
            raise ConfigError(problems)
        return cls(**values)

    def evolve(self, **changes: object) -> ReportingConfig:
        """Return a copy with ``changes`` applied (``attrs.evolve``); converters run again.

        Raises:
            TypeError: for an unknown field name or a value of the wrong type.
            ValueError: for a non-finite number.
        """
        return attrs.evolve(self, **cast("dict[str, Any]", changes))


# --- parsing shared by the strict and lenient paths -------------------------------------


def _parse(kind: _Kind, value: object, *, strings: bool) -> object:
    """Coerce ``value`` to ``kind``'s type, without a range check.

    ``strings`` allows text for numbers and flags (environment variables, lenient
    mode). Raises _FieldError.
    """
    if kind is _Kind.PATTERNS:
        return _parse_patterns(value, strict=not strings)
    if kind is _Kind.FLAG:
        return _parse_flag(value, strings=strings)
    if kind is _Kind.DIRECTORY:
        if not isinstance(value, str) or not value.strip() or "\0" in value:
            raise _FieldError("expected a directory path (non-empty text)")
        return value
    if kind is _Kind.STATUS_AT_CLOSE:
        word = value.strip().lower() if strings and isinstance(value, str) else value
        if word not in STATUS_AT_CLOSE_CHOICES:
            raise _FieldError(f"expected one of {', '.join(map(repr, STATUS_AT_CLOSE_CHOICES))}")
        return word
    if strings and isinstance(value, str):
        value = _number_from_text(value)
    integral = kind in (_Kind.COUNT, _Kind.GUARD_BYTES)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _FieldError("expected an integer" if integral else "expected a number")
    try:
        number = float(value)
    except (OverflowError, ValueError):
        number = math.inf
    if not math.isfinite(number):
        raise _FieldError("expected a finite number")
    if not integral:
        return number
    if isinstance(value, numbers.Integral):
        return int(value)
    if number.is_integer():
        return int(number)
    raise _FieldError("expected an integer")


def _number_from_text(text: str) -> object:
    stripped = text.strip()
    for parse in (int, float):
        try:
            return parse(stripped)
        except ValueError:
            pass
    return text


def _parse_flag(value: object, *, strings: bool) -> bool:
    if isinstance(value, bool):
        return value
    if strings and isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS or word in _FALSE_WORDS:
            return word in _TRUE_WORDS
        raise _FieldError("expected a boolean (1/0/true/false/yes/no)")
    if strings and isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _FieldError("expected a boolean")


def _parse_patterns(value: object, *, strict: bool) -> tuple[object, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple):
        raise _FieldError("expected a list of glob patterns, a string or null")
    if strict:
        bad = []
        for index, entry in enumerate(value):
            if not isinstance(entry, str):
                problem = _FieldError("expected a string")
                problem.__notes__ = [
                    IterableValidationNote(f"Structuring pattern @ index {index}", index, str)
                ]
                bad.append(problem)
        if bad:
            raise IterableValidationError("While structuring time_series_metrics", bad, tuple)
    return tuple(value)


_LIMITS: Final[Mapping[_Kind, tuple[float, float]]] = {
    _Kind.DURATION: (0.0, math.inf),
    _Kind.FRACTION: (0.0, 1.0),
    _Kind.FACTOR: (1.0, math.inf),
    _Kind.COUNT: (1, math.inf),
    _Kind.GUARD_BYTES: (MIN_QUEUE_BYTES, math.inf),
}
#: Kinds whose out-of-range value would throw the run away: lenient parsing falls
#: back to the default (with a warning) instead of clamping.
_DEFAULT_WHEN_OUT_OF_RANGE: Final = frozenset({_Kind.GUARD_BYTES})
#: Variables that configured a field since replaced: set, they are ignored with a warning.
REPLACED_VARIABLES: Final[Mapping[str, str]] = {
    "TRAINREPORT_MAX_QUEUE_ITEMS": "TRAINREPORT_MAX_QUEUE_BYTES",
}


def _range_problem(kind: _Kind, value: object) -> str | None:
    """Return why ``value`` (already parsed) is outside ``kind``'s range, or None."""
    if kind not in _LIMITS or not isinstance(value, int | float):
        return None
    low, high = _LIMITS[kind]
    if low <= value <= high:
        return None
    integral = kind in (_Kind.COUNT, _Kind.GUARD_BYTES)
    noun = "an integer" if integral else "a number"
    if high == math.inf:
        return f"expected {noun} >= {int(low) if integral else f'{low:g}'} (got {value!r})"
    return f"expected {noun} between {low:g} and {high:g} (got {value!r})"


def _check(kind: _Kind, value: object, *, strings: bool = True) -> object:
    """Parse and range-check one value, strictly. Raises _FieldError."""
    parsed = _parse(kind, value, strings=strings)
    problem = _range_problem(kind, parsed)
    if problem is not None:
        raise _FieldError(problem)
    return parsed


def _strict_hook(kind: _Kind) -> Callable[[object, object], object]:
    def hook(value: object, _type: object) -> object:
        return _check(kind, value, strings=False)

    return hook


def _format_problem(exc: BaseException, type_: type | None) -> str:
    if isinstance(exc, _FieldError):
        return str(exc)
    if isinstance(exc, ForbiddenExtraKeysError):
        names = sorted(k if isinstance(k, str) else repr(k) for k in exc.extra_fields)
        return f"extra fields found ({', '.join(names)})"
    return _cattrs_format_exception(exc, type_)


def env_variable(name: str) -> str:
    """The environment variable of config field ``name``: ``TRAINREPORT_<NAME UPPERCASED>``."""
    return ENV_PREFIX + name.upper()


def _env_value(field: attrs.Attribute[Any], raw: object) -> object:
    if _kind(field) is _Kind.PATTERNS and isinstance(raw, str):
        return [piece.strip() for piece in raw.split(",") if piece.strip()]
    return raw


def from_env_over(environ: Mapping[str, object], base: ReportingConfig) -> ReportingConfig:
    """``ReportingConfig.from_env(environ)`` with ``base`` in place of the defaults.

    What ``Reporter.from_env(config=base)`` uses (docs/configuration.md): each
    config variable that is set replaces ``base``'s field; a bad one keeps
    ``base``'s value (``trainreport.config_field_invalid``, as without a base).
    When a variable changed a field of ``base``, one
    ``trainreport.config_overridden`` event names the fields and variables, so
    a value given in code that the environment replaced is never a mystery.

    Returns:
        the merged configuration. Never raises.
    """
    merged = _lenient(environ, env=True, base=base)
    changed = [
        f.name
        for f in attrs.fields(ReportingConfig)
        if getattr(merged, f.name) != getattr(base, f.name)
    ]
    if changed:
        get_logger().info(
            "trainreport.config_overridden",
            fields=changed,
            variables=[env_variable(name) for name in changed],
        )
    return merged


def _lenient(data: object, *, env: bool, base: ReportingConfig | None = None) -> ReportingConfig:
    """Build a config keeping every good field; never raises.

    Fields not given (or given badly) keep ``base``'s values (default:
    ``ReportingConfig()``'s). See docs/design.md#guarantees, #layout.
    """
    log = get_logger()
    if base is None:
        base = ReportingConfig()
    try:
        if not isinstance(data, Mapping):
            log.warning("trainreport.config_not_a_mapping", type=type(data).__name__)
            return base
        fields = {field.name: field for field in attrs.fields(ReportingConfig)}
        if env:
            items = [
                (name, data[env_variable(name)]) for name in fields if env_variable(name) in data
            ]
        else:
            items = list(data.items())
        if env:
            for variable, use in REPLACED_VARIABLES.items():
                if variable in data:
                    log.warning("trainreport.config_variable_replaced", variable=variable, use=use)
        values: dict[str, Any] = {}
        for key, raw in items:
            context = {"variable": env_variable(key)} if env else {}
            field = fields.get(key) if isinstance(key, str) else None
            if field is None:
                log.warning("trainreport.config_field_unknown", field=_key_label(key))
                continue
            kind = _kind(field)
            try:
                parsed = _parse(kind, _env_value(field, raw) if env else raw, strings=True)
            except _FieldError as exc:
                log.warning(
                    "trainreport.config_field_invalid", field=key, problem=str(exc), **context
                )
                continue
            problem = _range_problem(kind, parsed)
            if problem is not None and kind in _DEFAULT_WHEN_OUT_OF_RANGE:
                log.warning(
                    "trainreport.config_field_invalid", field=key, problem=problem, **context
                )
                continue
            if problem is not None:
                parsed = _CONVERTERS[kind](parsed)
                log.warning(
                    "trainreport.config_field_clamped",
                    field=key,
                    problem=problem,
                    value=parsed,
                    **context,
                )
            values[key] = parsed
        return attrs.evolve(base, **values)
    except Exception as exc:
        log.warning("trainreport.config_unreadable", error=type(exc).__name__)
        return base


def _key_label(key: object) -> str:
    if isinstance(key, str):
        return key
    try:
        return repr(key)[:100]
    except Exception:
        return f"<{type(key).__name__}>"


#: The one converter that parses configuration: ``ReportingConfig`` here, the
#: destination settings read from the environment in ``_environment``.
CONVERTER: Final = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
_overrides: dict[str, Any] = {
    field.name: override(struct_hook=_strict_hook(_kind(field)))
    for field in attrs.fields(ReportingConfig)
}
CONVERTER.register_structure_hook(
    ReportingConfig, make_dict_structure_fn(ReportingConfig, CONVERTER, **_overrides)
)
