"""Reporter + HttpSink against the real reference server, with real faults in between.

Every scenario ends the same way: after ``close()`` (or ``flush()``) the task
the server holds equals ``reporter.snapshot()`` (``updated_at`` aside): no
point lost, none duplicated (docs/design.md#guarantees). Both wire modes run where the fault
means something in both: the ``series-suffix-v1`` extension and the baseline
full-state PATCH (``use_extension=False``).

Waits poll real state with a bounded deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from faults import FaultProxy, black_hole_server, closed_port
from helpers import without_updated_at
from trainreport import AttemptIdentity, FileSink, Reporter, ReportingConfig, read_task
from trainreport._wire._payloads import ColumnPoints
from trainreport.server import ServerHandle
from trainreport.sinks._http import _open as _http_open
from trainreport.sinks._http._sink import HttpSink
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)

JOB = "job-1"
TOKEN = "s3cret-token"  # the conftest token_server's token
CONFIG = ReportingConfig(
    min_report_interval_seconds=0.02,
    backoff_initial_seconds=0.02,
    backoff_max_seconds=0.2,
    rejected_backoff_seconds=0.2,
    heartbeat_seconds=30.0,
)
MODES = pytest.mark.parametrize("use_extension", [True, False], ids=["extension", "baseline"])


# --- helpers ----------------------------------------------------------------------------


def reporter_for(url: str, use_extension: bool = True, job: str = JOB, **sink: Any) -> Reporter:
    """A started reporter on an HttpSink with short timeouts."""
    sink.setdefault("connect_timeout_seconds", 1.0)
    sink.setdefault("read_timeout_seconds", 2.0)
    return Reporter(HttpSink(url, job, use_extension=use_extension, **sink), CONFIG, rank=0).start()


def train(
    reporter: Reporter,
    steps: range,
    *,
    loss: Callable[[int], float] = lambda step: 2.0 / step,
    nan_at: int | None = None,
    flush_every: int | None = None,
) -> None:
    """Report training steps with train/val metrics, checkpoints every 25 steps."""
    for step in steps:
        epoch = 1 + (step - 1) // 50
        value = math.nan if step == nan_at else loss(step)
        reporter.report_train_step(step=step, epoch=epoch, metrics={"loss": value, "lr": 1e-3})
        if step % 10 == 0:
            reporter.report_validation(step=step, epoch=epoch, metrics={"loss": loss(step) + 0.1})
        if step % 25 == 0:
            reporter.report_checkpoint_saved(path=f"ckpt/step-{step}", step=step)
        if flush_every and step % flush_every == 0:
            assert reporter.flush(timeout=10)


def stored(url: str, job: str = JOB, token: str | None = None) -> Any:
    """The task the server holds (GET), or None for a 404."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = urllib3.request("GET", f"{url}/v1/jobs/{job}/tasks/train", headers=headers)
    return None if response.status == 404 else json.loads(response.data)


def assert_server_holds(url: str, reporter: Reporter, job: str = JOB) -> None:
    """The server's task equals the reporter's record, ``updated_at`` aside.

    Whole, however long the run: the points that left the reporter's memory
    are read back by ``snapshot()`` (``docs/engine.md``, "Memory").
    """
    snapshot, task = without_updated_at(reporter.snapshot()), without_updated_at(stored(url, job))
    assert snapshot is not None
    assert task is not None
    assert snapshot == task


def steps_of(task: Any, name: str) -> list[int]:
    return [p["step"] for p in task["status_details"]["metrics"][name]]


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.01)
    return True


@pytest.fixture
def proxy(server: ServerHandle) -> Iterator[FaultProxy]:
    """A fault proxy in front of the ``server`` fixture."""
    with FaultProxy.for_url(server.url) as handle:
        yield handle


# --- a whole run -----------------------------------------------------------------------


@MODES
def test_a_run_reaches_the_server_exactly_as_recorded(
    server: ServerHandle, use_extension: bool
) -> None:
    """Steps, validation, a NaN, checkpoints and completion: server == snapshot after close."""
    reporter = reporter_for(server.url, use_extension)
    reporter.report_training_start(max_steps=100, num_epochs=2)
    reporter.report_hyperparameters(params={"optimizer": {"name": "adam", "lr": 1e-3}})
    train(reporter, range(1, 101), nan_at=37, flush_every=20)
    reporter.report_completed()
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    task = stored(server.url)
    assert "completed" == task["status"]
    assert list(range(1, 101)) == steps_of(task, "train_loss")
    assert task["status_details"]["metrics"]["train_loss"][36]["value"] is None
    assert [10 * i for i in range(1, 11)] == steps_of(task, "val_loss")
    assert "ckpt/step-100" == task["status_details"]["checkpoint_path"]
    assert 0 == reporter.stats().requests_failed


@MODES
def test_a_second_process_continues_the_curves(server: ServerHandle, use_extension: bool) -> None:
    """A resumed run seeds from the stored task and appends after it."""
    first = reporter_for(server.url, use_extension)
    first.report_training_start(max_steps=60, num_epochs=2)
    train(first, range(1, 31), flush_every=15)
    assert first.close(timeout=10)
    second = reporter_for(server.url, use_extension)
    second.report_training_start(max_steps=60, num_epochs=2)
    train(second, range(31, 61), flush_every=15)
    second.report_completed()
    assert second.close(timeout=10)
    assert_server_holds(server.url, second)
    assert list(range(1, 61)) == steps_of(stored(server.url), "train_loss")


@MODES
def test_a_resumed_run_longer_than_the_release_batch_keeps_every_stored_point(
    server: ServerHandle, use_extension: bool
) -> None:
    """A stored task past the release batch: an update without points sends none of them away.

    The second process seeds 300 points a series (more than
    ``RELEASE_MIN_POINTS``), acknowledges a status-only update, then
    reports: in full-state mode the next ``metrics`` still holds every
    stored point (a full-state destination keeps every point from its open).
    """
    first = reporter_for(server.url, use_extension)
    train(first, range(1, 301), flush_every=100)
    assert first.close(timeout=10)
    second = reporter_for(server.url, use_extension)
    second.report_training_start(max_steps=400)
    assert second.flush(timeout=10)
    train(second, range(301, 311))
    second.report_completed()
    assert second.close(timeout=10)

    assert list(range(1, 311)) == steps_of(stored(server.url), "train_loss")
    assert list(range(10, 311, 10)) == steps_of(stored(server.url), "val_loss")


