"""A destination that falls behind says so (``_engine/_behind.py``), a bounded number of times.

Driven on the engine core with time as an argument (tests/core_driving.py): each
pass records, settles, starts what is due and asks ``EngineCore.check_behind``,
as the reporter thread's cycle does. The thresholds are small here; the real
defaults are checked once, on ``LagWatch`` with a recorder that says it lacks
that many points (recording 100 M points is no test).
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import attrs
import pytest

from core_driving import (
    make_core,
    make_recovering_core,
    make_suffix_core,
    perform,
    record_wide,
)
from helpers import ScriptedSink, drive
from trainreport import (
    Delivered,
    MemorySink,
    Rejected,
    Reporter,
    ReportingConfig,
    RetryLater,
)
from trainreport._engine._behind import BEHIND_WARNING_POINTS, CHECK_SECONDS, LagWatch
from trainreport._engine._core import EngineCore
from trainreport._engine._destination import Job, new_destination
from trainreport._record._recorder import Recorder
from trainreport._record._store import POINT_COLUMN_BYTES, Series
from trainreport._wire._sink_interface import SendResult
from trainreport.testing import FakeClock, capture_events

_BEHIND = "trainreport.destination_behind"
_CAUGHT_UP = "trainreport.destination_caught_up"


@attrs.define
class _Service:
    """How one scripted destination answers each send, at once.

    ``result``; or, with ``takes_per_series``, ``Delivered`` with lengths that
    lag: the service holds only that many more points of each series sent (a
    service that answers 2xx and takes at most that much a request).
    """

    result: SendResult | None = None
    takes_per_series: int | None = None

    def answer(self, job: Job) -> SendResult:
        """The answer to ``job`` (a send)."""
        if self.takes_per_series is None:
            assert self.result is not None
            return self.result
        assert job.build is not None
        series = job.build.update.series or ()
        k = self.takes_per_series
        return Delivered(series_lengths={u.name: u.offset + min(k, len(u)) for u in series})


def _pass(core: EngineCore, t: float, services: list[_Service]) -> None:
    """One pass of the reporter thread at ``t``: send what is due, then check who is behind."""
    for dest, service in zip(core.destinations, services, strict=True):
        job = core.running_request(dest, t)
        if job is not None:
            assert job.build is not None
            job.result, job.done = service.answer(job), True
            core.settle(dest, t, t, queue_empty=True)
    core.check_behind(t)


def _behind(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == _BEHIND]


def test_a_destination_that_takes_nothing_warns_once_at_each_threshold() -> None:
    """Every send answered 503: one warning past 100 points, none up to 1,000, one past it.

    The warning names the destination, the points it lacks, the memory they
    hold, that its requests fail, the rates, and what to do (no journal here).
    """
    core = make_suffix_core(behind_points=(100, 1_000))
    dest = core.destinations[0]
    dest.label = "the job API"
    down = [_Service(RetryLater("503 overloaded"))]
    failures_when_warned: list[int] = []
    with capture_events() as events:
        for step in range(1, 102):  # 10 points a second
            record_wide(core, float(step), step, 10, first=step == 1)
            before = len(_behind(events))
            _pass(core, float(step), down)
            if len(_behind(events)) > before:
                failures_when_warned.append(dest.scheduler.consecutive_failures)

    warned = _behind(events)
    assert [(110, 100, 10.0), (1_010, 1_000, 70.0)] == [
        (e["points_unsent"], e["threshold"], e["rate_window_seconds"]) for e in warned
    ]
    first = warned[0]
    expected = {
        "destination": "the job API",
        "unsent_memory_bytes": 110 * 28,
        "cause": "failing",
        "wire_mode": "series-suffix",
        "consecutive_failures": failures_when_warned[0],
        "last_error": "503 overloaded",
        "points_taken_per_second": 0.0,
        "points_recorded_per_second": 10.0,
        "journal": None,
        "log_level": "warning",
    }
    assert expected == {k: first[k] for k in expected}
    assert failures_when_warned[0] >= 1
    assert "a kill loses them" in first["hint"]
    assert "journal=True" in first["hint"]


def test_a_slow_service_warns_with_the_rate_it_takes_beside_the_rate_the_run_makes() -> None:
    """A service that answers 2xx but takes 10 points/s of the run's 20: cause ``slow``.

    Every send is delivered (no failure, no last error), the service holding
    one more point of each of the 10 series a request; the backlog rule sends
    to it at every pass, so what it lacks grows at the difference. The
    warning's rates say both, over the last minute.
    """
    core = make_suffix_core(behind_points=(500,), backlog_send_points=10)
    slow = [_Service(takes_per_series=1)]
    step = 0
    with capture_events() as events:
        for second in range(1, 121):  # 20 points a second for two minutes
            for _ in range(2):
                step += 1
                record_wide(core, float(second), step, 10, first=step == 1)
            _pass(core, float(second), slow)

    [warned] = _behind(events)
    assert ("slow", 0, None) == (
        warned["cause"],
        warned["consecutive_failures"],
        warned["last_error"],
    )
    assert (510, 20.0, 10.0, 50.0) == (
        warned["points_unsent"],
        warned["points_recorded_per_second"],
        warned["points_taken_per_second"],
        warned["rate_window_seconds"],
    )
    assert "takes fewer points a second than the run makes" in warned["hint"]
    assert "time_series_metrics" in warned["hint"]


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (RetryLater("503"), "failing"),
        (Rejected("stale_attempt: a later attempt owns the task", 409), "superseded"),
        (None, "slow"),
    ],
)
def test_the_cause_says_down_superseded_or_slow_from_the_last_answers(
    answer: SendResult | None, cause: str
) -> None:
    """What the last requests said decides ``cause``: failures, a later attempt, or 2xx.

    ``None``: a ``Delivered`` whose lengths lag (the service holds one more
    point of each series a request), a service that answers but does not
    keep up.
    """
    core = make_suffix_core(behind_points=(50,), backlog_send_points=10)
    service = _Service(answer) if answer is not None else _Service(takes_per_series=1)
    with capture_events() as events:
        for second in range(1, 11):  # 20 points a second
            record_wide(core, float(second), 2 * second - 1, 10, first=second == 1)
            record_wide(core, float(second), 2 * second, 10)
            _pass(core, float(second), [service])

    assert [cause] == [e["cause"] for e in _behind(events)]


def test_only_the_destination_behind_warns() -> None:
    """Two destinations, one delivered every time, one down: only the one down warns."""
    core = make_suffix_core(2, behind_points=(100,), backlog_send_points=50)
    core.destinations[0].label, core.destinations[1].label = "keeps up", "down"
    services = [_Service(Delivered()), _Service(RetryLater("connection refused"))]
    with capture_events() as events:
        for step in range(1, 31):
            record_wide(core, float(step), step, 10, first=step == 1)
            _pass(core, float(step), services)

    assert [("down", 110)] == [(e["destination"], e["points_unsent"]) for e in _behind(events)]


def test_a_destination_that_keeps_up_never_warns() -> None:
    """300 points a second, sent to when 500 are lacking (the backlog rule): never past 1,000.

    Without the rule the 10 s debounce alone would let it lack 3,000 points
    between two sends; 60,000 points pass through it.
    """
    core = make_suffix_core(behind_points=(1_000,), backlog_send_points=500)
    keeps_up = [_Service(Delivered())]
    with capture_events() as events:
        step = 0
        for second in range(1, 201):
            for _ in range(3):
                step += 1
                record_wide(core, float(second), step, 100, first=step == 1)
            _pass(core, float(second), keeps_up)

    assert [] == _behind(events)
    assert 60_000 == core.recorder.counts().points_recorded


def test_caught_up_is_said_once_after_each_warning_and_thresholds_stay_spent() -> None:
    """Down, back, down again: behind at 100, caught up, nothing at 150, behind at 1,000, back.

    A threshold warns once per destination (the second episode does not warn
    at 100 again); each warning is followed by at most one
    ``destination_caught_up``, so both are bounded by the thresholds.
    """
    core = make_suffix_core(behind_points=(100, 1_000), backlog_send_points=10_000)
    service = _Service(RetryLater("503"))
    step, t = 0, 0.0
    with capture_events() as events:
        for points, answer in (
            (110, RetryLater("503")),  # behind at 100
            (0, Delivered()),  # caught up
            (150, RetryLater("503")),  # 100 is spent
            (0, Delivered()),  # nothing to say: it did not warn
            (1_010, RetryLater("503")),  # behind at 1,000
            (0, Delivered()),  # caught up
            (0, Delivered()),  # once
        ):
            service.result = answer
            for _ in range(points // 10):
                step, t = step + 1, t + 1.0
                record_wide(core, t, step, 10, first=step == 1)
                _pass(core, t, [service])
            for _ in range(120):  # long enough for the backoff to retry
                t += 1.0
                _pass(core, t, [service])

    seen = [
        (e["event"], e.get("threshold"), e["points_unsent"])
        for e in events
        if e["event"] in (_BEHIND, _CAUGHT_UP)
    ]
    assert [
        (_BEHIND, 100, 110),
        (_CAUGHT_UP, None, 0),
        (_BEHIND, 1_000, 1_010),
        (_CAUGHT_UP, None, 0),
    ] == seen


def test_a_destination_past_two_thresholds_at_once_warns_once_for_the_higher() -> None:
    """1,500 points lacking at one check: one warning at 1,000, and 100 is spent with it."""
    core = make_suffix_core(behind_points=(100, 1_000, 10_000), backlog_send_points=100_000)
    dest = core.destinations[0]
    for step in range(1, 16):
        record_wide(core, 1.0, step, 100, first=step == 1)
    job = core.running_request(dest, 1.0)  # the first point's send, held in flight
    assert job is not None
    with capture_events() as events:
        core.check_behind(1.0)
        for step in range(16, 20):
            record_wide(core, 2.0, step, 100)
        core.check_behind(2.0)

    assert [(1_000, 1_500)] == [(e["threshold"], e["points_unsent"]) for e in _behind(events)]


def test_with_a_journal_the_warning_says_where_the_points_are_on_disk(tmp_path: Path) -> None:
    """The journal's destination behind: ``journal`` is its path; a kill loses little."""
    core = make_recovering_core(tmp_path, MemorySink(series_suffix=True), left_overs=0)
    core.lag = LagWatch(1, (5,))
    dest = core.destinations[0]
    opening = core.running_request(dest, 0.0)
    assert opening is not None
    perform(core, opening)
    core.settle(dest, 0.0, 0.0, queue_empty=True)
    record_wide(core, 1.0, 1, 10, first=True)
    sending = core.running_request(dest, 1.0)  # held in flight: nothing acknowledged
    assert sending is not None
    keeper = core.resume.journal
    assert keeper is not None
    with capture_events() as events:
        core.check_behind(1.0)

    [warned] = _behind(events)
    assert str(keeper.journal.paths.current) == warned["journal"]
    assert f"the journal {keeper.journal.paths.current} holds them on disk" in warned["hint"]


