"""The run log's format: records of idempotent series suffixes, how they are encoded and replayed.

A run log is an append-only file. Each record says what one update says: per
series, "from index ``offset`` on, the series is exactly these points", plus
the task fields that changed (``docs/engine.md``, "The run log"). Replaying the
records in order with the reference server's merge rules
(:class:`~trainreport.sinks._record.TaskRecord`) rebuilds the task; a record
applied twice changes nothing, so replay is idempotent.

Layout (all integers little-endian)::

    file     = MAGIC (16 bytes: b"trainreport-log\\n") record*
    record   = header (20 bytes) body
    header   = version u8 | kind u8 | reserved u16 (0) | body length u64
               | CRC-32 of the body u32 | CRC-32 of the header's first 16 bytes u32
    body of UPDATE and SNAPSHOT
             = head length u32 | head (UTF-8 JSON) | columns
    head     = {"status": str (only when it changed),
                "details": {changed status_details keys},
                "full_state": true (only for a full-state update),
                "series": [[name, offset, count], ...] (absent: no metrics)}
    columns  = per series of the head, in order: count int64 steps,
               count int32 epochs, count float64 values
    body of RUN = UTF-8 JSON object: {"job_id": ..., "task_id": ...}

A SNAPSHOT replaces the whole state: status, every detail, and each series
from its offset (an offset above 0 means the points before it are held
elsewhere: a journal trimmed after its service acknowledged them). Kinds 128
and above are optional: a reader that does not know one skips it.

Damage is detected, never misread: a record whose header or body checksum
fails, whose version is newer than :data:`FORMAT_VERSION`, whose content is not
a valid update, or that the file ends inside, stops the replay there; every
record before it is kept (:class:`Replayed`). Nothing here raises for any
input bytes.
"""

from __future__ import annotations

import enum
import json
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from trainreport._sink import SeriesUpdate, Update
from trainreport.sinks._record import SeriesGapError, TaskRecord

__all__ = [
    "FORMAT_VERSION",
    "HEADER",
    "MAGIC",
    "Damage",
    "DamageKind",
    "LogState",
    "RecordKind",
    "Replayed",
    "append_record",
    "changed_details",
    "encode_record",
    "encode_run",
    "encode_snapshot",
    "encode_update",
    "normalised",
    "replay",
    "snapshot_bytes",
]

#: The first 16 bytes of every run log.
MAGIC = b"trainreport-log\n"
#: The record format this module writes and the newest it reads.
FORMAT_VERSION = 1
#: Record header: version, kind, reserved, body length, body CRC-32, header CRC-32.
HEADER = struct.Struct("<BBHQII")
_HEADER_CRC_SPAN = HEADER.size - 4
_HEAD_LENGTH = struct.Struct("<I")
#: Bytes a point takes in the columns: int64 step, int32 epoch, float64 value.
POINT_BYTES = 20
#: Items per piece when a long column is encoded (so no one copy holds the GIL for long).
_CHUNK_ITEMS = 1 << 16
_LITTLE_ENDIAN = sys.byteorder == "little"
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode
_SCALAR_TYPES = (str, int, float, bool)


class RecordKind(enum.IntEnum):
    """What a record holds."""

    UPDATE = 1
    SNAPSHOT = 2
    RUN = 3


#: Kinds at or above this value may be skipped by a reader that does not know them.
OPTIONAL_KINDS = 128


class DamageKind(enum.Enum):
    """Why a replay stopped before the end of the file."""

    NOT_A_LOG = "not a run log"
    TORN_TAIL = "the log ends inside a record"
    CORRUPT = "a checksum does not match"
    NEWER_VERSION = "a record of a newer format version"
    INVALID = "a record that is not a valid update"


@attrs.frozen
class Damage:
    """Where and why a replay stopped.

    Args:
        kind: what was found.
        offset: byte offset in the file where the unread part begins.
        dropped_bytes: bytes from ``offset`` to the end of the file.
        detail: one sentence for a log event or a message.
    """

    kind: DamageKind
    offset: int
    dropped_bytes: int
    detail: str

    def describe(self) -> str:
        """``"<kind> (<detail>) at byte N; M bytes dropped"``, for a message. Never raises."""
        return (
            f"{self.kind.value} ({self.detail}) at byte {self.offset:,}; "
            f"{self.dropped_bytes:,} bytes dropped"
        )


