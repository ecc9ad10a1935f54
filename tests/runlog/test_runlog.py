"""The run log's format: records, replay with the reference server's rules, damage never misread.

Logs here are built in memory with the module's own encoders
(``append_record``), exactly as ``RunLogWriter`` builds them; Hypothesis
generates sequences of updates (rewinds, status changes, NaN values) and cuts or
corrupts the bytes anywhere.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainreport import MemorySink
from trainreport._runlog import _format as _runlog
from trainreport._runlog._format import (
    FORMAT_VERSION,
    HEADER,
    MAGIC,
    POINT_BYTES,
    TIMED_POINT_BYTES,
    RecordKind,
    append_record,
    encode_record,
    encode_run,
    encode_snapshot,
)
from trainreport._runlog._replay import DamageKind, _decode_update, replay
from trainreport._runlog._state import LogState
from trainreport._wire._sink_interface import SeriesUpdate, Update

pytestmark = pytest.mark.timeout(120)

NAMES = ("train_loss", "train_lr", "val_loss")


def points(name: str, offset: int, steps: list[int], values: list[float] | None = None) -> Any:
    values = [float(s) / 10 for s in steps] if values is None else values
    return SeriesUpdate(
        name, offset, array("q", steps), array("i", [1] * len(steps)), array("d", values)
    )


def build(updates: list[Update]) -> tuple[bytes, list[int], list[Any]]:
    """(log bytes, the end offset of each record, the task after each record)."""
    state = LogState()
    data = bytearray(MAGIC)
    ends = []
    tasks = []
    for update in updates:
        data += bytes(append_record(state, update))
        ends.append(len(data))
        tasks.append(state.to_task())
    return bytes(data), ends, tasks


@st.composite
def update_sequences(draw: st.DrawFn) -> list[Update]:
    """Valid suffix updates: each offset at most the series' length (rewinds included)."""
    lengths: dict[str, int] = {}
    out = []
    for i in range(draw(st.integers(1, 8))):
        series = []
        for name in draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True)):
            held = lengths.get(name, 0)
            offset = draw(st.integers(0, held))
            count = draw(st.integers(0, 5))
            values = draw(
                st.lists(
                    st.floats(allow_nan=True, allow_infinity=True), min_size=count, max_size=count
                )
            )
            steps = list(range(offset + 1, offset + 1 + count))
            series.append(points(name, offset, steps, values))
            lengths[name] = offset + count
        status = draw(st.sampled_from([None, "running", "running", "completed"]))
        details = {"step": i, "phase": draw(st.sampled_from(["training", "validation"]))}
        if draw(st.booleans()):
            details["eta_seconds"] = 12.5
        out.append(Update(status, details, tuple(series) if series else None, False))
    return out


def test_replay_applies_records_with_the_reference_servers_suffix_semantics() -> None:
    """The replayed task equals what MemorySink (the server's merge rules) holds after the same."""
    updates = [
        Update(
            "running", {"step": 2, "train_loss": 0.2}, (points("train_loss", 0, [1, 2]),), False
        ),
        Update(None, {"step": 3}, (points("train_loss", 2, [3]),), False),
        Update(None, {"step": 2}, (points("train_loss", 1, [2]),), False),  # a rewind
        Update("completed", {"eta_seconds": 1.0}, (points("val_loss", 0, [2]),), False),
    ]
    sink = MemorySink(series_suffix=True)
    sink.open()
    for update in updates:
        sink.send(update)
    data, _, _ = build(updates)

    replayed = replay(data)

    assert sink.task == replayed.state.to_task()
    assert replayed.damage is None
    assert 4 == replayed.records


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(update_sequences())
def test_replay_matches_the_server_merge_for_any_sequence_and_is_idempotent(
    updates: list[Update],
) -> None:
    """Any valid sequence: replay equals the server's merge; each record twice changes nothing."""
    sink = MemorySink(series_suffix=True)
    sink.open()
    for update in updates:
        sink.send(update)
    data, ends, _ = build(updates)
    doubled = bytearray(MAGIC)
    start = len(MAGIC)
    for end in ends:
        doubled += data[start:end] * 2
        start = end

    assert sink.task == replay(data).state.to_task()
    assert sink.task == replay(bytes(doubled)).state.to_task()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(update_sequences(), st.data())
