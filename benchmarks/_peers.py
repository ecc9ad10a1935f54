"""The peers as benchmark targets: wandb offline, MLflow async logging, tensorboardX.

The peers of docs/design.md#performance.

Each writes locally under a temporary directory (server modes do not apply to
them). They are imported lazily, so a missing or broken peer only marks its
column "not installed" or "failed" (``report.py``) and never fails the run.
The optional ``bench`` extra pins the versions measured.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loop import Target

#: Peer name -> its distribution on PyPI.
PEERS = {"wandb": "wandb", "mlflow": "mlflow", "tensorboardX": "tensorboardX"}


def peer_version(name: str) -> str | None:
    """The installed version of a peer's distribution, or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(PEERS[name])
    except importlib.metadata.PackageNotFoundError:
        return None


class _PeerTarget:
    """Shared plumbing: a temporary directory and no queue visible to us."""

    name = ""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"trainreport-bench-{self.name}-"))

    def queue_depth(self) -> int:
        """The peers' queues are internal: not sampled."""
        return 0

    def extras(self) -> dict[str, Any]:
        """The peer's version; removes the files it wrote."""
        shutil.rmtree(self.directory, ignore_errors=True)
        return {"version": peer_version(self.name)}


class WandbTarget(_PeerTarget):
    """``wandb.init(dir=tmp)`` in offline mode, ``run.log`` per step, ``run.finish()``."""

    name = "wandb"

    def __init__(self) -> None:
        super().__init__()
        os.environ["WANDB_MODE"] = "offline"
        os.environ["WANDB_SILENT"] = "true"
        os.environ["WANDB_CONSOLE"] = "off"
        self._wandb: Any = importlib.import_module("wandb")
        self._run: Any = None

    def start(self, max_steps: int) -> None:
        """Start an offline run."""
        self._run = self._wandb.init(
            dir=str(self.directory), project="trainreport-bench", config={"max_steps": max_steps}
        )

    @property
    def train_step(self) -> Callable[..., None]:
        """``run.log(metrics, step=step)``."""
        log = self._run.log

        def train_step(*, step: int, epoch: int, metrics: dict[str, float]) -> None:
            log(metrics, step=step)

        return train_step

    @property
    def validation(self) -> Callable[..., None]:
        """``run.log({"val/<name>": ...}, step=step)``."""
        log = self._run.log

        def validation(*, step: int, epoch: int, metrics: dict[str, float]) -> None:
            log({f"val/{k}": v for k, v in metrics.items()}, step=step)

        return validation

    @property
    def checkpoint(self) -> Callable[..., None]:
        """``run.summary["checkpoint_path"] = path``."""
        summary = self._run.summary

        def checkpoint(*, path: str, step: int) -> None:
            summary["checkpoint_path"] = path

        return checkpoint

    def finish(self) -> float:
        """``run.finish()``; returns its latency, seconds."""
        t0 = time.perf_counter()
        self._run.finish()
        return time.perf_counter() - t0

    def extras(self) -> dict[str, Any]:
        """Stop wandb's service process (so it cannot disturb later runs), then the base extras."""
        teardown = getattr(self._wandb, "teardown", None)
        if teardown is not None:
            teardown()
        return super().extras()


class MlflowTarget(_PeerTarget):
    """A local file store, ``log_metrics(..., synchronous=False)``, flush and ``end_run``."""

    name = "mlflow"

    def __init__(self) -> None:
        super().__init__()
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 wants a database otherwise
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        self._mlflow: Any = importlib.import_module("mlflow")

    def start(self, max_steps: int) -> None:
        """Point MLflow at a file store in the temporary directory and start a run."""
        mlflow = self._mlflow
        mlflow.set_tracking_uri(self.directory.as_uri())
        mlflow.set_experiment("trainreport-bench")
        mlflow.start_run()
        mlflow.log_param("max_steps", max_steps)

    @property
    def train_step(self) -> Callable[..., None]:
        """``mlflow.log_metrics(metrics, step=step, synchronous=False)``."""
        log_metrics = self._mlflow.log_metrics

        def train_step(*, step: int, epoch: int, metrics: dict[str, float]) -> None:
            log_metrics(metrics, step=step, synchronous=False)

        return train_step

    @property
    def validation(self) -> Callable[..., None]:
        """``log_metrics({"val_<name>": ...}, synchronous=False)``."""
        log_metrics = self._mlflow.log_metrics

        def validation(*, step: int, epoch: int, metrics: dict[str, float]) -> None:
            log_metrics({f"val_{k}": v for k, v in metrics.items()}, step=step, synchronous=False)

        return validation

    @property
    def checkpoint(self) -> Callable[..., None]:
        """``mlflow.set_tag("checkpoint_path", path)``."""
        set_tag = self._mlflow.set_tag

        def checkpoint(*, path: str, step: int) -> None:
            set_tag("checkpoint_path", path)

        return checkpoint

    def finish(self) -> float:
        """Flush the async queue and end the run; returns the latency, seconds."""
        mlflow = self._mlflow
        t0 = time.perf_counter()
        flush = getattr(mlflow, "flush_async_logging", None)
        if flush is not None:
            flush()
        mlflow.end_run()
        return time.perf_counter() - t0


class TensorboardXTarget(_PeerTarget):
    """``SummaryWriter(tmp)``, ``add_scalar`` per metric, ``flush`` and ``close``."""

    name = "tensorboardX"

    def __init__(self) -> None:
        super().__init__()
        self._module: Any = importlib.import_module("tensorboardX")
        self._writer: Any = None

    def start(self, max_steps: int) -> None:
        """Open the writer."""
        self._writer = self._module.SummaryWriter(str(self.directory))

    @property
    def train_step(self) -> Callable[..., None]:
        """``add_scalar("train/<name>", value, step)`` per metric."""
        add_scalar = self._writer.add_scalar

        def train_step(*, step: int, epoch: int, metrics: dict[str, float]) -> None:
            for name, value in metrics.items():
                add_scalar(f"train/{name}", value, step)

        return train_step

    @property
    def validation(self) -> Callable[..., None]:
        """``add_scalar("val/<name>", value, step)`` per metric."""
        add_scalar = self._writer.add_scalar

        def validation(*, step: int, epoch: int, metrics: dict[str, float]) -> None:
            for name, value in metrics.items():
                add_scalar(f"val/{name}", value, step)

        return validation

    @property
    def checkpoint(self) -> Callable[..., None]:
        """``add_text("checkpoint_path", path, step)``."""
        add_text = self._writer.add_text

        def checkpoint(*, path: str, step: int) -> None:
            add_text("checkpoint_path", path, step)

        return checkpoint

    def finish(self) -> float:
        """``flush()`` then ``close()``; returns the latency, seconds."""
        t0 = time.perf_counter()
        self._writer.flush()
        self._writer.close()
        return time.perf_counter() - t0


PEER_TARGETS: dict[str, Callable[[], Target]] = {
    "wandb": WandbTarget,
    "mlflow": MlflowTarget,
    "tensorboardX": TensorboardXTarget,
}