# --- the state a log describes ---------------------------------------------------------


class LogState:
    """The task a run log describes: a :class:`TaskRecord` plus each series' first index.

    ``bases[name]`` is the index of the first point held (0 unless a snapshot
    was trimmed); offsets in records are indices in the whole series.
    """

    def __init__(self) -> None:
        self.task = TaskRecord(None)
        self.bases: dict[str, int] = {}

    @classmethod
    def from_task(cls, task: Mapping[str, Any]) -> LogState:
        """A state holding ``task`` (the ``GET`` shape); malformed curves are dropped."""
        state = cls()
        state.task = TaskRecord(task)
        return state

    @property
    def exists(self) -> bool:
        """True once any update was applied (a task with no record does not exist)."""
        return self.task.exists

    def lengths(self) -> dict[str, int]:
        """Points per series, counted from index 0 of the whole series."""
        bases = self.bases
        return {name: bases.get(name, 0) + len(c[0]) for name, c in self.task.series.items()}

    def point_count(self) -> int:
        """Points held (what a snapshot would write)."""
        return sum(len(c[0]) for c in self.task.series.values())

    def apply(self, update: Update) -> dict[str, int]:
        """Merge one update with the reference server's rules; returns :meth:`lengths`.

        Raises:
            SeriesGapError: a suffix starts beyond its series' end (nothing applied).
        """
        bases = self.bases
        if update.full_state or update.series is None or not bases:
            self.task.apply(update)
            if update.full_state and update.series is not None:
                bases.clear()
            return self.lengths()
        local = []
        rebased = {}
        for s in update.series:
            base = bases.get(s.name, 0)
            if s.offset >= base:
                local.append(attrs.evolve(s, offset=s.offset - base))
            else:  # the suffix starts before the points held: it replaces all of them
                local.append(attrs.evolve(s, offset=0))
                rebased[s.name] = s.offset
        self.task.apply(attrs.evolve(update, series=tuple(local)))
        for name, base in rebased.items():
            if base:
                bases[name] = base
            else:
                bases.pop(name, None)
        return self.lengths()

    def reset(self, snapshot: Update) -> None:
        """Replace everything with ``snapshot`` (series at their offsets, details whole)."""
        self.task = TaskRecord(None)
        self.bases = {s.name: s.offset for s in snapshot.series or () if s.offset}
        local = tuple(attrs.evolve(s, offset=0) for s in snapshot.series or ())
        self.task.apply(attrs.evolve(snapshot, series=local, full_state=False))

    def trim(self, keep_from: Mapping[str, int]) -> None:
        """Drop each named series' points before index ``keep_from[name]`` (clamped)."""
        for name, start in keep_from.items():
            cols = self.task.series.get(name)
            if cols is None:
                continue
            base = self.bases.get(name, 0)
            cut = min(max(start - base, 0), len(cols[0]))
            if cut:
                for column in cols:
                    del column[:cut]
                self.bases[name] = base + cut

    def to_task(self) -> dict[str, Any] | None:
        """The task in the ``GET`` shape (the points held), or ``None`` when it does not exist."""
        return self.task.to_task()


# --- encoding ---------------------------------------------------------------------------


def _column(values: array[Any], typecode: str) -> array[Any]:
    """``values`` as an array of ``typecode`` (converted when a caller gave another type).

    Raises:
        OverflowError: a value does not fit (an epoch beyond int32).
    """
    if getattr(values, "typecode", None) == typecode:
        return values
    return array(typecode, values)


def _column_pieces(column: array[Any], out: list[bytes]) -> None:
    """Append ``column``'s little-endian bytes to ``out``, in pieces of bounded size."""
    for start in range(0, len(column), _CHUNK_ITEMS):
        part = column[start : start + _CHUNK_ITEMS]
        if not _LITTLE_ENDIAN:
            part.byteswap()
        out.append(part.tobytes())


def _frame(kind: int, pieces: list[bytes]) -> list[bytes]:
    """Prefix ``pieces`` (the body) with a record header; returns the record's pieces."""
    crc = 0
    length = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        length += len(piece)
    head = HEADER.pack(FORMAT_VERSION, kind, 0, length, crc, 0)
    header = head[:_HEADER_CRC_SPAN] + struct.pack("<I", zlib.crc32(head[:_HEADER_CRC_SPAN]))
    return [header, *pieces]


