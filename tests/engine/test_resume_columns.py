"""A resume seeds from the stored task as columns, never from one giant JSON document.

``HttpSink`` opens its writer with ``?metrics=false`` and reads each stored
series from ``GET .../series`` (docs/protocol.md); ``FileSink`` hands the run
log's replayed columns over as a :class:`~trainreport._wire._payloads.ColumnTask`.
Either way the seed must equal what the whole ``GET`` shape gave: lengths,
last values, the omitted-step continuation and the resume rewind
(docs/engine.md, "Resuming").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import urllib3
from hypothesis import given, settings
from hypothesis import strategies as st

from faults import FaultProxy
from helpers import curve
from trainreport import FileSink, Opened, Reporter, ReportingConfig
from trainreport._wire._payloads import (
    ColumnTask,
    StoredState,
    parse_stored_task,
    read_stored_columns,
)
from trainreport._wire._protocol import new_columns
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport._wire._task_record import TaskRecord
from trainreport.server import ServerHandle
from trainreport.sinks._http import _open as _http_open
from trainreport.sinks._http._sink import HttpSink

pytestmark = pytest.mark.timeout(60)

JOB = "job-1"
CONFIG = ReportingConfig(min_report_interval_seconds=0.0, heartbeat_seconds=30.0)
#: A stored task with a name that needs quoting in a URL, a null value and a
#: series another tool wrote with its steps going backwards.
STORED = {
    "status": "running",
    "status_details": {
        "step": 40,
        "val_datasets": ["a"],
        "metrics": {
            "train_loss": [
                {"step": s, "epoch": 1 + s // 20, "value": None if s == 7 else 1.0 / s}
                for s in range(1, 41)
            ],
            "train_lr, warm/up": [{"step": s, "epoch": 1, "value": 0.1} for s in range(1, 41)],
            "val_a_loss": [{"step": s, "epoch": 1, "value": 2.0 / s} for s in (10, 20, 30, 40)],
            "foreign": [{"step": s, "epoch": 1, "value": float(s)} for s in (30, 20, 10)],
        },
    },
}


def store_task(url: str, task: dict[str, Any] = STORED) -> None:
    """PATCH ``task`` onto the server as a plain job API client would."""
    response = urllib3.request(
        "PATCH",
        f"{url}/v1/jobs/{JOB}/tasks/train",
        body=json.dumps(task).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert 200 == response.status, response.data


def whole_task(url: str) -> dict[str, Any]:
    """The task's plain ``GET`` (every point)."""
    response = urllib3.request("GET", f"{url}/v1/jobs/{JOB}/tasks/train")
    assert 200 == response.status
    task: dict[str, Any] = json.loads(response.data)
    return task


@pytest.mark.parametrize(("per_read", "reads"), [(200_000, 1), (30, 3)])
def test_the_writer_reads_the_stored_series_as_columns_and_equals_the_whole_get(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch, per_read: int, reads: int
) -> None:
    """POST .../writers?metrics=false, then GET .../series in groups of points: the same task.

    Stored lengths 40, 40, 4 and 3: in groups of 30 points, three reads.
    """
    monkeypatch.setattr(_http_open, "_POINTS_PER_READ", per_read)
    store_task(server.url)
    with FaultProxy.for_url(server.url) as proxy:
        opened = HttpSink(proxy.url, JOB).open(timeout_seconds=10)
        paths = [r.path for r in proxy.requests]
    assert isinstance(opened, Opened)
    assert isinstance(opened.stored_task, ColumnTask)
    assert any(p.endswith("/writers?metrics=false") for p in paths)
    assert reads == sum("/series?name=" in p for p in paths)
    assert not any(p.endswith("/tasks/train") for p in paths)  # never the whole task
    whole = whole_task(server.url)
    assert whole == opened.stored_task
    expected = parse_stored_task(whole)
    assert isinstance(expected, StoredState)
    assert comparable(expected) == comparable(opened.stored_task.state)


