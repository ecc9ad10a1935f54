"""RunLogWriter: one write per flush, fsync only when asked, repairs at open, atomic compaction.

Every test works on a real file in ``tmp_path``; system calls are counted (or made
to fail) by wrapping ``os.write`` / ``os.fsync``, never by mocking the file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tracemalloc
import zlib
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers import kill_at_replace, killed_in_a_forked_child, record_ends
from trainreport._runlog._format import CRC_RUN_BYTES, FORMAT_VERSION, MAGIC, encode_record
from trainreport._runlog._replay import replay
from trainreport._runlog._state import LogState
from trainreport._runlog._writer import (
    MIN_COMPACT_BYTES,
    WRITE_BATCH_BYTES,
    LogBusyError,
    RunLogWriter,
    remove_temporaries,
    replace_file,
)
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport._wire._task_record import SeriesGapError
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(120)


def points(name: str, offset: int, steps: list[int]) -> SeriesUpdate:
    return SeriesUpdate(
        name,
        offset,
        array("q", steps),
        array("i", [1] * len(steps)),
        array("d", [s / 10 for s in steps]),
    )


def step_update(step: int, offset: int | None = None) -> Update:
    """One send of one series: the point ``step`` at index ``step - 1`` (or ``offset``)."""
    at = step - 1 if offset is None else offset
    return Update("running", {"step": step}, (points("loss", at, [step]),), False)


def replayed_task(path: Path) -> Any:
    return replay(path.read_bytes()).state.to_task()


class Calls:
    """Counts calls of an ``os`` function, optionally failing the ``fail_at``-th one."""

    def __init__(self, real: Any, fail_at: int | None = None, partial: bool = False) -> None:
        self.real, self.fail_at, self.partial, self.count = real, fail_at, partial, 0

    def __call__(self, fd: int, *args: Any) -> Any:
        self.count += 1
        if self.count == self.fail_at:
            if self.partial:
                self.real(fd, bytes(args[0])[:7])
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real(fd, *args)


def test_a_new_log_starts_with_the_header_and_the_run(tmp_path: Path) -> None:
    """Creating a log writes the magic and the job/task it belongs to, nothing else."""
    writer = RunLogWriter.open(tmp_path / "r.log", run={"job_id": "j", "task_id": "t"})
    writer.close()
    data = (tmp_path / "r.log").read_bytes()
    assert data.startswith(MAGIC)
    replayed = replay(data)
    assert {"job_id": "j", "task_id": "t"} == replayed.run
    assert replayed.state.to_task() is None


def test_flush_is_one_write_and_never_an_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends are buffered; flush hands them to the kernel in one write(), without fsync."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    writes, fsyncs = Calls(os.write), Calls(os.fsync)
    monkeypatch.setattr(os, "write", writes)
    monkeypatch.setattr(os, "fsync", fsyncs)
    sizes = [writer.append(step_update(step)) for step in (1, 2, 3)]

    written = writer.flush()

    assert (1, 0) == (writes.count, fsyncs.count)
    assert sum(sizes) == written
    writer.fsync()
    assert 1 == fsyncs.count
    writer.close()
    assert [1, 2, 3] == [
        p["step"] for p in replayed_task(tmp_path / "r.log")["status_details"]["metrics"]["loss"]
    ]


def test_what_was_flushed_is_readable_without_close_as_after_a_kill(tmp_path: Path) -> None:
    """A process killed after a flush leaves every flushed record on disk (the kernel has it)."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    writer.append(step_update(1))
    writer.flush()
    writer.append(step_update(2))  # appended, never flushed: lost with the process

    task = replayed_task(tmp_path / "r.log")

    assert [1] == [p["step"] for p in task["status_details"]["metrics"]["loss"]]
    writer.close()


def test_a_gap_is_refused_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A suffix beyond a series' end raises and is not written."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    writer.append(step_update(1))
    pending = writer.pending_bytes
    with pytest.raises(SeriesGapError):
        writer.append(step_update(5, offset=4))
    assert pending == writer.pending_bytes
    writer.close()
    assert {"loss": 1} == replay((tmp_path / "r.log").read_bytes()).state.lengths()


