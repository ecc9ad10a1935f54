"""The Sink interface: what the reporter thread hands to a destination, and what it hears back.

A sink is driven by exactly one thread, the reporter thread: ``open()`` once
(and again after a resynchronise), then ``send()`` for every update, then
``close()``. A sink decides nothing about when to try again; it classifies what
happened into one of the result types below, and the engine decides what to do
next (docs/design.md#failure-handling). Within one ``send()`` a sink may cut an
update to fit (``HttpSink`` halves its request cap on a 413 before it answers
:class:`Split`); how far to thin after a ``Split`` is the engine's.

The interface serves both wire modes of docs/design.md#wire-modes:

* full state: every :class:`SeriesUpdate` has ``offset == 0`` and carries the
  whole series, and ``metrics`` replaces the stored curves wholesale;
* series suffix (the reference server's extension, ``docs/protocol.md``): a
  series update means "from index ``offset`` on, the series is exactly these
  points", where ``offset`` is the length the server is known to hold.

A sink announces which modes it takes in :attr:`Opened.capabilities`.
"""

from __future__ import annotations

import abc
from array import array
from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from trainreport._wire._protocol import ENCODING_GZIP, EXTENSION_SERIES_SUFFIX

__all__ = [
    "CAPABILITY_GZIP",
    "CAPABILITY_SERIES_SUFFIX",
    "Delivered",
    "OpenResult",
    "Opened",
    "Rejected",
    "Resynchronise",
    "RetryLater",
    "SendResult",
    "SeriesUpdate",
    "Sink",
    "Split",
    "Update",
    "sink_repr",
]

#: The sink accepts per-series suffixes (``offset`` + points) and reports the
#: lengths it holds after each send. See ``docs/protocol.md``.
CAPABILITY_SERIES_SUFFIX = EXTENSION_SERIES_SUFFIX
#: The destination accepts gzip-compressed request bodies.
CAPABILITY_GZIP = ENCODING_GZIP


@attrs.frozen
class SeriesUpdate:
    """One series' points in an update, as columns.

    Args:
        name: qualified metric name, e.g. ``"train_loss"``.
        offset: index of the first point given; the series from this index on
            is exactly these points (0 and the whole series in full-state mode).
        steps: the points' steps (``array('q')``), same length as ``values``.
        epochs: the points' 1-based epochs (``array('q')``).
        values: the points' values (``array('d')``); NaN and ±Inf are kept
            here and become JSON ``null`` when encoded.
        times: the points' wall-clock times, seconds since the Unix epoch
            (``array('d')``, NaN where unknown), or ``None`` when the update
            carries none. A destination that keeps no times ignores them.
    """

    name: str
    offset: int
    steps: array[int]
    epochs: array[int]
    values: array[float]
    times: array[float] | None = None

    def __len__(self) -> int:
        return len(self.values)


@attrs.frozen
class Update:
    """One send: the state the destination should hold after it.

    Args:
        status: the task status to store (a :class:`trainreport.TaskStatus`
            value such as ``"running"``), or ``None`` to leave it unchanged.
        status_details: every ``status_details`` key to set except
            ``"metrics"``; the destination merges them shallowly (a key that is
            sent replaces the stored value, a key not sent is kept). Never
            contains ``None`` values.
        series: the series to send, or ``None`` when this update carries no
            ``metrics`` at all (for example before a resumed task's stored
            curves have been read, docs/design.md#metrics).
        full_state: ``True`` when ``series`` is the complete set of curves
            (each with ``offset == 0``) and replaces the stored ``metrics``
            wholesale; ``False`` when each series is an idempotent suffix.
        foreign_series: full-state mode only: stored series the reporter could
            not parse (written by another tool), name -> points exactly as
            stored (decoded JSON). They travel in ``metrics`` beside ``series``
            unchanged, so replacing ``metrics`` wholesale never deletes them
            (a run log's snapshot carries them the same way).
    """

    status: str | None
    status_details: Mapping[str, Any]
    series: tuple[SeriesUpdate, ...] | None
    full_state: bool
    foreign_series: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def point_count(self) -> int:
        """Number of points this update carries (0 when it carries no metrics)."""
        return sum(len(s) for s in self.series) if self.series else 0


