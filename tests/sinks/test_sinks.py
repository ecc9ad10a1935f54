"""MemorySink and FileSink: merge semantics; FileSink's run log, resume, task record, kill.

FileSink tests use real files in ``tmp_path`` and, for the kill, a real child
process that SIGKILLs itself.
"""

from __future__ import annotations

import errno
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
from array import array
from pathlib import Path
from typing import Any

import pytest

from helpers import curve, held, kill_at_replace, killed_in_a_forked_child, without_updated_at
from trainreport import (
    ConfigError,
    Delivered,
    FileSink,
    HttpSink,
    MemorySink,
    Opened,
    Rejected,
    Reporter,
    ReportingConfig,
    Resynchronise,
    RetryLater,
    RunLogError,
    read_task,
)
from trainreport._runlog._format import TIMED_POINT_BYTES
from trainreport._runlog._replay import replay
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport.sinks import default_sink_from_env
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


def suffix(name: str, offset: int, steps: list[int]) -> SeriesUpdate:
    return SeriesUpdate(
        name,
        offset,
        array("q", steps),
        array("i", [1] * len(steps)),
        array("d", [float(s) for s in steps]),
    )


def test_memory_sink_merges_details_shallowly() -> None:
    """A key sent replaces the stored value; a key not sent is kept (docs/design.md#wire-modes)."""
    sink = MemorySink({"status": "pending", "status_details": {"owner": "a", "step": 1}})
    sink.open()
    sink.send(Update("running", {"step": 2}, None, True))
    assert {"status": "running", "status_details": {"owner": "a", "step": 2}} == sink.task


def test_full_state_metrics_replace_every_series() -> None:
    """A full-state ``metrics`` replaces the stored curves wholesale."""
    sink = MemorySink()
    sink.open()
    sink.send(Update(None, {}, (suffix("a", 0, [1, 2]), suffix("b", 0, [1])), True))
    sink.send(Update(None, {}, (suffix("a", 0, [1]),), True))
    assert ["a"] == list(held(sink)["status_details"]["metrics"])


def test_suffix_mode_gap_asks_to_resynchronise() -> None:
    """A suffix starting beyond the stored length is refused with the lengths held."""
    sink = MemorySink(series_suffix=True)
    sink.open()
    result = sink.send(Update(None, {}, (suffix("a", 3, [4]),), False))
    assert isinstance(result, Resynchronise)
    assert {} == result.series_lengths


def test_a_series_emptied_by_a_suffix_is_dropped_like_the_server_does() -> None:
    """An empty suffix at offset 0 removes the series: it is in neither the lengths nor the task."""
    sink = MemorySink(series_suffix=True)
    sink.open()
    sink.send(Update(None, {}, (suffix("a", 0, [1, 2]), suffix("b", 0, [1])), False))
    result = sink.send(Update(None, {}, (suffix("b", 0, []),), False))
    assert isinstance(result, Delivered)
    assert {"a": 2} == result.series_lengths
    assert ["a"] == list(held(sink)["status_details"]["metrics"])


def test_suffix_resend_is_idempotent() -> None:
    """Resending the same suffix (a lost response) leaves the series unchanged."""
    sink = MemorySink(series_suffix=True)
    sink.open()
    update = Update(None, {}, (suffix("a", 0, [1, 2]),), False)
    sink.send(update)
    result = sink.send(update)
    assert isinstance(result, Delivered)
    assert {"a": 2} == result.series_lengths


def test_file_sink_writes_the_get_shape_and_resumes_from_it(tmp_path: Path) -> None:
    """The file holds the task as a server would; a second run continues its curves."""
    path = tmp_path / "runs" / "job.json"
    first = Reporter(FileSink(path), rank=0).start()
    for step in (1, 2):
        first.report_train_step(step=step, metrics={"loss": float(step)})
    assert first.close(timeout=5)
    on_disk = json.loads(path.read_text())
    assert without_updated_at(first.snapshot()) == without_updated_at(on_disk)
    second = Reporter(FileSink(path), rank=0).start()
    second.report_train_step(step=3, metrics={"loss": 3.0})
    assert second.close(timeout=5)
    assert [1, 2, 3] == [p[0] for p in curve(json.loads(path.read_text()), "train_loss")]