def test_a_failed_write_leaves_a_valid_log_and_the_records_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full in the middle of a write: the partial bytes are cut off, the next flush writes."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    writer.append(step_update(1))
    writer.flush()
    size = (tmp_path / "r.log").stat().st_size
    monkeypatch.setattr(os, "write", Calls(os.write, fail_at=1, partial=True))
    writer.append(step_update(2))

    with pytest.raises(OSError, match="No space"):
        writer.flush()

    assert size == (tmp_path / "r.log").stat().st_size
    monkeypatch.undo()
    writer.append(step_update(3))
    writer.close()
    loss = replayed_task(tmp_path / "r.log")["status_details"]["metrics"]["loss"]
    assert [1, 2, 3] == [p["step"] for p in loss]


def test_an_appended_updates_columns_stay_free_to_grow_even_while_its_record_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record's pieces view its columns' buffers only while it is encoded: once
    appended (flushed or not, after a failed write too) the columns can grow and
    shrink (a kept view would make that raise BufferError) and the file holds the
    values as they were appended."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    loss_points = points("loss", 0, list(range(1, 1001)))
    writer.append(Update("running", {}, (loss_points,), False))
    monkeypatch.setattr(os, "write", Calls(os.write, fail_at=1))
    with pytest.raises(OSError, match="No space"):
        writer.flush()
    loss_points.steps.append(1)  # each would raise BufferError under a view still held
    loss_points.values.append(1.0)
    for column in (loss_points.steps, loss_points.epochs, loss_points.values):
        del column[:]
    monkeypatch.undo()
    writer.close()
    loss = replayed_task(tmp_path / "r.log")["status_details"]["metrics"]["loss"]
    assert list(range(1, 1001)) == [p["step"] for p in loss]


