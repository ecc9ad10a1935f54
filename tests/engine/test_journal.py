"""The journal in front of a service: its files, its claim, trimming, removal, recovery, bad input.

Reporter-level tests run a real ``HttpSink`` against the real reference server
(in a thread of this process) or against a closed port (the service down).
The kill -9 guarantees are in ``tests/contracts/test_kill.py``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from faults import closed_port
from helpers import (
    ScriptedSink,
    curve,
    drive,
    exited,
    held,
    kill_at_replace,
    killed_in_a_forked_child,
)
from trainreport import (
    Delivered,
    FileSink,
    HttpSink,
    MemorySink,
    Reporter,
    ReportingConfig,
    read_task,
)
from trainreport._engine._journal_feed import JournalKeeper, journal_identity
from trainreport._record._recorder import Recorder
from trainreport._runlog._format import MAGIC
from trainreport._runlog._journal import Journal, is_journal
from trainreport._runlog._runfile import load_run_file
from trainreport._runlog._state import LogState
from trainreport._runlog._writer import RunLogWriter, names_file, open_locked
from trainreport._wire import _attempt
from trainreport._wire._sink_interface import (
    Opened,
    OpenResult,
    SendResult,
    SeriesUpdate,
    Sink,
    Update,
)
from trainreport.server import ServerHandle
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _journal_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINREPORT_JOURNAL", raising=False)


@pytest.fixture
def down_url() -> Iterator[str]:
    """A URL nothing listens on: the service is down."""
    with closed_port() as port:
        yield f"http://127.0.0.1:{port}"


def config_for(journal_dir: Path, **changes: Any) -> ReportingConfig:
    fields: dict[str, Any] = {
        "min_report_interval_seconds": 0.02,
        "journal_interval_seconds": 0.02,
        "journal_dir": str(journal_dir),
        "backoff_initial_seconds": 0.02,
        "backoff_max_seconds": 0.1,
        "close_unanswered_seconds": 0.3,
    }
    return ReportingConfig(**{**fields, **changes})


def train(
    url: str,
    journal_dir: Path,
    steps: Iterable[int],
    *,
    job: str = "job-1",
    full_state: bool = False,
) -> bool:
    """A reporter on an HttpSink with a journal; returns close()'s answer."""
    sink = HttpSink(
        url,
        job,
        connect_timeout_seconds=0.5,
        read_timeout_seconds=2.0,
        use_extension=not full_state,
    )
    reporter = Reporter(sink, config_for(journal_dir), rank=0).start()
    for step in steps:
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    return reporter.close(timeout=5.0)


def stored_steps(url: str, job: str = "job-1") -> list[int]:
    answer = urllib3.request("GET", f"{url}/v1/jobs/{job}/tasks/train", timeout=10.0)
    assert 200 == answer.status
    return [p["step"] for p in json.loads(answer.data)["status_details"]["metrics"]["train_loss"]]


def update(name: str, offset: int, steps: list[int]) -> Update:
    values = array("d", [float(s) for s in steps])
    series = SeriesUpdate(name, offset, array("q", steps), array("i", [1] * len(steps)), values)
    return Update("running", {"phase": "train"}, (series,), False)


# --- files and claim --------------------------------------------------------------------


def test_a_claimed_journal_lives_under_job_and_task_and_says_it_is_a_journal(
    tmp_path: Path,
) -> None:
    """``<dir>/<job>/<task>.log``, locked; its RUN record names the ids, journal, local offsets.

    And whose it is: its place among the task's journals and the attempt.
    """
    journal = Journal.claim(tmp_path, "job-1", "train", wall_clock=lambda: "2024-05-01T00:00:00Z")
    assert journal is not None
    journal.append(update("train_loss", 0, [1, 2]))
    journal.close(delivered=False)

    run = load_run_file(tmp_path / "job-1" / "train.log")
    started = run.run.pop("attempt_started_at")
    assert float(started) > 0
    assert {
        "job_id": "job-1",
        "task_id": "train",
        "journal": "1",
        "offsets": "local",
        "journal_seq": "1",
        "journal_started_at": "2024-05-01T00:00:00Z",
    } == run.run
    assert is_journal(run.run)
    assert [1, 2] == [p["step"] for p in run.task["status_details"]["metrics"]["train_loss"]]


def test_a_second_live_claim_gets_no_journal_and_one_event(tmp_path: Path) -> None:
    """Two live processes (here two claims) never share a journal: the second runs without."""
    first = Journal.claim(tmp_path, "job-1", "train")
    with capture_events() as events:
        second = Journal.claim(tmp_path, "job-1", "train")

    assert first is not None
    assert second is None
    assert ["trainreport.journal_busy"] == [e["event"] for e in events]
    first.close(delivered=True)
    assert Journal.claim(tmp_path, "job-1", "train") is not None  # released at close


def test_a_journal_left_by_a_dead_process_is_moved_aside_for_recovery(tmp_path: Path) -> None:
    """The next claimant finds the dead process's journal in ``<task>.left/`` and starts afresh."""
    dead = Journal.claim(tmp_path, "job-1", "train")
    assert dead is not None
    dead.append(update("train_loss", 0, [1, 2, 3]))
    dead._release(remove_files=False)  # the lock dies with the process; the file stays

    journal = Journal.claim(tmp_path, "job-1", "train")

    assert journal is not None
    assert 1 == len(journal.left_over)
    assert journal.left_over[0].parent == tmp_path / "job-1" / "train.left"
    assert [1, 2, 3] == [
        p["step"]
        for p in read_task(journal.left_over[0])["status_details"]["metrics"]["train_loss"]
    ]
    assert not journal.state.exists


def _left_by_an_attempt_an_hour_later(directory: Path, monkeypatch: pytest.MonkeyPatch) -> float:
    """A dead process's job-1/train journal under ``directory``, its attempt started an hour
    after this one's (this clock was stepped back since). Returns this process's start time."""
    own = _attempt.process_started_at()
    monkeypatch.setattr(_attempt, "process_started_at", lambda: own + 3600.0)
    dead = Journal.claim(directory, "job-1", "train")
    assert dead is not None
    dead._release(remove_files=False)  # the lock dies with the process; the file stays
    monkeypatch.setattr(_attempt, "process_started_at", lambda: own)
    return own