def _body(
    status: str | None,
    details: Mapping[str, Any],
    series: tuple[SeriesUpdate, ...] | None,
    full_state: bool,
) -> list[bytes]:
    head: dict[str, Any] = {}
    if status is not None:
        head["status"] = status
    head["details"] = dict(details)
    if full_state:
        head["full_state"] = True
    if series is not None:
        head["series"] = [[s.name, s.offset, len(s.values)] for s in series]
    encoded = _dumps(head).encode("utf-8")
    pieces = [_HEAD_LENGTH.pack(len(encoded)), encoded]
    for s in series or ():
        _column_pieces(s.steps, pieces)
        _column_pieces(s.epochs, pieces)
        _column_pieces(s.values, pieces)
    return pieces


def normalised(update: Update) -> Update:
    """``update`` with every column in the log's types (int64, int32, float64).

    Raises:
        ValueError: the columns differ in length, a value does not fit its type,
            or ``status_details`` holds ``metrics`` (curves travel as series).
    """
    if "metrics" in update.status_details:
        raise ValueError("status_details may not hold metrics: curves travel as series")
    if not update.series:
        return update
    out = []
    for s in update.series:
        try:
            steps, epochs, values = (
                _column(s.steps, "q"),
                _column(s.epochs, "i"),
                _column(s.values, "d"),
            )
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"series {s.name!r}: {exc}") from exc
        if not len(steps) == len(epochs) == len(values):
            raise ValueError(f"series {s.name!r}: columns of different lengths")
        if s.offset < 0:
            raise ValueError(f"series {s.name!r}: negative offset")
        if steps is s.steps and epochs is s.epochs and values is s.values:
            out.append(s)
        else:
            out.append(SeriesUpdate(s.name, s.offset, steps, epochs, values))
    return attrs.evolve(update, series=tuple(out))


def encode_update(update: Update, changed_details: Mapping[str, Any]) -> list[bytes]:
    """An UPDATE record for ``update`` (already :func:`normalised`), as pieces to write.

    Args:
        update: the update; its status is written when not ``None``.
        changed_details: the ``status_details`` keys to write (those that changed).

    Raises:
        ValueError: a detail is not strict JSON, or text is not encodable as UTF-8.
    """
    body = _body(update.status, changed_details, update.series, update.full_state)
    return _frame(RecordKind.UPDATE, body)


def append_record(state: LogState, update: Update) -> list[bytes]:
    """Apply ``update`` to ``state`` and return its UPDATE record, as pieces to write.

    The record keeps the series as given (offsets and points), the status
    when it changed, and only the ``status_details`` keys that changed
    (:func:`changed_details`): replaying it on the state it was made from
    gives exactly the state ``update`` gives.

    Raises:
        SeriesGapError: a suffix starts beyond its series' end; nothing changed.
        ValueError: the update cannot be encoded (a detail that is not strict
            JSON, unencodable text, columns of different lengths); nothing changed.
    """
    update = normalised(update)
    task = state.task
    status = update.status
    if status is not None and task.exists and status == task.status:
        status = None
    pieces = encode_update(
        Update(status, {}, update.series, update.full_state),
        changed_details(task.details, update.status_details),
    )
    state.apply(update)
    return pieces


def _snapshot_series(state: LogState) -> tuple[SeriesUpdate, ...]:
    bases = state.bases
    return tuple(
        SeriesUpdate(name, bases.get(name, 0), *cols) for name, cols in state.task.series.items()
    )


def encode_snapshot(state: LogState) -> list[bytes]:
    """A SNAPSHOT record of ``state`` (which must exist), as pieces to write.

    Raises:
        ValueError: a detail is not strict JSON (never for a state built by replay).
    """
    task = state.task
    return _frame(
        RecordKind.SNAPSHOT, _body(task.status, task.details, _snapshot_series(state), False)
    )


