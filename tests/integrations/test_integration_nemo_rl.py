"""Tests for trainreport.integrations.nemo_rl with metric dicts shaped like NeMo-RL's runs.

NeMo-RL itself is not installed: the calls below mirror what
``nemo_rl/algorithms/{sft,dpo,grpo}.py`` and its GPU monitor pass to a
``LoggerInterface`` backend (step is ``total_steps + 1``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainreport import MemorySink, Reporter, ReportingConfig, read_task
from trainreport.integrations.nemo_rl import OTHER_PHASE, TrainReportNemoLogger, phase_of_prefix
from trainreport.testing import capture_events


def make_logger(**kwargs: Any) -> tuple[TrainReportNemoLogger, MemorySink]:
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01))
    return TrainReportNemoLogger(reporter, **kwargs), sink


def finished(logger: TrainReportNemoLogger, sink: MemorySink) -> dict[str, Any]:
    assert logger.finish(10.0)
    assert sink.task is not None
    return sink.task


def steps(task: dict[str, Any], name: str) -> list[int]:
    return [p["step"] for p in task["status_details"]["metrics"][name]]


def test_sft_run_maps_train_validation_and_timing_streams() -> None:
    """SFT: ``train`` -> train curves, ``validation`` -> val, ``timing/train`` -> its own phase."""
    logger, sink = make_logger(max_steps=4)
    logger.log_hyperparams({"sft": {"max_num_steps": 4, "val_period": 2}, "policy": {"lr": 1e-5}})
    for step in range(1, 5):
        if step % 2 == 0:
            logger.log_metrics({"val_loss": 0.9 - step / 10}, step, prefix="validation")
            logger.log_metrics({"total_validation_time": 0.5}, step, prefix="timing/validation")
        train = {"loss": 1.0 / step, "grad_norm": 2.0, "lr": 1e-5, "global_valid_toks": 4096}
        logger.log_metrics(train, step, prefix="train")
        logger.log_metrics(
            {"total_step_time": 1.5}, step, prefix="timing/train", step_finished=True
        )
    task = finished(logger, sink)
    details = task["status_details"]
    assert [1, 2, 3, 4] == steps(task, "train_loss")
    assert "train_global_valid_toks" not in details["metrics"]  # a counter: current value only
    assert 4096 == details["train_global_valid_toks"]
    assert [2, 4] == steps(task, "val_loss")
    assert [1, 2, 3, 4] == steps(task, "timing_train_total_step_time")
    assert [2, 4] == steps(task, "timing_validation_total_validation_time")
    assert ("completed", 4, 4, 100.0) == (
        task["status"],
        details["step"],
        details["max_steps"],
        details["percentage_done"],
    )
    assert {"sft/max_num_steps": 4, "sft/val_period": 2, "policy/lr": 1e-5} == details[
        "hyperparameters"
    ]


def test_dpo_run_with_two_validation_datasets_keeps_them_apart() -> None:
    """DPO: ``validation-<name>`` streams become separate datasets; the first keeps ``val_``."""
    logger, sink = make_logger()
    for step in (1, 2):
        logger.log_metrics(
            {
                "loss": 0.7,
                "accuracy": 0.6,
                "rewards_chosen_mean": 0.2,
                "rewards_rejected_mean": -0.1,
                "sft_loss": 0.0,
                "preference_loss": 0.7,
            },
            step,
            prefix="train",
        )
        logger.log_metrics({"loss": 0.8, "accuracy": 0.55}, step, prefix="validation-helpsteer")
        logger.log_metrics({"loss": 0.9, "accuracy": 0.5}, step, prefix="validation-tulu")
    task = finished(logger, sink)
    assert [1, 2] == steps(task, "train_rewards_chosen_mean")
    assert [1, 2] == steps(task, "val_accuracy")
    assert [1, 2] == steps(task, "val_tulu_accuracy")
    assert ["helpsteer", "tulu"] == task["status_details"]["val_datasets"]


def test_grpo_system_metrics_with_step_metric_never_move_progress() -> None:
    """GRPO: the GPU monitor's ``ray`` stream is keyed by its own counter, not training steps."""
    logger, sink = make_logger(max_steps=10)
    logger.log_metrics(
        {"reward": 0.4, "kl_penalty": 0.01, "loss": 0.3, "token_mult_prob_error": 1.01},
        3,
        prefix="train",
    )
    logger.log_metrics({"tokens_per_sec_per_gpu": 1200.0}, 3, prefix="performance")
    logger.log_metrics(
        {"node.0.gpu.0.util": 55.0, "node.0.gpu.0.mem_gb": 20.5, "ray/ray_step": 97},
        97,
        prefix="ray",
        step_metric="ray/ray_step",
    )
    task = finished(logger, sink)
    details = task["status_details"]
    assert [97] == steps(task, "ray_node.0.gpu.0.util")
    assert 1200.0 == details["performance_tokens_per_sec_per_gpu"]  # a counter: current value
    assert "performance_tokens_per_sec_per_gpu" not in details["metrics"]
    assert (3, 30.0) == (details["step"], details["percentage_done"])
    assert "ray_ray/ray_step" not in details["metrics"]
    assert "ray_ray_step" not in details["metrics"]


