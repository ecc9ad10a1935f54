"""Hugging Face ``transformers.Trainer`` adapter: ``TrainReportCallback`` and ``reporting``.

Importing this module imports ``transformers``; ``import trainreport`` does not.

How the Trainer's events map to reports (read off ``transformers/trainer.py``):

- ``state.global_step`` is incremented right after the optimizer step and
  before ``on_step_end``/``on_log``/``on_save``, so it already is the 1-based
  count of completed optimizer steps that docs/design.md#metrics asks for: it is passed
  through unchanged.
- Every metric reaches callbacks through ``on_log`` (``Trainer.log``). One
  ``on_log`` call carries one kind of record: training logs (``loss``,
  ``grad_norm``, ``learning_rate``, ``epoch``), one evaluation (keys
  ``eval_*``; with a dict of eval datasets, ``eval_<name>_*``, one call per
  dataset), or the end-of-training summary (``train_runtime``,
  ``train_samples_per_second``, ``train_steps_per_second``, ``total_flos``,
  ``train_loss``). ``on_evaluate`` fires after the evaluation's ``on_log``, so
  it records nothing: every point is reported exactly once.
- When ``train()`` raises, the Trainer calls no callback; wrap it in
  :func:`reporting` to report the failure.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from trainreport import Reporter
from trainreport.integrations._defaults import HUGGINGFACE
from trainreport.integrations._guard import OnceLogger, adapter_guard, get_logger

if TYPE_CHECKING:
    from transformers import Trainer

__all__ = [
    "CANCEL_REASON",
    "DEFAULT_TIME_SERIES_METRICS",
    "SUMMARY_KEYS",
    "SplitLogs",
    "TrainReportCallback",
    "reporting",
    "split_logs",
]

_log = get_logger()

#: Keys of the end-of-training summary that ``Trainer`` logs once (the same
#: list as transformers' own W&B callback keeps out of its curves). They are
#: reported with ``report_metrics(phase="summary")``, never as training points.
SUMMARY_KEYS = frozenset(
    {
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "total_flos",
        "train_loss",
    }
)
#: This adapter's default ``time_series_metrics`` (used when the config's is
#: ``None``): every metric but throughput/accounting counters and the
#: end-of-training summary, which are kept as current values only
#: (``docs/integrations.md``).
DEFAULT_TIME_SERIES_METRICS = HUGGINGFACE
_RUNTIME = "_runtime"
_EVAL = "eval"
#: Reason given to ``report_cancelled`` when the run stopped because the job-status
#: service asked it to (``Reporter.cancel_requested``).
CANCEL_REASON = "cancel_requested"


@attrs.frozen
class SplitLogs:
    """One ``on_log`` record, split by what it reports (see :func:`split_logs`).

    Attributes:
        train: training metrics, names as logged (``loss``, ``grad_norm``, ...).
        validation: per eval dataset (``None`` for a single eval dataset), the
            metrics with ``eval_`` / ``eval_<name>_`` stripped.
        other: per phase (``test`` for ``evaluate(metric_key_prefix="test")``),
            the metrics with ``<phase>_`` stripped.
        summary: the end-of-training summary (:data:`SUMMARY_KEYS`).
        epoch: the ``epoch`` value logged (epochs completed, a float), if any.
    """

    train: dict[str, Any]
    validation: dict[str | None, dict[str, Any]]
    other: dict[str, dict[str, Any]]
    summary: dict[str, Any]
    epoch: float | None


def _is_number(value: object) -> bool:
    if type(value) is float or type(value) is int:
        return True
    if isinstance(value, (bool, str, bytes)):
        return False
    # numpy scalars register as numbers.Real; tensors carry ``.item()`` (converted by the reporter)
    return isinstance(value, numbers.Real) or callable(getattr(value, "item", None))


def _evaluation_prefixes(logs: Mapping[str, object]) -> list[str]:
    """Prefixes of evaluations in ``logs``: each one logs ``<prefix>_runtime`` (speed_metrics)."""
    found = [
        key[: -len(_RUNTIME)]
        for key in logs
        if key.endswith(_RUNTIME) and key not in SUMMARY_KEYS and len(key) > len(_RUNTIME)
    ]
    # longest first, so ``eval_a_b_`` wins over ``eval_a_`` when both exist
    return sorted(found, key=len, reverse=True)


def split_logs(logs: Mapping[str, object]) -> tuple[SplitLogs, list[str]]:
    """Split one ``Trainer.log`` record into training, validation, other and summary metrics.

    Rules (HF's key conventions, ``transformers/trainer.py``):

    - :data:`SUMMARY_KEYS` go to ``summary``; ``epoch`` to ``epoch``.
    - An evaluation logs ``<prefix>_runtime``; its keys start with ``<prefix>_``.
      ``eval`` is the single eval dataset (``dataset=None``), ``eval_<name>`` the
      dataset ``<name>`` of a dict of eval datasets (names may contain ``_``);
      any other prefix (``test``) is another phase.
    - Other ``eval_*`` keys are validation metrics of the single dataset.
    - Everything else is a training metric.
    - Values that are not numbers (``bool``, ``str``, ``None``, containers) are
      dropped; their keys are returned so the caller can log them once.

    Args:
        logs: the ``logs`` mapping of ``TrainerCallback.on_log``.

    Returns:
        ``(split, dropped_keys)``. Never raises for a mapping with ``str`` keys.
    """
    prefixes = _evaluation_prefixes(logs)
    train: dict[str, Any] = {}
    validation: dict[str | None, dict[str, Any]] = {}
    other: dict[str, dict[str, Any]] = {}
    summary: dict[str, Any] = {}
    epoch: float | None = None
    dropped: list[str] = []
    for key, value in logs.items():
        if key == "epoch":
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                dropped.append(key)
            else:
                epoch = float(value)
            continue
        if not _is_number(value):
            dropped.append(key)
            continue
        if key in SUMMARY_KEYS:
            summary[key] = value
            continue
        prefix = next((p for p in prefixes if key.startswith(p + "_")), None)
        if prefix is None and key.startswith(_EVAL + "_"):
            prefix = _EVAL
        if prefix is None:
            train[key] = value
            continue
        name = key[len(prefix) + 1 :]
        if prefix == _EVAL or prefix.startswith(_EVAL + "_"):
            dataset = prefix[len(_EVAL) + 1 :] or None
            validation.setdefault(dataset, {})[name] = value
        else:
            other.setdefault(prefix, {})[name] = value
    return SplitLogs(train, validation, other, summary, epoch), dropped


class TrainReportCallback(TrainerCallback):
    """Reports a ``transformers.Trainer`` run: progress, curves, checkpoints, status.

    Add it to the Trainer: ``Trainer(..., callbacks=[TrainReportCallback()])``.
    Only the world process zero reports (``state.is_world_process_zero``); the
    reporter itself is inert on other global ranks too (docs/design.md#guarantees).

    Mapping (docs/design.md#public-api, #metrics; see the module docstring for the Trainer facts):

    - ``on_train_begin``: start the reporter, ``report_training_start(max_steps=
      state.max_steps, num_epochs=state.num_train_epochs)``, and the
      hyperparameters ``{"training_args": args.to_sanitized_dict(),
      "model_config": model.config.to_dict()}`` (the config only when the
      model has one).
    - ``on_log``: see :func:`split_logs`; training metrics go to
      ``report_train_step(step=state.global_step, epoch=<epochs completed>)``,
      each eval dataset to ``report_validation(dataset=...)``, the summary to
      ``report_metrics(phase="summary")``.
    - ``on_epoch_end``: ``report_epoch_end``.
    - ``on_save``: ``report_checkpoint_saved(path=<output_dir>/checkpoint-<step>)``.
    - ``on_step_end``: ``report_train_step(step=state.global_step)`` without
      metrics (progress moves every step); when ``reporter.cancel_requested`` is set and
      ``stop_on_cancel``, sets ``control.should_training_stop`` (single-process
      runs only: stopping rank 0 alone would leave the other ranks waiting in a
      collective, so a multi-process run logs ``trainreport.cancel_not_applied``).
    - ``on_train_end``: ``report_completed()`` (``report_cancelled(reason=
      "cancel_requested")`` when the run stopped for a cancel), then
      ``close()``, unless :func:`reporting` owns the close.

    Metrics keep a history by :data:`DEFAULT_TIME_SERIES_METRICS` unless the
    reporter's config sets ``time_series_metrics`` (the reporter must not be
    started yet for the default to apply).

    Args:
        reporter: the reporter to use; ``None`` builds one with
            :meth:`Reporter.from_env` (the job system's environment).
        stop_on_cancel: stop training when the job-status service cancels the job.

    Callback methods never raise into the Trainer: a problem is logged once
    (``trainreport.adapter_error``). Use one callback per training run.
    """

    def __init__(self, reporter: Reporter | None = None, *, stop_on_cancel: bool = True) -> None:
        self._reporter = reporter if reporter is not None else Reporter.from_env()
        self._reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        self._stop_on_cancel = stop_on_cancel
        self._stopped_for_cancel = False
        self._close_on_train_end = True
        self._once = OnceLogger()

    @property
    def reporter(self) -> Reporter:
        """The reporter this callback reports to."""
        return self._reporter

    def _guard(self, hook: str) -> contextlib.AbstractContextManager[None]:
        return adapter_guard(self._once, "huggingface", hook)

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        **kwargs: Any,
    ) -> None:
        """Start the reporter; report training start and hyperparameters. Never raises."""
        if not state.is_world_process_zero:
            return
        with self._guard("on_train_begin"):
            reporter = self._reporter
            reporter.start()
            if "kubeflow" in (args.report_to or ()):
                # transformers adds its own KubeflowCallback whenever
                # KUBEFLOW_TRAINER_SERVER_URL is set, even with report_to="none".
                _log.warning(
                    "trainreport.kubeflow_callback_active",
                    reason="transformers' KubeflowCallback also posts to the TrainJob status "
                    "(synchronously, from the training thread); set "
                    "DISABLE_KUBEFLOW_INTEGRATION=TRUE to leave the reporting to trainreport",
                )
            num_epochs = state.num_train_epochs or math.ceil(args.num_train_epochs)
            reporter.report_training_start(
                max_steps=state.max_steps if state.max_steps > 0 else None,
                num_epochs=num_epochs if num_epochs > 0 else None,
            )
            params: dict[str, Any] = {"training_args": args.to_sanitized_dict()}
            config = getattr(model, "config", None)
            to_dict = getattr(config, "to_dict", None)
            if callable(to_dict):
                params["model_config"] = to_dict()
            reporter.report_hyperparameters(params=params)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        """Report one ``Trainer.log`` record (see :func:`split_logs`). Never raises."""
        if not state.is_world_process_zero or not logs:
            return
        with self._guard("on_log"):
            split, dropped = split_logs(logs)
            for key in dropped:
                self._once.info(
                    ("dropped", key), "trainreport.metric_dropped", adapter="huggingface", name=key
                )
            reporter = self._reporter
            step = state.global_step
            epoch = split.epoch if split.epoch is not None else state.epoch
            if split.train:
                reporter.report_train_step(step=step, epoch=epoch, metrics=split.train)
            for dataset, metrics in split.validation.items():
                reporter.report_validation(step=step, epoch=epoch, metrics=metrics, dataset=dataset)
            for phase, metrics in split.other.items():
                reporter.report_metrics(step=step, metrics=metrics, phase=phase)
            if split.summary:
                reporter.report_metrics(step=step, metrics=split.summary, phase="summary")

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Report the end of an epoch (``state.epoch``: epochs completed). Never raises."""
        if not state.is_world_process_zero or state.epoch is None:
            return
        with self._guard("on_epoch_end"):
            self._reporter.report_epoch_end(epoch=state.epoch)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Report the checkpoint the Trainer just wrote. Never raises."""
        if not state.is_world_process_zero:
            return
        with self._guard("on_save"):
            step = state.global_step
            path = os.path.join(args.output_dir or "", f"{PREFIX_CHECKPOINT_DIR}-{step}")
            self._reporter.report_checkpoint_saved(path=path, step=step)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Report progress (the step, no metrics) and stop when the job was cancelled. Never raises.

        Every optimizer step moves the progress (``percentage_done``, ETA), not
        only the logging steps (HF's default ``logging_steps`` is 500); the
        report is one queue append.
        """
        if not state.is_world_process_zero:
            return
        with self._guard("on_step_end"):
            reporter = self._reporter
            reporter.report_train_step(step=state.global_step, epoch=state.epoch)
            if not (self._stop_on_cancel and reporter.cancel_requested.is_set()):
                return
            if args.world_size > 1:
                self._once.warning(
                    "cancel_not_applied",
                    "trainreport.cancel_not_applied",
                    reason="multi-process run: stopping rank 0 alone would hang the others",
                )
                return
            control.should_training_stop = True
            if not self._stopped_for_cancel:
                self._stopped_for_cancel = True
                _log.warning("trainreport.training_stopped_on_cancel", step=state.global_step)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Report completed (or cancelled) and close the reporter. Never raises."""
        if not state.is_world_process_zero:
            return
        with self._guard("on_train_end"):
            if self._stopped_for_cancel:
                self._reporter.report_cancelled(reason=CANCEL_REASON)
            else:
                self._reporter.report_completed()
            if self._close_on_train_end:
                self._reporter.close()


def _find_callback(trainer: Trainer) -> TrainReportCallback | None:
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TrainReportCallback):
            return callback
    return None


@contextlib.contextmanager
def reporting(trainer: Trainer) -> Iterator[Reporter]:
    """Report what the Trainer's callbacks cannot see: a ``train()`` that raises.

    ``Trainer.train()`` calls no callback when it raises, so a run that crashes
    would stay ``running``. Wrap the training (and any final evaluation)::

        with reporting(trainer):
            trainer.train()
            trainer.evaluate()

    The block uses the trainer's :class:`TrainReportCallback` (one built with
    :meth:`Reporter.from_env` is added when there is none). The reporter is
    started on entry and closed on exit (so an evaluation after ``train()`` is
    still recorded: validation after completion is kept, docs/design.md#lifecycle). An
    exception leaving the block is reported with :meth:`Reporter.report_outcome`
    (``failed``; a ``KeyboardInterrupt`` is ``cancelled`` with reason
    ``"interrupted"``; ``SystemExit(0)`` is no failure but ``completed``) and
    re-raised. Only the world process zero reports.

    Args:
        trainer: a ``transformers.Trainer``.

    Yields:
        The :class:`Reporter` in use.

    Raises:
        Whatever the block raises, unchanged. Reporting itself never raises.
    """
    callback = _find_callback(trainer)
    if callback is None:
        callback = TrainReportCallback()
        trainer.add_callback(callback)
    reporter = callback.reporter
    main = bool(trainer.is_world_process_zero())
    callback._close_on_train_end = False
    if main:
        reporter.start()
    try:
        yield reporter
    except BaseException as exc:
        if main:
            reporter.report_outcome(exc)
        raise
    finally:
        callback._close_on_train_end = True
        if main:
            reporter.close()