def snapshot_bytes(state: LogState) -> int:
    """Size of :func:`encode_snapshot` for ``state``, in bytes, without copying any column."""
    task = state.task
    head: dict[str, Any] = {"status": task.status, "details": task.details}
    head["series"] = [[n, state.bases.get(n, 0), len(c[0])] for n, c in task.series.items()]
    try:
        head_bytes = len(_dumps(head).encode("utf-8"))
    except ValueError:
        head_bytes = 0
    return HEADER.size + _HEAD_LENGTH.size + head_bytes + POINT_BYTES * state.point_count()


def encode_run(run: Mapping[str, str]) -> list[bytes]:
    """A RUN record (``job_id``, ``task_id``: where ``trainreport sync`` sends the log)."""
    return _frame(RecordKind.RUN, [_dumps(dict(run)).encode("utf-8")])


def encode_record(kind: int, body: bytes) -> bytes:
    """One whole record of ``kind`` (a :class:`RecordKind` or an optional kind) around ``body``."""
    return b"".join(_frame(kind, [body]))


# --- decoding and replay ----------------------------------------------------------------


@attrs.define
class Replayed:
    """What a replay read.

    Attributes:
        state: the task the intact records describe.
        records: intact records applied (RUN and skipped optional kinds included).
        valid_bytes: length of the intact prefix (the file may be cut back to it).
        run: the last RUN record's fields (``job_id``, ``task_id``), or empty.
        damage: why the replay stopped early, or ``None`` when it read everything.
    """

    state: LogState
    records: int = 0
    valid_bytes: int = 0
    run: dict[str, str] = attrs.field(factory=dict)
    damage: Damage | None = None


class _InvalidRecordError(ValueError):
    pass


def _decode_column(data: memoryview, typecode: str) -> array[Any]:
    column: array[Any] = array(typecode)
    column.frombytes(data)
    if not _LITTLE_ENDIAN:
        column.byteswap()
    return column


def _decode_update(body: memoryview) -> Update:
    """Parse an UPDATE or SNAPSHOT body. Raises :class:`_InvalidRecordError`."""
    if len(body) < _HEAD_LENGTH.size:
        raise _InvalidRecordError("the body is shorter than its head length")
    (head_length,) = _HEAD_LENGTH.unpack_from(body)
    end = _HEAD_LENGTH.size + head_length
    if end > len(body):
        raise _InvalidRecordError("the head runs past the body")
    try:
        head = json.loads(bytes(body[_HEAD_LENGTH.size : end]))
    except (ValueError, RecursionError) as exc:
        raise _InvalidRecordError(f"the head is not JSON: {exc}") from exc
    if not isinstance(head, dict):
        raise _InvalidRecordError("the head is not an object")
    status, details = head.get("status"), head.get("details", {})
    full_state, listed = head.get("full_state", False), head.get("series")
    if status is not None and not isinstance(status, str):
        raise _InvalidRecordError("status is not text")
    if not isinstance(details, dict) or "metrics" in details:
        raise _InvalidRecordError("details is not an object without metrics")
    if type(full_state) is not bool:
        raise _InvalidRecordError("full_state is not a boolean")
    if listed is None:
        if end != len(body):
            raise _InvalidRecordError("columns without series")
        return Update(status, details, None, full_state)
    if not isinstance(listed, list):
        raise _InvalidRecordError("series is not a list")
    series = []
    position = end
    for entry in listed:
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and all(type(v) is int and v >= 0 for v in entry[1:])
        ):
            raise _InvalidRecordError("a series entry is not [name, offset, count]")
        name, offset, count = entry
        stop = position + POINT_BYTES * count
        if stop > len(body):
            raise _InvalidRecordError(f"series {name!r}: the columns run past the body")
        steps = _decode_column(body[position : position + 8 * count], "q")
        epochs = _decode_column(body[position + 8 * count : position + 12 * count], "i")
        values = _decode_column(body[position + 12 * count : stop], "d")
        series.append(SeriesUpdate(name, offset, steps, epochs, values))
        position = stop
    if position != len(body):
        raise _InvalidRecordError("bytes after the last column")
    return Update(status, details, tuple(series), full_state)


