"""The promise "close and flush return by their deadline" (docs/design.md#guarantees), in one place.

Exact, against the engine core (tests/core_driving.py): time is an argument, one
fake time moved by what a request took or what the core said to wait, so the
close's deadline properties (no request's timeout ends after the deadline; the
last attempt starts in time; a destination that never answered gets the short
deadline) are asserted without real time and without patching any clock.

Then the reporter's own deadlines, in real time, with generous upper bounds (a
deadline is the behaviour itself): a close and a flush against a destination
whose sends hang or keep failing, an infinite timeout, a raising sink retried
within the budget.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core_driving import (
    deliver,
    kind,
    make_core,
    make_recovering_core,
    open_all,
    perform,
    record,
    run_close,
)
from helpers import ScriptedSink, curve, drive
from trainreport import Delivered, MemorySink, Reporter, ReportingConfig, RetryLater
from trainreport._engine._core import LAST_ATTEMPT_LEAD_SECONDS
from trainreport._engine._destination import Job
from trainreport._engine._journal_feed import RecoveryOutcome, run_recovery
from trainreport._wire._sink_interface import OpenResult, SendResult
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(60)

# ------------------------------------------------------------- exact, on the core


@settings(max_examples=200, deadline=None)
@given(
    timeout=st.floats(0.01, 30.0),
    answers=st.lists(
        st.tuples(
            st.sampled_from(["hang", "busy", "retry_after", "down"]),
            st.floats(0.0, 5.0),
        ),
        min_size=1,
        max_size=40,
    ),
    cap=st.floats(0.05, 10.0),
)
# A failure that leaves less than a millisecond: no request is started with a timeout
# longer than what is left (it would end after the deadline).
@example(timeout=1.0, answers=[("busy", 0.9995)], cap=1.0)
def test_no_request_of_a_close_ends_after_its_deadline(
    timeout: float, answers: list[tuple[str, float]], cap: float
) -> None:
    """Whatever the destination answers and however long it takes, every request's
    timeout ends by the deadline, the close itself ends by it, and it tries at least once."""
    core = make_core(close_retry_max_seconds=cap)
    open_all(core)
    record(core, 0.0, 1)
    script_answers = iter(answers * 1000)

    def script(job: Job, t: float) -> tuple[OpenResult | SendResult, float]:
        kind, seconds = next(script_answers)
        if kind == "hang":
            return RetryLater("timed out"), float("inf")
        if kind == "retry_after":
            return RetryLater("HTTP 429", delay_seconds=seconds * 10), 0.0
        if kind == "down":
            return RetryLater("refused", unreachable=True), seconds / 100
        return RetryLater("HTTP 503"), seconds

    started, ended = run_close(core, script, start=100.0, timeout=timeout)
    deadline = 100.0 + timeout

    assert started
    for _, at, job in started:
        assert job.timeout is not None
        assert at + job.timeout <= deadline
    assert ended <= deadline


def test_the_last_attempt_starts_in_time_despite_a_long_retry_after() -> None:
    """A Retry-After past the deadline leaves one last attempt, started its lead before the
    deadline (a quarter of the retry cap, or LAST_ATTEMPT_LEAD_SECONDS), and no later one."""
    core = make_core(close_retry_max_seconds=2.0)
    open_all(core)
    record(core, 0.0, 1)

    def script(job: Job, t: float) -> tuple[OpenResult | SendResult, float]:
        return RetryLater("HTTP 429", delay_seconds=3600.0), 0.0

    started, ended = run_close(core, script, start=0.0, timeout=10.0)

    lead = max(2.0 / 4, LAST_ATTEMPT_LEAD_SECONDS)
    assert [0.0, 10.0 - lead] == [at for _, at, _ in started]
    assert 10.0 - lead == ended


def test_a_destination_back_before_the_deadline_receives_the_tail() -> None:
    """Down for 6.5 s of a 10 s close with a capped backoff: it is retried and the tail lands."""
    core = make_core(close_retry_max_seconds=1.0)
    open_all(core)
    record(core, 0.0, 1)

    def script(job: Job, t: float) -> tuple[OpenResult | SendResult, float]:
        return (RetryLater("HTTP 503"), 0.1) if t < 6.5 else (Delivered(), 0.1)

    started, ended = run_close(core, script, start=0.0, timeout=10.0)

    assert core.recorder.all_delivered(0)
    assert ended < 10.0
    gaps = [b - a for (_, a, _), (_, b, _) in itertools.pairwise(started)]
    assert all(gap <= 1.0 + 0.1 + 1e-9 for gap in gaps)  # the cap, plus the request's time


def test_a_destination_that_never_answered_gets_the_short_deadline() -> None:
    """Nothing ever answered its opens: it is given close_unanswered_seconds, not the whole
    timeout, while another destination that answered keeps the whole deadline."""
    core = make_core(2, close_unanswered_seconds=1.0)

    def script(job: Job, t: float) -> tuple[OpenResult | SendResult, float]:
        if job is core.destinations[0].job:
            return RetryLater("refused", unreachable=True), 0.0
        return RetryLater("HTTP 503"), 0.0

    started, _ = run_close(core, script, start=0.0, timeout=30.0)

    wrong_url = [at + (job.timeout or 0) for d, at, job in started if d == 0]
    answered = [at for d, at, _ in started if d == 1]
    assert wrong_url
    assert max(wrong_url) <= 1.0
    assert max(answered) > 1.0


@pytest.mark.parametrize(
    ("before", "budget"),
    [([], 1.0), ([RetryLater("timed out")], 30.0), ([RetryLater("HTTP 503")], 30.0)],
    ids=["first open in flight", "answered a timeout", "answered a 503"],
)
def test_a_destination_whose_first_open_is_in_flight_at_close_never_answered(
    before: list[OpenResult], budget: float
) -> None:
    """The rule of ``close_unanswered_seconds``: a destination that nothing came back from
    since ``start()`` gets it, also when its connection was accepted and its first open
    still waits when ``close()`` begins (a host that hangs looks like a wrong URL whose
    connect hangs); once any open was answered (a timeout, any HTTP status) the close
    waits the whole deadline for the open in flight. No request of the close is started
    either way (one is in flight), and the close ends at the destination's deadline."""
    core = make_core(close_unanswered_seconds=1.0)
    dest = core.destinations[0]
    t = 0.0
    for answer in before:
        job = core.running_request(dest, t)
        assert job is not None
        job.result, job.done = answer, True
        core.settle(dest, t, t, queue_empty=True)
        t = dest.scheduler.due_at() or t
    in_flight = core.running_request(dest, t)  # never answered: the service hangs
    assert in_flight is not None

    def script(job: Job, t: float) -> tuple[OpenResult | SendResult, float]:
        raise AssertionError("no request expected: the open is in flight")

    started, ended = run_close(core, script, start=t, timeout=30.0)

    assert ([], t + budget) == (started, ended)