def test_a_log_cut_at_any_byte_replays_to_a_prefix_of_its_records(
    updates: list[Update], data: st.DataObject
) -> None:
    """A crash can cut the file anywhere: replay keeps each whole record, never raises."""
    log, ends, tasks = build(updates)
    cut = data.draw(st.integers(0, len(log)))

    replayed = replay(log[:cut])

    whole = sum(1 for end in ends if end <= cut)
    assert whole == replayed.records
    assert (tasks[whole - 1] if whole else None) == replayed.state.to_task()
    if cut in (*ends, len(MAGIC)) or cut == 0:
        assert replayed.damage is None
    else:
        assert replayed.damage is not None
        assert DamageKind.TORN_TAIL is replayed.damage.kind
        assert cut - replayed.valid_bytes == replayed.damage.dropped_bytes


def _without_record(log: bytes, ends: list[int], lost: int | None) -> Any:
    """The model of salvage: every record but ``lost`` applied in order; after it, a series
    suffix that would leave a gap (it follows the lost points) is left out."""
    state = LogState()
    start = len(MAGIC)
    for i, end in enumerate(ends):
        body = memoryview(log)[start + HEADER.size : end]
        start = end
        if i == lost:
            continue
        update = _decode_update(body)
        if lost is not None and i > lost and update.series:
            held = state.lengths()
            kept = tuple(s for s in update.series if s.offset <= held.get(s.name, 0))
            update = Update(update.status, update.status_details, kept, False)
        state.apply(update)
    return state.to_task()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(update_sequences(), st.data())
def test_corrupting_any_byte_loses_only_its_record_and_what_cannot_follow_it(
    updates: list[Update], data: st.DataObject
) -> None:
    """A flipped byte is caught by a checksum: its record is skipped, every other record is
    read (a damaged file header loses nothing), points are never misplaced, and it is said."""
    log, ends, _ = build(updates)
    position = data.draw(st.integers(0, len(log) - 1))
    mask = data.draw(st.integers(1, 255))
    damaged = bytearray(log)
    damaged[position] ^= mask

    replayed = replay(bytes(damaged))

    lost = None if position < len(MAGIC) else sum(1 for end in ends if end <= position)
    before = 0 if lost is None else lost
    assert _without_record(log, ends, lost) == replayed.state.to_task()
    assert before == replayed.records - replayed.salvaged
    assert len(ends) - (lost is not None) == replayed.records
    assert replayed.damage is not None
    assert DamageKind.CORRUPT is replayed.damage.kind
    assert (0 if lost is None else ends[lost - 1] if lost else len(MAGIC)) == replayed.damage.offset
    assert replayed.lost()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_replay_never_raises_whatever_the_bytes(noise: bytes, with_magic: bool) -> None:
    """Random bytes, with or without the header in front, replay without an exception."""
    replayed = replay((MAGIC if with_magic else b"") + noise)
    assert replayed.records >= 0


def test_a_record_of_a_newer_format_version_stops_the_replay_and_keeps_what_came_before() -> None:
    """A newer writer's record is not guessed at: the older records are read, the rest reported."""
    log, ends, tasks = build([Update("running", {"step": 1}, None, False)])
    body = b'{"whatever":1}'
    newer = bytearray(encode_record(RecordKind.UPDATE, body))
    newer[0] = FORMAT_VERSION + 1
    newer[16:20] = struct.pack("<I", __import__("zlib").crc32(bytes(newer[:16])))

    replayed = replay(log + bytes(newer))

    assert 1 == replayed.records
    assert tasks[0] == replayed.state.to_task()
    assert replayed.damage is not None
    assert DamageKind.NEWER_VERSION is replayed.damage.kind
    assert ends[0] == replayed.damage.offset


def test_a_file_that_is_not_a_log_is_reported_as_such() -> None:
    """A JSON record, or any other file, is never read as records."""
    replayed = replay(b'{"status": "running", "status_details": {}}')
    assert replayed.damage is not None
    assert DamageKind.NOT_A_LOG is replayed.damage.kind
    assert replayed.state.to_task() is None


def test_an_empty_file_or_a_cut_header_is_an_empty_log() -> None:
    """A log whose creation was cut holds nothing, and only a non-empty cut is damage."""
    assert replay(b"").damage is None
    cut = replay(MAGIC[:5])
    assert cut.damage is not None
    assert DamageKind.TORN_TAIL is cut.damage.kind
    assert cut.state.to_task() is None