def test_a_series_a_rewind_empties_is_dropped_by_the_run_log_its_record_and_a_replay(
    tmp_path: Path,
) -> None:
    """Resuming from step 1 empties ``val_loss``: snapshot(), the record and the log agree."""
    path = tmp_path / "run.log"
    first = Reporter(FileSink(path), rank=0).start()
    for step in range(1, 11):
        first.report_train_step(step=step, metrics={"loss": float(step)})
    first.report_validation(step=10, metrics={"loss": 0.5})
    assert first.close(timeout=5)
    second = Reporter(FileSink(path, write_record=True), rank=0).start()
    second.report_train_step(step=1, metrics={"loss": 7.0})
    assert second.close(timeout=5)

    record = json.loads(path.with_suffix(".json").read_text())
    replayed = replay(path.read_bytes()).state
    assert ["train_loss"] == list(record["status_details"]["metrics"])
    assert {"train_loss": 1} == replayed.lengths()
    assert without_updated_at(second.snapshot()) == without_updated_at(record)
    assert without_updated_at(record) == without_updated_at(read_task(path))


def test_a_stored_series_the_client_cannot_parse_survives_the_run_log_and_later_runs(
    tmp_path: Path,
) -> None:
    """Another tool's series (steps going backwards) in an older record is never overwritten."""
    path = tmp_path / "x.json"
    foreign = [{"step": 30, "epoch": None, "value": 1.0}, {"step": 10, "epoch": None, "value": 2}]
    stored = [{"step": s, "epoch": 1, "value": 1.0 / s} for s in range(1, 6)]
    metrics = {"train_loss": stored, "foreign": foreign}
    path.write_text(json.dumps({"status": "running", "status_details": {"metrics": metrics}}))
    for step in (6, 7):  # a second run resumes from the log the first one wrote
        reporter = Reporter(FileSink(path), rank=0).start()
        reporter.report_train_step(step=step, metrics={"loss": 0.1})
        assert reporter.close(timeout=5)

    record = json.loads(path.read_text())
    assert foreign == record["status_details"]["metrics"]["foreign"]
    assert foreign == read_task(path.with_suffix(".log"))["status_details"]["metrics"]["foreign"]
    assert 7 == len(record["status_details"]["metrics"]["train_loss"])


def test_a_reader_of_the_log_never_misreads_it_while_the_run_writes(tmp_path: Path) -> None:
    """While a reporter appends and compacts, every read_task gives a growing prefix of the run.

    A send per report makes records small, so the log outgrows its snapshot and is
    compacted several times; a reader must never see it vanish or shrink.
    """
    path = tmp_path / "job.log"
    sink = FileSink(path, write_record=True)  # every point held: the log is compacted
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.0), rank=0).start()
    stop = threading.Event()
    bad: list[str] = []
    reads = [0]

    def read_loop() -> None:
        seen = -1  # points in the last task read; -1: no task read yet
        # Each pass lets the interpreter go for a moment: a reader that never does
        # makes each flush() below wait a switch interval for it, and the test's
        # 3,000 flushes then took 30 to 60 s (a pytest-timeout under load).
        while not stop.wait(0.001):
            try:
                task = read_task(path)
            except (RunLogError, FileNotFoundError) as exc:
                if seen >= 0:
                    bad.append(f"unreadable after {seen} points: {exc}")
                continue
            metrics = task["status_details"].get("metrics", {})
            steps = [p["step"] for p in metrics.get("train_loss", [])]
            reads[0] += 1
            if steps != list(range(1, len(steps) + 1)) or len(steps) < seen:
                bad.append(f"{len(steps)} points after {seen}: {steps[:5]}")
            seen = max(seen, len(steps))

    reader = threading.Thread(target=read_loop, daemon=True)
    reader.start()
    compactions = 0
    try:  # a failure must not leave the reader running (the session would never end)
        for step in range(1, 3001):
            reporter.report_train_step(step=step, metrics={"loss": 1.0, "lr": 0.1})
            assert reporter.flush(timeout=5)
            writer = sink._writer
            compactions = max(compactions, writer.compactions if writer is not None else 0)
        assert reporter.close(timeout=10)
    finally:
        stop.set()
        reader.join()
    assert [] == bad
    assert reads[0] > 0
    assert compactions >= 2
    assert 3000 == len(curve(read_task(path), "train_loss"))
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_a_run_log_closes_without_writing_a_record_unless_asked(tmp_path: Path) -> None:
    """``FileSink("run.log")`` leaves only the log (the record); ``write_record=True`` adds JSON.

    The record is written from memory at ``close()`` (its cost grows with the
    run), so the embedded default's ``.log`` path does not write it; a path
    ending in ``.json`` (older code) still does.
    """
    tasks = []
    for name, write in (("plain.log", None), ("asked.log", True), ("old.json", None)):
        sink = FileSink(tmp_path / name, write_record=write)
        reporter = Reporter(sink, rank=0).start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        reporter.report_completed()
        assert reporter.close(timeout=5)
        tasks.append(read_task(sink.log_path))
        assert (write is True or name.endswith(".json")) == sink.record_path.exists(), name
        if sink.record_path.exists():
            assert read_task(sink.log_path) == json.loads(sink.record_path.read_text())
    assert [(1, 1, 1.0)] * 3 == [curve(t, "train_loss")[0] for t in tasks]
    assert ["asked.json", "asked.log", "old.json", "old.log", "plain.log"] == sorted(
        p.name for p in tmp_path.iterdir()
    )


