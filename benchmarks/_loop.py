"""The simulated training loop of the whole-run benchmarks, and the interleaved runner.

A step does a calibrated ~200 µs of pure-Python work (a fixed number of loop
iterations, so that time the reporter thread takes from the interpreter
lengthens the step, as it would a real one: docs/design.md#shape), then reports 14
metrics; every 100 steps a validation with 4 metrics, every 1,000 steps a
checkpoint (docs/design.md#performance). Anything that reports is a :class:`Target`; the
baseline is :class:`NullTarget`, whose methods do nothing, so that both loops
pay the same timing and call overhead and the difference is the reporter's.

:func:`run_interleaved` runs the baseline loop before and after every
scenario, with the same number of steps, so that machine noise hits both.
"""

from __future__ import annotations

import gc
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import metrics_for, percentile
from trainreport import Reporter

BUSY_US = 200.0
#: Steps between sends the scaled interval aims at (docs/design.md#performance).
SEND_EVERY = 50
VALIDATE_EVERY = 100
CHECKPOINT_EVERY = 1000
NUM_EPOCHS = 3
VAL_NAMES = ("loss", "accuracy", "perplexity", "f1")


def busy(iterations: int) -> int:
    """Pure-Python work: ``iterations`` rounds of integer arithmetic (holds the GIL)."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def calibrate(target_us: float = BUSY_US, trials: int = 40) -> int:
    """Iterations of :func:`busy` that take about ``target_us`` microseconds here.

    The fastest of ``trials`` timings is used (noise only ever adds time).
    """
    iterations = 2000
    for _ in range(2):
        best = math.inf
        for _ in range(trials):
            t0 = time.perf_counter_ns()
            busy(iterations)
            best = min(best, time.perf_counter_ns() - t0)
        iterations = max(1, round(iterations * target_us * 1000.0 / best))
    return iterations


def val_metrics_for(step: int) -> dict[str, float]:
    """Four validation metrics for ``step``."""
    base = 1.0 / math.sqrt(step + 2)
    return {name: base * (i + 2) for i, name in enumerate(VAL_NAMES)}


class Target(Protocol):
    """Something the loop reports to: trainreport, the synchronous baseline, a peer."""

    def start(self, max_steps: int) -> None:
        """Set up and report the training start (not timed)."""

    @property
    def train_step(self) -> Callable[..., None]:
        """Called as ``train_step(step=, epoch=, metrics=)`` every step (timed)."""

    @property
    def validation(self) -> Callable[..., None]:
        """Called as ``validation(step=, epoch=, metrics=)`` every 100 steps (timed)."""

    @property
    def checkpoint(self) -> Callable[..., None]:
        """Called as ``checkpoint(path=, step=)`` every 1,000 steps (timed)."""

    def queue_depth(self) -> int:
        """Reports waiting for a background thread (0 when there is no queue)."""

    def finish(self) -> float:
        """Report completion and close; returns the close latency in seconds."""

    def extras(self) -> dict[str, Any]:
        """Figures gathered after :meth:`finish` (bytes, CPU, versions...)."""


def _nothing(**_kwargs: Any) -> None:
    return None


class NullTarget:
    """The baseline: every report is a call that does nothing."""

    train_step = staticmethod(_nothing)
    validation = staticmethod(_nothing)
    checkpoint = staticmethod(_nothing)

    def start(self, max_steps: int) -> None:
        """Nothing to set up."""

    def queue_depth(self) -> int:
        """No queue."""
        return 0

    def finish(self) -> float:
        """Nothing to close."""
        return 0.0

    def extras(self) -> dict[str, Any]:
        """No extras."""
        return {}


class ReporterTarget:
    """A :class:`trainreport.Reporter` as a loop's target: the report calls bound once,
    the queue read for its depth, completion and ``close(timeout)`` at the end.

    Args:
        reporter: the reporter (not started).
        close_timeout_s: the ``close(timeout=...)`` budget, seconds.
        must_close: assert that ``close()`` returned True (a run that must deliver).
    """

    def __init__(
        self, reporter: Reporter, *, close_timeout_s: float, must_close: bool = True
    ) -> None:
        self.reporter = reporter
        self.close_timeout_s = close_timeout_s
        self.must_close = must_close
        self.close_started = float("nan")
        self.train_step = reporter.report_train_step
        self.validation = reporter.report_validation
        self.checkpoint = reporter.report_checkpoint_saved
        # The hot path's deque, read (len only) to sample the queue's depth without a lock.
        self._queue = reporter._queue

    def start(self, max_steps: int) -> None:
        """Start the reporter and report the training start."""
        self.reporter.start()
        self.reporter.report_training_start(max_steps=max_steps, num_epochs=NUM_EPOCHS)

    def queue_depth(self) -> int:
        """Reports queued for the reporter thread."""
        return len(self._queue)

    def finish(self) -> float:
        """Report completion, then ``close(timeout)``; returns the close latency (seconds)."""
        self.reporter.report_completed()
        t0 = self.close_started = time.perf_counter()
        closed = self.reporter.close(timeout=self.close_timeout_s)
        latency = time.perf_counter() - t0
        assert closed or not self.must_close, "the run did not close cleanly"
        return latency


@attrs.define
class LoopResult:
    """One run of the loop.

    Attributes:
        steps: steps run.
        wall_s: wall time of the loop (start and close excluded), seconds.
        calls_us: time inside every report call, sorted, microseconds.
        per_step_us: time inside report calls per step, in step order, microseconds.
        queue_peak: the deepest the target's queue was seen (sampled every step).
        close_s: the close latency, seconds.
        gc_s: time the training thread spent in garbage collections during the
            loop (``gc.callbacks``), seconds.
        cpu_s: CPU time of the whole process (every thread) during the loop, seconds.
        extras: the target's :meth:`Target.extras`.
    """

    steps: int
    wall_s: float
    calls_us: list[float]
    per_step_us: list[float]
    queue_peak: int
    close_s: float
    gc_s: float = 0.0
    cpu_s: float = 0.0
    extras: dict[str, Any] = attrs.field(factory=dict)

    @property
    def call_sum_s(self) -> float:
        """Total time inside report calls, seconds."""
        return math.fsum(self.per_step_us) / 1e6

    def call_percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the per-call times, microseconds."""
        return percentile(self.calls_us, q)


