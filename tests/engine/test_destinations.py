"""Several destinations: one record, each destination on its own schedule, none delaying another.

Real parts where they matter: the reference server over real sockets (suffix
mode and the plain full-state job API side by side), a server that accepts and
never answers (a hanging destination), and the reporter's own thread. The
result handling is also driven without threads, as a function of ``now``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from faults import black_hole_server
from helpers import ScriptedSink, curve, drive, without_updated_at
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
    Split,
)
from trainreport._engine._core import Regime, next_wait
from trainreport._engine._destination import (
    Destination,
    Job,
    adopt,
    new_destination,
    seed_source,
    settle_error,
    settle_open,
    settle_send,
    warn_if_unsent_old,
)
from trainreport._engine._scheduler import SendScheduler
from trainreport._record._machines import DestinationState
from trainreport._record._recorder import Recorder
from trainreport.server import ServerHandle
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)

FAST = ReportingConfig(
    min_report_interval_seconds=0.05,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.2,
    backoff_jitter=0.0,
    close_retry_max_seconds=0.2,
)


def stored(sink: Any) -> dict[str, Any] | None:
    return without_updated_at(sink.task)


def test_reporter_takes_one_sink_or_a_list_but_not_both() -> None:
    """``Reporter(sink)`` keeps working; ``sinks=[...]`` is the list; both, none or empty: error."""
    one, two = MemorySink(), MemorySink()
    assert (one,) == Reporter(one).sinks
    assert (one, two) == Reporter(sinks=[one, two]).sinks
    assert one is Reporter(sinks=[one, two]).sink
    bad_arguments: list[dict[str, Any]] = [
        {},
        {"sink": one, "sinks": [two]},
        {"sinks": []},
        {"sinks": [one, one]},
    ]
    for bad in bad_arguments:
        with pytest.raises(ConfigError) as info:
            Reporter(**bad)
        assert 1 == len(info.value.problems)  # one line that says what to do, not its letters
        assert "sink" in info.value.problems[0]


def test_two_healthy_destinations_of_different_wire_modes_hold_the_same_record(
    server: ServerHandle,
) -> None:
    """The reference server's extension and its plain full-state API both get every point."""
    suffix = HttpSink(server.url, "two-a", use_extension=True)
    full = HttpSink(server.url, "two-b", use_extension=False)
    reporter = Reporter(sinks=[suffix, full], config=FAST, rank=0).start()
    reporter.report_training_start(max_steps=40)
    for step in range(1, 41):
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": 1.0 / step})
        if step % 10 == 0:
            reporter.report_validation(step=step, metrics={"loss": 2.0 / step})
            reporter.report_checkpoint_saved(path=f"ckpt/{step}", step=step)
    reporter.report_completed()
    assert reporter.close(timeout=10)
    records = [_get(server, job) for job in ("two-a", "two-b")]
    assert records[0] == records[1] == without_updated_at(reporter.snapshot())
    assert list(range(1, 41)) == [p[0] for p in curve(records[1], "train_loss")]
    stats = reporter.stats()
    assert [0, 0] == [d.points_unsent for d in stats.destinations]
    assert stats.requests_sent == sum(d.requests_sent for d in stats.destinations)
    assert all(d.last_success_at is not None for d in stats.destinations)


def _get(server: ServerHandle, job: str) -> dict[str, Any] | None:
    import json  # noqa: PLC0415 - local to the helper

    import urllib3  # noqa: PLC0415

    response = urllib3.request("GET", f"{server.url}/v1/jobs/{job}/tasks/train", timeout=10.0)
    assert 200 == response.status
    return without_updated_at(json.loads(response.data))


