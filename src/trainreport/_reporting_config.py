"""ReportingConfig: how a Reporter schedules and shapes its sends (docs/configuration.md).

One table of fields, one parser, three ways in. The class is the table: each
field's name, type, default and kind (``metadata["kind"]``, which decides how
it parses, its range and its clamp; its environment variable is
``TRAINREPORT_<NAME UPPERCASED>``). :func:`_parse` is the one parser. Each way
in only decides what to do with the problem it reports, worded the same in
every mode:

- ``ReportingConfig(...)`` (the attrs converters): a number out of range is
  clamped; any other problem raises ``TypeError`` or ``ValueError``.
- ``from_mapping(data)``, ``from_env(strict=True)``: the submission side. The
  one private cattrs :data:`CONVERTER` (``forbid_extra_keys``, detailed
  validation) structures the mapping, and every problem goes into one
  :class:`~trainreport.exceptions.ConfigError`, as ``transform_error`` lines
  (``"expected a number @ $.heartbeat_seconds"``) or with the variable
  (``"... @ TRAINREPORT_HEARTBEAT_SECONDS"``).
- ``from_mapping(data, strict=False)``, ``from_env()``, :func:`from_env_over`:
  the training process. The same structuring, from text (:func:`lenient`); a
  bad field keeps its default (or the given base), a number out of range is
  clamped, an unknown key is ignored, each with one log event. Never raises.
"""

from __future__ import annotations

import enum
import math
import numbers
import os
import reprlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias, TypeVar, cast

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
    "lenient",
]

ENV_PREFIX: Final = "TRAINREPORT_"
"""Prefix of every configuration environment variable: ``TRAINREPORT_<FIELD NAME UPPERCASED>``."""

#: What ``close()`` (and the exit hook) does with a run that made no terminal report
#: (docs/design.md#lifecycle): ``"outcome"`` reports what ``report_outcome`` would
#: (the exception being handled, else ``completed``); ``"keep"`` leaves the status.
STATUS_AT_CLOSE_CHOICES: Final = ("outcome", "keep")
#: The type of ``ReportingConfig.status_at_close``.
StatusAtClose: TypeAlias = Literal["outcome", "keep"]

MIN_QUEUE_BYTES: Final = 2**20
"""The smallest queue memory guard accepted (1 MiB, about a thousand reports of 14
metrics). A smaller one would drop most of a run's reports: lenient parsing falls
back to the default instead, with a warning."""

#: Variables that configured a field since replaced: set, they are ignored with a warning.
REPLACED_VARIABLES: Final[Mapping[str, str]] = {
    "TRAINREPORT_MAX_QUEUE_ITEMS": "TRAINREPORT_MAX_QUEUE_BYTES",
}

#: A flag's words in text (any case).
_FLAG_WORDS: Final = {
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("0", "false", "no", "off"), False),
}
#: Text that turns an optional duration off (any case).
_OFF: Final = frozenset({"", "none", "off"})


class _Kind(enum.Enum):
    """What a field holds; decides how it parses, its valid range and its clamp."""

    DURATION = "duration"  # float seconds, >= 0
    OPTIONAL_DURATION = "optional duration"  # None (off), or float seconds >= 0
    FRACTION = "fraction"  # float in [0, 1]
    FACTOR = "factor"  # float >= 1
    COUNT = "count"  # int >= 1
    GUARD_BYTES = "guard bytes"  # int >= MIN_QUEUE_BYTES; below it would throw the run away
    FLAG = "flag"  # bool
    PATTERNS = "patterns"  # None, or a tuple of glob patterns
    DIRECTORY = "directory"  # a directory path as text: non-empty, no NUL
    STATUS_AT_CLOSE = "status at close"  # one of STATUS_AT_CLOSE_CHOICES


#: Each numeric kind's range, both ends included.
_LIMITS: Final[Mapping[_Kind, tuple[float, float]]] = {
    _Kind.DURATION: (0.0, math.inf),
    _Kind.OPTIONAL_DURATION: (0.0, math.inf),
    _Kind.FRACTION: (0.0, 1.0),
    _Kind.FACTOR: (1.0, math.inf),
    _Kind.COUNT: (1, math.inf),
    _Kind.GUARD_BYTES: (MIN_QUEUE_BYTES, math.inf),
}
_INTEGRAL: Final = frozenset({_Kind.COUNT, _Kind.GUARD_BYTES})
#: Kinds whose out-of-range value would throw the run away: lenient parsing falls
#: back to the default (with a warning) instead of clamping.
_DEFAULT_WHEN_OUT_OF_RANGE: Final = frozenset({_Kind.GUARD_BYTES})


