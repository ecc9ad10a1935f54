"""Lightning adapter: :class:`TrainReportLogger` and its companion :class:`TrainReportCallback`.

Importing this module imports ``lightning``; ``import trainreport`` does not.

Use both::

    logger = TrainReportLogger()
    trainer = lightning.Trainer(logger=logger, callbacks=[TrainReportCallback(logger)])

Facts read off ``lightning/pytorch`` (2.x) that shape the mapping:

- The ``step`` Lightning passes to ``Logger.log_metrics`` is
  ``fit_loop.epoch_loop._batches_that_stepped``, which is incremented *after*
  the step's metrics and any validation are logged: during ``fit`` it is the
  number of completed optimizer steps minus one (0 for the first step), and
  after ``fit`` (``trainer.test``) it is the count itself. The callback gives
  the logger the trainer, whose ``global_step`` is the 1-based count of
  completed optimizer steps (docs/design.md#metrics) at every one of those moments; a
  logger used without the callback falls back to ``step + 1``.
- ``Logger.finalize`` is called with ``"success"`` at the end of every
  ``fit``/``validate``/``test``/``predict``, with ``"failed"`` after
  ``Callback.on_exception``, and with ``"finished"`` by the SLURM auto-requeue
  handler (the job is being preempted and requeued).
- Checkpoints: ``ModelCheckpoint`` calls ``Logger.after_save_checkpoint``
  after writing, with itself as argument (``_last_checkpoint_saved`` holds the
  file just written). ``Callback.on_save_checkpoint`` runs before the file is
  written and knows no path, so it is not used.
"""

from __future__ import annotations

import contextlib
import math
import re
import weakref
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from trainreport import Reporter, ReporterState
from trainreport.integrations._defaults import LIGHTNING, PREFIX_PHASES
from trainreport.integrations._guard import OnceLogger, adapter_guard, get_logger
from trainreport.sinks import run_name_from_env

__all__ = [
    "CANCEL_REASON",
    "DEFAULT_TIME_SERIES_METRICS",
    "TrainReportCallback",
    "TrainReportLogger",
    "route_metrics",
]

_log = get_logger()

#: Reason given to ``report_cancelled`` when the run stopped because the job-status
#: service asked it to (``Reporter.cancel_requested``).
CANCEL_REASON = "cancel_requested"
#: This adapter's default ``time_series_metrics`` (used when the config's is
#: ``None``): every metric but throughput/accounting counters (``docs/integrations.md``).
DEFAULT_TIME_SERIES_METRICS = LIGHTNING
_TRAIN, _VALIDATION = "train", "validation"
#: Lightning's ``trainer.state.stage`` values -> trainreport phase of unprefixed metrics.
_STAGE_PHASES = {"train": _TRAIN, "validate": _VALIDATION, "test": "test", "predict": "predict"}
#: Lightning appends this to names logged with several eval dataloaders (``DATALOADER_SUFFIX``).
_DATALOADER_SUFFIX = re.compile(r"^(?P<name>.+)/dataloader_idx_(?P<index>\d+)$")
_TERMINAL = ("completed", "failed", "cancelled")


def _is_rank_zero() -> bool:
    return int(getattr(rank_zero_only, "rank", 0) or 0) == 0


def route_metrics(
    metrics: Mapping[str, Any], context: str
) -> dict[tuple[str, str | None], dict[str, Any]]:
    """Group one ``log_metrics`` dict by (phase, validation dataset).

    A name's own prefix decides its phase (``train_``/``train/`` -> train; the
    validation prefixes of docs/design.md#metrics -> validation; ``test_``/``test/`` ->
    test); an unprefixed name (``acc``, ``lr-SGD``) belongs to ``context``,
    the phase Lightning is running. Names keep their prefix: the reporter
    strips it once (``val_loss`` stays ``val_loss``, never ``val_val_loss``).
    A validation name ending in ``/dataloader_idx_<n>`` (several eval
    dataloaders) goes to dataset ``dataloader_<n>`` without that suffix.
    ``epoch`` and ``step`` are bookkeeping, not metrics, and are left out.

    Args:
        metrics: metric name -> value as Lightning passes it.
        context: ``"train"``, ``"validation"``, ``"test"`` or ``"predict"``.

    Returns:
        ``{(phase, dataset): {name: value}}``. Never raises for ``str`` keys.
    """
    routed: dict[tuple[str, str | None], dict[str, Any]] = {}
    for raw_name, value in metrics.items():
        if raw_name in ("epoch", "step"):
            continue
        phase = next((ph for p, ph in PREFIX_PHASES if raw_name.startswith(p)), context)
        name, dataset = raw_name, None
        if phase == _VALIDATION:
            match = _DATALOADER_SUFFIX.match(raw_name)
            if match is not None:
                name, dataset = match["name"], f"dataloader_{match['index']}"
        routed.setdefault((phase, dataset), {})[name] = value
    return routed


