"""The Accelerate tracker with the real ``accelerate`` on CPU, in a short plain training loop."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from accelerate.tracking import GeneralTracker

from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport.integrations.accelerate import TrainReportTracker, route_by_prefix

pytestmark = pytest.mark.timeout(120)


def steps(task: dict[str, Any], name: str) -> list[int]:
    return [p["step"] for p in task["status_details"]["metrics"][name]]


def epochs(task: dict[str, Any], name: str) -> list[int]:
    return [p["epoch"] for p in task["status_details"]["metrics"][name]]


def train(tracker: TrainReportTracker, *, fail_at: int | None = None) -> Accelerator:
    """A 2-epoch, 4-steps-an-epoch regression loop logging train and eval metrics."""
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("tiny", config={"lr": 0.1, "model": {"width": 4}})
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    step = 0
    for epoch in range(2):
        for xb, yb in data:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == fail_at:
                raise RuntimeError("diverged")
            accelerator.log({"train_loss": loss.item(), "lr": 0.1, "epoch": epoch}, step=step)
        accelerator.log({"eval_loss": loss.item() * 1.1, "eval_runtime": 0.2}, step=step)
    accelerator.end_training()
    return accelerator


def make_tracker(**kw: Any) -> tuple[TrainReportTracker, MemorySink]:
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01), rank=0)
    return TrainReportTracker(reporter=reporter, max_steps=8, num_epochs=2, **kw), sink


def test_a_plain_accelerate_loop_reports_curves_hyperparameters_and_completion() -> None:
    """Train and eval curves at the loop's steps and epochs, the config, completed at 8 of 8."""
    tracker, sink = make_tracker()
    train(tracker)
    task = sink.task
    assert task is not None
    details = task["status_details"]
    assert ([1, 2, 3, 4, 5, 6, 7, 8], [1, 1, 1, 1, 2, 2, 2, 2]) == (
        steps(task, "train_loss"),
        epochs(task, "train_loss"),
    )
    assert ([4, 8], [1, 2]) == (steps(task, "val_loss"), epochs(task, "val_loss"))
    assert ("completed", 8, 100.0) == (task["status"], details["step"], details["percentage_done"])
    assert {"lr": 0.1, "model/width": 4} == details["hyperparameters"]
    assert ("val_runtime" in details, "val_runtime" in details["metrics"]) == (True, False)
    assert "closed" == tracker.reporter.state.value


def test_the_tracker_is_a_real_general_tracker_accelerate_accepts() -> None:
    """Accelerate keeps it among its trackers and finds it by name."""
    tracker, _ = make_tracker()
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("tiny")
    found = accelerator.get_tracker("trainreport")
    accelerator.end_training()
    assert (True, True, False) == (
        isinstance(tracker, GeneralTracker),
        found is tracker,
        tracker.requires_logging_directory,
    )


def test_a_loop_that_raises_is_reported_failed_by_the_failure_hooks() -> None:
    """Accelerate calls no tracker method on a crash; the hooks installed at start report it."""
    tracker, sink = make_tracker()
    with pytest.raises(RuntimeError, match="diverged"):
        train(tracker, fail_at=3)
    uninstall = tracker._uninstall
    assert uninstall is not None
    try:
        # What the interpreter does with an uncaught exception: call sys.excepthook.
        sys.excepthook(RuntimeError, RuntimeError("diverged"), None)
    finally:
        uninstall()
    assert tracker.reporter.close(10)
    task = sink.task
    assert task is not None
    assert ("failed", "diverged", [1, 2]) == (
        task["status"],
        task["status_details"]["error"]["message"],
        steps(task, "train_loss"),
    )


def test_routing_follows_the_name_prefix_like_the_lightning_logger() -> None:
    """Prefixes decide the phase; unprefixed names are training; epoch and step are left out."""
    assert {
        "train": {"loss": 1.0, "train/acc": 0.5},
        "validation": {"val_loss": 2.0, "eval/acc": 0.4},
        "test": {"test_loss": 3.0},
    } == route_by_prefix(
        {
            "loss": 1.0,
            "train/acc": 0.5,
            "val_loss": 2.0,
            "eval/acc": 0.4,
            "test_loss": 3.0,
            "epoch": 1,
            "step": 4,
        }
    )


def test_logs_without_a_step_continue_from_the_last_train_step() -> None:
    """``log(values)`` without ``step``: train logs count on, eval logs stay at the last step."""
    tracker, sink = make_tracker()
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("tiny")
    accelerator.log({"loss": 1.0})
    accelerator.log({"loss": 0.5})
    accelerator.log({"val_loss": 0.7})
    accelerator.end_training()
    task = sink.task
    assert task is not None
    assert ([1, 2], [2]) == (steps(task, "train_loss"), steps(task, "val_loss"))