def run_loop(target: Target, steps: int, iterations: int) -> LoopResult:
    """Run the simulated training loop against ``target``; never catches its exceptions."""
    target.start(steps)
    train, validate, checkpoint = target.train_step, target.validation, target.checkpoint
    depth = target.queue_depth
    clock = time.perf_counter_ns
    calls: list[int] = []
    per_step: list[int] = []
    peak = 0
    gc_ns = [0, 0]  # total, start of the collection in progress
    training_thread = threading.get_ident()

    def on_gc(phase: str, _info: dict[str, Any]) -> None:
        if threading.get_ident() == training_thread:
            if phase == "start":
                gc_ns[1] = clock()
            else:
                gc_ns[0] += clock() - gc_ns[1]

    gc.callbacks.append(on_gc)
    try:
        cpu_start = time.process_time()
        t_start = clock()
        for step in range(1, steps + 1):
            busy(iterations)
            epoch = (step - 1) * NUM_EPOCHS // steps
            metrics = metrics_for(step)
            t0 = clock()
            train(step=step, epoch=epoch, metrics=metrics)
            spent = clock() - t0
            calls.append(spent)
            if step % VALIDATE_EVERY == 0:
                val = val_metrics_for(step)
                t0 = clock()
                validate(step=step, epoch=epoch, metrics=val)
                dt = clock() - t0
                calls.append(dt)
                spent += dt
                if step % CHECKPOINT_EVERY == 0:
                    t0 = clock()
                    checkpoint(path=f"ckpt/step-{step}", step=step)
                    dt = clock() - t0
                    calls.append(dt)
                    spent += dt
            per_step.append(spent)
            d = depth()
            if d > peak:
                peak = d
        wall = (clock() - t_start) / 1e9
        cpu = time.process_time() - cpu_start
    finally:
        gc.callbacks.remove(on_gc)
    close_s = target.finish()
    calls.sort()
    return LoopResult(
        steps=steps,
        wall_s=wall,
        calls_us=[c / 1000.0 for c in calls],
        per_step_us=[c / 1000.0 for c in per_step],
        queue_peak=peak,
        close_s=close_s,
        gc_s=gc_ns[0] / 1e9,
        cpu_s=cpu,
        extras=target.extras(),
    )


