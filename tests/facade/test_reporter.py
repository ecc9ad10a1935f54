"""Reporter end to end against MemorySink and scripted sinks, driven by an injected clock."""

from __future__ import annotations

import itertools
import math
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from helpers import ScriptedSink, curve, drive, held, without_updated_at
from trainreport import MemorySink, Rejected, Reporter, ReportingConfig, RetryLater, TransitionError
from trainreport._facade import _reporter
from trainreport._facade._histogram import LatencyHistogram
from trainreport._facade._reporter_stats import assemble_stats
from trainreport._record._reports import (
    REPORT_BYTES,
    TRAIN_EPOCH,
    TRAIN_STEP,
    TRAIN_TIME,
    completed,
    queued_bytes,
)
from trainreport._wire._protocol import decode_column
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


def make(sink: Any = None, **config: Any) -> tuple[Reporter, Any, FakeClock]:
    clock = FakeClock()
    sink = sink if sink is not None else MemorySink()
    settings = {"min_report_interval_seconds": 10.0, "backoff_jitter": 0.0, **config}
    reporter = Reporter(sink, ReportingConfig(**settings), clock=clock, rank=0)
    return reporter, sink, clock


def cycle(reporter: Reporter) -> None:
    worker = reporter._worker
    assert worker is not None
    worker.cycle()


def test_run_of_23_steps_with_10s_interval_stores_every_step_and_debounces() -> None:
    """A 23-step run at 1 s a step with a 10 s interval: few sends, every step stored."""
    reporter, sink, clock = make()
    drive(reporter)
    reporter.report_training_start(max_steps=23, num_epochs=1)
    cycle(reporter)
    for step in range(1, 24):
        clock.advance(1.0)
        reporter.report_train_step(step=step, epoch=0, metrics={"loss": 1.0 / step})
        cycle(reporter)
    assert reporter.close(timeout=5)
    assert list(range(1, 24)) == [p[0] for p in curve(sink.task, "train_loss")]
    # first at once, the first point at once, then one per 10 s of clock, plus the final flush
    assert 3 <= len(sink.requests) <= 6
    assert 23 == held(sink)["status_details"]["step"]
    assert 100.0 == held(sink)["status_details"]["percentage_done"]


def test_event_reports_bypass_the_debounce() -> None:
    """A checkpoint is sent at once even when the interval has not elapsed."""
    reporter, sink, clock = make()
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    cycle(reporter)
    sent = len(sink.requests)
    clock.advance(1.0)
    reporter.report_checkpoint_saved(path="ckpt/1", step=1)
    cycle(reporter)
    assert sent + 1 == len(sink.requests)
    assert "ckpt/1" == sink.requests[-1]["status_details"]["checkpoint_path"]
    assert "checkpointing" == sink.requests[-1]["status_details"]["phase"]
    reporter.close(timeout=5)


@pytest.mark.parametrize("series_suffix", [True, False], ids=["suffix", "full-state"])
@pytest.mark.parametrize(
    ("end", "status"),
    [
        (lambda r: r.report_completed(), "completed"),
        (lambda r: r.report_error(RuntimeError("boom")), "failed"),
        (lambda r: r.report_cancelled(reason="preempted"), "cancelled"),
    ],
    ids=["completed", "failed", "cancelled"],
)
def test_a_finished_run_reads_done_with_no_eta_in_sends_record_and_snapshot(
    end: Any, status: str, series_suffix: bool
) -> None:
    """A terminal status ends the phase and the ETA: not "completed, checkpointing, ETA 0 s".

    The ETA is sent while the run goes on, then the last excursion (a checkpoint)
    comes before the end; the final send, the stored record (a shallow merge would
    keep the earlier ``eta_seconds``) and ``snapshot()`` all say the run is over.
    """
    reporter, sink, clock = make(MemorySink(series_suffix=series_suffix))
    drive(reporter)
    reporter.report_training_start(max_steps=10, num_epochs=1)
    for step in (1, 2, 3):
        clock.advance(10.0)
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        cycle(reporter)
    running = held(sink)["status_details"]
    reporter.report_checkpoint_saved(path="ckpt/3", step=3)
    cycle(reporter)
    end(reporter)
    assert reporter.close(timeout=5)

    last = sink.requests[-1]["status_details"]
    stored = held(sink)["status_details"]
    snapshot = reporter.snapshot()["status_details"]
    assert ("training", 70.0) == (running["phase"], running["eta_seconds"])
    assert ("done", False) == (last["phase"], "eta_seconds" in last)
    assert (status, "done", False) == (
        held(sink)["status"],
        stored["phase"],
        "eta_seconds" in stored,
    )
    assert ("done", False) == (snapshot["phase"], "eta_seconds" in snapshot)


def test_full_state_event_send_leaves_curves_for_the_debounced_send() -> None:
    """In full-state mode an event send within the interval carries no ``metrics``."""
    reporter, sink, clock = make()
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    cycle(reporter)
    clock.advance(1.0)
    reporter.report_train_step(step=2, metrics={"loss": 0.5})
    reporter.report_epoch_end(epoch=1)
    cycle(reporter)
    assert "metrics" not in sink.requests[-1]["status_details"]
    assert 0.5 == sink.requests[-1]["status_details"]["train_loss"]  # current value still sent
    clock.advance(10.0)
    cycle(reporter)
    assert [1, 2] == [
        p["step"] for p in sink.requests[-1]["status_details"]["metrics"]["train_loss"]
    ]
    reporter.close(timeout=5)


def test_nan_in_the_middle_of_a_curve_is_a_null_point() -> None:
    """A diverging loss is kept as a gap (JSON null), and the payload stays strict JSON."""
    reporter, sink, _ = make()
    reporter.start()
    for step, value in enumerate([1.0, math.nan, math.inf, 0.5], start=1):
        reporter.report_train_step(step=step, metrics={"loss": value})
    assert reporter.close(timeout=5)
    assert [(1, 1, 1.0), (2, 1, None), (3, 1, None), (4, 1, 0.5)] == curve(sink.task, "train_loss")