def _temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_task_record_killed_before_its_rename_leaves_no_temporary_after_the_next_open(
    tmp_path: Path,
) -> None:
    """``kill -9`` between the task record's temporary (``FileSink(write_record=True)`` at
    close) and its rename: the next open of the log removes it and says so once; the next
    close writes the record."""
    path = tmp_path / "r.log"

    def close_and_die() -> None:
        sink = FileSink(path, write_record=True)
        assert isinstance(sink.open(), Opened)
        steps = list(range(1, 201))
        assert isinstance(sink.send(Update(None, {}, (suffix("a", 0, steps),), False)), Delivered)
        kill_at_replace()
        sink.close()

    killed_in_a_forked_child(close_and_die)
    [left] = _temporaries(tmp_path)
    assert left.startswith(".r.json.")
    size = (tmp_path / left).stat().st_size

    sink = FileSink(path, write_record=True)
    with capture_events() as events:
        assert isinstance(sink.open(), Opened)
    assert [] == _temporaries(tmp_path)
    sink.close()

    record = json.loads(sink.record_path.read_text())
    assert list(range(1, 201)) == [p[0] for p in curve(record, "a")]
    removed = [e for e in events if e["event"] == "trainreport.run_log_temporaries_removed"]
    assert [(str(path), 1, size)] == [(e["path"], e["files"], e["bytes_freed"]) for e in removed]
    assert size > 200 * 10


def test_the_task_record_is_written_before_the_log_s_lock_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is replaced while the sink still holds the log's lock, so another process's
    open (which removes a killed write's temporaries) never meets a live one."""
    path = tmp_path / "r.log"
    sink = FileSink(path, write_record=True)
    assert isinstance(sink.open(), Opened)
    assert isinstance(sink.send(Update(None, {}, (suffix("a", 0, [1, 2]),), False)), Delivered)
    busy: list[bool] = []
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst) == sink.record_path:  # another writer of the log tries it now
            other = FileSink(path)
            busy.append(isinstance(other.open(), Rejected))
            other.close()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    sink.close()
    monkeypatch.undo()

    assert [True] == busy
    assert [1, 2] == [p[0] for p in curve(json.loads(sink.record_path.read_text()), "a")]


def test_a_run_log_keeps_no_points_in_memory_unless_it_writes_the_record(tmp_path: Path) -> None:
    """Beside its file, the log's state holds lengths, not points; a rewind still replays right.

    Its state keeps no points from the open on (a send copies none), and
    ``write_record=True`` keeps every point (the JSON record is written from them).
    """
    held_points = []
    for name, write in (("lean.log", False), ("whole.log", True)):
        sink = FileSink(tmp_path / name, write_record=write)
        assert isinstance(sink.open(), Opened)
        for k in range(10):
            steps = list(range(100 * k + 1, 100 * k + 101))
            assert isinstance(
                sink.send(Update(None, {}, (suffix("a", 100 * k, steps),), False)), Delivered
            )
        result = sink.send(Update(None, {}, (suffix("a", 499, [500, 501]),), False))  # a rewind
        assert isinstance(result, Delivered)
        assert {"a": 501} == result.series_lengths
        writer = sink._writer
        assert writer is not None
        held_points.append((writer.state.point_count(), writer.state.keeps_points))
        sink.close()
        assert list(range(1, 502)) == [p[0] for p in curve(read_task(sink.log_path), "a")]
    assert [(0, False), (501, True)] == held_points