@pytest.mark.parametrize("took", [0.0, 0.5])
def test_a_close_with_everything_delivered_makes_no_request(took: float) -> None:
    """Every destination holds everything: closing is done at once, with no request."""
    core = make_core(2)
    open_all(core)
    deliver(core, 0.0)

    def script(job: Job, t: float) -> tuple[OpenResult | SendResult, float]:
        raise AssertionError("no request expected")

    started, ended = run_close(core, script, start=took, timeout=5.0)

    assert ([], took) == (started, ended)


@pytest.mark.parametrize(("answer", "took"), [("hang", float("inf")), ("busy", 0.2)])
def test_no_journal_recovery_request_of_a_close_ends_after_its_deadline(
    tmp_path: Path, answer: str, took: float
) -> None:
    """close() while a dead process's journal is recovered: every recovery request (the
    left-over's sends, the opens) gets a timeout that ends by the deadline, and the close ends
    by it; the destination opened, so it keeps the whole deadline, not the unanswered one."""
    sink = ScriptedSink()
    core = make_recovering_core(tmp_path, sink, left_overs=1, close_unanswered_seconds=0.5)

    def script(job: Job, t: float) -> tuple[OpenResult | SendResult | RecoveryOutcome, float]:
        if job.recovery is None or job.recovery.reopen:
            return MemorySink().open(), 0.0
        timed_out = RetryLater("timed out") if answer == "hang" else RetryLater("HTTP 503")
        sink.fail_sends.append(timed_out)
        return run_recovery(job.recovery, sink, job.timeout), took

    started, ended = run_close(core, script, start=0.0, timeout=5.0)

    recovering = [(at, job) for _, at, job in started if "recover" == kind(job)]
    assert recovering
    for _, at, job in started:
        assert job.timeout is not None
        assert at + job.timeout <= 5.0
    assert ended <= 5.0
    first_at, first = recovering[0]  # right after the first open, before it is settled
    assert 5.0 == first_at + (first.timeout or 0.0)