def test_the_next_claimant_is_ordered_after_the_dead_attempt_whose_journal_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead process that started an hour "later" (this one's clock was stepped back since):
    the claimant's attempt, at the service and in its own journal, comes after the dead one's,
    so the service does not refuse it as an older attempt (409 ``stale_attempt``)."""
    own = _left_by_an_attempt_an_hour_later(tmp_path, monkeypatch)
    assert own == _attempt.current_attempt("job-1", "train", {}).started_at  # nothing followed

    journal = Journal.claim(tmp_path, "job-1", "train")

    assert journal is not None
    after = round(own + 3600.0 + _attempt.FOLLOW_MARGIN_SECONDS, 3)
    assert (after, after) == (
        _attempt.current_attempt("job-1", "train", {}).started_at,
        journal.owner.attempt().started_at,
    )


def test_taking_over_one_task_s_journal_leaves_the_other_task_s_claim_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ServerHandle
) -> None:
    """A process that runs two reporters, for tasks ``train`` and ``eval`` of one job, takes
    over a dead process's ``train`` journal: only ``train`` is ordered after the dead attempt.
    ``eval``'s journal and its claim at the service keep this process's own start time (no
    dead process held ``eval``, so nothing says this one came after anything there)."""
    own = _left_by_an_attempt_an_hour_later(tmp_path, monkeypatch)
    train = Journal.claim(tmp_path, "job-1", "train")
    assert train is not None

    evaluation = Journal.claim(tmp_path, "job-1", "eval")
    sink = HttpSink(server.url, job_id="job-1", task_id="eval", use_extension=True)
    opened = sink.open(timeout_seconds=10.0)

    assert evaluation is not None
    assert isinstance(opened, Opened), opened
    assert sink.attempt is not None
    after = round(own + 3600.0 + _attempt.FOLLOW_MARGIN_SECONDS, 3)
    assert (after, own, own) == (
        train.owner.attempt().started_at,
        evaluation.owner.attempt().started_at,
        sink.attempt.started_at,
    )
    sink.close()
    evaluation._release(remove_files=True)
    train._release(remove_files=True)


def _steps(path: Path) -> list[int]:
    return [p["step"] for p in read_task(path)["status_details"]["metrics"]["train_loss"]]


def _temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_claim_removes_what_a_compaction_killed_before_its_rename_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kill -9`` between a journal compaction's temporary file and its rename: the next
    claim (it holds the task's lock) removes the temporary before anything else, so even a
    full disk gets the room back, and keeps every file of another shape."""
    job_dir = tmp_path / "job-1"

    def compact_and_die() -> None:
        journal = Journal.claim(tmp_path, "job-1", "train")
        assert journal is not None
        assert journal.append(update("train_loss", 0, list(range(1, 201))))
        kill_at_replace()
        journal.writer.compact()

    killed_in_a_forked_child(compact_and_die)
    [left] = _temporaries(job_dir)
    size = (job_dir / left).stat().st_size
    others = [".eval.log.0123abcd.tmp", ".eval.log.damaged.0123abcd.tmp", "train.log.damaged"]
    for name in others:
        (job_dir / name).write_bytes(b"not ours")
    _disk_full_for_journals(monkeypatch)  # the claim's own journal cannot even be opened

    with capture_events() as events:
        journal = Journal.claim(tmp_path, "job-1", "train")
    monkeypatch.undo()

    assert journal is not None
    assert journal.unavailable
    assert sorted(n for n in others if n.endswith(".tmp")) == _temporaries(job_dir)
    assert all((job_dir / name).exists() for name in others)
    assert [list(range(1, 201))] == [_steps(p) for p in journal.left_over]
    removed = [e for e in events if e["event"] == "trainreport.run_log_temporaries_removed"]
    assert [(str(job_dir / "train.log"), 1, size)] == [
        (e["path"], e["files"], e["bytes_freed"]) for e in removed
    ]
    journal.close(delivered=False)


def test_a_deleted_lock_file_never_lets_a_second_claim_take_the_live_journal(
    tmp_path: Path,
) -> None:
    """A cleanup deletes ``<task>.lock`` but not ``<task>.log``: a second claim asks the log's
    own lock (the live writer holds it), runs without a journal and moves nothing; the live
    journal goes on in its own file and takes the task's lock again."""
    first = Journal.claim(tmp_path, "job-1", "train")
    assert first is not None
    assert first.append(update("train_loss", 0, [1, 2, 3]))
    current, lock = tmp_path / "job-1" / "train.log", tmp_path / "job-1" / "train.lock"
    lock.unlink()

    with capture_events() as events:
        second = Journal.claim(tmp_path, "job-1", "train")

    assert second is None
    assert ["trainreport.journal_busy"] == [e["event"] for e in events]
    assert not (tmp_path / "job-1" / "train.left").exists()
    assert first.append(update("train_loss", 3, [4, 5]))
    assert first.writer.fd is not None
    assert names_file(first.writer.fd, current)  # its own file, never set aside
    assert Journal.claim(tmp_path, "job-1", "train") is None  # its lock again
    assert not (tmp_path / "job-1" / "train.left").exists()
    assert [1, 2, 3, 4, 5] == _steps(current)
    first.close(delivered=False)
    after = Journal.claim(tmp_path, "job-1", "train")
    assert after is not None
    assert [[1, 2, 3, 4, 5]] == [_steps(p) for p in after.left_over]
    after.close(delivered=False)


def test_a_journal_whose_lock_file_went_writes_on_while_another_claim_holds_the_new_lock(
    tmp_path: Path,
) -> None:
    """Its lock file deleted, the live journal finds the new one held (another process's
    claim, between taking it and asking the log): it keeps writing its own file, which
    that claim will find held, and takes the lock once it is free."""
    first = Journal.claim(tmp_path, "job-1", "train")
    assert first is not None
    assert first.append(update("train_loss", 0, [1, 2]))
    lock = tmp_path / "job-1" / "train.lock"
    lock.unlink()
    claiming = open_locked(lock, os.O_RDWR)  # the other claim, holding the new lock
    try:
        assert first.append(update("train_loss", 2, [3]))
        assert not first.failed
    finally:
        os.close(claiming)  # it found the log held: it runs without a journal

    assert first.append(update("train_loss", 3, [4]))
    assert first._lock_fd is not None
    assert names_file(first._lock_fd, lock)
    assert [1, 2, 3, 4] == _steps(tmp_path / "job-1" / "train.log")
    assert not (tmp_path / "job-1" / "train.left").exists()
    first.close(delivered=False)


def test_a_restart_never_sets_aside_a_journal_another_live_process_writes(
    tmp_path: Path,
) -> None:
    """A cleanup deletes the first's files, a second process claims the task anew, and its
    lock file is deleted too: the first, starting a new journal, finds the ``<task>.log``
    there held by its writer and stops (``journal_write_failed``) instead of moving a live
    journal into ``<task>.left/``; only the second writes a journal of the task."""
    job_dir = tmp_path / "job-1"
    current, lock = job_dir / "train.log", job_dir / "train.lock"
    first = Journal.claim(tmp_path, "job-1", "train")
    assert first is not None
    assert first.append(update("train_loss", 0, [1, 2]))
    current.unlink()
    lock.unlink()
    second = Journal.claim(tmp_path, "job-1", "train")
    assert second is not None
    assert second.append(update("train_loss", 0, [7, 8]))
    lock.unlink()

    with capture_events() as events:
        assert not first.append(update("train_loss", 2, [3]))

    assert first.failed
    assert ["trainreport.journal_write_failed"] == [e["event"] for e in events]
    assert second.writer.fd is not None
    assert names_file(second.writer.fd, current)
    assert not (job_dir / "train.left").exists()
    assert second.append(update("train_loss", 2, [9]))
    assert [7, 8, 9] == _steps(current)
    first.close(delivered=False)
    assert second.writer.fd is not None
    assert names_file(second.writer.fd, current)
    second.close(delivered=False)
    assert [7, 8, 9] == _steps(current)


@pytest.mark.parametrize(
    ("job", "task"), [("../etc", "train"), ("job-1", "a/b"), ("", "train"), ("job-1", ".hidden")]
)
def test_an_invalid_id_gives_no_journal_and_one_event(tmp_path: Path, job: str, task: str) -> None:
    """Ids follow the protocol's rule, so no id names a file outside the journal directory."""
    with capture_events() as events:
        assert Journal.claim(tmp_path, job, task) is None

    assert ["trainreport.journal_unavailable"] == [e["event"] for e in events]
    assert [] == list(tmp_path.iterdir())


def test_an_unwritable_directory_costs_one_event_and_the_run_goes_on(
    tmp_path: Path, server: ServerHandle
) -> None:
    """journal_dir under a regular file: one journal_unavailable event, every point delivered."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with capture_events() as events:
        delivered = train(server.url, blocker / "journal", range(1, 31))

    assert delivered
    assert list(range(1, 31)) == stored_steps(server.url)
    assert ["trainreport.journal_unavailable"] == [
        e["event"] for e in events if e["event"].startswith("trainreport.journal")
    ]


# --- trimming, removal ------------------------------------------------------------------


def test_a_journal_keeps_no_points_and_is_compacted_when_due_for_what_it_would_hold(
    tmp_path: Path,
) -> None:
    """Its state holds lengths, not points; a compaction is due past 8 MiB and twice the
    snapshot of the points given (those no destination acknowledged), which ``reset`` writes."""
    journal = Journal.claim(tmp_path, "job-1", "train")
    assert journal is not None
    steps = list(range(1, 450_001))  # 9 MB of points: just above the compaction floor
    journal.append(update("train_loss", 0, steps))
    assert (0, {"train_loss": 450_000}) == (journal.state.point_count(), journal.state.lengths())
    assert journal.compaction_due(10)  # not the state's points (none): the snapshot's

    snapshot = LogState()
    snapshot.reset(
        Update("running", {}, (update("train_loss", 449_990, steps[-10:]).series or ()), False)
    )
    assert journal.reset(snapshot, absolute=True)
    journal.append(update("train_loss", 450_000, [450_001]))

    assert 1 == journal.writer.compactions
    assert (0, {"train_loss": 450_001}) == (journal.state.point_count(), journal.state.lengths())
    journal.close(delivered=False)
    task = read_task(tmp_path / "job-1" / "train.log")
    points = task["status_details"]["metrics"]["train_loss"]
    assert list(range(449_991, 450_002)) == [p["step"] for p in points]


def test_a_clean_close_with_everything_delivered_removes_the_journal(
    tmp_path: Path, server: ServerHandle
) -> None:
    """Nothing is left on disk: not the journal, not its lock, not the job's directory."""
    journal_dir = tmp_path / "journal"
    assert train(server.url, journal_dir, range(1, 51))

    assert list(range(1, 51)) == stored_steps(server.url)
    assert [] == list(journal_dir.iterdir())


def test_with_the_service_down_the_journal_keeps_every_point_after_close(
    tmp_path: Path, down_url: str
) -> None:
    """close() returns False and the journal holds the run (local offsets: never seeded)."""
    assert not train(down_url, tmp_path, range(1, 51))

    run = load_run_file(tmp_path / "job-1" / "train.log")
    assert "local" == run.run["offsets"]
    assert list(range(1, 51)) == [
        p["step"] for p in run.task["status_details"]["metrics"]["train_loss"]
    ]


def test_the_next_process_sends_a_left_journal_before_its_own_points(
    tmp_path: Path, down_url: str, server: ServerHandle
) -> None:
    """Recovery at start: the dead run's points, then this run's, each once; journals removed."""
    journal_dir = tmp_path / "journal"
    assert not train(down_url, journal_dir, range(1, 51))
    with capture_events() as events:
        assert train(server.url, journal_dir, range(51, 81))

    assert list(range(1, 81)) == stored_steps(server.url)
    assert [] == list(journal_dir.iterdir())
    recovered = [e for e in events if e["event"] == "trainreport.journal_recovered"]
    assert [50] == [e["points"] for e in recovered]


class _CountingHttpSink(HttpSink):
    """An ``HttpSink`` that counts the requests asked of it and the bytes of its delivered sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests = 0
        self.delivered_bytes = 0

    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        self.requests += 1
        return super().open(timeout_seconds=timeout_seconds)

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        self.requests += 1
        result = super().send(update, timeout_seconds=timeout_seconds)
        if isinstance(result, Delivered):
            self.delivered_bytes += result.bytes_sent
        return result


def test_stats_count_the_requests_and_bytes_of_recovery(
    tmp_path: Path, down_url: str, server: ServerHandle
) -> None:
    """The left-over's send and the re-open after it are requests to the service like any
    other: ``stats()`` counts every request the sink was asked to make, and the bytes of
    every delivered send, the dead run's 50 points included."""
    journal_dir = tmp_path / "journal"
    assert not train(down_url, journal_dir, range(1, 51))
    sink = _CountingHttpSink(server.url, "job-1", connect_timeout_seconds=0.5)
    reporter = Reporter(sink, config_for(journal_dir), rank=0).start()
    with capture_events() as events:
        for step in range(51, 61):
            reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
        assert reporter.close(timeout=5.0)
        exited(reporter)
    stats = reporter.stats()

    assert ["trainreport.journal_recovered"] == [
        e["event"] for e in events if e["event"] == "trainreport.journal_recovered"
    ]
    assert list(range(1, 61)) == stored_steps(server.url)
    assert (sink.requests, sink.delivered_bytes) == (stats.requests_sent, stats.bytes_sent)
    assert (stats.requests_sent, stats.bytes_sent) == (
        stats.destinations[0].requests_sent,
        stats.destinations[0].bytes_sent,
    )


def test_recovery_sends_each_points_time_from_the_journal(
    tmp_path: Path, down_url: str, server: ServerHandle
) -> None:
    """The dead run's journal holds its points' times, and recovery sends them (``/series``)."""
    journal_dir = tmp_path / "journal"
    before = time.time()
    assert not train(down_url, journal_dir, range(1, 51))
    after = time.time()

    assert train(server.url, journal_dir, [])

    url = f"{server.url}/v1/jobs/job-1/tasks/train/series?names=train_loss"
    times = json.loads(urllib3.request("GET", url, timeout=10.0).data)["series"]["train_loss"]
    assert 50 == len(times["times"])
    assert all(t is not None and before - 1.0 <= t <= after + 1.0 for t in times["times"])


def test_recovery_sends_nothing_twice_to_a_service_that_holds_part_of_the_journal(
    tmp_path: Path, server: ServerHandle
) -> None:
    """A journal whose first points the service holds already: only the rest is sent."""
    assert train(server.url, tmp_path / "unused", range(1, 21))
    journal = Journal.claim(tmp_path, "job-1", "train")
    assert journal is not None
    journal.reset(journal.state, absolute=True)
    journal.append(update("train_loss", 0, list(range(1, 41))))
    journal._release(remove_files=False)

    assert train(server.url, tmp_path, [])

    assert list(range(1, 41)) == stored_steps(server.url)


# --- bad input --------------------------------------------------------------------------


def _damaged(kind: str, good: bytes) -> bytes:
    if kind == "truncated":
        return good[:-7]
    if kind == "corrupted in the middle":
        middle = len(good) // 2
        return good[:middle] + bytes([good[middle] ^ 0xFF]) + good[middle + 1 :]
    if kind == "newer version":
        return good + b"\x63" + good[len(MAGIC) + 1 : len(MAGIC) + 40]
    return b"this is not a run log at all\n"


def _leave_damaged_journal(directory: Path, kind: str, last_step: int) -> Path:
    """A journal a dead process left, with records of 10 steps up to ``last_step``, damaged.

    Returns its path.
    """
    dead = Journal.claim(directory, "job-1", "train")
    assert dead is not None
    for start in range(1, last_step + 1, 10):
        dead.append(update("train_loss", start - 1, list(range(start, start + 10))))
    dead._release(remove_files=False)
    path = directory / "job-1" / "train.log"
    path.write_bytes(_damaged(kind, path.read_bytes()))
    return path


@pytest.mark.parametrize(
    "kind", ["truncated", "corrupted in the middle", "newer version", "not a log"]
)
def test_a_damaged_left_journal_never_stops_the_run(
    tmp_path: Path, server: ServerHandle, kind: str
) -> None:
    """Intact records before the damage are delivered; the damage is logged.

    close() is True, except for a left-over with nothing readable: it is kept
    (a newer trainreport may read it), and close() is never True while a
    left-over waits (issue 21).
    """
    _leave_damaged_journal(tmp_path, kind, 40)

    with capture_events() as events:
        delivered = train(server.url, tmp_path, range(41, 51))

    assert (kind != "not a log") == delivered
    steps = stored_steps(server.url)
    assert list(range(41, 51)) == steps[-10:]
    assert steps == sorted(set(steps))
    names = {e["event"] for e in events}
    if kind == "not a log":  # nothing readable: kept for trainreport sync, never deleted
        assert "trainreport.journal_recovery_failed" in names
        assert [b"this is not a run log at all\n"] == [
            p.read_bytes() for p in (tmp_path / "job-1" / "train.left").iterdir()
        ]
    else:
        assert "trainreport.run_log_damaged" in names
        assert steps[0] == 1  # the intact records before the damage were sent


# --- when there is a journal ------------------------------------------------------------


def test_trainreport_journal_0_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, down_url: str
) -> None:
    """With TRAINREPORT_JOURNAL=0 nothing is written, whatever the config says."""
    monkeypatch.setenv("TRAINREPORT_JOURNAL", "0")
    assert not train(down_url, tmp_path, range(1, 11))

    assert [] == list(tmp_path.iterdir())