class TrainReportLogger(Logger):
    """A Lightning ``Logger`` that reports the run's curves and status to a :class:`Reporter`.

    Pair it with :class:`TrainReportCallback` (``callbacks=[TrainReportCallback(logger)]``)
    for exact steps, ``max_steps``, progress every step, exceptions and cancel.

    Mapping (docs/design.md#public-api, #metrics, #lifecycle):

    - ``log_metrics``: see :func:`route_metrics`; train metrics go to
      ``report_train_step``, validation to ``report_validation``, others to
      ``report_metrics(phase=...)``, at ``trainer.global_step`` (1-based
      completed optimizer steps). The epoch is ``trainer.current_epoch + 1``
      passed as a float (the float rule of docs/design.md#metrics maps it to the 1-based
      epoch even for a run resumed at a later epoch, which an int index
      starting above 0 would not).
    - ``log_hyperparams``: ``report_hyperparameters``.
    - ``after_save_checkpoint``: ``report_checkpoint_saved`` with the file written.
    - ``finalize("success")``: ``report_completed`` (``report_cancelled`` when
      the callback stopped the run for a cancel), once training has begun (a
      ``trainer.validate()`` before ``fit()`` must not end the run: it only
      flushes); ``"failed"``: ``report_error``
      unless the callback already reported the exception; ``"finished"`` (SLURM
      requeue): ``report_cancelled(reason="preempted")``. Only the first
      terminal status is reported (fit then test gives one); then the reporter
      is flushed, not closed, so metrics of a later ``trainer.test()`` are still
      recorded (docs/design.md#lifecycle). Call :meth:`close` when done (or let the reporter's
      ``atexit`` fallback close it).

    The reporter starts lazily, on the first report, and only on global rank
    zero (Lightning's ``rank_zero_only.rank``, then the reporter's own check of
    ``RANK`` and the like). The logger pickles before and after first use
    (Lightning sends loggers to spawned workers): a copy made after the
    reporter started is inert, a copy made before starts lazily in its own
    process.

    Metrics keep a history by :data:`DEFAULT_TIME_SERIES_METRICS` unless the
    reporter's config sets ``time_series_metrics``.

    Args:
        reporter: the reporter to use; ``None`` builds one with
            :meth:`Reporter.from_env` on first use.
        name: the experiment name Lightning uses (checkpoint directories).
        version: the version Lightning uses under ``name``; default
            ``TRAINREPORT_JOB_ID`` when set (a resumed job finds its checkpoints),
            else a new unique run id.

    Methods never raise into Lightning: a problem is logged once
    (``trainreport.adapter_error``).
    """

    def __init__(
        self,
        reporter: Reporter | None = None,
        *,
        name: str = "trainreport",
        version: str | None = None,
    ) -> None:
        super().__init__()
        self._reporter = reporter
        if reporter is not None:
            reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        self._name = name
        self._version = version if version is not None else run_name_from_env()
        self._inert = False
        self._terminal: str | None = None
        self._stopped_for_cancel = False
        self._trained = False
        self._trainer_ref: weakref.ReferenceType[Any] | None = None
        self._once = OnceLogger()

    # --- Lightning's Logger interface ----------------------------------------------

    @property
    def name(self) -> str:
        """The experiment name (``trainreport`` by default)."""
        return self._name

    @property
    def version(self) -> str:
        """The experiment version (the job id or a unique run id)."""
        return self._version

    @property
    def experiment(self) -> Any:
        """The :class:`Reporter` (unstarted until the first report); a dummy on other ranks."""
        if not _is_rank_zero():
            return _DummyExperiment()
        return self._get_reporter()

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Report one dict of metrics; see :func:`route_metrics`. Never raises."""
        if not _is_rank_zero() or self._inert:
            return
        with self._guard("log_metrics"):
            trainer = self._trainer()
            if trainer is not None:
                at = int(trainer.global_step)
                epoch: float | None = float(trainer.current_epoch + 1)
                stage = getattr(trainer.state.stage, "value", None)
                context = _STAGE_PHASES.get(str(stage), _TRAIN)
            else:
                self._once.info("no_callback", "trainreport.lightning_without_callback")
                at = (step + 1) if step is not None else 0
                raw_epoch = metrics.get("epoch")
                epoch = float(int(raw_epoch) + 1) if raw_epoch is not None else None
                context = _TRAIN
            reporter = self._started()
            for (phase, dataset), values in route_metrics(metrics, context).items():
                if phase == _TRAIN:
                    self._trained = True
                    reporter.report_train_step(step=at, epoch=epoch, metrics=values)
                elif phase == _VALIDATION:
                    reporter.report_validation(
                        step=at, epoch=epoch, metrics=values, dataset=dataset
                    )
                else:
                    reporter.report_metrics(step=at, metrics=values, phase=phase)

    def log_hyperparams(
        self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any
    ) -> None:
        """Report hyperparameters (a mapping or an ``argparse.Namespace``). Never raises."""
        if not _is_rank_zero() or self._inert:
            return
        with self._guard("log_hyperparams"):
            given = vars(params) if isinstance(params, Namespace) else dict(params)
            self._started().report_hyperparameters(params=given)

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Report the checkpoint ``ModelCheckpoint`` just wrote. Never raises."""
        if not _is_rank_zero() or self._inert:
            return
        with self._guard("after_save_checkpoint"):
            path = (
                getattr(checkpoint_callback, "_last_checkpoint_saved", "")
                or getattr(checkpoint_callback, "last_model_path", "")
                or getattr(checkpoint_callback, "best_model_path", "")
            )
            if not path:
                return
            trainer = self._trainer()
            step = getattr(checkpoint_callback, "_last_global_step_saved", None)
            if step is None and trainer is not None:
                step = int(trainer.global_step)
            self._started().report_checkpoint_saved(path=path, step=step)

    def save(self) -> None:
        """Nothing to do: the reporter sends on its own schedule. Never raises."""

    def finalize(self, status: str) -> None:
        """Report the run's terminal status once, then flush (see the class docs). Never raises."""
        if not _is_rank_zero() or self._inert:
            return
        with self._guard("finalize"):
            if status == "success":
                if not self._trained:
                    # validate()/test() before fit(): the run has not ended
                    self._once.info("finalize_before_fit", "trainreport.lightning_no_fit_yet")
                elif self._stopped_for_cancel:
                    self._terminate("cancelled", lambda r: r.report_cancelled(reason=CANCEL_REASON))
                else:
                    self._terminate("completed", lambda r: r.report_completed())
            elif status == "failed":
                self._terminate(
                    "failed", lambda r: r.report_error("Lightning ended the run with status failed")
                )
            elif status == "finished":
                self._terminate("preempted", lambda r: r.report_outcome(preempted=True))
            else:
                self._once.warning(
                    ("status", status), "trainreport.lightning_unknown_status", status=status[:50]
                )
                return
            reporter = self._reporter
            if reporter is not None:
                reporter.flush()

    # --- trainreport additions ----------------------------------------------------

    @property
    def reporter(self) -> Reporter | None:
        """The reporter in use (``None`` until first use when built from the environment)."""
        return self._reporter

    def close(self, timeout: float | None = None) -> bool:
        """Close the reporter (drain, final send, join), within ``timeout`` seconds.

        Returns:
            What :meth:`Reporter.close` returns; True when nothing was ever
            reported. Never raises (outside the reporter's strict test mode).
        """
        reporter = self._reporter
        if reporter is None or self._inert:
            return True
        return reporter.close(timeout)

    def report_exception(self, exception: BaseException) -> None:
        """Report the exception that ends the run (called by :class:`TrainReportCallback`).

        Mapped by :meth:`Reporter.report_outcome`: ``KeyboardInterrupt`` is
        ``cancelled`` with reason ``interrupted``; anything else ``failed``. Only
        the first terminal status counts. Never raises.
        """
        if not _is_rank_zero() or self._inert:
            return
        with self._guard("on_exception"):
            self._terminate("exception", lambda r: r.report_outcome(exception))

    # --- pickling (Lightning sends loggers to spawned workers) ----------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_trainer_ref"] = None
        reporter = self._reporter
        if reporter is not None and reporter.state is not ReporterState.NEW:
            # A started reporter belongs to this process: the copy does nothing.
            state["_reporter"] = None
            state["_inert"] = True
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # --- internals -----------------------------------------------------------------

    def _guard(self, method: str) -> contextlib.AbstractContextManager[None]:
        return adapter_guard(self._once, "lightning", method)

    def _get_reporter(self) -> Reporter:
        if self._reporter is None:
            self._reporter = Reporter.from_env()
            self._reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        return self._reporter

    def _started(self) -> Reporter:
        reporter = self._get_reporter()
        if reporter.state is ReporterState.NEW:
            reporter.start()
        return reporter

    def _trainer(self) -> Any:
        ref = self._trainer_ref
        return ref() if ref is not None else None

    def _attach(self, trainer: Any) -> None:
        self._trainer_ref = weakref.ref(trainer)

    def _terminate(self, status: str, report: Any) -> None:
        if self._terminal is not None:
            return
        self._terminal = status
        report(self._started())


