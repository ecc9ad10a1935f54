"""Whatever is reported, every body is encodable strict JSON and one bad value never
poisons later sends; ``status_details`` never carries ``null`` for an absent value.

docs/design.md#metrics: the payload is always strict JSON; #wire-modes: "a ``None`` is omitted,
never sent as ``null``"; #guarantees: "one failure does not poison later sends";
``_sink.Update.status_details`` "Never contains ``None`` values".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from trainreport import FileSink, MemorySink, Reporter, ReportingConfig

pytestmark = pytest.mark.timeout(60)

#: What ``os.fsdecode`` gives for a file name that is not UTF-8 (a lone surrogate).
NON_UTF8_PATH = os.fsdecode(b"ckpt/step-\xff")


def make(sink: Any, **config: Any) -> Reporter:
    settings: dict[str, Any] = {
        "min_report_interval_seconds": 0.0,
        "backoff_initial_seconds": 0.01,
        "backoff_max_seconds": 0.02,
        "backoff_jitter": 0.0,
        **config,
    }
    return Reporter(sink, ReportingConfig(**settings), rank=0)


def stored_steps(task: dict[str, Any] | None, name: str) -> list[int]:
    assert task is not None
    return [p["step"] for p in task["status_details"].get("metrics", {}).get(name, [])]


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_huge_epoch_never_corrupts_the_series(series_suffix: bool) -> None:
    """An absurd epoch (1e10 epochs completed) is dropped or capped; other points survive."""
    sink = MemorySink(series_suffix=series_suffix)
    reporter = make(sink)
    reporter.start()
    reporter.report_train_step(step=1, epoch=1, metrics={"loss": 1.0})
    reporter.report_train_step(step=2, epoch=1e10, metrics={"loss": 2.0})
    reporter.report_train_step(step=3, metrics={"loss": 3.0})
    assert reporter.close(timeout=0.5)
    assert [1, 2, 3] == stored_steps(sink.task, "train_loss")
    assert 3 == len(reporter.snapshot()["status_details"]["metrics"]["train_loss"])


@pytest.mark.parametrize("series_suffix", [False, True])
def test_a_non_utf8_checkpoint_path_does_not_block_every_later_send(series_suffix: bool) -> None:
    """A checkpoint path from a non-UTF-8 file name never stops the curves reaching the sink."""
    sink = MemorySink(series_suffix=series_suffix)
    reporter = make(sink)
    reporter.start()
    reporter.report_checkpoint_saved(path=NON_UTF8_PATH, step=1)
    reporter.report_train_step(step=2, metrics={"loss": 2.0})
    assert reporter.close(timeout=0.5)
    assert [2] == stored_steps(sink.task, "train_loss")


def test_file_sink_survives_a_non_utf8_checkpoint_path(tmp_path: Path) -> None:
    """The same through FileSink: the file ends holding the curve."""
    sink = FileSink(tmp_path / "run.json")
    reporter = make(sink)
    reporter.start()
    reporter.report_checkpoint_saved(path=NON_UTF8_PATH, step=1)
    reporter.report_train_step(step=2, metrics={"loss": 2.0})
    assert reporter.close(timeout=0.5)


def test_a_non_utf8_dataset_name_does_not_block_every_later_send() -> None:
    """A dataset name that cannot be UTF-8 encoded is dropped; the run keeps reporting."""
    sink = MemorySink()
    reporter = make(sink)
    reporter.start()
    reporter.report_validation(step=1, metrics={"loss": 1.0}, dataset="squad\ud800")
    reporter.report_train_step(step=2, metrics={"loss": 2.0})
    assert reporter.close(timeout=0.5)
    assert [2] == stored_steps(sink.task, "train_loss")


def test_an_unencodable_hyperparameter_does_not_block_every_later_send() -> None:
    """A hyperparameter that cannot be JSON-encoded is stored as text or dropped."""
    sink = MemorySink()
    reporter = make(sink)
    reporter.start()
    reporter.report_hyperparameters(params={"seed": 10**5000})
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    assert reporter.close(timeout=0.5)
    assert [1] == stored_steps(sink.task, "train_loss")


def test_a_scalar_that_never_had_a_number_is_not_sent_as_null() -> None:
    """``{"note": "warmup"}`` as a scalar (no history) never sends ``train_note: null``."""
    sink = MemorySink()
    reporter = make(sink, time_series_metrics=[])
    reporter.start()
    metrics: dict[str, Any] = {"loss": 1.0, "note": "warmup"}
    reporter.report_train_step(step=1, metrics=metrics)
    assert reporter.close(timeout=5)
    for body in sink.requests:
        assert "train_note" not in body["status_details"]
