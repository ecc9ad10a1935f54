"""CUDA tensors reported without a device sync on the caller's thread (docs/design.md).

Without a GPU: a stand-in (``fake_cuda.FakeTorch``) records which calls each
thread made. The report calls run on the test's thread, the reporter
thread's cycles on the reporter thread itself, stepped with ``drive``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fake_cuda
from helpers import ScriptedSink, curve, drive, held
from trainreport import MemorySink, Reporter, ReportingConfig, read_task
from trainreport._record._device import (
    DEVICE_POLL_SECONDS,
    DeviceReport,
    await_device_values,
    gather_to_host,
)
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


def make(**config: Any) -> tuple[Reporter, MemorySink, FakeClock]:
    clock = FakeClock()
    sink = MemorySink()
    settings = {"min_report_interval_seconds": 10.0, "backoff_jitter": 0.0, **config}
    return Reporter(sink, ReportingConfig(**settings), clock=clock, rank=0), sink, clock


#: The reporter thread's name: ``drive``'s cycles run on the reporter thread itself.
REPORTER_THREAD = "trainreport-reporter"


def test_training_thread_makes_no_item_or_synchronize_call(torch: fake_cuda.FakeTorch) -> None:
    """A CUDA loss and grad norm each step: the caller stacks, copies, records; it never waits.

    The copy is ``non_blocking`` into pinned memory, the event recorded on the
    current stream; ``query`` (never a wait) and the read happen on the
    reporter thread only.
    """
    reporter, sink, _ = make()
    worker = drive(reporter)
    me = threading.current_thread().name
    for step in range(1, 4):
        loss, norm = torch.tensor(1.0 / step), torch.tensor(float(step), dtype="bfloat16")
        reporter.report_train_step(step=step, metrics={"loss": loss, "grad_norm": norm, "lr": 0.1})
    torch.complete()
    worker.cycle()
    on_caller = torch.calls_on(me)
    assert [] == [c for c in on_caller if c in ("item", "synchronize", "query", "tolist")]
    assert {"stack", "empty", "copy_", "record"} <= set(on_caller)
    assert all(d["non_blocking"] for name, _, d in torch.calls if name == "copy_")
    assert all(d["pin_memory"] for name, _, d in torch.calls if name == "empty")
    assert {"query", "tolist"} <= set(torch.calls_on(REPORTER_THREAD))
    assert "item" not in torch.calls_on(REPORTER_THREAD)
    assert reporter.close(timeout=5)
    assert [(1, 1, 1.0), (2, 1, 0.5), (3, 1, 1 / 3)] == curve(sink.task, "train_loss")
    assert [1.0, 2.0, 3.0] == [p[2] for p in curve(sink.task, "train_grad_norm")]
    assert [0.1, 0.1, 0.1] == [p[2] for p in curve(sink.task, "train_lr")]


def test_one_gather_per_report_and_device(torch: fake_cuda.FakeTorch) -> None:
    """Two values on cuda:0 and one on cuda:1: two stacks, two copies, two events, one report."""
    target: dict[str, Any] = {
        "a": torch.tensor(1.0, device=0),
        "b": torch.tensor(2.0, device=1),
        "c": torch.tensor(3.0, device=0),
    }
    pending = gather_to_host(target, ["a", "b", "c"])
    assert 2 == [c[0] for c in torch.calls].count("stack")
    assert 2 == len(torch.events)
    assert [
        ("stream", fake_cuda.FakeDevice("cuda", 0)),
        ("stream", fake_cuda.FakeDevice("cuda", 1)),
    ] == [e.stream for e in torch.events]
    torch.events[0].done = True
    assert not pending.ready()  # every device's copy must have completed
    torch.events[1].done = True
    assert pending.ready()
    assert 0 == pending.fill()
    assert {"a": 1.0, "b": 2.0, "c": 3.0} == target


def test_in_place_change_after_the_call_is_not_recorded(torch: fake_cuda.FakeTorch) -> None:
    """The value is the one at the call: the stack is a new tensor, ordered before later kernels."""
    reporter, sink, _ = make()
    worker = drive(reporter)
    loss = torch.tensor(2.0)
    reporter.report_train_step(step=1, metrics={"loss": loss})
    loss.add_(100.0)  # the next step's in-place update, before the copy was read
    reporter.report_validation(step=1, metrics={"loss": loss})
    loss.add_(100.0)
    torch.complete()
    worker.cycle()
    assert reporter.close(timeout=5)
    assert [2.0] == [p[2] for p in curve(sink.task, "train_loss")]
    assert [102.0] == [p[2] for p in curve(sink.task, "val_loss")]


def test_order_of_points_holds_behind_an_unfinished_copy(torch: fake_cuda.FakeTorch) -> None:
    """A plain report behind an unfinished device report waits for it: points keep their order."""
    reporter, sink, clock = make()
    worker = drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": torch.tensor(1.0)})
    reporter.report_train_step(step=2, metrics={"loss": 2.0})
    worker.cycle()
    assert 2 == reporter.stats().queue_depth  # nothing applied: the head waits for the device
    assert type(worker.queue[0]) is DeviceReport
    torch.complete()
    clock.advance(11.0)
    worker.cycle()
    assert 0 == reporter.stats().queue_depth
    assert reporter.close(timeout=5)
    assert [(1, 1.0), (2, 2.0)] == [(p[0], p[2]) for p in curve(sink.task, "train_loss")]


def test_non_finite_device_values_are_kept_as_gaps(torch: fake_cuda.FakeTorch) -> None:
    """NaN and Inf from the device are points whose value is JSON null, as for plain numbers."""
    reporter, sink, _ = make()
    drive(reporter)
    for step, value in enumerate([1.0, math.nan, math.inf], start=1):
        reporter.report_train_step(step=step, metrics={"loss": torch.tensor(value)})
    torch.complete()
    assert reporter.close(timeout=5)
    assert [1.0, None, None] == [p[2] for p in curve(sink.task, "train_loss")]
    assert 3 == held(sink)["status_details"]["step"]


def test_close_waits_for_outstanding_copies(torch: fake_cuda.FakeTorch) -> None:
    """close() waits for a copy the device completes while it waits, and delivers the value."""
    reporter, sink, _ = make()
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": torch.tensor(4.0)})
    timer = threading.Timer(0.2, torch.complete)  # the device catches up during close()
    timer.start()
    try:
        assert reporter.close(timeout=10)
    finally:
        timer.cancel()
    assert [4.0] == [p[2] for p in curve(sink.task, "train_loss")]
    assert "device_values" not in reporter.stats().drops


def test_close_gives_up_on_copies_unfinished_at_half_its_time(torch: fake_cuda.FakeTorch) -> None:
    """A copy that never completes is dropped (counted, logged once); reports behind it are sent."""
    reporter, sink, _ = make()
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": torch.tensor(4.0)})
    reporter.report_train_step(step=2, metrics={"loss": 5.0})
    with capture_events() as events:
        reporter.close(timeout=0.5)
    assert 1 == reporter.stats().drops["device_values"]
    assert [(2, 5.0)] == [(p[0], p[2]) for p in curve(sink.task, "train_loss")]
    dropped = [e for e in events if e["event"] == "trainreport.device_values_dropped"]
    assert ["unfinished at close's deadline"] == [e["reason"] for e in dropped]


def test_await_device_values_stops_at_its_time(torch: fake_cuda.FakeTorch) -> None:
    """The close-time wait polls until ``until`` on its clock, then gives the copies up."""
    clock = FakeClock()
    queue: Any = [DeviceReport(gather_to_host({"a": torch.tensor(1.0)}, ["a"]), None)]
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    await_device_values(queue, wait, until=clock() + 0.01, now=clock)
    assert 0.01 == pytest.approx(sum(waits))
    assert queue[0].pending.ready()
    assert 1 == queue[0].pending.fill()


def test_flush_waits_for_the_copy(torch: fake_cuda.FakeTorch) -> None:
    """flush() returns True once the device caught up and the value was delivered."""
    reporter, sink, _ = make()
    reporter.start()
    try:
        reporter.report_train_step(step=1, metrics={"loss": torch.tensor(3.0)})
        threading.Timer(0.1, torch.complete).start()
        assert reporter.flush(timeout=10)
        assert [3.0] == [p[2] for p in curve(sink.task, "train_loss")]
    finally:
        reporter.close(timeout=5)


def test_every_report_kind_with_metrics_takes_device_values(torch: fake_cuda.FakeTorch) -> None:
    """Validation and other phases (and the general form of a train step) defer too."""
    reporter, sink, _ = make()
    drive(reporter)
    reporter.report_train_step(step=1, epoch=1.5, metrics={"loss": torch.tensor(1.0)})
    reporter.report_train_step(step=2, metrics=_Mapping({"loss": torch.tensor(2.0)}))
    reporter.report_validation(step=2, metrics={"loss": torch.tensor(3.0)}, dataset="dev")
    reporter.report_metrics(step=2, metrics={"acc": torch.tensor(0.5)}, phase="test")
    assert "item" not in torch.calls_on(threading.current_thread().name)
    torch.complete()
    assert reporter.close(timeout=5)
    assert [1.0, 2.0] == [p[2] for p in curve(sink.task, "train_loss")]
    assert [3.0] == [p[2] for p in curve(sink.task, "val_loss")]
    assert [0.5] == [p[2] for p in curve(sink.task, "test_acc")]


class _Mapping(dict[str, Any]):
    """A dict subclass: not the short form's exact ``dict`` (the general form)."""


