"""The run log's format: records of idempotent series suffixes, and how they are encoded.

A run log is an append-only file. Each record says what one update says: per
series, "from index ``offset`` on, the series is exactly these points", plus
the task fields that changed (``docs/engine.md``, "The run log"). Replaying the
records in order with the reference server's merge rules
(:class:`~trainreport._wire._task_record.TaskRecord`) rebuilds the task; a record
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
                "series": [[name, offset, count], ...] (absent: no metrics),
                "foreign": {name: points as stored} (only when there are any:
                           series another tool wrote that this client cannot
                           parse, kept exactly as read; a reader that does not
                           know the key drops them and reads the rest)}
    columns  = per series of the head, in order: count int64 steps,
               count int32 epochs, count float64 values, and in a record of
               version 2 count float64 times (seconds since the Unix epoch,
               NaN: unknown)
    body of RUN = UTF-8 JSON object: {"job_id": ..., "task_id": ...}

Version 2 added the times column (each point's wall-clock time, for
``trainreport sync`` and journal recovery to send to a ``series-times-v1``
service). The version is per record: an update whose series carry no times
(and a record without series) is still written as version 1, byte for byte
as before, and a version 1 record reads with unknown times; a reader of
version 1 stops at the first version 2 record (``docs/engine.md``, "Format").

A SNAPSHOT replaces the whole state: status, every detail, and each series
from its offset (an offset above 0 means the points before it are held
elsewhere: a journal trimmed after its service acknowledged them). Kinds 128
and above are optional: a reader that does not know one skips it.

Replaying (and what damage does to it) is :mod:`trainreport._runlog._replay`;
the state a log describes is :class:`~trainreport._runlog._state.LogState`.
"""

from __future__ import annotations

import enum
import json
import struct
import sys
import zlib
from array import array
from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from trainreport._runlog._state import LogState
from trainreport._wire._protocol import (
    EPOCHS_TYPECODE,
    STEPS_TYPECODE,
    TIMES_TYPECODE,
    VALUES_TYPECODE,
)
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport._wire._task_record import unknown_times

__all__ = [
    "CRC_RUN_BYTES",
    "FORMAT_VERSION",
    "HEADER",
    "HEADER_CRC_SPAN",
    "HEAD_LENGTH",
    "LITTLE_ENDIAN",
    "MAGIC",
    "OPTIONAL_KINDS",
    "POINT_BYTES",
    "TIMED_POINT_BYTES",
    "TIMED_VERSION",
    "Piece",
    "RecordKind",
    "append_record",
    "changed_details",
    "encode_record",
    "encode_run",
    "encode_snapshot",
    "encode_update",
    "normalised",
    "snapshot_bytes",
]

#: The first 16 bytes of every run log.
MAGIC = b"trainreport-log\n"
#: The newest record format this module writes and reads.
FORMAT_VERSION = 2
#: The first record format whose columns hold each point's time.
TIMED_VERSION = 2
#: Record header: version, kind, reserved, body length, body CRC-32, header CRC-32.
HEADER = struct.Struct("<BBHQII")
#: The header bytes its own CRC-32 covers (all but that CRC).
HEADER_CRC_SPAN = HEADER.size - 4
#: The length of an UPDATE or SNAPSHOT body's JSON head.
HEAD_LENGTH = struct.Struct("<I")
#: Bytes a point takes in a version 1 record's columns: int64 step, int32 epoch, float64 value.
POINT_BYTES = 20
#: ... and in a version 2 record's, with its float64 time.
TIMED_POINT_BYTES = 28
#: Items per piece when a long column is encoded (so no one copy holds the GIL for long).
_CHUNK_ITEMS = 1 << 16
#: Columns are little-endian on disk; a big-endian machine swaps bytes.
LITTLE_ENDIAN = sys.byteorder == "little"
#: A part of a record as encoded: bytes, a whole record, or a view of a column's own buffer.
Piece: TypeAlias = bytes | bytearray | memoryview
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode
_SCALAR_TYPES = (str, int, float, bool)


class RecordKind(enum.IntEnum):
    """What a record holds."""

    UPDATE = 1
    SNAPSHOT = 2
    RUN = 3


#: Kinds at or above this value may be skipped by a reader that does not know them.
OPTIONAL_KINDS = 128


# --- encoding ---------------------------------------------------------------------------


def _column(values: array[Any], typecode: str) -> array[Any]:
    """``values`` as an array of ``typecode`` (converted when a caller gave another type).

    Raises:
        OverflowError: a value does not fit (an epoch beyond int32).
    """
    if getattr(values, "typecode", None) == typecode:
        return values
    return array(typecode, values)