@attrs.frozen
class Scenario:
    """One design in one server mode, run for ``steps`` steps.

    Attributes:
        key: identifies the result, e.g. ``("trainreport", "healthy", 20000)``.
        steps: steps actually run (a capped synchronous run may run fewer than N).
        make: builds a fresh target for one round.
        after: called after each round (e.g. to release hung connections).
    """

    key: tuple[str, str, int]
    steps: int
    make: Callable[[], Target]
    after: Callable[[], None] | None = None


@attrs.frozen
class ScenarioResult:
    """A scenario's chosen round and its loop slowdown.

    Attributes:
        run: the round whose own slowdown is closest to the pooled one (its
            other figures are reported).
        baseline_s: mean wall time of the baseline loops around the rounds, seconds.
        slowdown: the scenario's summed wall time over every round divided by
            the summed means of the baselines around each round.
        error: why the scenario could not run, or None.
        floor_p50_us: the median no-op call in the baseline loop after it, timed
            the same way (the timing floor), microseconds.
        baseline_gc_s: garbage-collection time on the training thread in the
            baseline loop after it, seconds.
        cpu_ratio: the process's CPU time during the scenario's loops over the
            baselines' (pooled like ``slowdown``): a cross-check that other
            processes' noise does not move (time this process is descheduled
            counts in neither).
    """

    run: LoopResult | None
    baseline_s: float
    slowdown: float
    error: str | None = None
    floor_p50_us: float = math.nan
    baseline_gc_s: float = math.nan
    cpu_ratio: float = math.nan


def run_interleaved(
    scenarios: Sequence[Scenario],
    iterations: int,
    *,
    rounds: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[tuple[str, str, int], ScenarioResult]:
    """Run every scenario ``rounds`` times, each between two baseline loops of its length.

    A scenario that raises is recorded with its error and never stops the others.
    """
    said = progress or (lambda _message: None)
    trials: dict[tuple[str, str, int], list[ScenarioResult]] = {}
    errors: dict[tuple[str, str, int], str] = {}
    last_baseline: tuple[int, float, float] | None = None
    for _ in range(rounds):
        for scenario in scenarios:
            if scenario.key in errors:
                continue
            if last_baseline is None or last_baseline[0] != scenario.steps:
                first = run_loop(NullTarget(), scenario.steps, iterations)
                last_baseline = (scenario.steps, first.wall_s, first.cpu_s)
            before, before_cpu = last_baseline[1], last_baseline[2]
            said(f"{scenario.key[0]} / {scenario.key[1]} / {scenario.steps} steps")
            try:
                result = run_loop(scenario.make(), scenario.steps, iterations)
            except Exception as exc:  # a peer's failure must never fail the report
                errors[scenario.key] = f"{type(exc).__name__}: {exc}"[:200]
                said(f"  failed: {errors[scenario.key]}")
                continue
            finally:
                if scenario.after is not None:
                    scenario.after()
            after_run = run_loop(NullTarget(), scenario.steps, iterations)
            after = after_run.wall_s
            last_baseline = (scenario.steps, after, after_run.cpu_s)
            baseline = (before + after) / 2.0
            baseline_cpu = (before_cpu + after_run.cpu_s) / 2.0
            trials.setdefault(scenario.key, []).append(
                ScenarioResult(
                    result,
                    baseline,
                    result.wall_s / baseline,
                    floor_p50_us=after_run.call_percentile(0.5),
                    baseline_gc_s=after_run.gc_s,
                    cpu_ratio=result.cpu_s / baseline_cpu,
                )
            )
    out: dict[tuple[str, str, int], ScenarioResult] = {}
    for scenario in scenarios:
        if scenario.key in errors:
            out[scenario.key] = ScenarioResult(None, math.nan, math.nan, errors[scenario.key])
            continue
        runs = trials[scenario.key]
        pooled = math.fsum(r.run.wall_s for r in runs if r.run) / math.fsum(
            r.baseline_s for r in runs
        )
        cpu = math.fsum(r.run.cpu_s for r in runs if r.run) / math.fsum(
            r.run.cpu_s / r.cpu_ratio for r in runs if r.run
        )
        chosen = min(runs, key=lambda r: abs(r.slowdown - pooled))
        out[scenario.key] = attrs.evolve(
            chosen,
            slowdown=pooled,
            cpu_ratio=cpu,
            baseline_s=math.fsum(r.baseline_s for r in runs) / len(runs),
        )
    return out


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else math.nan