def test_a_multi_element_cuda_tensor_is_dropped_as_today(torch: fake_cuda.FakeTorch) -> None:
    """Only one-element tensors are device values; others go to ``.item()``, raising as today."""
    reporter, _, _ = make()
    drive(reporter)
    vector = fake_cuda.FakeTensor(torch, [1.0, 2.0], fake_cuda.FakeDevice())

    def item() -> float:
        raise RuntimeError("a Tensor with 2 elements cannot be converted to Scalar")

    vector.item = item  # type: ignore[method-assign]
    reporter.report_train_step(step=1, metrics={"loss": vector})
    assert reporter.close(timeout=5)
    assert 1 == reporter.stats().drops["not_chartable"]
    assert [] == torch.events


def _first_point_sent(**config: Any) -> tuple[Reporter, MemorySink, FakeClock, Any]:
    """A reporter driven by the test whose first point (a plain float) was sent."""
    reporter, sink, clock = make(**config)
    worker = drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker.cycle()
    assert [1] == [p[0] for p in curve(sink.task, "train_loss")]
    return reporter, sink, clock, worker


def test_an_event_behind_an_unfinished_copy_is_sent_once_the_copy_completes(
    torch: fake_cuda.FakeTorch,
) -> None:
    """A checkpoint queued behind a CUDA step does not wait for the next send interval.

    The drain stops at the step (its copy is in flight); the thread looks
    again every ``DEVICE_POLL_SECONDS``, so once the device catches up the
    checkpoint is applied and sent at once, as an event report is.
    """
    reporter, sink, clock, worker = _first_point_sent()
    reporter.report_train_step(step=2, metrics={"loss": torch.tensor(0.5)})
    reporter.report_checkpoint_saved(path="/ckpt/2", step=2)
    try:
        wait = worker.cycle()
        assert DEVICE_POLL_SECONDS == wait
        assert "checkpoint_path" not in held(sink)["status_details"]
        torch.complete()
        clock.advance(wait)
        worker.cycle()
        assert "/ckpt/2" == held(sink)["status_details"]["checkpoint_path"]
    finally:
        torch.complete()
        reporter.close(timeout=5)


