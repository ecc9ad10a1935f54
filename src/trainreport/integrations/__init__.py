"""Adapters for training frameworks, and process hooks.

Each framework adapter lives in its own module and imports its framework
there, so ``import trainreport`` and ``import trainreport.integrations`` import
no framework (no torch, transformers or lightning):

- ``trainreport.integrations.huggingface``: ``TrainReportCallback`` for
  ``transformers.Trainer``, and ``reporting(trainer)`` to report a ``train()``
  that raises.
- ``trainreport.integrations.lightning``: ``TrainReportLogger`` (a Lightning
  ``Logger``) and its companion ``TrainReportCallback``.
- ``trainreport.integrations.nemo_rl``: ``TrainReportNemoLogger``, shaped like
  NeMo-RL's ``LoggerInterface`` (no NeMo-RL import at all).

Each adapter has its own default ``time_series_metrics`` (used when the
config's is ``None``): :data:`DEFAULT_TIME_SERIES_METRICS`, framework-free,
maps the adapter's name to its list.

Process hooks, framework-free and importable from here:
``install_failure_hooks(reporter, *, sigterm=False) -> uninstall`` reports an
uncaught exception (main thread or any thread) as ``failed`` and, opt-in, a
SIGTERM as ``cancelled`` with reason ``"preempted"`` (docs/design.md#failure-handling).

See ``docs/integrations.md`` for what each adapter maps and why.
"""

from __future__ import annotations

from trainreport.integrations._defaults import DEFAULT_TIME_SERIES_METRICS
from trainreport.integrations._hooks import PREEMPTED, install_failure_hooks

__all__ = ["DEFAULT_TIME_SERIES_METRICS", "PREEMPTED", "install_failure_hooks"]
