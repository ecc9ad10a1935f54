"""trainreport's exception tree.

Every exception trainreport raises derives from :class:`TrainReportError`::

    TrainReportError
    ├── ConfigError            a configuration mapping or file failed to parse (strict mode)
    ├── TransitionError        a refused status or phase transition (strict mode only)
    ├── RunLogError            a run log or task record file holds nothing readable
    ├── SinkError              a sink could not talk to its destination
    │   ├── TransportError     connection refused, reset, timed out, DNS failure
    │   └── ProtocolError      the server answered something that is not the protocol
    └── ClientError            trainreport.client could not read what it was asked for
        ├── UnreachableError   connection refused, reset, timed out, DNS or TLS failure
        ├── UnauthorizedError  no token, a refused one (401), or one that may not read it (403)
        └── NotFoundError      no such job or task (404)

Report calls (``Reporter.report_*``) never raise any of these: problems on the
training path are log events on the ``trainreport`` logger. Lower-level errors
(urllib3, OSError) are mapped to this tree at the sink and client boundaries,
``from`` the original exception.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ClientError",
    "ConfigError",
    "NotFoundError",
    "ProtocolError",
    "RunLogError",
    "SinkError",
    "TrainReportError",
    "TransitionError",
    "TransportError",
    "UnauthorizedError",
    "UnreachableError",
]


class TrainReportError(Exception):
    """Base class of every exception raised by trainreport."""


class ConfigError(TrainReportError, ValueError):
    """A configuration failed to parse in strict mode.

    Args:
        problems: one human-readable line per problem, each naming the path of
            the offending field, e.g. ``"expected a number @ $.heartbeat_seconds"``
            (a single ``str`` is one problem, never one per character).
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = (
            (problems,) if isinstance(problems, str) else tuple(problems)
        )
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


class ClientError(TrainReportError):
    """:mod:`trainreport.client` could not read a job or task.

    The message names the URL (any user and password in it replaced by
    ``***``) and the job (and task) asked for; it never contains a token.
    Also raised as such when the service answers another error status or
    something that is not JSON.

    Attributes:
        url: the service's base URL, userinfo redacted.
        job_id: the job asked for, or ``None`` (listing the jobs).
        task_id: the task asked for, or ``None``.
        status: the HTTP status the service answered, or ``None`` when it did not.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str,
        job_id: str | None = None,
        task_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.job_id = job_id
        self.task_id = task_id
        self.status = status


class UnreachableError(ClientError):
    """The service could not be reached: connection refused or reset, timeout, DNS, TLS."""


class UnauthorizedError(ClientError):
    """The service wants a token or refused the one given (401), or it may not read this (403)."""


class NotFoundError(ClientError):
    """The job or task does not exist (404)."""