def test_zero_bytes_at_the_end_are_a_torn_tail_not_corruption() -> None:
    """After a power loss a file can end in zeros the disk never got: a torn tail."""
    log, _, tasks = build([Update("running", {"step": 1}, None, False)])
    replayed = replay(log + bytes(100))
    assert replayed.damage is not None
    assert DamageKind.TORN_TAIL is replayed.damage.kind
    assert tasks[0] == replayed.state.to_task()


def test_an_unknown_optional_record_kind_is_skipped_and_an_unknown_required_one_stops() -> None:
    """Kinds from 128 on may be added later without breaking readers; others may not."""
    log, _, tasks = build([Update("running", {"step": 1}, None, False)])
    tail, _, _ = build([Update(None, {"step": 2}, None, False)])
    optional = encode_record(200, b"anything")
    required = encode_record(100, b"anything")

    skipped = replay(log + optional + tail[len(MAGIC) :])
    stopped = replay(log + required + tail[len(MAGIC) :])

    assert 2 == skipped.state.to_task()["status_details"]["step"]  # type: ignore[index]
    assert skipped.damage is None
    assert tasks[0] == stopped.state.to_task()
    assert stopped.damage is not None
    assert DamageKind.INVALID is stopped.damage.kind


def test_a_record_whose_suffix_leaves_a_gap_is_invalid_not_applied() -> None:
    """A record claiming points past a series' end (a hand-edited log) stops the replay."""
    state = LogState()
    record = append_record(state, Update("running", {}, (points("a", 0, [1]),), False))
    gap = LogState()
    gap.apply(Update("running", {}, (points("a", 0, [1, 2, 3]),), False))
    bad = append_record(gap, Update(None, {}, (points("a", 3, [4]),), False))

    replayed = replay(MAGIC + record + bad)

    assert 1 == replayed.records
    assert replayed.damage is not None
    assert DamageKind.INVALID is replayed.damage.kind


def test_a_record_keeps_only_the_fields_that_changed() -> None:
    """Unchanged status and details are not written again; the replay is the same."""
    state = LogState()
    first = bytes(
        append_record(state, Update("running", {"max_steps": 100, "step": 1}, None, False))
    )
    again = bytes(
        append_record(state, Update("running", {"max_steps": 100, "step": 2}, None, False))
    )

    head = json.loads(again[HEADER.size + 4 :])
    assert {"details": {"step": 2}} == head
    assert len(again) < len(first)
    assert state.to_task() == replay(MAGIC + first + again).state.to_task()


def test_points_take_twenty_bytes_each_in_binary_columns() -> None:
    """int64 step, int32 epoch, float64 value: the log grows by 20 bytes a point plus its head."""
    one = bytes(append_record(LogState(), Update(None, {}, (points("a", 0, [1]),), False)))
    many = bytes(
        append_record(LogState(), Update(None, {}, (points("a", 0, list(range(1, 1001))),), False))
    )
    assert 999 * POINT_BYTES == len(many) - len(one) - (len("1000") - len("1"))


def timed(series: SeriesUpdate, times: list[float]) -> SeriesUpdate:
    return SeriesUpdate(
        series.name, series.offset, series.steps, series.epochs, series.values, array("d", times)
    )


def test_each_points_time_survives_the_log_and_a_compaction() -> None:
    """A series' times column is written (format 2) and replayed, through a snapshot too."""
    first = timed(points("a", 0, [1, 2]), [1000.5, 1001.25])
    rewind = timed(points("a", 1, [2, 3]), [1002.0, math.nan])
    data, _, _ = build([Update(None, {}, (first,), False), Update(None, {}, (rewind,), False)])

    replayed = replay(data)
    snapshot = replay(MAGIC + b"".join(encode_snapshot(replayed.state)))

    for state in (replayed.state, snapshot.state):
        times = state.task.series["a"][3]
        assert [1000.5, 1002.0] == times.tolist()[:2]
        assert math.isnan(times[2])
    assert 2 == data[len(MAGIC)]  # the first record's version: it carries times


def test_points_with_times_take_twenty_eight_bytes_each() -> None:
    """int64 step, int32 epoch, float64 value, float64 time: 28 bytes a point plus the head."""
    one = bytes(
        append_record(LogState(), Update(None, {}, (timed(points("a", 0, [1]), [1.0]),), False))
    )
    steps = list(range(1, 1001))
    many = bytes(
        append_record(
            LogState(),
            Update(None, {}, (timed(points("a", 0, steps), [float(s) for s in steps]),), False),
        )
    )
    assert 28 == TIMED_POINT_BYTES
    assert 999 * TIMED_POINT_BYTES == len(many) - len(one) - (len("1000") - len("1"))