def test_first_send_failure_retries_after_backoff_not_a_whole_interval() -> None:
    """After a failed first send, the next attempt goes after the backoff (1 s), not 10 s."""
    sink = ScriptedSink()
    sink.fail_sends.append(RetryLater("connection refused"))
    reporter, _, clock = make(sink, backoff_initial_seconds=1.0)
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    cycle(reporter)
    assert 1 == len(sink.results)
    assert isinstance(sink.results[0], RetryLater)
    clock.advance(1.0)
    cycle(reporter)
    assert 2 == len(sink.results)
    assert [(1, 1, 1.0)] == curve(sink.task, "train_loss")
    assert 1 == reporter.stats().requests_failed
    reporter.close(timeout=5)


def test_rejection_waits_for_new_data_and_the_long_backoff() -> None:
    """A rejected send is not retried unchanged; new data after the long backoff is tried."""
    sink = ScriptedSink()
    sink.fail_sends.append(Rejected("forbidden", 403))
    reporter, _, clock = make(sink, rejected_backoff_seconds=100.0)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with capture_events() as events:
        drive(reporter)
        cycle(reporter)
        clock.advance(200.0)
        cycle(reporter)
        assert 1 == len(sink.results)  # nothing new: not retried
        reporter.report_train_step(step=2, metrics={"loss": 0.5})
        cycle(reporter)
        cycle(reporter)
    assert 2 == len(sink.results)
    assert [1, 2] == [p[0] for p in curve(sink.task, "train_loss")]
    rejected = [e for e in events if e["event"] == "trainreport.send_rejected"]
    assert 1 == len(rejected)
    reporter.close(timeout=5)


def test_resume_seeds_curves_and_datasets_but_not_the_status() -> None:
    """A new process continues stored curves and dataset order; a failed task runs again."""
    stored = {
        "status": "failed",
        "status_details": {
            "owner": "alice",
            "val_datasets": ["a", "b"],
            "metrics": {
                "train_loss": [{"step": s, "epoch": 1, "value": 1.0 / s} for s in (1, 2, 3)]
            },
        },
    }
    sink = MemorySink(stored)
    reporter, _, _ = make(sink, status_at_close="keep")  # the attempt's own status, as it runs
    reporter.start()
    reporter.report_train_step(step=4, metrics={"loss": 0.25})
    reporter.report_validation(step=4, metrics={"loss": 0.3}, dataset="b")
    assert reporter.close(timeout=5)
    task = held(sink)
    assert [1, 2, 3, 4] == [p[0] for p in curve(task, "train_loss")]
    assert [(4, 1, 0.3)] == curve(task, "val_b_loss")  # "b" was second in the stored order
    assert "running" == task["status"]
    assert "alice" == task["status_details"]["owner"]
    assert without_updated_at(task) == without_updated_at(reporter.snapshot())


def test_resume_from_an_earlier_checkpoint_rewinds_every_series() -> None:
    """Steps going back truncate train and validation series after the new step."""
    points = [{"step": s, "epoch": 1, "value": float(s)} for s in range(1, 11)]
    stored = {
        "status": "running",
        "status_details": {"metrics": {"train_loss": points, "val_loss": points[4::5]}},
    }
    sink = MemorySink(stored)
    reporter, _, _ = make(sink)
    reporter.start()
    for step in (6, 7):
        reporter.report_train_step(step=step, metrics={"loss": 100.0 + step})
    assert reporter.close(timeout=5)
    assert [1, 2, 3, 4, 5, 6, 7] == [p[0] for p in curve(sink.task, "train_loss")]
    assert 106.0 == curve(sink.task, "train_loss")[5][2]
    assert [5] == [p[0] for p in curve(sink.task, "val_loss")]
    assert 1 <= reporter.stats().rewinds


def test_series_suffix_mode_sends_only_new_points() -> None:
    """With the extension each request carries each series from the delivered length on."""
    sink = MemorySink(series_suffix=True)
    reporter, _, clock = make(sink)
    drive(reporter)
    for step in range(1, 4):
        reporter.report_train_step(step=step, metrics={"loss": float(step)})
        clock.advance(10.0)
        cycle(reporter)
    assert reporter.close(timeout=5)
    suffixes = [r["series"]["train_loss"] for r in sink.requests if "series" in r]
    offsets = [s["offset"] for s in suffixes]
    assert offsets == sorted(offsets)
    assert [1, 2, 3] == [step for s in suffixes for step in decode_column(s["steps"], "q")]
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())


def test_unstarted_reporter_pickles_with_its_queued_reports() -> None:
    """Lightning pickles loggers: an unstarted reporter round-trips and keeps its reports."""
    reporter, _, _ = make(MemorySink())
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    _ = reporter.cancel_requested  # creating the event must not break pickling
    copy = pickle.loads(pickle.dumps(reporter))
    copy.start()
    assert copy.close(timeout=5)
    assert [(1, 1, 1.0)] == curve(copy.sink.task, "train_loss")


def test_started_reporter_refuses_to_pickle() -> None:
    """A running reporter owns a thread; pickling it is an error, not a silent copy."""
    reporter, _, _ = make()
    reporter.start()
    with pytest.raises(TypeError):
        pickle.dumps(reporter)
    reporter.close(timeout=5)


def test_report_before_start_is_kept() -> None:
    """Reports made before start() are sent after it."""
    reporter, sink, _ = make()
    reporter.report_training_start(max_steps=10)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    reporter.start()
    assert reporter.close(timeout=5)
    assert [(1, 1, 1.0)] == curve(sink.task, "train_loss")
    assert 10 == held(sink)["status_details"]["max_steps"]


def test_close_without_start_delivers_what_was_queued_and_says_start_was_forgotten() -> None:
    """Forgetting ``start()`` never throws the run away: ``close()`` starts, delivers, closes.

    One warning names the mistake and how many reports waited for ``close()``.
    """
    reporter, sink, _ = make()
    reporter.report_training_start(max_steps=3)
    for step in (1, 2, 3):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
    reporter.report_completed()

    with capture_events() as events:
        delivered = reporter.close(timeout=5)

    assert (True, "closed") == (delivered, reporter.state)
    assert ("completed", [1, 2, 3]) == (
        held(sink)["status"],
        [p[0] for p in curve(sink.task, "train_loss")],
    )
    assert [{"queued_reports": 5, "log_level": "warning"}] == [
        {k: e[k] for k in ("queued_reports", "log_level")}
        for e in events
        if e["event"] == "trainreport.started_at_close"
    ]


