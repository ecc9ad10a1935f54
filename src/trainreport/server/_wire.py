"""The reference server's wire vocabulary: ids, strict JSON, request validation, errors.

Everything here is pure (no I/O, no clock): a request body arrives as bytes
already read within the limits (``_app``), is parsed as strict JSON, and is
validated into frozen values that the storage layer (``_db``) applies. Every
refusal is an :class:`ApiError` carrying the HTTP status and the error code of
``docs/protocol.md``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import attrs

from trainreport._protocol import (
    COLUMN_TYPECODES,
    ID_PATTERN,
    MAX_SERIES_NAME_CHARS,
    TASK_STATUSES,
    VALUES_TYPECODE,
    decode_column,
)

__all__ = [
    "ApiError",
    "SeriesPoints",
    "TaskPatch",
    "TaskUpdate",
    "WriterClaim",
    "parse_json",
    "validate_id",
    "validate_patch",
    "validate_series_name",
    "validate_update",
    "validate_writer_claim",
]

#: Largest step, epoch, offset, generation or sequence accepted (SQLite's INTEGER).
MAX_INT = 2**63 - 1

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_POINT_KEYS = frozenset({"step", "epoch", "value"})
_SERIES_KEYS = frozenset({"offset", "steps", "epochs", "values"})
_PATCH_KEYS = frozenset({"status", "status_details"})
_UPDATE_KEYS = frozenset({"writer_generation", "sequence", "status", "status_details", "series"})


class ApiError(Exception):
    """A request the server refuses; rendered as ``{"error": code, "message": ...}``.

    Args:
        status_code: the HTTP status, e.g. 400, 413, 422.
        code: the machine-readable error code (``docs/protocol.md``), e.g.
            ``"invalid_id"``.
        message: human-readable text; never contains a token.
        extra: further JSON fields of the error body (e.g. ``"path"``,
            ``"series_lengths"``).
    """

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.extra: dict[str, Any] = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """The JSON error body. Never raises."""
        return {"error": self.code, "message": self.message, **self.extra}


@attrs.frozen
class SeriesPoints:
    """Points for one series, as columns: "from index ``offset`` on, the series is exactly these".

    Args:
        name: the series (metric) name, 1..200 characters, no control characters.
        offset: index of the first point given (0 for a PATCH's ``metrics``).
        steps: each point's step (int >= 0).
        epochs: each point's epoch (int >= 0) or ``None``.
        values: each point's value (a finite float) or ``None`` for a
            non-finite point.
    """

    name: str
    offset: int
    steps: Sequence[int]
    epochs: Sequence[int | None]
    values: Sequence[float | None]

    def __len__(self) -> int:
        return len(self.steps)


@attrs.frozen
class TaskPatch:
    """A validated baseline ``PATCH`` body.

    Args:
        status: the status to store, or ``None`` to keep the stored one.
        details: ``status_details`` keys to merge shallowly, without ``metrics``.
        metrics: every series of the task (each ``offset == 0``) when the body
            sent ``status_details.metrics``; ``None`` keeps the stored series.
    """

    status: str | None
    details: Mapping[str, Any]
    metrics: tuple[SeriesPoints, ...] | None


@attrs.frozen
class TaskUpdate:
    """A validated ``series-suffix-v1`` update body.

    Args:
        writer_generation: the generation the writer was issued.
        sequence: the writer's sequence number for this request.
        status: the status to store, or ``None`` to keep the stored one.
        details: ``status_details`` keys to merge shallowly (never ``metrics``).
        series: the suffixes to apply, one per named series.
    """

    writer_generation: int
    sequence: int
    status: str | None
    details: Mapping[str, Any]
    series: tuple[SeriesPoints, ...]


@attrs.frozen
class WriterClaim:
    """The attempt identity a writer claims a task with (``POST .../writers``).

    Args:
        number: the attempt number the job system gave the process
            (``TRAINREPORT_ATTEMPT``, ``TORCHELASTIC_RESTART_COUNT``, ...), or ``None``.
        started_at: the process's start time, seconds since the Unix epoch, or ``None``.
    """

    number: int | None = None
    started_at: float | None = None

    def is_older_than(self, holder: WriterClaim) -> bool:
        """Whether this claim belongs to an earlier attempt than ``holder``'s.

        Attempt numbers decide when both claims have one and they differ;
        otherwise process start times decide when both have one. A claim equal
        to the holder's (the same attempt re-opening) or one that cannot be
        ordered (no identity) is not older.
        """
        if self.number is not None and holder.number is not None and self.number != holder.number:
            return self.number < holder.number
        if self.started_at is not None and holder.started_at is not None:
            return self.started_at < holder.started_at
        return False

    def to_json(self) -> dict[str, Any]:
        """The claim as the ``holder`` field of a 409 ``stale_attempt`` body."""
        return {"number": self.number, "started_at": self.started_at}


def validate_writer_claim(doc: Any) -> WriterClaim:
    """Validate a ``POST .../writers`` body: ``{}`` or ``{"attempt": {"number"?, "started_at"?}}``.

    Other keys are ignored (forward compatibility); ``None`` (no body) is no claim.

    Raises:
        ApiError: 422 ``invalid_body`` naming the path (``$.attempt.number`` must be an
            integer >= 0 or null, ``$.attempt.started_at`` a finite number >= 0 or null).
    """
    if doc is None:
        return WriterClaim()
    obj = _object(doc, "$")
    attempt = obj.get("attempt")
    if attempt is None:
        return WriterClaim()
    fields = _object(attempt, "$.attempt")
    number = fields.get("number")
    if number is not None:
        number = _int(number, "$.attempt.number", minimum=0)
    started_at = _number(fields.get("started_at"), "$.attempt.started_at")
    if started_at is not None and started_at < 0:
        _invalid("expected a number >= 0 or null", "$.attempt.started_at")
    return WriterClaim(number=number, started_at=started_at)


def validate_id(value: str, what: str) -> str:
    """Check a job or task id against ``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$``.

    Args:
        value: the id, as decoded from the URL path.
        what: ``"job_id"`` or ``"task_id"``, for the message.

    Returns:
        ``value`` unchanged.

    Raises:
        ApiError: 400 ``invalid_id`` when the id does not match (docs/protocol.md).
    """
    if ID_PATTERN.fullmatch(value) is None:
        raise ApiError(400, "invalid_id", f"{what} must match ^{ID_PATTERN.pattern}$")
    return value


def validate_series_name(name: object, path: str) -> str:
    """Check a series name: a string of 1..200 characters without control characters.

    Args:
        name: the candidate name.
        path: where it sits in the body, for the message (e.g. ``"$.series"``).

    Returns:
        The name.

    Raises:
        ApiError: 422 ``invalid_body`` naming ``path``.
    """
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_SERIES_NAME_CHARS:
        _invalid(f"a series name must be 1..{MAX_SERIES_NAME_CHARS} characters", path)
    if _CONTROL_RE.search(name) is not None:
        _invalid("a series name must not contain control characters", path)
    return name


def _reject_constant(token: str) -> NoReturn:
    raise ValueError(f"{token} is not JSON (non-finite numbers are not allowed)")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def parse_json(body: bytes | bytearray) -> Any:
    """Parse a request body as strict JSON (no NaN/Infinity tokens, no overflowing numbers).

    Args:
        body: the (decompressed) body bytes, UTF-8.

    Returns:
        The parsed document.

    Raises:
        ApiError: 400 ``invalid_json`` (docs/design.md#metrics: payloads are always strict JSON).
    """
    try:
        return json.loads(body, parse_constant=_reject_constant, parse_float=_parse_float)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"body is not strict JSON: {exc}") from None


def validate_patch(doc: Any) -> TaskPatch:
    """Validate a baseline ``PATCH /v1/jobs/{job_id}/tasks/{task_id}`` body.

    Args:
        doc: the parsed body: ``{"status"?: str, "status_details"?: object}``.

    Returns:
        The validated patch.

    Raises:
        ApiError: 422 ``invalid_body`` with ``path`` naming the first problem.
    """
    obj = _object(doc, "$")
    _known_keys(obj, _PATCH_KEYS, "$")
    status = _status(obj)
    details = dict(_object(obj.get("status_details", {}), "$.status_details"))
    metrics: tuple[SeriesPoints, ...] | None = None
    if "metrics" in details:
        raw = _object(details.pop("metrics"), "$.status_details.metrics")
        metrics = tuple(
            _point_list(validate_series_name(name, "$.status_details.metrics"), points)
            for name, points in raw.items()
        )
    return TaskPatch(status=status, details=details, metrics=metrics)


def validate_update(doc: Any) -> TaskUpdate:
    """Validate a ``POST .../updates`` body of the ``series-suffix-v1`` extension.

    Args:
        doc: the parsed body: ``{"writer_generation": int, "sequence": int,
            "status"?: str, "status_details"?: object, "series"?: {name:
            {"offset": int, "steps": [...], "epochs": [...], "values": [...]}}}``.

    Returns:
        The validated update.

    Raises:
        ApiError: 422 ``invalid_body`` with ``path`` naming the first problem
            (a ``metrics`` key in ``status_details`` is one: series travel in
            ``series``).
    """
    obj = _object(doc, "$")
    _known_keys(obj, _UPDATE_KEYS, "$")
    generation = _int(obj.get("writer_generation"), "$.writer_generation", minimum=1)
    sequence = _int(obj.get("sequence"), "$.sequence", minimum=1)
    status = _status(obj)
    details = _object(obj.get("status_details", {}), "$.status_details")
    if "metrics" in details:
        _invalid("series travel in $.series in an update, not in metrics", "$.status_details")
    raw_series = _object(obj.get("series", {}), "$.series")
    series = tuple(
        _columns(validate_series_name(name, "$.series"), columns)
        for name, columns in raw_series.items()
    )
    return TaskUpdate(
        writer_generation=generation,
        sequence=sequence,
        status=status,
        details=dict(details),
        series=series,
    )


def _invalid(message: str, path: str) -> NoReturn:
    raise ApiError(422, "invalid_body", f"{message} @ {path}", {"path": path})


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        _invalid("expected an object", path)
    return value


def _known_keys(obj: Mapping[str, Any], known: frozenset[str], path: str) -> None:
    unknown = sorted(set(obj) - known)
    if unknown:
        _invalid(f"unknown key {unknown[0]!r}", path)


def _status(obj: Mapping[str, Any]) -> str | None:
    status = obj.get("status")
    if status is None and "status" not in obj:
        return None
    if not isinstance(status, str) or status not in TASK_STATUSES:
        _invalid(f"status must be one of {', '.join(sorted(TASK_STATUSES))}", "$.status")
    return str(status)


def _int(value: Any, path: str, *, minimum: int) -> int:
    if type(value) is not int or not minimum <= value <= MAX_INT:
        _invalid(f"expected an integer >= {minimum}", path)
    return value


def _number(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if type(value) is float:
        if not math.isfinite(value):
            _invalid("expected a finite number or null", path)
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            _invalid("number out of range", path)
    _invalid("expected a number or null", path)


def _epoch(value: Any, path: str) -> int | None:
    if value is None:
        return None
    return _int(value, path, minimum=0)


def _key(name: str) -> str:
    return f"[{json.dumps(name, ensure_ascii=False)}]"


def _point_list(name: str, points: Any) -> SeriesPoints:
    base = f"$.status_details.metrics{_key(name)}"
    if not isinstance(points, list):
        _invalid("expected an array of points", base)
    steps: list[int] = []
    epochs: list[int | None] = []
    values: list[float | None] = []
    for i, point in enumerate(points):
        path = f"{base}[{i}]"
        if not isinstance(point, dict):
            _invalid("expected a point object", path)
        if point.keys() - _POINT_KEYS:
            _known_keys(point, _POINT_KEYS, path)
        if "step" not in point or "value" not in point:
            _invalid("a point needs 'step' and 'value'", path)
        steps.append(_int(point["step"], f"{path}.step", minimum=0))
        epochs.append(_epoch(point.get("epoch"), f"{path}.epoch"))
        values.append(_number(point["value"], f"{path}.value"))
    return SeriesPoints(name=name, offset=0, steps=steps, epochs=epochs, values=values)


def _binary_column(text: str, typecode: str, path: str) -> list[Any]:
    """Decode a base64 column of little-endian int64 (q), int32 (i) or float64 (d) values.

    The client sends columns this way because formatting floats as decimal text
    costs the reporter thread far more GIL time than copying their bytes
    (``docs/protocol.md``). Non-finite float64 values become ``None`` (null).
    The result is fully validated (integers >= 0, floats finite or ``None``),
    with checks that run over the whole array in C (``min``, ``sum``): no
    Python code runs per point unless a value is out of range.
    """
    try:
        column = decode_column(text, typecode)
    except ValueError as exc:  # binascii.Error and UnicodeEncodeError are ValueErrors
        multiple = "multiple of" in str(exc)
        _invalid(str(exc) if multiple else "expected base64 text", path)
    if typecode == VALUES_TYPECODE:
        if math.isfinite(sum(column)):  # a NaN or an infinity makes the sum non-finite
            return column.tolist()
        return [v if math.isfinite(v) else None for v in column]
    if column and min(column) < 0:
        first = next(i for i, v in enumerate(column) if v < 0)
        _invalid("expected an integer >= 0", f"{path}[{first}]")
    return column.tolist()


def _columns(name: str, columns: Any) -> SeriesPoints:
    base = f"$.series{_key(name)}"
    obj = _object(columns, base)
    _known_keys(obj, _SERIES_KEYS, base)
    offset = _int(obj.get("offset"), f"{base}.offset", minimum=0)
    lists = []
    decoded = []  # binary columns come back validated: they are not checked twice
    for key, typecode in COLUMN_TYPECODES:
        column = obj.get(key, [])
        if isinstance(column, str):
            column = _binary_column(column, typecode, f"{base}.{key}")
        elif not isinstance(column, list):
            _invalid("expected an array or a base64 string", f"{base}.{key}")
        decoded.append(isinstance(obj.get(key), str))
        lists.append(column)
    raw_steps, raw_epochs, raw_values = lists
    if not len(raw_steps) == len(raw_epochs) == len(raw_values):
        _invalid("steps, epochs and values must have the same length", base)
    steps, epochs, values = raw_steps, raw_epochs, raw_values
    if not decoded[0]:
        steps = [_int(v, f"{base}.steps[{i}]", minimum=0) for i, v in enumerate(raw_steps)]
    if not decoded[1]:
        epochs = [_epoch(v, f"{base}.epochs[{i}]") for i, v in enumerate(raw_epochs)]
    if not decoded[2]:
        values = [_number(v, f"{base}.values[{i}]") for i, v in enumerate(raw_values)]
    return SeriesPoints(name=name, offset=offset, steps=steps, epochs=epochs, values=values)