def test_a_compaction_is_written_in_few_large_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot of many series is hundreds of column views; they reach the file in
    writes of at least WRITE_BATCH_BYTES, not one write() a view (each write lets the
    training thread take the interpreter for up to its switch interval)."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    steps = list(range(1, 2001))
    series = tuple(points(f"m{k}", 0, steps) for k in range(200))
    writer.append(Update("running", {}, series, False))
    writer.flush()
    writes = Calls(os.write)
    monkeypatch.setattr(os, "write", writes)
    written = writer.compact()
    monkeypatch.undo()
    assert 1 <= writes.count <= -(-written // WRITE_BATCH_BYTES)
    writer.close()
    assert dict.fromkeys((s.name for s in series), 2000) == (
        replay((tmp_path / "r.log").read_bytes()).state.lengths()
    )


def test_a_compactions_long_columns_are_written_from_their_own_buffers(tmp_path: Path) -> None:
    """A series of 2,000,000 points (columns of 8-16 MB, each over WRITE_BATCH_BYTES)
    reaches the file straight from the columns' buffers: the compaction allocates no
    copy of them (tracemalloc's peak stays under one batch), and the file replays."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    n = 2_000_000
    steps = array("q", range(1, n + 1))
    long = SeriesUpdate("loss", 0, steps, array("i", bytes(4 * n)), array("d", bytes(8 * n)))
    writer.append(Update("running", {}, (long,), False))
    writer.flush()
    del steps, long
    tracemalloc.start()
    written = writer.compact()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert written > 28 * n
    assert peak < WRITE_BATCH_BYTES
    writer.close()
    assert {"loss": n} == replay((tmp_path / "r.log").read_bytes()).state.lengths()


class LongCRCs:
    """Counts ``zlib.crc32`` calls over more than 5 KiB: those let the interpreter go
    (CPython's zlibmodule.c), and the reporter thread then waits up to the switch
    interval to take it back from a training loop's Python."""

    def __init__(self) -> None:
        self.real, self.count = zlib.crc32, 0

    def __call__(self, data: Any, value: int = 0) -> int:
        if memoryview(data).nbytes > 5 * 1024:
            self.count += 1
        return self.real(data, value)


def test_a_records_crc_lets_the_interpreter_go_once_and_a_snapshots_once_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """600 column views of 8-16 KiB: an appended record is checked in one long
    zlib.crc32 call, not one a column (3 ms of CRC, not 3 s of waiting for the
    interpreter back); a compaction, written in pieces, in one call per CRC_RUN_BYTES.
    The file replays with both checksums right."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    steps = list(range(1, 2001))
    series = tuple(points(f"m{k}", 0, steps) for k in range(200))
    crcs = LongCRCs()
    monkeypatch.setattr(zlib, "crc32", crcs)
    record_bytes = writer.append(Update("running", {}, series, False))
    appended = crcs.count
    crcs.count = 0
    written = writer.compact()
    compacted = crcs.count
    monkeypatch.undo()
    assert record_bytes > CRC_RUN_BYTES  # the snapshot takes more than one run
    assert 1 == appended
    assert 1 <= compacted <= -(-written // CRC_RUN_BYTES)
    writer.close()
    replayed = replay((tmp_path / "r.log").read_bytes())
    assert replayed.damage is None
    assert dict.fromkeys((s.name for s in series), 2000) == replayed.state.lengths()


def test_a_torn_tail_is_cut_off_at_open_so_new_records_stay_readable(tmp_path: Path) -> None:
    """After a kill in the middle of a write, open() drops the torn bytes and appends after."""
    path = tmp_path / "r.log"
    writer = RunLogWriter.open(path)
    writer.append(step_update(1))
    writer.close()
    intact = path.read_bytes()
    with path.open("ab") as f:
        f.write(b"".join(_torn_record()))

    with capture_events() as events:
        writer = RunLogWriter.open(path)
    writer.append(step_update(2))
    writer.close()

    assert path.read_bytes().startswith(intact)
    assert [1, 2] == [p["step"] for p in replayed_task(path)["status_details"]["metrics"]["loss"]]
    damaged = [e for e in events if e["event"] == "trainreport.run_log_damaged"]
    assert ["torn_tail"] == [e["damage"] for e in damaged]
    assert damaged[0]["set_aside"] is None
    assert not path.with_name("r.log.damaged").exists()


def _torn_record() -> list[bytes]:
    whole = encode_record(1, b"x" * 40)
    return [whole[:30]]


def _three_steps(path: Path) -> bytearray:
    """A log at ``path`` of three records (steps 1, 2, 3, each flushed): its bytes."""
    writer = RunLogWriter.open(path)
    for step in (1, 2, 3):
        writer.append(step_update(step))
        writer.flush()
    writer.close()
    return bytearray(path.read_bytes())


@pytest.mark.parametrize(
    ("damage", "kind"),
    [
        ("flip", "corrupt"),
        ("newer", "newer_version"),
        ("not_a_log", "not_a_log"),
    ],
)
def test_damage_in_the_middle_is_set_aside_and_the_intact_records_kept(
    tmp_path: Path, damage: str, kind: str
) -> None:
    """The whole file is copied to .damaged before the log is rewritten from what was read."""
    path = tmp_path / "r.log"
    original = _three_steps(path)
    ends = record_ends(bytes(original))
    if damage == "flip":
        original[ends[1] + 25] ^= 0xFF  # inside the third record
    elif damage == "newer":
        original = original[: ends[1]] + _newer_record()
    else:
        original = bytearray(b"PNG not a log at all")
    path.write_bytes(original)

    with capture_events() as events:
        writer = RunLogWriter.open(path)
    writer.append(step_update(9, offset=writer.state.lengths().get("loss", 0)))
    writer.close()

    assert bytes(original) == path.with_name("r.log.damaged").read_bytes()
    steps = [p["step"] for p in replayed_task(path)["status_details"]["metrics"]["loss"]]
    assert ([1, 2, 9] if damage != "not_a_log" else [9]) == steps
    assert replay(path.read_bytes()).damage is None
    assert [kind] == [e["damage"] for e in events if e["event"] == "trainreport.run_log_damaged"]


def _newer_record() -> bytes:
    import struct  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    record = bytearray(encode_record(1, b"{}"))
    record[0] = FORMAT_VERSION + 1
    record[16:20] = struct.pack("<I", zlib.crc32(bytes(record[:16])))
    return bytes(record)


def test_a_second_writer_of_the_same_log_is_refused_until_the_first_closes(
    tmp_path: Path,
) -> None:
    """The flock keeps two processes (here two descriptors) from interleaving records."""
    first = RunLogWriter.open(tmp_path / "r.log")
    with pytest.raises(LogBusyError):
        RunLogWriter.open(tmp_path / "r.log")
    first.close()
    RunLogWriter.open(tmp_path / "r.log").close()


def test_a_compaction_keeps_the_lock(tmp_path: Path) -> None:
    """The rewritten log is locked before it replaces the old one."""
    first = RunLogWriter.open(tmp_path / "r.log")
    first.append(step_update(1))
    first.compact()
    with pytest.raises(LogBusyError):
        RunLogWriter.open(tmp_path / "r.log")
    first.close()


def test_rewinds_make_compaction_due_and_it_shrinks_the_log_atomically(tmp_path: Path) -> None:
    """Re-sending the same tail grows the log; compaction rewrites it as one snapshot."""
    path = tmp_path / "r.log"
    writer = RunLogWriter.open(path)
    writer.append(Update("running", {}, (points("loss", 0, list(range(1, 101))),), False))
    compacted_at = None
    for i in range(2000):
        writer.append(Update(None, {"step": i}, (points("loss", 50, list(range(51, 101))),), False))
        writer.flush()
        if writer.compaction_due():
            compacted_at = path.stat().st_size
            writer.compact()
            break
    before = writer.state.to_task()

    assert compacted_at is not None
    assert compacted_at > MIN_COMPACT_BYTES
    assert path.stat().st_size < compacted_at / 10
    assert before == replayed_task(path)
    assert [] == [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    writer.close()


def test_a_log_that_grows_with_the_run_is_not_compacted(tmp_path: Path) -> None:
    """New points only, 50 a send: the log stays near its snapshot's size, never rewritten."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    for start in range(1, 20001, 50):
        steps = list(range(start, start + 50))
        writer.append(
            Update("running", {"step": start}, (points("loss", start - 1, steps),), False)
        )
        writer.flush()
        assert not writer.compaction_due()
    writer.close()
    assert 0 == writer.compactions


def test_a_failed_compaction_leaves_the_old_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No space for the rewrite: the old log is untouched and appending goes on."""
    path = tmp_path / "r.log"
    writer = RunLogWriter.open(path)
    writer.append(step_update(1))
    writer.flush()
    before = path.read_bytes()
    monkeypatch.setattr(os, "fsync", Calls(os.fsync, fail_at=1))

    with pytest.raises(OSError, match="No space"):
        writer.compact()

    monkeypatch.undo()
    assert before == path.read_bytes()
    assert [] == [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    writer.append(step_update(2))
    writer.close()
    assert [1, 2] == [p["step"] for p in replayed_task(path)["status_details"]["metrics"]["loss"]]


def _temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_compaction_killed_before_its_rename_leaves_no_temporary_after_the_next_open(
    tmp_path: Path,
) -> None:
    """``kill -9`` between the compaction's temporary file and its rename: the next open
    (it holds the lock: nobody else can be compacting this log) removes the temporary,
    says once how many bytes it freed, and keeps every file of another shape."""
    path = tmp_path / "r.log"

    def compact_and_die() -> None:
        writer = RunLogWriter.open(path)
        for step in range(1, 201):
            writer.append(step_update(step))
        writer.flush()
        kill_at_replace()
        writer.compact()

    killed_in_a_forked_child(compact_and_die)
    [left] = _temporaries(tmp_path)
    size = (tmp_path / left).stat().st_size
    others = [
        ".other.log.0123abcd.tmp",  # another log's temporary
        ".other.log.damaged.0123abcd.tmp",  # another log's damaged copy's
        ".r.log.damaged.damaged.0123abcd.tmp",  # the damaged copy of r.log.damaged's
        ".r.log.damaged.02.0123abcd.tmp",  # not a damaged copy's number
        ".r.json.0123abcd.tmp",  # a task record's, not named at this open
        ".r.log.0123abcd.tmp.keep",  # not of the shape: more after it
        ".r.log.0123ABCD.tmp",  # not of the shape: the hex digits are lower case
        "r.log.damaged",
    ]
    for name in others:
        (tmp_path / name).write_bytes(b"not ours")

    with capture_events() as events:
        writer = RunLogWriter.open(path)
    writer.close()

    assert sorted(n for n in others if n.endswith(".tmp")) == _temporaries(tmp_path)
    assert all((tmp_path / name).exists() for name in others)
    assert list(range(1, 201)) == [
        p["step"] for p in replayed_task(path)["status_details"]["metrics"]["loss"]
    ]
    removed = [e for e in events if e["event"] == "trainreport.run_log_temporaries_removed"]
    assert [(str(path), 1, size)] == [(e["path"], e["files"], e["bytes_freed"]) for e in removed]
    assert size > 200 * 20


@pytest.mark.parametrize(
    "name",
    [".r.log.89abcdef.tmp", ".r.log.damaged.89abcdef.tmp", ".r.json.89abcdef.tmp"],
    ids=["compaction", "damaged-copy", "task-record"],
)
def test_the_temporary_of_a_replace_still_under_way_is_kept(tmp_path: Path, name: str) -> None:
    """A temporary whose lock is held belongs to a replace under way (a writer whose log
    was deleted and made again under it; a record another log shares): the open leaves
    it, and logs nothing; unlocked, it is a dead process's, and goes."""
    path, record = tmp_path / "r.log", tmp_path / "r.json"
    live = tmp_path / name
    fd = os.open(live, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with capture_events() as events:
            RunLogWriter.open(path, record=record).close()
        assert [live.name] == _temporaries(tmp_path)
    finally:
        os.close(fd)
    assert [] == [e for e in events if e["event"] == "trainreport.run_log_temporaries_removed"]
    RunLogWriter.open(path, record=record).close()  # unlocked now: a dead process's
    assert [] == _temporaries(tmp_path)


def test_a_temporary_is_locked_while_it_is_written(tmp_path: Path) -> None:
    """Halfway through a replace of the task record, the log's next holder looks for dead
    temporaries (the record written after the log's lock went, or by another log that
    shares it): the live one is kept, and the replace ends with the record in place."""
    path, record = tmp_path / "r.log", tmp_path / "r.json"
    seen: list[tuple[int, int]] = []

    def pieces() -> Iterator[bytes]:
        yield b'{"status": '
        seen.append(remove_temporaries(path, record=record))
        yield b'"running"}'

    replace_file(record, pieces())

    assert [(0, 0)] == seen
    assert b'{"status": "running"}' == record.read_bytes()
    assert [] == _temporaries(tmp_path)


@pytest.mark.parametrize("copies_before", [0, 1], ids=["first-copy", "second-copy"])
def test_a_damaged_copy_killed_before_its_rename_leaves_no_temporary_after_the_next_open(
    tmp_path: Path, copies_before: int
) -> None:
    """``kill -9`` between the temporary of a damaged log's copy (``r.log.damaged``, or
    ``r.log.damaged.2`` when one is there) and its rename: the next open removes it, says
    so once, and sets the damaged log aside again."""
    path = tmp_path / "r.log"
    damaged = _three_steps(path)
    damaged[record_ends(bytes(damaged))[1] + 25] ^= 0xFF  # inside the third record
    path.write_bytes(damaged)
    if copies_before:
        (tmp_path / "r.log.damaged").write_bytes(b"an earlier copy")
    copy = "r.log.damaged.2" if copies_before else "r.log.damaged"

    def open_and_die() -> None:
        kill_at_replace()
        RunLogWriter.open(path)

    killed_in_a_forked_child(open_and_die)
    [left] = _temporaries(tmp_path)
    assert left.startswith(f".{copy}.")
    assert len(damaged) == (tmp_path / left).stat().st_size

    with capture_events() as events:
        RunLogWriter.open(path).close()

    assert [] == _temporaries(tmp_path)
    assert bytes(damaged) == (tmp_path / copy).read_bytes()
    removed = [e for e in events if e["event"] == "trainreport.run_log_temporaries_removed"]
    assert [(str(path), 1, len(damaged))] == [
        (e["path"], e["files"], e["bytes_freed"]) for e in removed
    ]


def test_compaction_can_trim_what_a_service_acknowledged(tmp_path: Path) -> None:
    """keep_from drops the acknowledged points; the log then starts each series past them."""
    path = tmp_path / "r.log"
    writer = RunLogWriter.open(path)
    for step in range(1, 11):
        writer.append(step_update(step))
    writer.compact(keep_from={"loss": 8})
    writer.append(step_update(11))
    writer.close()

    replayed = replay(path.read_bytes())

    assert {"loss": 8} == replayed.state.bases
    assert {"loss": 11} == replayed.state.lengths()
    assert [9, 10, 11] == [
        p["step"]
        for p in replayed.state.to_task()["status_details"]["metrics"]["loss"]  # type: ignore[index]
    ]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 20), st.integers(0, 4)),
            st.tuples(st.just("flush"), st.just(0), st.just(0)),
            st.tuples(st.just("compact"), st.integers(0, 30), st.just(0)),
            st.tuples(st.just("reopen"), st.just(0), st.just(0)),
        ),
        max_size=25,
    )
)
def test_the_file_always_replays_to_the_writers_state(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, int, int]]
) -> None:
    """Whatever the order of appends, flushes, compactions (trimming) and reopenings."""
    path = tmp_path_factory.mktemp("log") / "r.log"
    writer = RunLogWriter.open(path, run={"job_id": "j"})
    for op, a, b in operations:
        if op == "append":
            held = writer.state.lengths().get("loss", 0)
            base = writer.state.bases.get("loss", 0)
            offset = max(min(a, held), base)
            writer.append(
                Update(
                    "running",
                    {"step": a},
                    (points("loss", offset, list(range(offset + 1, offset + 1 + b))),),
                    False,
                )
            )
        elif op == "flush":
            writer.flush()
        elif op == "compact":
            writer.compact(keep_from={"loss": a} if a % 2 else None)
        else:
            writer.close()
            writer = RunLogWriter.open(path)
    writer.flush()
    expected = (writer.state.to_task(), writer.state.lengths())
    writer.close()
    replayed = replay(path.read_bytes())
    assert expected == (replayed.state.to_task(), replayed.state.lengths())
    assert replayed.damage is None
    assert {"job_id": "j"} == replayed.run