def test_file_sink_treats_a_corrupt_file_as_empty(tmp_path: Path) -> None:
    """A file that is not JSON is logged and the run starts from an empty state."""
    path = tmp_path / "job.json"
    path.write_text("{not json")
    reporter = Reporter(FileSink(path), rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.close(timeout=5)
    assert [(1, 1, 1.0)] == curve(json.loads(path.read_text()), "train_loss")


def test_sinks_pickle_before_use(tmp_path: Path) -> None:
    """Unopened sinks hold no lock or file handle, so they pickle."""
    for sink in (MemorySink(), FileSink(tmp_path / "x.json")):
        assert type(sink) is type(pickle.loads(pickle.dumps(sink)))


def test_default_sink_is_a_unique_file_per_run_unless_the_job_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No URL: a FileSink under ./trainreport-runs/, unique per run, or named by the job id."""
    monkeypatch.chdir(tmp_path)
    first, second = default_sink_from_env({}), default_sink_from_env({})
    assert isinstance(first, FileSink)
    assert isinstance(second, FileSink)
    assert first.path != second.path
    assert Path("trainreport-runs") == first.path.parent
    named = default_sink_from_env({"TRAINREPORT_JOB_ID": "job-7"})
    assert isinstance(named, FileSink)
    assert Path("trainreport-runs/job-7.log") == named.path
    assert Path("trainreport-runs/job-7.json") == named.record_path
    unsafe = default_sink_from_env({"TRAINREPORT_JOB_ID": "../../etc/passwd"})
    assert isinstance(unsafe, FileSink)
    assert Path("trainreport-runs") == unsafe.path.parent


def test_the_default_log_records_the_job_and_task_for_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded default's log says where `trainreport sync` should upload it."""
    monkeypatch.chdir(tmp_path)
    sink = default_sink_from_env({"TRAINREPORT_JOB_ID": "job-7", "TRAINREPORT_TASK_ID": "eval"})
    assert isinstance(sink, FileSink)
    assert Path("trainreport-runs/job-7.eval.log") == sink.path
    assert isinstance(sink.open(), Opened)
    sink.close()
    assert {"job_id": "job-7", "task_id": "eval"} == replay(sink.log_path.read_bytes()).run
    unnamed = default_sink_from_env({})
    assert isinstance(unnamed, FileSink)
    unnamed.open()
    unnamed.close()
    assert unnamed.path.stem == replay(unnamed.log_path.read_bytes()).run["job_id"]


@pytest.mark.parametrize(
    ("given", "log", "record"),
    [
        ("run.json", "run.log", "run.json"),
        ("run.log", "run.log", "run.json"),
        ("run", "run", "run.json"),
        ("run.v2", "run.v2", "run.v2.json"),
    ],
)
def test_file_sink_paths_a_json_name_is_the_record_anything_else_the_log(
    tmp_path: Path, given: str, log: str, record: str
) -> None:
    """FileSink('x.json') keeps older code working: x.json is the record, x.log the log."""
    sink = FileSink(tmp_path / given, write_record=True)
    assert (tmp_path / log, tmp_path / record) == (sink.log_path, sink.record_path)
    reporter = Reporter(sink, rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.close(timeout=5)
    assert replay((tmp_path / log).read_bytes()).damage is None
    assert [(1, 1, 1.0)] == curve(json.loads((tmp_path / record).read_text()), "train_loss")


def test_file_sink_resumes_from_an_older_json_record_and_keeps_it_in_the_log(
    tmp_path: Path,
) -> None:
    """A record written by an older FileSink (no log beside it) is where the run continues."""
    path = tmp_path / "job.json"
    path.write_text(
        json.dumps(
            {
                "status": "failed",
                "status_details": {
                    "owner": "a",
                    "metrics": {"train_loss": [{"step": 1, "epoch": 1, "value": 1.0}]},
                },
            }
        )
    )
    reporter = Reporter(FileSink(path), rank=0).start()
    reporter.report_train_step(step=2, metrics={"loss": 2.0})
    assert reporter.flush(timeout=5)

    from_log = read_task(tmp_path / "job.log")

    assert [1, 2] == [p[0] for p in curve(from_log, "train_loss")]
    assert "a" == from_log["status_details"]["owner"]
    assert reporter.close(timeout=5)
    assert [1, 2] == [p[0] for p in curve(json.loads(path.read_text()), "train_loss")]


def test_the_log_wins_over_an_older_record_beside_it(tmp_path: Path) -> None:
    """A run that crashed after a clean close of an earlier one resumes from the log."""
    path = tmp_path / "job.json"
    first = Reporter(FileSink(path), rank=0).start()
    first.report_train_step(step=1, metrics={"loss": 1.0})
    assert first.close(timeout=5)
    crashed = FileSink(path)
    crashed.open()
    crashed.send(
        Update(None, {}, (SeriesUpdate("train_loss", 1, *_cols([2])),), False)
    )  # never closed: the record still says one point
    crashed._writer.close()  # type: ignore[union-attr]  # the process died: only its lock goes

    second = Reporter(FileSink(path), rank=0).start()
    second.report_train_step(step=3, metrics={"loss": 3.0})
    assert second.close(timeout=5)

    assert [1, 2, 3] == [p[0] for p in curve(json.loads(path.read_text()), "train_loss")]


def _cols(steps: list[int]) -> tuple[array[int], array[int], array[float]]:
    return array("q", steps), array("i", [1] * len(steps)), array("d", [float(s) for s in steps])


KILLED_RUN = """
import os, signal, sys
from trainreport import FileSink, Reporter, ReportingConfig
reporter = Reporter(FileSink(sys.argv[1], fsync_interval_seconds=float("inf")),
                    ReportingConfig(min_report_interval_seconds=3600.0), rank=0).start()
for step in range(1, 101):
    reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
    if step % 25 == 0:
        assert reporter.flush(timeout=10)
reporter.report_train_step(step=101, metrics={"loss": 0.0})  # queued, never sent
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_killed_run_keeps_every_point_it_had_sent(tmp_path: Path) -> None:
    """SIGKILL without fsync: the kernel has every flushed record; show --file reads them."""
    path = tmp_path / "killed.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(path)], env=env, timeout=60, check=False
    )

    assert -signal.SIGKILL == child.returncode
    task = read_task(path)
    assert list(range(1, 101)) == [p[0] for p in curve(task, "train_loss")]
    assert not path.with_suffix(".json").exists()


def test_bytes_written_grow_linearly_with_the_run(tmp_path: Path) -> None:
    """Four times the steps write about four times the bytes, the log about 28 bytes a point.

    Bytes written are the log plus the task record written at close; the log
    part, heads and compactions included, stays under 1.5x the 28 bytes a
    point (step, epoch, value, time) takes in its columns.
    """

    def run(steps: int) -> tuple[int, int]:
        sink = FileSink(tmp_path / f"{steps}.log", write_record=True)
        reporter = Reporter(
            sink, ReportingConfig(min_report_interval_seconds=3600.0), rank=0
        ).start()
        for step in range(1, steps + 1):
            reporter.report_train_step(
                step=step, metrics={f"m{i}": step / (i + 1) for i in range(14)}
            )
            if step % 50 == 0:
                assert reporter.flush(timeout=10)
        assert reporter.close(timeout=10)
        return sink.bytes_written, sink.record_path.stat().st_size

    short_bytes, _ = run(500)
    long_bytes, record = run(2000)

    assert long_bytes / short_bytes < 4.5
    assert (long_bytes - record) / (2000 * 14) < 1.5 * TIMED_POINT_BYTES


def test_a_second_process_on_the_same_log_is_rejected_not_interleaved(tmp_path: Path) -> None:
    """Two runs given the same job id: the second gets Rejected until the first closes."""
    first = FileSink(tmp_path / "job.log", write_record=True)
    second = FileSink(tmp_path / "job.log", write_record=True)
    assert isinstance(first.open(), Opened)
    refused = second.open()
    assert isinstance(refused, Rejected)
    assert "another process" in refused.reason
    first.close()
    assert isinstance(second.open(), Opened)
    second.close()


def _compact_first_before_the_second_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, then_close: bool
) -> tuple[FileSink, FileSink]:
    """The race, made deterministic: the second opener has the old file open, and before it
    takes the lock, the first compacts (replacing the file, closing the old descriptor).

    Returns the two sinks on ``job.log``: the first open with steps 1, 2 of ``loss``
    written, the second not opened yet.
    """
    from trainreport._runlog import _writer as _runlog_writer  # noqa: PLC0415

    first = FileSink(tmp_path / "job.log", write_record=True)
    second = FileSink(tmp_path / "job.log", write_record=True)
    assert isinstance(first.open(), Opened)
    assert isinstance(
        first.send(Update("running", {}, (suffix("loss", 0, [1, 2]),), False)), Delivered
    )

    real_lock = _runlog_writer._lock
    fired: list[int] = []

    def lock(fd: int) -> None:
        if not fired:
            fired.append(fd)
            writer = first._writer
            assert writer is not None
            writer.compact()
            if then_close:
                first.close()
        real_lock(fd)

    monkeypatch.setattr(_runlog_writer, "_lock", lock)
    return first, second


def test_a_second_opener_never_locks_the_file_a_compaction_just_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction between the second opener's open and lock: it sees the new file and is refused."""
    first, second = _compact_first_before_the_second_locks(tmp_path, monkeypatch, then_close=False)

    refused = second.open()

    assert isinstance(refused, Rejected)  # the lock of the orphaned file counts for nothing
    assert isinstance(first.send(Update(None, {}, (suffix("loss", 2, [3]),), False)), Delivered)
    first.close()
    assert [1, 2, 3] == [
        p["step"] for p in read_task(tmp_path / "job.log")["status_details"]["metrics"]["loss"]
    ]


def test_a_second_opener_that_lost_the_race_opens_the_log_again_and_writes_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first compacts and closes while the second opens: the second re-opens the live log."""
    _, second = _compact_first_before_the_second_locks(tmp_path, monkeypatch, then_close=True)

    opened = second.open()
    assert isinstance(opened, Opened)
    assert isinstance(second.send(Update(None, {}, (suffix("loss", 2, [3]),), False)), Delivered)
    second.close()

    steps = [1, 2, 3]
    assert steps == [
        p["step"] for p in read_task(tmp_path / "job.log")["status_details"]["metrics"]["loss"]
    ]
    record = json.loads((tmp_path / "job.json").read_text())
    assert steps == [p["step"] for p in record["status_details"]["metrics"]["loss"]]


def test_an_unusable_directory_is_retried_not_raised(tmp_path: Path) -> None:
    """A path under a regular file cannot be created: open() says retry later."""
    (tmp_path / "file").write_text("")
    assert isinstance(FileSink(tmp_path / "file" / "job.log").open(), RetryLater)


def test_fsync_happens_at_the_interval_and_at_close_never_per_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a 10 s interval, sends within it are written but not fsync-ed; close() fsyncs."""
    clock = FakeClock()
    fsyncs: list[int] = []
    real = os.fsync
    sink = FileSink(tmp_path / "job.log", fsync_interval_seconds=10.0, clock=clock)
    sink.open()

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)

    def send(step: int) -> None:
        update = Update(
            "running", {"step": step}, (SeriesUpdate("a", step - 1, *_cols([step])),), False
        )
        assert isinstance(sink.send(update), Delivered)

    send(1)  # the first send fsyncs (the log now exists durably)
    for step in range(2, 6):
        clock.advance(1.0)
        send(step)
    assert 1 == len(fsyncs)
    clock.advance(10.0)
    send(6)
    assert 2 == len(fsyncs)
    sink.close()
    assert len(fsyncs) >= 3


def test_a_full_disk_is_retried_and_then_nothing_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write() failing with ENOSPC is RetryLater; once the disk has room, the log holds all."""
    sink = FileSink(tmp_path / "job.log")
    sink.open()
    real = os.write

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    first = Update("running", {"owner": "a"}, (SeriesUpdate("a", 0, *_cols([1, 2])),), False)
    assert isinstance(sink.send(first), RetryLater)
    monkeypatch.setattr(os, "write", real)
    again = Update("running", {"owner": "a"}, (SeriesUpdate("a", 0, *_cols([1, 2, 3])),), False)
    result = sink.send(again)
    sink.close()

    assert isinstance(result, Delivered)
    assert {"a": 3} == result.series_lengths
    task = read_task(sink.log_path)
    assert [1, 2, 3] == [p[0] for p in curve(task, "a")]
    assert "a" == task["status_details"]["owner"]


def test_a_failed_compaction_does_not_fail_the_send_and_is_not_retried_every_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.replace refused (as on Windows, with the log open): the append stands, logged once."""
    sink = FileSink(tmp_path / "job.log", fsync_interval_seconds=math.inf, write_record=True)
    sink.open()
    replaced: list[str] = []

    def refuse(src: Any, dst: Any) -> None:
        replaced.append(str(dst))
        raise PermissionError(13, "Access is denied")

    monkeypatch.setattr(os, "replace", refuse)
    results = []
    with capture_events() as events:
        for i in range(3000):  # the same tail again and again: compaction comes due
            update = Update("running", {"step": i}, (SeriesUpdate("a", 0, *_cols([1, 2])),), False)
            results.append(sink.send(update))
    monkeypatch.undo()
    sink.close()

    assert all(isinstance(r, Delivered) for r in results)
    assert 1 <= len(replaced) < 5
    failed = [e for e in events if e["event"] == "trainreport.run_log_write_failed"]
    assert 1 == len(failed)
    assert [1, 2] == [p[0] for p in curve(read_task(sink.log_path), "a")]


@pytest.mark.parametrize("interval", [-1.0, math.nan, "10"])
def test_a_bad_fsync_interval_is_a_config_error(tmp_path: Path, interval: Any) -> None:
    """The interval is checked when the sink is built, where the caller can fix it."""
    with pytest.raises(ConfigError, match="fsync_interval_seconds"):
        FileSink(tmp_path / "job.log", fsync_interval_seconds=interval)


def test_a_second_run_on_a_log_opens_it_once_the_first_is_gone_and_writes_its_points(
    tmp_path: Path,
) -> None:
    """Refused while another process holds the log; tried again after the rejected backoff.

    An open carries no data, and reports wait in the queue until one
    succeeds, so "retry when there is new data" (the rule for a refused send)
    never came: the second run waited until ``drain_queue_depth`` reports and
    a kill lost them all (found by the kill harness's two ``FileSink``s on one
    log).
    """
    from helpers import drive  # noqa: PLC0415

    path = tmp_path / "job.log"
    first = FileSink(path)
    assert isinstance(first.open(), Opened)
    clock = FakeClock()
    config = ReportingConfig(rejected_backoff_seconds=5.0, min_report_interval_seconds=1.0)
    reporter = Reporter(FileSink(path), config, clock=clock, rank=0)
    worker = drive(reporter)
    with capture_events() as events:
        worker.cycle()
    assert "trainreport.send_rejected" in [e["event"] for e in events]
    for step in range(1, 11):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
    worker.cycle()
    first.close()  # the first run is gone
    clock.advance(6.0)
    worker.cycle()
    clock.advance(1.0)
    worker.cycle()

    assert list(range(1, 11)) == [p["step"] for p in curve_steps(read_task(path), "train_loss")]
    assert reporter.close(timeout=5.0)


def curve_steps(task: dict[str, Any], name: str) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = task["status_details"].get("metrics", {}).get(name, [])
    return points


def test_a_sink_names_the_command_that_uploads_a_run_log_to_it(tmp_path: Path) -> None:
    """Sink.upload_command: the service's URL as shown and the token file, never the token;
    a sink that sends to no service leaves the URL to fill in."""
    token_file = tmp_path / "token"
    token_file.write_text("s3cret")
    with_file = HttpSink("https://u:pw@jobs.example/?q=1", "j", "t", token_file=token_file)
    with_token = HttpSink("https://jobs.example", "j", "t", token="s3cret")
    plain = HttpSink("https://jobs.example", "j", "t")
    assert (
        f"trainreport sync run.log --url https://jobs.example --token-file {token_file}"
        == with_file.upload_command("run.log")
    )
    assert (
        "trainreport sync run.log --url https://jobs.example --token-file TOKEN_FILE"
        == with_token.upload_command("run.log")
    )
    assert "trainreport sync run.log --url https://jobs.example" == plain.upload_command("run.log")
    assert "trainreport sync run.log --url URL" == MemorySink().upload_command("run.log")
    assert all("s3cret" not in s.upload_command("x") for s in (with_file, with_token))