@attrs.frozen
class Opened:
    """``Sink.open()`` succeeded.

    Args:
        capabilities: what the destination supports, e.g.
            ``{CAPABILITY_SERIES_SUFFIX, CAPABILITY_GZIP}``; empty for a plain
            baseline job-status API.
        writer_generation: the generation the server issued to this writer
            (series-suffix mode), or ``None``.
        stored_task: the task record the destination holds, in the ``GET``
            shape ``{"status": ..., "status_details": {...}}``, or ``None`` when
            the task does not exist yet (a 404 is a new task, not a failure).
        page_url: where a person sees the run (the reference server's chart
            page of the task), or ``None``; the reporter logs it once
            (``trainreport.destination_opened``). Never holds credentials.
        last_writer_generation: the generation whose update the task's last
            write was, as the server says (series-suffix mode), or ``None`` when
            it does not say; a left-over journal of an older writer is never
            replayed over a newer one's writes (``docs/engine.md``, "Recovery").
    """

    capabilities: frozenset[str] = frozenset()
    writer_generation: int | None = None
    stored_task: Mapping[str, Any] | None = None
    #: Informational: not part of equality (two opens of one task compare equal).
    page_url: str | None = attrs.field(default=None, eq=False)
    last_writer_generation: int | None = None


@attrs.frozen
class Delivered:
    """The destination applied the update.

    Args:
        series_lengths: the number of points the destination now holds per
            series (series-suffix mode), or ``None`` when it does not say.
        cancel_requested: the destination asks the run to stop (the job was
            cancelled); the reporter sets ``Reporter.cancel_requested``.
        bytes_sent: request bytes put on the wire for this update (bodies as
            sent plus headers), for ``Reporter.stats()``.
    """

    series_lengths: Mapping[str, int] | None = None
    cancel_requested: bool = False
    bytes_sent: int = 0


@attrs.frozen
class RetryLater:
    """A transient failure (connection error, timeout, 408, 429, 5xx but 501).

    Args:
        reason: short description for logs; never contains a token.
        delay_seconds: the delay the destination asked for (``Retry-After``),
            in seconds, or ``None`` to use the scheduler's backoff.
        unreachable: nothing answered at all: the connection was refused or
            the host name did not resolve (a wrong URL). A timeout, a reset or
            any HTTP status is an answer. ``close()`` waits only
            ``close_unanswered_seconds`` for a destination that never answered.
    """

    reason: str
    delay_seconds: float | None = None
    unreachable: bool = False


@attrs.frozen
class Rejected:
    """The destination refused the update (400/401/403/404/422, a stale writer).

    The reporter keeps recording, logs the reason once, and tries again only
    when there is new data, on a long backoff (docs/design.md#failure-handling).

    Args:
        reason: short description for logs; never contains a token.
        status_code: the HTTP status, when there was one.
        hint: what the user can do about it (``HttpSink``: which variable
            gives the token, on a 401 or 403), or ``None``; logged with the
            refusal (``trainreport.send_rejected``).
    """

    reason: str
    status_code: int | None = None
    #: Informational: not part of equality (the refusal is the reason and the status).
    hint: str | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Split:
    """The update is too large for the destination (HTTP 413, or over a configured limit).

    In full-state mode ``metrics`` cannot be split (shallow merge), so the
    reporter sends the curves thinned to fewer points a series (the rule of
    ``_record/_thinning.py``), sized by what the sink says here; when even the
    thinnest curves do not fit, it goes on sending everything but ``metrics``
    (docs/design.md#wire-modes).

    Args:
        reason: short description for logs.
        body_bytes: the size of the body that did not fit, bytes as sent (after
            compression, if compressed), or ``None`` when unknown.
        limit_bytes: a body size known to fit, bytes (a configured
            ``max_body_bytes``, or the largest body the destination took), or
            ``None`` when unknown: the reporter then halves the points it sends.
    """

    reason: str
    body_bytes: int | None = None
    limit_bytes: int | None = None


@attrs.frozen
class Resynchronise:
    """The destination's state disagrees with what the reporter assumed (HTTP 409).

    Args:
        reason: short description for logs.
        series_lengths: what the destination holds, when it said so; ``None``
            means the reporter must ``open()`` again to learn it.
    """

    reason: str
    series_lengths: Mapping[str, int] | None = None


def sink_repr(sink: object) -> str:
    """A sink as log lines name it: its ``repr()``, at most 300 characters, or ``<TypeName>``.

    The ``destination`` field of every event about a destination, and the
    default :meth:`Sink.describe`. Never raises (a custom ``__repr__`` may).
    """
    try:
        return repr(sink)[:300]
    except Exception:
        return f"<{type(sink).__name__}>"


OpenResult: TypeAlias = Opened | RetryLater | Rejected
SendResult: TypeAlias = Delivered | RetryLater | Rejected | Split | Resynchronise