def test_a_copy_in_flight_with_nothing_waiting_for_it_keeps_the_normal_cadence(
    torch: fake_cuda.FakeTorch,
) -> None:
    """Training steps alone behind a copy: no 2 ms polling (the copy is done before the send)."""
    reporter, _, _, worker = _first_point_sent()
    reporter.report_train_step(step=2, metrics={"loss": torch.tensor(0.5)})
    reporter.report_train_step(step=3, metrics={"loss": 0.25})
    try:
        assert 10.0 == pytest.approx(worker.cycle())
    finally:
        torch.complete()
        reporter.close(timeout=5)


class _KeyedSink(ScriptedSink):
    """A sink with a job and a task: the reporter keeps a journal in front of it."""

    job_id = "job-1"
    task_id = "train"


def _journaled_steps(path: Path) -> list[int]:
    """The train_loss steps the journal at ``path`` holds."""
    points = read_task(path)["status_details"].get("metrics", {}).get("train_loss", [])
    return [p["step"] for p in points]


def test_points_behind_an_unfinished_copy_are_journaled_once_it_completes(
    torch: fake_cuda.FakeTorch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal record due while a copy is in flight is followed by one as soon as it completes.

    The points behind the copy miss the journal window by the copy's latency
    (and the thread's 2 ms look), never by a whole journal interval.
    """
    monkeypatch.delenv("TRAINREPORT_JOURNAL", raising=False)
    clock = FakeClock()
    config = ReportingConfig(
        min_report_interval_seconds=60.0, journal_interval_seconds=1.0, journal_dir=str(tmp_path)
    )
    reporter = Reporter(_KeyedSink(), config, clock=clock, rank=0)
    worker = drive(reporter)
    path = tmp_path / "job-1" / "train.log"
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker.cycle()  # recorded, step 1 sent (and acknowledged: trimmed from the journal)
    reporter.report_train_step(step=2, metrics={"loss": torch.tensor(0.5)})
    reporter.report_train_step(step=3, metrics={"loss": 0.25})
    clock.advance(1.0)
    wait = worker.cycle()  # the record is due: 2 and 3 wait for the copy
    try:
        assert [] == _journaled_steps(path)
        assert DEVICE_POLL_SECONDS == wait
        torch.complete()
        clock.advance(wait)
        worker.cycle()
        assert [2, 3] == _journaled_steps(path)
        assert 1.0 == pytest.approx(worker.cycle())  # no polling; the next record, due in 1 s
    finally:
        torch.complete()
        reporter.close(timeout=5)


def test_the_reporter_thread_queries_and_reads_each_copy_on_its_own_device(
    torch: fake_cuda.FakeTorch,
) -> None:
    """With values on cuda:0 and cuda:1, each event query and read runs with its device current.

    The reporter thread's current device is 0: a query of a cuda:1 event
    there would create a CUDA context on GPU 0 from a rank that uses GPU 1.
    """
    reporter, sink, _ = make()
    worker = drive(reporter)
    metrics = {"loss": torch.tensor(1.0, device=1), "norm": torch.tensor(2.0, device=0)}
    reporter.report_train_step(step=1, metrics=metrics)
    worker.cycle()  # queried while in flight
    torch.complete()
    worker.cycle()  # queried and read
    calls = [(name, d) for name, on, d in torch.calls if on == REPORTER_THREAD]
    assert {("query", 0), ("query", 1), ("tolist", 0), ("tolist", 1)} == {
        (name, d["own"]) for name, d in calls if name in ("query", "tolist")
    }
    assert [] == [(n, d) for n, d in calls if n in ("query", "tolist") and d["current"] != d["own"]]
    assert reporter.close(timeout=5)
    assert [1.0] == [p[2] for p in curve(sink.task, "train_loss")]


# --------------------------------------------------------------------------- real torch (CPU)

real_torch = pytest.importorskip("torch")


def test_cpu_tensors_are_converted_on_the_callers_thread_as_today() -> None:
    """CPU tensors (and numpy scalars) become numbers at the call: no device report is queued."""
    reporter, sink, _ = make()
    worker = drive(reporter)
    loss = real_torch.tensor(2.5)
    reporter.report_train_step(
        step=1, metrics={"loss": loss, "norm": real_torch.tensor(1.0, dtype=real_torch.bfloat16)}
    )
    reporter.report_train_step(step=2, metrics={"loss": np.float32(0.5), "norm": 1.0})
    loss.add_(1.0)
    assert all(type(item) is dict for item in worker.queue)
    assert all(
        type(v) in (float, int)
        for item in worker.queue
        if isinstance(item, dict)  # every one is (asserted above)
        for k, v in item.items()
        if k[0] != "\x00"
    )
    assert reporter.close(timeout=5)
    assert [2.5, 0.5] == [p[2] for p in curve(sink.task, "train_loss")]


def test_gather_with_real_torch_on_cpu_keeps_bf16_and_int_values_exact() -> None:
    """The gather's torch calls, run by real torch (CPU, no pinning): bf16 and large ints exact.

    ``pin_memory`` needs CUDA, so this runs the stack and cast only, as
    ``gather_to_host`` does them.
    """
    bf16 = real_torch.tensor(3.140625, dtype=real_torch.bfloat16)
    big = real_torch.tensor(2**40 + 1, dtype=real_torch.int64)
    views = [bf16.detach().reshape(()), big.detach().reshape(())]
    gathered = real_torch.stack([v.to(real_torch.float64) for v in views])
    assert [3.140625, float(2**40 + 1)] == gathered.tolist()


def test_import_trainreport_does_not_import_torch() -> None:
    """A process without tensors never imports torch, device values or not."""
    code = (
        "import sys, trainreport\n"
        "r = trainreport.Reporter(trainreport.MemorySink(), rank=0)\n"
        "r.start(); r.report_train_step(step=1, metrics={'loss': 1.0}); r.close(timeout=5)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
