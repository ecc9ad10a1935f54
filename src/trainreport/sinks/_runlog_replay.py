"""Replaying a run log: its intact records applied in order, and where any damage begins.

Damage is detected, never misread: a record whose header or body checksum
fails, whose version is newer than :data:`~trainreport.sinks._runlog.FORMAT_VERSION`,
whose content is not a valid update, or that the file ends inside, stops the
replay there; every record before it is kept (:class:`Replayed`). Nothing here
raises for any input bytes. The format is described in
:mod:`trainreport.sinks._runlog`.
"""

from __future__ import annotations

import enum
import json
import zlib
from array import array
from collections.abc import Iterator
from typing import Any

import attrs

from trainreport._sink import SeriesUpdate, Update
from trainreport.sinks._record import SeriesGapError
from trainreport.sinks._runlog import (
    FORMAT_VERSION,
    HEAD_LENGTH,
    HEADER,
    HEADER_CRC_SPAN,
    LITTLE_ENDIAN,
    MAGIC,
    OPTIONAL_KINDS,
    POINT_BYTES,
    RecordKind,
)
from trainreport.sinks._runlog_state import LogState

__all__ = ["Damage", "DamageKind", "Replayed", "replay"]


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
    if not LITTLE_ENDIAN:
        column.byteswap()
    return column


def _decode_update(body: memoryview) -> Update:
    """Parse an UPDATE or SNAPSHOT body. Raises :class:`_InvalidRecordError`."""
    if len(body) < HEAD_LENGTH.size:
        raise _InvalidRecordError("the body is shorter than its head length")
    (head_length,) = HEAD_LENGTH.unpack_from(body)
    end = HEAD_LENGTH.size + head_length
    if end > len(body):
        raise _InvalidRecordError("the head runs past the body")
    try:
        head = json.loads(bytes(body[HEAD_LENGTH.size : end]))
    except (ValueError, RecursionError) as exc:
        raise _InvalidRecordError(f"the head is not JSON: {exc}") from exc
    if not isinstance(head, dict):
        raise _InvalidRecordError("the head is not an object")
    status, details = head.get("status"), head.get("details", {})
    full_state, listed = head.get("full_state", False), head.get("series")
    foreign = head.get("foreign", {})
    if not isinstance(foreign, dict):
        raise _InvalidRecordError("foreign is not an object")
    if status is not None and not isinstance(status, str):
        raise _InvalidRecordError("status is not text")
    if not isinstance(details, dict) or "metrics" in details:
        raise _InvalidRecordError("details is not an object without metrics")
    if type(full_state) is not bool:
        raise _InvalidRecordError("full_state is not a boolean")
    if listed is None:
        if end != len(body):
            raise _InvalidRecordError("columns without series")
        return Update(status, details, None, full_state, foreign)
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
    return Update(status, details, tuple(series), full_state, foreign)


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
        if zlib.crc32(data[position : position + HEADER_CRC_SPAN]) != header_crc:
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