def test_close_without_start_of_an_unpickled_copy_delivers_from_the_copy() -> None:
    """A pickled, unstarted reporter (Lightning's spawned worker) owns its copy's reports."""
    reporter, _, _ = make(MemorySink())
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    copy = pickle.loads(pickle.dumps(reporter))

    assert copy.close(timeout=5)
    assert [(1, 1, 1.0)] == curve(copy.sink.task, "train_loss")


def test_close_is_idempotent_and_returns_the_same_answer() -> None:
    """A second close() returns at once with the first answer."""
    reporter, _, _ = make()
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.close(timeout=5)
    assert reporter.close(timeout=5)
    assert "closed" == reporter.state


def test_context_manager_reports_completed_or_the_error() -> None:
    """``with Reporter(...)`` completes on success and fails with the exception type."""
    ok_sink, failing_sink = MemorySink(), MemorySink()
    with Reporter(ok_sink, rank=0) as reporter:
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert "completed" == held(ok_sink)["status"]
    with pytest.raises(ValueError, match="boom"), Reporter(failing_sink, rank=0):
        raise ValueError("boom")
    assert "failed" == held(failing_sink)["status"]
    assert {"type": "ValueError", "message": "boom"} == held(failing_sink)["status_details"][
        "error"
    ]


def test_context_manager_reports_keyboard_interrupt_as_cancelled() -> None:
    """Ctrl-C is a cancellation with reason "interrupted" (docs/design.md#lifecycle)."""
    sink = MemorySink()
    with pytest.raises(KeyboardInterrupt), Reporter(sink, rank=0):
        raise KeyboardInterrupt
    assert "cancelled" == held(sink)["status"]
    assert "interrupted" == held(sink)["status_details"]["cancel_reason"]


@pytest.mark.parametrize(
    ("ended_by", "preempted", "expected"),
    [
        (None, False, ("completed", None, None)),
        (SystemExit(0), False, ("completed", None, None)),
        (SystemExit(None), False, ("completed", None, None)),
        (SystemExit(2), False, ("failed", None, "SystemExit")),
        (KeyboardInterrupt(), False, ("cancelled", "interrupted", None)),
        (ValueError("boom"), False, ("failed", None, "ValueError")),
        (None, True, ("cancelled", "preempted", None)),
        (ValueError("boom"), True, ("cancelled", "preempted", None)),
    ],
    ids=[
        "none",
        "exit-0",
        "exit-none",
        "exit-2",
        "interrupt",
        "error",
        "preempted",
        "preempted-while-failing",
    ],
)
def test_report_outcome_maps_what_ended_the_run_to_one_terminal_report(
    ended_by: BaseException | None, preempted: bool, expected: tuple[str, Any, Any]
) -> None:
    """The one outcome rule every adapter and hook uses (docs/lifecycle.md)."""
    reporter, sink, _ = make()
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})

    reporter.report_outcome(ended_by, preempted=preempted)

    assert reporter.close(timeout=5)
    task = sink.task
    assert task is not None
    details = task["status_details"]
    assert expected == (
        task["status"],
        details.get("cancel_reason"),
        details.get("error", {}).get("type"),
    )


def test_context_manager_treats_a_clean_sys_exit_as_completed() -> None:
    """``sys.exit(0)`` inside ``with Reporter(...)`` is a finished run, not a failure."""
    sink = MemorySink()
    with pytest.raises(SystemExit), Reporter(sink, rank=0):
        raise SystemExit(0)
    task = sink.task
    assert task is not None
    assert ("completed", False) == (task["status"], "error" in task["status_details"])


@pytest.mark.parametrize(
    "interrupt",
    [KeyboardInterrupt(), type("MyInterrupt", (KeyboardInterrupt,), {})()],
    ids=["KeyboardInterrupt", "subclass"],
)
def test_report_error_given_a_keyboard_interrupt_reports_cancelled_interrupted(
    interrupt: KeyboardInterrupt,
) -> None:
    """``except BaseException: reporter.report_error(exc)`` turns Ctrl-C into a cancel.

    The lifecycle says an interrupt is ``cancelled`` with reason ``interrupted``,
    not a failure with a ``KeyboardInterrupt`` error.
    """
    reporter, sink, _ = make()
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})

    reporter.report_error(interrupt)

    assert reporter.close(timeout=5)
    details = held(sink)["status_details"]
    assert ("cancelled", "interrupted", False) == (
        held(sink)["status"],
        details.get("cancel_reason"),
        "error" in details,
    )


def test_first_terminal_report_wins() -> None:
    """A failure reported first stays a failure; a later completion is refused."""
    reporter, sink, _ = make()
    reporter.start()
    reporter.report_error(RuntimeError("oom"))
    reporter.report_completed()
    reporter.report_train_step(step=5, metrics={"loss": 1.0})
    reporter.report_validation(step=5, metrics={"loss": 2.0})
    assert reporter.close(timeout=5)
    assert "failed" == held(sink)["status"]
    assert "train_loss" not in held(sink)["status_details"].get("metrics", {})
    assert [(5, 1, 2.0)] == curve(sink.task, "val_loss")  # final evaluation still recorded


def test_strict_transitions_raise_at_close() -> None:
    """With strict_transitions, a refused transition surfaces as TransitionError from close()."""
    reporter, _, _ = make(strict_transitions=True)
    reporter.start()
    reporter.report_completed()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with pytest.raises(TransitionError):
        reporter.close(timeout=5)


def test_cancel_requested_is_set_when_the_destination_says_so() -> None:
    """A response saying the job was cancelled sets ``reporter.cancel_requested``."""
    reporter, sink, _ = make()
    sink.request_cancel()
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.flush(timeout=5)
    assert reporter.cancel_requested.is_set()
    reporter.close(timeout=5)


def test_flush_delivers_everything_before_the_interval() -> None:
    """flush() sends at once and returns True once all recorded data is delivered."""
    reporter, sink, _ = make()
    drive(reporter)
    cycle(reporter)
    for step in range(1, 6):
        reporter.report_train_step(step=step, metrics={"loss": float(step)})
    assert reporter.flush(timeout=5)
    assert 5 == len(curve(sink.task, "train_loss"))
    reporter.close(timeout=5)


