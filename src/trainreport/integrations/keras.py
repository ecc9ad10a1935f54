"""Keras 3 adapter: :class:`TrainReportCallback` for ``model.fit``.

Importing this module imports ``keras``; ``import trainreport`` does not. Keras
picks its backend at import: set ``KERAS_BACKEND`` (``torch``, ``jax``,
``tensorflow``) before importing it; this module never sets it.

How ``fit`` calls a callback (read off ``keras/src/backend/*/trainer.py`` and
``keras/src/callbacks``, 3.x):

- ``self.params`` holds ``epochs`` and ``steps`` (batches per epoch, ``None``
  for a dataset of unknown length); ``on_train_begin`` comes first.
- ``on_train_batch_end(batch, logs)``: ``batch`` is the index of the epoch's
  last batch run (0-based, within the epoch), ``logs`` the running means of
  the loss and metrics over the epoch so far.
- Validation runs ``evaluate()`` with the same callbacks inside ``fit``
  (``on_test_begin``/``on_test_end`` with unprefixed names), then
  ``on_epoch_end(epoch, logs)`` gets the epoch's metrics plus the validation
  ones prefixed ``val_``; this adapter reports validation from those ``val_``
  keys only, so each point is reported once.
- ``model.stop_training = True`` ends ``fit`` after the current batch.
- Nothing is called when ``fit`` raises: the failure hooks installed at
  ``on_train_begin`` report it.

Keras' own ``RemoteMonitor`` posts every epoch's logs with a synchronous
``requests.post`` (no timeout) from the training thread and reports no
progress, no steps and no failure; this callback replaces it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import keras

from trainreport import Reporter, ReporterState
from trainreport.integrations._defaults import KERAS
from trainreport.integrations._guard import OnceLogger, adapter_guard, get_logger
from trainreport.integrations._hooks import install_failure_hooks

__all__ = ["CANCEL_REASON", "DEFAULT_TIME_SERIES_METRICS", "TrainReportCallback"]

_log = get_logger()
#: This adapter's default ``time_series_metrics`` (used when the config's is
#: ``None``): every metric but throughput/accounting counters (``docs/integrations.md``).
DEFAULT_TIME_SERIES_METRICS = KERAS
#: Reason given to ``report_cancelled`` when the run stopped because the job-status
#: service asked it to (``Reporter.cancel_requested``).
CANCEL_REASON = "cancel_requested"
_VAL = "val_"


class TrainReportCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """Reports a Keras ``fit`` run: progress every batch, curves, validation, status.

    ``model.fit(..., callbacks=[TrainReportCallback()])``. Mapping:

    - ``on_train_begin``: start the reporter, ``report_training_start(max_steps=
      epochs * steps, num_epochs=epochs)`` (``max_steps`` only when the
      steps per epoch are known), and, with ``failure_hooks``,
      :func:`~trainreport.integrations.install_failure_hooks`.
    - ``on_train_batch_end(batch, logs)``: ``report_train_step`` at the global
      step ``epoch * steps + batch + 1`` (a counter of batches when ``steps``
      is unknown), epoch ``epoch + 1``, with ``logs`` as the train metrics;
      sets ``model.stop_training`` when the job-status service cancelled the
      job and ``stop_on_cancel``.
    - ``on_epoch_end(epoch, logs)``: the ``val_*`` keys as
      ``report_validation`` at the epoch's last step; ``report_epoch_end``.
    - ``on_test_end(logs)`` outside ``fit`` (a standalone ``model.evaluate``):
      ``report_metrics(phase="test")`` at the last step (inside ``fit`` it is
      the validation pass, reported at ``on_epoch_end``).
    - ``on_train_end``: ``report_completed()`` (cancelled after a cancel
      request), uninstall the hooks, flush. The reporter stays open so that a
      later ``evaluate`` is recorded: call :meth:`close` when done (or let
      the reporter's ``atexit`` fallback close it).

    Metrics keep a history by :data:`DEFAULT_TIME_SERIES_METRICS` unless the
    reporter's config sets ``time_series_metrics``.

    Args:
        reporter: the reporter to use; ``None`` builds one with
            :meth:`Reporter.from_env` on first use.
        stop_on_cancel: stop training when the job-status service cancels the job.
        failure_hooks: report a ``fit`` that raises (uncaught) as ``failed``.

    Hooks never raise into Keras: a problem is logged once
    (``trainreport.adapter_error``). The reporter reports only on global rank 0.
    """

    def __init__(
        self,
        reporter: Reporter | None = None,
        *,
        stop_on_cancel: bool = True,
        failure_hooks: bool = True,
    ) -> None:
        super().__init__()
        self._reporter = reporter
        if reporter is not None:
            reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        self._stop_on_cancel = stop_on_cancel
        self._failure_hooks = failure_hooks
        self._uninstall: Callable[[], None] | None = None
        self._in_fit = False
        self._epoch = 0
        self._steps: int | None = None
        self._step = 0
        self._stopped_for_cancel = False
        self._once = OnceLogger()

    @property
    def reporter(self) -> Reporter:
        """The :class:`Reporter` (built from the environment on first use)."""
        if self._reporter is None:
            self._reporter = Reporter.from_env()
            self._reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        return self._reporter

    def close(self, timeout: float | None = None) -> bool:
        """Close the reporter (drain, final send, join) within ``timeout`` seconds.

        Returns:
            What :meth:`Reporter.close` returns; True when nothing was reported.
        """
        return True if self._reporter is None else self._reporter.close(timeout)

    # --- Keras hooks -------------------------------------------------------------------

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        """Start the reporter; report training start. Never raises."""
        with self._guard("on_train_begin"):
            self._in_fit = True
            params = self.params or {}
            epochs, steps = params.get("epochs"), params.get("steps")
            self._steps = steps if isinstance(steps, int) and steps > 0 else None
            reporter = self._started()
            num_epochs = epochs if isinstance(epochs, int) and epochs > 0 else None
            max_steps = num_epochs * self._steps if num_epochs and self._steps else None
            reporter.report_training_start(max_steps=max_steps, num_epochs=num_epochs)
            if self._failure_hooks and self._uninstall is None:
                self._uninstall = install_failure_hooks(reporter)

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        """Remember the epoch index. Never raises."""
        self._epoch = epoch if isinstance(epoch, int) else self._epoch

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        """Report one step with its metrics; stop on a cancel request. Never raises."""
        with self._guard("on_train_batch_end"):
            steps = self._steps
            self._step = self._epoch * steps + batch + 1 if steps else self._step + 1
            reporter = self._started()
            reporter.report_train_step(
                step=self._step, epoch=float(self._epoch + 1), metrics=dict(logs or {})
            )
            if self._stop_on_cancel and reporter.cancel_requested.is_set():
                self.model.stop_training = True
                if not self._stopped_for_cancel:
                    self._stopped_for_cancel = True
                    _log.warning("trainreport.training_stopped_on_cancel", step=self._step)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        """Report the epoch's validation metrics and its end. Never raises."""
        with self._guard("on_epoch_end"):
            reporter = self._started()
            validation = {k[len(_VAL) :]: v for k, v in (logs or {}).items() if k.startswith(_VAL)}
            if validation:
                reporter.report_validation(
                    step=self._step, epoch=float(epoch + 1), metrics=validation
                )
            reporter.report_epoch_end(epoch=float(epoch + 1))

    def on_test_end(self, logs: Mapping[str, Any] | None = None) -> None:
        """Outside ``fit``: report ``evaluate()``'s metrics as phase ``test``. Never raises."""
        if self._in_fit or not logs:
            return
        with self._guard("on_test_end"):
            self._started().report_metrics(step=self._step, metrics=dict(logs), phase="test")

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        """Report completed (or cancelled), uninstall the hooks, flush. Never raises."""
        with self._guard("on_train_end"):
            self._in_fit = False
            reporter = self._started()
            if self._stopped_for_cancel:
                reporter.report_cancelled(reason=CANCEL_REASON)
            else:
                reporter.report_completed()
        uninstall, self._uninstall = self._uninstall, None
        if uninstall is not None:
            uninstall()
        with self._guard("flush"):
            self.reporter.flush()

    # --- internals -----------------------------------------------------------------

    def _guard(self, hook: str) -> contextlib.AbstractContextManager[None]:
        return adapter_guard(self._once, "keras", hook)

    def _started(self) -> Reporter:
        reporter = self.reporter
        if reporter.state is ReporterState.NEW:
            reporter.start()
        return reporter