def comparable(state: StoredState) -> tuple[Any, ...]:
    """A stored state as plain values (NaN as ``None``: NaN never equals itself).

    Of the damage, which series and what was stored: the reasons are worded
    for each shape (``metrics[...]`` or ``series[...]``).
    """
    series = {
        name: (list(steps), list(epochs), [None if math.isnan(v) else v for v in values])
        for name, (steps, epochs, values) in state.series.items()
    }
    return (
        list(series.items()),
        state.val_datasets,
        state.details,
        state.status,
        state.damaged,
        sorted(state.damage_reasons),
        state.problems,
    )


def test_a_server_without_the_series_endpoint_gives_the_whole_task(server: ServerHandle) -> None:
    """A 404 from GET .../series falls back to GET {task}: the same stored state."""
    store_task(server.url)
    with FaultProxy.for_url(server.url) as proxy:
        proxy.fail_next(10, 404, path="/series")
        opened = HttpSink(proxy.url, JOB).open(timeout_seconds=10)
        paths = [r.path for r in proxy.requests]
    assert isinstance(opened, Opened)
    assert any(p.endswith("/tasks/train") for p in paths)
    expected = parse_stored_task(whole_task(server.url))
    got = parse_stored_task(opened.stored_task)
    assert isinstance(expected, StoredState)
    assert isinstance(got, StoredState)
    assert comparable(expected) == comparable(got)


@pytest.mark.parametrize("use_extension", [True, False], ids=["extension", "baseline"])
def test_a_resume_from_the_server_continues_omitted_steps_after_the_stored_last_one(
    server: ServerHandle, use_extension: bool
) -> None:
    """Stored steps 1-40: omitted steps go on at 41; lengths and last values kept."""
    store_task(server.url)
    reporter = Reporter(HttpSink(server.url, JOB, use_extension=use_extension), CONFIG, rank=0)
    reporter.start()
    reporter.report_train_step(metrics={"loss": 0.5})
    assert reporter.close(timeout=10)
    task = whole_task(server.url)
    loss = curve(task, "train_loss")
    assert list(range(1, 42)) == [p[0] for p in loss]
    assert (41, 0.5) == (loss[-1][0], loss[-1][2])
    assert loss[6][2] is None  # the stored null stays
    assert 40 == len(curve(task, "train_lr, warm/up"))
    assert [30, 20, 10] == [p[0] for p in curve(task, "foreign")]  # never overwritten
    assert 0 == reporter.stats().rewinds


@pytest.mark.parametrize("use_extension", [True, False], ids=["extension", "baseline"])
def test_a_resume_from_the_server_at_an_earlier_step_rewinds_every_series(
    server: ServerHandle, use_extension: bool
) -> None:
    """A first step of 25 cuts every stored series after step 25 (the resume rewind)."""
    store_task(server.url)
    reporter = Reporter(HttpSink(server.url, JOB, use_extension=use_extension), CONFIG, rank=0)
    reporter.start()
    reporter.report_train_step(step=25, metrics={"loss": 9.0})
    assert reporter.close(timeout=10)
    task = whole_task(server.url)
    assert list(range(1, 26)) == [p[0] for p in curve(task, "train_loss")]
    assert 9.0 == curve(task, "train_loss")[-1][2]
    assert list(range(1, 26)) == [p[0] for p in curve(task, "train_lr, warm/up")]
    assert [10, 20] == [p[0] for p in curve(task, "val_a_loss")]
    assert 1 == reporter.stats().rewinds


def test_a_file_sink_hands_its_run_log_over_as_columns(tmp_path: Path) -> None:
    """FileSink.open(): a ColumnTask whose state seeds the resume; it reads as the GET shape."""
    path = tmp_path / "run.log"
    first = Reporter(FileSink(path), CONFIG, rank=0).start()
    for step in range(1, 31):
        first.report_train_step(step=step, metrics={"loss": 1.0 / step, "lr": 0.1})
    first.report_validation(step=30, metrics={"loss": 0.2})
    assert first.close(timeout=10)
    opened = FileSink(path).open()
    assert isinstance(opened, Opened)
    assert isinstance(opened.stored_task, ColumnTask)
    assert list(range(1, 31)) == list(opened.stored_task.state.series["train_loss"][0])
    snapshot = first.snapshot()
    assert snapshot is not None
    assert snapshot["status_details"]["metrics"] == opened.stored_task["status_details"]["metrics"]


