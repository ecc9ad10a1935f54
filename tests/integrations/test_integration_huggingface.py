"""Tests for trainreport.integrations.huggingface against a real ``transformers.Trainer``.

Tiny randomly initialised torch modules on the CPU; nothing touches the network
(``HF_HUB_OFFLINE=1`` before transformers is imported; no ``from_pretrained``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
pytest.importorskip("torch")
pytest.importorskip("transformers")

# Imported after the offline switches above (huggingface_hub reads them at import).
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import (
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from trainreport import MemorySink, Reporter, ReportingConfig, read_task
from trainreport.integrations.huggingface import (
    CANCEL_REASON,
    TrainReportCallback,
    reporting,
    split_logs,
)
from trainreport.testing import capture_events

MAX_STEPS = 20


class TinyRegressor(torch.nn.Module):
    """A linear model that returns ``{"loss", "logits"}`` like a HF model; can fail at a step."""

    def __init__(self, fail_at_call: int | None = None) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.calls = 0
        self.fail_at_call = fail_at_call

    def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
        self.calls += 1
        if self.training and self.fail_at_call is not None and self.calls >= self.fail_at_call:
            raise RuntimeError(f"boom at call {self.calls}")
        out = self.linear(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class TinyDataset(torch.utils.data.Dataset[dict[str, Any]]):
    """``n`` random samples ``{"x": (4,), "labels": (1,)}``, deterministic per seed."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.x[i], "labels": self.y[i]}


def make_reporter() -> tuple[Reporter, MemorySink]:
    sink = MemorySink()
    return Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01)), sink


def make_trainer(
    tmp_path: Path,
    callbacks: list[TrainerCallback],
    *,
    model: TinyRegressor | None = None,
    evaluate: bool = True,
    **overrides: Any,
) -> Trainer:
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "logging_steps": 3,
        "max_steps": MAX_STEPS,
        "save_steps": 10,
        "use_cpu": True,
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 4,
        "disable_tqdm": True,
        "learning_rate": 0.01,
    }
    if evaluate:
        settings.update(eval_strategy="steps", eval_steps=5)
    settings.update(overrides)
    return Trainer(
        model=model if model is not None else TinyRegressor(),
        args=TrainingArguments(**settings),
        train_dataset=TinyDataset(16, 0),  # 4 steps per epoch: 20 steps = 5 epochs
        eval_dataset={"main": TinyDataset(8, 1), "held_out": TinyDataset(8, 2)}
        if evaluate
        else TinyDataset(8, 1),
        callbacks=callbacks,
    )


def steps(task: dict[str, Any], name: str) -> list[int]:
    return [p["step"] for p in task["status_details"]["metrics"][name]]


def epochs(task: dict[str, Any], name: str) -> list[int]:
    return [p["epoch"] for p in task["status_details"]["metrics"][name]]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Trainer, Path]:
    """One real 20-step run: logging every 3 steps, eval every 5 on two datasets, save every 10."""
    tmp_path = tmp_path_factory.mktemp("hf")
    reporter, sink = make_reporter()
    trainer = make_trainer(tmp_path, [TrainReportCallback(reporter)])
    trainer.train()
    assert sink.task is not None
    return sink.task, trainer, tmp_path


def test_training_points_are_reported_at_completed_optimizer_steps(
    full_run: tuple[dict[str, Any], Trainer, Path],
) -> None:
    """Train curves hold one point per logging step (3, 6, ..., 18): HF's global_step, unchanged."""
    task, _, _ = full_run
    assert [3, 6, 9, 12, 15, 18] == steps(task, "train_loss")
    assert [3, 6, 9, 12, 15, 18] == steps(task, "train_grad_norm")
    assert [3, 6, 9, 12, 15, 18] == steps(task, "train_learning_rate")


def test_float_epochs_become_the_epoch_the_step_falls_in(
    full_run: tuple[dict[str, Any], Trainer, Path],
) -> None:
    """HF's float epoch (0.75, 1.5, ...) becomes ``ceil``: the 1-based epoch of the step."""
    task, _, _ = full_run
    assert [1, 2, 3, 3, 4, 5] == epochs(task, "train_loss")


def test_each_eval_dataset_gets_its_own_curve_once_per_evaluation(
    full_run: tuple[dict[str, Any], Trainer, Path],
) -> None:
    """The first eval dataset keeps ``val_``, the second gets ``val_<name>_``; one point each."""
    task, _, _ = full_run
    assert [5, 10, 15, 20] == steps(task, "val_loss")
    assert [5, 10, 15, 20] == steps(task, "val_held_out_loss")
    assert ["main", "held_out"] == task["status_details"]["val_datasets"]
    assert [2, 3, 4, 5] == epochs(task, "val_loss")


