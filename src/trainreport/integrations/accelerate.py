"""Hugging Face Accelerate adapter: :class:`TrainReportTracker`.

Importing this module imports ``accelerate``; ``import trainreport`` does not.

Use it like any tracker::

    accelerator = Accelerator(log_with=[TrainReportTracker(max_steps=1000)])
    accelerator.init_trackers("my-run", config=vars(args))
    ...
    accelerator.log({"train_loss": loss, "lr": lr}, step=step)
    accelerator.end_training()

How Accelerate drives a tracker (read off ``accelerate/tracking.py`` and
``Accelerator.init_trackers`` / ``log`` / ``end_training``, 1.x):

- a tracker instance given in ``log_with`` is used as it is: ``start()`` then
  ``store_init_configuration(config)`` from ``init_trackers``; ``log(values,
  step)`` from ``Accelerator.log``; ``finish()`` from ``end_training``;
- with ``main_process_only = True`` (the default), the methods wrapped with
  ``accelerate.tracking.on_main_process`` run on the main process only;
- ``register_tracker_class`` lets ``log_with="trainreport"`` name it; the class
  is then built with the project name as its first argument;
- nothing is called when the loop raises: the failure hooks installed at
  ``start()`` (or ``with reporter:``) report it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from accelerate.tracking import GeneralTracker, on_main_process

from trainreport import Reporter, ReporterState
from trainreport.integrations._defaults import ACCELERATE, PREFIX_PHASES
from trainreport.integrations._guard import OnceLogger, adapter_guard
from trainreport.integrations._hooks import install_failure_hooks

__all__ = ["DEFAULT_TIME_SERIES_METRICS", "TrainReportTracker", "route_by_prefix"]

#: This adapter's default ``time_series_metrics`` (used when the config's is
#: ``None``): every metric but throughput/accounting counters (``docs/integrations.md``).
DEFAULT_TIME_SERIES_METRICS = ACCELERATE
_TRAIN, _VALIDATION, _TEST = "train", "validation", "test"
#: Bookkeeping keys loops log beside their metrics; they are not metrics.
_BOOKKEEPING = ("epoch", "step")


def route_by_prefix(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Group one ``Accelerator.log`` dict by phase, the way the Lightning logger routes.

    ``train_``/``train/`` -> ``train``; ``val_``, ``eval_``, ``valid_``,
    ``validation_`` (and their ``/`` forms) -> ``validation``; ``test_``/``test/``
    -> ``test``; any other name -> ``train`` (a plain loop logs ``loss``).
    Names keep their prefix (the reporter strips it once). ``epoch`` and
    ``step`` are bookkeeping and left out.

    Args:
        values: metric name -> value.

    Returns:
        ``{phase: {name: value}}``. Never raises for ``str`` keys.
    """
    routed: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if name in _BOOKKEEPING:
            continue
        phase = next((ph for p, ph in PREFIX_PHASES if str(name).startswith(p)), _TRAIN)
        routed.setdefault(phase, {})[name] = value
    return routed