def _records(data: memoryview, start: int) -> Iterator[tuple[int, int, int, memoryview]]:
    """Yield ``(offset, kind, version, body)`` per intact record; raise ``_StopError`` at damage."""
    position = start
    size = len(data)
    while position < size:
        if size - position < HEADER.size:
            raise _StopError(
                Damage(DamageKind.TORN_TAIL, position, size - position, "its header is cut")
            )
        version, kind, _reserved, length, body_crc, header_crc = HEADER.unpack_from(data, position)
        if zlib.crc32(data[position : position + _HEADER_CRC_SPAN]) != header_crc:
            raise _StopError(_corrupt(data, position, "in a record header"))
        if version > FORMAT_VERSION:
            raise _StopError(
                Damage(
                    DamageKind.NEWER_VERSION,
                    position,
                    size - position,
                    f"version {version}; this trainreport reads up to {FORMAT_VERSION}",
                )
            )
        body_start = position + HEADER.size
        if length > size - body_start:
            raise _StopError(
                Damage(
                    DamageKind.TORN_TAIL,
                    position,
                    size - position,
                    f"{size - body_start:,} of its {length:,} bytes are there",
                )
            )
        body = data[body_start : body_start + length]
        if zlib.crc32(body) != body_crc:
            raise _StopError(_corrupt(data, position, "in a record body"))
        yield position, kind, version, body
        position = body_start + length


class _StopError(Exception):
    def __init__(self, damage: Damage) -> None:
        super().__init__(damage.detail)
        self.damage = damage


def _corrupt(data: memoryview, position: int, detail: str) -> Damage:
    """A checksum failure; only zero bytes from here on is a tail the disk never got."""
    rest = bytes(data[position:])
    if not rest.strip(b"\0"):
        return Damage(DamageKind.TORN_TAIL, position, len(rest), "zero bytes the disk never got")
    return Damage(DamageKind.CORRUPT, position, len(rest), detail)


def replay(data: bytes | bytearray | memoryview) -> Replayed:
    """Apply the intact records of a run log, in order, and say where any damage begins.

    Args:
        data: the whole file's bytes.

    Returns:
        :class:`Replayed`. A file that is empty, or a prefix of :data:`MAGIC`
        (a log whose creation was cut), is an empty log with a torn tail when
        not empty. Never raises, whatever ``data`` holds.
    """
    view = memoryview(data).cast("B")
    out = Replayed(LogState())
    size = len(view)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        if MAGIC.startswith(bytes(view)):
            if size:
                out.damage = Damage(DamageKind.TORN_TAIL, 0, size, "the file header is cut")
            return out
        out.damage = Damage(DamageKind.NOT_A_LOG, 0, size, "no run log header")
        return out
    out.valid_bytes = len(MAGIC)
    try:
        for position, kind, _version, body in _records(view, len(MAGIC)):
            try:
                _apply(out, kind, body)
            except (_InvalidRecordError, SeriesGapError, ValueError, TypeError) as exc:
                out.damage = Damage(
                    DamageKind.INVALID, position, size - position, str(exc) or type(exc).__name__
                )
                return out
            out.records += 1
            out.valid_bytes = position + HEADER.size + len(body)
    except _StopError as stop:
        out.damage = stop.damage
    return out


def _apply(out: Replayed, kind: int, body: memoryview) -> None:
    if kind == RecordKind.UPDATE:
        out.state.apply(_decode_update(body))
    elif kind == RecordKind.SNAPSHOT:
        out.state.reset(_decode_update(body))
    elif kind == RecordKind.RUN:
        try:
            run = json.loads(bytes(body))
        except (ValueError, RecursionError) as exc:
            raise _InvalidRecordError(f"the run record is not JSON: {exc}") from exc
        if not isinstance(run, dict):
            raise _InvalidRecordError("the run record is not an object")
        out.run = {str(k): str(v) for k, v in run.items() if isinstance(v, str)}
    elif kind < OPTIONAL_KINDS:
        raise _InvalidRecordError(f"unknown record kind {kind}")


def changed_details(held: Mapping[str, Any], sent: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``sent`` whose value differs from ``held`` (what an UPDATE record keeps).

    Plain values (text, numbers, booleans) of the same type and value are left
    out; containers are always kept (their elements' types may differ).
    """
    out = {}
    missing = object()
    for key, value in sent.items():
        old = held.get(key, missing)
        if type(old) is type(value) and isinstance(value, _SCALAR_TYPES) and old == value:
            continue
        out[key] = value
    return out