@pytest.mark.slow
def test_a_hanging_destination_does_not_hold_back_the_healthy_one(server: ServerHandle) -> None:
    """One destination never answers (10 s timeouts): the other keeps its 0.05 s cadence.

    Over 1.5 s of training at 2 ms a step the healthy destination receives a
    send at least every 0.25 s; close(1 s) returns on time, False, with one
    warning naming only the hanging destination, and the healthy one holds
    every point.
    """
    with black_hole_server() as hole:
        hanging = HttpSink(hole, "hang", connect_timeout_seconds=10, read_timeout_seconds=10)
        healthy = HttpSink(server.url, "healthy")
        reporter = Reporter(sinks=[hanging, healthy], config=FAST, rank=0).start()
        step = 0
        seen: list[tuple[float, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            step += 1
            reporter.report_train_step(step=step, metrics={"loss": 1.0})
            seen.append((time.monotonic(), reporter.stats().destinations[1].requests_sent))
            threading.Event().wait(0.002)
        sends = seen[-1][1] - seen[0][1]
        with capture_events() as events:
            t0 = time.monotonic()
            delivered = reporter.close(timeout=1.0)
            took = time.monotonic() - t0
    assert sends >= 6, sends  # 1.5 s at one send per 0.05 s is ~30; a blocked thread makes 1
    assert not delivered
    assert took < 2.0
    task = _get(server, "healthy")
    assert list(range(1, step + 1)) == [p[0] for p in curve(task, "train_loss")]
    warnings = [e for e in events if e["event"] == "trainreport.close_undelivered"]
    assert 1 == len(warnings)
    assert hole.split("//")[1] in warnings[0]["destination"]


def test_a_rejecting_destination_does_not_hold_back_the_healthy_one() -> None:
    """The first destination refuses (403): logged once, long backoff; the second gets it all."""
    rejecting = ScriptedSink()
    rejecting.fail_sends.extend([Rejected("forbidden", 403)] * 100)
    healthy = MemorySink()
    clock = FakeClock()
    config = ReportingConfig(min_report_interval_seconds=10.0, backoff_jitter=0.0)
    reporter = Reporter(sinks=[rejecting, healthy], config=config, clock=clock, rank=0)
    worker = drive(reporter)
    with capture_events() as events:
        for step in range(1, 31):
            clock.advance(1.0)
            reporter.report_train_step(step=step, metrics={"loss": float(step)})
            worker.cycle()
        delivered = reporter.close(timeout=5)
    assert not delivered
    assert list(range(1, 31)) == [p[0] for p in curve(healthy.task, "train_loss")]
    assert 3 <= len(healthy.requests)  # the debounce: at once, then every 10 s, then close
    # one refusal, then the rejection backoff (300 s) until close() tries once more
    assert 2 == len(rejecting.sent)
    stats = reporter.stats().destinations
    assert (30, 0) == (stats[0].points_unsent, stats[1].points_unsent)
    assert "forbidden" == stats[0].last_error
    assert stats[1].last_error is None
    rejected = [e for e in events if e["event"] == "trainreport.send_rejected"]
    assert 1 == len(rejected)
    undelivered = [e for e in events if e["event"] == "trainreport.close_undelivered"]
    assert [repr(rejecting)[:300]] == [e["destination"] for e in undelivered]


def _task_with_loss(steps: range) -> dict[str, Any]:
    points = [{"step": s, "epoch": 1, "value": float(s)} for s in steps]
    return {"status": "running", "status_details": {"metrics": {"train_loss": points}}}


@pytest.mark.parametrize("first_suffix", [True, False], ids=["suffix-first", "full-first"])
def test_resume_seeds_from_the_first_destination_and_updates_the_other_from_its_lengths(
    first_suffix: bool,
) -> None:
    """The first holds 10 points, the second 4 of them: both end holding 1..15, each point once.

    The store is seeded from the first; the second is sent only what it
    lacks in suffix mode (from its own length, 4), everything in full state.
    """
    first = MemorySink(_task_with_loss(range(1, 11)), series_suffix=first_suffix)
    second = MemorySink(_task_with_loss(range(1, 5)), series_suffix=not first_suffix)
    clock = FakeClock()
    reporter = Reporter(sinks=[first, second], config=FAST, clock=clock, rank=0)
    worker = drive(reporter)
    for step in range(11, 16):
        reporter.report_train_step(step=step, metrics={"loss": float(step)})
    worker.cycle()
    assert reporter.close(timeout=5)
    for sink in (first, second):
        assert list(range(1, 16)) == [p[0] for p in curve(sink.task, "train_loss")]
    suffix_sink = first if first_suffix else second
    offsets = [r["series"]["train_loss"]["offset"] for r in suffix_sink.requests if "series" in r]
    assert (10 if first_suffix else 4) == offsets[0]


def test_resume_seeds_from_the_first_destination_that_holds_the_task() -> None:
    """The first destination has no task (404): the second's curves seed the store."""
    empty = MemorySink(series_suffix=True)
    holding = MemorySink(_task_with_loss(range(1, 8)), series_suffix=True)
    reporter = Reporter(sinks=[empty, holding], config=FAST, clock=FakeClock(), rank=0)
    # Both first opens answer (each on its sender) before close(); one that answers
    # during close() is waited for too (the next test).
    drive(reporter).cycle()
    reporter.report_train_step(step=8, metrics={"loss": 8.0})
    assert reporter.close(timeout=5)
    assert list(range(1, 9)) == [p[0] for p in curve(empty.task, "train_loss")]
    assert list(range(1, 9)) == [p[0] for p in curve(holding.task, "train_loss")]
    offsets = [r["series"]["train_loss"]["offset"] for r in holding.requests if "series" in r]
    assert [7] == offsets


def test_a_holder_whose_first_open_answers_during_close_keeps_its_history() -> None:
    """[empty, holder of 1..7], one report (8), close() at once: the holder's first open
    answers only after the close's first seed decision, and still seeds the store.

    Before, once close() began, the seed waited for no other first open: it was
    made "from nothing" from the empty destination, and the holder, answering a
    moment later, had its seven points replaced (``destination_replaced``).
    Deterministic: the holder's open waits at a gate that the close's first seed
    decision with the empty destination open opens.
    """
    empty = MemorySink(series_suffix=True)
    holding = ScriptedSink(MemorySink(_task_with_loss(range(1, 8)), series_suffix=True))
    holding.open_gate = threading.Event()
    # The scheduling clock stands still: the running rule (one debounce interval after
    # the first successful open) never seeds; only the closing rule decides.
    reporter = Reporter(sinks=[empty, holding], config=FAST, clock=FakeClock(), rank=0)
    reporter.start()
    worker = reporter._worker
    assert worker is not None
    core = worker.core
    decide = core.seed_if_decided

    def decide_then_let_the_holder_answer(now: float, **kwargs: Any) -> None:
        # The close pass's first own decision (not the one right after an open ended)
        # with the empty destination open and waiting: only then may the holder answer.
        waiting = (
            core.regime is Regime.CLOSING
            and not kwargs.get("patient")
            and any(d.waits_for_seed for d in core.destinations)
        )
        decide(now, **kwargs)
        if waiting and holding.open_gate is not None:
            holding.open_gate.set()

    core.seed_if_decided = decide_then_let_the_holder_answer  # type: ignore[method-assign]
    reporter.report_train_step(step=8, metrics={"loss": 8.0})
    with capture_events() as events:
        assert reporter.close(timeout=5)

    assert list(range(1, 9)) == [p[0] for p in curve(holding.inner.task, "train_loss")]
    assert list(range(1, 9)) == [p[0] for p in curve(empty.task, "train_loss")]
    assert [] == [e for e in events if e["event"] == "trainreport.destination_replaced"]


def test_closing_a_first_open_that_hangs_holds_the_other_destination_back_only_to_the_bound() -> (
    None
):
    """[healthy, one whose first open hangs], a point reported, close(1) at once: the point
    waits in the queue for the seed, which is made at the close's last attempt (1 s less
    its 0.1 s lead here), and the healthy destination still receives it by the deadline."""
    healthy = MemorySink(series_suffix=True)
    hanging = ScriptedSink(MemorySink(series_suffix=True))
    hanging.open_gate = threading.Event()
    reporter = Reporter(sinks=[healthy, hanging], config=FAST, clock=FakeClock(), rank=0)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    try:
        with capture_events() as events:
            delivered = reporter.close(timeout=1.0)
    finally:
        hanging.open_gate.set()  # let its sender thread end

    assert not delivered  # the hanging one holds nothing
    assert [1] == [p[0] for p in curve(healthy.task, "train_loss")]
    undelivered = "trainreport.close_undelivered"
    assert [repr(hanging)] == [e["destination"] for e in events if e["event"] == undelivered]


@pytest.mark.slow
def test_flush_and_close_share_the_deadline_across_destinations(server: ServerHandle) -> None:
    """With one destination hanging, flush(0.5) and close(0.8) return False on time.

    The healthy destination holds everything each time; with both healthy,
    flush() returns True.
    """
    with black_hole_server() as hole:
        hanging = HttpSink(hole, "fh", connect_timeout_seconds=10, read_timeout_seconds=10)
        healthy = HttpSink(server.url, "fh-ok")
        reporter = Reporter(sinks=[healthy, hanging], config=FAST, rank=0).start()
        for step in range(1, 21):
            reporter.report_train_step(step=step, metrics={"loss": 1.0})
        t0 = time.monotonic()
        flushed = reporter.flush(timeout=0.5)
        flush_took = time.monotonic() - t0
        assert list(range(1, 21)) == [p[0] for p in curve(_get(server, "fh-ok"), "train_loss")]
        t0 = time.monotonic()
        closed = reporter.close(timeout=0.8)
        close_took = time.monotonic() - t0
    assert (False, False) == (flushed, closed)
    assert 0.45 <= flush_took < 1.5
    assert close_took < 1.8
    both = Reporter(
        sinks=[HttpSink(server.url, "fh-2a"), HttpSink(server.url, "fh-2b", use_extension=False)],
        config=FAST,
        rank=0,
    ).start()
    both.report_train_step(step=1, metrics={"loss": 1.0})
    assert both.flush(timeout=5)
    assert both.close(timeout=5)


def test_a_superseded_destination_gets_one_request_and_no_flush_or_close_waits_for_it() -> None:
    """409 ``stale_writer`` (a later writer owns the task): one request, then none at all.

    Flushes and close() send nothing more to it and return at once with False;
    the other destination gets every point; one log event; stats() says so.
    """
    superseded = ScriptedSink()
    superseded.fail_sends.extend([Rejected("HTTP 409 stale_writer: stop writing", 409)] * 100)
    healthy = MemorySink()
    clock = FakeClock()
    config = ReportingConfig(min_report_interval_seconds=1.0, backoff_jitter=0.0)
    reporter = Reporter(sinks=[superseded, healthy], config=config, clock=clock, rank=0)
    worker = drive(reporter)
    with capture_events() as events:
        for step in range(1, 31):
            clock.advance(400.0)  # past the rejection backoff every step
            reporter.report_train_step(step=step, metrics={"loss": float(step)})
            worker.cycle()
            if step % 10 == 0:
                assert not reporter.flush(timeout=30.0)  # no real wait: the test would hang
        delivered = reporter.close(timeout=30.0)
    assert not delivered
    assert 1 == len(superseded.sent)
    assert list(range(1, 31)) == [p[0] for p in curve(healthy.task, "train_loss")]
    stats = reporter.stats().destinations
    assert (True, False) == (stats[0].superseded, stats[1].superseded)
    names = [e["event"] for e in events]
    assert 1 == names.count("trainreport.destination_superseded")
    assert "trainreport.send_rejected" not in names
    after = names[names.index("trainreport.destination_superseded") :]
    assert "trainreport.unsent_data_old" not in after  # its data will never be sent: no nagging


def test_settling_a_send_is_a_function_of_the_destination_and_now() -> None:
    """No thread, no clock: Retry-After, a rejection and a delivery, each at a given ``now``."""
    recorder = Recorder(ReportingConfig(), destinations=2)
    recorder.start_attempt()
    recorder.seed(_stored_nothing())
    sink = MemorySink()
    dest = Destination(index=1, sink=sink, scheduler=SendScheduler(backoff_jitter=0.0))
    build = recorder.build_update(1, wall="2026-01-01T00:00:00.000Z", full_state=True)
    job = Job(build)
    settle_send(dest, recorder, job, RetryLater("busy", 30.0), 100.0, wall="w", queue_empty=True)
    assert (130.0, 1) == (dest.scheduler.not_before, dest.requests_failed)
    assert 130.0 == dest.scheduler.due_at()
    settled = settle_send(
        dest, recorder, job, Delivered(cancel_requested=True), 131.0, wall="w1", queue_empty=True
    )
    assert (True, True) == (settled.delivered, settled.cancel)
    assert ("w1", 0) == (dest.last_success_at, dest.scheduler.consecutive_failures)
    assert recorder.all_delivered(1)
    assert not recorder.all_delivered(0)  # the other destination holds nothing yet
    settle_send(dest, recorder, job, Rejected("no", 403), 140.0, wall="w2", queue_empty=True)
    assert dest.scheduler.due_at() is None  # nothing new: the same data is not retried


def test_a_destination_moves_through_its_table_as_its_answers_settle() -> None:
    """No thread, no clock: unreachable, then answered, then opened, seeded, reopened, superseded.

    Each answer moves the one state, and what the engine reads off it (answered,
    first open ended, open, in step) follows from that state alone.
    """
    recorder = Recorder(ReportingConfig(), destinations=1)
    recorder.start_attempt()
    dest = Destination(index=0, sink=MemorySink(), scheduler=SendScheduler(backoff_jitter=0.0))
    seen = [dest.state]
    settle_open(dest, recorder, RetryLater("refused", unreachable=True), 1.0)
    seen.append(dest.state)
    assert (False, True) == (dest.answered, dest.first_open_ended)
    settle_open(dest, recorder, RetryLater("busy"), 2.0)
    seen.append(dest.state)
    assert dest.answered
    settle_open(dest, recorder, Opened(stored_task=None), 3.0)
    seen.append(dest.state)
    assert (True, False, False) == (dest.is_open, dest.in_step, dest is seed_source([dest]))
    source = seed_source([dest])
    recorder.seed(_stored_nothing())
    assert source is None  # a new task: seeded from nothing
    adopt(dest, recorder)
    seen.append(dest.state)
    build = recorder.build_update(0, wall="w", full_state=True)
    settle_send(dest, recorder, Job(build), Resynchronise("gone"), 4.0, wall="w", queue_empty=True)
    seen.append(dest.state)
    settle_open(dest, recorder, Opened(stored_task=None), 5.0)
    seen.append(dest.state)
    settle_send(
        dest, recorder, Job(build), Rejected("stale_writer", 409), 6.0, wall="w", queue_empty=True
    )
    seen.append(dest.state)

    ds = DestinationState
    assert [
        ds.NEW,
        ds.UNREACHABLE,
        ds.REFUSED,
        ds.SEEDING,
        ds.OPEN,
        ds.REOPENING,
        ds.OPEN,
        ds.SUPERSEDED,
    ] == seen
    assert (True, None) == (dest.superseded, dest.due_at())


@pytest.mark.parametrize("state", list(DestinationState))
def test_whether_a_send_is_ever_due_follows_the_destination_s_state_alone(
    state: DestinationState,
) -> None:
    """One source of truth: a superseded destination is never due, whatever its scheduler says.

    In every other state its scheduler decides; nothing but the state (the table's
    ``superseded``) stops a destination for good.
    """
    scheduler = SendScheduler(backoff_jitter=0.0)
    scheduler.note_change(5.0, urgent=True)
    dest = Destination(index=0, sink=MemorySink(), scheduler=scheduler, state=state)

    expected = None if state is DestinationState.SUPERSEDED else 5.0
    assert (expected, expected is not None) == (dest.due_at(), dest.is_due(10.0))


def test_a_superseded_destination_is_never_due_again_whatever_is_recorded() -> None:
    """A later writer owns the task: no new data, event, first point or wait makes a send due,
    and the reporter thread sets no wake for it (its pending data is no busy loop)."""
    recorder = Recorder(ReportingConfig(), destinations=1)
    recorder.start_attempt()
    recorder.seed(_stored_nothing())
    dest = Destination(index=0, sink=MemorySink(), scheduler=SendScheduler(backoff_jitter=0.0))
    settle_open(dest, recorder, Opened(stored_task=None), 0.0)
    build = recorder.build_update(0, wall="w", full_state=True)
    settle_send(dest, recorder, Job(build), Delivered(), 0.0, wall="w", queue_empty=True)
    settle_send(
        dest, recorder, Job(build), Rejected("stale_writer", 409), 1.0, wall="w", queue_empty=True
    )
    dest.scheduler.note_change(2.0, urgent=True, first_point=True)

    wait = next_wait(2.0, [dest], interval=10.0, flush_now=False, journal_due=None)
    assert (True, None, False, 10.0) == (dest.superseded, dest.due_at(), dest.is_due(1e6), wait)


def test_only_a_sink_that_keeps_its_own_run_log_is_sent_to_at_the_shorter_interval(
    tmp_path: Path,
) -> None:
    """The run log's own interval holds for a sink that keeps one (``Sink.local_run_log``)
    and no other, whatever the driver hands in: one rule, read in one place."""
    config = ReportingConfig(min_report_interval_seconds=10.0)
    sinks = (FileSink(tmp_path / "run.log"), MemorySink())

    intervals = [
        new_destination(0, sink, config, interval=1.0).scheduler.min_interval for sink in sinks
    ]
    assert [1.0, 10.0] == intervals


def test_an_open_that_raised_ends_the_first_open() -> None:
    """A sink whose open raised answered (something ran) and ended its first open, so the
    resume rule does not wait for it as for an open still in flight."""
    recorder = Recorder(ReportingConfig(), destinations=2)
    recorder.start_attempt()
    broken, fine = (
        Destination(index=i, sink=MemorySink(), scheduler=SendScheduler(backoff_jitter=0.0))
        for i in range(2)
    )
    settle_open(fine, recorder, Opened(stored_task=None), 1.0)
    settle_error(broken, RuntimeError("bug"), 1.0, opening=True)

    assert (DestinationState.REFUSED, True) == (broken.state, broken.answered)
    assert None is seed_source([broken, fine])  # decided: no waiting for the broken one


def _stored_nothing() -> Any:
    from trainreport._wire._payloads import StoredState  # noqa: PLC0415

    return StoredState(series={})


def test_the_unsent_data_warning_names_each_destination_once_per_period() -> None:
    """Data unsent for ``limit`` s: one warning per destination per period; 0 turns it off."""
    recorder = Recorder(ReportingConfig(), destinations=2)
    recorder.start_attempt()
    recorder.seed(_stored_nothing())
    stuck, fine = (
        Destination(index=i, sink=MemorySink(), scheduler=SendScheduler(backoff_jitter=0.0))
        for i in range(2)
    )
    stuck.scheduler.note_change(0.0)
    stuck.label = "stuck"

    with capture_events() as events:
        for now in (59.0, 60.0, 61.0, 119.0, 120.0):
            warn_if_unsent_old([stuck, fine], recorder, 60.0, now)
        warn_if_unsent_old([stuck, fine], recorder, 0.0, 1000.0)

    warned = [(e["destination"], e["age_seconds"]) for e in events]
    assert [("stuck", 60.0), ("stuck", 120.0)] == warned


def test_a_full_state_split_without_sizes_halves_the_points_sent_each_time_and_logs_once() -> None:
    """Any sink's 413 (no sizes said): each refusal halves the points; one event; stats say so.

    Driven without a thread: a scripted full-state sink refuses twice, then takes
    the curves, which cover the run (first and last step, the spike, the latest value).
    """
    sink = ScriptedSink(MemorySink())
    sink.fail_sends.extend([Split("too large"), Split("too large")])
    clock = FakeClock()
    reporter = Reporter(sink, ReportingConfig(backoff_jitter=0.0), clock=clock, rank=0)
    for step in range(1, 1001):
        loss = 50.0 if step == 500 else 1.0 / step
        reporter.report_train_step(step=step, epoch=1, metrics={"loss": loss, "lr": 0.1})
    with capture_events() as events:
        worker = drive(reporter)
        for _ in range(5):
            worker.cycle()
        assert reporter.close(timeout=5)
    sent = [u.point_count for u in sink.sent if u.series]
    assert 2000 == sent[0]
    assert sent[1] <= sent[0] // 2
    assert sent[2] <= sent[1] // 2
    kept = curve(sink.inner.task, "train_loss")
    assert (1, 1000) == (kept[0][0], kept[-1][0])
    assert (500, 1, 50.0) in kept
    assert 1.0 / 1000 == kept[-1][2]
    budget = reporter.stats().destinations[0].thinned_to
    assert budget is not None
    assert len(kept) <= budget < 500
    assert ["trainreport.metrics_thinned"] == [
        e["event"] for e in events if e["event"].startswith("trainreport.metrics_")
    ]