class _FieldError(ValueError):
    """One value's problem, worded like cattrs' ``transform_error`` lines (without the path).

    ``clamped`` is set for a number out of its field's range only: the nearest
    value in range, which direct construction and lenient parsing use.
    """

    __notes__: list[str]  # declared for mypy's 3.10 target; cattrs reads it on every version

    def __init__(self, text: str, clamped: float | None = None) -> None:
        super().__init__(text)
        self.clamped = clamped


class _FieldTypeError(_FieldError, TypeError):
    """A value of the wrong type (a ``TypeError`` to direct construction)."""


def _parse(kind: _Kind, value: object, *, text: bool) -> object:
    """The one parser: ``value`` as a ``kind`` value, range-checked. Pure.

    Args:
        kind: the field's kind.
        value: the value given.
        text: the runtime side's loose input (the environment, a lenient
            mapping): numbers, words and ``off`` parse from text, and ``0``/``1``
            are flags. ``False``: Python values only, as a job spec holds them.

    Raises:
        _FieldError: the value is unusable, or (with ``clamped``) out of range.
    """
    if kind is _Kind.PATTERNS:  # docs/design.md#metrics: a bare string is one pattern
        if value is None or isinstance(value, str):
            return None if value is None else (value,)
        if isinstance(value, bytes | bytearray | Mapping) or not isinstance(value, Iterable):
            raise _FieldTypeError("expected a list of glob patterns, a string or null")
        return tuple(value)  # entries kept as given: the selector drops non-strings, warned
    if kind is _Kind.DIRECTORY:
        path = os.fspath(value) if isinstance(value, os.PathLike) else value
        if not isinstance(path, str):
            raise _FieldTypeError("expected a directory path (non-empty text)")
        if not path.strip() or "\0" in path:
            raise _FieldError("expected a directory path (non-empty text)")
        return path
    word = value.strip().lower() if text and isinstance(value, str) else None
    if kind is _Kind.FLAG:
        if isinstance(value, bool):
            return value
        if word in _FLAG_WORDS:
            return _FLAG_WORDS[word]
        if text and isinstance(value, int) and value in (0, 1):
            return bool(value)
        words = "" if word is None else " (1/0/true/false/yes/no)"
        raise _FieldTypeError(f"expected a boolean{words}")
    if kind is _Kind.STATUS_AT_CLOSE:
        choice = value if word is None else word
        if isinstance(choice, str) and choice in STATUS_AT_CLOSE_CHOICES:
            return choice
        error = _FieldError if isinstance(value, str) else _FieldTypeError
        raise error(f"expected one of {', '.join(map(repr, STATUS_AT_CLOSE_CHOICES))}")
    if kind is _Kind.OPTIONAL_DURATION and (value is None or word in _OFF):
        return None
    if text and isinstance(value, str):
        value = _number_from_text(value)
    integral = kind in _INTEGRAL
    noun = "an integer" if integral else "a number"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _FieldTypeError(f"expected {noun}")
    try:
        number = float(value)
    except (OverflowError, ValueError):
        number = math.inf
    if not math.isfinite(number):
        raise _FieldError("expected a finite number")
    if integral and not number.is_integer():
        raise _FieldTypeError("expected an integer")
    parsed: float = number
    if integral:
        parsed = int(value) if isinstance(value, numbers.Integral) else int(number)
    low, high = _LIMITS[kind]
    if low <= parsed <= high:
        return parsed
    if high == math.inf:
        problem = f"expected {noun} >= {low if integral else f'{low:g}'} (got {parsed!r})"
    else:
        problem = f"expected {noun} between {low:g} and {high:g} (got {parsed!r})"
    raise _FieldError(problem, clamped=min(max(parsed, low), high))


def _number_from_text(text: str) -> object:
    stripped = text.strip()
    for parse in (int, float):
        try:
            return parse(stripped)
        except ValueError:
            pass
    return text


# --- direct construction: the attrs converters (clamp, never log) ------------------------


def _construct(kind: _Kind, value: object) -> object:
    try:
        return _parse(kind, value, text=False)
    except _FieldError as problem:
        if problem.clamped is not None:
            return problem.clamped
        error = TypeError if isinstance(problem, TypeError) else ValueError
        raise error(f"{problem}, got {reprlib.repr(value)}") from None


def _to_duration(value: float) -> float:
    return cast("float", _construct(_Kind.DURATION, value))


