"""trainreport.read_task: a run log or an older JSON record, damage logged, nothing misread."""

from __future__ import annotations

import json
import math
import struct
import time
import zlib
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import curve, record_ends
from trainreport import FileSink, Reporter, RunLogError, client, read_task
from trainreport._runlog._format import MAGIC, encode_record
from trainreport._runlog._runfile import load_run_file
from trainreport._wire._payloads import ColumnPoints
from trainreport._wire._protocol import new_columns
from trainreport.cli._summary import describe_task
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(60)


def a_run(path: Path, steps: int = 3, job_id: str | None = None) -> dict[str, object]:
    """A real run through FileSink (``write_record=True``); returns the record written at close."""
    reporter = Reporter(FileSink(path, job_id=job_id, write_record=True), rank=0).start()
    reporter.report_training_start(max_steps=steps)
    for step in range(1, steps + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        reporter.flush(timeout=5)
    reporter.report_completed()
    assert reporter.close(timeout=5)
    record: dict[str, object] = json.loads(path.with_suffix(".json").read_text())
    return record


def test_read_task_gives_the_same_task_from_the_log_and_from_the_record(tmp_path: Path) -> None:
    """The log replayed equals the GET-shaped record written beside it at close."""
    record = a_run(tmp_path / "job.log")
    assert record == read_task(tmp_path / "job.log")
    assert record == read_task(tmp_path / "job.json")
    assert "completed" == record["status"]


def test_a_file_sink_runs_log_keeps_each_points_time_and_read_task_keeps_the_get_shape(
    tmp_path: Path,
) -> None:
    """Each point's wall-clock time is in the log; ``read_task`` gives the server's GET shape.

    The times are for ``trainreport sync`` and the page's time axis (``/series``);
    the task record (``.json``, ``read_task``) keeps the GET point shape without them.
    """
    path = tmp_path / "run.log"
    before = time.time()
    reporter = Reporter(FileSink(path, write_record=True), rank=0).start()
    for step in range(1, 21):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
    assert reporter.close(timeout=10)
    after = time.time()

    times = load_run_file(path).state.task.series["train_loss"][3].tolist()

    assert 20 == len(times)
    assert all(not math.isnan(t) and before - 1.0 <= t <= after + 1.0 for t in times), times
    assert times == sorted(times)
    points = read_task(path)["status_details"]["metrics"]["train_loss"]
    assert [{"step", "epoch", "value"}] * 20 == [set(p) for p in points]
    assert read_task(path) == read_task(tmp_path / "run.json")


def test_an_older_json_record_is_read_as_it_is(tmp_path: Path) -> None:
    """Records of older versions (a JSON task) still read, whatever their name."""
    task = {"status": "running", "status_details": {"step": 1, "metrics": {}}}
    (tmp_path / "old.log").write_text(json.dumps(task))
    assert task == read_task(tmp_path / "old.log")


def test_a_log_damaged_in_the_middle_gives_what_came_before_and_says_so(tmp_path: Path) -> None:
    """A flipped byte in the third record: the first two records are the task; a WARNING says so."""
    a_run(tmp_path / "job.log", steps=5)
    data = bytearray((tmp_path / "job.log").read_bytes())
    data[-30] ^= 0x55  # inside the last record (the close's)
    (tmp_path / "job.log").write_bytes(bytes(data))

    with capture_events() as events:
        task = read_task(tmp_path / "job.log")

    assert [1, 2, 3, 4, 5] == [p[0] for p in curve(task, "train_loss")]
    assert "running" == task["status"]  # the completed record was the damaged one
    damaged = [e for e in events if e["event"] == "trainreport.run_log_damaged"]
    assert ["corrupt"] == [e["damage"] for e in damaged]
    assert "bytes dropped" in damaged[0]["detail"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "is empty"),
        (b"\x89PNG\r\n\x1a\n not a log", "neither a run log"),
        (b"[1, 2, 3]", "JSON but not a task"),
        (MAGIC, "holds no task yet"),
        (MAGIC + encode_record(1, b"garbage")[:10], "nothing could be read"),
        (b'{"status": "running", "status_details": []}', "JSON but not a task"),
    ],
)
def test_a_file_with_nothing_readable_raises_run_log_error(
    tmp_path: Path, content: bytes, says: str
) -> None:
    """Nothing to read is an error the caller can act on, naming the file and the reason."""
    path = tmp_path / "x.log"
    path.write_bytes(content)
    with pytest.raises(RunLogError, match=says):
        read_task(path)


def test_a_record_with_one_unreadable_series_is_read_and_keeps_that_series_as_stored(
    tmp_path: Path,
) -> None:
    """Damage is judged per series: the rest is read, the unreadable series is kept as it is."""
    bad = [{"step": 5}, {"step": 2}]
    good = [{"step": 1, "epoch": None, "value": 0.5}]
    task = {"status": "running", "status_details": {"metrics": {"a": bad, "b": good}}}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(task))
    got = read_task(path)
    assert bad == got["status_details"]["metrics"]["a"]
    assert [(1, None, 0.5)] == curve(got, "b")


def test_a_log_whose_first_record_is_from_a_newer_version_raises(tmp_path: Path) -> None:
    """A newer format from the start: nothing this version can read, said so."""
    record = bytearray(encode_record(1, b"{}"))
    record[0] = 9
    record[16:20] = struct.pack("<I", zlib.crc32(bytes(record[:16])))
    (tmp_path / "x.log").write_bytes(MAGIC + bytes(record))
    with pytest.raises(RunLogError, match=r"newer format version \(version 9"):
        read_task(tmp_path / "x.log")


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    """A path that does not exist raises FileNotFoundError, not RunLogError."""
    with pytest.raises(FileNotFoundError):
        read_task(tmp_path / "nope.log")


