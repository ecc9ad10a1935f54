"""Reporter: the public facade the training loop calls.

Every ``report_*`` method copies its arguments (turning tensor-like values into
plain numbers), appends one tuple to a ``collections.deque`` and returns: no
lock, no ``Event.set`` per report, no I/O, never raises
(docs/design.md#shape, #public-api, #guarantees).
Everything else happens on the reporter thread (``_worker.py``).

``Reporter`` is put together from one private module per concern, each a base
class in one line of inheritance:

* ``_report_queue``: the queue, its byte-budgeted guard, its wake rule and the
  caller-side drop counters;
* ``_report_calls``: the report calls, the hot path ``report_train_step`` among them;
* ``_terminal_reports``: the terminal reports and ``report_outcome``;
* ``_reporter_lifecycle``: start, flush, close, ``snapshot`` and ``stats``;
* ``_reporter_stats``: the stats values and their assembly;
* ``_process_hooks``: the fork and exit hooks;

and this module: construction, the read-only properties and pickling.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainreport._config import ReportingConfig, from_env_over
from trainreport._lifecycle import ReporterState
from trainreport._reporter_lifecycle import RANK_VARIABLES, ReporterLifecycle
from trainreport._reporter_stats import DestinationStats, ReporterStats
from trainreport._sink import Sink
from trainreport._terminal_reports import INTERRUPTED, PREEMPTED
from trainreport.exceptions import ConfigError

__all__ = [
    "INTERRUPTED",
    "PREEMPTED",
    "RANK_VARIABLES",
    "DestinationStats",
    "Reporter",
    "ReporterStats",
]


class Reporter(ReporterLifecycle):
    """Reports a training run's phase, progress and metrics to its sinks, off the training thread.

    Args:
        sink: where updates go: :class:`~trainreport.HttpSink`,
            :class:`~trainreport.FileSink`, :class:`~trainreport.MemorySink`
            or your own :class:`~trainreport.Sink`.
        sinks: several destinations instead of one, e.g.
            ``sinks=[HttpSink(...), FileSink(...)]``: one record, one queue and
            one reporter thread; each destination has its own schedule, wire
            mode and retries, and one that fails or hangs never delays another.
            A resume reads the stored curves from the first destination (in
            this order) that holds the task (docs/engine.md).
        config: scheduling and shaping options (default ``ReportingConfig()``).
        clock: monotonic clock in seconds that drives the debounce, heartbeat
            and backoff; inject :class:`trainreport.testing.FakeClock` in tests.
            ``close()`` deadlines always use real time.
        rank: this process's global rank; ``None`` reads it in :meth:`start`
            from ``RANK``, then ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``,
            ``PMI_RANK``, ``PMIX_RANK`` (docs/design.md#guarantees). Only rank 0 reports.

    Thread-safety: report calls may come from any thread (they only append to a
    deque); ``start``, ``flush`` and ``close`` from any one thread at a time.

    Before :meth:`start` a reporter holds no thread, lock or connection, so it
    pickles; reports made before ``start()`` are kept and sent after it. If
    ``start()`` is never called, :meth:`close` starts the reporter and delivers
    them (docs/engine.md).

    Raises:
        ConfigError: neither or both of ``sink`` and ``sinks`` given, an
            empty ``sinks``, or the same sink object twice.
    """

    def __init__(
        self,
        sink: Sink | None = None,
        config: ReportingConfig | None = None,
        *,
        sinks: Sequence[Sink] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rank: int | None = None,
    ) -> None:
        if (sink is None) == (sinks is None):
            raise ConfigError(["give a sink, or sinks=[...], not both"])
        chosen = [sink] if sink is not None else list(sinks or ())
        if not chosen:
            raise ConfigError(["sinks=[...] is empty: give at least one sink"])
        if len({id(s) for s in chosen}) != len(chosen):
            raise ConfigError(["the same sink is given twice: each destination needs its own"])
        self._sinks = tuple(chosen)
        self._config = config if config is not None else ReportingConfig()
        self._init_queue(self._config, clock)
        self._rank = rank
        self._warned_undelivered = False
        self._recorder = None
        self._cancel = None
        self._pid = None
        # The process whose reports the queue holds: a forked copy of an unstarted
        # reporter (a data-loader worker) must never deliver its parent's reports.
        self._owner_pid = os.getpid()
        self._series_default = ("*",)  # a tuple of patterns

    # --- construction helpers --------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        config: ReportingConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Reporter:
        """Build a reporter from the environment a job system gives a pod.

        Reads ``TRAINREPORT_URL`` (base URL of the job-status service),
        ``TRAINREPORT_JOB_ID``, ``TRAINREPORT_TASK_ID`` (default ``train``),
        ``TRAINREPORT_TOKEN`` or ``TRAINREPORT_TOKEN_FILE``, and the config
        variables of ``docs/configuration.md`` (leniently: a bad value falls back
        to its default with a log event). Without a URL, reports go to a
        :class:`~trainreport.FileSink` under ``./trainreport-runs/``. Inside a
        Kubeflow TrainJob (``KUBEFLOW_TRAINER_SERVER_URL``) a
        :class:`~trainreport.KubeflowSink` is used, as a second destination
        after the ``HttpSink`` when ``TRAINREPORT_URL`` is set too
        (``trainreport.sinks.default_sinks_from_env``).
        ``TRAINREPORT_DISABLED=1`` and ranks other than 0 give a reporter that
        does nothing once started.

        Args:
            environ: the environment (default ``os.environ``), a mapping of
                variable names to values.
            config: the script's own configuration, in place of the defaults:
                each ``TRAINREPORT_<FIELD>`` variable that is set overrides its
                field (the job system has the last word, as it does for the
                destination), and a bad one keeps the value given here. A field
                the environment changed is named in one
                ``trainreport.config_overridden`` event
                (docs/configuration.md#reporterfrom_env-and-an-explicit-config).
                ``None``: ``ReportingConfig.from_env(environ)``.
            clock: see :class:`Reporter`.

        Returns:
            an unstarted :class:`Reporter`. Never raises for bad environment values.

        Raises:
            ConfigError: ``environ`` is not a mapping (a ``ReportingConfig``
                given as the first argument: pass it as ``config=``), or
                ``config`` is not a ``ReportingConfig``. Raised at setup,
                never by a report call.
        """
        from trainreport.sinks import default_sinks_from_env  # noqa: PLC0415 - avoids a cycle

        env = os.environ if environ is None else environ
        if not isinstance(env, Mapping):
            raise ConfigError([_not_an_environment(env)])
        if config is None:
            chosen = ReportingConfig.from_env(env)
        elif isinstance(config, ReportingConfig):
            chosen = from_env_over(env, config)
        else:
            raise ConfigError(
                [
                    f"config must be a ReportingConfig, not {type(config).__name__}; parse a"
                    " mapping with ReportingConfig.from_mapping(...) first @ config"
                ]
            )
        return cls(sinks=default_sinks_from_env(env), config=chosen, clock=clock)

    def use_series_default(self, patterns: tuple[str, ...]) -> bool:
        """Use an adapter's own default ``time_series_metrics`` (for adapters, before start).

        It applies only where the config's ``time_series_metrics`` is ``None``;
        a list the user gave always wins.

        Args:
            patterns: the adapter's default list (``docs/integrations.md``).

        Returns:
            ``True`` when it will be used; ``False`` once the reporter has
            started (the choice is made at ``start()``). Never raises.
        """
        if self._machine.state is not ReporterState.NEW:
            return False
        self._series_default = tuple(patterns)
        return True

    # --- lifecycle -------------------------------------------------------------------

    @property
    def state(self) -> ReporterState:
        """The reporter's lifecycle state (``docs/lifecycle.md``)."""
        return self._machine.state

    @property
    def config(self) -> ReportingConfig:
        """The configuration in use."""
        return self._config

    @property
    def sink(self) -> Sink:
        """The (first) sink updates go to."""
        return self._sinks[0]

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """Every sink updates go to, in order."""
        return self._sinks

    # --- pickling --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if self._machine.state is not ReporterState.NEW:
            raise TypeError("only an unstarted Reporter can be pickled")
        state = self.__dict__.copy()
        state["_cancel"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._owner_pid = os.getpid()  # an unpickled copy (a spawned worker) owns its reports


def _not_an_environment(environ: object) -> str:
    """The ``ConfigError`` line for an ``environ`` that is not a mapping."""
    if isinstance(environ, ReportingConfig):
        return (
            "Reporter.from_env's first argument is the environment, not a ReportingConfig:"
            " pass it as config=..., e.g. Reporter.from_env(config=ReportingConfig(...)) @ environ"
        )
    return (
        "environ must be a mapping of variable names to values, such as os.environ"
        f" (got {type(environ).__name__}) @ environ"
    )
