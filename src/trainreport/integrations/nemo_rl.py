"""NeMo-RL-style adapter: :class:`TrainReportNemoLogger`.

NeMo-RL's ``nemo_rl.utils.logger.Logger`` fans every call out to backends
that implement its ``LoggerInterface`` (``log_metrics(metrics, step,
prefix="", step_metric=None, step_finished=False)``, ``log_hyperparams``,
``log_histogram``, ``log_plot``, and optionally ``finish``). This module
imports nothing from NeMo-RL (it pulls Ray, vLLM and more); the class has the
same shape, so it can be appended to a NeMo-RL ``Logger``'s ``loggers`` list or
called from any loop that logs the same way.

How NeMo-RL calls it (read off ``nemo_rl/algorithms/{sft,dpo,grpo}.py`` and
``nemo_rl/utils/logger.py``):

- ``step`` is ``total_steps + 1``: already the 1-based count of completed
  steps (docs/design.md#metrics), passed through unchanged.
- ``prefix`` names the stream: ``train``, ``validation``, ``timing/train``,
  ``timing/validation``, ``performance``, ``eval``; the GPU monitor logs with
  ``prefix="ray"`` and ``step_metric="ray/ray_step"`` (a wall-clock counter
  carried inside ``metrics``, not a training step).
- ``step_finished`` is a W&B commit hint and means nothing here.
- Epochs: the loops run ``for batch in train_dataloader`` inside ``while
  current_epoch < max_num_epochs and total_steps < max_num_steps``, so an
  epoch is ``len(train_dataloader)`` steps and the run is
  ``min(max_num_steps, max_num_epochs * len(train_dataloader))`` steps; the
  logger is never told the epoch, so it needs ``steps_per_epoch``
  (:meth:`TrainReportNemoLogger.from_schedule` reads it off the same config).
"""

from __future__ import annotations

import contextlib
import numbers
import re
from collections.abc import Mapping, Sized
from typing import Any

from trainreport import Reporter, ReporterState
from trainreport.integrations._defaults import NEMO_RL
from trainreport.integrations._guard import OnceLogger, adapter_guard

__all__ = ["DEFAULT_TIME_SERIES_METRICS", "OTHER_PHASE", "TrainReportNemoLogger", "phase_of_prefix"]

#: This adapter's default ``time_series_metrics`` (used when the config's is
#: ``None``): every metric but throughput/accounting counters
#: (``num_*``, ``global_valid_*``, ``*tokens*``...; ``docs/integrations.md``).
DEFAULT_TIME_SERIES_METRICS = NEMO_RL

#: Phase of metrics logged with an empty prefix and no ``/`` in their name.
OTHER_PHASE = "other"
_TRAIN, _VALIDATION = "train", "validation"
_UNDERSCORES = re.compile(r"_+")
_MAX_PHASE = (
    50  # characters; the phase prefixes every stored name (docs/design.md#metrics name limit)
)
_MAX_DEPTH = 4


def phase_of_prefix(prefix: str) -> tuple[str, str | None]:
    """Map a NeMo-RL ``prefix`` to a trainreport phase and validation dataset.

    ``"train"`` -> ``("train", None)``; ``"validation"`` -> ``("validation",
    None)``; ``"validation-<name>"`` or ``"validation/<name>"`` ->
    ``("validation", "<name>")``; anything else -> the prefix made an
    identifier of at most 50 characters (every run of characters that cannot
    be in an identifier becomes ``_``: ``"timing/train"`` ->
    ``"timing_train"``; ``p_`` is put in front of one that cannot start an
    identifier: ``"3d"`` -> ``"p_3d"``), or :data:`OTHER_PHASE` when nothing is left.

    Args:
        prefix: the ``prefix`` argument of ``log_metrics``.

    Returns:
        ``(phase, dataset)``. Never raises for a ``str``.
    """
    if prefix == _TRAIN:
        return _TRAIN, None
    if prefix == _VALIDATION:
        return _VALIDATION, None
    for separator in ("-", "/"):
        head = _VALIDATION + separator
        if prefix.startswith(head) and len(prefix) > len(head):
            return _VALIDATION, prefix[len(head) :]
    kept = "".join(c if f"_{c}".isidentifier() else "_" for c in prefix)
    phase = _UNDERSCORES.sub("_", kept).strip("_")[:_MAX_PHASE]
    if not phase:
        return OTHER_PHASE, None
    if not phase.isidentifier():  # starts with a digit or another non-initial character
        phase = f"p_{phase}"
    return phase, None


def _flatten(metrics: Mapping[str, Any], into: dict[str, Any], parent: str, depth: int) -> None:
    for key, value in metrics.items():
        name = f"{parent}/{key}" if parent else str(key)
        if isinstance(value, Mapping) and depth < _MAX_DEPTH:
            _flatten(value, into, name, depth + 1)
        else:
            into[name] = value