class _DummyExperiment:
    """What ``experiment`` returns on ranks other than zero: every method does nothing."""

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._nothing


class TrainReportCallback(Callback):
    """The companion of :class:`TrainReportLogger`: what a Lightning ``Logger`` cannot see.

    - ``setup``: gives the logger the trainer (exact steps, epoch, phase).
    - ``on_train_start``: ``report_training_start(max_steps=
      trainer.estimated_stepping_batches, num_epochs=trainer.max_epochs)``
      (``num_epochs`` only when training is bounded by epochs, not steps).
    - ``on_train_batch_end``: ``report_train_step(step=trainer.global_step)``
      without metrics, so progress moves every step; when the job-status
      service cancelled the job and ``stop_on_cancel``, sets
      ``trainer.should_stop`` (single-process runs only: stopping rank 0 alone
      would leave the others waiting in a collective).
    - ``on_train_epoch_end``: ``report_epoch_end``.
    - ``on_exception``: ``report_error`` (or cancelled, for ``KeyboardInterrupt``),
      before Lightning's ``finalize("failed")``, so the error's type and message
      are kept.

    Args:
        logger: the :class:`TrainReportLogger` given to the same Trainer.
        stop_on_cancel: stop training when the job-status service cancels the job.

    Hooks never raise into Lightning; only global rank zero reports.
    """

    def __init__(self, logger: TrainReportLogger, *, stop_on_cancel: bool = True) -> None:
        super().__init__()
        self._logger = logger
        self._stop_on_cancel = stop_on_cancel

    @property
    def logger(self) -> TrainReportLogger:
        """The logger this callback completes."""
        return self._logger

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Give the logger the trainer. Never raises."""
        self._logger._attach(trainer)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Report training start with the planned steps and epochs. Never raises."""
        logger = self._logger
        if not trainer.is_global_zero or logger._inert:
            return
        with logger._guard("on_train_start"):
            logger._attach(trainer)
            logger._trained = True
            planned = trainer.estimated_stepping_batches
            max_steps = (
                int(planned)
                if isinstance(planned, int | float) and math.isfinite(planned)
                else None
            )
            max_epochs = trainer.max_epochs
            epoch_bound = (
                trainer.max_steps in (None, -1) and max_epochs is not None and max_epochs > 0
            )
            logger._started().report_training_start(
                max_steps=max_steps if max_steps and max_steps > 0 else None,
                num_epochs=int(max_epochs) if epoch_bound else None,
            )

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Report progress; stop the run when the job was cancelled. Never raises."""
        logger = self._logger
        if not trainer.is_global_zero or logger._inert:
            return
        with logger._guard("on_train_batch_end"):
            reporter = logger._started()
            reporter.report_train_step(
                step=int(trainer.global_step), epoch=float(trainer.current_epoch + 1)
            )
            if not (self._stop_on_cancel and reporter.cancel_requested.is_set()):
                return
            if trainer.world_size > 1:
                logger._once.warning(
                    "cancel_not_applied",
                    "trainreport.cancel_not_applied",
                    reason="multi-process run: stopping rank 0 alone would hang the others",
                )
                return
            trainer.should_stop = True
            if not logger._stopped_for_cancel:
                logger._stopped_for_cancel = True
                _log.warning(
                    "trainreport.training_stopped_on_cancel", step=int(trainer.global_step)
                )

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Report the end of the epoch. Never raises."""
        logger = self._logger
        if not trainer.is_global_zero or logger._inert:
            return
        with logger._guard("on_train_epoch_end"):
            logger._started().report_epoch_end(epoch=float(trainer.current_epoch + 1))

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Report the exception that ends the run. Never raises."""
        if trainer.is_global_zero:
            self._logger.report_exception(exception)