def test_an_update_whose_details_carry_metrics_is_refused_not_written_unreadable(
    tmp_path: Path,
) -> None:
    """Curves travel as series; a 'metrics' detail would make a record replay refuses."""
    writer = RunLogWriter.open(tmp_path / "r.log")
    with pytest.raises(ValueError, match="metrics"):
        writer.append(Update("running", {"metrics": {"a": []}}, None, False))
    writer.append(step_update(1))
    writer.close()
    replayed = replay((tmp_path / "r.log").read_bytes())
    assert replayed.damage is None
    assert {"loss": 1} == replayed.state.lengths()


# --- a state whose points left memory (FileSink without its record) ---------------------------

#: Another tool's series (steps going backwards): a full-state update keeps it as stored.
_ALIEN = [{"step": 9, "epoch": None, "value": 1.0}, {"step": 3, "epoch": None, "value": 2.0}]
_LOG_NAMES = ("a", "b", "alien")


def _timed_points(name: str, offset: int, count: int, timed: bool) -> SeriesUpdate:
    steps = list(range(offset + 1, offset + 1 + count))
    s = points(name, offset, steps)
    return attrs.evolve(s, times=array("d", [1e9 + k for k in steps])) if timed else s


def _log_update(op: tuple[Any, ...], lengths: dict[str, int]) -> Update:
    """The update an operation of the strategy below stands for, given the lengths held."""
    kind, spec, status, step = op
    statuses = (None, "running", "completed")
    details: dict[str, Any] = {"step": step, "eta_seconds": 5.0} if step % 3 else {"curve": [step]}
    if kind == "details":
        return Update(statuses[status], details, None, False)
    if kind == "full":
        series = tuple(_timed_points(_LOG_NAMES[n], 0, c, t) for n, _, c, t in spec)
        foreign = {"alien": _ALIEN} if status else {}
        return Update(statuses[status], details, series, True, foreign)
    series = tuple(  # delta 1: a gap; below 0: a rewind into the points written
        _timed_points(_LOG_NAMES[n], max(lengths.get(_LOG_NAMES[n], 0) + d, 0), c, t)
        for n, d, c, t in spec
    )
    return Update(statuses[status], details, series, False)


