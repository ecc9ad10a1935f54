"""MemorySink and FileSink: merge semantics, atomic replacement, resume from the file."""

from __future__ import annotations

import json
import os
import pickle
import threading
from array import array
from pathlib import Path

import pytest

from helpers import curve, without_updated_at
from trainreport import Delivered, FileSink, MemorySink, Reporter, ReportingConfig, Resynchronise
from trainreport._sink import SeriesUpdate, Update
from trainreport.sinks import default_sink_from_env

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
    """A key sent replaces the stored value; a key not sent is kept (DESIGN §5)."""
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
    assert ["a"] == list(sink.task["status_details"]["metrics"])


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
    assert ["a"] == list(sink.task["status_details"]["metrics"])


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


def test_file_sink_replaces_atomically_so_readers_never_see_partial_json(tmp_path: Path) -> None:
    """While a reporter rewrites the file, every read parses as complete JSON."""
    path = tmp_path / "job.json"
    reporter = Reporter(
        FileSink(path), ReportingConfig(min_report_interval_seconds=0.0), rank=0
    ).start()
    stop = threading.Event()
    bad: list[str] = []

    def read_loop() -> None:
        while not stop.is_set():
            if path.exists():
                text = path.read_text()
                try:
                    json.loads(text)
                except ValueError:
                    bad.append(text[:80])

    reader = threading.Thread(target=read_loop)
    reader.start()
    for step in range(1, 3001):
        reporter.report_train_step(step=step, metrics={"loss": 1.0, "lr": 0.1})
        if step % 300 == 0:
            reporter.flush(timeout=5)
    assert reporter.close(timeout=10)
    stop.set()
    reader.join()
    assert [] == bad
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


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
    assert Path("trainreport-runs/job-7.json") == named.path
    unsafe = default_sink_from_env({"TRAINREPORT_JOB_ID": "../../etc/passwd"})
    assert isinstance(unsafe, FileSink)
    assert Path("trainreport-runs") == unsafe.path.parent
