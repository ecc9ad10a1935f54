"""Typing check of trainreport's public API, as a user's code would call it.

Never run: ``mypy --strict`` checks it (``scripts/check`` runs mypy on ``tests``).
A signature or return type that drifts from what users write fails the check;
``assert_type`` pins what each call gives back. The cases below that must be
refused carry ``# type: ignore[code]``: were the API to accept them, mypy's
``warn_unused_ignores`` (part of ``--strict``) would fail.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from typing_extensions import assert_type

import trainreport
from trainreport import (
    STRIPPED_PREFIXES,
    DestinationStats,
    FileSink,
    HttpSink,
    JournalStats,
    MemorySink,
    Phase,
    Reporter,
    ReporterState,
    ReporterStats,
    ReportingConfig,
    TaskStatus,
    read_task,
)
from trainreport.integrations import PREEMPTED, install_failure_hooks
from trainreport.sinks import Sink, default_sink_from_env, default_sinks_from_env
from trainreport.testing import FakeClock


class _Scalar:
    """A 0-d tensor stand-in."""

    def item(self) -> float:
        return 1.0


def check_reporter(path: Path) -> None:
    assert_type(trainreport.__version__, str)
    sink: Sink = MemorySink()
    assert_type(sink.run_log_path(), str | None)
    assert_type(FileSink(path / "run.log").run_log_path(), str)
    config = ReportingConfig(min_report_interval_seconds=10.0, time_series_metrics=["train_*"])
    assert_type(ReportingConfig.from_mapping({"heartbeat_seconds": 5}), ReportingConfig)
    assert_type(ReportingConfig.from_env({}), ReportingConfig)
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0)
    assert_type(reporter.start(), Reporter)
    assert_type(reporter.state, ReporterState)
    assert_type(reporter.cancel_requested, threading.Event)
    assert_type(reporter.config, ReportingConfig)

    # every report call returns None; metrics take numbers and tensor-like scalars
    assert_type(reporter.report_training_start(max_steps=10, num_epochs=1), None)
    reporter.report_train_step(step=1, epoch=0.5, metrics={"loss": 0.3, "n": 4, "t": _Scalar()})
    reporter.report_validation(step=1, metrics={"loss": 0.4}, dataset="heldout")
    reporter.report_metrics(step=1, metrics={"acc": 0.9}, phase="test")
    reporter.report_hyperparameters(params={"optimizer": {"lr": 1e-3}})
    reporter.report_epoch_end(epoch=1)
    reporter.report_checkpoint_saved(path=path / "ckpt", step=1)
    reporter.report_cancelled(reason=Reporter.PREEMPTED)
    reporter.report_error(ValueError("boom"))
    reporter.report_error("a message")
    reporter.report_outcome()
    reporter.report_outcome(KeyboardInterrupt())
    reporter.report_outcome(preempted=True)
    reporter.report_completed()
    reporter.report_train_step(step=1, metrics={"loss": "high"})  # type: ignore[dict-item]

    assert_type(reporter.use_series_default(("train_*",)), bool)
    assert_type(reporter.flush(1.0), bool)
    assert_type(reporter.close(timeout=5.0), bool)
    assert_type(reporter.stats(), ReporterStats)
    assert_type(reporter.stats().destinations, tuple[DestinationStats, ...])
    assert_type(reporter.stats().destinations[0].thinned_to, int | None)
    assert_type(reporter.stats().destinations[0].unsent_memory_bytes, int)
    assert_type(reporter.stats().journal, JournalStats | None)
    assert_type(reporter.sinks, tuple[Sink, ...])
    assert_type(reporter.snapshot(), dict[str, Any])
    assert_type(Reporter.from_env({}), Reporter)
    assert_type(Reporter.from_env({}, config=config), Reporter)

    with Reporter(FileSink(path / "run.log"), rank=0) as inner:
        assert_type(inner, Reporter)

    both = Reporter(sinks=[MemorySink(), FileSink(path / "run.log")], config=config, rank=0)
    assert_type(both, Reporter)


def check_sinks_and_values(path: Path) -> None:
    http = HttpSink("https://jobs.example", "job-1", "train", token_file=path / "token")
    assert_type(
        HttpSink("https://jobs.example", "j", max_body_bytes=1 << 20).max_body_bytes, int | None
    )
    assert_type(http, HttpSink)
    assert_type(HttpSink.from_env({}), HttpSink)
    assert_type(default_sink_from_env({}), Sink)
    assert_type(default_sinks_from_env({}), list[Sink])
    memory = MemorySink()
    assert_type(memory.task, dict[str, Any] | None)
    assert_type(read_task(path / "run.json"), dict[str, Any])
    assert_type(STRIPPED_PREFIXES, Mapping[str, tuple[str, ...]])
    assert_type(TaskStatus("running"), TaskStatus)
    assert_type(Phase("training"), Phase)
    assert_type(PREEMPTED, str)
    uninstall = install_failure_hooks(Reporter(memory), sigterm=True)
    assert_type(uninstall, Callable[[], None])