def test_step_metric_missing_from_metrics_falls_back_to_step() -> None:
    """When the named counter is absent, the call's own ``step`` is used."""
    logger, sink = make_logger()
    logger.log_metrics({"util": 0.5}, 12, prefix="ray", step_metric="ray/ray_step")
    assert [12] == steps(finished(logger, sink), "ray_util")


def test_empty_prefix_splits_names_at_their_last_slash() -> None:
    """With ``prefix=""``, ``a/b/name`` maps like prefix ``a/b``; bare names go to ``other``."""
    logger, sink = make_logger()
    logger.log_metrics(
        {"train/loss": 0.5, "timing/train/total": 2.0, "validation/math/acc": 0.7, "counter": 3},
        5,
    )
    task = finished(logger, sink)
    assert [5] == steps(task, "train_loss")
    assert [5] == steps(task, "timing_train_total")
    assert [5] == steps(task, "val_acc")
    assert [5] == steps(task, f"{OTHER_PHASE}_counter")
    assert ["math"] == task["status_details"]["val_datasets"]


def test_nested_metrics_are_flattened_and_non_numbers_dropped() -> None:
    """Nested mappings flatten with ``/``; a list value is dropped with one log event."""
    logger, sink = make_logger()
    with capture_events() as events:
        for step in (1, 2):
            logger.log_metrics(
                {"loss": 0.5, "reward": {"mean": 0.1, "max": 0.9}, "lengths": [1, 2]},
                step,
                prefix="train",
            )
        task = finished(logger, sink)
    assert [1, 2] == steps(task, "train_reward/mean")
    assert "train_lengths" not in task["status_details"]["metrics"]
    dropped = [e for e in events if e["event"] == "trainreport.report_dropped"]
    assert 1 == len(dropped)


def test_histograms_and_plots_are_ignored_without_starting_anything() -> None:
    """``log_histogram``/``log_plot`` exist for interface parity and do nothing."""
    logger, sink = make_logger()
    logger.log_histogram([1.0, 2.0], 1, "h")
    logger.log_plot(object(), 1, "p")
    assert logger.reporter is not None
    assert "new" == logger.reporter.stats().state
    assert [] == sink.requests


def test_close_without_finish_applies_the_reporters_rule_at_close() -> None:
    """``close()`` delivers everything and reports nothing itself: the reporter completes it."""
    logger, sink = make_logger()
    logger.log_metrics({"loss": 1.0}, 1, prefix="train")
    with capture_events() as events:
        assert logger.close(10.0)
    assert sink.task is not None
    assert "completed" == sink.task["status"]
    assert ["close"] == [e["at"] for e in events if e["event"] == "trainreport.completed_at_close"]