class _Lacking(Recorder):
    """A recorder whose every destination lacks :attr:`lacking` points (none recorded)."""

    lacking = 0

    def unsent_points(self, d: int) -> int:
        """What the test says it lacks."""
        return self.lacking


def test_the_default_thresholds_are_a_million_points_and_each_decade_to_a_hundred_million() -> None:
    """With the real defaults, more than 1 M, 10 M and 100 M points each warn once, no other.

    The memory each one says is 28 bytes a point (the store's four columns).
    The core's default is the same tuple.
    """
    cfg = ReportingConfig()
    recorder = _Lacking(cfg, destinations=1)
    recorder.start_attempt()
    dest = new_destination(0, MemorySink(series_suffix=True), cfg)
    watch = LagWatch(1)
    with capture_events() as events:
        lacking_each_pass = (1_000_000, 1_000_001, 9_999_999, 10_000_000, 10_000_001)
        for t, lacking in enumerate((*lacking_each_pass, 100_000_000, 100_000_001, 10**12)):
            recorder.lacking = lacking
            watch.check([dest], recorder, float(t))

    assert [
        (1_000_000, 1_000_001, 28_000_028),
        (10_000_000, 10_000_001, 280_000_028),
        (100_000_000, 100_000_001, 2_800_000_028),
    ] == [(e["threshold"], e["points_unsent"], e["unsent_memory_bytes"]) for e in _behind(events)]
    assert (1_000_000, 10_000_000, 100_000_000) == BEHIND_WARNING_POINTS
    assert BEHIND_WARNING_POINTS == make_core().lag.thresholds
    assert None is _behind(events)[0]["wire_mode"]  # never opened: its open says which