class TrainReportTracker(GeneralTracker):  # type: ignore[misc]  # accelerate is untyped
    """An Accelerate tracker that reports the run to a :class:`Reporter`.

    Mapping:

    - ``start()`` (from ``init_trackers``): start the reporter,
      ``report_training_start(max_steps, num_epochs)`` when given, and (with
      ``failure_hooks``) :func:`~trainreport.integrations.install_failure_hooks`,
      so a loop that raises is reported ``failed``.
    - ``store_init_configuration(values)``: ``report_hyperparameters``.
    - ``log(values, step)``: :func:`route_by_prefix`; train metrics go to
      ``report_train_step``, validation to ``report_validation``, test to
      ``report_metrics(phase="test")``, at ``step`` (your loop's 1-based count
      of completed optimizer steps; without it, the last train step logged,
      plus one for a train log). A logged ``epoch`` is passed as the epoch.
    - ``finish()`` (from ``end_training``): ``report_completed()`` (or
      cancelled when the job-status service asked the run to stop), uninstall
      the hooks, close the reporter.

    Check ``tracker.reporter.cancel_requested`` in your loop to stop when the
    job is cancelled. Metrics keep a history by
    :data:`DEFAULT_TIME_SERIES_METRICS` unless the reporter's config sets
    ``time_series_metrics``.

    Args:
        run_name: a name for the run (Accelerate passes the project name when
            the class is registered with ``register_tracker_class``); unused.
        reporter: the reporter to use; ``None`` builds one with
            :meth:`Reporter.from_env` on first use.
        max_steps: steps planned, for ``percentage_done`` and the ETA.
        num_epochs: epochs planned.
        failure_hooks: install the failure hooks at ``start()``.

    Methods never raise into the loop: a problem is logged once
    (``trainreport.adapter_error``). Only the main process reports.
    """

    name = "trainreport"
    requires_logging_directory = False
    main_process_only = True

    def __init__(
        self,
        run_name: str | None = None,
        *,
        reporter: Reporter | None = None,
        max_steps: int | None = None,
        num_epochs: int | None = None,
        failure_hooks: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.run_name = run_name
        self._reporter = reporter
        if reporter is not None:
            reporter.use_series_default(DEFAULT_TIME_SERIES_METRICS)
        self._max_steps = max_steps
        self._num_epochs = num_epochs
        self._failure_hooks = failure_hooks
        self._uninstall: Callable[[], None] | None = None
        self._last_step = 0
        self._once = OnceLogger()

    @property
    def tracker(self) -> Reporter:
        """The :class:`Reporter` (built from the environment on first use)."""
        return self._get_reporter()

    @property
    def reporter(self) -> Reporter:
        """The :class:`Reporter` (same as :attr:`tracker`)."""
        return self._get_reporter()

    @on_main_process  # type: ignore[untyped-decorator]
    def start(self) -> None:
        """Start the reporter; report training start; install failure hooks. Never raises."""
        with self._guard("start"):
            reporter = self._started()
            if self._max_steps is not None or self._num_epochs is not None:
                reporter.report_training_start(
                    max_steps=self._max_steps, num_epochs=self._num_epochs
                )
            if self._failure_hooks and self._uninstall is None:
                self._uninstall = install_failure_hooks(reporter)

    @on_main_process  # type: ignore[untyped-decorator]
    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Report the run's configuration as hyperparameters. Never raises."""
        with self._guard("store_init_configuration"):
            self._started().report_hyperparameters(params=dict(values))

    @on_main_process  # type: ignore[untyped-decorator]
    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Report one dict of metrics (see :func:`route_by_prefix`). Never raises."""
        with self._guard("log"):
            reporter = self._started()
            routed = route_by_prefix(values)
            epoch = values.get("epoch")
            train = routed.pop(_TRAIN, None)
            if step is None:
                step = self._last_step + (1 if train else 0)
            if train is not None:
                self._last_step = max(self._last_step, int(step))
                reporter.report_train_step(step=step, epoch=epoch, metrics=train)
            validation = routed.pop(_VALIDATION, None)
            if validation is not None:
                reporter.report_validation(step=step, epoch=epoch, metrics=validation)
            for phase, metrics in routed.items():
                reporter.report_metrics(step=step, metrics=metrics, phase=phase)

    @on_main_process  # type: ignore[untyped-decorator]
    def finish(self) -> None:
        """Report the run completed (cancelled after a cancel request) and close. Never raises."""
        with self._guard("finish"):
            reporter = self._started()
            if reporter.cancel_requested.is_set():
                reporter.report_cancelled(reason="cancel_requested")
            else:
                reporter.report_completed()
        uninstall, self._uninstall = self._uninstall, None
        if uninstall is not None:
            uninstall()
        if self._reporter is not None:
            self._reporter.close()

    # --- internals -----------------------------------------------------------------

    def _guard(self, method: str) -> contextlib.AbstractContextManager[None]:
        return adapter_guard(self._once, "accelerate", method)

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