@pytest.mark.parametrize("sink_kind", ["file", "memory"])
def test_a_local_file_or_a_memory_sink_gets_no_journal(tmp_path: Path, sink_kind: str) -> None:
    """The embedded FileSink is its own journal; a MemorySink has no job and task to key one."""
    journal_dir = tmp_path / "journal"
    sink = FileSink(tmp_path / "run.log") if sink_kind == "file" else MemorySink()
    reporter = Reporter(sink, config_for(journal_dir), rank=0).start()
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    assert reporter.close(timeout=5.0)

    assert not journal_dir.exists()


# --- the reporter thread's cadence (injected clock) -------------------------------------


def _sends_a_minute_apart_journal_every_second(
    tmp_path: Path, server: ServerHandle
) -> tuple[Reporter, FakeClock]:
    """An unstarted reporter to the server on an injected clock: sends 60 s apart, journal 1 s."""
    clock = FakeClock()
    config = config_for(tmp_path, min_report_interval_seconds=60.0, journal_interval_seconds=1.0)
    return Reporter(HttpSink(server.url, "job-1"), config, clock=clock, rank=0), clock


def test_the_thread_appends_to_the_journal_every_interval_while_sends_are_far_apart(
    tmp_path: Path, server: ServerHandle
) -> None:
    """Sends a minute apart, journal every second: points reach the journal within the interval."""
    reporter, clock = _sends_a_minute_apart_journal_every_second(tmp_path, server)
    worker = drive(reporter)
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    worker.cycle()  # the first point goes at once; the journal starts
    worker.cycle()
    for step in range(2, 11):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    path = tmp_path / "job-1" / "train.log"

    def journaled() -> list[int]:
        task = read_task(path)
        points = task["status_details"].get("metrics", {}).get("train_loss", [])
        return [p["step"] for p in points]

    clock.advance(0.5)
    wait_before = worker.cycle()
    before = journaled()
    clock.advance(0.5)
    worker.cycle()
    after = journaled()
    reporter.close(timeout=10.0)

    assert 10 not in before  # not due yet: drained, not written
    assert wait_before <= 0.5  # the thread would wake for the journal, not in a minute
    assert 10 == after[-1]  # due: written (the service acknowledged only step 1)
    assert [1] == stored_steps(server.url)[:1]