def _column_pieces(column: array[Any], out: list[Piece]) -> None:
    """Append ``column``'s little-endian bytes to ``out``.

    On a little-endian machine, a view of the column's own buffer (no copy:
    a record is joined once, :func:`_record`);
    elsewhere byte-swapped copies, in pieces of at most ``_CHUNK_ITEMS`` items
    (so no one copy holds the GIL for long).
    """
    if not column:
        return
    if LITTLE_ENDIAN:
        out.append(memoryview(column).cast("B"))
        return
    for start in range(0, len(column), _CHUNK_ITEMS):
        part = column[start : start + _CHUNK_ITEMS]
        part.byteswap()
        out.append(part.tobytes())


#: ``zlib.crc32`` lets other threads run while it reads more than 5 KiB (CPython's
#: ``zlibmodule.c``), and a thread that lets the interpreter go waits up to the switch
#: interval (``sys.getswitchinterval()``, 5 ms) to take it back from a training thread
#: whose Python never pauses. One CRC call a column cost the reporter thread 5 ms a
#: column (a third of its time in ``benchmarks/bench_ingest.py``'s paced loop), so a
#: record's CRC is one call over the joined record (:func:`_record`), and a snapshot's
#: (written in pieces) one call per run of at least this many bytes (:func:`_crc32`).
CRC_RUN_BYTES = 4 * 2**20
_BLANK_HEADER = bytes(HEADER.size)


def _header(kind: int, length: int, crc: int, version: int) -> bytes:
    """A record header: ``length`` bytes of body whose CRC-32 is ``crc``."""
    head = HEADER.pack(version, kind, 0, length, crc, 0)
    return head[:HEADER_CRC_SPAN] + struct.pack("<I", zlib.crc32(head[:HEADER_CRC_SPAN]))


def _crc32(pieces: list[Piece]) -> int:
    """The CRC-32 of ``pieces`` joined, in one ``zlib.crc32`` call per ``CRC_RUN_BYTES``.

    Pieces shorter than that are copied together into runs of about that size
    first (a ``memcpy``, under the interpreter), so the call that lets the
    interpreter go does milliseconds of work each time, not microseconds.
    """
    crc = 0
    run = bytearray()
    for piece in pieces:
        if len(piece) >= CRC_RUN_BYTES:
            if run:
                crc = zlib.crc32(run, crc)
                run.clear()
            crc = zlib.crc32(piece, crc)
            continue
        run += piece
        if len(run) >= CRC_RUN_BYTES:
            crc = zlib.crc32(run, crc)
            run.clear()
    return zlib.crc32(run, crc) if run else crc


def _frame(kind: int, pieces: list[Piece], version: int = 1) -> list[Piece]:
    """Prefix ``pieces`` (the body) with a record header of ``version``; the record's pieces.

    For a record written in pieces (a snapshot, ``replace_file``): no copy of
    the whole body is made. A record appended whole is :func:`_record`.
    """
    length = sum(len(piece) for piece in pieces)
    return [_header(kind, length, _crc32(pieces), version), *pieces]


def _record(kind: int, pieces: list[Piece], version: int = 1) -> bytearray:
    """One record of ``version`` around ``pieces`` (the body), in one buffer.

    The pieces are copied once, into the record (they may view the columns'
    buffers, ``_column_pieces``: the record keeps no view), and the body's
    CRC-32 is one call over that copy (``CRC_RUN_BYTES``).
    """
    record = bytearray().join([_BLANK_HEADER, *pieces])
    with memoryview(record) as view:
        crc = zlib.crc32(view[HEADER.size :])
    record[: HEADER.size] = _header(kind, len(record) - HEADER.size, crc, version)
    return record


def _timed(series: tuple[SeriesUpdate, ...] | None) -> bool:
    """Whether a record of ``series`` carries the times column (version 2)."""
    return any(s.times is not None for s in series or ())


def _body(
    status: str | None,
    details: Mapping[str, Any],
    series: tuple[SeriesUpdate, ...] | None,
    full_state: bool,
    foreign: Mapping[str, Any] | None = None,
    *,
    timed: bool = False,
) -> list[Piece]:
    """An UPDATE or SNAPSHOT body; ``timed``: with each series' times (version 2)."""
    head: dict[str, Any] = {}
    if status is not None:
        head["status"] = status
    head["details"] = dict(details)
    if full_state:
        head["full_state"] = True
    if series is not None:
        head["series"] = [[s.name, s.offset, len(s.values)] for s in series]
    if foreign:
        head["foreign"] = dict(foreign)
    encoded = _dumps(head).encode("utf-8")
    pieces: list[Piece] = [HEAD_LENGTH.pack(len(encoded)), encoded]
    columns: list[array[Any]] = []
    for s in series or ():
        columns += (s.steps, s.epochs, s.values)
        if timed:
            columns.append(unknown_times(len(s.values)) if s.times is None else s.times)
    for column in columns:
        _column_pieces(column, pieces)
    return pieces