class TrainReportNemoLogger:
    """A NeMo-RL ``LoggerInterface`` backend that reports to a :class:`Reporter`.

    Mapping of ``log_metrics(metrics, step, prefix, step_metric)``
    (docs/design.md#public-api, #metrics):

    - without ``step_metric``, by :func:`phase_of_prefix`: ``train`` ->
      ``report_train_step(step=step)``; ``validation`` / ``validation-<name>``
      -> ``report_validation(step=step, dataset=<name>)``; anything else ->
      ``report_metrics(phase=<sanitised prefix>, step=step)``.
    - with an empty prefix, each name is split at its last ``/``
      (``"timing/train/total"`` is prefix ``timing/train``, name ``total``:
      the same as NeMo-RL's own ``prefix/name`` composition) and mapped as
      above; names without ``/`` go to phase :data:`OTHER_PHASE`.
    - with ``step_metric`` (wall-clock system metrics keyed by another
      counter): ``report_metrics(phase=..., step=metrics[step_metric])`` (or
      ``step`` when the key is missing), the counter itself left out. Such a
      stream never moves training progress, whatever its prefix.
    - nested mappings are flattened with ``/``; values that are not numbers
      (lists, strings) are dropped by the reporter with one log event per name.

    ``log_hyperparams`` -> ``report_hyperparameters``; ``log_histogram`` and
    ``log_plot`` do nothing; ``finish()`` reports completed and closes (NeMo-RL
    calls ``finish`` at teardown); ``close()`` only closes (the reporter's
    rule for a close without a terminal report applies, docs/design.md#lifecycle). A crash is not
    seen by a logger: use :func:`trainreport.integrations.install_failure_hooks`
    or ``with reporter:`` around the run.

    Epochs: with ``steps_per_epoch`` (NeMo-RL's ``len(train_dataloader)``),
    the points of step ``s`` carry the 1-based epoch ``ceil(s /
    steps_per_epoch)`` (step 0, a validation before training, is epoch 1);
    without it, the reporter's own rule applies (every point in epoch 1).
    Metrics keep a history by :data:`DEFAULT_TIME_SERIES_METRICS` unless the
    reporter's config sets ``time_series_metrics``.

    Args:
        reporter: the reporter to use; ``None`` builds one with
            :meth:`Reporter.from_env` on first use.
        max_steps: steps planned, reported with ``report_training_start`` on
            first use (for ``percentage_done`` and the ETA).
        num_epochs: epochs planned, likewise.
        steps_per_epoch: optimizer steps in one epoch (> 0), or ``None``.

    Raises:
        ValueError: ``steps_per_epoch`` is not a positive int (a programming
            error at construction, not during training).

    The reporter starts on the first report (only global rank 0 ever reports:
    the reporter checks ``RANK`` and the like). Methods never raise: a problem
    is logged once (``trainreport.adapter_error``).
    """

    def __init__(
        self,
        reporter: Reporter | None = None,
        *,
        max_steps: int | None = None,
        num_epochs: int | None = None,
        steps_per_epoch: int | None = None,
    ) -> None:
        if steps_per_epoch is not None and (
            isinstance(steps_per_epoch, bool)
            or not isinstance(steps_per_epoch, int)
            or steps_per_epoch <= 0
        ):
            raise ValueError(f"steps_per_epoch must be a positive int, got {steps_per_epoch!r}")
        self._reporter = reporter
        if reporter is not None:
            reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        self._max_steps = max_steps
        self._num_epochs = num_epochs
        self._steps_per_epoch = steps_per_epoch
        self._once = OnceLogger()

    @classmethod
    def from_schedule(
        cls,
        algorithm_config: Mapping[str, Any],
        train_dataloader: Sized,
        reporter: Reporter | None = None,
    ) -> TrainReportNemoLogger:
        """A logger that knows the run's schedule the way NeMo-RL derives it.

        ``steps_per_epoch = len(train_dataloader)``; ``max_steps =
        min(max_num_steps, max_num_epochs * steps_per_epoch)`` and
        ``num_epochs = max_num_epochs`` (each only when the config has it),
        as NeMo-RL's SFT, DPO and GRPO loops bound their ``while`` loop.

        Args:
            algorithm_config: the algorithm's section of NeMo-RL's master
                config (``master_config["sft"]``, ``["dpo"]`` or ``["grpo"]``),
                read for ``max_num_steps`` and ``max_num_epochs``.
            train_dataloader: the training dataloader (only ``len()`` is used).
            reporter: see :class:`TrainReportNemoLogger`.

        Raises:
            ValueError: the dataloader is empty.
        """
        steps_per_epoch = len(train_dataloader)
        if steps_per_epoch <= 0:
            raise ValueError("train_dataloader is empty: an epoch would have no steps")
        max_num_steps = _positive(algorithm_config.get("max_num_steps"))
        max_num_epochs = _positive(algorithm_config.get("max_num_epochs"))
        bounds = [
            b
            for b in (
                max_num_steps,
                max_num_epochs * steps_per_epoch if max_num_epochs is not None else None,
            )
            if b is not None
        ]
        return cls(
            reporter,
            max_steps=min(bounds) if bounds else None,
            num_epochs=max_num_epochs,
            steps_per_epoch=steps_per_epoch,
        )

    @property
    def reporter(self) -> Reporter | None:
        """The reporter in use (``None`` until first use when built from the environment)."""
        return self._reporter

    def log_metrics(
        self,
        metrics: Mapping[str, Any],
        step: int,
        prefix: str | None = "",
        step_metric: str | None = None,
        step_finished: bool = False,
    ) -> None:
        """Report one dict of metrics (see the class docs for the mapping).

        Args:
            metrics: metric name -> value (nested mappings allowed).
            step: the step the metrics belong to (NeMo-RL: 1-based completed steps).
            prefix: the stream name (``train``, ``validation``, ``timing/train``, ...).
            step_metric: the key in ``metrics`` that holds this stream's own counter.
            step_finished: ignored (a W&B commit hint).

        Never raises.
        """
        with self._guard("log_metrics"):
            flat: dict[str, Any] = {}
            _flatten(metrics, flat, "", 0)
            reporter = self._started()
            if step_metric:
                own_step = flat.pop(step_metric, None)
                usable = isinstance(own_step, numbers.Real) and not isinstance(own_step, bool)
                at = own_step if usable else step
                phase, _ = phase_of_prefix(prefix or "")
                reporter.report_metrics(step=int(at), metrics=flat, phase=phase)
                return
            epoch = self._epoch_of(step)
            if prefix:
                self._report(reporter, prefix, step, epoch, flat)
                return
            groups: dict[str, dict[str, Any]] = {}
            for name, value in flat.items():
                head, _, tail = name.rpartition("/")
                groups.setdefault(head, {})[tail] = value
            for head, values in groups.items():
                self._report(reporter, head, step, epoch, values)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Report hyperparameters (nested mappings are flattened with ``/``). Never raises."""
        with self._guard("log_hyperparams"):
            self._started().report_hyperparameters(params=params)

    def log_histogram(self, histogram: list[Any], step: int, name: str) -> None:
        """Do nothing: a job-status service keeps scalar curves only. Never raises."""

    def log_plot(self, figure: Any, step: int, name: str) -> None:
        """Do nothing: a job-status service keeps scalar curves only. Never raises."""

    def finish(self, timeout: float | None = None) -> bool:
        """Report the run completed, then close the reporter within ``timeout`` seconds.

        Returns:
            What :meth:`Reporter.close` returns. Never raises (outside the
            reporter's strict test mode).
        """
        with self._guard("finish"):
            self._started().report_completed()
        return self.close(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Close the reporter (drain, final send, join), reporting no status of its own.

        With no terminal report made, :meth:`Reporter.close`'s rule applies
        (``ReportingConfig.status_at_close``, docs/design.md#lifecycle).

        Returns:
            What :meth:`Reporter.close` returns; True when nothing was reported.
        """
        reporter = self._reporter
        return True if reporter is None else reporter.close(timeout)

    # --- internals -----------------------------------------------------------------

    def _guard(self, method: str) -> contextlib.AbstractContextManager[None]:
        return adapter_guard(self._once, "nemo_rl", method)

    def _epoch_of(self, step: object) -> float | None:
        """Epochs completed at ``step`` as a float (the reporter makes it 1-based), or None."""
        per_epoch = self._steps_per_epoch
        if per_epoch is None or isinstance(step, bool) or not isinstance(step, numbers.Real):
            return None
        return max(float(step), 0.0) / per_epoch

    def _started(self) -> Reporter:
        reporter = self._reporter
        if reporter is None:
            reporter = self._reporter = Reporter.from_env()
            reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        if reporter.state is ReporterState.NEW:
            reporter.start()
            if self._max_steps is not None or self._num_epochs is not None:
                reporter.report_training_start(
                    max_steps=self._max_steps, num_epochs=self._num_epochs
                )
        return reporter

    @staticmethod
    def _report(
        reporter: Reporter, prefix: str, step: int, epoch: float | None, metrics: dict[str, Any]
    ) -> None:
        phase, dataset = phase_of_prefix(prefix)
        if phase == _TRAIN:
            reporter.report_train_step(step=step, epoch=epoch, metrics=metrics)
        elif phase == _VALIDATION:
            reporter.report_validation(step=step, epoch=epoch, metrics=metrics, dataset=dataset)
        else:
            reporter.report_metrics(step=step, metrics=metrics, phase=phase)


def _positive(value: object) -> int | None:
    """``value`` as a positive int, or None (missing, ``None``, not a number, <= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = int(value)
    except (OverflowError, ValueError):  # inf, nan
        return None
    return number if number > 0 else None
