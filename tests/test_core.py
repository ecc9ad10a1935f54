"""The engine core (``_engine/_core.py``) driven directly: no thread, no clock read, no sink called.

Time is an argument (tests/core_driving.py). The close's deadline properties,
asserted exactly on the core, are in tests/contracts/test_deadlines.py.
"""

from __future__ import annotations

from collections import deque

from core_driving import deliver, make_core, open_all, record
from trainreport import MemorySink, Opened, ReportingConfig, RetryLater
from trainreport._engine._core import EngineCore, Regime
from trainreport._engine._destination import new_destination
from trainreport._engine._resume import Resume
from trainreport._record import _reports as reports
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report


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


def _suffix_core(backlog: int) -> EngineCore:
    """One series-suffix destination (a run log, the reference server), opened at time 0."""
    cfg = ReportingConfig(backoff_jitter=0.0, min_report_interval_seconds=10.0)
    core = EngineCore(
        recorder=Recorder(cfg, destinations=1),
        destinations=[new_destination(0, MemorySink(series_suffix=True), cfg)],
        config=cfg,
        resume=Resume(None, interval=cfg.min_report_interval_seconds),
        wall_clock=lambda: "2026-01-01T00:00:00.000Z",
        backlog_send_points=backlog,
    )
    core.begin(0.0)
    dest = core.destinations[0]
    job = core.running_request(dest, 0.0)
    assert job is not None
    job.result, job.done = Opened(capabilities=frozenset({"series-suffix-v1"})), True
    core.settle(dest, 0.0, 0.0, queue_empty=True)
    assert dest.suffix_mode
    return core


def record_more(core: EngineCore, t: float, step: int) -> None:
    """One more training point at ``t``, after the run's first (no first-point send)."""
    queue: deque[Report] = deque([reports.train(t, step, None, {"loss": 0.5})])
    urgent, _, _ = core.recorder.apply_all(queue)
    core.drained(t, urgent=urgent, first_point=False)


def test_a_backlog_of_unacknowledged_points_is_sent_inside_the_debounce() -> None:
    """A suffix destination lacking ``backlog_send_points`` points is due at once.

    Those points are what the store keeps in memory (docs/engine.md, "Memory"),
    so a loop faster than the debounce interval does not grow it; below the
    backlog the 10 s debounce holds.
    """
    core = _suffix_core(backlog=5)
    dest = core.destinations[0]
    record(core, 0.0, 1)
    deliver(core, 0.0)  # the run's first point goes at once; the window starts
    for step in range(2, 6):
        record_more(core, 1.0, step)
    assert core.running_request(dest, 1.0) is None  # 4 points lacking: the debounce holds
    record_more(core, 1.0, 6)
    job = core.running_request(dest, 1.0)  # 5 lacking: due at once, 9 s early
    assert job is not None
    assert job.build is not None
    assert 5 == job.build.update.point_count


def test_a_backlog_send_waits_out_a_backoff() -> None:
    """The backlog rule never sends inside a backoff (a failed send's retry time)."""
    core = _suffix_core(backlog=2)
    dest = core.destinations[0]
    record(core, 0.0, 1)
    job = core.running_request(dest, 0.0)
    assert job is not None
    job.result, job.done = RetryLater("down", delay_seconds=30.0), True
    core.settle(dest, 0.0, 0.0, queue_empty=True)
    for step in range(2, 10):
        record_more(core, 1.0, step)
    assert core.running_request(dest, 1.0) is None  # 9 lacking, but retry at 30 s
    assert core.running_request(dest, 30.0) is not None


def test_a_full_state_destination_keeps_its_debounce_whatever_it_lacks() -> None:
    """Full state sends every point each time: the backlog rule would make it quadratic."""
    core = make_core()
    open_all(core)  # a MemorySink without the extension: full state
    dest = core.destinations[0]
    core.backlog_send_points = 2
    record(core, 0.0, 1)
    deliver(core, 0.0)
    for step in range(2, 10):
        record_more(core, 1.0, step)
    assert dest.full_state
    assert core.running_request(dest, 1.0) is None