class Sink(abc.ABC):
    """Where a :class:`trainreport.Reporter` sends its updates.

    Subclass it to write your own. A sink must hold no thread, lock or
    connection before :meth:`open` (an unstarted reporter is pickled by some
    frameworks), must never raise out of :meth:`open` or :meth:`send` for a
    destination failure (it returns a result instead), and is only ever called
    from the reporter thread.

    Attributes:
        min_interval_seconds: the destination's own floor between two
            requests, in seconds (0.0: none). The reporter never sends to
            this sink more often, whatever ``ReportingConfig`` says: it is the
            debounce interval when the config's is shorter, and the least gap
            between any two attempts (events, retries, ``flush()``) while
            the run lives; only the first send of ``close()`` goes at once.
        keeps_every_point: the destination holds the run in the training
            process's memory (``MemorySink``), so the store keeps every point
            too instead of letting acknowledged points leave memory
            (``docs/engine.md``, "Memory"). False for every real destination.
        local_run_log: the sink itself keeps the run on local disk as it goes
            (``FileSink``'s run log), so it is its own journal: no journal is
            kept in front of it, and it is sent to every
            ``journal_interval_seconds`` when that is shorter than the
            debounce interval. ``False`` for a remote destination.
        max_body_bytes: the largest full-state body the destination takes,
            bytes before compression, when the sink knows it in advance
            (``HttpSink(max_body_bytes=...)``); ``None`` (the default): learned
            from its refusals only (a :class:`Split`). The reporter thins the
            curves before it builds a full state that cannot fit it
            (``docs/engine.md``, "Thinning under a body limit").
    """

    min_interval_seconds: float = 0.0
    keeps_every_point: bool = False
    local_run_log: bool = False
    max_body_bytes: int | None = None

    def describe(self) -> str:
        """Where this sink sends, in words, for the log lines of ``start()`` and ``close()``.

        ``trainreport.reporting_to`` and ``trainreport.closed`` show it to
        whoever configures logging. Override it to name your destination
        (the built-in sinks name the run log's path, the service's URL with
        job and task, the TrainJob). It must not do I/O or name a secret.
        The default is the sink's ``repr()`` (:func:`sink_repr`). Never raises.
        """
        return sink_repr(self)

    def read_back(self, timeout_seconds: float) -> Mapping[str, Any] | None:
        """The task this destination holds, in the ``GET`` shape, read on the caller's thread.

        ``Reporter.snapshot()`` reads the points of a long run that left the
        training process's memory (every destination held them) back from the
        first destination that can say (``docs/engine.md``, "Memory"). Unlike
        :meth:`open` and :meth:`send` it may be called from any thread, so it
        must use no state the reporter thread uses (a connection of its own).

        Args:
            timeout_seconds: the most the read may take, in seconds.

        Returns:
            The task, or ``None`` when this sink cannot read it back (the default)
            or the read failed. Never raises.
        """
        del timeout_seconds
        return None

    def run_log_path(self) -> str | None:
        """The run-log file this sink keeps on local disk, absolute, or ``None`` (the default).

        When another destination does not hold everything at ``close()``, the
        run log of a sink that finished cleanly is named in its
        ``trainreport.close_undelivered`` hint with the ``trainreport sync``
        command that uploads it (``FileSink`` returns its log's path). Return
        a path only to a file ``trainreport sync`` reads (the run-log format,
        ``docs/engine.md``, "The run log"); it must not do I/O. Never raises.
        """
        return None

    def upload_command(self, path: str) -> str:
        """The ``trainreport sync`` command that uploads the run log at ``path`` to this sink.

        ``close()`` names it when points stay in a journal or a run log
        (``trainreport.close_undelivered``, ``trainreport.close_waiting``),
        ready to copy. A sink that sends to a job-status service overrides it
        with the service's URL (``HttpSink`` does); it must not do I/O or name
        a secret. The default leaves the URL to fill in:
        ``trainreport sync PATH --url URL``. Never raises.

        Args:
            path: the journal or run-log file to upload.
        """
        return f"trainreport sync {path} --url URL"

    @abc.abstractmethod
    def open(self, *, timeout_seconds: float | None = None) -> OpenResult:
        """Connect, learn the destination's capabilities and read the stored task.

        Args:
            timeout_seconds: upper bound on the time this call may take, in
                seconds (``None``: the sink's own default).

        Returns:
            :class:`Opened`, or :class:`RetryLater` / :class:`Rejected` when
            the stored task could not be read. Never raises for a destination
            failure.
        """

    @abc.abstractmethod
    def send(self, update: Update, *, timeout_seconds: float | None = None) -> SendResult:
        """Deliver one update.

        Args:
            update: the state the destination should hold after this call.
            timeout_seconds: upper bound on the time this call may take, in
                seconds (``None``: the sink's own default).

        Returns:
            One of :data:`SendResult`. Never raises for a destination failure.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release connections and files. Idempotent; the default does nothing."""
