"""Driving the engine core (``_engine/_core.py``) directly: no thread, no clock read, no sink.

Shared by tests/engine/test_core.py and tests/contracts/test_deadlines.py: time is an
argument, one fake time (used as both the scheduling clock and the real-time
deadline's clock) moved by the test, or by what a request took and what the core
said to wait (:func:`run_close`).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainreport import Delivered, MemorySink, Opened, ReportingConfig
from trainreport._engine._behind import BEHIND_WARNING_POINTS
from trainreport._engine._core import BACKLOG_SEND_POINTS, EngineCore
from trainreport._engine._destination import Job, new_destination
from trainreport._engine._journal_feed import JournalKeeper, RecoveryOutcome
from trainreport._engine._resume import Resume
from trainreport._engine._sender import Sender
from trainreport._record import _reports as reports
from trainreport._record._recorder import Recorder
from trainreport._record._reports import Report
from trainreport._runlog._journal import Journal
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    OpenResult,
    SendResult,
    SeriesUpdate,
    Sink,
    Update,
)

#: What a scripted destination does with a request started at a time: its answer,
#: and how long (seconds) it took; a request never outlives its timeout.
Script = Callable[[Job, float], tuple[OpenResult | SendResult | RecoveryOutcome, float]]


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


def leave_journals(directory: Path, count: int) -> None:
    """``count`` journals of dead processes for job-1/train, each 3 points (steps 1-3, 4-6, ...)."""
    for k in range(count):
        dead = Journal.claim(directory, "job-1", "train")
        assert dead is not None
        steps = [3 * k + 1, 3 * k + 2, 3 * k + 3]
        values = array("d", [1.0 / s for s in steps])
        series = SeriesUpdate("train_loss", 0, array("q", steps), array("i", [1] * 3), values)
        dead.append(Update("running", {"phase": "train"}, (series,), False))
        dead._release(remove_files=False)  # the lock dies with the process; the file stays


def make_recovering_core(
    directory: Path, sink: Sink, left_overs: int, *, others: int = 0, **config: float
) -> EngineCore:
    """A core over ``sink`` with a journal holding ``left_overs`` dead journals, begun at time 0.

    Its journal's destination is destination 0 (``others`` memory sinks
    follow it); its requests are performed with :func:`perform` (the sink is
    called, on this thread, through a real sender).
    """
    leave_journals(directory, left_overs)
    settings_ = {"backoff_jitter": 0.0, "min_report_interval_seconds": 10.0, **config}
    cfg = ReportingConfig(**settings_)  # type: ignore[arg-type]
    recorder = Recorder(cfg, destinations=1 + others)
    journal = Journal.claim(directory, "job-1", "train")
    assert journal is not None
    assert left_overs == len(journal.left_over)
    stamp = "2026-01-01T00:00:00.000Z"
    keeper = JournalKeeper(
        journal, recorder, interval_seconds=1.0, clock=lambda: 0.0, wall_clock=lambda: stamp
    )
    resume = Resume(lambda _recorder: keeper, interval=cfg.min_report_interval_seconds)
    core = EngineCore(
        recorder=recorder,
        destinations=[
            new_destination(i, sink if i == 0 else MemorySink(), cfg) for i in range(1 + others)
        ],
        config=cfg,
        resume=resume,
        wall_clock=lambda: stamp,
        journal_destination=0,
    )
    resume.open_journal(recorder, core.wall_clock, 0.0)
    core.begin(0.0)
    return core


def perform(core: EngineCore, job: Job) -> None:
    """Run ``job`` through destination 0's sink on this thread (a real ``Sender``'s code)."""
    Sender(core.destinations[0].sink, on_own_thread=False).submit(job)


def kind(job: Job) -> str:
    """``open``, ``send``, ``recover`` (a left-over's send) or ``reopen`` (recovery's)."""
    if job.recovery is not None:
        return "reopen" if job.recovery.reopen else "recover"
    return "open" if job.build is None else "send"


def run_close(
    core: EngineCore,
    script: Script,
    *,
    start: float,
    timeout: float,
    before_pass: Callable[[float], None] | None = None,
) -> tuple[list[tuple[int, float, Job]], float]:
    """The closing regime, as the driver runs it with no sender thread, on fake time.

    Each pass settles and steps every destination (a request the core hands
    out runs at once through ``script``, the time moving by what it took);
    then the next pass comes when the core says (``close_wait_seconds``).

    Args:
        core: a core with the close not begun yet.
        script: the destinations' answers to the close's requests.
        start: the time ``close()`` begins (seconds).
        timeout: the close's timeout (seconds).
        before_pass: called with the time at the start of every pass: a test ends
            there a request that was in flight before the close (a late answer:
            set its ``result`` and ``done``), which that pass settles.

    Returns:
        every request started, as (destination, start time, job), and the
        time the close ended.
    """
    core.close(deadline=start + timeout, started=start)
    t = start
    started: list[tuple[int, float, Job]] = []
    for _ in range(10_000):
        if before_pass is not None:
            before_pass(t)
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
        core.seed_if_decided(t, real=t)
        wait = core.close_wait_seconds(t)
        if wait is None:
            return started, t
        t += max(wait, 0.0)
    raise AssertionError("the close never ended")


def make_suffix_core(
    destinations: int = 1,
    *,
    behind_points: Sequence[int] = BEHIND_WARNING_POINTS,
    backlog_send_points: int = BACKLOG_SEND_POINTS,
    **config: Any,
) -> EngineCore:
    """A core over ``destinations`` series-suffix memory sinks, each opened (a new task) at 0.

    Series-suffix destinations (the reference server, a run log) are sent only
    the points they lack, so the backlog rule applies to them; ``behind_points``
    are the ``trainreport.destination_behind`` thresholds (small ones in tests).
    ``config``: :class:`ReportingConfig` fields, over this core's own
    (``backoff_jitter=0.0``, ``min_report_interval_seconds=10.0``), e.g.
    ``max_metric_names`` for a wider run (benchmarks/bench_lag_watch.py).
    """
    cfg = ReportingConfig(**{"backoff_jitter": 0.0, "min_report_interval_seconds": 10.0, **config})
    core = EngineCore(
        recorder=Recorder(cfg, destinations=destinations),
        destinations=[
            new_destination(i, MemorySink(series_suffix=True), cfg) for i in range(destinations)
        ],
        config=cfg,
        resume=Resume(None, interval=cfg.min_report_interval_seconds),
        wall_clock=lambda: "2026-01-01T00:00:00.000Z",
        backlog_send_points=backlog_send_points,
        behind_points=behind_points,
    )
    core.begin(0.0)
    for dest in core.destinations:
        job = core.running_request(dest, 0.0)
        assert job is not None
        job.result = Opened(capabilities=frozenset({CAPABILITY_SERIES_SUFFIX}))
        job.done = True
        core.settle(dest, 0.0, 0.0, queue_empty=True)
    assert all(d.in_step and d.suffix_mode for d in core.destinations)
    return core


def record_wide(core: EngineCore, t: float, step: int, width: int, *, first: bool = False) -> None:
    """One training report of ``width`` metrics (``width`` points) at ``step``, drained at ``t``.

    ``first``: the run's first point (it is sent at once, curves included).
    """
    metrics = {f"m{i}": 0.5 for i in range(width)}
    queue: deque[Report] = deque([reports.train(t, step, None, metrics)])
    urgent, _, _ = core.recorder.apply_all(queue)
    core.drained(t, urgent=urgent, first_point=first)