def _fields(writer: RunLogWriter) -> tuple[Any, ...]:
    """What a state whose points left memory must agree on: all but the points."""
    state = writer.state
    task = state.task
    return (
        state.lengths(),
        dict(state.bases),
        list(task.series),
        task.status,
        task.details,
        task.foreign,
        task.exists,
    )


_series_spec = st.tuples(st.integers(0, 2), st.integers(-4, 1), st.integers(0, 3), st.booleans())


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from(["suffix", "suffix", "suffix", "full", "details"]),
                st.lists(_series_spec, min_size=1, max_size=3),
                st.integers(0, 2),
                st.integers(1, 9),
            ),
            st.tuples(st.sampled_from(["flush", "reopen", "compact"])),
        ),
        max_size=30,
    )
)
# A suffix with no points onto another tool's series (found by Hypothesis): it replaces
# that series, which is left with none and removed; a trimmed state kept it, empty.
@example([("full", [(0, 0, 1, False)], 1, 1), ("suffix", [(2, 0, 0, False)], 0, 1)])
def test_a_state_without_its_points_writes_the_same_log_as_one_that_trims_them(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[Any, ...]]
) -> None:
    """Same bytes, lengths, gaps and fields as applying every point and trimming them after.

    Three writers take the same updates (rewinds, gaps, full states, another
    tool's series, emptied series, status-only sends): one keeps every point,
    one trims them after each append (``FileSink`` until session 30), one keeps
    none (:meth:`LogState.drop_points`). The last two write the same bytes and
    hold the same fields; all three the same lengths, and each file replays to
    the points the first one holds. As a ``FileSink`` does, a state with bases
    is not compacted.
    """
    folder = tmp_path_factory.mktemp("logs")
    paths = [folder / f"{name}.log" for name in ("whole", "trimmed", "counted")]

    def opened() -> list[RunLogWriter]:
        writers = [RunLogWriter.open(path) for path in paths]
        writers[1].state.trim(writers[1].state.lengths())
        writers[2].state.drop_points()
        return writers

    writers = opened()
    # Two suffixes of one series in one update (never sent by the engine): the trimmed
    # state keeps an emptied series the whole one drops, so only the last two compare.
    repeated = False
    for op in operations:
        if op[0] == "flush":
            for writer in writers:
                writer.flush()
        elif op[0] == "reopen":
            for writer in writers:
                writer.close()
            writers = opened()
        elif op[0] == "compact":
            if not writers[2].state.bases:
                for writer in writers:
                    writer.compact()
        else:
            update = _log_update(op, writers[0].state.lengths())
            names = [s.name for s in update.series or ()]
            repeated = repeated or len(names) != len(set(names))
            before = [(_fields(w), w.pending_bytes) for w in writers]
            errors: list[str | None] = []
            for writer in writers:
                try:
                    writer.append(update)
                    errors.append(None)
                except SeriesGapError as exc:
                    errors.append(str(exc))
            if errors[0] is None:
                writers[1].state.trim(writers[1].state.lengths())
            else:  # refused everywhere, and nothing changed
                assert before == [(_fields(w), w.pending_bytes) for w in writers]
            assert errors[2] == errors[1]
            assert repeated or (errors[0] is None) == (errors[1] is None)
        assert _fields(writers[1]) == _fields(writers[2])
        assert repeated or writers[0].state.lengths() == writers[2].state.lengths()
        assert 0 == writers[2].state.point_count()
    expected = writers[0].state.to_task()
    for writer in writers:
        writer.close()
    assert paths[1].read_bytes() == paths[2].read_bytes()
    replayed = replay(paths[2].read_bytes()).state
    replayed.drop_points()
    counted = RunLogWriter.open(paths[2])
    counted.state.drop_points()
    assert _fields(counted) == (
        replayed.lengths(),
        replayed.bases,
        list(replayed.task.series),
        replayed.task.status,
        replayed.task.details,
        replayed.task.foreign,
        replayed.task.exists,
    )
    counted.close()
    assert repeated or expected == replay(paths[2].read_bytes()).state.to_task()