# --- a destination that hangs never stops the journal (injected clock) -----------------


class _KeyedSink(ScriptedSink):
    """A ScriptedSink with a job and a task: the reporter keeps a journal in front of it."""

    job_id = "job-1"
    task_id = "train"


def _journaled_steps(path: Path) -> list[int]:
    """The train_loss steps the journal at ``path`` holds (none while it cannot be read)."""
    try:
        task = read_task(path)
    except Exception:
        return []
    points = task["status_details"].get("metrics", {}).get("train_loss", [])
    return [p["step"] for p in points]


#: The wall clock of :func:`_keeper_of_a_claimed_journal`'s keeper.
_STAMP = "2026-01-01T00:00:00.000Z"


def _keeper_of_a_claimed_journal(tmp_path: Path) -> tuple[Journal, Recorder, JournalKeeper]:
    """A journal claimed for job-1/train, a started attempt's recorder, and their keeper."""
    journal = Journal.claim(tmp_path, "job-1", "train")
    assert journal is not None
    recorder = Recorder(ReportingConfig(), destinations=1)
    keeper = JournalKeeper(
        journal, recorder, interval_seconds=1.0, clock=lambda: 0.0, wall_clock=lambda: _STAMP
    )
    recorder.start_attempt()
    return journal, recorder, keeper


