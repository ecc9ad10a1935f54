"""``trainreport demo``: a real training run on real data, reported to the reference server.

The model is a small multi-layer perceptron written in numpy, trained with
mini-batch SGD and a cosine learning-rate schedule on scikit-learn's bundled
handwritten digits (1,797 8x8 images; no download). A held-out split is
evaluated every few steps and a checkpoint file is written each epoch. The
loop reports through the public API exactly as a user's loop would: the
reporter starts during setup and ``close()`` runs in a ``finally``.

Needs the ``demo`` extra (numpy, scikit-learn, the server extra).
"""

from __future__ import annotations

import argparse
import datetime
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from trainreport import HttpSink, Reporter, ReportingConfig, client
from trainreport._wire._protocol import CAPABILITIES_PATH
from trainreport.cli._summary import describe_task
from trainreport.exceptions import ClientError, NotFoundError

__all__ = ["DemoResult", "check_service", "default_job_id", "run_demo", "train"]


class _MLP:
    """64 -> hidden -> 10 with ReLU and softmax cross-entropy."""

    def __init__(self, rng: np.random.Generator, hidden: int = 64) -> None:
        self.w1 = rng.normal(0.0, math.sqrt(2.0 / 64), (64, hidden))
        self.b1 = np.zeros(hidden)
        self.w2 = rng.normal(0.0, math.sqrt(2.0 / hidden), (hidden, 10))
        self.b2 = np.zeros(10)

    def params(self) -> dict[str, np.ndarray]:
        return {"w1": self.w1, "b1": self.b1, "w2": self.w2, "b2": self.b2}

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hidden = np.maximum(x @ self.w1 + self.b1, 0.0)
        logits = hidden @ self.w2 + self.b2
        return hidden, logits

    def loss_and_grads(
        self, x: np.ndarray, y: np.ndarray
    ) -> tuple[float, float, dict[str, np.ndarray]]:
        hidden, logits = self.forward(x)
        shifted = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(shifted)
        probs /= probs.sum(axis=1, keepdims=True)
        n = len(y)
        loss = float(-np.log(probs[np.arange(n), y] + 1e-12).mean())
        accuracy = float((logits.argmax(axis=1) == y).mean())
        d_logits = probs
        d_logits[np.arange(n), y] -= 1.0
        d_logits /= n
        d_hidden = (d_logits @ self.w2.T) * (hidden > 0)
        grads = {
            "w2": hidden.T @ d_logits,
            "b2": d_logits.sum(axis=0),
            "w1": x.T @ d_hidden,
            "b1": d_hidden.sum(axis=0),
        }
        return loss, accuracy, grads

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        loss, accuracy, _ = self.loss_and_grads(x, y)
        return loss, accuracy


def _load_digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # noqa: PLC0415 - the demo extra only

    data = load_digits()
    x = data.data.astype(np.float64) / 16.0
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    split = int(0.8 * len(y))
    train, val = order[:split], order[split:]
    return x[train], y[train], x[val], y[val]


def train(
    reporter: Reporter,
    *,
    steps: int,
    epochs: int = 3,
    batch_size: int = 32,
    base_lr: float = 0.2,
    eval_every: int = 25,
    checkpoint_dir: Path,
    seed: int = 0,
) -> dict[str, float]:
    """Train the MLP for ``steps`` optimizer steps over ``epochs`` epochs, reporting each step.

    Args:
        reporter: a started reporter.
        steps: total optimizer steps (>= 1).
        epochs: epochs the steps are spread over.
        batch_size: examples per step.
        base_lr: peak learning rate of the cosine schedule.
        eval_every: validation every this many steps (and at the last step).
        checkpoint_dir: where one ``.npz`` checkpoint per epoch is written.
        seed: seeds data split, initialisation and shuffling.

    Returns:
        The final validation metrics ``{"loss": ..., "accuracy": ...}``.
    """
    x_train, y_train, x_val, y_val = _load_digits(seed)
    rng = np.random.default_rng(seed)
    model = _MLP(rng)
    reporter.report_hyperparameters(
        params={
            "model": {"layers": [64, 64, 10], "activation": "relu"},
            "optimizer": {"name": "sgd", "lr": base_lr, "schedule": "cosine"},
            "batch_size": batch_size,
            "steps": steps,
            "epochs": epochs,
            "data": {"name": "sklearn digits", "train": len(y_train), "validation": len(y_val)},
        }
    )
    reporter.report_training_start(max_steps=steps, num_epochs=epochs)
    steps_per_epoch = math.ceil(steps / epochs)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    final = {"loss": math.nan, "accuracy": math.nan}
    step = 0
    for epoch in range(epochs):
        order = rng.permutation(len(y_train))
        for i in range(steps_per_epoch):
            if step >= steps:
                break
            start = (i * batch_size) % len(order)
            batch = order[start : start + batch_size]
            lr = 0.5 * base_lr * (1.0 + math.cos(math.pi * step / steps))
            loss, accuracy, grads = model.loss_and_grads(x_train[batch], y_train[batch])
            grad_norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
            for name, param in model.params().items():
                param -= lr * grads[name]  # noqa: PLW2901 - in-place update of the array
            step += 1
            reporter.report_train_step(
                step=step,
                epoch=epoch,
                metrics={"loss": loss, "accuracy": accuracy, "lr": lr, "grad_norm": grad_norm},
            )
            if step % eval_every == 0 or step == steps:
                val_loss, val_accuracy = model.evaluate(x_val, y_val)
                final = {"loss": val_loss, "accuracy": val_accuracy}
                reporter.report_validation(
                    step=step, epoch=epoch, metrics={"loss": val_loss, "accuracy": val_accuracy}
                )
        path = checkpoint_dir / f"epoch-{epoch + 1}.npz"
        np.savez(path, w1=model.w1, b1=model.b1, w2=model.w2, b2=model.b2)
        reporter.report_checkpoint_saved(path=path, step=step)
        reporter.report_epoch_end(epoch=epoch)
    return final