@MODES
def test_a_resume_from_an_earlier_checkpoint_rewinds(
    server: ServerHandle, use_extension: bool
) -> None:
    """Steps going back discard the later points in every series, then the new ones follow."""
    first = reporter_for(server.url, use_extension)
    train(first, range(1, 41), flush_every=20)
    assert first.close(timeout=10)
    second = reporter_for(server.url, use_extension)
    train(second, range(21, 51), loss=lambda step: 5.0 / step, flush_every=10)
    assert second.close(timeout=10)
    assert_server_holds(server.url, second)
    task = stored(server.url)
    assert list(range(1, 51)) == steps_of(task, "train_loss")
    values = [p["value"] for p in task["status_details"]["metrics"]["train_loss"]]
    assert [2.0 / s for s in range(1, 21)] + [5.0 / s for s in range(21, 51)] == values
    assert [10, 20, 30, 40, 50] == steps_of(task, "val_loss")
    assert 5.0 / 30 + 0.1 == task["status_details"]["metrics"]["val_loss"][2]["value"]


def test_a_rewind_after_old_points_left_memory_replaces_the_right_tail(
    server: ServerHandle, tmp_path: Path
) -> None:
    """Points both destinations hold leave memory; a rewind past them still cuts right.

    An HttpSink (series suffixes) and a FileSink run log: after 3,000 flushed
    steps the store keeps only a tail (``docs/engine.md``, "Memory"), then
    the step goes back to 500: the server's ``GET`` and the run log's replay
    both hold steps 1 to 700 with the new values from 500 on.
    """
    log = tmp_path / "run.log"
    sinks = [HttpSink(server.url, JOB, read_timeout_seconds=5.0), FileSink(log)]
    reporter = Reporter(sinks=sinks, config=CONFIG, rank=0).start()
    for step in range(1, 3001):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step, "lr": 0.1})
        if step % 500 == 0:
            assert reporter.flush(timeout=10)
    recorder = reporter._recorder
    assert recorder is not None
    retained = recorder.retained_points()
    for step in range(500, 701):
        reporter.report_train_step(step=step, epoch=2, metrics={"loss": -1.0 * step, "lr": 0.2})
    reporter.report_completed()
    assert reporter.close(timeout=10)

    assert retained < 2 * 1000, retained  # of 6,000 points recorded
    expected = [1.0 / s for s in range(1, 500)] + [-1.0 * s for s in range(500, 701)]
    server_task, log_task = stored(server.url), read_task(log)
    for task in (server_task, log_task):
        assert list(range(1, 701)) == steps_of(task, "train_loss")
        assert expected == [p["value"] for p in task["status_details"]["metrics"]["train_loss"]]
        assert [1] * 499 + [2] * 201 == [
            p["epoch"] for p in task["status_details"]["metrics"]["train_loss"]
        ]
    assert server_task["status_details"]["metrics"] == log_task["status_details"]["metrics"]
    assert 1 == reporter.stats().rewinds
    # The points that left memory are read back: the snapshot is the whole record.
    assert without_updated_at(server_task) == without_updated_at(reporter.snapshot())


def _long_run(reporter: Reporter, steps: int = 2000) -> int:
    """``steps`` flushed training steps; how many points the store still holds after them."""
    for step in range(1, steps + 1):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step, "lr": 0.1})
        if step % 500 == 0:
            assert reporter.flush(timeout=10)
    recorder = reporter._recorder
    assert recorder is not None
    return recorder.retained_points()


@pytest.mark.parametrize("destination", ["http", "file"])
def test_a_long_runs_snapshot_reads_back_the_points_that_left_memory(
    server: ServerHandle, tmp_path: Path, destination: str
) -> None:
    """Only an HttpSink, or only a FileSink: ``snapshot()`` equals what the destination holds.

    2,000 flushed steps leave a tail in memory; the earlier points are read
    back from the destination (the server's ``GET``, the run log's replay).
    """
    log = tmp_path / "run.log"
    sink = HttpSink(server.url, JOB) if destination == "http" else FileSink(log)
    reporter = Reporter(sink, CONFIG, rank=0).start()
    retained = _long_run(reporter)
    held = stored(server.url) if destination == "http" else read_task(log)
    with capture_events() as events:
        snapshot = reporter.snapshot()
    assert retained < 1000, retained  # of 4,000 points: they did leave memory
    assert without_updated_at(held) == without_updated_at(snapshot)
    assert 2000 == len(snapshot["status_details"]["metrics"]["train_loss"])
    assert [] == [e for e in events if e["event"] == "trainreport.snapshot_partial"]
    assert reporter.close(timeout=10)


