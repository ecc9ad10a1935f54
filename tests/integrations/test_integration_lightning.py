"""Tests for trainreport.integrations.lightning against a real ``lightning.Trainer`` on the CPU."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning")

import lightning
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport.integrations.lightning import (
    CANCEL_REASON,
    TrainReportCallback,
    TrainReportLogger,
    route_metrics,
)
from trainreport.testing import capture_events

# Lightning's own warnings that these tests meet are ignored in pyproject.toml's
# commented filterwarnings list.

MAX_STEPS = 12


class TinyModule(lightning.LightningModule):
    """A linear regressor that logs ``train_loss``, an unprefixed epoch metric and ``val_loss``."""

    def __init__(self, fail_at_step: int | None = None) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.fail_at_step = fail_at_step
        self.save_hyperparameters({"lr": 0.1, "width": 4})

    def _loss(self, batch: Any) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.linear(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.fail_at_step is not None and self.global_step + 1 >= self.fail_at_step:
            raise RuntimeError(f"boom at step {self.global_step + 1}")
        loss = self._loss(batch)
        self.log("train_loss", loss)
        self.log("mean_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(seed: int) -> DataLoader[Any]:
    """16 samples in batches of 4: 4 optimizer steps per epoch."""
    g = torch.Generator().manual_seed(seed)
    return DataLoader(
        TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)),
        batch_size=4,
    )


def make_logger(**config: Any) -> tuple[TrainReportLogger, MemorySink]:
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01, **config))
    return TrainReportLogger(reporter, version="test"), sink


def make_trainer(
    tmp_path: Path, logger: TrainReportLogger, *extra: Any, **overrides: Any
) -> lightning.Trainer:
    settings: dict[str, Any] = {
        "max_steps": MAX_STEPS,
        "log_every_n_steps": 2,
        "val_check_interval": 3,
        "check_val_every_n_epoch": None,
        "accelerator": "cpu",
        "devices": 1,
        "logger": logger,
        "callbacks": [*extra, TrainReportCallback(logger)],
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(tmp_path),
    }
    settings.update(overrides)
    return lightning.Trainer(**settings)


def steps(task: dict[str, Any], name: str) -> list[int]:
    return [p["step"] for p in task["status_details"]["metrics"][name]]


def epochs(task: dict[str, Any], name: str) -> list[int]:
    return [p["epoch"] for p in task["status_details"]["metrics"][name]]


@pytest.fixture(scope="module")
def fit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], lightning.Trainer]:
    """One 12-step fit: log every 2 steps, validate every 3, checkpoint after each validation."""
    tmp_path = tmp_path_factory.mktemp("lightning")
    logger, sink = make_logger()
    trainer = make_trainer(tmp_path, logger)
    trainer.fit(TinyModule(), loader(0), loader(1))
    assert logger.close(10.0)
    assert sink.task is not None
    return sink.task, trainer


def test_training_points_use_completed_optimizer_steps(
    fit_run: tuple[dict[str, Any], lightning.Trainer],
) -> None:
    """Lightning passes ``global_step - 1`` during fit; points land on 2, 4, ..., 12."""
    task, _ = fit_run
    assert [2, 4, 6, 8, 10, 12] == steps(task, "train_loss")
    assert [1, 1, 2, 2, 3, 3] == epochs(task, "train_loss")


def test_validation_points_land_on_the_step_they_followed(
    fit_run: tuple[dict[str, Any], lightning.Trainer],
) -> None:
    """``val_loss`` (already prefixed: not ``val_val_loss``) at steps 3, 6, 9, 12, once each."""
    task, _ = fit_run
    names = set(task["status_details"]["metrics"])
    assert [3, 6, 9, 12] == steps(task, "val_loss")
    assert [1, 2, 3, 3] == epochs(task, "val_loss")
    assert set() == {n for n in names if "val_val" in n or "train_train" in n or "epoch" in n}


def test_unprefixed_epoch_metric_takes_the_running_phase(
    fit_run: tuple[dict[str, Any], lightning.Trainer],
) -> None:
    """``mean_loss`` logged at epoch end during training becomes ``train_mean_loss``."""
    task, _ = fit_run
    assert [4, 8, 12] == steps(task, "train_mean_loss")


def test_fit_end_state_has_progress_checkpoint_and_completed_status(
    fit_run: tuple[dict[str, Any], lightning.Trainer],
) -> None:
    """Completed at step 12 of 12 (``estimated_stepping_batches``) with the last checkpoint file."""
    task, trainer = fit_run
    details = task["status_details"]
    assert "completed" == task["status"]
    assert (12, 12, 100.0) == (details["step"], details["max_steps"], details["percentage_done"])
    assert details["checkpoint_path"].endswith("epoch=2-step=12.ckpt")
    assert Path(details["checkpoint_path"]).is_file()
    assert 12 == details["checkpoint_step"]
    assert trainer.global_step == details["step"]


def test_hyperparameters_are_reported(fit_run: tuple[dict[str, Any], lightning.Trainer]) -> None:
    """``save_hyperparameters`` reaches ``log_hyperparams`` and the task's ``hyperparameters``."""
    task, _ = fit_run
    assert {"lr": 0.1, "width": 4} == task["status_details"]["hyperparameters"]


