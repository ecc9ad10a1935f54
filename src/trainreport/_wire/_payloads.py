"""Wire encoding of updates, and parsing of a stored task (docs/design.md#wire-modes).

Encoding runs on the reporter thread, and every Python-level or long C-level
call there is GIL time taken from training (docs/design.md#shape), so bodies are built
series by series: each series is one short ``json.dumps`` of a column (suffix
mode) or one join of per-point strings (baseline mode), and the pieces are
joined at the end. Output is always strict JSON: non-finite values become
``null`` and encoding uses ``allow_nan=False``.

Two body shapes:

* baseline ``PATCH`` (``encode_patch_body``): ``{"status": ..., "status_details":
  {..., "metrics": {"name": [{"step": 1, "epoch": 1, "value": 2.31}, ...]}}}``;
* series-suffix update (``encode_suffix_body``, ``docs/protocol.md``):
  ``{"writer_generation": G, "sequence": S, "status": ..., "status_details": {...},
  "series": {"name": {"offset": k, "steps": "<b64>", "epochs": "<b64>", "values": "<b64>"}}}``
  with columns as base64 of little-endian int64 / int32 / float64 bytes.

The stored task read back on resume is parsed leniently by
:func:`parse_stored_task`, series by series: a series that cannot be parsed is
kept as stored (never overwritten), the rest resume.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import attrs
import cattrs

from trainreport._wire._protocol import check_name, new_columns
from trainreport._wire._protocol import encode_column as _b64
from trainreport._wire._sink_interface import SeriesUpdate, Update

__all__ = [
    "MIN_POINT_JSON_BYTES",
    "NO_EPOCH",
    "POINT_JSON_BYTES",
    "ColumnPoints",
    "ColumnTask",
    "StoredState",
    "UpdateResponse",
    "WriterResponse",
    "encode_details",
    "encode_patch_body",
    "encode_points",
    "encode_suffix_body",
    "encode_suffix_series",
    "finite_or_none",
    "join_suffix_body",
    "parse_stored_task",
    "read_stored_columns",
    "structure_response",
    "suffix_details",
    "suffix_member",
    "suffix_member_bytes",
    "without_times",
]

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode
_isfinite = math.isfinite


def finite_or_none(values: Iterable[float]) -> list[float | None]:
    """The values as a list, with NaN and ±Inf replaced by ``None`` (JSON ``null``)."""
    return [v if _isfinite(v) else None for v in values]


def _number(v: float) -> str:
    return repr(v) if _isfinite(v) else "null"


#: The fewest bytes one point takes in a full-state body (:func:`encode_points`): the
#: shortest step, epoch and value (``{"step":0,"epoch":0,"value":0.0}``) and the comma
#: after it. A body of ``n`` points is longer than ``n`` times this less one, so a state
#: of ``n`` points cannot fit a limit under ``n * MIN_POINT_JSON_BYTES`` bytes.
MIN_POINT_JSON_BYTES = len('{"step":0,"epoch":0,"value":0.0},')
#: About the bytes a point usually takes there (``{"step":12345,"epoch":1,"value":0.12345678},``
#: is 44): the estimate a full state's size is judged by before it is encoded.
POINT_JSON_BYTES = 45


def encode_points(series: SeriesUpdate) -> str:
    """A series' points in the baseline shape: ``[{"step":1,"epoch":1,"value":2.31},...]``.

    Never the points' times: a full-state send resends every point each time, so
    they would cost a plain job API about 25 bytes a point a send (times travel
    in series-suffix mode only, ``docs/protocol.md``).
    """
    return (
        "["
        + ",".join(
            f'{{"step":{s},"epoch":{e},"value":{_number(v)}}}'
            for s, e, v in zip(series.steps, series.epochs, series.values, strict=True)
        )
        + "]"
    )


def encode_suffix_series(series: SeriesUpdate) -> str:
    """A series suffix as binary columns (``docs/protocol.md``).

    ``{"offset":k,"steps":"<b64>","epochs":"<b64>","values":"<b64>"}``: base64 of
    the little-endian bytes of int64 steps, int32 epochs and float64 values.
    Copying bytes costs a few nanoseconds a point where formatting a float as
    decimal text costs hundreds, all of it GIL time taken from training
    (docs/design.md#shape, #wire-modes); non-finite values travel as IEEE bits and the server stores
    them as ``null``. With times (``series.times``, ``series-times-v1``) a fourth
    column ``"times":"<b64>"`` of float64 seconds since the Unix epoch follows
    (NaN: unknown, stored as ``null``).
    """
    times = "" if series.times is None else f',"times":"{_b64(series.times)}"'
    return (
        f'{{"offset":{series.offset},"steps":"{_b64(series.steps)}",'
        f'"epochs":"{_b64(series.epochs)}","values":"{_b64(series.values)}"{times}}}'
    )


def without_times(update: Update) -> Update:
    """``update`` with no series carrying times: for a destination that keeps none.

    A server that does not list ``series-times-v1`` is never sent a ``times``
    column or a point's ``"time"`` (an older server would refuse the column).
    Copies no column. Never raises.
    """
    if not update.series or all(s.times is None for s in update.series):
        return update
    return attrs.evolve(update, series=tuple(attrs.evolve(s, times=None) for s in update.series))


def encode_details(details: Mapping[str, Any]) -> str:
    """``status_details`` keys (without ``metrics``) as the inside of a JSON object (no braces).

    Raises:
        ValueError: when a value is not strict JSON (a non-finite float); the
            reporter never builds such details.
    """
    return _dumps(dict(details))[1:-1]


def _object(members: Iterable[str]) -> str:
    return "{" + ",".join(m for m in members if m) + "}"


def encode_patch_body(update: Update) -> bytes:
    """The baseline ``PATCH`` body for ``update`` (UTF-8 JSON).

    In full-state mode ``metrics`` holds every series complete; an update whose
    ``series`` is ``None`` carries no ``metrics`` key at all.
    """
    members = [encode_details(update.status_details)]
    if update.series is not None:
        pieces = [f"{_dumps(s.name)}:{encode_points(s)}" for s in update.series]
        # Series the reporter could not parse go back exactly as they were stored.
        pieces.extend(
            f"{_dumps(name)}:{_dumps(raw)}" for name, raw in update.foreign_series.items()
        )
        members.append(f'"metrics":{_object(pieces)}')
    details = _object(members)
    status = f'"status":{_dumps(update.status)},' if update.status is not None else ""
    return f'{{{status}"status_details":{details}}}'.encode()


def suffix_member(series: SeriesUpdate) -> str:
    """One member of a suffix body's ``series`` object: ``"name":{"offset":k,...}``."""
    return f"{_dumps(series.name)}:{encode_suffix_series(series)}"


def _b64_chars(nbytes: int) -> int:
    return 4 * ((nbytes + 2) // 3)


#: The characters of :func:`encode_suffix_series` besides the offset's digits and the columns.
_SERIES_FRAME_CHARS = len('{"offset":,"steps":"","epochs":"","values":""}')
#: ... and what a times column adds besides its base64.
_TIMES_FRAME_CHARS = len(',"times":""')


def suffix_member_bytes(series: SeriesUpdate) -> int:
    """``len(suffix_member(series).encode())``, computed without encoding any column.

    Base64 of ``n`` bytes is ``4 * ceil(n / 3)`` characters, so the size of a
    series (or of any slice of it) is arithmetic: a sink plans how to split a
    large update without encoding a point it will not send.
    """
    n = len(series.values)
    return (
        len(_dumps(series.name).encode())
        + 1
        + _SERIES_FRAME_CHARS
        + len(str(series.offset))
        + _b64_chars(n * series.steps.itemsize)
        + _b64_chars(n * series.epochs.itemsize)
        + _b64_chars(n * series.values.itemsize)
        + (0 if series.times is None else _TIMES_FRAME_CHARS + _b64_chars(n * 8))
    )


def suffix_details(update: Update) -> str:
    """What a request carrying ``update``'s details adds: ``,"status":..,"status_details":{..}``.

    Raises:
        ValueError: a detail is not strict JSON (the reporter never builds one).
    """
    status = f',"status":{_dumps(update.status)}' if update.status is not None else ""
    return f'{status},"status_details":{{{encode_details(update.status_details)}}}'


def join_suffix_body(
    writer_generation: int, sequence: int, details: str, members: Iterable[str]
) -> bytes:
    """A series-suffix body from its encoded parts (see :func:`encode_suffix_body`).

    Args:
        writer_generation: the writer's generation.
        sequence: this request's sequence number.
        details: :func:`suffix_details` of the update, or ``""`` for a request without them.
        members: :func:`suffix_member` of each series the request carries, in order.
    """
    series = ",".join(members)
    tail = f',"series":{{{series}}}}}' if series else "}"
    head = f'{{"writer_generation":{writer_generation},"sequence":{sequence}'
    return f"{head}{details}{tail}".encode()


def encode_suffix_body(
    update: Update,
    *,
    writer_generation: int,
    sequence: int,
    series: Iterable[SeriesUpdate] | None = None,
    include_details: bool = True,
) -> bytes:
    """A series-suffix update body (``docs/protocol.md``), UTF-8 JSON.

    ``{"writer_generation":G,"sequence":S,"status":...,"status_details":{...},
    "series":{"name":{...},...}}``; ``status`` only when not ``None``, ``series``
    only when there is one.

    Args:
        update: the update to encode.
        writer_generation: the generation the server issued to this writer.
        sequence: this request's sequence number (strictly increasing per writer).
        series: the series to put in this body (default: all of ``update.series``);
            a sink splitting a large update passes a subset per request.
        include_details: whether to include ``status`` and ``status_details``
            (a split update carries them in one of its requests only).
    """
    chosen = update.series if series is None else series
    return join_suffix_body(
        writer_generation,
        sequence,
        suffix_details(update) if include_details else "",
        (suffix_member(s) for s in chosen or ()),
    )


# --- parsing what a destination holds ------------------------------------------------


@attrs.frozen
class StoredState:
    """The parts of a stored task that seed a resumed run.

    Damage is judged per series: a series the client cannot parse (steps going
    backwards, a value that is not a number, a name it could never send) is
    kept in ``damaged`` exactly as stored, so the reporter never overwrites it;
    the other series resume.

    Args:
        series: name -> (steps, epochs, values) columns, steps non-decreasing.
        val_datasets: validation dataset names in first-seen order.
        details: the stored ``status_details`` without ``metrics``.
        status: the stored status, or ``None`` (never used to seed the machine).
        damaged: name -> the series' points exactly as stored (decoded JSON),
            for every series that could not be parsed.
        damage_reasons: name -> why that series could not be parsed.
        problems: task-level problems that were survived (an unreadable
            ``metrics`` or ``val_datasets``), for a log event.
    """

    series: Mapping[str, tuple[array[int], array[int], array[float]]]
    val_datasets: tuple[str, ...] = ()
    details: Mapping[str, Any] = attrs.field(factory=dict)
    status: str | None = None
    damaged: Mapping[str, Any] = attrs.field(factory=dict)
    damage_reasons: Mapping[str, str] = attrs.field(factory=dict)
    problems: tuple[str, ...] = ()


#: The epoch a :class:`ColumnPoints` epochs column holds for "unknown" (``null``):
#: the wire's epochs are int32, so no stored epoch is this.
NO_EPOCH = -(2**63)


class ColumnPoints(Sequence[dict[str, Any]]):
    """A series' points held as columns that read as the ``GET`` shape's list of points.

    ``client.read_task(..., columns=True)``, ``trainreport show`` and a long
    run's ``Reporter.snapshot()`` read-back hold a series as three arrays
    (int64 steps, int64 or int32 epochs, float64 values: 20-24 bytes a
    point) instead of a dictionary a point (about 280 bytes): an item is
    built when it is read, it compares equal to the list of point
    dictionaries it stands for, and :meth:`columns` gives the arrays
    (``client.to_pandas`` builds its frame from them).

    Args:
        steps: the steps column.
        epochs: the epochs column (an item ``None`` or :data:`NO_EPOCH` where unknown).
        values: the values column (``None``, or a non-finite float, for ``null``).
    """

    __hash__ = None  # type: ignore[assignment]  # equal to a list, which has no hash

    def __init__(
        self,
        steps: Sequence[int],
        epochs: Sequence[int | None],
        values: Sequence[float | None],
    ) -> None:
        self._steps, self._epochs, self._values = steps, epochs, values

    @classmethod
    def from_json(
        cls, steps: Sequence[Any], epochs: Sequence[Any], values: Sequence[Any]
    ) -> ColumnPoints:
        """The columns of a ``GET .../series`` answer (JSON lists) as three arrays.

        ``null`` epochs become :data:`NO_EPOCH` and ``null`` values NaN (the
        ``GET`` shape gives every non-finite value as ``null``).

        Raises:
            TypeError, OverflowError: an item is not an int64 (steps, epochs)
                or a number (values); a JSON ``true`` is read as 1, as a
                reference server never stores one.
            ValueError: the columns differ in length, or an epoch is :data:`NO_EPOCH`.
        """
        if not len(steps) == len(epochs) == len(values):
            raise ValueError("the columns differ in length")
        if NO_EPOCH in epochs:
            raise ValueError("an epoch is the sentinel for unknown")
        step_column = array("q", steps)
        epoch_column = array(
            "q", [NO_EPOCH if e is None else e for e in epochs] if None in epochs else epochs
        )
        value_column = array(
            "d", [math.nan if v is None else v for v in values] if None in values else values
        )
        return cls(step_column, epoch_column, value_column)

    def __len__(self) -> int:
        return len(self._steps)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        value = self._values[index]
        finite = value is not None and _isfinite(value)
        epoch = self._epochs[index]
        return {
            "step": self._steps[index],
            "epoch": None if epoch == NO_EPOCH else epoch,
            "value": value if finite else None,
        }

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        """Equal to a list (or another ``ColumnPoints``) of the same point dictionaries."""
        if not isinstance(other, list | ColumnPoints):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __repr__(self) -> str:
        return f"ColumnPoints(points={len(self)})"

    def columns(self) -> tuple[Sequence[int], Sequence[int | None], Sequence[float | None]]:
        """The ``(steps, epochs, values)`` columns as held (arrays, or sequences). Never raises."""
        return self._steps, self._epochs, self._values

    def values(self) -> list[float | None]:
        """The values, ``None`` where not finite. Never raises."""
        return [v if v is not None and _isfinite(v) else None for v in self._values]


class ColumnTask(Mapping[str, Any]):
    """A stored task held as columns that reads as the ``GET`` shape only when someone looks.

    A sink that already holds the stored task as columns (a run log's
    replay) hands this to ``Opened.stored_task``: the engine seeds from
    :attr:`state` directly (``_destination``), so a resume of a long run never
    builds a point dictionary per stored point (about 300 bytes each, against
    28 in the columns: ``docs/engine.md``, "Resuming"). Reading it as a mapping
    (a test, a user calling ``sink.open()``) builds the ``GET`` shape once, on
    first access; it compares equal to that dictionary.

    Args:
        state: the stored task, parsed; its columns must not change afterwards.
        task: the stored task as read without its curves (its other top-level
            keys, a server's ``stale`` say, are kept), or ``None``: ``status``
            and ``status_details`` from ``state``.
    """

    def __init__(self, state: StoredState, task: Mapping[str, Any] | None = None) -> None:
        self.state = state
        self._without_curves = task
        self._task: dict[str, Any] | None = None

    def _built(self) -> dict[str, Any]:
        task = self._task
        if task is None:
            state = self.state
            details = dict(state.details)
            if state.series or state.damaged:
                metrics: dict[str, Any] = {
                    name: [
                        {"step": st, "epoch": ep, "value": v}
                        for st, ep, v in zip(steps, epochs, finite_or_none(values), strict=True)
                    ]
                    for name, (steps, epochs, values) in state.series.items()
                }
                metrics.update(state.damaged)
                details["metrics"] = metrics
            base = self._without_curves
            task = {"status": state.status} if base is None else dict(base)
            task["status_details"] = details
            self._task = task
        return task

    def __getitem__(self, key: str) -> Any:
        return self._built()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())

    def __repr__(self) -> str:
        return f"ColumnTask(series={len(self.state.series)})"


class _MalformedError(ValueError):
    pass


def _int(value: object, where: str) -> int:
    if type(value) is not int or value < 0:
        raise _MalformedError(f"{where} is not a non-negative integer")
    return value


def _parse_series(name: str, points: object) -> tuple[array[int], array[int], array[float]]:
    reason = check_name(name)
    if reason is not None:
        raise _MalformedError(f"metrics[{name!r}]: the name is unusable ({reason})")
    if not isinstance(points, list):
        raise _MalformedError(f"metrics[{name!r}] is not a list")
    steps, epochs, values = new_columns()
    last = -1
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            raise _MalformedError(f"metrics[{name!r}][{i}] is not an object")
        step = _int(point.get("step"), f"metrics[{name!r}][{i}].step")
        if step < last:
            raise _MalformedError(f"metrics[{name!r}] steps go backwards at index {i}")
        last = step
        epoch = point.get("epoch")
        value = point.get("value")
        if value is None:
            value = math.nan
        elif type(value) not in (int, float):
            raise _MalformedError(f"metrics[{name!r}][{i}].value is not a number")
        steps.append(step)
        epochs.append(1 if epoch is None else _int(epoch, f"metrics[{name!r}][{i}].epoch"))
        values.append(float(value))
    return steps, epochs, values


_PARSE_ERRORS = (_MalformedError, TypeError, ValueError, OverflowError, RecursionError)


def _strict_json(value: Any) -> Any:
    """``value`` with NaN and ±Inf (which a lenient JSON reader accepts) as ``None``."""
    try:
        return json.loads(json.dumps(value), parse_constant=lambda _token: None)
    except (TypeError, ValueError, RecursionError):
        return None


def read_stored_columns(state: StoredState, name: str, column: object) -> StoredState:
    """``state`` with one more stored series, read as columns (``GET .../series``, one series).

    The rules are those of a series in the ``GET`` shape (:func:`parse_stored_task`):
    steps non-negative integers, never going backwards; an epoch a non-negative
    integer (``null``: 1); a value a number (``null``: NaN). A series that
    breaks them is kept in ``damaged`` as points in the ``GET`` shape, as stored.
    Reading one series at a time keeps a resume from building the whole task
    as one JSON document (``docs/engine.md``, "Resuming"). Never raises.

    Args:
        state: what was read so far (a task read with ``?metrics=false``, plus
            the series read before this one).
        name: the series.
        column: the decoded ``{"steps": [...], "epochs": [...], "values": [...]}``
            (``times`` and the rest ignored).
    """
    steps_raw = epochs_raw = values_raw = None
    try:
        reason = check_name(name)
        if reason is not None:
            raise _MalformedError(f"series[{name!r}]: the name is unusable ({reason})")
        if not isinstance(column, dict):
            raise _MalformedError(f"series[{name!r}] is not an object")
        steps_raw, epochs_raw, values_raw = (column.get(k) for k in ("steps", "epochs", "values"))
        if not (
            isinstance(steps_raw, list)
            and isinstance(epochs_raw, list)
            and isinstance(values_raw, list)
            and len(steps_raw) == len(epochs_raw) == len(values_raw)
        ):
            raise _MalformedError(
                f"series[{name!r}]: steps, epochs and values are not lists of one length"
            )
        parsed = _parse_columns(name, steps_raw, epochs_raw, values_raw)
    except _PARSE_ERRORS as exc:
        raw = (
            [
                {"step": st, "epoch": ep, "value": v}
                for st, ep, v in zip(steps_raw, epochs_raw, values_raw, strict=True)
            ]
            if isinstance(steps_raw, list)
            and isinstance(epochs_raw, list)
            and isinstance(values_raw, list)
            and len(steps_raw) == len(epochs_raw) == len(values_raw)
            else column
        )
        damaged = {**state.damaged, name: _strict_json(raw)}
        reasons = {**state.damage_reasons, name: (str(exc) or type(exc).__name__)[:300]}
        return attrs.evolve(state, damaged=damaged, damage_reasons=reasons)
    return attrs.evolve(state, series={**state.series, name: parsed})


def _parse_columns(
    name: str, steps_raw: list[Any], epochs_raw: list[Any], values_raw: list[Any]
) -> tuple[array[int], array[int], array[float]]:
    """Columns of a series as stored, checked (C-level loops: a long series costs little)."""
    steps, epochs, values = new_columns()
    if any(type(v) is bool for v in steps_raw):
        raise _MalformedError(f"series[{name!r}]: a step is not an integer")
    steps.extend(steps_raw)  # TypeError for anything but an integer
    if steps and min(steps) < 0:
        raise _MalformedError(f"series[{name!r}]: a step is negative")
    if any(map(operator.gt, steps, itertools.islice(steps, 1, None))):
        raise _MalformedError(f"series[{name!r}] steps go backwards")
    epochs.extend([1 if e is None else e for e in epochs_raw])
    if epochs and min(epochs) < 0:
        raise _MalformedError(f"series[{name!r}]: an epoch is negative")
    if any(type(v) not in (int, float) for v in values_raw if v is not None):
        raise _MalformedError(f"series[{name!r}]: a value is not a number")
    values.extend([math.nan if v is None else v for v in values_raw])
    return steps, epochs, values


def parse_stored_task(task: object) -> StoredState | str:
    """Parse a stored task (the ``GET`` shape) for resuming.

    Args:
        task: the decoded JSON the destination returned, or ``None`` (no task).

    Returns:
        a :class:`StoredState` (empty for ``None``); series that cannot be
        parsed are in ``damaged`` as stored, and an unreadable ``metrics`` or
        ``val_datasets`` is noted in ``problems`` (and read as empty). Only a
        task or ``status_details`` that is not an object gives a short reason
        string instead, and the caller treats the stored state as empty.
        Never raises.
    """
    if task is None:
        return StoredState(series={})
    if isinstance(task, ColumnTask):
        return task.state
    try:
        if not isinstance(task, dict):
            raise _MalformedError("the task is not an object")
        details = task.get("status_details", {})
        if details is None:
            details = {}
        if not isinstance(details, dict):
            raise _MalformedError("status_details is not an object")
    except _PARSE_ERRORS as exc:
        return str(exc) or type(exc).__name__
    problems: list[str] = []
    metrics = details.get("metrics")
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        problems.append("status_details.metrics is not an object")
        metrics = {}
    series: dict[str, tuple[array[int], array[int], array[float]]] = {}
    damaged: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for raw_name, points in metrics.items():
        name = str(raw_name)
        try:
            series[name] = _parse_series(name, points)
        except _PARSE_ERRORS as exc:
            damaged[name] = _strict_json(points)
            reasons[name] = (str(exc) or type(exc).__name__)[:300]
    datasets = details.get("val_datasets")
    if datasets is None:
        datasets = []
    if not isinstance(datasets, list) or not all(isinstance(d, str) for d in datasets):
        problems.append("status_details.val_datasets is not a list of strings")
        datasets = []
    status = task.get("status")
    rest = {k: v for k, v in details.items() if k != "metrics"}
    return StoredState(
        series=series,
        val_datasets=tuple(datasets),
        details=rest,
        status=status if isinstance(status, str) else None,
        damaged=damaged,
        damage_reasons=reasons,
        problems=tuple(problems),
    )


# --- responses of the series-suffix extension (parsed by the one converter) ------------


@attrs.frozen
class WriterResponse:
    """Answer to ``POST .../writers`` (``docs/protocol.md``)."""

    writer_generation: int
    series_lengths: dict[str, int] = attrs.field(factory=dict)
    task: dict[str, Any] | None = None
    last_writer_generation: int | None = None


@attrs.frozen
class UpdateResponse:
    """Answer to ``POST .../updates`` (``docs/protocol.md``)."""

    series_lengths: dict[str, int] = attrs.field(factory=dict)
    cancel_requested: bool = False
    duplicate: bool = False
    status: str | None = None
    sequence: int | None = None


_converter = cattrs.Converter()


def structure_response(data: object, cls: type[Any]) -> Any:
    """Structure a decoded JSON response into ``cls`` with the module's one converter.

    Extra keys are ignored (servers may add fields).

    Raises:
        cattrs.BaseValidationError: when ``data`` does not fit ``cls``.
    """
    return _converter.structure(data, cls)