def test_read_back_reads_the_curves_as_columns_like_read_task(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HttpSink.read_back`` asks ?metrics=false, the summary, then /series in groups.

    Never the whole task's ``GET`` from the reference server (a long run's
    snapshot would hold one JSON document of it); what it returns equals that
    ``GET``, point for point.
    """
    monkeypatch.setattr(_http_open, "_POINTS_PER_READ", 30)
    reporter = reporter_for(server.url)
    train(reporter, range(1, 41), flush_every=20)
    reporter.report_completed()
    assert reporter.close(timeout=10)
    with FaultProxy.for_url(server.url) as proxy:
        held = HttpSink(proxy.url, JOB).read_back(5.0)
        paths = [r.path for r in proxy.requests]

    assert held is not None
    assert stored(server.url) == held
    assert [
        f"/v1/jobs/{JOB}/tasks/train?metrics=false",
        f"/v1/jobs/{JOB}/tasks/train/series/summary",
    ] == paths[:2]
    assert 3 == len(paths[2:])  # train_loss, train_lr (40 points each), val_loss: 30 a read
    assert all("/series?name=" in p for p in paths[2:]), paths
    assert f"/v1/jobs/{JOB}/tasks/train" not in paths


def test_read_back_from_a_service_without_series_is_the_plain_get(server: ServerHandle) -> None:
    """A 404 from .../series/summary (a plain job API): the task's plain ``GET``, equal."""
    reporter = reporter_for(server.url)
    train(reporter, range(1, 21), flush_every=20)
    reporter.report_completed()
    assert reporter.close(timeout=10)
    with FaultProxy.for_url(server.url) as proxy:
        proxy.fail_next(1, 404, path="/series/summary")
        held = HttpSink(proxy.url, JOB).read_back(5.0)
        paths = [r.path for r in proxy.requests]

    assert stored(server.url) == held
    assert f"/v1/jobs/{JOB}/tasks/train" == paths[-1]


@pytest.mark.parametrize("destination", ["http", "file"])
def test_a_read_back_keeps_each_series_as_columns(
    server: ServerHandle, tmp_path: Path, destination: str
) -> None:
    """``read_back`` of either built-in sink: ``ColumnPoints`` a series, equal to what is held.

    A long run's ``snapshot()`` then builds point dictionaries only for the
    prefix that left memory, never for the whole stored record.
    """
    log = tmp_path / "run.log"
    sink = HttpSink(server.url, JOB) if destination == "http" else FileSink(log)
    reporter = Reporter(sink, CONFIG, rank=0).start()
    _long_run(reporter, steps=600)
    reporter.report_completed()
    assert reporter.close(timeout=10)

    held = sink.read_back(5.0)

    assert held is not None
    series = held["status_details"]["metrics"]
    assert {"train_loss", "train_lr"} == set(series)
    assert all(isinstance(points, ColumnPoints) for points in series.values())
    assert (stored(server.url) if destination == "http" else read_task(log)) == held


def test_a_snapshot_no_destination_can_read_back_says_it_is_partial(
    start_server: Callable[..., ServerHandle],
) -> None:
    """The service gone after a long run: each series from its first point in memory, one event."""
    handle = start_server()
    reporter = Reporter(HttpSink(handle.url, JOB, read_timeout_seconds=2.0), CONFIG, rank=0)
    retained = _long_run(reporter.start())
    handle.stop()
    with capture_events() as events:
        first, second = reporter.snapshot(timeout_seconds=2.0), reporter.snapshot(2.0)
    points = first["status_details"]["metrics"]["train_loss"]
    assert 0 < len(points) < 2000
    assert 2000 == points[-1]["step"]
    assert retained >= len(points)
    assert first == second
    partial = [e for e in events if e["event"] == "trainreport.snapshot_partial"]
    assert 1 == len(partial), partial
    assert 2 == partial[0]["series"]
    reporter.close(timeout=1)


@MODES
def test_a_series_a_rewind_empties_disappears_from_the_server_too(
    server: ServerHandle, use_extension: bool
) -> None:
    """A resume from the first step empties ``val_loss``: GET and snapshot() both drop it."""
    first = reporter_for(server.url, use_extension)
    train(first, range(1, 21), flush_every=20)
    assert first.close(timeout=10)
    second = reporter_for(server.url, use_extension)
    second.report_train_step(step=1, epoch=1, metrics={"loss": 7.0, "lr": 1e-3})
    assert second.close(timeout=10)
    assert_server_holds(server.url, second)
    assert {"train_loss", "train_lr"} == set(stored(server.url)["status_details"]["metrics"])


@MODES
def test_a_series_another_tool_wrote_backwards_is_never_overwritten(
    server: ServerHandle, use_extension: bool
) -> None:
    """A stored series with steps going backwards stays as stored; train_loss resumes."""
    train_points = [{"step": s, "epoch": 1, "value": 1.0 / s} for s in range(1, 1001)]
    foreign = [{"step": s, "epoch": None, "value": float(s)} for s in (30, 20, 10)]
    body = {"status_details": {"metrics": {"train_loss": train_points, "foreign": foreign}}}
    response = urllib3.request(
        "PATCH",
        f"{server.url}/v1/jobs/{JOB}/tasks/train",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert 200 == response.status
    reporter = reporter_for(server.url, use_extension)
    train(reporter, range(1001, 1101), flush_every=50)
    assert reporter.close(timeout=10)
    task = stored(server.url)
    assert list(range(1, 1101)) == steps_of(task, "train_loss")
    assert foreign == task["status_details"]["metrics"]["foreign"]
    assert_server_holds(server.url, reporter)


# --- faults ----------------------------------------------------------------------------


@MODES
def test_bursts_of_server_errors_lose_and_duplicate_nothing(
    server: ServerHandle, proxy: FaultProxy, use_extension: bool
) -> None:
    """500s and 503s (at open and on sends) are retried with backoff until delivered."""
    proxy.fail_next(4, 500)
    reporter = reporter_for(proxy.url, use_extension)
    train(reporter, range(1, 21), flush_every=20)
    proxy.fail_next(3, 503)
    train(reporter, range(21, 41), flush_every=20)
    reporter.report_completed()
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    assert 7 == sum(r.fault == "fail" for r in proxy.requests)
    assert reporter.stats().requests_failed >= 3


def test_429_retry_after_is_honoured(server: ServerHandle, proxy: FaultProxy) -> None:
    """A 429 with ``Retry-After: 1`` delays the next attempt by about a second, not the backoff."""
    reporter = reporter_for(proxy.url)
    train(reporter, range(1, 11), flush_every=10)
    proxy.fail_next(1, 429, {"Retry-After": "1"}, path="/updates")
    train(reporter, range(11, 21))
    assert reporter.flush(timeout=10)
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    updates = [r for r in proxy.requests if r.path.endswith("/updates")]
    refused = next(i for i, r in enumerate(updates) if r.fault == "fail")
    gap = updates[refused + 1].at - updates[refused].at
    assert 0.9 <= gap < 3.0


@MODES
def test_a_hanging_server_times_out_and_recovers(
    server: ServerHandle, proxy: FaultProxy, use_extension: bool
) -> None:
    """A hung request times out (read timeout); after the hang the tail is delivered."""
    reporter = reporter_for(proxy.url, use_extension, read_timeout_seconds=0.3)
    train(reporter, range(1, 11), flush_every=10)
    proxy.hang()
    train(reporter, range(11, 21))
    assert wait_until(lambda: reporter.stats().consecutive_failures >= 1)
    proxy.pass_through()
    train(reporter, range(21, 31))
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    assert any(r.fault == "hang" for r in proxy.requests)
    assert "timed out" in str(reporter.stats().last_error) or reporter.stats().last_error is None


@MODES
def test_connection_resets_lose_and_duplicate_nothing(
    server: ServerHandle, proxy: FaultProxy, use_extension: bool
) -> None:
    """Connections reset mid-request are transient failures."""
    reporter = reporter_for(proxy.url, use_extension)
    train(reporter, range(1, 11), flush_every=10)
    proxy.reset_next(3)
    train(reporter, range(11, 31), flush_every=10)
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    assert 3 == sum(r.fault == "reset" for r in proxy.requests)


@MODES
def test_an_outage_ending_within_the_close_budget_delivers_everything(
    server: ServerHandle, proxy: FaultProxy, use_extension: bool
) -> None:
    """The port refuses connections for a second; close keeps retrying and delivers the tail."""
    reporter = reporter_for(proxy.url, use_extension)
    train(reporter, range(1, 11), flush_every=10)
    proxy.refuse(seconds=1.0)
    train(reporter, range(11, 41))
    reporter.report_completed()
    assert wait_until(lambda: reporter.stats().consecutive_failures >= 2)
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)