def test_deep_queue_wakes_the_thread_to_drain_without_sending() -> None:
    """At drain_queue_depth the thread drains (queue shrinks) but does not send early."""
    reporter, sink, _ = make(drain_queue_depth=100)
    drive(reporter)
    cycle(reporter)
    sent = len(sink.requests)
    for step in range(1, 101):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
    deadline = time.monotonic() + 5
    while reporter.stats().queue_depth and time.monotonic() < deadline:
        cycle(reporter)
    assert 0 == reporter.stats().queue_depth
    # the first point went at once; the others wait: the interval (fake clock) has not elapsed
    assert sent + 1 == len(sink.requests)
    reporter.close(timeout=5)


def test_wide_reports_wake_the_thread_to_drain_before_they_hold_4_mib() -> None:
    """Reports of 1,000 metrics (~48 KB each, estimated) wake it at ~86, not drain_queue_depth.

    What waits in the queue between drains is the process's memory beside the
    store's (docs/engine.md, "Memory").
    """
    reporter, _, _ = make()
    drive(reporter)
    worker = reporter._worker
    assert worker is not None
    metrics = {f"m{i}": 1.0 for i in range(1000)}
    reporter.report_train_step(step=1, metrics=metrics)  # the first point wakes it at once
    cycle(reporter)
    worker.wake.clear()
    woken_at = None
    for step in range(2, 400):
        reporter.report_train_step(step=step, metrics=metrics)
        if worker.wake.is_set():
            woken_at = step - 1
            break
    assert woken_at is not None
    assert 60 <= woken_at <= 120, woken_at
    reporter.close(timeout=5)


def test_memory_guard_drops_with_a_counter_and_close_says_false() -> None:
    """Beyond max_queue_bytes of queued reports, reports are dropped, counted, close() False."""
    reporter, _, _ = make(max_queue_bytes=2**20)
    for step in range(5000):  # ~1 KiB each with 14 metrics: about 1,100 fit in 1 MiB
        reporter.report_train_step(step=step, metrics={f"m{i}": 1.0 for i in range(14)})
    stats = reporter.stats()
    assert 800 <= stats.queue_depth <= 1500
    assert 5000 == stats.queue_depth + stats.drops["queue_full"]
    reporter.start()
    assert not reporter.close(timeout=5)


def test_the_memory_guard_counts_bytes_not_reports() -> None:
    """Steps of 100,000 metric names: the byte guard stops them after a few, not a million."""
    reporter, _, _ = make(max_queue_bytes=16 * 2**20)
    wide = {f"name_{i}": 1.0 for i in range(100_000)}
    with capture_events() as events:
        for step in range(300):
            reporter.report_train_step(step=step, metrics=wide)
            reporter.report_validation(step=step, metrics=wide)
    stats = reporter.stats()
    assert stats.queue_depth <= 8
    assert 600 == stats.queue_depth + stats.drops["queue_full"]
    full = [e for e in events if e["event"] == "trainreport.queue_full"]
    assert 1 == len(full)
    assert 16 * 2**20 == full[0]["max_queue_bytes"]
    reporter.close(timeout=1)


def test_the_default_guard_holds_two_seconds_of_100_metrics_every_50_us() -> None:
    """The default ``max_queue_bytes`` queues 40,000 reports of 100 metrics (2 s at 50 µs a step).

    The headroom a fast loop needs while the reporter thread sends or waits for
    the interpreter (docs/performance.md#reporter-ingest-throughput-issue-23): the
    guard drops none of them.
    """
    reporter, _, _ = make()
    reporter.report_train_step(step=1, metrics={f"m{i}": 1.0 for i in range(100)})
    report = reporter._queue[0]  # as the hot path queued it
    assert 40_000 <= ReportingConfig().max_queue_bytes // queued_bytes(report)
    reporter.close(timeout=1)


def test_a_producer_faster_than_the_thread_is_counted_per_report_and_logged_once() -> None:
    """Drops past the guard are counted one by one and logged once, however often it fills.

    The guard fills, the thread drains it, a faster loop fills it again: every
    refused report is counted (``queue_full``), one ``trainreport.queue_full``
    event in all.
    """
    reporter, _, _ = make(max_queue_bytes=2**20)
    drive(reporter)
    metrics = {f"m{i}": 1.0 for i in range(100)}
    fits = 2**20 // (REPORT_BYTES + 48 * 100) + 1  # the guard refuses at or past its budget
    step = 0
    with capture_events() as events:
        for _ in range(3):
            for _ in range(fits + 50):
                step += 1
                reporter.report_train_step(step=step, metrics=metrics)
            cycle(reporter)
    stats = reporter.stats()
    assert 3 * 50 == stats.drops["queue_full"]
    assert 1 == sum(e["event"] == "trainreport.queue_full" for e in events)
    assert not reporter.close(timeout=5)


def test_the_byte_guard_frees_what_the_reporter_thread_drained() -> None:
    """Reports the thread has applied no longer count: a long run under a small guard loses none."""
    reporter, sink, _ = make(max_queue_bytes=2**20)
    drive(reporter)
    for step in range(1, 5001):
        reporter.report_train_step(step=step, metrics={f"m{i}": 1.0 for i in range(14)})
        if step % 500 == 0:
            cycle(reporter)
    assert reporter.close(timeout=10)
    assert "queue_full" not in reporter.stats().drops
    assert 5000 == len(curve(sink.task, "train_m0"))


def test_stats_histogram_counts_every_report_call() -> None:
    """stats() counts report calls and gives ordered latency percentiles."""
    reporter, _, _ = make()
    for step in range(1, 101):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
    stats = reporter.stats()
    assert 100 == stats.report_calls
    assert 0 < stats.report_p50_us <= stats.report_p99_us <= stats.report_max_us


def test_pattern_that_never_matched_is_logged_at_close_with_arrived_names() -> None:
    """A time_series_metrics pattern that matched nothing is named at close()."""
    reporter, _, _ = make(time_series_metrics=["train_los*", "val_acc"])
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with capture_events() as events:
        reporter.close(timeout=5)
    never = [e for e in events if e["event"] == "trainreport.pattern_never_matched"]
    assert ["val_acc"] == [e["pattern"] for e in never]
    assert "train_loss" in never[0]["arrived"]


