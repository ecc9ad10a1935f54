"""Driving the engine core (``_engine/_core.py``) directly: no thread, no clock read, no sink.

Shared by tests/test_core.py and tests/contracts/test_deadlines.py: time is an
argument, one fake time (used as both the scheduling clock and the real-time
deadline's clock) moved by the test.
"""

from __future__ import annotations

from collections import deque

from trainreport import Delivered, MemorySink, Opened, ReportingConfig
from trainreport._engine._core import EngineCore
from trainreport._engine._destination import new_destination
from trainreport._engine._resume import Resume
from trainreport._record import _reports as reports
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report


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