def test_eval_speed_counters_are_current_values_not_curves(
    full_run: tuple[dict[str, Any], Trainer, Path],
) -> None:
    """The adapter's default keeps ``val_runtime`` and ``*_per_second`` out of the curves."""
    task, _, _ = full_run
    details = task["status_details"]
    counters = {"val_runtime", "val_samples_per_second", "val_steps_per_second"}
    assert (set(), True) == (
        {n for n in details["metrics"] if n.endswith(("_runtime", "_per_second"))},
        counters <= set(details),
    )


def test_epoch_and_summary_never_appear_in_training_curves(
    full_run: tuple[dict[str, Any], Trainer, Path],
) -> None:
    """``epoch`` is no metric; the summary goes to ``summary_*`` current values, never a curve."""
    task, _, _ = full_run
    details = task["status_details"]
    names = set(details["metrics"])
    assert set() == {n for n in names if "epoch" in n}
    assert set() == {n for n in names if n.startswith("summary_")}
    assert {"summary_train_loss", "summary_train_runtime", "summary_total_flos"} <= set(details)
    assert 18 == steps(task, "train_loss")[-1]
    assert "train_runtime" not in names
    assert "train_runtime" not in details


def test_run_end_state_has_checkpoint_progress_and_completed_status(
    full_run: tuple[dict[str, Any], Trainer, Path],
) -> None:
    """The stored task ends completed at step 20 of 20, with the last checkpoint's real path."""
    task, trainer, tmp_path = full_run
    details = task["status_details"]
    expected_checkpoint = os.path.join(str(tmp_path / "out"), "checkpoint-20")
    assert "completed" == task["status"]
    assert (20, 20, 5, 100.0) == (
        details["step"],
        details["max_steps"],
        details["num_epochs"],
        details["percentage_done"],
    )
    assert expected_checkpoint == details["checkpoint_path"]
    assert 20 == details["checkpoint_step"]
    assert os.path.isdir(expected_checkpoint)
    assert trainer.state.global_step == details["step"]


def test_training_arguments_are_reported_as_hyperparameters(
    full_run: tuple[dict[str, Any], Trainer, Path],
) -> None:
    """``args.to_sanitized_dict()`` is stored, flattened under ``training_args/``."""
    task, _, _ = full_run
    params = task["status_details"]["hyperparameters"]
    assert 20 == params["training_args/max_steps"]
    assert 0.01 == params["training_args/learning_rate"]


def test_callback_reporter_is_closed_after_train_end(tmp_path: Path) -> None:
    """``on_train_end`` closes the reporter: its thread is gone when ``train()`` returns."""
    reporter, _ = make_reporter()
    trainer = make_trainer(tmp_path, [TrainReportCallback(reporter)], evaluate=False, max_steps=3)
    trainer.train()
    assert "closed" == reporter.stats().state


class CancelAtStep(TrainerCallback):
    """Simulates the job service cancelling the job at ``step`` (then forces one send)."""

    def __init__(self, sink: MemorySink, reporter: Reporter, step: int) -> None:
        self.sink, self.reporter, self.step = sink, reporter, step

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if state.global_step == self.step:
            self.sink.request_cancel()
            assert self.reporter.flush(timeout=10.0)


def test_cancel_requested_stops_the_trainer_early(tmp_path: Path) -> None:
    """A cancel from the service sets ``should_training_stop``: the run ends early as cancelled."""
    reporter, sink = make_reporter()
    callbacks = [CancelAtStep(sink, reporter, 4), TrainReportCallback(reporter)]
    trainer = make_trainer(tmp_path, callbacks, evaluate=False, logging_steps=1)
    trainer.train()
    task = sink.task
    assert task is not None
    assert 4 == trainer.state.global_step
    assert trainer.state.global_step < MAX_STEPS
    assert "cancelled" == task["status"]
    assert CANCEL_REASON == task["status_details"]["cancel_reason"]
    assert [1, 2, 3, 4] == steps(task, "train_loss")