# --- salvage: damage is skipped, not a stop ------------------------------------------------


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x08  # one bit
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("where", "position"), [("file header", 3), ("RUN record", 16 + 25)])
def test_one_flipped_bit_in_the_header_or_the_run_record_loses_nothing_else(
    tmp_path: Path, where: str, position: int
) -> None:
    """Records carry their own checksums: everything after a damaged header or RUN record
    is read, and the event and the RunFile say what was lost (which bytes; the job's ids)."""
    from trainreport._runlog._runfile import load_run_file  # noqa: PLC0415

    path = tmp_path / "job.log"
    record = a_run(path, steps=5, job_id="job-7")  # a RUN record first: where sync sends it
    _flip(path, position)

    with capture_events() as events:
        task = read_task(path)
        run = load_run_file(path)

    assert record == task
    assert run.damage is not None
    assert run.salvaged == run.records > 0  # every record is after the damage
    assert ({} if where == "RUN record" else {"job_id": "job-7"}) == run.run
    damaged = [e for e in events if e["event"] == "trainreport.run_log_damaged"]
    assert damaged
    assert damaged[0]["salvaged_records"] == run.salvaged
    assert "unreadable" in damaged[0]["lost"]
    assert (0 if where == "file header" else 16) == run.damage.offset


def test_points_after_a_damaged_record_that_cannot_be_placed_are_counted_not_misplaced(
    tmp_path: Path,
) -> None:
    """A damaged record in the middle: later records apply where they fit; a series whose
    next points would follow the lost ones keeps its prefix, and the loss is said per series."""
    from trainreport._runlog._runfile import load_run_file  # noqa: PLC0415

    path = tmp_path / "job.log"
    a_run(path, steps=5)
    data = path.read_bytes()
    ends = record_ends(data)
    _flip(path, ends[3] + 30)  # the fifth record's body (one of the steps)

    with capture_events() as events:
        run = load_run_file(path)

    steps = [p[0] for p in curve(run.task, "train_loss")]
    assert steps == list(range(1, len(steps) + 1))  # a prefix, never a gap or a shifted point
    assert "completed" == run.task["status"]  # the close's record, after the damage, is read
    assert run.unplaced.get("train_loss", 0) > 0
    damaged = [e for e in events if e["event"] == "trainreport.run_log_damaged"]
    assert "train_loss" in damaged[0]["lost"]


def test_show_summarises_a_run_log_from_its_columns_exactly_as_from_its_task(
    tmp_path: Path,
) -> None:
    """``shown_task()`` keeps the points in columns; its summary equals the GET shape's."""
    path = tmp_path / "job.log"
    reporter = Reporter(FileSink(path), rank=0).start()
    for step in range(1, 301):
        loss = math.nan if step == 7 else (50.0 if step == 150 else 1.0 / step)
        reporter.report_train_step(step=step, metrics={"loss": loss, "lr": 0.1})
    reporter.report_validation(step=300, metrics={"loss": math.inf})
    assert reporter.close(timeout=5)
    run = load_run_file(path)

    shown = run.shown_task()

    assert all(
        isinstance(points, ColumnPoints) for points in shown["status_details"]["metrics"].values()
    )
    assert describe_task(run.task) == describe_task(shown)
    assert run.task == read_task(path)


def test_read_task_of_a_run_log_with_columns_keeps_each_series_as_arrays(tmp_path: Path) -> None:
    """``read_task(path, columns=True)``: ``ColumnPoints`` series equal to the ``GET`` shape's.

    The replayed columns are handed out as they are (no dictionary a point),
    and ``client.to_pandas`` gives the same frame from them.
    """
    path = tmp_path / "job.log"
    reporter = Reporter(FileSink(path), rank=0).start()
    for step in range(1, 101):
        loss = math.nan if step == 7 else 1.0 / step
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": loss})
    reporter.report_completed()
    assert reporter.close(timeout=5)

    task = read_task(path, columns=True)

    series = task["status_details"]["metrics"]
    assert all(isinstance(points, ColumnPoints) for points in series.values())
    assert read_task(path) == task
    pd.testing.assert_frame_equal(client.to_pandas(read_task(path)), client.to_pandas(task))


@given(
    points=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 9), st.floats()), max_size=12),
    index=st.integers(-15, 15),
    start=st.one_of(st.none(), st.integers(-15, 15)),
    stop=st.one_of(st.none(), st.integers(-15, 15)),
)
def test_column_points_read_as_the_get_shapes_list_of_points(
    points: list[tuple[int, int, float]], index: int, start: int | None, stop: int | None
) -> None:
    """Length, items, slices and iteration equal the point dictionaries (non-finite: None)."""
    expected = [
        {"step": s, "epoch": e, "value": v if math.isfinite(v) else None} for s, e, v in points
    ]
    steps, epochs, values = new_columns()
    for s, e, v in points:
        steps.append(s)
        epochs.append(e)
        values.append(v)
    view = ColumnPoints(steps, epochs, values)

    assert expected == list(view)
    assert len(expected) == len(view)
    assert expected[start:stop] == view[start:stop]
    assert [p["value"] for p in expected] == view.values()
    if -len(expected) <= index < len(expected):
        assert expected[index] == view[index]
    else:
        with pytest.raises(IndexError):
            view[index]
