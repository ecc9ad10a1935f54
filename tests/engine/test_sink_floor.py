"""A sink's own floor between requests (``Sink.min_interval_seconds``) holds whatever the
config says: regular sends, events, retries and flush (driven by an injected clock)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from helpers import ScriptedSink, drive
from trainreport import Reporter, ReportingConfig, RetryLater
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(60)


class FlooredSink(ScriptedSink):
    """A scripted sink that asks for 5 s between requests, like Kubeflow Trainer's endpoint."""

    min_interval_seconds = 5.0


def make(sink: ScriptedSink) -> tuple[Reporter, FakeClock]:
    clock = FakeClock()
    config = ReportingConfig(
        min_report_interval_seconds=0.01, backoff_initial_seconds=0.5, backoff_jitter=0.0
    )
    return Reporter(sink, config, clock=clock, rank=0), clock


def cycle(reporter: Reporter) -> None:
    worker = reporter._worker
    assert worker is not None
    worker.cycle()


def sends_over(reporter: Reporter, clock: FakeClock, sink: ScriptedSink, seconds: int) -> list[int]:
    """Report a step and an event every second for ``seconds``; the send count after each."""
    counts = []
    for step in range(1, seconds + 1):
        clock.advance(1.0)
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        reporter.report_checkpoint_saved(path=f"ckpt-{step}", step=step)  # an urgent event
        cycle(reporter)
        counts.append(len(sink.sent))
    return counts


def test_events_every_second_are_sent_at_most_every_five_seconds() -> None:
    """A 0.01 s config interval and an event a second: the floored sink sees a send per 5 s."""
    sink = FlooredSink()
    reporter, clock = make(sink)
    drive(reporter)
    cycle(reporter)  # the first send goes at once
    counts = sends_over(reporter, clock, sink, 12)
    reporter.close(10)
    assert [1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3] == counts


def test_the_same_run_without_a_floor_sends_every_second() -> None:
    """Control: the plain scripted sink gets every event at once."""
    sink = ScriptedSink()
    reporter, clock = make(sink)
    drive(reporter)
    cycle(reporter)
    counts = sends_over(reporter, clock, sink, 4)
    reporter.close(10)
    assert [2, 3, 4, 5] == counts


def test_a_retry_waits_for_the_floor_not_the_shorter_backoff() -> None:
    """After a failed send, the 0.5 s backoff is stretched to the 5 s floor."""
    sink = FlooredSink()
    sink.fail_sends.append(RetryLater("boom"))
    reporter, clock = make(sink)
    drive(reporter)
    cycle(reporter)  # fails
    counts = []
    for _ in range(5):
        clock.advance(1.0)
        cycle(reporter)
        counts.append(len(sink.sent))
    reporter.close(10)
    assert [1, 1, 1, 1, 2] == counts


def test_flush_within_the_floor_waits_for_it() -> None:
    """``flush()`` forces a send, but not within the destination's floor."""
    sink = FlooredSink()
    reporter, clock = make(sink)
    drive(reporter)
    cycle(reporter)
    clock.advance(1.0)
    reporter.report_train_step(step=1, metrics={"loss": 0.5})
    flushed_early = reporter.flush(timeout=0.3)
    sent_early = len(sink.sent)
    clock.advance(4.0)
    flushed_later = reporter.flush(timeout=10)
    sent_later = len(sink.sent)
    reporter.close(10)
    assert (False, 1, True, 2) == (flushed_early, sent_early, flushed_later, sent_later)


def test_the_first_send_of_close_goes_at_once() -> None:
    """``close()`` sends the final state without waiting for the floor (one request)."""
    sink = FlooredSink()
    reporter, clock = make(sink)
    drive(reporter)
    cycle(reporter)
    clock.advance(1.0)
    reporter.report_completed()
    assert reporter.close(10)
    assert (2, "completed") == (len(sink.sent), sink.sent[-1].status)


class TimedFlooredSink(ScriptedSink):
    """A scripted sink with a 0.4 s floor that records when each send was attempted."""

    min_interval_seconds = 0.4

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def send(self, update: Any, *, timeout_seconds: float | None = None) -> Any:
        self.times.append(time.monotonic())
        return super().send(update, timeout_seconds=timeout_seconds)


def test_close_retries_keep_the_floor_although_they_are_capped_shorter() -> None:
    """``close_retry_max_seconds`` (0.05 s) caps the backoff, never the destination's floor."""
    sink = TimedFlooredSink()
    config = ReportingConfig(
        backoff_initial_seconds=0.05, backoff_jitter=0.0, close_retry_max_seconds=0.05
    )
    reporter = Reporter(sink, config, rank=0).start()  # the real clock: close() waits for real
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.flush(timeout=5)
    sink.fail_sends.extend(RetryLater("busy") for _ in range(3))
    reporter.report_train_step(step=2, metrics={"loss": 0.5})
    assert reporter.close(timeout=10)
    first_failure = next(i for i, r in enumerate(sink.results) if isinstance(r, RetryLater))
    closing = sink.times[first_failure:]  # close()'s first attempt went at once; retries wait
    assert 4 == len(closing)
    assert min(b - a for a, b in itertools.pairwise(closing)) >= 0.4
