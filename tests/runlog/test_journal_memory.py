"""The journal keeps no second copy of the points in memory (issue 23, item 1).

Per series it holds in memory only its length, the first index it must
still keep (what no destination acknowledged) and the task fields; every
operation that needs points reads them from its own file: the compaction
after a trim, the rewrite at the service's indices, and the new file started
when its file was deleted under it (``docs/engine.md``, "The journal in
front of a service").
"""

from __future__ import annotations

import errno
import os
import shutil
from array import array
from pathlib import Path

import pytest

from trainreport import read_task
from trainreport._runlog._journal import Journal
from trainreport._runlog._state import LogState
from trainreport._runlog._writer import RunLogWriter
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(60)


def update(name: str, offset: int, steps: list[int]) -> Update:
    values = array("d", [float(s) for s in steps])
    series = SeriesUpdate(name, offset, array("q", steps), array("i", [1] * len(steps)), values)
    return Update("running", {"phase": "train"}, (series,), False)


def journaled_steps(path: Path, name: str = "train_loss") -> list[int]:
    return [p["step"] for p in read_task(path)["status_details"]["metrics"][name]]


def claim(tmp_path: Path) -> Journal:
    journal = Journal.claim(tmp_path, "job-1", "train")
    assert journal is not None
    return journal


def test_records_with_no_acknowledgement_leave_no_point_in_memory(tmp_path: Path) -> None:
    """After many records nothing acknowledged: 0 points in memory, every point in the file."""
    journal = claim(tmp_path)
    for k in range(50):
        journal.append(update("train_loss", 10 * k, list(range(10 * k + 1, 10 * k + 11))))
        journal.append(update("val_loss", k, [k + 1]))

    assert 0 == journal.writer.state.point_count()
    assert 0 == journal.memory_points()
    assert {"train_loss": 500, "val_loss": 50} == journal.writer.state.lengths()
    assert 550 == journal.held_points()
    journal.close(delivered=False)
    path = tmp_path / "job-1" / "train.log"
    assert list(range(1, 501)) == journaled_steps(path)
    assert list(range(1, 51)) == journaled_steps(path, "val_loss")


def test_a_rewind_into_points_that_left_memory_replaces_the_files_tail(tmp_path: Path) -> None:
    """A suffix from an index before the journal's length: the file's tail is replaced there."""
    journal = claim(tmp_path)
    journal.append(update("train_loss", 0, list(range(1, 101))))
    journal.append(update("train_loss", 40, [41, 42]))

    assert 0 == journal.memory_points()
    assert {"train_loss": 42} == journal.writer.state.lengths()
    journal.close(delivered=False)
    assert list(range(1, 43)) == journaled_steps(tmp_path / "job-1" / "train.log")


def test_compaction_from_the_file_keeps_exactly_the_unacknowledged_suffix(
    tmp_path: Path,
) -> None:
    """A trim past the compaction floor rewrites the file from itself: the suffix, no more."""
    journal = claim(tmp_path)
    journal.append(update("train_loss", 0, list(range(1, 450_001))))
    journal.append(update("val_loss", 0, [1, 2, 3]))
    journal.trim({"train_loss": 449_990, "val_loss": 1})

    assert 1 == journal.writer.compactions
    assert 0 == journal.memory_points()
    state = journal.state  # read back from the file
    assert {"train_loss": 449_990, "val_loss": 1} == state.bases
    assert list(range(449_991, 450_001)) == list(state.task.series["train_loss"][0])
    assert [2, 3] == list(state.task.series["val_loss"][0])
    journal.append(update("train_loss", 450_000, [450_001]))
    journal.close(delivered=False)
    assert list(range(449_991, 450_002)) == journaled_steps(tmp_path / "job-1" / "train.log")


def test_a_rewind_before_the_acknowledged_points_keeps_the_new_tail_at_compaction(
    tmp_path: Path,
) -> None:
    """A rewind under what was trimmed: the next compaction keeps the rewound tail, whole."""
    journal = claim(tmp_path)
    journal.append(update("train_loss", 0, list(range(1, 450_001))))
    journal.trim({"train_loss": 300_000})
    journal.append(update("train_loss", 200_000, [200_001, 200_002]))
    journal.trim({"train_loss": 200_001})

    state = journal.state
    assert 1 == journal.writer.compactions  # at the first trim: past 8 MiB, twice what it held
    assert 0 == journal.memory_points()
    assert {"train_loss": 200_001} == state.bases
    assert [200_002] == list(state.task.series["train_loss"][0])
    journal.trim({"train_loss": 10**9})  # clamped to the series' length
    assert 0 == journal.held_points()


def test_the_rewrite_at_the_services_indices_keeps_no_point_in_memory(tmp_path: Path) -> None:
    """reset(): the snapshot is written whole, then its points leave memory."""
    journal = claim(tmp_path)
    state = LogState()
    state.reset(update("train_loss", 1_000, list(range(1_001, 1_021))))

    assert journal.reset(state, absolute=True)

    assert 0 == journal.memory_points()
    assert 20 == journal.held_points()
    held = journal.state
    assert {"train_loss": 1_000} == held.bases
    assert list(range(1_001, 1_021)) == list(held.task.series["train_loss"][0])
    journal.append(update("train_loss", 1_020, [1_021]))
    journal.close(delivered=False)
    task = read_task(tmp_path / "job-1" / "train.log")
    assert list(range(1_001, 1_022)) == [
        p["step"] for p in task["status_details"]["metrics"]["train_loss"]
    ]


def test_a_deleted_journal_is_recreated_with_every_unacknowledged_point(tmp_path: Path) -> None:
    """The new file holds what the deleted one held past the trim, read from the old descriptor."""
    journal = claim(tmp_path)
    journal.append(update("train_loss", 0, list(range(1, 51))))
    journal.trim({"train_loss": 20})
    shutil.rmtree(tmp_path / "job-1")

    with capture_events() as events:
        assert journal.append(update("train_loss", 50, [51]))

    deleted = [e for e in events if e["event"] == "trainreport.journal_deleted"]
    assert [30] == [e["points"] for e in deleted]
    assert 0 == journal.memory_points()
    journal.close(delivered=False)
    assert list(range(21, 52)) == journaled_steps(tmp_path / "job-1" / "train.log")


def test_a_restart_that_fails_leaves_no_descriptor_closed_under_another_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's directory deleted (a cleanup job), then its new file cannot be written
    (a full disk): the journal stops, and the lock descriptor it keeps is one it still
    holds open. It kept the number of a lock it had closed, so ``close()`` closed whatever
    file the process had opened since under that number."""
    journal = Journal.claim(tmp_path, "job", "t")
    assert journal is not None
    one = update("a", 0, [1, 2])
    assert journal.append(one)
    before = set(os.listdir("/proc/self/fd"))
    shutil.rmtree(tmp_path / "job")

    def no_space(*args: object, **kwargs: object) -> RunLogWriter:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunLogWriter, "open", no_space)
    assert not journal.append(one)
    monkeypatch.undo()
    leaked = set(os.listdir("/proc/self/fd")) - before
    victim = os.open(tmp_path / "victim", os.O_CREAT | os.O_RDWR)
    try:
        journal.close(delivered=False)
        os.fstat(victim)  # raises when the journal closed it
    finally:
        os.close(victim)

    assert journal.failed
    assert set() == leaked