def test_seeding_never_trims_the_journal_with_the_service_s_indices_before_its_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service was down at start: the journal holds this process's points at its own
    indices. Once the stored task (100 points) seeds the store, the acknowledged lengths are
    the service's; trimmed with them before the rewrite, the local journal lost every point
    from disk (its compaction was due) until the rewrite put them back: a kill -9 or a
    failed rewrite there lost the whole outage. The file holds them at every moment."""
    from trainreport._engine._destination import _stored_state  # noqa: PLC0415
    from trainreport._record import _reports as reports  # noqa: PLC0415

    journal, recorder, keeper = _keeper_of_a_claimed_journal(tmp_path)
    queue = deque(reports.train(0.0, step, 1, {"loss": 1.0 / step}) for step in range(101, 131))
    recorder.apply_all(queue)
    keeper.record()
    path = tmp_path / "job-1" / "train.log"
    assert list(range(101, 131)) == _journaled_steps(path)
    on_disk_at_rewrite: list[list[int]] = []
    rewrite = journal.reset

    def reset(state: Any, *, absolute: bool) -> bool:
        on_disk_at_rewrite.append(_journaled_steps(path))
        return rewrite(state, absolute=absolute)

    monkeypatch.setattr(journal, "reset", reset)
    points = [{"step": s, "epoch": 1, "value": 1.0 / s} for s in range(1, 101)]
    task = {"status": "running", "status_details": {"metrics": {"train_loss": points}}}
    stored = _stored_state(Opened(stored_task=task))
    assert not isinstance(stored, str)
    recorder.seed(stored)
    journal.writer.min_compact_bytes = journal.writer._compact_at = 0  # compaction due now
    keeper.record()
    journal.close(delivered=False)

    assert [list(range(101, 131))] == on_disk_at_rewrite


def test_a_due_compaction_takes_what_no_destination_acknowledged_from_the_store(
    tmp_path: Path,
) -> None:
    """The journal's state keeps no points (the store holds those it needs): its compaction,
    in place of a record, is one snapshot of the store's unacknowledged points, encoded once."""
    from trainreport._record import _reports as reports  # noqa: PLC0415
    from trainreport._wire._payloads import StoredState  # noqa: PLC0415

    journal, recorder, keeper = _keeper_of_a_claimed_journal(tmp_path)
    recorder.seed(StoredState(series={}))  # the stored task was read: the service's indices

    def steps(first: int, last: int) -> None:
        queue = deque(reports.train(0.0, s, 1, {"loss": 1.0 / s}) for s in range(first, last + 1))
        recorder.apply_all(queue)
        keeper.record()

    steps(1, 400)  # the first record is the rewrite at the service's indices
    build = recorder.build_update(0, wall=_STAMP, full_state=False)
    recorder.on_delivered(0, build, {"train_loss": 400})  # the service holds 1..400
    rewrites = journal.writer.compactions
    steps(401, 430)
    path = tmp_path / "job-1" / "train.log"
    assert (0, rewrites) == (journal.state.point_count(), journal.writer.compactions)
    assert list(range(1, 431)) == _journaled_steps(path)  # appended: not due yet
    journal.writer.min_compact_bytes = journal.writer._compact_at = 0  # due at the next record
    records = keeper.records

    steps(431, 440)

    assert (rewrites + 1, records + 1) == (journal.writer.compactions, keeper.records)
    assert list(range(401, 441)) == _journaled_steps(path)
    assert {"train_loss": 400} == load_run_file(path).state.bases
    assert (0, {"train_loss": 440}) == (journal.state.point_count(), journal.state.lengths())
    steps(441, 441)
    journal.close(delivered=False)
    assert list(range(401, 442)) == _journaled_steps(path)


def _eventually(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Poll ``condition`` (real time) until it holds or ``seconds`` pass; its last answer."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def _journal_behind_a_held_request(
    tmp_path: Path, *, hold_open: bool, other: MemorySink | None
) -> tuple[Reporter, _KeyedSink, threading.Event, FakeClock]:
    """A started reporter (its thread runs) whose first open, or first send, waits on a gate.

    Sends are a minute apart and the journal is due every second of the injected
    clock; the test advances the clock and wakes the thread itself. ``other``: a
    second destination, after the held one (the store is seeded from the first).
    """
    clock = FakeClock()
    sink, gate = _KeyedSink(), threading.Event()
    if hold_open:
        sink.open_gate = gate
    else:
        sink.gate = gate
    config = config_for(tmp_path, min_report_interval_seconds=60.0, journal_interval_seconds=1.0)
    sinks: list[Sink] = [sink] if other is None else [sink, other]
    reporter = Reporter(sinks=sinks, config=config, clock=clock, rank=0).start()
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    assert sink.held.wait(10.0)
    return reporter, sink, gate, clock


@pytest.mark.parametrize(
    ("hold_open", "several"),
    [(False, False), (True, False), (True, True)],
    ids=["send held", "first open held", "first open held, a second destination"],
)
def test_a_request_that_hangs_never_stops_the_journal(
    tmp_path: Path, hold_open: bool, several: bool
) -> None:
    """While a send (or the first open) hangs, reports are journaled at every journal interval.

    The request runs on the destination's sender thread, so the reporter thread
    keeps draining and recording; before the first open answers (with a second
    destination open: before the resume is decided), the store is not seeded,
    and the journal records this process's points at local offsets. Once the
    request ends, every destination receives every point, once.
    """
    other = MemorySink() if several else None
    reporter, sink, gate, clock = _journal_behind_a_held_request(
        tmp_path, hold_open=hold_open, other=other
    )
    worker = reporter._worker
    assert worker is not None
    path = tmp_path / "job-1" / "train.log"
    try:
        journaled = []
        for second in range(1, 4):
            for step in range(second * 10 - 8, second * 10 + 2):
                reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
            clock.advance(1.0)
            worker.wake.set()
            last = second * 10 + 1
            _eventually(lambda: last in _journaled_steps(path))  # noqa: B023 - waited for here
            journaled.append(_journaled_steps(path))
    finally:
        gate.set()
    assert reporter.close(timeout=10.0)

    assert [list(range(1, s * 10 + 2)) for s in range(1, 4)] == journaled
    assert list(range(1, 32)) == [p[0] for p in curve(held(sink), "train_loss")]
    if other is not None:
        assert list(range(1, 32)) == [p[0] for p in curve(held(other), "train_loss")]