def test_a_state_drops_its_points_while_a_view_of_a_column_is_still_alive() -> None:
    """A journal drops its snapshot's points in a ``finally`` (``Journal.reset``): a
    view of a column still alive there (in the traceback of a snapshot that failed
    mid-write) must not turn that failure into a BufferError, and must keep reading
    the points it viewed."""
    state = LogState()
    state.apply(Update(None, {}, (points("a", 0, [1, 2, 3]),), False))
    view = memoryview(state.task.series["a"][0])
    state.drop_points()
    assert {"a": 3} == state.lengths()
    assert 0 == state.point_count()
    assert [1, 2, 3] == view.tolist()
    view.release()


def test_a_state_that_keeps_no_points_copies_none_when_an_update_is_applied() -> None:
    """A 200,000-point suffix, then a rewind into it: lengths move, no column is copied.

    Copying them would allocate 28 bytes a point (steps, epochs, values, times).
    """
    state = LogState()
    state.drop_points()
    n = 200_000
    big = SeriesUpdate(
        "a",
        0,
        array("q", range(n)),
        array("i", [1] * n),
        array("d", [0.5] * n),
        array("d", [1e9] * n),
    )
    tracemalloc.start()
    try:
        state.apply(Update("running", {"step": n}, (big,), False))
        state.apply(Update(None, {}, (attrs.evolve(big, offset=n // 2, times=None),), False))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert {"a": n // 2 + n} == state.lengths()
    assert (0, False) == (state.point_count(), state.keeps_points)
    assert peak < n  # bytes: under 1 byte a point, where a copy takes 28