@MODES
def test_lost_responses_are_repaired_without_duplicates(
    server: ServerHandle, proxy: FaultProxy, use_extension: bool
) -> None:
    """The server applied the write, the client never heard: the resend is idempotent."""
    reporter = reporter_for(proxy.url, use_extension)
    train(reporter, range(1, 11), flush_every=10)
    proxy.drop_responses_next(3)
    train(reporter, range(11, 21), flush_every=10)
    train(reporter, range(21, 31), flush_every=10)
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    assert 3 == sum(r.fault == "drop" for r in proxy.requests)


@pytest.mark.parametrize("kind", ["black hole", "closed port"])
def test_close_returns_by_its_deadline_when_the_server_is_unreachable(kind: str) -> None:
    """A server that never answers or refuses: ``close(timeout=2)`` returns False in time."""
    with black_hole_server() as hole, closed_port() as port:
        url = hole if kind == "black hole" else f"http://127.0.0.1:{port}"
        reporter = reporter_for(url, connect_timeout_seconds=5.0, read_timeout_seconds=10.0)
        train(reporter, range(1, 21))
        reporter.report_completed()
        started = time.monotonic()
        assert not reporter.close(timeout=2)
        assert time.monotonic() - started < 4.0


def test_a_fenced_zombie_writer_cannot_overwrite_the_new_one(server: ServerHandle) -> None:
    """Writer B opens after A: A's later sends are refused; the curves are B's."""
    zombie = reporter_for(server.url)
    train(zombie, range(1, 11), flush_every=10)
    with capture_events() as events:
        current = reporter_for(server.url)
        train(current, range(11, 21), loss=lambda step: 7.0, flush_every=10)
        train(zombie, range(11, 31), loss=lambda step: -1.0)
        assert not zombie.flush(timeout=1)
        assert current.close(timeout=10)
    assert not zombie.close(timeout=1)
    assert_server_holds(server.url, current)
    values = [p["value"] for p in stored(server.url)["status_details"]["metrics"]["train_loss"]]
    assert -1.0 not in values
    superseded = [e for e in events if e["event"] == "trainreport.destination_superseded"]
    assert 409 == superseded[0]["status_code"]
    assert "stale_writer" in superseded[0]["reason"]


def test_a_plain_server_without_capabilities_gets_complete_curves(
    server: ServerHandle, proxy: FaultProxy
) -> None:
    """``GET /v1/capabilities`` answering 404: baseline GET + PATCH, curves complete."""
    proxy.fail_next(10**6, 404, path="/v1/capabilities")
    reporter = reporter_for(proxy.url)
    train(reporter, range(1, 41), nan_at=5, flush_every=20)
    reporter.report_completed()
    assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    methods = {r.method for r in proxy.requests}
    assert {"GET", "PATCH"} == methods
    assert not any(r.path.endswith(("/writers", "/updates")) for r in proxy.requests)


# --- size limits -----------------------------------------------------------------------


def _queue_long_run(reporter: Reporter, steps: int, spike_at: int | None = None) -> None:
    """Report a long run before ``start()``, so the first update carries all of it.

    ``train_loss`` is ``1 / step``, but 50.0 at ``spike_at``.
    """
    reporter.report_training_start(max_steps=steps, num_epochs=1)
    for step in range(1, steps + 1):
        loss = 50.0 if step == spike_at else 1.0 / step
        reporter.report_train_step(
            step=step,
            epoch=1,
            metrics={"loss": loss, "lr": 1e-3 + step * 1e-9, "grad_norm": step * 0.37},
        )
    reporter.report_completed()