class _ReportsRightAfterADrain(FakeClock):
    """A FakeClock that runs ``then`` once, at its first reading after a drain emptied the queue.

    It plays the training thread reporting just after the reporter thread took
    the queue, and the clock moving on before the journal decides whether a
    record is due: an interleaving a loaded machine makes now and then.
    """

    def __init__(self) -> None:
        super().__init__()
        self.queue: Any = None
        self.then: Callable[[], None] | None = None

    def __call__(self) -> float:
        then = self.then
        if then is not None and self.queue is not None and not self.queue:
            self.then = None
            then()
        return super().__call__()


def test_the_journal_interval_counts_from_the_drain_a_record_holds(tmp_path: Path) -> None:
    """Points reported right after a drain are journaled one interval after that drain.

    A record holds what the drain before it took; when the next one is due is
    counted from that drain, not from a later reading of the clock, or the
    points reported in between would wait a whole interval more: a kill then
    loses points reported more than ``journal_interval_seconds`` before it.
    """
    clock = _ReportsRightAfterADrain()
    config = config_for(tmp_path, min_report_interval_seconds=60.0, journal_interval_seconds=1.0)
    reporter = Reporter(_KeyedSink(), config, clock=clock, rank=0)
    worker = drive(reporter)
    clock.queue = worker.queue
    path = tmp_path / "job-1" / "train.log"
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    worker.cycle()  # at 1000: recorded, step 1 sent

    def training_thread() -> None:  # reports at 1001, then a second passes
        for step in range(12, 22):
            reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
        clock.advance(1.0)

    for step in range(2, 12):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    clock.advance(1.0)
    clock.then = training_thread
    worker.cycle()  # drains 2..11 at 1001; 12..21 arrive, then the clock reads 1002
    recorded = _journaled_steps(path)
    worker.cycle()  # at 1002: a second after the drain that left 12..21 behind
    try:
        assert list(range(2, 12)) == recorded  # step 1 was acknowledged: trimmed
        assert list(range(2, 22)) == _journaled_steps(path)
    finally:
        reporter.close(timeout=10.0)


# --- trainreport sync of a journal --------------------------------------------------------