def test_cancel_is_ignored_when_stop_on_cancel_is_false(tmp_path: Path) -> None:
    """``stop_on_cancel=False`` lets the run finish; the task then ends completed."""
    reporter, sink = make_reporter()
    callbacks = [
        CancelAtStep(sink, reporter, 2),
        TrainReportCallback(reporter, stop_on_cancel=False),
    ]
    trainer = make_trainer(tmp_path, callbacks, evaluate=False, max_steps=6)
    trainer.train()
    assert 6 == trainer.state.global_step
    assert sink.task is not None
    assert "completed" == sink.task["status"]


def test_reporting_reports_a_train_that_raises_as_failed(tmp_path: Path) -> None:
    """``train()`` raising calls no callback; ``reporting(trainer)`` reports it and closes."""
    reporter, sink = make_reporter()
    model = TinyRegressor(fail_at_call=4)
    trainer = make_trainer(
        tmp_path, [TrainReportCallback(reporter)], model=model, evaluate=False, logging_steps=1
    )
    with pytest.raises(RuntimeError, match="boom at call 4"), reporting(trainer):
        trainer.train()
    task = sink.task
    assert task is not None
    assert "failed" == task["status"]
    assert {"type": "RuntimeError", "message": "boom at call 4"} == task["status_details"]["error"]
    assert [1, 2, 3] == steps(task, "train_loss")
    assert "closed" == reporter.stats().state


def test_reporting_keeps_an_evaluation_after_train(tmp_path: Path) -> None:
    """Inside ``reporting``, the close waits for the block: a final ``evaluate()`` is recorded."""
    reporter, sink = make_reporter()
    trainer = make_trainer(tmp_path, [TrainReportCallback(reporter)], evaluate=False, max_steps=3)
    with reporting(trainer) as used:
        trainer.train()
        trainer.evaluate()
    task = sink.task
    assert task is not None
    assert used is reporter
    assert "completed" == task["status"]
    assert [3] == steps(task, "val_loss")
    assert "closed" == reporter.stats().state


def test_reporting_adds_a_callback_from_env_when_the_trainer_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a TrainReportCallback, ``reporting`` adds one built with ``Reporter.from_env``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINREPORT_JOB_ID", "hf-job")
    monkeypatch.delenv("TRAINREPORT_URL", raising=False)
    trainer = make_trainer(tmp_path, [], evaluate=False, max_steps=2)
    with reporting(trainer):
        trainer.train()
    added = [c for c in trainer.callback_handler.callbacks if isinstance(c, TrainReportCallback)]
    assert 1 == len(added)
    assert "completed" == read_task(tmp_path / "trainreport-runs" / "hf-job.log")["status"]


def test_reporting_reports_keyboard_interrupt_as_interrupted(tmp_path: Path) -> None:
    """A ``KeyboardInterrupt`` leaving the block is ``cancelled`` with reason ``interrupted``."""
    reporter, sink = make_reporter()
    trainer = make_trainer(tmp_path, [TrainReportCallback(reporter)], evaluate=False)
    with pytest.raises(KeyboardInterrupt), reporting(trainer):
        raise KeyboardInterrupt
    assert sink.task is not None
    assert ("cancelled", "interrupted") == (
        sink.task["status"],
        sink.task["status_details"]["cancel_reason"],
    )


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trainreport-reporter"]


def test_non_world_zero_process_reports_nothing() -> None:
    """On a process that is not world process zero, no hook starts or reports anything."""
    reporter, sink = make_reporter()
    callback = TrainReportCallback(reporter)
    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    state = TrainerState(max_steps=5, is_world_process_zero=False, global_step=1, epoch=0.2)
    control = TrainerControl()
    callback.on_train_begin(args, state, control)
    callback.on_log(args, state, control, logs={"loss": 1.0, "epoch": 0.2})
    callback.on_save(args, state, control)
    callback.on_train_end(args, state, control)
    assert "new" == reporter.stats().state
    assert [] == sink.requests


