"""The reference server's wire vocabulary: ids, strict JSON, request validation, errors.

Everything here is pure (no I/O, no clock): a request body arrives as bytes
already read within the limits (``_app``), is parsed as strict JSON, and is
validated into frozen values that the storage layer (``_db``) applies. Every
refusal is an :class:`ApiError` carrying the HTTP status and the error code of
``docs/protocol.md``.

Each request body is declared once, as a tree of ``_schema`` nodes
(:data:`TASK_PATCH`, :data:`TASK_UPDATE`, :data:`WRITER_OPEN`, and
:data:`STATUS_DETAILS` within them): the tree validates requests and
generates the published JSON Schemas and OpenAPI document (``_contract``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import attrs

from trainreport._wire._protocol import (
    EPOCHS_TYPECODE,
    EXTENSION_SERIES_SUFFIX,
    EXTENSION_SERIES_TIMES,
    MAX_SERIES_NAME_CHARS,
    STEPS_TYPECODE,
    TASK_STATUSES,
    TIMES_TYPECODE,
    VALUES_TYPECODE,
)
from trainreport._wire._protocol import ID_PATTERN as _ID_RE
from trainreport.server._errors import ApiError
from trainreport.server._schema import (
    Column,
    Enum,
    Field,
    Forbidden,
    Integer,
    List,
    MapOf,
    Nullable,
    Number,
    Open,
    Record,
    Text,
    invalid,
)

__all__ = [
    "EXTENSION_SERIES_SUFFIX",
    "MAX_SERIES_NAME_CHARS",
    "REQUEST_BODIES",
    "STATUS_DETAILS",
    "TASK_PATCH",
    "TASK_STATUSES",
    "TASK_UPDATE",
    "WRITER_OPEN",
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

#: The rule of job and task ids as regular-expression text (for the JSON Schemas).
ID_PATTERN = _ID_RE.pattern


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
        times: each point's wall-clock time (seconds since the Unix epoch) or
            ``None`` when unknown; ``None`` for the whole column when the body
            carried no times (``series-times-v1``).
    """

    name: str
    offset: int
    steps: Sequence[int]
    epochs: Sequence[int | None]
    values: Sequence[float | None]
    times: Sequence[float | None] | None = None

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
    if _ID_RE.fullmatch(value) is None:
        raise ApiError(400, "invalid_id", f"{what} must match ^{ID_PATTERN}$")
    return value


#: Characters a series name may hold: anything but control characters (C0, DEL, C1).
_NAME_CHARS = "[^\\u0000-\\u001f\\u007f-\\u009f]*"
_STATUS = Enum(
    tuple(sorted(TASK_STATUSES)),
    description="the task's status; absent keeps the stored one (null is refused)",
)
SERIES_NAME = Text(
    min_length=1,
    max_length=MAX_SERIES_NAME_CHARS,
    pattern=_NAME_CHARS,
    message=(
        f"a series name must be 1..{MAX_SERIES_NAME_CHARS} characters without control characters"
    ),
    description="a series (metric) name, e.g. train_loss",
)
_STEP = Integer(0, description="the optimizer step the point was recorded at")
_EPOCH = Integer(0, nullable=True, description="the 1-based epoch of the step, or null")
_VALUE = Number(nullable=True, description="the value; null for a non-finite one (NaN, ±Inf)")
_TIME = Number(
    nullable=True,
    description=(
        f"the wall-clock time of the point, seconds since the Unix epoch, or null when unknown "
        f"({EXTENSION_SERIES_TIMES}: sent only to a server that lists it)"
    ),
)
POINT = Record(
    (
        Field("step", _STEP, required=True),
        Field("epoch", _EPOCH),
        Field("value", _VALUE, True),
        Field("time", _TIME),
    ),
    description="one point of a series",
)

#: ``status_details`` as a plain job API stores it (the baseline shape). The server merges
#: it shallowly and stores any JSON value under any key; the keys below are the ones
#: trainreport writes, with the types it writes (documented, not enforced), except
#: ``metrics``, whose shape is enforced.
STATUS_DETAILS = Record(
    (
        Field("phase", Open("setup, training, validation, checkpointing (a string)")),
        Field("step", Open("the last step reported (an integer >= 0)", 120)),
        Field("epoch", Open("the current 1-based epoch (an integer >= 1)", 1)),
        Field("max_steps", Open("the planned number of steps (an integer)", 500)),
        Field("num_epochs", Open("the planned number of epochs (an integer)", 3)),
        Field("percentage_done", Open("100 * step / max_steps, in [0, 100] (a number)", 24.0)),
        Field("eta_seconds", Open("seconds left while running (a number)", 1810.5)),
        Field("updated_at", Open("the client's clock, ISO 8601 UTC (a string)")),
        Field("checkpoint_path", Open("the last checkpoint saved (a string)")),
        Field("hyperparameters", Open("flattened with '/' (an object)")),
        Field("val_datasets", Open("validation datasets in the order seen (an array)")),
        Field("error", Open("a failed run's error: {type, message} (an object)")),
        Field("cancel_reason", Open("why a cancelled run stopped, e.g. preempted (a string)")),
        Field(
            "metrics",
            MapOf(
                SERIES_NAME,
                List(POINT),
                description=(
                    "every series of the task, each in full (a PATCH that sends it replaces "
                    "every stored series)"
                ),
            ),
        ),
    ),
    extra=Open("any other detail, e.g. a current metric value such as train_loss"),
    description=(
        "Task details, merged shallowly: a key sent replaces the stored value, a key not "
        "sent is kept."
    ),
)

#: ``PATCH /v1/jobs/{job_id}/tasks/{task_id}`` (the baseline).
TASK_PATCH = Record(
    (Field("status", _STATUS), Field("status_details", STATUS_DETAILS)),
    description="A baseline write of a task; unknown top-level keys are refused.",
)


