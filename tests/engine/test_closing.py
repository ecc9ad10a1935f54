"""close(): the retry cap, the last attempt before the deadline, and a destination never reached.

Scheduling runs on an injected clock, so the backoff can be driven to any length
without waiting; ``close()`` deadlines are real time (they bound process exit),
so the tests here check them with generous upper bounds, as a deadline is the
behaviour itself.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faults import black_hole_server, closed_port
from helpers import ScriptedSink, curve, drive, held
from trainreport import HttpSink, Reporter, ReportingConfig, RetryLater
from trainreport._engine._closing import CLOSE_NOTICE_SECONDS, wait_for_close
from trainreport._engine._core import LAST_ATTEMPT_LEAD_SECONDS, close_wait
from trainreport._engine._scheduler import SendScheduler
from trainreport._wire._sink_interface import SendResult, Update
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


class DownUntil(ScriptedSink):
    """A MemorySink that answers 503 (``RetryLater``) to every send until a real-time moment."""

    def __init__(self) -> None:
        super().__init__()
        self.healthy_at = float("inf")
        self.attempts: list[float] = []

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        now = time.monotonic()
        self.attempts.append(now)
        if now < self.healthy_at:
            self.sent.append(update)
            return RetryLater("HTTP 503")
        return super().send(update, timeout_seconds=timeout_seconds)


def started(sink: Any, **config: Any) -> tuple[Reporter, FakeClock]:
    clock = FakeClock()
    settings = {"min_report_interval_seconds": 10.0, "backoff_jitter": 0.0, **config}
    reporter = Reporter(sink, ReportingConfig(**settings), clock=clock, rank=0)
    drive(reporter)
    return reporter, clock


def cycle(reporter: Reporter) -> None:
    """One cycle of the reporter thread, held between cycles by ``drive``."""
    worker = reporter._worker
    assert worker is not None
    worker.cycle()


def fail_mid_run(reporter: Reporter, clock: FakeClock, failures: int) -> int:
    """Report steps while every send fails, until ``failures`` failures; returns the last step."""
    step = 0
    while reporter.stats().consecutive_failures < failures:
        step += 1
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        clock.advance(100.0)  # past any backoff: every cycle makes one attempt
        cycle(reporter)
    return step


def test_close_retries_a_service_that_comes_back_after_six_failures() -> None:
    """After 6 failed sends (a 32 s backoff), a service back 1 s into close gets everything."""
    sink = DownUntil()
    reporter, clock = started(sink, close_retry_max_seconds=0.2)
    last = fail_mid_run(reporter, clock, 6)
    reporter.report_completed()
    sink.healthy_at = time.monotonic() + 1.0
    started_at = time.monotonic()
    assert reporter.close(timeout=10)
    assert time.monotonic() - started_at < 5.0
    assert "completed" == held(sink)["status"]
    assert list(range(1, last + 1)) == [p[0] for p in curve(sink.task, "train_loss")]
    gaps = [b - a for a, b in zip(sink.attempts[-4:], sink.attempts[-3:], strict=False)]
    assert all(gap < 0.2 + 0.15 for gap in gaps)


def test_a_last_attempt_is_made_before_the_deadline() -> None:
    """Attempts 1 s apart would miss a service back at 1.6 s of a 2 s close: one goes before."""
    sink = DownUntil()
    reporter, clock = started(sink, close_retry_max_seconds=1.0)
    fail_mid_run(reporter, clock, 6)
    started_at = time.monotonic()
    sink.healthy_at = started_at + 1.6
    assert reporter.close(timeout=2.0)
    assert time.monotonic() - started_at < 2.5
    closing = [t - started_at for t in sink.attempts if t >= started_at]
    assert closing[-1] < 2.0


def test_close_holds_its_deadline_against_a_service_that_never_comes_back() -> None:
    """The cap never stretches the deadline: close(timeout=1.5) returns False by then."""
    sink = DownUntil()
    reporter, clock = started(sink, close_retry_max_seconds=0.3)
    fail_mid_run(reporter, clock, 3)
    started_at = time.monotonic()
    assert not reporter.close(timeout=1.5)
    elapsed = time.monotonic() - started_at
    assert 1.0 <= elapsed < 2.5
    closing = [t for t in sink.attempts if t >= started_at]
    assert 3 <= len(closing) <= 8


def test_a_retry_after_while_closing_is_honoured_up_to_the_last_attempt() -> None:
    """A 429 asking for 60 s during close(timeout=2): one last attempt before the deadline."""
    sink = DownUntil()
    reporter, _ = started(sink, close_retry_max_seconds=0.2)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    sink.fail_sends.append(RetryLater("HTTP 429", delay_seconds=60.0))
    sink.healthy_at = 0.0
    original = sink.send

    def send(update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        if sink.fail_sends:
            sink.attempts.append(time.monotonic())
            return sink.fail_sends.popleft()
        return original(update, timeout_seconds=timeout_seconds)

    sink.send = send  # type: ignore[method-assign]
    started_at = time.monotonic()
    assert reporter.close(timeout=2.0)
    assert 1.0 < time.monotonic() - started_at < 2.0


# --- a destination that never answered (issue: a wrong URL) ------------------------------


def refused_reporter(port: int, **config: Any) -> Reporter:
    sink = HttpSink(
        f"http://127.0.0.1:{port}",
        "job-wrong-url",
        "train",
        token="t0ps3cret",
        connect_timeout_seconds=1.0,
        read_timeout_seconds=1.0,
    )
    settings = {"backoff_initial_seconds": 0.05, "backoff_max_seconds": 0.2, **config}
    return Reporter(sink, ReportingConfig(**settings), rank=0).start()


def wait_for_failures(reporter: Reporter, n: int) -> None:
    deadline = time.monotonic() + 10.0
    while reporter.stats().consecutive_failures < n and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    assert reporter.stats().consecutive_failures >= n


def test_a_url_nobody_listens_on_costs_a_short_close_and_one_clear_warning() -> None:
    """Connection refused from start to end: close waits close_unanswered_seconds, not 30 s."""
    with closed_port() as port:
        reporter = refused_reporter(port, close_unanswered_seconds=0.5)
        for step in range(1, 11):
            reporter.report_train_step(step=step, metrics={"loss": 1.0, "lr": 0.1})
        wait_for_failures(reporter, 2)
        with capture_events() as events:
            started_at = time.monotonic()
            assert not reporter.close(timeout=30.0)
            elapsed = time.monotonic() - started_at
    assert elapsed < 3.0
    warnings = [e for e in events if e["event"] == "trainreport.close_undelivered"]
    assert 1 == len(warnings)
    warning = warnings[0]
    assert f"127.0.0.1:{port}" in warning["destination"]
    assert "job-wrong-url" in warning["destination"]
    assert "train" in warning["destination"]
    assert warning["undelivered_reports"] >= 10
    assert 20 == warning["undelivered_points"]
    assert warning["never_answered"] is True
    assert all("t0ps3cret" not in repr(e) for e in events)


def test_an_https_url_of_a_plain_http_server_costs_a_short_close(server: Any) -> None:
    """A TLS handshake that fails from start to end (wrong scheme) is a wrong URL too."""
    url = server.url.replace("http://", "https://", 1)
    sink = HttpSink(url, "job-wrong-scheme", connect_timeout_seconds=1.0, read_timeout_seconds=1.0)
    config = ReportingConfig(
        backoff_initial_seconds=0.05, backoff_max_seconds=0.2, close_unanswered_seconds=0.5
    )
    reporter = Reporter(sink, config, rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    wait_for_failures(reporter, 1)
    with capture_events() as events:
        started_at = time.monotonic()
        assert not reporter.close(timeout=30.0)
        elapsed = time.monotonic() - started_at
    assert elapsed < 5.0
    (warning,) = [e for e in events if e["event"] == "trainreport.close_undelivered"]
    assert warning["never_answered"] is True


def test_stats_count_queued_reports_as_recorded_and_unsent() -> None:
    """Reports still queued (the stored task was never read) count as recorded, unsent points."""
    with closed_port() as port:
        reporter = refused_reporter(port, close_unanswered_seconds=0.2)
        for step in range(1, 11):
            reporter.report_train_step(step=step, metrics={"loss": 1.0, "lr": 0.1})
        wait_for_failures(reporter, 1)
        stats = reporter.stats()
        reporter.close(timeout=1.0)
    assert 10 == stats.queue_depth
    assert 20 == stats.points_recorded
    assert 20 == stats.points_unsent
    assert 0 == stats.points_delivered


def test_a_hanging_destination_still_gets_the_whole_deadline() -> None:
    """A destination that accepts and never answers is not "never answered": full deadline."""
    with black_hole_server() as url:
        sink = HttpSink(url, "job-hang", connect_timeout_seconds=1.0, read_timeout_seconds=0.3)
        config = ReportingConfig(
            backoff_initial_seconds=0.05, backoff_max_seconds=0.2, close_unanswered_seconds=0.2
        )
        reporter = Reporter(sink, config, rank=0).start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        wait_for_failures(reporter, 1)
        started_at = time.monotonic()
        assert not reporter.close(timeout=1.5)
        assert 1.2 <= time.monotonic() - started_at < 3.0


def test_a_destination_that_answered_before_gets_the_whole_deadline(server: Any) -> None:
    """Reached once, then refusing (an outage): close keeps trying until its deadline."""
    from faults import FaultProxy  # noqa: PLC0415 - next to its only use

    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-outage", connect_timeout_seconds=1.0)
        config = ReportingConfig(
            min_report_interval_seconds=0.01,
            backoff_initial_seconds=0.05,
            backoff_max_seconds=0.2,
            close_unanswered_seconds=0.2,
        )
        reporter = Reporter(sink, config, rank=0).start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        assert reporter.flush(timeout=10)
        proxy.refuse()
        reporter.report_train_step(step=2, metrics={"loss": 0.5})
        started_at = time.monotonic()
        assert not reporter.close(timeout=1.5)
        assert 1.2 <= time.monotonic() - started_at < 3.0


class Hanging(ScriptedSink):
    """A destination whose sends hang until released (past any close deadline)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        self.release.wait(10.0)
        return super().send(update, timeout_seconds=timeout_seconds)