def test_scalars_keep_only_the_latest_value() -> None:
    """A metric outside time_series_metrics is a scalar: current value, no history."""
    reporter, sink, _ = make(time_series_metrics=["train_loss"])
    reporter.start()
    for step in (1, 2):
        reporter.report_train_step(step=step, metrics={"loss": float(step), "lr": 0.1 * step})
    assert reporter.close(timeout=5)
    assert ["train_loss"] == list(held(sink)["status_details"]["metrics"])
    assert 0.2 == held(sink)["status_details"]["train_lr"]


def test_flush_sends_at_once_even_during_a_backoff() -> None:
    """flush() is an explicit request: it does not wait out our own long retry delay."""
    sink = ScriptedSink()
    sink.fail_sends.append(RetryLater("connection reset"))
    reporter, _, _ = make(sink, backoff_initial_seconds=500.0)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    drive(reporter)
    cycle(reporter)
    assert isinstance(sink.results[0], RetryLater)
    assert reporter.flush(timeout=5)
    assert [(1, 1, 1.0)] == curve(sink.task, "train_loss")
    reporter.close(timeout=5)


def test_flush_honours_a_retry_after_the_destination_asked_for() -> None:
    """A server-requested delay (Retry-After) holds even for flush()."""
    sink = ScriptedSink()
    sink.fail_sends.append(RetryLater("429", delay_seconds=500.0))
    reporter, _, clock = make(sink)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    drive(reporter)
    cycle(reporter)
    assert not reporter.flush(timeout=0.3)
    assert 1 == len(sink.results)
    clock.advance(500.0)
    assert reporter.flush(timeout=5)
    reporter.close(timeout=5)


@pytest.mark.parametrize("series_suffix", [False, True])
@pytest.mark.parametrize(
    ("new_steps", "expected_steps", "replaced"),
    [
        (range(4, 21), list(range(1, 21)), False),  # continues the stored curve
        (range(6, 9), [1, 2, 3, 4, 5, 6, 7, 8], True),  # resumed from an earlier checkpoint
    ],
)
def test_long_outage_at_start_bounds_the_queue_and_merges_the_stored_curves(
    series_suffix: bool, new_steps: range, expected_steps: list[int], replaced: bool
) -> None:
    """Past drain_queue_depth, reports are applied before the read; seeding merges under them."""
    points = [{"step": s, "epoch": 1, "value": float(s)} for s in range(1, 11 if replaced else 4)]
    stored = {"status": "running", "status_details": {"metrics": {"train_loss": points}}}
    sink = ScriptedSink(MemorySink(stored, series_suffix=series_suffix))
    sink.open_results.extend(RetryLater("down") for _ in range(3))
    reporter, _, clock = make(sink, drain_queue_depth=4, backoff_initial_seconds=1.0)
    drive(reporter)
    for step in new_steps:
        reporter.report_train_step(step=step, metrics={"loss": 100.0 + step})
        cycle(reporter)
    assert reporter.stats().queue_depth < 4  # applied, not held, past the depth
    for _ in range(4):
        clock.advance(10.0)
        cycle(reporter)
    assert reporter.close(timeout=5)
    points_stored = curve(sink.task, "train_loss")
    assert expected_steps == [p[0] for p in points_stored]
    assert 100.0 + new_steps[0] == points_stored[new_steps[0] - 1][2]
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())


@pytest.mark.parametrize("missing", [None, "", "   "], ids=["None", "empty", "blank"])
def test_a_missing_checkpoint_path_is_never_sent_and_the_last_good_one_stays(
    missing: object,
) -> None:
    """``path=None`` or an empty path is logged once and dropped; the stored path stays good."""
    reporter, sink, _ = make()
    reporter.start()
    reporter.report_checkpoint_saved(path="ckpt/step-10", step=10)
    with capture_events() as events:
        reporter.report_checkpoint_saved(path=missing, step=20)
        reporter.report_checkpoint_saved(path=missing, step=30)
        assert reporter.close(timeout=5)
    details = held(sink)["status_details"]
    assert ("ckpt/step-10", 10) == (details["checkpoint_path"], details["checkpoint_step"])
    sent = {r["status_details"].get("checkpoint_path", "ckpt/step-10") for r in sink.requests}
    assert {"ckpt/step-10"} == sent
    dropped = [e for e in events if e["event"] == "trainreport.report_dropped"]
    assert 1 == len(dropped)
    assert "path" == dropped[0]["field"]
    assert 2 == reporter.stats().drops["invalid_argument"]


