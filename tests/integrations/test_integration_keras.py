"""The Keras 3 callback with the real ``keras`` on the torch backend, on CPU."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # Keras picks its backend at import

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport.integrations.keras import TrainReportCallback

pytestmark = pytest.mark.timeout(120)


def test_the_backend_is_torch() -> None:
    """These tests run Keras on PyTorch (the CPU build installed here)."""
    assert "torch" == keras.backend.backend()


def steps(task: dict[str, Any], name: str) -> list[int]:
    return [p["step"] for p in task["status_details"]["metrics"][name]]


def epochs(task: dict[str, Any], name: str) -> list[int]:
    return [p["epoch"] for p in task["status_details"]["metrics"][name]]


def data(n: int = 32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, (x.sum(axis=1, keepdims=True) > 0).astype("float32")


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    m.compile(optimizer="sgd", loss="binary_crossentropy", metrics=["accuracy"])
    return m


def make_callback(**kw: Any) -> tuple[TrainReportCallback, MemorySink]:
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=0.01), rank=0)
    return TrainReportCallback(reporter, **kw), sink


def test_fit_reports_every_step_validation_per_epoch_and_completion() -> None:
    """3 epochs of 4 batches: train points at steps 1-12, validation at 4, 8, 12, completed."""
    callback, sink = make_callback()
    x, y = data()
    model().fit(
        x, y, batch_size=8, epochs=3, validation_data=data(16), callbacks=[callback], verbose=0
    )
    assert callback.close(10)
    task = sink.task
    assert task is not None
    details = task["status_details"]
    assert (list(range(1, 13)), [1] * 4 + [2] * 4 + [3] * 4) == (
        steps(task, "train_loss"),
        epochs(task, "train_loss"),
    )
    assert ([4, 8, 12], [1, 2, 3]) == (steps(task, "val_loss"), epochs(task, "val_loss"))
    assert [4, 8, 12] == steps(task, "val_accuracy")
    assert ("completed", 12, 12, 3, 100.0) == (
        task["status"],
        details["step"],
        details["max_steps"],
        details["num_epochs"],
        details["percentage_done"],
    )


def test_evaluate_after_fit_is_a_test_phase_not_a_second_validation_point() -> None:
    """A standalone ``evaluate`` is phase ``test``; inside ``fit`` validation is reported once."""
    callback, sink = make_callback()
    x, y = data()
    m = model()
    m.fit(x, y, batch_size=8, epochs=1, validation_data=data(16), callbacks=[callback], verbose=0)
    after_fit = callback.reporter.snapshot()["status_details"]
    m.evaluate(*data(16), callbacks=[callback], verbose=0)
    assert callback.close(10)
    task = sink.task
    assert task is not None
    assert (False, [4], [4]) == (
        "test_loss" in after_fit,
        steps(task, "val_loss"),
        steps(task, "test_loss"),
    )


def test_a_cancel_request_stops_fit() -> None:
    """When the job-status service cancels the job, ``model.stop_training`` ends fit early."""
    callback, sink = make_callback()
    sink.request_cancel()
    reporter = callback.reporter
    reporter.start()
    reporter.report_metrics(step=0, metrics={"warmup": 1.0}, phase="setup")
    assert reporter.flush(10)
    x, y = data()
    history = model().fit(x, y, batch_size=8, epochs=5, callbacks=[callback], verbose=0)
    assert callback.close(10)
    task = sink.task
    assert task is not None
    assert (1, "cancelled", "cancel_requested", 1) == (
        len(history.history["loss"]),
        task["status"],
        task["status_details"]["cancel_reason"],
        task["status_details"]["step"],
    )


class Boom(keras.callbacks.Callback):  # type: ignore[misc]
    """Raises at the fourth batch, like a loss that went NaN."""

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if batch == 3:
            raise RuntimeError("loss went NaN at batch 3")


def test_a_fit_that_raises_leaves_the_failure_hook_that_reports_it() -> None:
    """Keras calls no callback on a crash; the hook installed at train begin reports it."""
    callback, sink = make_callback()
    x, y = data()
    with pytest.raises(RuntimeError, match="went NaN"):
        model().fit(x, y, batch_size=8, epochs=2, callbacks=[callback, Boom()], verbose=0)
    uninstall = callback._uninstall
    assert uninstall is not None
    try:  # what the interpreter does with the uncaught exception
        sys.excepthook(RuntimeError, RuntimeError("loss went NaN at batch 3"), None)
    finally:
        uninstall()
    assert callback.close(10)
    task = sink.task
    assert task is not None
    assert ("failed", [1, 2, 3]) == (task["status"], steps(task, "train_loss"))


def test_a_fit_that_raises_ends_the_process_reported_failed(tmp_path: Path) -> None:
    """Keras calls no callback on a crash: the hooks report it as the exception ends the process."""
    out = tmp_path / "run.json"
    script = textwrap.dedent(
        f"""
        import os
        os.environ["KERAS_BACKEND"] = "torch"
        import keras, numpy as np
        from trainreport import FileSink, Reporter, ReportingConfig
        from trainreport.integrations.keras import TrainReportCallback

        class Boom(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if batch == 3:
                    raise RuntimeError("loss went NaN at batch 3")

        config = ReportingConfig(min_report_interval_seconds=0.01)
        reporter = Reporter(FileSink({str(out)!r}), config, rank=0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x = np.ones((32, 4), "float32")
        callbacks = [TrainReportCallback(reporter), Boom()]
        model.fit(x, x[:, :1], batch_size=8, epochs=2, callbacks=callbacks, verbose=0)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
    )
    task = json.loads(out.read_text())
    assert (1, "failed") == (done.returncode, task["status"])
    assert "loss went NaN" in task["status_details"]["error"]["message"]
    assert [1, 2, 3] == [p["step"] for p in task["status_details"]["metrics"]["train_loss"]][:3]
