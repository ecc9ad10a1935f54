"""The engine core (``_engine/_core.py``) driven directly: no thread, no clock read, no sink called.

Time is an argument: each test moves one fake time (used as both the
scheduling clock and the real-time deadline's clock) by what a request took or
what the core said to wait, so the close's deadline properties are asserted
exactly, without real time and without patching any clock.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainreport import Delivered, MemorySink, Opened, ReportingConfig, RetryLater
from trainreport._engine._core import LAST_ATTEMPT_LEAD_SECONDS, EngineCore, Regime
from trainreport._engine._destination import Job, new_destination
from trainreport._engine._resume import Resume
from trainreport._record import _reports as reports
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report
from trainreport._wire._sink_interface import OpenResult, SendResult

#: What a scripted destination does with a request started at a time: its answer,
#: and how long (seconds) it took; a request never outlives its timeout.
Script = Callable[[Job, float], tuple[OpenResult | SendResult, float]]


def make_core(destinations: int = 1, **config: float) -> EngineCore:
    """A core over ``destinations`` memory sinks, the attempt begun at time 0."""
    settings_ = {"backoff_jitter": 0.0, "min_report_interval_seconds": 10.0, **config}
    cfg = ReportingConfig(**settings_)  # type: ignore[arg-type]
    recorder = Recorder(cfg, destinations=destinations)
    dests = [new_destination(i, MemorySink(), cfg) for i in range(destinations)]
    core = EngineCore(
        recorder=recorder,
        destinations=dests,
        config=cfg,
        resume=Resume(None, interval=cfg.min_report_interval_seconds),
        wall_clock=lambda: "2026-01-01T00:00:00.000Z",
    )
    core.begin(0.0)
    return core


def record(core: EngineCore, t: float, step: int) -> None:
    """One training point reported and drained at ``t``."""
    queue: deque[Report] = deque([reports.train(t, step, None, {"loss": 0.5})])
    urgent, _, has_point = core.recorder.apply_all(queue)
    core.drained(t, urgent=urgent, first_point=has_point)


def open_all(core: EngineCore) -> None:
    """Every destination opened (a new task) and the store seeded, at time 0."""
    for dest in core.destinations:
        job = core.running_request(dest, 0.0)
        assert job is not None
        assert job.build is None
        job.result, job.done = Opened(stored_task=None), True
        core.settle(dest, 0.0, 0.0, queue_empty=True)
    assert all(d.in_step for d in core.destinations)


def deliver(core: EngineCore, t: float) -> None:
    """A running send to every destination at ``t``, delivered."""
    for dest in core.destinations:
        job = core.running_request(dest, t)
        assert job is not None
        assert job.build is not None
        job.result, job.done = Delivered(), True
        core.settle(dest, t, t, queue_empty=True)


def run_close(
    core: EngineCore, script: Script, *, start: float, timeout: float
) -> tuple[list[tuple[int, float, Job]], float]:
    """The closing regime, as the driver runs it with no sender thread, on fake time.

    Returns:
        every request started, as (destination, start time, job), and the
        time the close ended.
    """
    core.close(deadline=start + timeout, started=start)
    t = start
    started: list[tuple[int, float, Job]] = []
    for _ in range(10_000):
        for dest in core.destinations:
            while True:
                core.settle(dest, t, t, queue_empty=True)
                job = core.close_request(dest, t, t, queue_empty=True)
                while job is not None:
                    started.append((dest.index, t, job))
                    result, took = script(job, t)
                    if job.timeout is not None:
                        took = min(took, job.timeout)
                    t += took
                    job.result, job.done = result, True
                    core.settle(dest, t, t, queue_empty=True, within_attempt=True)
                    job = core.follow_up(dest, job, t, t)
                if core.close_request(dest, t, t, queue_empty=True) is None:
                    break
        core.seed_if_decided(t)
        wait = core.close_wait_seconds(t)
        if wait is None:
            return started, t
        t += max(wait, 0.0)
    raise AssertionError("the close never ended")


def test_the_regime_is_running_then_flushing_then_closing() -> None:
    """One core, three regimes: a waiting flush() and then close() change which rules decide."""
    core = make_core()
    seen = [core.regime]
    core.flush.request()
    seen.append(core.regime)
    core.close(deadline=10.0, started=0.0)
    seen.append(core.regime)

    assert [Regime.RUNNING, Regime.FLUSHING, Regime.CLOSING] == seen


def test_a_flush_forces_a_send_inside_the_debounce() -> None:
    """Running, a send just delivered: nothing is due; flushing, a send goes now, curves and all."""
    core = make_core()
    open_all(core)
    dest = core.destinations[0]
    record(core, 0.0, 1)
    deliver(core, 0.0)  # the next send is the heartbeat's, at 60 s

    running = core.running_request(dest, 2.0)
    core.flush.request()
    flushing = core.running_request(dest, 2.0)

    assert running is None
    assert flushing is not None
    assert (True, True) == (flushing.complete, flushing.include_metrics)


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