def test_threads_with_their_own_metrics_and_counters_lose_nothing() -> None:
    """Eight threads report train steps with their own names and counters: every point stays."""
    reporter, sink, _ = make(min_report_interval_seconds=0.0)
    reporter.start()
    barrier = threading.Barrier(8)

    def report(k: int) -> None:
        barrier.wait()
        for step in range(1, 301):
            reporter.report_train_step(step=step, metrics={f"w{k}_loss": float(step)})

    threads = [threading.Thread(target=report, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reporter.close(timeout=10)
    for k in range(8):
        assert list(range(1, 301)) == [p[0] for p in curve(sink.task, f"train_w{k}_loss")]
    assert 0 == reporter.stats().rewinds


def test_a_step_going_back_replaces_only_its_own_series_tail() -> None:
    """Without a resume, a lower step replaces the tail of the series it reports into only."""
    reporter, sink, _ = make()
    reporter.start()
    for step in range(1, 11):
        reporter.report_train_step(step=step, metrics={"a": float(step)})
        if step % 5 == 0:
            reporter.report_validation(step=step, metrics={"loss": float(step)})
    reporter.report_train_step(step=3, metrics={"b": 3.0})
    reporter.report_train_step(step=7, metrics={"a": 70.0})
    assert reporter.close(timeout=5)
    assert [(s, float(s)) for s in range(1, 7)] + [(7, 70.0)] == [
        (p[0], p[2]) for p in curve(sink.task, "train_a")
    ]
    assert [3] == [p[0] for p in curve(sink.task, "train_b")]
    assert [5, 10] == [p[0] for p in curve(sink.task, "val_loss")]
    assert 1 == reporter.stats().rewinds


def _stored_run(last_train: int, val_steps: list[int]) -> dict[str, Any]:
    train = [{"step": s, "epoch": 1, "value": float(s)} for s in range(1, last_train + 1)]
    val = [{"step": s, "epoch": 1, "value": float(s)} for s in val_steps]
    return {
        "status": "failed",
        "status_details": {"metrics": {"train_loss": train, "val_loss": val}},
    }


@pytest.mark.parametrize("series_suffix", [False, True])
def test_the_run_wide_purge_happens_once_at_the_first_training_step_after_a_resume(
    series_suffix: bool,
) -> None:
    """First step 6 of 10 stored purges every series after 6; later lower steps purge nothing."""
    sink = MemorySink(_stored_run(10, [5, 10]), series_suffix=series_suffix)
    reporter, _, _ = make(sink)
    reporter.start()
    for step in (6, 7, 8):
        reporter.report_train_step(step=step, metrics={"loss": 100.0 + step})
    reporter.report_validation(step=8, metrics={"loss": 0.8})
    reporter.report_train_step(step=2, metrics={"grad_norm": 0.5})  # another series' own counter
    assert reporter.close(timeout=5)
    assert list(range(1, 9)) == [p[0] for p in curve(sink.task, "train_loss")]
    assert [5, 8] == [p[0] for p in curve(sink.task, "val_loss")]
    assert [2] == [p[0] for p in curve(sink.task, "train_grad_norm")]
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_first_step_at_the_stored_last_step_purges_the_later_validation(
    series_suffix: bool,
) -> None:
    """At or below the stored last training step: validation after it is discarded too."""
    sink = MemorySink(_stored_run(10, [5, 12]), series_suffix=series_suffix)
    reporter, _, _ = make(sink)
    reporter.start()
    reporter.report_train_step(step=10, metrics={"loss": 42.0})
    assert reporter.close(timeout=5)
    assert [5] == [p[0] for p in curve(sink.task, "val_loss")]
    assert (10, 42.0) == (
        curve(sink.task, "train_loss")[-1][0],
        curve(sink.task, "train_loss")[-1][2],
    )
    assert 10 == len(curve(sink.task, "train_loss"))


@pytest.mark.parametrize("series_suffix", [False, True])
def test_an_unnamed_and_a_named_validation_dataset_never_share_a_curve(
    series_suffix: bool,
) -> None:
    """Unnamed first keeps ``val_loss``; ``heldout`` gets its own; a resumed run keeps both."""
    sink = MemorySink(series_suffix=series_suffix)
    reporter, _, _ = make(sink)
    reporter.start()
    reporter.report_validation(step=20, metrics={"loss": 1.5})
    reporter.report_validation(step=20, metrics={"loss": 1.2}, dataset="heldout")
    assert reporter.close(timeout=5)
    assert [(20, 1, 1.5)] == curve(sink.task, "val_loss")
    assert [(20, 1, 1.2)] == curve(sink.task, "val_heldout_loss")
    assert ["unnamed", "heldout"] == held(sink)["status_details"]["val_datasets"]
    resumed, _, _ = make(sink)
    resumed.start()
    resumed.report_validation(step=30, metrics={"loss": 1.1}, dataset="heldout")
    resumed.report_validation(step=30, metrics={"loss": 1.4})
    assert resumed.close(timeout=5)
    assert [20, 30] == [p[0] for p in curve(sink.task, "val_loss")]
    assert [1.5, 1.4] == [p[2] for p in curve(sink.task, "val_loss")]
    assert [1.2, 1.1] == [p[2] for p in curve(sink.task, "val_heldout_loss")]


def test_a_named_dataset_first_leaves_the_unnamed_one_its_own_curve() -> None:
    """``heldout`` first keeps ``val_loss``; the unnamed dataset goes to ``val_unnamed_loss``."""
    reporter, sink, _ = make()
    reporter.start()
    reporter.report_validation(step=20, metrics={"loss": 1.2}, dataset="heldout")
    reporter.report_validation(step=20, metrics={"loss": 1.5})
    assert reporter.close(timeout=5)
    assert [(20, 1, 1.2)] == curve(sink.task, "val_loss")
    assert [(20, 1, 1.5)] == curve(sink.task, "val_unnamed_loss")
    assert ["heldout", "unnamed"] == held(sink)["status_details"]["val_datasets"]


def _with_foreign_series(series_suffix: bool) -> MemorySink:
    train = [{"step": s, "epoch": 1, "value": float(s)} for s in range(1, 101)]
    foreign = [{"step": s, "epoch": 1, "value": 0.5} for s in (3, 2, 1)]  # steps go backwards
    stored = {
        "status": "running",
        "status_details": {"metrics": {"train_loss": train, "other_tool": foreign}},
    }
    return MemorySink(stored, series_suffix=series_suffix)


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_series_the_client_cannot_parse_is_kept_and_the_rest_resumes(
    series_suffix: bool,
) -> None:
    """Damage is judged per series: the unreadable one stays as stored, train_loss continues."""
    sink = _with_foreign_series(series_suffix)
    foreign = held(sink)["status_details"]["metrics"]["other_tool"]
    reporter, _, _ = make(sink)
    with capture_events() as events:
        reporter.start()
        for step in range(101, 111):
            reporter.report_train_step(step=step, metrics={"loss": float(step)})
        assert reporter.close(timeout=5)
    assert list(range(1, 111)) == [p[0] for p in curve(sink.task, "train_loss")]
    assert foreign == held(sink)["status_details"]["metrics"]["other_tool"]
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())
    unreadable = [e for e in events if e["event"] == "trainreport.stored_series_unreadable"]
    assert ["other_tool"] == [e["series"] for e in unreadable]


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_series_this_run_records_replaces_the_unreadable_one_of_its_name(
    series_suffix: bool,
) -> None:
    """This run's own ``other_tool`` curve replaces the unreadable stored one (logged)."""
    sink = _with_foreign_series(series_suffix)
    reporter, _, _ = make(sink)
    with capture_events() as events:
        reporter.start()
        reporter.report_metrics(step=101, metrics={"tool": 1.0}, phase="other")
        assert reporter.close(timeout=5)
    assert [(101, 1, 1.0)] == curve(sink.task, "other_tool")
    assert 100 == len(curve(sink.task, "train_loss"))
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())
    assert any(e["event"] == "trainreport.stored_series_replaced" for e in events)


