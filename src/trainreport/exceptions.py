"""trainreport's exception tree.

Every exception trainreport raises derives from :class:`TrainReportError`::

    TrainReportError
    ├── ConfigError            a configuration mapping or file failed to parse (strict mode)
    ├── TransitionError        a refused status or phase transition (strict mode only)
    ├── RunLogError            a run log or task record file holds nothing readable
    └── SinkError              a sink could not talk to its destination
        ├── TransportError     connection refused, reset, timed out, DNS failure
        └── ProtocolError      the server answered something that is not the protocol

Report calls (``Reporter.report_*``) never raise any of these: problems on the
training path are log events on the ``trainreport`` logger. Lower-level errors
(urllib3, OSError) are mapped to this tree at the sink boundary, ``from`` the
original exception.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ConfigError",
    "ProtocolError",
    "RunLogError",
    "SinkError",
    "TrainReportError",
    "TransitionError",
    "TransportError",
]


class TrainReportError(Exception):
    """Base class of every exception raised by trainreport."""


class ConfigError(TrainReportError, ValueError):
    """A configuration failed to parse in strict mode.

    Args:
        problems: one human-readable line per problem, each naming the path of
            the offending field, e.g. ``"expected a number @ $.heartbeat_seconds"``.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__(
            "invalid trainreport configuration:\n" + "\n".join(f"  - {p}" for p in self.problems)
        )


class TransitionError(TrainReportError):
    """A status or phase transition that the lifecycle tables refuse.

    Raised only when the reporter runs in strict mode (tests); otherwise the
    refused transition is logged and ignored. See ``docs/lifecycle.md``.
    """


class RunLogError(TrainReportError, ValueError):
    """Nothing in a run log or task record file can be read.

    Raised by :func:`trainreport.read_task` (and ``trainreport show --file`` /
    ``trainreport sync`` report it) for a file that is neither a run log nor a
    JSON task, a log whose first record is damaged or from a newer format
    version, or a log that holds no task yet. A log damaged after some intact
    records is not an error: those records are read and the damage is logged.
    Never raised on the training path (``FileSink`` logs and repairs instead).
    """


class SinkError(TrainReportError):
    """A sink failed to open, read or send."""


class TransportError(SinkError):
    """The destination could not be reached: connection, TLS, timeout or DNS error."""


class ProtocolError(SinkError):
    """The destination answered, but not in the shape the protocol specifies."""