def test_repeated_closes_warn_once() -> None:
    """close() is idempotent, and so is its warning about what was not delivered."""
    sink = Hanging()
    reporter, _ = started(sink)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with capture_events() as events:
        assert not reporter.close(timeout=0.2)
        assert not reporter.close(timeout=0.2)
    sink.release.set()
    warnings = [e for e in events if e["event"] == "trainreport.close_undelivered"]
    assert [True] == [e["timed_out"] for e in warnings]


# -- close_wait: the wait between two attempts while closing (pure, ``now`` in) ----------


def failed_scheduler(failures: int, retry_after: float | None, gap: float) -> SendScheduler:
    """A scheduler after ``failures`` failures at time 0, the last asking ``retry_after`` s."""
    scheduler = SendScheduler(backoff_jitter=0.0, backoff_initial=1.0, min_request_gap=gap)
    scheduler.note_change(0.0)
    for i in range(failures):
        scheduler.on_retry_later(0.0, retry_after if i == failures - 1 else None)
    return scheduler


@given(
    failures=st.integers(1, 12),
    retry_after=st.none() | st.floats(0.0, 900.0),
    gap=st.sampled_from([0.0, 0.5, 5.0]),
    elapsed=st.floats(0.0, 10.0),
    remaining=st.floats(0.001, 120.0),
    cap=st.floats(0.05, 30.0),
)
def test_close_waits_within_the_deadline_and_honours_retry_after_and_the_floor(
    failures: int,
    retry_after: float | None,
    gap: float,
    elapsed: float,
    remaining: float,
    cap: float,
) -> None:
    """Never past the deadline; Retry-After and the floor hold unless it is the last attempt.

    A wait that would reach the deadline becomes the last attempt, started
    early enough to finish (the lead: a quarter of the cap, at least 0.1 s, at
    most half the time left); the destination's own floor holds even then.
    """
    scheduler = failed_scheduler(failures, retry_after, gap)

    wait, last = close_wait(scheduler, elapsed, remaining, cap)

    assert 0.0 <= wait <= remaining
    floor = gap - elapsed if gap > 0 else 0.0
    assert wait >= floor or (last and wait == remaining)
    if not last:
        asked = 0.0 if retry_after is None else min(retry_after, 600.0) - elapsed
        backoff = min(scheduler.backoff_delay(failures) - elapsed, cap)
        assert wait >= max(asked, backoff, floor, 0.0) - 1e-9
        assert wait < remaining
    elif wait < remaining:  # the last attempt leaves the lead to finish, unless the floor is later
        lead = min(max(cap / 4, LAST_ATTEMPT_LEAD_SECONDS), remaining / 2)
        assert wait <= max(remaining - lead, floor) + 1e-9