def test_a_checkpoint_every_3_s_never_starves_the_curves_in_full_state_mode() -> None:
    """Events more often than the interval: curves still go every 10 s, not only at close."""
    reporter, sink, clock = make()
    drive(reporter)
    cycle(reporter)
    for second in range(1, 61):
        clock.advance(1.0)
        reporter.report_train_step(step=second, metrics={"loss": 1.0 / second})
        if second % 3 == 0:
            reporter.report_checkpoint_saved(path=f"ckpt/{second}", step=second)
        cycle(reporter)
    curve_sends = [r for r in sink.requests if "metrics" in r["status_details"]]
    assert len(curve_sends) >= 5
    last = curve_sends[-1]["status_details"]["metrics"]["train_loss"]
    assert last[-1]["step"] >= 50
    reporter.close(timeout=5)


@pytest.mark.parametrize("series_suffix", [False, True])
@pytest.mark.parametrize("kind", ["train", "validation"])
def test_the_first_point_is_sent_at_once(series_suffix: bool, kind: str) -> None:
    """The opening send does not hold back the first point for a whole interval."""
    sink = MemorySink(series_suffix=series_suffix)
    reporter, _, clock = make(sink)
    reporter.start()  # not held: the report call itself must wake the reporter thread
    deadline = time.monotonic() + 5.0
    while not sink.requests and time.monotonic() < deadline:  # the opening send
        threading.Event().wait(0.005)
    opened = len(sink.requests)
    clock.advance(1.0)
    if kind == "train":
        reporter.report_train_step(step=1, metrics={"loss": 2.0})
    else:
        reporter.report_validation(step=1, metrics={"loss": 2.0})
    name = "train_loss" if kind == "train" else "val_loss"

    def sent() -> bool:
        task = sink.task
        return task is not None and name in task["status_details"].get("metrics", {})

    deadline = time.monotonic() + 5.0  # the worker polls every 10 s (real) otherwise
    while not sent() and time.monotonic() < deadline:
        threading.Event().wait(0.005)
    assert sent()
    assert len(sink.requests) == opened + 1
    reporter.close(timeout=5)


def test_logging_a_bad_name_is_bounded_however_many_distinct_names_arrive() -> None:
    """20,000 distinct unusable names: a bounded number of lines, one limit line, one summary."""
    reporter, _, _ = make(min_report_interval_seconds=0.0)
    reporter.start()
    with capture_events() as events:
        for step in range(1, 201):
            bad = {f"bad\x00{step}_{i}": 1.0 for i in range(100)}
            reporter.report_train_step(step=step, metrics={**bad, "loss": 1.0})
        assert reporter.close(timeout=10)
    dropped = [e for e in events if e["event"] == "trainreport.report_dropped"]
    assert len(dropped) <= 100
    limit = [e for e in events if e["event"] == "trainreport.log_limit_reached"]
    assert 1 == len(limit)
    summary = [e for e in events if e["event"] == "trainreport.log_suppressed"]
    assert 1 == len(summary)
    assert 20_000 == len(dropped) + summary[0]["suppressed"]
    assert 20_000 == reporter.stats().drops["invalid_name"]
    recorder = reporter._recorder
    assert recorder is not None
    assert len(recorder._record.once._seen) <= 200


def test_distinct_phases_and_datasets_past_the_name_cap_keep_nothing_per_name() -> None:
    """New phases and datasets past the name cap are refused before any per-name state grows."""
    reporter, _, _ = make(max_metric_names=10, min_report_interval_seconds=0.0)
    reporter.start()
    for step in range(1, 5001):
        reporter.report_metrics(step=step, metrics={"x": 1.0}, phase=f"p{step}")
        reporter.report_validation(step=step, metrics={"x": 1.0}, dataset=f"d{step}")
    assert reporter.close(timeout=10)
    recorder = reporter._recorder
    assert recorder is not None
    assert len(recorder._names.tables) <= 40
    assert len(recorder._record.datasets.datasets) <= 10
    assert len(recorder._record.once._seen) <= 200
    assert reporter.stats().drops["name_cap"] >= 9_980


def test_every_send_carries_a_newer_updated_at_than_the_one_before() -> None:
    """updated_at strictly increases, to the millisecond, even for sends within one second.

    A plain job API cannot fence a request delayed in the network; a strictly
    newest ``updated_at`` on the final send is what a destination can order by.
    """
    reporter, sink, _ = make()
    reporter.start()
    for step in range(1, 31):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
        assert reporter.flush(timeout=5)
    reporter.report_completed()
    assert reporter.close(timeout=5)
    stamps = [r["status_details"]["updated_at"] for r in sink.requests]
    assert len(stamps) >= 31
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert all(len(s) == len("2026-11-29T16:03:39.120Z") and s.endswith("Z") for s in stamps)
    assert stamps[-1] == held(sink)["status_details"]["updated_at"]


class _LosesResponses(ScriptedSink):
    """Applies every send, but the next ``lose`` answers never arrive (a lost response)."""

    def __init__(self, series_suffix: bool) -> None:
        super().__init__(MemorySink(series_suffix=series_suffix))
        self.lose = 0

    def send(self, update: Any, *, timeout_seconds: float | None = None) -> Any:
        result = super().send(update, timeout_seconds=timeout_seconds)
        if self.lose:
            self.lose -= 1
            return RetryLater("connection lost after the write")
        return result


@pytest.mark.parametrize("series_suffix", [False, True])
@pytest.mark.parametrize("vanishing", ["eta_seconds", "current value"])
def test_a_key_a_lost_response_delivered_is_still_in_the_snapshot(
    series_suffix: bool, vanishing: str
) -> None:
    """Found by the stateful test: a details key sent in a request whose answer was lost,
    and no longer computable afterwards (the ETA after a step goes back, the current value
    of a metric that turned NaN), stays on the server: snapshot() must show it too."""
    sink = _LosesResponses(series_suffix)
    reporter, _, clock = make(sink)
    drive(reporter)
    reporter.report_training_start(max_steps=100)
    cycle(reporter)
    for step in (1, 2):
        clock.advance(1.0)
        reporter.report_train_step(step=step, metrics={"loss": 1.0, "lr": 0.1})
    sink.lose = 1
    clock.advance(10.0)
    cycle(reporter)  # applied by the destination, the answer lost
    if vanishing == "eta_seconds":
        reporter.report_train_step(step=1, metrics={"loss": 0.5})
    else:
        reporter.report_train_step(step=3, metrics={"loss": math.nan, "lr": math.nan})
    assert reporter.close(timeout=5)
    assert without_updated_at(sink.task) == without_updated_at(reporter.snapshot())


