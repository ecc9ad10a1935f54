"""trainreport: report a training run's progress and curves without slowing it down.

The public API is re-exported here; everything in a ``_module`` is private.
See ``README.md`` and ``docs/``.
"""

from __future__ import annotations

import importlib.metadata

from trainreport._facade._reporter import DestinationStats, Reporter, ReporterStats
from trainreport._facade._reporter_stats import JournalStats
from trainreport._record._machines import Phase, ReporterState, TaskStatus
from trainreport._record._name_rules import STRIPPED_PREFIXES
from trainreport._reporting_config import ReportingConfig
from trainreport._runlog._runfile import read_task
from trainreport._wire._attempt import AttemptIdentity
from trainreport.exceptions import (
    ClientError,
    ConfigError,
    NotFoundError,
    ProtocolError,
    RunLogError,
    SinkError,
    TrainReportError,
    TransitionError,
    TransportError,
    UnauthorizedError,
    UnreachableError,
)
from trainreport.sinks import (
    Delivered,
    FileSink,
    HttpSink,
    KubeflowSink,
    MemorySink,
    Opened,
    Rejected,
    Resynchronise,
    RetryLater,
    SeriesUpdate,
    Sink,
    Split,
    Update,
)

__all__ = [
    "AttemptIdentity",
    "ClientError",
    "ConfigError",
    "Delivered",
    "DestinationStats",
    "FileSink",
    "HttpSink",
    "JournalStats",
    "KubeflowSink",
    "MemorySink",
    "NotFoundError",
    "Opened",
    "Phase",
    "ProtocolError",
    "Rejected",
    "Reporter",
    "ReporterState",
    "ReporterStats",
    "ReportingConfig",
    "Resynchronise",
    "RetryLater",
    "RunLogError",
    "STRIPPED_PREFIXES",
    "SeriesUpdate",
    "Sink",
    "SinkError",
    "Split",
    "TaskStatus",
    "TrainReportError",
    "TransitionError",
    "TransportError",
    "UnauthorizedError",
    "UnreachableError",
    "Update",
    "read_task",
]

#: The installed distribution's version (``pyproject.toml`` is its one source);
#: ``"0+unknown"`` for a source tree that was never installed.
try:
    __version__: str = importlib.metadata.version("trainreport")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a bare checkout
    __version__ = "0+unknown"