@pytest.mark.parametrize("kind", ["truncated", "not a log"])
def test_sync_of_a_damaged_journal_says_what_was_unreadable(
    tmp_path: Path, server: ServerHandle, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Intact records are uploaded (exit 0, the damage on stderr); nothing readable: exit 1."""
    from trainreport.cli import main  # noqa: PLC0415

    path = _leave_damaged_journal(tmp_path, kind, 30)

    status = main(["sync", str(path), "--url", server.url])

    err = capsys.readouterr().err
    if kind == "not a log":
        assert 1 == status
        assert "neither a run log" in err
    else:
        assert 0 == status
        assert "is damaged" in err
        assert list(range(1, 21)) == stored_steps(server.url)  # the two intact records


# --- the journal in Reporter.stats() ------------------------------------------------------


def test_stats_show_the_journal_recording_its_path_records_bytes_and_last_fsync(
    tmp_path: Path, server: ServerHandle
) -> None:
    """A platform engineer sees the journal on, where it is, what it wrote, when it fsync'ed."""
    reporter, clock = _sends_a_minute_apart_journal_every_second(tmp_path, server)
    assert reporter.stats().journal is None  # not started: nothing claimed yet
    worker = drive(reporter)
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    worker.cycle()
    worker.cycle()
    for step in range(2, 11):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    clock.advance(1.0)
    worker.cycle()
    path = tmp_path / "job-1" / "train.log"

    journal = reporter.stats().journal
    assert journal is not None
    assert ("recording", str(path), None) == (journal.state, journal.path, journal.error)
    assert journal.records >= 1
    assert journal.bytes_written >= path.stat().st_size > 0  # a rewrite replaced earlier bytes
    assert journal.last_fsync_at is not None
    assert journal.last_fsync_at.endswith("Z")
    assert reporter.close(timeout=10.0)
    closed = reporter.stats().journal
    assert closed is not None
    assert "removed" == closed.state  # delivered: nothing left on disk
    assert not path.exists()


def test_stats_say_a_journal_kept_at_close_when_the_service_never_answered(
    tmp_path: Path, down_url: str
) -> None:
    """The service down: the journal is kept (fsync'ed) for the next process or sync."""
    sink = HttpSink(down_url, "job-1", connect_timeout_seconds=0.5, read_timeout_seconds=2.0)
    reporter = Reporter(sink, config_for(tmp_path), rank=0).start()
    for step in range(1, 11):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    assert not reporter.close(timeout=5.0)

    journal = reporter.stats().journal
    assert journal is not None
    assert ("kept", str(tmp_path / "job-1" / "train.log")) == (journal.state, journal.path)
    assert journal.records >= 1
    assert journal.bytes_written > 0
    assert journal.last_fsync_at is not None


def test_stats_say_why_a_reporter_has_no_journal(tmp_path: Path, server: ServerHandle) -> None:
    """Unwritable directory: ``unavailable``; another live process's claim: ``busy``."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    figures = []
    held = Journal.claim(tmp_path / "held", "job-1", "train")
    assert held is not None
    for journal_dir in (blocker / "journal", tmp_path / "held"):
        sink = HttpSink(server.url, "job-1")
        reporter = Reporter(sink, config_for(journal_dir), rank=0).start()
        reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
        assert reporter.close(timeout=5.0)
        figures.append(reporter.stats().journal)
    held.close(delivered=True)

    unavailable, busy = figures
    assert unavailable is not None
    assert busy is not None
    assert ("unavailable", 0, 0, None) == (
        unavailable.state,
        unavailable.records,
        unavailable.bytes_written,
        unavailable.last_fsync_at,
    )
    assert unavailable.error is not None
    assert "directory" in unavailable.error.lower()
    assert ("busy", str(tmp_path / "held" / "job-1" / "train.log")) == (busy.state, busy.path)
    assert busy.error is not None


def test_stats_say_a_journal_stopped_by_a_failed_write(
    tmp_path: Path, server: ServerHandle
) -> None:
    """A write that fails (here: its file closed under it) turns the journal off: ``failed``."""
    reporter, clock = _sends_a_minute_apart_journal_every_second(tmp_path, server)
    worker = drive(reporter)
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    worker.cycle()
    worker.cycle()
    assert worker.journal is not None
    worker.journal.journal.writer.close()  # every later write fails
    reporter.report_train_step(step=2, epoch=1, metrics={"loss": 0.5})
    clock.advance(1.0)
    with capture_events() as events:
        worker.cycle()

    journal = reporter.stats().journal
    assert journal is not None
    assert "failed" == journal.state
    assert journal.error is not None
    assert ["trainreport.journal_write_failed"] == [
        e["event"] for e in events if e["event"].startswith("trainreport.journal")
    ]
    reporter.close(timeout=10.0)


def test_stats_have_no_journal_when_it_is_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ServerHandle
) -> None:
    """``TRAINREPORT_JOURNAL=0`` (or a sink with no job and task): ``journal`` is None."""
    monkeypatch.setenv("TRAINREPORT_JOURNAL", "0")
    reporter = Reporter(HttpSink(server.url, "job-1"), config_for(tmp_path), rank=0).start()
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    assert reporter.flush(timeout=5.0)
    assert reporter.stats().journal is None
    assert reporter.close(timeout=5.0)


# --- the journal's cost: rewinds are records, not rewrites ----------------------------


def _down_reporter(tmp_path: Path, down_url: str) -> tuple[Reporter, FakeClock, Any]:
    """An unstarted-thread reporter to a service that is down, journal every second."""
    clock = FakeClock()
    sink = HttpSink(down_url, "job-1", connect_timeout_seconds=0.2, read_timeout_seconds=0.5)
    config = config_for(tmp_path, min_report_interval_seconds=60.0, journal_interval_seconds=1.0)
    reporter = Reporter(sink, config, clock=clock, rank=0)
    return reporter, clock, drive(reporter)


def test_with_the_service_down_re_reported_steps_keep_the_journal_linear(
    tmp_path: Path, down_url: str
) -> None:
    """A step re-reported every interval, the service down: bytes grow with the run, not its
    square; each rewind is one record (no rewrite), and the journal replays to the same curve."""
    reporter, clock, worker = _down_reporter(tmp_path, down_url)
    expected: dict[int, float] = {}
    step = 0
    written = []
    for interval in range(40):
        for _ in range(50):
            step += 1
            expected[step] = 1.0 / step
            reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
        step -= 3  # a step re-reported: the last three points are replaced
        for gone in range(step + 1, step + 4):
            del expected[gone]
        step += 1
        expected[step] = 2.0 + interval
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 2.0 + interval})
        writer = worker.journal.journal.writer
        before = (writer.bytes_written, worker.journal.records, writer.compactions)
        clock.advance(1.0)
        worker.cycle()
        after = (writer.bytes_written, worker.journal.records, writer.compactions)
        if interval:
            assert before[1] + 1 == after[1]  # one record an interval
            assert before[2] == after[2]  # and no rewrite
        if interval > 1:  # (the first records hold what waited for the first open)
            assert after[0] - before[0] < 52 * 20 + 1024  # the interval's points, and a head
        written.append(after[0])
    path = tmp_path / "job-1" / "train.log"
    journaled = read_task(path)["status_details"]["metrics"]["train_loss"]
    stats = reporter.stats().journal
    reporter.close(timeout=1.0)

    assert written[39] - written[19] < 1.2 * written[19]  # linear: the second half, as the first
    assert stats is not None
    assert written[39] == stats.bytes_written
    assert sorted(expected.items()) == [(p["step"], p["value"]) for p in journaled]


# --- the journal's directory deleted under the run --------------------------------------


def test_a_deleted_journal_directory_is_noticed_and_a_new_journal_holds_every_point(
    tmp_path: Path, down_url: str
) -> None:
    """``rm -rf <journal_dir>/<job>`` mid-run: at the next interval one event, ``stats()``
    counts the restart, and a new journal (and lock) holds every point not acknowledged."""
    import shutil  # noqa: PLC0415

    reporter, clock, worker = _down_reporter(tmp_path, down_url)
    for step in range(1, 101):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
        if step % 25 == 0:
            clock.advance(1.0)
            worker.cycle()
    job_dir = tmp_path / "job-1"
    assert job_dir.is_dir()
    shutil.rmtree(job_dir)  # a cleanup job
    for step in range(101, 121):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    clock.advance(1.0)
    with capture_events() as events:
        worker.cycle()

    path = job_dir / "train.log"
    journaled = read_task(path)["status_details"]["metrics"]["train_loss"]
    stats = reporter.stats().journal
    assert stats is not None
    deleted = [e for e in events if e["event"] == "trainreport.journal_deleted"]
    assert [str(path)] == [e["path"] for e in deleted]
    assert ("recording", 1) == (stats.state, stats.restarts)
    assert list(range(1, 121)) == [p["step"] for p in journaled]
    assert (job_dir / "train.lock").exists()  # claimed again: a second process is kept out
    assert Journal.claim(tmp_path, "job-1", "train") is None
    reporter.report_train_step(step=121, epoch=1, metrics={"loss": 0.1})
    clock.advance(1.0)
    worker.cycle()
    assert 121 == read_task(path)["status_details"]["metrics"]["train_loss"][-1]["step"]
    reporter.close(timeout=1.0)


# --- close() journals what it drains, before its first send -------------------------------


class HangingKeyedSink(ScriptedSink):
    """A ScriptedSink with a job and task (so it gets a journal) whose sends can hang.

    ``entered`` is set when a send begins, before it waits on ``gate``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.job_id, self.task_id = "job-1", "train"
        self.entered = threading.Event()

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        self.entered.set()
        return super().send(update, timeout_seconds=timeout_seconds)


def _journaled(path: Path) -> tuple[str, list[int]]:
    """The journal's status and its ``train_loss`` steps (read with the run-log reader)."""
    task = read_task(path)
    points = task["status_details"].get("metrics", {}).get("train_loss", [])
    return task["status"], [p["step"] for p in points]


def _close_while_the_service_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, terminal: str | None
) -> tuple[tuple[str, list[int]], int, bool]:
    """Steps 1-5 delivered, 6-30 queued, then close() with every send hanging.

    Returns what the journal holds once close()'s first send has begun (its
    deadline still far off), the ``fsync`` calls made since close() began, and
    close()'s answer after the service is let go.
    """
    sink, clock = HangingKeyedSink(), FakeClock()
    config = config_for(
        tmp_path, min_report_interval_seconds=60.0, journal_interval_seconds=60.0
    )  # no journal record falls due on the injected clock: only close() can write one
    reporter = Reporter(sink, config, clock=clock, rank=0)
    worker = drive(reporter)
    reporter.report_training_start(max_steps=30)
    for step in range(1, 6):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    worker.cycle()  # opens, seeds, delivers steps 1-5
    assert 5 == len(curve(sink.task, "train_loss"))
    for step in range(6, 31):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    if terminal == "completed":
        reporter.report_completed()
    elif terminal == "preempted":
        reporter.report_outcome(preempted=True)
    sink.gate, sink.entered = threading.Event(), threading.Event()  # every send hangs now
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    answer: list[bool] = []
    closing = threading.Thread(target=lambda: answer.append(reporter.close(timeout=30.0)))
    closing.start()
    try:
        assert sink.entered.wait(10), "close() never sent"
        journaled = _journaled(tmp_path / "job-1" / "train.log")
        synced = len(fsyncs)
    finally:
        sink.gate.set()
        closing.join(30)
    return journaled, synced, answer[0]