def test_a_log_written_before_times_still_reads_with_unknown_times() -> None:
    """A format-1 log (checked-in bytes written by the earlier writer) replays whole.

    The bytes are ``tests/data/runlog_v1.log``: a RUN record, two updates (a
    rewind, a NaN), a snapshot and a last update, written by trainreport before
    the run log carried times. Its points read with unknown (NaN) times, and
    an update without times is still written as format 1, as before.
    """
    data = (Path(__file__).parents[1] / "data" / "runlog_v1.log").read_bytes()

    replayed = replay(data)

    assert replayed.damage is None
    assert 5 == replayed.records
    assert {"job_id": "old-job", "task_id": "train"} == replayed.run
    task = replayed.state.to_task()
    assert task is not None
    assert "completed" == task["status"]
    assert [2.5, 2.25, 2.0] == [p["value"] for p in task["status_details"]["metrics"]["train_loss"]]
    assert all(math.isnan(t) for t in replayed.state.task.series["train_loss"][3])
    untimed = bytes(append_record(LogState(), Update(None, {}, (points("a", 0, [1]),), False)))
    assert 1 == untimed[0]


def test_non_finite_values_survive_the_log_as_null_points() -> None:
    """NaN and infinities travel as IEEE bits and read back as null, like the server stores them."""
    update = Update(None, {}, (points("a", 0, [1, 2, 3], [math.nan, math.inf, 1.5]),), False)
    data, _, _ = build([update])
    task = replay(data).state.to_task()
    assert task is not None
    assert [None, None, 1.5] == [p["value"] for p in task["status_details"]["metrics"]["a"]]


def test_a_snapshot_replaces_everything_and_can_start_series_past_index_zero() -> None:
    """A trimmed snapshot holds series from an offset; later suffixes count from index 0."""
    state = LogState()
    state.apply(Update("running", {"step": 5}, (points("a", 0, [1, 2, 3, 4, 5]),), False))
    state.trim({"a": 3})
    log = MAGIC + bytes(encode_run({"job_id": "j"})) + b"".join(encode_snapshot(state))
    log += bytes(append_record(state, Update(None, {}, (points("a", 5, [6]),), False)))
    log += bytes(append_record(state, Update(None, {}, (points("a", 1, [2]),), False)))

    replayed = replay(log)

    assert {"a": 1} == state.bases
    assert state.lengths() == replayed.state.lengths()
    assert {"a": 2} == replayed.state.lengths()
    assert {"job_id": "j"} == replayed.run
    assert state.to_task() == replayed.state.to_task()


@pytest.mark.skipif(sys.byteorder != "little", reason="the view path is little-endian")
@given(st.integers(0, 3 * _runlog._CHUNK_ITEMS), st.sampled_from(["q", "i", "d"]))
def test_a_columns_piece_is_a_view_of_its_own_bytes(length: int, typecode: str) -> None:
    """On a little-endian machine a column is one piece, a view of its buffer (no copy)."""
    column = array(typecode, [7]) * length
    pieces: list[_runlog.Piece] = []
    _runlog._column_pieces(column, pieces)
    assert column.tobytes() == b"".join(pieces)
    assert all(isinstance(p, memoryview) and p.obj is column for p in pieces)
    assert len(pieces) == (1 if length else 0)


@pytest.mark.skipif(sys.byteorder != "little", reason="played on a little-endian machine")
@given(st.integers(0, 3 * _runlog._CHUNK_ITEMS), st.sampled_from(["q", "i", "d"]))
def test_a_big_endian_machine_writes_little_endian_bytes_in_bounded_pieces(
    length: int, typecode: str
) -> None:
    """Elsewhere each column is byte-swapped in copies of at most _CHUNK_ITEMS items."""
    column = array(typecode, range(length % 1000)) * (length // 1000 + 1)
    pieces: list[_runlog.Piece] = []
    _runlog.LITTLE_ENDIAN = False  # a fixture cannot wrap @given examples
    try:
        _runlog._column_pieces(column, pieces)
    finally:
        _runlog.LITTLE_ENDIAN = True
    swapped_back = array(typecode, b"".join(pieces))
    swapped_back.byteswap()
    assert column == swapped_back
    assert all(len(p) <= _runlog._CHUNK_ITEMS * column.itemsize for p in pieces)
    assert len(pieces) == -(-len(column) // _runlog._CHUNK_ITEMS)