def test_a_retry_after_past_the_deadline_leaves_one_last_attempt_before_it() -> None:
    """Retry-After of 900 s with 10 s left: the last attempt starts 2.5 s before the end."""
    scheduler = failed_scheduler(1, 900.0, 0.0)

    assert (7.5, True) == close_wait(scheduler, 0.0, 10.0, cap=10.0)


def test_the_backoff_while_closing_is_capped() -> None:
    """Twelve failures back off 60 s while running; while closing the cap is the wait."""
    scheduler = failed_scheduler(12, None, 0.0)

    assert (2.0, False) == close_wait(scheduler, 0.0, 100.0, cap=2.0)


# -- wait_for_close: the caller's wait for the reporter thread (``now`` injected) ---------


class ThreadEndingAt:
    """A reporter thread that ends at ``ends_at`` on ``clock``: ``join`` advances the clock."""

    def __init__(self, clock: FakeClock, ends_at: float, interrupt_at_join: int = 0) -> None:
        self.clock = clock
        self.ends_at = ends_at
        self.joins: list[float] = []
        self.interrupt_at_join = interrupt_at_join

    def join(self, seconds: float) -> bool:
        self.joins.append(seconds)
        if len(self.joins) == self.interrupt_at_join:
            self.clock.advance(seconds / 2)
            raise KeyboardInterrupt
        self.clock.advance(min(seconds, max(self.ends_at - self.clock(), 0.0)))
        return self.clock() >= self.ends_at