@pytest.mark.slow
def test_suffix_mode_splits_a_large_update_under_the_servers_limit(
    start_server: Callable[..., ServerHandle],
) -> None:
    """With a 64 KiB body limit, a 4000-step backlog is split into requests that all fit."""
    server = start_server(max_body_bytes=64 * 1024)
    with FaultProxy.for_url(server.url) as proxy:
        reporter = Reporter(HttpSink(proxy.url, JOB), CONFIG, rank=0)
        _queue_long_run(reporter, 4000)
        reporter.start()
        assert reporter.close(timeout=20)
        updates = [r for r in proxy.requests if r.path.endswith("/updates")]
        assert_server_holds(server.url, reporter)  # its snapshot reads back through the proxy
    assert list(range(1, 4001)) == steps_of(stored(server.url), "train_grad_norm")
    assert len(updates) > 3
    assert all(len(r.body) <= 64 * 1024 for r in updates)


def _thinned_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "trainreport.metrics_thinned"]


def _assert_covers_the_run(task: Any, name: str, steps: int, spike: tuple[int, float]) -> None:
    """The stored curve starts at step 1, ends at ``steps``, is thinned, and keeps ``spike``."""
    points = task["status_details"]["metrics"][name]
    kept = [p["step"] for p in points]
    assert (1, steps) == (kept[0], kept[-1])
    assert sorted(set(kept)) == kept
    assert len(kept) < steps
    assert spike in [(p["step"], p["value"]) for p in points]


@pytest.mark.slow
def test_baseline_mode_thins_the_curves_over_a_413_and_they_cover_the_whole_run(
    start_server: Callable[..., ServerHandle],
) -> None:
    """A plain PATCH over the body limit: the curves are thinned, never frozen (issue 23).

    First and last step, the loss spike, the status, the step and every current
    value exact; one ``trainreport.metrics_thinned`` event; ``stats()`` says so;
    close() is True (the destination holds its latest thinned state).
    """
    server = start_server(max_body_bytes=64 * 1024)
    reporter = Reporter(HttpSink(server.url, JOB, use_extension=False), CONFIG, rank=0)
    _queue_long_run(reporter, 4000, spike_at=2345)
    with capture_events() as events:
        reporter.start()
        assert reporter.close(timeout=20)
    task = stored(server.url)
    assert ("completed", 4000) == (task["status"], task["status_details"]["step"])
    assert 1.0 / 4000 == task["status_details"]["train_loss"]
    _assert_covers_the_run(task, "train_loss", 4000, (2345, 50.0))
    assert 1.0 / 4000 == task["status_details"]["metrics"]["train_loss"][-1]["value"]
    [thinned] = _thinned_events(events)
    budget = reporter.stats().destinations[0].thinned_to
    assert budget is not None
    assert len(task["status_details"]["metrics"]["train_loss"]) <= budget
    assert (thinned["destination"], budget) == (
        reporter.stats().destinations[0].destination,
        thinned["points_per_series"],
    )
    assert "series-suffix" in thinned["hint"]
    assert "metrics_too_large" not in reporter.stats().drops
    [closed] = [e for e in events if e["event"] == "trainreport.closed"]
    assert f"(curves thinned to {budget} points a series)" in closed["destinations"][0]