def test_fit_then_test_gives_one_terminal_state_and_keeps_test_metrics(tmp_path: Path) -> None:
    """``finalize("success")`` twice reports completed once; the later test loss is recorded."""
    logger, sink = make_logger()
    trainer = make_trainer(tmp_path, logger, max_steps=4, val_check_interval=2)
    module = TinyModule()
    with capture_events() as events:
        trainer.fit(module, loader(0), loader(1))
        trainer.test(module, loader(2), verbose=False)
        assert logger.close(10.0)
    task = sink.task
    assert task is not None
    assert "completed" == task["status"]
    assert [4] == steps(task, "test_loss")
    assert [] == [e for e in events if e["event"] == "trainreport.transition_refused"]
    completions = [r for r in sink.requests if r.get("status") == "completed"]
    assert completions, "the completed status was sent"


def test_validate_before_fit_does_not_end_the_run(tmp_path: Path) -> None:
    """A baseline ``trainer.validate()`` finalizes with success but must not complete the task."""
    logger, sink = make_logger()
    trainer = make_trainer(tmp_path, logger, max_steps=4, val_check_interval=2)
    module = TinyModule()
    trainer.validate(module, loader(1), verbose=False)
    trainer.fit(module, loader(0), loader(1))
    assert logger.close(10.0)
    task = sink.task
    assert task is not None
    assert "completed" == task["status"]
    assert [0, 2, 4] == steps(task, "val_loss")
    assert [2, 4] == steps(task, "train_loss")


def test_a_module_that_raises_ends_failed_with_the_error(tmp_path: Path) -> None:
    """``on_exception`` reports the exception; ``finalize("failed")`` does not overwrite it."""
    logger, sink = make_logger()
    trainer = make_trainer(tmp_path, logger)
    with pytest.raises(RuntimeError, match="boom at step 5"):
        trainer.fit(TinyModule(fail_at_step=5), loader(0), loader(1))
    assert logger.close(10.0)
    task = sink.task
    assert task is not None
    assert "failed" == task["status"]
    assert {"type": "RuntimeError", "message": "boom at step 5"} == task["status_details"]["error"]
    assert 4 == task["status_details"]["step"]


def test_logger_without_callback_falls_back_to_step_plus_one(tmp_path: Path) -> None:
    """Used alone, the logger converts Lightning's 0-based ``step`` during fit by adding one."""
    logger, sink = make_logger()
    trainer = make_trainer(tmp_path, logger, callbacks=[], enable_checkpointing=False)
    with capture_events() as events:
        trainer.fit(TinyModule(), loader(0), loader(1))
    assert logger.close(10.0)
    assert sink.task is not None
    assert [2, 4, 6, 8, 10, 12] == steps(sink.task, "train_loss")
    assert [3, 6, 9, 12] == steps(sink.task, "val_loss")
    assert "completed" == sink.task["status"]
    assert 1 == len([e for e in events if e["event"] == "trainreport.lightning_without_callback"])


class CancelAtStep(lightning.Callback):
    """Simulates the job service cancelling the job at ``step`` (then forces one send)."""

    def __init__(self, sink: MemorySink, logger: TrainReportLogger, step: int) -> None:
        self.sink, self.logger, self.step = sink, logger, step

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        reporter = self.logger.reporter
        if trainer.global_step == self.step and reporter is not None:
            self.sink.request_cancel()
            assert reporter.flush(timeout=10.0)