def test_closing_the_seed_waits_for_a_recovering_journal_destination_past_the_unanswered_budget(
    tmp_path: Path,
) -> None:
    """close() while the journal's destination delivers a dead process's journal (it opened;
    its open is settled only once the recovery ends): the seed waits for it like any first
    open that answered, to the close's last attempt, not only ``close_unanswered_seconds``
    (seeded from the other destination alone, the recovered history would be replaced)."""
    sink = ScriptedSink()
    core = make_recovering_core(
        tmp_path, sink, left_overs=1, others=1, close_unanswered_seconds=0.5
    )
    journal_dest, other = core.destinations
    core.close(deadline=5.0, started=0.0)
    opened = core.close_request(other, 0.0, 0.0, queue_empty=True)
    assert opened is not None
    opened.result, opened.done = other.sink.open(), True
    core.settle(other, 0.0, 0.0, queue_empty=True, within_attempt=True)
    job = core.close_request(journal_dest, 0.0, 0.0, queue_empty=True)
    assert job is not None
    perform(core, job)
    core.settle(journal_dest, 0.0, 0.0, queue_empty=True, within_attempt=True)
    recovering = core.follow_up(journal_dest, job, 0.0, 0.0)
    assert recovering is not None
    assert "recover" == kind(recovering)

    core.seed_if_decided(1.0, real=1.0)  # the recovery's send still in flight

    assert not core.recorder.seeded


# ------------------------------------------------------------ the reporter, real time


def make(sink: Any, clock: FakeClock | None = None, **config: Any) -> Reporter:
    """A reporter over ``sink`` on a fake scheduling clock (deadlines stay real time)."""
    settings: dict[str, Any] = {"min_report_interval_seconds": 10.0, "backoff_jitter": 0.0}
    settings.update(config)
    return Reporter(sink, ReportingConfig(**settings), clock=clock or FakeClock(), rank=0)


def test_flush_returns_at_its_deadline_when_a_send_hangs() -> None:
    """A send stuck in the sink does not hold flush() past its timeout; flush() says False."""
    sink = ScriptedSink()
    sink.gate = threading.Event()  # never set: every send hangs until its timeout
    reporter = make(sink)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    started = time.monotonic()
    flushed = reporter.flush(timeout=0.5)
    took = time.monotonic() - started
    sink.gate.set()
    reporter.close(timeout=5)
    assert not flushed
    assert took < 2.5  # generous bound: the deadline is the behaviour


def test_close_with_an_infinite_timeout_returns_instead_of_raising() -> None:
    """``close(timeout=float("inf"))`` ("wait as long as it takes") delivers and returns True."""
    reporter = make(MemorySink())
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    try:
        assert reporter.close(timeout=float("inf"))
    finally:
        reporter.close(timeout=5)


def test_flush_with_an_infinite_timeout_returns_instead_of_raising() -> None:
    """``flush(timeout=float("inf"))`` delivers and returns True."""
    reporter = make(MemorySink())
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    try:
        assert reporter.flush(timeout=float("inf"))
    finally:
        reporter.close(timeout=5)


class _SinkThatRaisesOnce(ScriptedSink):
    """A custom sink with a bug: its next send raises once (then it works)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = True

    def send(self, update: Any, *, timeout_seconds: float | None = None) -> Any:
        if self.armed:
            self.armed = False
            raise ConnectionError("transient bug in a custom sink")
        return super().send(update, timeout_seconds=timeout_seconds)


def test_an_exception_from_send_during_close_is_retried_within_the_budget() -> None:
    """close() treats a raising send like a transient failure and retries before its deadline."""
    sink = _SinkThatRaisesOnce()
    reporter = make(sink, backoff_initial_seconds=0.01)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    drive(reporter)
    worker = reporter._worker
    assert worker is not None
    worker.cycle()  # the first send raises; the frozen clock holds the backoff
    sink.armed = True
    assert reporter.close(timeout=2)
    assert [(1, 1, 1.0)] == curve(sink.task, "train_loss")


def test_close_returns_false_within_its_deadline_when_sends_keep_failing() -> None:
    """A dead destination delays close() by at most its timeout, and close() says False."""
    sink = ScriptedSink()
    sink.fail_sends.extend(RetryLater("down") for _ in range(10_000))
    reporter = make(sink, backoff_initial_seconds=0.05, backoff_max_seconds=0.1)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    started = time.monotonic()
    assert not reporter.close(timeout=1.0)
    assert time.monotonic() - started < 3.0  # generous bound: the deadline is the behaviour


def test_close_returns_at_its_deadline_when_a_send_hangs() -> None:
    """A send stuck in the sink does not hold close() past its timeout."""
    sink = ScriptedSink()
    sink.gate = threading.Event()  # never set: every send hangs until its timeout
    reporter = make(sink)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    started = time.monotonic()
    assert not reporter.close(timeout=1.0)
    assert time.monotonic() - started < 3.0
    sink.gate.set()