class DemoResult:
    """What the demo printed a summary of (for tests)."""

    def __init__(self, url: str, job_id: str, task: dict[str, Any], closed_cleanly: bool) -> None:
        self.url = url
        self.job_id = job_id
        self.task = task
        self.closed_cleanly = closed_cleanly


def default_job_id() -> str:
    """``demo-<local time>``, e.g. ``demo-20250101-120000``. Never raises."""
    return "demo-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def check_service(url: str, job_id: str, token: str | None) -> None:
    """Check that ``url`` is a job-status service that takes ``token``, before anything is trained.

    ``GET /v1/capabilities`` (the reference server answers it; a plain job API
    may answer 404), then one ``GET`` of the task the demo will write, the read
    it makes after training anyway: 200 (a job run again) passes, and so does
    404 (a new job) when the capabilities answered. Both 404: no service there
    (a path it does not serve), refused. A URL that is not ``http(s)://host``
    is refused before any request.

    Args:
        url: the service's base URL.
        job_id: the job the demo reports to.
        token: the bearer token, or ``None``.

    Raises:
        UnreachableError, UnauthorizedError, ClientError: as
            :func:`trainreport.client.read_task`, except ``NotFoundError``.
    """
    try:
        client.read_capabilities(url, timeout_seconds=_CHECK_TIMEOUT_SECONDS)
        answered = True
    except NotFoundError:
        answered = False
    try:
        client.read_task(url, job_id, "train", token, timeout_seconds=_CHECK_TIMEOUT_SECONDS)
    except NotFoundError as exc:
        if not answered:
            raise ClientError(
                f"not a trainreport job-status service at {exc.url}: {CAPABILITIES_PATH} and "
                "the task both answered 404; give the service's base URL (no path it does "
                "not serve)",
                url=exc.url,
                job_id=job_id,
                task_id="train",
                status=404,
            ) from exc


#: Seconds the check before training may take (connect and read each).
_CHECK_TIMEOUT_SECONDS = 5.0


def run_demo(args: argparse.Namespace) -> DemoResult:
    """Run the demo as ``trainreport demo`` does, print the summary, return what it saw.

    Raises:
        ClientError: reading the task back after training failed (the embedded
            server, if any, is stopped first).
    """
    from trainreport.server import start_in_thread  # noqa: PLC0415 - the server extra

    runs = Path(args.runs_dir)
    runs.mkdir(parents=True, exist_ok=True)
    job_id = args.job_id or default_job_id()
    db_path = runs / "trainreport.db"
    server = None
    url = args.url
    if url is None:
        server = start_in_thread(db_path)
        url = server.url
    sink = HttpSink(url, job_id, "train", token=args.token)
    print(f"trainreport demo: job {job_id}, reporting to {sink.base_url}")
    config = ReportingConfig(min_report_interval_seconds=args.interval)
    reporter = Reporter(sink, config, rank=0)
    reporter.start()
    started = time.monotonic()
    closed = False
    try:
        final = train(reporter, steps=args.steps, checkpoint_dir=runs / job_id / "checkpoints")
        reporter.report_outcome()
    except BaseException as exc:
        reporter.report_outcome(exc)
        raise
    finally:
        closed = reporter.close(timeout=30.0)
    elapsed = time.monotonic() - started
    try:
        task = client.read_task(url, job_id, "train", args.token)
    except ClientError:
        if server is not None:
            server.stop()
        raise
    _print_summary(reporter, task, job_id, elapsed, final, closed)
    page = f"{url}/jobs/{job_id}/tasks/train"
    result = DemoResult(url, job_id, task, closed)
    if server is None:  # a server of the user's (--url): it is still up
        print(f"\nchart page: {page}")
    elif args.keep_serving:
        print(f"\nchart page: {page} (serving until Ctrl-C)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    else:
        server.stop()
        print(
            "\nthe embedded server stopped with the demo; keep its chart page up with "
            "`trainreport demo --keep-serving`,\nor look again: "
            f"trainreport serve --db {db_path}  (then open "
            f"http://127.0.0.1:8321/jobs/{job_id}/tasks/train)"
        )
    return result


def _print_summary(
    reporter: Reporter,
    task: dict[str, Any],
    job_id: str,
    elapsed: float,
    final: dict[str, float],
    closed: bool,
) -> None:
    details = task["status_details"]
    print(
        f"\njob {job_id}: {task['status']} after {details.get('step')} of "
        f"{details.get('max_steps')} steps in {elapsed:.1f} s; everything delivered: "
        f"{'yes' if closed else 'NO'}\n"
    )
    print(describe_task(task))
    stats = reporter.stats()
    print(f"\nvalidation: loss {final['loss']:.4f}, accuracy {final['accuracy']:.3f}")
    print(
        f"report calls: {stats.report_calls}, time inside them p50 {stats.report_p50_us:.1f} µs,"
        f" p99 {stats.report_p99_us:.1f} µs, max {stats.report_max_us:.0f} µs"
    )
    print(
        f"requests: {stats.requests_sent} sent, {stats.requests_failed} failed, "
        f"{stats.bytes_sent} bytes"
    )