def test_cancel_requested_stops_the_trainer_and_ends_cancelled(tmp_path: Path) -> None:
    """A cancel from the service sets ``trainer.should_stop``; finalize reports cancelled."""
    logger, sink = make_logger()
    trainer = make_trainer(
        tmp_path, logger, CancelAtStep(sink, logger, 5), enable_checkpointing=False
    )
    trainer.fit(TinyModule(), loader(0), loader(1))
    assert logger.close(10.0)
    task = sink.task
    assert task is not None
    assert trainer.global_step < MAX_STEPS
    assert ("cancelled", CANCEL_REASON) == (task["status"], task["status_details"]["cancel_reason"])


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trainreport-reporter"]


def test_rank_1_environment_makes_the_run_inert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RANK=1`` the reporter goes inert when it would start: no thread, nothing sent."""
    monkeypatch.setenv("RANK", "1")
    logger, sink = make_logger()
    before = len(worker_threads())
    trainer = make_trainer(tmp_path, logger, enable_checkpointing=False, max_steps=4)
    trainer.fit(TinyModule(), loader(0), loader(1))
    assert logger.reporter is not None
    assert "inert" == logger.reporter.stats().state
    assert [] == sink.requests
    assert before == len(worker_threads())


def test_logger_pickles_before_first_use_and_the_copy_reports() -> None:
    """An unstarted logger pickles; the copy starts lazily in its own process and reports."""
    logger, _ = make_logger()
    copy = pickle.loads(pickle.dumps(logger))
    copy.log_metrics({"train_loss": 1.5}, step=0)
    assert copy.close(10.0)
    reporter = copy.reporter
    assert reporter is not None
    sink = reporter.sink
    assert isinstance(sink, MemorySink)
    assert sink.task is not None
    assert [1] == steps(sink.task, "train_loss")
    assert "new" == logger.reporter.stats().state if logger.reporter else False


def test_logger_pickled_after_first_use_gives_an_inert_copy() -> None:
    """A started reporter stays with its process: the pickled copy reports nothing."""
    logger, sink = make_logger(status_at_close="keep")  # the copy's "success" must not show
    logger.log_metrics({"train_loss": 1.5}, step=0)
    copy = pickle.loads(pickle.dumps(logger))
    copy.log_metrics({"train_loss": 2.5}, step=1)
    copy.finalize("success")
    assert copy.reporter is None
    assert copy.close()
    assert logger.close(10.0)
    assert sink.task is not None
    assert [1] == steps(sink.task, "train_loss")
    assert "running" == sink.task["status"]


def test_finalize_failed_without_callback_reports_a_failure() -> None:
    """Without the callback, ``finalize("failed")`` still ends the task failed."""
    logger, sink = make_logger()
    logger.finalize("failed")
    logger.finalize("success")
    assert logger.close(10.0)
    assert sink.task is not None
    assert "failed" == sink.task["status"]


def test_finalize_finished_means_preempted() -> None:
    """SLURM's auto-requeue handler calls ``finalize("finished")``: cancelled, preempted."""
    logger, sink = make_logger()
    logger.finalize("finished")
    assert logger.close(10.0)
    assert sink.task is not None
    assert ("cancelled", "preempted") == (
        sink.task["status"],
        sink.task["status_details"]["cancel_reason"],
    )


def test_route_metrics_by_prefix_then_context() -> None:
    """Own prefixes decide; unprefixed names follow the running phase; dataloader suffixes split."""
    routed = route_metrics(
        {
            "train_loss": 1.0,
            "val_loss/dataloader_idx_1": 2.0,
            "val_loss/dataloader_idx_0": 3.0,
            "test/acc": 4.0,
            "lr-SGD": 0.1,
            "epoch": 2.0,
        },
        "validation",
    )
    assert {
        ("train", None): {"train_loss": 1.0},
        ("validation", "dataloader_1"): {"val_loss": 2.0},
        ("validation", "dataloader_0"): {"val_loss": 3.0},
        ("test", None): {"test/acc": 4.0},
        ("validation", None): {"lr-SGD": 0.1},
    } == routed
