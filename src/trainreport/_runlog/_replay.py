"""Replaying a run log: its intact records applied in order, and what damage cost.

Damage is detected, never misread, and never stops more than it must. Each
record carries its own checksums, so a record whose header or body checksum
fails, or whose content is not a valid update, is skipped and the replay goes
on with the next intact record (found by its header when the damaged header's
length cannot be trusted); a damaged file header followed by an intact record
is skipped the same way. A record of a newer format version, the file ending
inside a record, or a required record kind it does not know stops the replay
there. After damage, a series point that would follow points lost with a
damaged record cannot be placed: that series keeps its prefix and the points
are counted, never shifted (:class:`Replayed`).
Nothing here raises for any input bytes. The format is described in
:mod:`trainreport._runlog._format`.
"""

from __future__ import annotations

import enum
import json
import re
import zlib
from array import array
from typing import Any

import attrs

from trainreport._runlog._format import (
    FORMAT_VERSION,
    HEAD_LENGTH,
    HEADER,
    HEADER_CRC_SPAN,
    LITTLE_ENDIAN,
    MAGIC,
    OPTIONAL_KINDS,
    POINT_BYTES,
    TIMED_POINT_BYTES,
    TIMED_VERSION,
    RecordKind,
)
from trainreport._runlog._state import LogState
from trainreport._wire._protocol import (
    EPOCHS_TYPECODE,
    STEPS_TYPECODE,
    TIMES_TYPECODE,
    VALUES_TYPECODE,
)
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport._wire._task_record import SeriesGapError

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
        dropped_bytes: bytes unread from ``offset`` on (to the next intact
            record, or to the end of the file when none follows).
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
        records: intact records applied (RUN and skipped optional kinds included),
            before the damage and after it.
        valid_bytes: length of the intact prefix before any damage (the file may
            be cut back to it).
        run: the last RUN record's fields (``job_id``, ``task_id``), or empty.
        damage: the first damage found, or ``None`` when everything was read.
        damages: every damaged stretch, in file order (the first is :attr:`damage`).
        salvaged: records applied after the first damage.
        unplaced: per series, points read after the damage that could not be
            placed (they would follow points lost with a damaged record).
    """

    state: LogState
    records: int = 0
    valid_bytes: int = 0
    run: dict[str, str] = attrs.field(factory=dict)
    damage: Damage | None = None
    damages: list[Damage] = attrs.field(factory=list)
    salvaged: int = 0
    unplaced: dict[str, int] = attrs.field(factory=dict)

    def damaged(self, damage: Damage) -> None:
        """Note one damaged stretch."""
        if self.damage is None:
            self.damage = damage
        self.damages.append(damage)

    def lost(self) -> str:
        """What the damage cost, in one sentence (``""`` when nothing was). Never raises."""
        if not self.damages:
            return ""
        unread = sum(d.dropped_bytes for d in self.damages)
        parts = [
            f"{unread:,} bytes unreadable in {len(self.damages)} place(s), "
            f"the first {self.damages[0].describe()}",
            f"{self.salvaged} intact record(s) after the damage were read",
        ]
        if self.unplaced:
            names = sorted(self.unplaced)[:5]
            more = len(self.unplaced) - len(names)
            listed = ", ".join(f"{n} ({self.unplaced[n]:,})" for n in names)
            parts.append(
                "points that would follow lost ones could not be placed, per series: "
                + listed
                + (f" and {more} more series" if more else "")
            )
        return "; ".join(parts)


class _InvalidRecordError(ValueError):
    pass


class _UnknownKindError(_InvalidRecordError):
    """A required kind this reader does not know: what follows may depend on it."""


def _decode_column(data: memoryview, typecode: str) -> array[Any]:
    column: array[Any] = array(typecode)
    column.frombytes(data)
    if not LITTLE_ENDIAN:
        column.byteswap()
    return column


def _decode_update(body: memoryview, version: int = 1) -> Update:
    """Parse an UPDATE or SNAPSHOT body of ``version``. Raises :class:`_InvalidRecordError`.

    A version 1 body has no times column: its series carry none (``times`` is ``None``).
    """
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
    timed = version >= TIMED_VERSION
    for entry in listed:
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and all(type(v) is int and v >= 0 for v in entry[1:])
        ):
            raise _InvalidRecordError("a series entry is not [name, offset, count]")
        name, offset, count = entry
        stop = position + (TIMED_POINT_BYTES if timed else POINT_BYTES) * count
        if stop > len(body):
            raise _InvalidRecordError(f"series {name!r}: the columns run past the body")
        steps = _decode_column(body[position : position + 8 * count], STEPS_TYPECODE)
        epochs = _decode_column(body[position + 8 * count : position + 12 * count], EPOCHS_TYPECODE)
        values = _decode_column(
            body[position + 12 * count : position + 20 * count], VALUES_TYPECODE
        )
        times = (
            _decode_column(body[position + 20 * count : stop], TIMES_TYPECODE) if timed else None
        )
        series.append(SeriesUpdate(name, offset, steps, epochs, values, times))
        position = stop
    if position != len(body):
        raise _InvalidRecordError("bytes after the last column")
    return Update(status, details, tuple(series), full_state, foreign)


#: Where a record header may begin: a known version, a known kind, reserved 0.
_HEADER_START = re.compile(
    b"[\\x01-%c][%c-%c]\\x00\\x00" % (FORMAT_VERSION, min(RecordKind), max(RecordKind))
)
#: A damaged file header is taken for a log's when this many of its bytes are right.
_MAGIC_BYTES_RIGHT = 12


def _intact(data: memoryview, position: int) -> int | None:
    """The end of the intact record at ``position`` (both checksums right), or ``None``."""
    size = len(data)
    if size - position < HEADER.size:
        return None
    version, _kind, _reserved, length, body_crc, header_crc = HEADER.unpack_from(data, position)
    if zlib.crc32(data[position : position + HEADER_CRC_SPAN]) != header_crc:
        return None
    body_start = position + HEADER.size
    if version > FORMAT_VERSION or length > size - body_start:
        return None
    end: int = body_start + length
    if zlib.crc32(data[body_start:end]) != body_crc:
        return None
    return end


def _next_intact(data: memoryview, start: int) -> int | None:
    """The offset of the first intact record at or after ``start``, or ``None``."""
    for match in _HEADER_START.finditer(data, start):
        if _intact(data, match.start()) is not None:
            return match.start()
    return None


def _skip_to_next(data: memoryview, position: int, detail: str) -> tuple[Damage, int | None]:
    """Damage from ``position`` to the next intact record (``None``: there is none)."""
    rest = bytes(data[position:])
    if not rest.strip(b"\0"):  # only zero bytes from here on: a tail the disk never got
        return Damage(
            DamageKind.TORN_TAIL, position, len(rest), "zero bytes the disk never got"
        ), None
    resume = _next_intact(data, position + 1)
    end = len(data) if resume is None else resume
    return Damage(DamageKind.CORRUPT, position, end - position, detail), resume


def _read(
    data: memoryview, position: int
) -> tuple[int, memoryview, int, int] | tuple[Damage, int | None]:
    """``(kind, body, end, version)`` of the record at ``position``, or ``(damage, go on at)``."""
    size = len(data)
    if size - position < HEADER.size:
        return Damage(DamageKind.TORN_TAIL, position, size - position, "its header is cut"), None
    version, kind, _reserved, length, body_crc, header_crc = HEADER.unpack_from(data, position)
    if zlib.crc32(data[position : position + HEADER_CRC_SPAN]) != header_crc:
        return _skip_to_next(data, position, "in a record header")
    if version > FORMAT_VERSION:
        detail = f"version {version}; this trainreport reads up to {FORMAT_VERSION}"
        return Damage(DamageKind.NEWER_VERSION, position, size - position, detail), None
    body_start = position + HEADER.size
    if length > size - body_start:
        detail = f"{size - body_start:,} of its {length:,} bytes are there"
        return Damage(DamageKind.TORN_TAIL, position, size - position, detail), None
    end = body_start + length
    body = data[body_start:end]
    if zlib.crc32(body) != body_crc:
        # The header is intact, so its length is right: the next record starts at the end.
        damage = Damage(DamageKind.CORRUPT, position, length + HEADER.size, "in a record body")
        return damage, end
    return kind, body, end, version


def _start(data: memoryview, out: Replayed) -> int | None:
    """Where the first record begins, after the file header; ``None``: not a log (or empty)."""
    size = len(data)
    head = bytes(data[: len(MAGIC)])
    if head == MAGIC:
        return len(MAGIC)
    if MAGIC.startswith(head):
        if size:
            out.damaged(Damage(DamageKind.TORN_TAIL, 0, size, "the file header is cut"))
        return None
    # A damaged file header: a log's when an intact record follows it (or, with most
    # of its bytes right, some record further on does).
    resume = len(MAGIC) if _intact(data, len(MAGIC)) is not None else None
    if (
        resume is None
        and sum(a == b for a, b in zip(head, MAGIC, strict=False)) >= _MAGIC_BYTES_RIGHT
    ):
        resume = _next_intact(data, len(MAGIC))
    if resume is None:
        out.damaged(Damage(DamageKind.NOT_A_LOG, 0, size, "no run log header"))
        return None
    out.damaged(Damage(DamageKind.CORRUPT, 0, resume, "in the file header"))
    return resume


def replay(data: bytes | bytearray | memoryview) -> Replayed:
    """Apply the intact records of a run log, in order, and say what any damage cost.

    Args:
        data: the whole file's bytes.

    Returns:
        :class:`Replayed`. A file that is empty, or a prefix of :data:`MAGIC`
        (a log whose creation was cut), is an empty log with a torn tail when
        not empty. Never raises, whatever ``data`` holds.
    """
    view = memoryview(data).cast("B")
    out = Replayed(LogState())
    position = _start(view, out)
    if position is None:
        return out
    if out.damage is None:
        out.valid_bytes = position
    size = len(view)
    while position is not None and position < size:
        read = _read(view, position)
        if isinstance(read[0], Damage):
            out.damaged(read[0])
            position = read[1]
            continue
        kind, body, end, version = read
        try:
            _apply(out, kind, body, version)
        except (_InvalidRecordError, SeriesGapError, ValueError, TypeError) as exc:
            detail = str(exc) or type(exc).__name__
            if isinstance(exc, _UnknownKindError):  # stops, as a newer version does
                out.damaged(Damage(DamageKind.INVALID, position, size - position, detail))
                break
            out.damaged(Damage(DamageKind.INVALID, position, end - position, detail))
            position = end
            continue
        out.records += 1
        if out.damage is None:
            out.valid_bytes = end
        else:
            out.salvaged += 1
        position = end
    return out


def _placeable(out: Replayed, update: Update) -> Update:
    """``update`` without the series it cannot extend (after damage; counted in ``unplaced``)."""
    if out.damage is None or update.full_state or not update.series:
        return update
    lengths = out.state.lengths()
    kept = []
    for s in update.series:
        if s.offset > lengths.get(s.name, 0):
            out.unplaced[s.name] = out.unplaced.get(s.name, 0) + len(s)
        else:
            kept.append(s)
    if len(kept) == len(update.series):
        return update
    return attrs.evolve(update, series=tuple(kept))


def _apply(out: Replayed, kind: int, body: memoryview, version: int) -> None:
    if kind == RecordKind.UPDATE:
        out.state.apply(_placeable(out, _decode_update(body, version)))
    elif kind == RecordKind.SNAPSHOT:
        out.state.reset(_decode_update(body, version))
    elif kind == RecordKind.RUN:
        try:
            run = json.loads(bytes(body))
        except (ValueError, RecursionError) as exc:
            raise _InvalidRecordError(f"the run record is not JSON: {exc}") from exc
        if not isinstance(run, dict):
            raise _InvalidRecordError("the run record is not an object")
        out.run = {str(k): str(v) for k, v in run.items() if isinstance(v, str)}
    elif kind < OPTIONAL_KINDS:
        raise _UnknownKindError(f"unknown record kind {kind}")