def test_the_memory_a_point_costs_is_what_the_store_s_columns_hold() -> None:
    """``POINT_COLUMN_BYTES`` is the bytes 1,000 points take in a series' columns, per point."""
    series = Series()
    for step in range(1_000):
        series.append(step, 1, 0.5, 1.0)

    assert series.nbytes() == 1_000 * POINT_COLUMN_BYTES
    assert 28 == POINT_COLUMN_BYTES
    assert array("q").itemsize + array("i").itemsize + 2 * array("d").itemsize == 28


def test_the_reporter_thread_checks_at_every_cycle() -> None:
    """A reporter whose sends fail: the cycle that drains the 6th point warns (threshold 5).

    ``stats()`` gives the same points and memory for the destination.
    """
    clock = FakeClock()
    sink = ScriptedSink(MemorySink(series_suffix=True))
    sink.fail_sends.extend(RetryLater("503") for _ in range(100))
    config = ReportingConfig(backoff_jitter=0.0, journal=False)
    reporter = Reporter(sink, config, clock=clock, rank=0)
    worker = drive(reporter)
    worker.core.lag = LagWatch(1, (5,))
    try:
        with capture_events() as events:
            worker.cycle()  # the open
            for step in range(1, 6):
                reporter.report_train_step(step=step, metrics={"loss": 1.0})
            clock.advance(1.0)
            worker.cycle()
            quiet = list(_behind(events))
            reporter.report_train_step(step=6, metrics={"loss": 1.0})
            clock.advance(1.0)
            worker.cycle()
        figures = reporter.stats().destinations[0]
    finally:
        reporter.close(timeout=0.5)

    assert [] == quiet
    [warned] = _behind(events)
    assert (6, 6 * 28) == (warned["points_unsent"], warned["unsent_memory_bytes"])
    # stats() says the same (nothing is queued between two cycles)
    assert (6, 6 * 28) == (figures.points_unsent, figures.unsent_memory_bytes)