def test_the_byte_estimate_of_every_report_kind_returns_to_zero_once_drained() -> None:
    """The report calls add what queued_bytes() says; the reporter thread takes it all back."""
    reporter, _, _ = make()
    reporter.report_train_step(step=1, metrics={"a": 1.0, "b": 2})
    reporter.report_train_step(step=2, metrics={"a": _Item(3.0)})  # converted on this thread
    reporter.report_train_step(step=3, metrics=None)
    reporter.report_train_step(step=4, metrics=[1, 2])  # type: ignore[arg-type]
    reporter.report_validation(step=4, metrics={"loss": 1.0}, dataset="d")
    reporter.report_metrics(step=4, metrics={"x": 1.0, "y": 2.0}, phase="test")
    reporter.report_hyperparameters(params={"lr": 0.1, "layers": [1, 2, 3]})
    reporter.report_checkpoint_saved(path="c", step=4)
    reporter.report_completed()
    expected = sum(queued_bytes(item) for item in reporter._queue)
    assert expected == reporter.stats().queue_bytes
    assert expected > 9 * REPORT_BYTES
    reporter.start()
    assert reporter.close(timeout=5)
    assert 0 == reporter.stats().queue_bytes
    assert 0 == reporter._queued_bytes


def test_a_drain_during_a_report_calls_byte_estimate_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reporter thread may subtract what it drained while a report call sizes its report
    (a call is where CPython switches threads): the call's sum keeps that subtraction."""
    reporter, _, _ = make()
    reporter.report_epoch_end(epoch=1)  # one report queued: REPORT_BYTES
    assert REPORT_BYTES == reporter._queued_bytes

    def sized_while_draining(item: object) -> int:
        reporter._drained(REPORT_BYTES, True)  # the reporter thread took the first report
        return queued_bytes(item)

    monkeypatch.setattr(_reporter, "queued_bytes", sized_while_draining)
    reporter.report_validation(step=1, metrics={"loss": 1.0})
    assert queued_bytes(reporter._queue[-1]) == reporter._queued_bytes


class _Item:
    """A 0-d tensor stand-in: a value with ``.item()``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


@pytest.mark.parametrize(
    ("first_run_epochs", "resumed_epoch_of"),
    [
        # 0-based `for epoch in range(n)`: stored epochs 1, 2; the resumed process
        # reports index 1 first, which alone would read as 1-based epoch 1.
        (lambda s: (s - 1) // 100, lambda s: (s - 1) // 100),
        # 1-based counting: index 2 is epoch 2 either way the rule is chosen.
        (lambda s: (s - 1) // 100 + 1, lambda s: (s - 1) // 100 + 1),
    ],
    ids=["zero_based", "one_based"],
)
def test_a_resumed_process_keeps_the_stored_epochs_continuous(
    first_run_epochs: Callable[[int], int], resumed_epoch_of: Callable[[int], int]
) -> None:
    """The int-epoch base is read from the stored curve, not from the first index alone."""
    sink = MemorySink(series_suffix=True)
    first, _, _ = make(sink)
    first.start()
    for step in range(1, 151):
        first.report_train_step(step=step, epoch=first_run_epochs(step), metrics={"loss": 1.0})
    assert first.close(timeout=5)

    resumed, _, _ = make(sink)
    resumed.start()
    for step in range(121, 201):
        resumed.report_train_step(step=step, epoch=resumed_epoch_of(step), metrics={"loss": 2.0})
    assert resumed.close(timeout=5)
    epochs = {step: epoch for step, epoch, _ in curve(sink.task, "train_loss")}
    assert {1} == {epochs[s] for s in range(1, 101)}
    assert {2} == {epochs[s] for s in range(101, 201)}


def test_stats_are_assembled_alone_from_the_queue_before_any_driver_exists() -> None:
    """assemble_stats needs no Worker: before start() (no driver, no recorder) the values the
    queued reports carry count as recorded and unsent, and zero caller drops are left out."""
    short_form = {"a": 1.0, "b": 2.0, TRAIN_TIME: 0.0, TRAIN_STEP: 1, TRAIN_EPOCH: None}
    stats = assemble_stats(
        state="new",
        destinations=2,
        driver=None,
        recorder=None,
        histogram=LatencyHistogram(),
        report_calls=2,
        queued=[completed(0.0), short_form],
        queued_bytes=-5,  # an estimate a racing drain took below zero reads as 0
        caller_drops={"queue_full": 0, "after_close": 3},
    )
    assert (2, 0, 2, 2, 0) == (
        stats.points_recorded,
        stats.points_delivered,
        stats.points_unsent,
        stats.queue_depth,
        stats.queue_bytes,
    )
    assert {"after_close": 3} == dict(stats.drops)
    assert ((), None, 2) == (stats.destinations, stats.journal, stats.report_calls)


def test_heartbeat_sends_when_nothing_changed() -> None:
    """With no new data a send still goes every heartbeat_seconds (docs/design.md#debounce)."""
    clock = FakeClock()
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(heartbeat_seconds=60.0), clock=clock, rank=0)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    drive(reporter)
    worker = reporter._worker
    assert worker is not None
    worker.cycle()
    sent = len(sink.requests)
    clock.advance(59.0)
    worker.cycle()
    assert sent == len(sink.requests)
    clock.advance(1.0)
    worker.cycle()
    assert sent + 1 == len(sink.requests)
    reporter.close(timeout=5)


def test_old_unsent_data_is_warned_about_at_a_limited_rate() -> None:
    """When data stays undelivered past unsent_warning_seconds, one warning per period."""
    clock = FakeClock()
    sink = ScriptedSink()
    sink.fail_sends.extend(RetryLater("down") for _ in range(1000))
    config = ReportingConfig(
        unsent_warning_seconds=100.0,
        backoff_initial_seconds=1.0,
        backoff_max_seconds=1.0,
        backoff_jitter=0.0,
    )
    reporter = Reporter(sink, config, clock=clock, rank=0)
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker = reporter._worker
    assert worker is not None
    with capture_events() as events:
        for _ in range(25):
            clock.advance(10.0)
            worker.cycle()
    warnings = [e for e in events if e["event"] == "trainreport.unsent_data_old"]
    assert 2 == len(warnings)  # at ~100 s and ~200 s of the 250 s
    assert 1 == warnings[0]["unsent_points"]
    reporter.close(timeout=0.5)