def test_a_resume_from_a_run_log_continues_and_rewinds(tmp_path: Path) -> None:
    """From a run log: omitted steps continue after the stored last step; a step back rewinds."""
    path = tmp_path / "run.log"
    first = Reporter(FileSink(path), CONFIG, rank=0).start()
    for step in range(1, 21):
        first.report_train_step(step=step, metrics={"loss": float(step)})
    assert first.close(timeout=10)
    second = Reporter(FileSink(path), CONFIG, rank=0).start()
    second.report_train_step(metrics={"loss": 21.0})
    assert second.close(timeout=10)
    third = Reporter(FileSink(path), CONFIG, rank=0).start()
    third.report_train_step(step=11, metrics={"loss": -1.0})
    assert third.close(timeout=10)
    task = third.snapshot()
    assert [(s, float(s)) for s in range(1, 11)] + [(11, -1.0)] == [
        (p[0], p[2]) for p in curve(task, "train_loss")
    ]
    assert 1 == third.stats().rewinds


_points = st.lists(
    st.fixed_dictionaries(
        {
            "step": st.integers(-1, 50),
            "epoch": st.one_of(st.none(), st.integers(-1, 5)),
            "value": st.one_of(st.none(), st.floats(allow_nan=False), st.integers(-3, 3)),
        }
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(points=_points)
def test_a_series_read_as_columns_parses_as_the_same_series_in_the_get_shape(
    points: list[dict[str, Any]],
) -> None:
    """Same rules either way: the same columns, or damaged (kept as stored) both ways."""
    column = {
        "steps": [p["step"] for p in points],
        "epochs": [p["epoch"] for p in points],
        "values": [p["value"] for p in points],
    }
    whole = parse_stored_task({"status_details": {"metrics": {"s": points}}})
    assert isinstance(whole, StoredState)
    read = read_stored_columns(StoredState(series={}), "s", column)
    assert set(whole.series) == set(read.series)
    if "s" in whole.series:
        expected = whole.series["s"]
        got = read.series["s"]
        assert list(expected[0]) == list(got[0])
        assert list(expected[1]) == list(got[1])
        assert [None if math.isnan(v) else v for v in expected[2]] == [
            None if math.isnan(v) else v for v in got[2]
        ]
    else:
        assert whole.damaged == read.damaged


@settings(max_examples=200, deadline=None)
@given(
    series=st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.lists(
            st.tuples(st.integers(0, 3), st.floats(allow_nan=False, allow_infinity=False)),
            max_size=5,
        ),
        max_size=3,
    ),
    foreign=st.booleans(),
)
def test_a_task_records_stored_state_equals_parsing_its_get_shape(
    series: dict[str, list[tuple[int, float]]], foreign: bool
) -> None:
    """TaskRecord.stored_state() == parse_stored_task(to_task()) (finite values)."""
    updates = []
    for name, points in series.items():
        steps, epochs, values = new_columns()
        steps.extend(sorted(step for step, _ in points))
        epochs.extend([1] * len(points))
        values.extend(v for _, v in points)
        updates.append(SeriesUpdate(name, 0, steps, epochs, values))
    raw = {"x": [{"step": 2, "epoch": 1, "value": 1.0}, {"step": 1, "epoch": 1, "value": 2.0}]}
    record = TaskRecord(None)
    record.apply(
        Update("running", {"val_datasets": ["v"]}, tuple(updates), True, raw if foreign else {})
    )
    assert parse_stored_task(record.to_task()) == record.stored_state()
    task: Mapping[str, Any] | None = record.to_task()
    assert task == ColumnTask(record.stored_state(copy=True))
