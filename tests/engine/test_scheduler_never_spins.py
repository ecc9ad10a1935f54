"""The reporter thread never spins, whatever the destination answers.

docs/design.md#failure-handling: "A failed send is not retried in a loop: the scheduler backs off
(exponential with jitter, reset on success ...)". With a clock that does not
move, no backoff can ever elapse, so a handful of reporter cycles must make at
most the first send and one immediate retry. (``drive``'s ``cycle()`` lets the
reporter thread run one whole pass; a scheduler that let a send through on
every pass would make one send per cycle.)
"""

from __future__ import annotations

import pytest

from helpers import ScriptedSink, drive
from trainreport import Reporter, ReportingConfig, Resynchronise, RetryLater
from trainreport._wire._sink_interface import SendResult
from trainreport.testing import FakeClock

pytestmark = pytest.mark.timeout(60)


def sends_in_five_cycles(answer: SendResult) -> int:
    """Sends made while the reporter runs five cycles against ``answer``, clock frozen."""
    sink = ScriptedSink()
    sink.fail_sends.extend([answer] * 1_000_000)
    config = ReportingConfig(min_report_interval_seconds=10.0, backoff_jitter=0.0)
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0)
    drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker = reporter._worker
    assert worker is not None
    try:
        for _ in range(5):
            worker.cycle()
        return len(sink.sent)
    finally:
        reporter.close(timeout=0.2)


@pytest.mark.parametrize(
    "answer",
    [
        Resynchronise("HTTP 409 conflict"),  # HttpSink: any 409 but series_gap/stale_writer
        Resynchronise("HTTP 409 series_gap", {"train_loss": 0}),
    ],
    ids=["without-lengths", "with-lengths"],
)
def test_repeated_resynchronise_backs_off(answer: Resynchronise) -> None:
    """A destination answering 409 every time is retried with backoff, not in a loop."""
    assert 2 >= sends_in_five_cycles(answer)


def test_retry_after_zero_does_not_retry_in_a_loop() -> None:
    """``503`` with ``Retry-After: 0`` every time still backs off."""
    assert 2 >= sends_in_five_cycles(RetryLater("HTTP 503", delay_seconds=0.0))


def test_plain_retry_later_backs_off() -> None:
    """Control: an ordinary transient failure makes one send over five frozen-clock cycles."""
    assert 1 == sends_in_five_cycles(RetryLater("HTTP 503"))