def waited(ends_at: float, deadline: float, interrupt_at_join: int = 0) -> tuple[Any, ...]:
    """wait_for_close against a thread ending ``ends_at`` s in: (outcome, joins, notices)."""
    clock = FakeClock()
    start = clock()
    thread = ThreadEndingAt(clock, start + ends_at, interrupt_at_join)
    notices: list[float] = []
    outcome = wait_for_close(thread.join, start + deadline, notice=notices.append, now=clock)
    return outcome, thread.joins, notices


def test_a_close_that_ends_within_the_notice_time_says_nothing() -> None:
    """The thread ends after 1.9 s: one wait, no notice."""
    assert ("ended", [CLOSE_NOTICE_SECONDS], []) == waited(1.9, 30.0)


def test_a_close_still_waiting_after_the_notice_time_says_so_once_with_the_time_left() -> None:
    """A hanging destination: one notice at exactly 2 s with 28 s left, then the deadline."""
    assert ("deadline", [2.0, 28.0], [28.0]) == waited(math.inf, 30.0)
    assert ("ended", [2.0, 28.0], [28.0]) == waited(10.0, 30.0)


def test_a_deadline_shorter_than_the_notice_time_gives_no_notice() -> None:
    """close(timeout=1.5): the deadline comes first; nothing to announce."""
    assert ("deadline", [1.5], []) == waited(math.inf, 1.5)
    assert ("deadline", [2.0], []) == waited(math.inf, 2.0)


def test_ctrl_c_during_the_wait_stops_it_without_raising() -> None:
    """A KeyboardInterrupt in either wait is caught: the outcome is ``interrupted``."""
    assert ("interrupted", [2.0, 28.0], [28.0]) == waited(math.inf, 30.0, interrupt_at_join=2)
    assert ("interrupted", [2.0], []) == waited(math.inf, 30.0, interrupt_at_join=1)


CTRL_C_SCRIPT = """
import logging, sys, time
import trainreport
logging.basicConfig(stream=sys.stderr)
sink = trainreport.HttpSink(sys.argv[1], "job-ctrl-c", read_timeout_seconds=120.0)
config = trainreport.ReportingConfig(journal_dir=sys.argv[2], close_timeout_seconds=120.0)
reporter = trainreport.Reporter(sink, config, rank=0).start()
try:
    print("ready", flush=True)
    for step in range(1, 10**9):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
        time.sleep(0.01)
finally:
    reporter.close()
"""


@pytest.mark.slow
def test_a_second_ctrl_c_during_close_leaves_at_once_without_a_trainreport_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C stops training; close() says what it waits for; a second Ctrl-C leaves cleanly."""
    monkeypatch.delenv("TRAINREPORT_JOURNAL")  # the child keeps a journal in tmp_path
    lines: list[str] = []
    seen_waiting = threading.Event()

    def read(stream: Any) -> None:
        for line in stream:
            lines.append(line)
            if "trainreport.close_waiting" in line:
                seen_waiting.set()

    with (
        black_hole_server() as url,
        subprocess.Popen(
            [sys.executable, "-c", CTRL_C_SCRIPT, url, str(tmp_path / "journal")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as child,
    ):
        try:
            assert child.stdout is not None
            assert "ready" == child.stdout.readline().strip()
            reader = threading.Thread(target=read, args=(child.stderr,), daemon=True)
            reader.start()
            child.send_signal(signal.SIGINT)
            assert seen_waiting.wait(30), "".join(lines)
            interrupted_at = time.monotonic()
            child.send_signal(signal.SIGINT)
            child.wait(30)
            left_after = time.monotonic() - interrupted_at
            reader.join(10)
        finally:
            child.kill()
            child.wait()
    stderr = "".join(lines)
    assert left_after < 10.0  # the close's own deadline was 120 s away
    assert -signal.SIGINT == child.returncode  # the training loop's KeyboardInterrupt, as usual
    waiting = next(line for line in lines if "trainreport.close_waiting" in line)
    assert "press Ctrl-C to stop waiting" in waiting
    assert "status='cancelled'" in waiting  # the first Ctrl-C: cancelled, interrupted
    assert str(tmp_path / "journal") in waiting
    assert f"--url {url}" in waiting  # the upload command, ready to copy (sync_command)
    assert "trainreport.close_interrupted" in stderr
    frames = [line for line in lines if line.lstrip().startswith("File ")]
    assert [] == [f for f in frames if "trainreport" in f], stderr