@pytest.mark.parametrize("terminal", [None, "completed", "preempted"])
def test_close_journals_the_terminal_status_and_every_queued_point_before_its_first_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: str | None
) -> None:
    """A SIGKILL during a hanging close() finds the end of the run in the journal (issue 21, 3).

    The close sequence drains the queue (the terminal report, the last points)
    and records them in the journal with one write and an ``fsync`` before any
    send: waiting for the deadline is waiting for the job system's SIGKILL.
    """
    (status, steps), synced, delivered = _close_while_the_service_hangs(
        tmp_path, monkeypatch, terminal=terminal
    )

    expected = "cancelled" if terminal == "preempted" else "completed"
    assert expected == status
    assert set(range(6, 31)) <= set(steps)
    assert synced >= 1
    assert delivered  # let go, the service takes everything: the journal is removed
    assert not (tmp_path / "job-1" / "train.log").exists()


def test_close_journals_what_waits_for_a_first_open_that_has_not_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reports waiting for the stored task are journaled as close() begins, not at the end.

    The first open hangs, and the rule that stops reports waiting for it (the
    first opens ``journal_interval_seconds`` late) has not fired on the
    injected clock: when ``close()`` begins they are drained and journaled at
    once, with the close's ``fsync``, since the process may be killed any
    moment. Once the open answers, the stored task (steps 1-5 of an earlier
    attempt) is merged under them, and the destination holds every step once.
    """
    inner = MemorySink()
    earlier = Reporter(inner, ReportingConfig(), rank=0).start()
    for step in range(1, 6):
        earlier.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    assert earlier.close(timeout=10.0)
    sink, gate = _KeyedSink(inner), threading.Event()
    sink.open_gate = gate
    config = config_for(tmp_path, min_report_interval_seconds=60.0, journal_interval_seconds=1.0)
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0).start()
    synced = threading.Event()
    record = JournalKeeper.record

    def spied(keeper: JournalKeeper, *, at: float | None = None, sync: bool = False) -> None:
        record(keeper, at=at, sync=sync)
        if sync:  # only the close sequence asks for an fsync: it recorded
            synced.set()

    monkeypatch.setattr(JournalKeeper, "record", spied)
    answer: list[bool] = []
    closing = threading.Thread(target=lambda: answer.append(reporter.close(timeout=30.0)))
    try:
        for step in range(6, 16):
            reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
        reporter.report_completed()
        assert sink.held.wait(10.0), "the first open never began"
        closing.start()
        assert synced.wait(10.0), "close() recorded nothing in the journal"
        journaled = _journaled(tmp_path / "job-1" / "train.log")
        open_still_held = not gate.is_set()
    finally:
        gate.set()
        if closing.ident is not None:
            closing.join(30.0)

    assert open_still_held
    assert ("completed", list(range(6, 16))) == journaled  # this process's, at local offsets
    assert [True] == answer
    task = held(inner)
    assert "completed" == task["status"]
    assert list(range(1, 16)) == [p[0] for p in curve(task, "train_loss")]


# --- close() is never True while a left-over journal waits ----------------------------------


def _disk_full_for_journals(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk, as a journal sees it: a new journal file cannot be written (ENOSPC)."""

    def full(cls: type, path: Any, *, run: Any = None) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunLogWriter, "open", classmethod(full))


def test_a_restart_on_a_full_disk_still_recovers_the_dead_process_s_journal(
    tmp_path: Path, down_url: str, server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own journal is unavailable, but recovery needs no room: the left-over is delivered.

    Recovery sends the left-over and removes it; only this process's own
    journal needs the disk (issue 21, partials).
    """
    journal_dir = tmp_path / "journal"
    assert not train(down_url, journal_dir, range(1, 51))
    _disk_full_for_journals(monkeypatch)
    with capture_events() as events:
        delivered = train(server.url, journal_dir, range(51, 61))

    assert list(range(1, 61)) == stored_steps(server.url)
    assert delivered
    assert not (journal_dir / "job-1" / "train.left").exists()
    names = [e["event"] for e in events]
    assert "trainreport.journal_unavailable" in names
    assert "trainreport.journal_recovered" in names


@pytest.mark.parametrize("disk_full", [False, True], ids=["disk-ok", "disk-full"])
def test_close_says_false_while_a_left_over_over_the_body_limit_waits_and_says_where(
    tmp_path: Path,
    down_url: str,
    start_server: Callable[..., ServerHandle],
    monkeypatch: pytest.MonkeyPatch,
    disk_full: bool,
) -> None:
    """Full-state mode: a left-over whose curves exceed the body limit is never delivered.

    The restart's own points arrive, but close() returns False, and its
    ``close_undelivered`` names the left-over's path and the ``trainreport
    sync`` command (issue 21, partials).
    """
    server = start_server(max_body_bytes=16 * 1024)
    journal_dir = tmp_path / "journal"
    assert not train(down_url, journal_dir, range(1, 5001), full_state=True)
    [left] = [journal_dir / "job-1" / "train.log"]
    if disk_full:
        _disk_full_for_journals(monkeypatch)
    with capture_events() as events:
        delivered = train(server.url, journal_dir, range(5001, 5011), full_state=True)

    assert list(range(5001, 5011)) == stored_steps(server.url)
    assert not delivered
    [kept] = list((journal_dir / "job-1" / "train.left").iterdir())
    assert read_task(kept)["status_details"]["metrics"]["train_loss"][-1]["step"] == 5000
    warned = [e for e in events if e["event"] == "trainreport.close_undelivered"]
    assert [str(kept)] == [e.get("journal") for e in warned]
    assert f"trainreport sync {kept} --url {server.url}" in warned[0]["hint"]
    assert "HTTP 413" in warned[0]["reason"]
    assert left != kept


class _LocalLog(MemorySink):
    """A custom sink that says it keeps the run on local disk itself (``Sink.local_run_log``)."""

    local_run_log = True
    job_id = "job-1"
    task_id = "train"


class _Remote(MemorySink):
    """A custom sink with a job and a task, remote (the default ``local_run_log``)."""

    job_id = "job-1"
    task_id = "train"


def test_a_sink_that_is_its_own_run_log_gets_no_journal_whatever_its_class() -> None:
    """The engine asks the Sink interface (``local_run_log``), not for a FileSink: any sink
    that keeps the run on disk itself needs no journal; a remote one with ids gets one."""
    assert journal_identity(_LocalLog()) is None
    assert journal_identity(FileSink("run.log")) is None
    assert ("job-1", "train") == journal_identity(_Remote())


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