def _to_optional_duration(value: float | None) -> float | None:
    return cast("float | None", _construct(_Kind.OPTIONAL_DURATION, value))


def _to_fraction(value: float) -> float:
    return cast("float", _construct(_Kind.FRACTION, value))


def _to_factor(value: float) -> float:
    return cast("float", _construct(_Kind.FACTOR, value))


def _to_count(value: int) -> int:
    return cast("int", _construct(_Kind.COUNT, value))


def _to_guard_bytes(value: int) -> int:
    return cast("int", _construct(_Kind.GUARD_BYTES, value))


def _to_flag(value: bool) -> bool:
    return cast("bool", _construct(_Kind.FLAG, value))


def _to_patterns(value: str | Iterable[object] | None) -> tuple[object, ...] | None:
    return cast("tuple[object, ...] | None", _construct(_Kind.PATTERNS, value))


def _to_directory(value: str | os.PathLike[str]) -> str:
    return cast("str", _construct(_Kind.DIRECTORY, value))


def _to_status_at_close(value: str) -> StatusAtClose:
    return cast("StatusAtClose", _construct(_Kind.STATUS_AT_CLOSE, value))


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
        close_unanswered_seconds: budget of ``close()`` for a destination
            that has never answered since ``start()``: every open refused at
            connect, its host name unresolvable or its TLS handshake failed (a
            wrong URL), or its first open still waiting when ``close()``
            begins (nothing came back yet: a service that accepted the
            connection and hangs is not told from a wrong URL whose connect
            hangs). A destination that answered once (any HTTP status, a
            timeout or a reset is an answer) gets the whole close timeout,
            also when it hangs after. Seconds, default 2.0. The rule:
            docs/engine.md, "Closing" (issue 10).
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
            this many reports are queued, or sooner when the reports queued
            are estimated past 4 MiB (wide reports: about 800 of 100 metrics).
            Count (>= 1), default 10_000.
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
        system_metrics_seconds: sample the system stream (CPU, process
            memory, host memory and every GPU of the node: ``system_*``
            series, docs/design.md#the-system-stream) this often, on the
            reporter thread; needs the ``system`` extra (``psutil``,
            ``nvidia-ml-py``), each stream silently absent without its
            library. Seconds (``0``: at every wake of the reporter thread,
            at most every 50 ms), or ``None`` (default): off.
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
    system_metrics_seconds: float | None = attrs.field(
        default=None, converter=_to_optional_duration, metadata={"kind": _Kind.OPTIONAL_DURATION}
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
            return _lenient(data, ReportingConfig(), env=False)
        if not isinstance(data, Mapping):
            raise ConfigError(["expected a mapping @ $"])
        try:
            return CONVERTER.structure(dict(data), cls)
        except ClassValidationError as exc:
            raise ConfigError(transform_error(exc, "$", _describe)) from None

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
            return _lenient(env, ReportingConfig(), env=True)
        try:
            return _STRUCTURE_TEXT(_environment_values(env), cls)
        except ClassValidationError as exc:
            with_notes, _ = exc.group_exceptions()
            problems = [f"{_describe(e, n.type)} @ {env_variable(n.name)}" for e, n in with_notes]
            raise ConfigError(problems) from None

    def evolve(self, **changes: object) -> ReportingConfig:
        """Return a copy with ``changes`` applied (``attrs.evolve``); converters run again.

        Raises:
            TypeError: for an unknown field name or a value of the wrong type.
            ValueError: for a non-finite number.
        """
        return attrs.evolve(self, **cast("dict[str, Any]", changes))


# --- the converter: strict, and from text --------------------------------------------------


def env_variable(name: str) -> str:
    """The environment variable of config field ``name``: ``TRAINREPORT_<NAME UPPERCASED>``."""
    return ENV_PREFIX + name.upper()


def _environment_values(env: Mapping[str, object]) -> dict[str, object]:
    """Field -> the text of its variable, for the variables that are set (patterns split)."""
    values: dict[str, object] = {}
    for field in attrs.fields(ReportingConfig):
        if (variable := env_variable(field.name)) in env:
            raw = env[variable]
            if _kind(field) is _Kind.PATTERNS and isinstance(raw, str):
                raw = [piece.strip() for piece in raw.split(",") if piece.strip()]
            values[field.name] = raw
    return values


def _structure_hook(kind: _Kind, *, text: bool) -> Callable[[object, object], object]:
    def hook(value: object, _type: object) -> object:
        parsed = _parse(kind, value, text=text)
        if kind is _Kind.PATTERNS and not text and parsed:  # strict: each one a string
            assert isinstance(parsed, tuple)
            bad = [_entry_error(i) for i, entry in enumerate(parsed) if not isinstance(entry, str)]
            if bad:
                raise IterableValidationError("While structuring time_series_metrics", bad, tuple)
        return parsed

    return hook


def _entry_error(index: int) -> _FieldError:
    problem = _FieldTypeError("expected a string")
    problem.__notes__ = [IterableValidationNote(f"Structuring pattern @ index {index}", index, str)]
    return problem


def _describe(exc: BaseException, type_: type | None) -> str:
    """One problem's text: ours (and the destination settings' ``ValueError``) as raised."""
    if isinstance(exc, ForbiddenExtraKeysError):
        names = sorted(k if isinstance(k, str) else repr(k) for k in exc.extra_fields)
        return f"extra fields found ({', '.join(names)})"
    if isinstance(exc, ValueError):
        return str(exc)
    return _cattrs_format_exception(exc, type_)


def _structure_fn(*, text: bool) -> Callable[[Mapping[str, Any], Any], ReportingConfig]:
    hooks: dict[str, Any] = {
        field.name: override(struct_hook=_structure_hook(_kind(field), text=text))
        for field in attrs.fields(ReportingConfig)
    }
    return make_dict_structure_fn(ReportingConfig, CONVERTER, **hooks)


#: The one converter that parses configuration: ``ReportingConfig`` here (strictly;
#: :data:`_STRUCTURE_TEXT` from text), the destination settings in ``_environment``.
CONVERTER: Final = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
CONVERTER.register_structure_hook(ReportingConfig, _structure_fn(text=False))
_STRUCTURE_TEXT: Final = _structure_fn(text=True)


# --- the runtime side: lenient --------------------------------------------------------------

_T = TypeVar("_T")


def lenient(
    structure: Callable[[Mapping[str, Any], type[_T]], _T],
    cls: type[_T],
    given: Mapping[str, object],
    base: _T,
    variables: Mapping[str, str],
) -> _T:
    """Structure ``given`` (field -> value) over ``base``, keeping every good field.

    The runtime side's rule for every settings class the converter parses: a
    field whose value is refused keeps ``base``'s value, with one
    ``trainreport.config_field_invalid`` event; a number out of range is
    clamped (``trainreport.config_field_clamped``), unless its kind would
    throw the run away. Each event has ``field``, ``problem`` and, when
    ``variables`` names one, ``variable``.

    Returns:
        ``base`` with the given fields replaced. Never raises a validation error.
    """
    log = get_logger()
    given = dict(given)
    for _attempt in range(2):  # the second succeeds: every bad field is dropped or clamped
        try:
            parsed = structure(given, cls)
        except ClassValidationError as exc:
            for error, note in exc.group_exceptions()[0]:
                name = note.name
                context = {"field": name, "problem": _describe(error, note.type)}
                if name in variables:
                    context["variable"] = variables[name]
                field = attrs.fields_dict(cls)[name]  # type: ignore[arg-type]
                clamped = error.clamped if isinstance(error, _FieldError) else None
                if clamped is None or field.metadata.get("kind") in _DEFAULT_WHEN_OUT_OF_RANGE:
                    given.pop(name, None)
                    log.warning("trainreport.config_field_invalid", **context)
                else:
                    given[name] = clamped
                    log.warning("trainreport.config_field_clamped", **context, value=clamped)
            continue
        return attrs.evolve(base, **{name: getattr(parsed, name) for name in given})  # type: ignore[misc]
    return base


def _lenient(data: object, base: ReportingConfig, *, env: bool) -> ReportingConfig:
    """A mapping or the environment over ``base``; never raises (docs/design.md#guarantees)."""
    log = get_logger()
    try:
        if not isinstance(data, Mapping):
            log.warning("trainreport.config_not_a_mapping", type=type(data).__name__)
            return base
        if env:
            for variable, use in REPLACED_VARIABLES.items():
                if variable in data:
                    log.warning("trainreport.config_variable_replaced", variable=variable, use=use)
            given = _environment_values(data)
            variables = {name: env_variable(name) for name in given}
        else:
            names = attrs.fields_dict(ReportingConfig)
            for key in data:
                if key not in names:
                    log.warning("trainreport.config_field_unknown", field=_key_label(key))
            given = {key: value for key, value in data.items() if key in names}
            variables = {}
        return lenient(_STRUCTURE_TEXT, ReportingConfig, given, base, variables)
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
    merged = _lenient(environ, base, env=True)
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