def normalised(update: Update) -> Update:
    """``update`` with every column in the log's types (int64, int32, float64, float64 times).

    Raises:
        ValueError: the columns differ in length, a value does not fit its type,
            or ``status_details`` holds ``metrics`` (curves travel as series).
    """
    if "metrics" in update.status_details:
        raise ValueError("status_details may not hold metrics: curves travel as series")
    if not update.series:
        return update
    out = []
    converted = False
    for s in update.series:
        try:
            steps, epochs, values = (
                _column(s.steps, STEPS_TYPECODE),
                _column(s.epochs, EPOCHS_TYPECODE),
                _column(s.values, VALUES_TYPECODE),
            )
            times = None if s.times is None else _column(s.times, TIMES_TYPECODE)
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"series {s.name!r}: {exc}") from exc
        if not len(steps) == len(epochs) == len(values) == len(values if times is None else times):
            raise ValueError(f"series {s.name!r}: columns of different lengths")
        if s.offset < 0:
            raise ValueError(f"series {s.name!r}: negative offset")
        if steps is s.steps and epochs is s.epochs and values is s.values and times is s.times:
            out.append(s)
        else:
            out.append(SeriesUpdate(s.name, s.offset, steps, epochs, values, times))
            converted = True
    return attrs.evolve(update, series=tuple(out)) if converted else update


def encode_update(update: Update, changed_details: Mapping[str, Any]) -> bytearray:
    """An UPDATE record for ``update`` (already :func:`normalised`), in one buffer.

    Version 2 (with a times column) when any series carries times, else version 1.

    Args:
        update: the update; its status is written when not ``None``.
        changed_details: the ``status_details`` keys to write (those that changed).

    Raises:
        ValueError: a detail is not strict JSON, or text is not encodable as UTF-8.
    """
    foreign = update.foreign_series if update.full_state else None
    timed = _timed(update.series)
    body = _body(
        update.status, changed_details, update.series, update.full_state, foreign, timed=timed
    )
    return _record(RecordKind.UPDATE, body, TIMED_VERSION if timed else 1)


def append_record(state: LogState, update: Update) -> bytearray:
    """Apply ``update`` to ``state`` and return its UPDATE record, in one buffer.

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
    record = encode_update(
        Update(status, {}, update.series, update.full_state, update.foreign_series),
        changed_details(task.details, update.status_details),
    )
    state.apply(update)
    return record


def _snapshot_series(state: LogState) -> tuple[SeriesUpdate, ...]:
    bases = state.bases
    return tuple(
        SeriesUpdate(name, bases.get(name, 0), *cols) for name, cols in state.task.series.items()
    )


def encode_snapshot(state: LogState) -> list[Piece]:
    """A SNAPSHOT record of ``state`` (which must exist), as pieces to write (version 2).

    Raises:
        ValueError: a detail is not strict JSON (never for a state built by replay).
    """
    task = state.task
    body = _body(
        task.status, task.details, _snapshot_series(state), False, task.foreign, timed=True
    )
    return _frame(RecordKind.SNAPSHOT, body, TIMED_VERSION)


def snapshot_bytes(state: LogState, points: int | None = None) -> int:
    """Size of :func:`encode_snapshot` for ``state``, in bytes, without copying any column.

    Args:
        state: the state the snapshot describes.
        points: the points it would hold, when not the state's own (a journal,
            whose state keeps none: its snapshot takes them from the store).
    """
    task = state.task
    head: dict[str, Any] = {"status": task.status, "details": task.details}
    head["series"] = [[n, state.bases.get(n, 0), len(c[0])] for n, c in task.series.items()]
    if task.foreign:
        head["foreign"] = task.foreign
    try:
        head_bytes = len(_dumps(head).encode("utf-8"))
    except ValueError:
        head_bytes = 0
    held = state.point_count() if points is None else points
    return HEADER.size + HEAD_LENGTH.size + head_bytes + TIMED_POINT_BYTES * held


def encode_run(run: Mapping[str, str]) -> bytearray:
    """A RUN record (``job_id``, ``task_id``: where ``trainreport sync`` sends the log)."""
    return _record(RecordKind.RUN, [_dumps(dict(run)).encode("utf-8")])


def encode_record(kind: int, body: bytes) -> bytes:
    """One whole record of ``kind`` (a :class:`RecordKind` or an optional kind) around ``body``."""
    return bytes(_record(kind, [body]))


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