def test_reporter_is_built_from_env_on_first_use(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TrainReportNemoLogger()`` builds ``Reporter.from_env()`` lazily (a FileSink here)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINREPORT_JOB_ID", "grpo-job")
    monkeypatch.delenv("TRAINREPORT_URL", raising=False)
    logger = TrainReportNemoLogger()
    assert logger.reporter is None
    logger.log_metrics({"loss": 1.0}, 1, prefix="train")
    assert logger.finish(10.0)
    assert "completed" == read_task(tmp_path / "trainreport-runs" / "grpo-job.log")["status"]


def test_rank_1_environment_makes_the_logger_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``RANK=1`` nothing is sent and no reporter thread is created."""
    monkeypatch.setenv("RANK", "1")
    before = [t for t in threading.enumerate() if t.name == "trainreport-reporter"]
    logger, sink = make_logger(max_steps=3)
    logger.log_metrics({"loss": 1.0}, 1, prefix="train")
    assert logger.finish(10.0)
    after = [t for t in threading.enumerate() if t.name == "trainreport-reporter"]
    assert [] == sink.requests
    assert len(before) == len(after)


def test_a_failing_report_is_logged_once_and_never_raises() -> None:
    """A bad ``step`` (NaN counter) is logged once as ``adapter_error``; later calls still work."""
    logger, sink = make_logger()
    with capture_events() as events:
        for _ in range(2):
            logger.log_metrics({"x": 1.0, "c": float("nan")}, 1, prefix="sys", step_metric="c")
        logger.log_metrics({"loss": 1.0}, 1, prefix="train")
        task = finished(logger, sink)
    errors = [e for e in events if e["event"] == "trainreport.adapter_error"]
    assert [("log_metrics", "nemo_rl")] == [(e["hook"], e["adapter"]) for e in errors]
    assert [1] == steps(task, "train_loss")


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("train", ("train", None)),
        ("validation", ("validation", None)),
        ("validation-math", ("validation", "math")),
        ("validation/code", ("validation", "code")),
        ("validation-", ("validation", None)),
        ("timing/train", ("timing_train", None)),
        ("performance", ("performance", None)),
        ("", (OTHER_PHASE, None)),
        ("//", (OTHER_PHASE, None)),
        ("3d", ("p_3d", None)),
    ],
)
def test_phase_of_prefix_table(prefix: str, expected: tuple[str, str | None]) -> None:
    """Each NeMo-RL prefix maps to one phase (and dataset); every result is an identifier."""
    assert expected == phase_of_prefix(prefix)
    assert phase_of_prefix(prefix)[0].isidentifier()


def test_a_step_metric_stream_never_moves_progress_even_with_prefix_train() -> None:
    """With ``step_metric`` it is ``report_metrics``: a ``train`` stream by time stays aside."""
    logger, sink = make_logger(max_steps=10)
    logger.log_metrics({"loss": 1.0}, 1, prefix="train")
    logger.log_metrics({"gpu_util": 0.5, "wall_s": 50}, 1, prefix="train", step_metric="wall_s")
    task = finished(logger, sink)
    assert (1, 10.0) == (task["status_details"]["step"], task["status_details"]["percentage_done"])
    assert [50] == steps(task, "train_gpu_util")


@given(prefix=st.text(max_size=300))
def test_phase_of_prefix_always_gives_a_phase_the_reporter_accepts(prefix: str) -> None:
    """Any prefix maps to an identifier phase of bounded length; datasets only for validation."""
    phase, dataset = phase_of_prefix(prefix)
    assert phase.isidentifier()
    assert len(phase) <= 52
    assert dataset is None or prefix.startswith("validation")


# --------------------------------------------------------------------------- epochs


def epochs(task: dict[str, Any], name: str) -> list[int]:
    """The epochs of a stored curve's points."""
    return [p["epoch"] for p in task["status_details"]["metrics"][name]]


def test_steps_per_epoch_gives_each_point_its_one_based_epoch() -> None:
    """With 3 steps an epoch, steps 1-3 are epoch 1, 4-6 epoch 2, 7 epoch 3; epoch is stored."""
    logger, sink = make_logger(steps_per_epoch=3, num_epochs=3)
    logger.log_metrics({"val_loss": 1.0}, 0, prefix="validation")  # val_at_start: step 0
    for step in range(1, 8):
        logger.log_metrics({"loss": 1.0 / step}, step, prefix="train")
        if step % 3 == 0:
            logger.log_metrics({"val_loss": 0.5}, step, prefix="validation")
    task = finished(logger, sink)
    assert ([1, 1, 1, 2, 2, 2, 3], [1, 1, 2], 3) == (
        epochs(task, "train_loss"),
        epochs(task, "val_loss"),
        task["status_details"]["epoch"],
    )


def test_without_steps_per_epoch_every_point_stays_in_epoch_one() -> None:
    """The logger is never told the epoch: without the schedule there is only epoch 1."""
    logger, sink = make_logger()
    for step in range(1, 5):
        logger.log_metrics({"loss": 1.0}, step, prefix="train")
    assert [1, 1, 1, 1] == epochs(finished(logger, sink), "train_loss")


def test_from_schedule_derives_steps_epochs_and_max_steps_like_nemo_rl() -> None:
    """``len(dataloader)`` steps an epoch; the run ends at min(max_num_steps, epochs x len)."""
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01))
    logger = TrainReportNemoLogger.from_schedule(
        {"max_num_steps": 100, "max_num_epochs": 2}, list(range(4)), reporter
    )
    for step in range(1, 9):
        logger.log_metrics({"loss": 1.0}, step, prefix="train")
    task = finished(logger, sink)
    details = task["status_details"]
    assert ([1, 1, 1, 1, 2, 2, 2, 2], 8, 2, 100.0) == (
        epochs(task, "train_loss"),
        details["max_steps"],
        details["num_epochs"],
        details["percentage_done"],
    )


def test_from_schedule_takes_max_num_steps_when_it_ends_the_run_first() -> None:
    """``max_num_steps`` below epochs x len bounds the run; a missing key bounds nothing."""
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01))
    logger = TrainReportNemoLogger.from_schedule({"max_num_steps": 5}, range(10), reporter)
    logger.log_metrics({"loss": 1.0}, 1, prefix="train")
    details = finished(logger, sink)["status_details"]
    assert (5, None) == (details["max_steps"], details.get("num_epochs"))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_steps_per_epoch_must_be_a_positive_int(bad: object) -> None:
    """A wrong ``steps_per_epoch`` is a programming error raised at construction."""
    with pytest.raises(ValueError, match="steps_per_epoch"):
        TrainReportNemoLogger(steps_per_epoch=bad)  # type: ignore[arg-type]


def test_from_schedule_refuses_an_empty_dataloader() -> None:
    """An empty dataloader has no epoch length."""
    with pytest.raises(ValueError, match="empty"):
        TrainReportNemoLogger.from_schedule({"max_num_epochs": 1}, [])