def test_points_lacked_are_counted_at_most_once_a_second() -> None:
    """Passes every 0.25 s: past the threshold at 0.25 s, the warning comes at the 1 s pass.

    However often the reporter thread wakes, the count (a sum over the series
    per destination) is made at most once per ``CHECK_SECONDS``.
    """
    core = make_suffix_core(behind_points=(10,), backlog_send_points=100_000)
    dest = core.destinations[0]
    record_wide(core, 0.0, 1, 10, first=True)
    assert core.running_request(dest, 0.0) is not None  # held in flight: nothing acknowledged
    warned_at: list[float] = []
    with capture_events() as events:
        for quarter in range(6):
            t = quarter / 4
            if quarter == 1:
                record_wide(core, t, 2, 10)
            core.check_behind(t)
            warned_at.extend(t for _ in _behind(events)[len(warned_at) :])

    assert (1.0, [1.0]) == (CHECK_SECONDS, warned_at)


def test_what_waited_in_the_queue_counts_before_the_send_on_the_reporter_thread() -> None:
    """One destination, no journal: its sends hold the reporter thread, the reports queue.

    The pass that drains them counts them before its send (which delivers
    them all): 6 points past a threshold of 5 warn, though none is lacking
    once the pass is over. Counted after the send, such a backlog would
    never be seen, while it is memory all the same (the queue's).
    """
    clock = FakeClock()
    sink = ScriptedSink(MemorySink(series_suffix=True))
    reporter = Reporter(sink, ReportingConfig(journal=False), clock=clock, rank=0)
    worker = drive(reporter)
    worker.core.lag = LagWatch(1, (5,))
    try:
        with capture_events() as events:
            worker.cycle()  # the open
            for step in range(1, 7):
                reporter.report_train_step(step=step, metrics={"loss": 1.0})
            clock.advance(1.0)
            worker.cycle()  # drains the six points and sends them at once (the first point)
        unsent_after = worker.recorder.unsent_points(0)
    finally:
        reporter.close(timeout=0.5)

    assert (0, [6]) == (unsent_after, [e["points_unsent"] for e in _behind(events)])