@pytest.mark.slow
def test_a_growing_baseline_run_keeps_sending_thinned_curves_after_the_first_413(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Live sends past the limit: every later send still covers the run to its last step."""
    server = start_server(max_body_bytes=32 * 1024)
    reporter = reporter_for(server.url, use_extension=False)
    with capture_events() as events:
        for step in range(1, 3001):
            loss = 50.0 if step == 777 else 1.0 / step
            reporter.report_train_step(step=step, epoch=1, metrics={"loss": loss, "lr": 0.1})
            if step % 250 == 0:
                assert reporter.flush(timeout=10)
                task = stored(server.url)
                assert step == steps_of(task, "train_loss")[-1]
        reporter.report_completed()
        assert reporter.close(timeout=10)
    task = stored(server.url)
    _assert_covers_the_run(task, "train_loss", 3000, (777, 50.0))
    assert 1 == len(_thinned_events(events))


def _thinned_long_run(reporter: Reporter, steps: int, spike_at: int) -> int:
    """``steps`` flushed steps of ``loss`` (50.0 at ``spike_at``) and ``lr``; points kept after."""
    for step in range(1, steps + 1):
        loss = 50.0 if step == spike_at else 1.0 / step
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": loss, "lr": step * 1e-6})
        if step % 500 == 0:
            assert reporter.flush(timeout=10)
    recorder = reporter._recorder
    assert recorder is not None
    return recorder.retained_points()


def test_a_thinned_full_state_destination_lets_points_leave_memory(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Issue 23 item 3: once thinned, a plain job API no longer keeps every point in memory.

    6,000 flushed steps of two series over a 32 KiB limit: the store keeps a
    tail and each series' bounded summary; the stored curve still covers the
    run (first, last, the spike) within the budget; ``stats()`` counts the
    whole run; ``snapshot()`` (nothing can read the points back: the
    destination holds the thinned curve only) gives the thinned points, then
    the tail, and says so once.
    """
    server = start_server(max_body_bytes=32 * 1024)
    reporter = reporter_for(server.url, use_extension=False)
    retained = _thinned_long_run(reporter, 6_000, spike_at=4_321)
    recorder = reporter._recorder
    assert recorder is not None
    store = recorder._record.store
    with capture_events() as events:
        snapshot = reporter.snapshot()
    reporter.report_completed()
    assert reporter.close(timeout=10)

    budget = reporter.stats().destinations[0].thinned_to
    assert budget is not None
    assert retained < 2 * 1_000, retained  # of 12,000 points recorded
    assert 0 < store.points_released
    assert store.summarised_points() <= 2 * 2 * budget  # two series, two entries a bucket
    task = stored(server.url)
    _assert_covers_the_run(task, "train_loss", 6_000, (4_321, 50.0))
    assert len(task["status_details"]["metrics"]["train_loss"]) <= budget
    assert 12_000 == reporter.stats().points_recorded
    assert 12_000 == reporter.stats().destinations[0].points_delivered
    _assert_covers_the_run(snapshot, "train_loss", 6_000, (4_321, 50.0))
    [partial] = [e for e in events if e["event"] == "trainreport.snapshot_partial"]
    assert (2, 2) == (partial["series"], partial["thinned_series"])


def test_a_thinned_destination_beside_a_run_log_snapshots_the_whole_record(
    start_server: Callable[..., ServerHandle], tmp_path: Path
) -> None:
    """The run log holds every point: points leave memory, and snapshot() reads them back whole."""
    server = start_server(max_body_bytes=32 * 1024)
    log = tmp_path / "run.log"
    sinks = [HttpSink(server.url, JOB, use_extension=False), FileSink(log)]
    reporter = Reporter(sinks=sinks, config=CONFIG, rank=0).start()
    retained = _thinned_long_run(reporter, 4_000, spike_at=1_234)
    snapshot = reporter.snapshot()
    reporter.report_completed()
    assert reporter.close(timeout=10)

    assert retained < 2 * 1_000, retained
    assert reporter.stats().destinations[0].thinned_to is not None
    assert list(range(1, 4_001)) == steps_of(snapshot, "train_loss")
    assert list(range(1, 4_001)) == steps_of(read_task(log), "train_loss")
    _assert_covers_the_run(stored(server.url), "train_loss", 4_000, (1_234, 50.0))


def test_below_the_body_limit_the_curves_are_stored_exactly(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Under the limit nothing is thinned: the server holds every point, no event."""
    server = start_server(max_body_bytes=64 * 1024)
    reporter = Reporter(HttpSink(server.url, JOB, use_extension=False), CONFIG, rank=0)
    _queue_long_run(reporter, 300, spike_at=123)
    with capture_events() as events:
        reporter.start()
        assert reporter.close(timeout=10)
    assert_server_holds(server.url, reporter)
    assert list(range(1, 301)) == steps_of(stored(server.url), "train_loss")
    assert [] == _thinned_events(events)
    assert reporter.stats().destinations[0].thinned_to is None


def test_a_configured_max_body_bytes_thins_without_a_413(
    server: ServerHandle, proxy: FaultProxy
) -> None:
    """``HttpSink(max_body_bytes=...)``: no body over it is sent, none is refused."""
    limit = 24 * 1024
    sink = HttpSink(proxy.url, JOB, use_extension=False, max_body_bytes=limit)
    reporter = Reporter(sink, CONFIG, rank=0)
    _queue_long_run(reporter, 2000, spike_at=1500)
    with capture_events() as events:
        reporter.start()
        assert reporter.close(timeout=10)
    patches = [r for r in proxy.requests if r.method == "PATCH"]
    assert patches
    assert all(len(r.body) <= limit for r in patches)
    _assert_covers_the_run(stored(server.url), "train_loss", 2000, (1500, 50.0))
    assert limit == _thinned_events(events)[0]["body_limit_bytes"]


def test_metrics_that_do_not_fit_even_thinned_are_left_out_and_logged_once(
    start_server: Callable[..., ServerHandle],
) -> None:
    """900 series cannot fit 16 KiB at 4 points each: the reporter goes on without metrics."""
    server = start_server(max_body_bytes=16 * 1024)
    reporter = Reporter(HttpSink(server.url, JOB, use_extension=False), CONFIG, rank=0)
    _queue_too_many_series(reporter)
    with capture_events() as events:
        reporter.start()
        assert wait_until(lambda: (stored(server.url) or {}).get("status") == "completed")
        reporter.close(timeout=2)
    task = stored(server.url)
    assert "metrics" not in task["status_details"]
    assert 6 == task["status_details"]["step"]
    too_large = [e for e in events if e["event"] == "trainreport.metrics_too_large"]
    assert 1 == len(too_large)
    assert 1 == reporter.stats().drops["metrics_too_large"]


@MODES
def test_a_field_too_large_for_any_request_is_dropped_and_never_holds_back_the_curves(
    start_server: Callable[..., ServerHandle], use_extension: bool
) -> None:
    """Hyperparameters over the 32 KiB body limit: dropped once, logged, curves all delivered."""
    server = start_server(max_body_bytes=32 * 1024)
    reporter = reporter_for(server.url, use_extension)
    rng = random.Random(0)  # random digits: gzip cannot shrink them under the limit
    huge = {f"layer_{i}": [rng.random() for _ in range(99)] for i in range(100)}
    with capture_events() as events:
        reporter.report_hyperparameters(params={"lr": 0.1})
        assert reporter.flush(timeout=10)
        reporter.report_hyperparameters(params=huge)
        train(reporter, range(1, 201))
        reporter.report_completed()
        assert reporter.close(timeout=10)
    task = stored(server.url)
    assert list(range(1, 201)) == steps_of(task, "train_loss")
    assert "completed" == task["status"]
    assert {"lr": 0.1} == task["status_details"]["hyperparameters"]
    assert_server_holds(server.url, reporter)
    assert 1 == reporter.stats().drops["field_too_large"]
    dropped = [e for e in events if e["event"] == "trainreport.field_too_large"]
    assert ["hyperparameters"] == [e["field"] for e in dropped]


def _queue_too_many_series(reporter: Reporter) -> None:
    """900 series of random values: over a 16 KiB body even at 4 points each, gzipped."""
    rng = random.Random(0)  # random digits: gzip cannot shrink them under the limit
    reporter.report_training_start(max_steps=6, num_epochs=1)
    for step in range(1, 7):
        metrics = {f"m{i:03d}": rng.random() for i in range(900)}
        reporter.report_train_step(step=step, epoch=1, metrics=metrics)
    reporter.report_completed()


#: (the run, the server's body limit, what close() says): thinned curves are delivered;
#: curves too large even thinned are not.
OVER_THE_LIMIT = pytest.mark.parametrize(
    ("queue", "limit", "delivered"),
    [
        (lambda reporter: _queue_long_run(reporter, 4000), 64 * 1024, True),
        (_queue_too_many_series, 16 * 1024, False),
    ],
    ids=["thinned", "too-large"],
)


@contextlib.contextmanager
def _completed_over_the_limit(
    start_server: Callable[..., ServerHandle], queue: Callable[[Reporter], None], limit: int
) -> Iterator[tuple[Reporter, FaultProxy]]:
    """A baseline run over the server's body limit (413), completed, behind a proxy."""
    server = start_server(max_body_bytes=limit)
    with FaultProxy.for_url(server.url) as proxy:
        reporter = Reporter(HttpSink(proxy.url, JOB, use_extension=False), CONFIG, rank=0)
        queue(reporter)
        reporter.start()
        assert wait_until(lambda: (stored(server.url) or {}).get("status") == "completed")
        yield reporter, proxy


@OVER_THE_LIMIT
def test_close_over_the_body_limit_returns_at_once_without_resending(
    start_server: Callable[..., ServerHandle],
    queue: Callable[[Reporter], None],
    limit: int,
    delivered: bool,
) -> None:
    """Thinned: close is True; too large even thinned: False; at once, at most one request."""
    with _completed_over_the_limit(start_server, queue, limit) as (reporter, proxy):
        before = proxy.requests_seen
        started = time.monotonic()
        closed = reporter.close(timeout=1.5)
        elapsed = time.monotonic() - started
        during_close = proxy.requests_seen - before
    assert delivered == closed
    assert (True, True) == (elapsed < 0.75, during_close <= 1)


@OVER_THE_LIMIT
def test_an_idle_reporter_over_the_body_limit_sends_only_heartbeats(
    start_server: Callable[..., ServerHandle],
    queue: Callable[[Reporter], None],
    limit: int,
    delivered: bool,
) -> None:
    """With nothing new recorded, no request goes out before the heartbeat (30 s here)."""
    with _completed_over_the_limit(start_server, queue, limit) as (reporter, proxy):
        assert wait_until(lambda: reporter.stats().queue_depth == 0)
        before = proxy.requests_seen
        threading.Event().wait(0.5)  # a quiet period: what is measured is the absence of sends
        idle = proxy.requests_seen - before
        reporter.close(timeout=0.2)
    assert idle <= 1


# --- tokens and cancellation -----------------------------------------------------------


def test_the_token_is_required_used_and_never_logged(token_server: ServerHandle) -> None:
    """Without the token: rejected (401) and logged; with it: delivered; never in any event."""
    with capture_events() as events:
        anonymous = reporter_for(token_server.url)
        train(anonymous, range(1, 6))
        assert not anonymous.flush(timeout=1)
        assert not anonymous.close(timeout=1)
        sink = HttpSink(token_server.url, JOB, token=TOKEN)
        reporter = Reporter(sink, CONFIG, rank=0).start()
        train(reporter, range(1, 21), flush_every=10)
        reporter.report_completed()
        assert reporter.close(timeout=10)
    rejected = [e for e in events if e["event"] == "trainreport.send_rejected"]
    assert 401 == rejected[0]["status_code"]
    assert TOKEN not in repr(events)
    assert TOKEN not in repr(sink)
    assert TOKEN not in repr(reporter.stats())
    assert without_updated_at(reporter.snapshot()) == without_updated_at(
        stored(token_server.url, token=TOKEN)
    )


@MODES
def test_a_cancelled_job_sets_cancel_requested_after_the_next_send(
    server: ServerHandle, use_extension: bool
) -> None:
    """``POST /v1/jobs/{job}/cancel`` reaches the training loop as ``cancel_requested``."""
    reporter = reporter_for(server.url, use_extension)
    train(reporter, range(1, 11), flush_every=10)
    assert not reporter.cancel_requested.is_set()
    assert (
        200
        == urllib3.request(
            "POST",
            f"{server.url}/v1/jobs/{JOB}/cancel",
            headers={"Content-Type": "application/json"},
        ).status
    )
    train(reporter, range(11, 21), flush_every=10)
    assert reporter.cancel_requested.is_set()
    reporter.report_cancelled(reason="cancelled by the job system")
    assert reporter.close(timeout=10)
    assert "cancelled" == stored(server.url)["status"]


def test_a_zombie_of_an_earlier_attempt_that_opens_late_never_takes_the_task(
    server: ServerHandle,
) -> None:
    """Attempt 1, partitioned at start, opens after attempt 2: refused (409), nothing changed."""
    live = reporter_for(server.url, attempt=AttemptIdentity(number=2, started_at=2000.0))
    train(live, range(1, 21), loss=lambda step: 7.0, flush_every=10)
    zombie = reporter_for(server.url, attempt=AttemptIdentity(number=1, started_at=1000.0))
    with capture_events() as events:
        train(zombie, range(1, 31), loss=lambda step: -1.0)
        assert not zombie.close(timeout=2)
    train(live, range(21, 41), loss=lambda step: 7.0, flush_every=10)
    assert live.close(timeout=10)
    assert_server_holds(server.url, live)
    task = stored(server.url)
    assert list(range(1, 41)) == steps_of(task, "train_loss")
    assert {7.0} == {p["value"] for p in task["status_details"]["metrics"]["train_loss"]}
    superseded = [e for e in events if e["event"] == "trainreport.destination_superseded"]
    assert 409 == superseded[0]["status_code"]
    assert "stale_attempt" in superseded[0]["reason"]


@pytest.mark.parametrize("later", [2, 1], ids=["later attempt", "later writer"])
def test_a_superseded_writer_makes_one_refused_request_however_often_it_flushes(
    server: ServerHandle, proxy: FaultProxy, later: int
) -> None:
    """A later attempt (or a later writer of this one) claimed the task: nothing more is sent.

    The old writer, behind the proxy that counts its requests, goes on
    reporting and flushes 4 times: exactly one request is refused (409), each
    flush returns False at once, and stats() and one log event say so.
    """
    old = reporter_for(proxy.url, attempt=AttemptIdentity(number=1, started_at=1000.0))
    timeout = 3.0
    with capture_events() as events:
        train(old, range(1, 11), flush_every=10)
        before = proxy.requests_seen
        new = reporter_for(server.url, attempt=AttemptIdentity(number=later, started_at=1000.0))
        train(new, range(11, 21), loss=lambda step: 7.0, flush_every=10)
        # The old writer's thread may send on its own meanwhile (its refusal may come now).
        at_flushes = proxy.requests_seen
        started = time.monotonic()
        for round_ in range(4):
            steps = range(11 + 10 * round_, 21 + 10 * round_)
            train(old, steps, loss=lambda step: -1.0)
            assert not old.flush(timeout=timeout)
        took = time.monotonic() - started
        assert not old.close(timeout=timeout)

    # At most one request after the claim is refused, and then none: before the claim
    # landed, one send of the old writer's own may still have been accepted.
    assert len(proxy.requests[before:]) <= 2
    assert len(proxy.requests[at_flushes:]) <= 1  # 4 flushes and a close: no request each
    assert took < timeout  # not one flush waited for its timeout
    figures = old.stats().destinations[0]
    assert figures.superseded
    assert "HTTP 409 stale_" in (figures.last_error or "")
    superseded = [e for e in events if e["event"] == "trainreport.destination_superseded"]
    assert 1 == len(superseded)
    assert 409 == superseded[0]["status_code"]
    assert not [e for e in events if e["event"] == "trainreport.send_rejected"]
    assert new.close(timeout=10)
    assert_server_holds(server.url, new)
    assert not new.stats().destinations[0].superseded


def test_a_process_start_time_orders_attempts_without_a_number(server: ServerHandle) -> None:
    """Without attempt numbers, the writer whose process started earlier is the zombie."""
    live = reporter_for(server.url, attempt=AttemptIdentity(started_at=2000.0))
    train(live, range(1, 11), flush_every=10)
    zombie = reporter_for(server.url, attempt=AttemptIdentity(started_at=1000.0))
    train(zombie, range(1, 11), loss=lambda step: -1.0)
    assert not zombie.close(timeout=2)
    assert live.close(timeout=10)
    assert_server_holds(server.url, live)


@MODES
def test_nothing_is_sent_after_close_returns(
    server: ServerHandle, proxy: FaultProxy, use_extension: bool
) -> None:
    """A close that times out on a hung request sends nothing more once it has returned."""
    reporter = reporter_for(proxy.url, use_extension, read_timeout_seconds=5.0)
    train(reporter, range(1, 11), flush_every=10)
    proxy.hang()
    train(reporter, range(11, 21))
    reporter.report_completed()
    assert not reporter.close(timeout=1.0)
    seen = proxy.requests_seen
    proxy.pass_through()  # the held request is closed, never forwarded
    worker = reporter._worker
    assert worker is not None
    worker.thread.join(5.0)
    assert not worker.thread.is_alive()
    assert seen == proxy.requests_seen


# --- each point's wall-clock time (series-times-v1) -------------------------------------


def stored_times(url: str, name: str, job: str = JOB) -> tuple[list[int], list[float | None]]:
    """``(steps, times)`` of one series as GET .../series serves them."""
    response = urllib3.request("GET", f"{url}/v1/jobs/{job}/tasks/train/series?names={name}")
    series = json.loads(response.data)["series"][name]
    return series["steps"], series["times"]


def report_timed_steps(reporter: Reporter, clock: FakeClock, steps: range) -> None:
    """One training step a second on the reporter's (fake, monotonic) clock, then close."""
    for step in steps:
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        if step % 5 == 0:
            reporter.report_validation(step=step, metrics={"loss": 2.0 / step})
        clock.advance(1.0)
    reporter.report_completed()
    assert reporter.close(timeout=10)


def test_each_point_reaches_the_server_with_its_wall_clock_time(
    start_server: Callable[..., ServerHandle],
) -> None:
    """Suffix mode: /series serves each point's time, its report's clock reading as wall time.

    The reporter's monotonic clock moves 1 s a step; the wall-clock offset is
    taken once at start, so the times are 1 s apart and begin at the start's
    wall-clock time. Validation points carry theirs too.
    """
    server = start_server()
    clock = FakeClock()
    before = time.time()
    reporter = Reporter(HttpSink(server.url, JOB), CONFIG, clock=clock, rank=0).start()
    after = time.time()
    report_timed_steps(reporter, clock, range(1, 21))

    steps, maybe_times = stored_times(server.url, "train_loss")
    val_steps, maybe_val_times = stored_times(server.url, "val_loss")
    times = [t for t in maybe_times if t is not None]
    val_times = [t for t in maybe_val_times if t is not None]

    assert (list(range(1, 21)), [5, 10, 15, 20]) == (steps, val_steps)
    assert (20, 4) == (len(times), len(val_times))
    assert before <= times[0] <= after
    assert [float(i) for i in range(20)] == [round(t - times[0], 6) for t in times]
    assert [4.0, 9.0, 14.0, 19.0] == [round(t - times[0], 6) for t in val_times]
    assert_server_holds(server.url, reporter)


def test_full_state_and_servers_without_series_times_get_no_times(
    start_server: Callable[..., ServerHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Times travel in suffix mode to a server listing series-times-v1 only.

    A full-state (baseline) run sends none: its points read back with null
    times. A server that does not list the extension (an older one, which
    would refuse the column) is sent none either, and takes every point.
    """
    server = start_server()
    clock = FakeClock()
    plain = HttpSink(server.url, "plain", use_extension=False)
    report_timed_steps(Reporter(plain, CONFIG, clock=clock, rank=0).start(), clock, range(1, 6))
    monkeypatch.setattr("trainreport.server._app.EXTENSION_SERIES_TIMES", "series-times-v0")
    older = Reporter(HttpSink(server.url, "older"), CONFIG, clock=clock, rank=0).start()
    report_timed_steps(older, clock, range(1, 6))

    assert ([1, 2, 3, 4, 5], [None] * 5) == stored_times(server.url, "train_loss", "plain")
    assert ([1, 2, 3, 4, 5], [None] * 5) == stored_times(server.url, "train_loss", "older")
    assert_server_holds(server.url, older, "older")
