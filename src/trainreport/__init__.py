"""trainreport: report a training run's progress and curves without slowing it down.

The public API is re-exported here; everything in a ``_module`` is private.
See ``README.md`` and ``docs/``.
"""

from __future__ import annotations

from trainreport._attempt import AttemptIdentity
from trainreport._config import ReportingConfig
from trainreport._lifecycle import Phase, TaskStatus
from trainreport._reporter import Reporter, ReporterStats
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
from trainreport.sinks._runfile import read_task

__all__ = [
    "AttemptIdentity",
    "ClientError",
    "ConfigError",
    "Delivered",
    "FileSink",
    "HttpSink",
    "KubeflowSink",
    "MemorySink",
    "NotFoundError",
    "Opened",
    "Phase",
    "ProtocolError",
    "Rejected",
    "Reporter",
    "ReporterStats",
    "ReportingConfig",
    "Resynchronise",
    "RetryLater",
    "RunLogError",
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

__version__ = "0.1.0"