def test_rank_1_environment_makes_the_run_inert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RANK=1`` the reporter goes inert in ``start()``: no thread, nothing sent."""
    monkeypatch.setenv("RANK", "1")
    reporter, sink = make_reporter()
    before = len(worker_threads())
    trainer = make_trainer(tmp_path, [TrainReportCallback(reporter)], evaluate=False, max_steps=3)
    trainer.train()
    assert "inert" == reporter.stats().state
    assert [] == sink.requests
    assert before == len(worker_threads())


def test_a_failing_report_never_breaks_training(tmp_path: Path) -> None:
    """An exception inside a hook is logged once per hook (``adapter_error``); training goes on."""

    class Exploding(Reporter):
        def report_train_step(self, **kwargs: Any) -> None:
            raise ValueError("bug")

    sink = MemorySink()
    reporter = Exploding(sink, ReportingConfig(min_report_interval_seconds=0.01))
    trainer = make_trainer(
        tmp_path, [TrainReportCallback(reporter)], evaluate=False, logging_steps=1, max_steps=3
    )
    with capture_events() as events:
        trainer.train()
    errors = [e for e in events if e["event"] == "trainreport.adapter_error"]
    assert 3 == trainer.state.global_step
    assert [("on_step_end", "huggingface"), ("on_log", "huggingface")] == [
        (e["hook"], e["adapter"]) for e in errors
    ]
    assert sink.task is not None
    assert "completed" == sink.task["status"]


def test_split_logs_separates_eval_datasets_with_underscores() -> None:
    """A dataset named ``a_b`` is found from ``eval_a_b_runtime``, not cut at the first ``_``."""
    split, dropped = split_logs(
        {"eval_a_b_loss": 1.0, "eval_a_b_runtime": 0.1, "eval_a_b_acc": 0.5, "epoch": 1.5}
    )
    assert {"a_b": {"loss": 1.0, "runtime": 0.1, "acc": 0.5}} == split.validation
    assert ({}, 1.5, []) == (split.train, split.epoch, dropped)


def test_split_logs_routes_single_eval_test_summary_and_training_keys() -> None:
    """``eval_*`` is validation, ``test_*`` (with ``test_runtime``) another phase, rest training."""
    split, dropped = split_logs(
        {
            "loss": 0.5,
            "grad_norm": 1.0,
            "eval_loss": 0.7,
            "test_loss": 0.9,
            "test_runtime": 0.2,
            "train_runtime": 3.0,
            "total_flos": 0.0,
            "note": "text",
            "flag": True,
            "num_input_tokens_seen": 128,
        }
    )
    assert {"loss": 0.5, "grad_norm": 1.0, "num_input_tokens_seen": 128} == split.train
    assert {None: {"loss": 0.7}} == split.validation
    assert {"test": {"loss": 0.9, "runtime": 0.2}} == split.other
    assert {"train_runtime": 3.0, "total_flos": 0.0} == split.summary
    assert ["note", "flag"] == dropped


_LOG_VALUES = st.one_of(
    st.floats(allow_nan=False), st.integers(), st.text(max_size=5), st.none(), st.booleans()
)


@given(logs=st.dictionaries(st.from_regex(r"[a-z_]{1,20}", fullmatch=True), _LOG_VALUES))
def test_split_logs_places_every_key_exactly_once(logs: dict[str, object]) -> None:
    """Whatever HF logs, each key lands in exactly one place (a metric, the epoch, or dropped)."""
    split, dropped = split_logs(logs)
    placed = (
        len(split.train)
        + sum(len(m) for m in split.validation.values())
        + sum(len(m) for m in split.other.values())
        + len(split.summary)
        + len(dropped)
        + (split.epoch is not None)
    )
    assert len(logs) == placed
    assert [] == [k for k in dropped if type(logs[k]) in (int, float)]


# --------------------------------------------------------------------------- Kubeflow Trainer


def test_inside_a_trainjob_transformers_adds_kubeflow_even_to_report_to_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers appends ``kubeflow`` whenever the URL is set; only its switch removes it."""
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "https://127.0.0.1:1/status")
    with_url = TrainingArguments(output_dir=str(tmp_path), report_to="none").report_to
    monkeypatch.setenv("DISABLE_KUBEFLOW_INTEGRATION", "TRUE")
    disabled = TrainingArguments(output_dir=str(tmp_path), report_to="none").report_to
    assert (["kubeflow"], []) == (with_url, disabled)


def test_the_callback_says_when_transformers_kubeflow_callback_also_posts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``kubeflow`` in ``report_to`` one warning names the switch that turns it off."""
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "https://127.0.0.1:1/status")
    monkeypatch.delenv("KUBEFLOW_TRAINER_SERVER_TOKEN", raising=False)  # it posts nothing then
    reporter, _ = make_reporter()
    with capture_events() as events:
        make_trainer(tmp_path, [TrainReportCallback(reporter)], evaluate=False, max_steps=2).train()
    warned = [e for e in events if e["event"] == "trainreport.kubeflow_callback_active"]
    assert 1 == len(warned)
    assert "DISABLE_KUBEFLOW_INTEGRATION=TRUE" in warned[0]["reason"]