def _equal_lengths(columns: Mapping[str, Any], path: str) -> None:
    lengths = {len(columns.get(key, ())) for key in ("steps", "epochs", "values")}
    if "times" in columns:
        lengths.add(len(columns["times"]))
    if len(lengths) > 1:
        invalid("steps, epochs, values (and times, when given) must have the same length", path)


SERIES_SUFFIX = Record(
    (
        Field("offset", Integer(0, description="the index of the first point given"), True),
        Field("steps", Column(STEPS_TYPECODE, _STEP)),
        Field("epochs", Column(EPOCHS_TYPECODE, _EPOCH)),
        Field("values", Column(VALUES_TYPECODE, _VALUE)),
        Field("times", Column(TIMES_TYPECODE, _TIME)),
    ),
    rule=_equal_lengths,
    rule_text=(
        "steps, epochs and values (each [] when absent) must have the same length, and so "
        "must times when given."
    ),
    description="From index offset on, the series is exactly these points.",
)

#: ``POST /v1/jobs/{job_id}/tasks/{task_id}/updates`` (extension ``series-suffix-v1``).
TASK_UPDATE = Record(
    (
        Field("writer_generation", Integer(1, description="from POST .../writers"), True),
        Field("sequence", Integer(1, description="increases within a generation"), True),
        Field("status", _STATUS),
        Field(
            "status_details",
            attrs.evolve(
                STATUS_DETAILS,
                fields=(
                    *(f for f in STATUS_DETAILS.fields if f.name != "metrics"),
                    Field("metrics", Forbidden("series travel in $.series in an update")),
                ),
            ),
        ),
        Field("series", MapOf(SERIES_NAME, SERIES_SUFFIX)),
    ),
    description=(
        f"A {EXTENSION_SERIES_SUFFIX} update: fenced by writer_generation, ordered by sequence."
    ),
)


def _started_at_not_negative(attempt: Mapping[str, Any], path: str) -> None:
    started_at = attempt.get("started_at")
    if started_at is not None and started_at < 0:
        invalid("expected a number >= 0 or null", f"{path}.started_at")


#: ``POST /v1/jobs/{job_id}/tasks/{task_id}/writers``: an object (or no body at all).
WRITER_OPEN = Record(
    (
        Field(
            "attempt",
            Nullable(
                Record(
                    (
                        Field(
                            "number",
                            Integer(
                                0, nullable=True, description="the job system's attempt number"
                            ),
                        ),
                        Field(
                            "started_at",
                            Number(description="process start, seconds since the Unix epoch"),
                        ),
                    ),
                    extra=Open("ignored (forward compatibility)"),
                    rule=_started_at_not_negative,
                    rule_text="started_at, when given, is >= 0.",
                    description="The claiming attempt's identity; an older claim gets 409.",
                )
            ),
        ),
    ),
    extra=Open("ignored (forward compatibility)"),
    description="Opens a writer; the body may be absent.",
)

#: Every request body, by the name the OpenAPI document gives it.
REQUEST_BODIES: dict[str, Record] = {
    "TaskPatch": TASK_PATCH,
    "TaskUpdate": TASK_UPDATE,
    "WriterOpen": WRITER_OPEN,
}


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
    return SERIES_NAME.check(name, path)


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
    """Validate a baseline ``PATCH /v1/jobs/{job_id}/tasks/{task_id}`` body (:data:`TASK_PATCH`).

    Args:
        doc: the parsed body: ``{"status"?: str, "status_details"?: object}``.

    Returns:
        The validated patch.

    Raises:
        ApiError: 422 ``invalid_body`` with ``path`` naming the first problem.
    """
    body = TASK_PATCH.check(doc, "$")
    details = dict(body.get("status_details", {}))
    metrics: tuple[SeriesPoints, ...] | None = None
    if "metrics" in details:
        metrics = tuple(
            SeriesPoints(
                name=name,
                offset=0,
                steps=[p["step"] for p in points],
                epochs=[p.get("epoch") for p in points],
                values=[p["value"] for p in points],
                times=[p.get("time") for p in points],
            )
            for name, points in details.pop("metrics").items()
        )
    return TaskPatch(status=body.get("status"), details=details, metrics=metrics)


def validate_update(doc: Any) -> TaskUpdate:
    """Validate a ``POST .../updates`` body of ``series-suffix-v1`` (:data:`TASK_UPDATE`).

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
    body = TASK_UPDATE.check(doc, "$")
    series = tuple(
        SeriesPoints(
            name=name,
            offset=columns["offset"],
            steps=columns.get("steps", []),
            epochs=columns.get("epochs", []),
            values=columns.get("values", []),
            times=columns.get("times"),
        )
        for name, columns in body.get("series", {}).items()
    )
    return TaskUpdate(
        writer_generation=body["writer_generation"],
        sequence=body["sequence"],
        status=body.get("status"),
        details=body.get("status_details", {}),
        series=series,
    )


def validate_writer_claim(doc: Any) -> WriterClaim:
    """Validate a ``POST .../writers`` body (:data:`WRITER_OPEN`) into the writer's claim.

    ``{}``, ``{"attempt": null}`` and ``None`` (no body) are a claim without identity;
    other keys are ignored (forward compatibility).

    Raises:
        ApiError: 422 ``invalid_body`` naming the path (``$.attempt.number`` must be an
            integer >= 0 or null, ``$.attempt.started_at`` a finite number >= 0 or null).
    """
    if doc is None:
        return WriterClaim()
    attempt = WRITER_OPEN.check(doc, "$").get("attempt")
    if attempt is None:
        return WriterClaim()
    return WriterClaim(number=attempt.get("number"), started_at=attempt.get("started_at"))
