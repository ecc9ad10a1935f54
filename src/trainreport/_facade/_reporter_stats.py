"""What ``Reporter.stats()`` returns, and how it is put together.

The frozen values (:class:`ReporterStats`, one :class:`DestinationStats`
per destination, :class:`JournalStats` for the journal) and
:func:`assemble_stats`, which builds them from the recorder's counters, the
driver's destinations (read only: no ``Worker`` is imported here), the
reports still queued, the caller-side counters and latency histogram, and
what the reporter thread keeps about the journal.
Reading only: nothing here changes the reporter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from trainreport._engine._journal_feed import JournalWatch
from trainreport._facade._histogram import LatencyHistogram
from trainreport._record._reports import Report, queued_points
from trainreport._record._store import POINT_COLUMN_BYTES

if TYPE_CHECKING:
    from trainreport._engine._destination import Destination
    from trainreport._record._recorder import Recorder

__all__ = [
    "DestinationStats",
    "Driver",
    "JournalStats",
    "ReporterStats",
    "assemble_stats",
    "journal_stats",
]


class Driver(Protocol):
    """What :func:`assemble_stats` reads of the reporter thread's driver (``Worker``)."""

    @property
    def destinations(self) -> Sequence[Destination]:
        """Each destination's state, in ``Reporter(sinks=[...])`` order."""
        ...


@attrs.frozen
class DestinationStats:
    """One destination's share of ``Reporter.stats()``.

    Attributes:
        destination: the sink, as its repr shows it (``HttpSink`` shows URL, job, task).
        requests_sent: requests attempted to it: sends, opens (reads of the
            stored task) and journal recovery's (the sends of journals a dead
            process left, and the re-opens after them) included.
        requests_failed: those that were not delivered.
        consecutive_failures: failures since its last delivered send.
        bytes_sent: request bytes put on the wire (as the sink counts them), by
            delivered sends, journal recovery's included.
        points_delivered: points it is known to hold.
        points_unsent: points it is not known to hold (queued reports included).
        unsent_memory_bytes: an estimate of the memory the store holds for the
            points it lacks, bytes: those points (the queued ones left out:
            ``ReporterStats.queue_bytes`` estimates the queue) at 28 bytes a
            point, the store's four columns (``POINT_COLUMN_BYTES``,
            docs/engine.md "Memory"); the same figure as
            ``trainreport.destination_behind``'s.
        last_error: its last failure's reason, or None.
        last_success_at: wall-clock time (ISO 8601 UTC) of its last delivered send.
        superseded: it said a later attempt (or a later writer) owns the task
            (HTTP 409 ``stale_attempt``/``stale_writer``): nothing more is sent
            to it, and ``flush()`` and ``close()`` do not wait for it.
        thinned_to: full-state mode over its body limit (a 413, or
            ``HttpSink(max_body_bytes=...)``): the most points a series is sent
            to it with, the curves thinned to cover the whole run
            (docs/engine.md, "Thinning under a body limit"); ``None``: every
            point. Its ``points_delivered`` then counts the points its curves
            cover, not the points it holds.
    """

    destination: str
    requests_sent: int
    requests_failed: int
    consecutive_failures: int
    bytes_sent: int
    points_delivered: int
    points_unsent: int
    last_error: str | None
    last_success_at: str | None
    superseded: bool = False
    thinned_to: int | None = None
    unsent_memory_bytes: int = 0


@attrs.frozen
class JournalStats:
    """The journal's share of ``Reporter.stats()`` (``docs/engine.md``, "The journal").

    Attributes:
        state: ``pending`` (started, not claimed yet: the reporter thread
            claims it when the attempt begins), ``recording``, ``busy``
            (another live process keeps this job and task's journal),
            ``unavailable`` (an invalid id, a directory or file that cannot be
            created or opened), ``failed`` (a write failed; it stopped),
            ``kept`` (closed and kept on disk: not everything was delivered)
            or ``removed`` (closed and removed: everything was delivered).
        path: the journal file (``<journal_dir>/<job id>/<task id>.log``), or
            None when an id is not a valid file name.
        records: records written (appends and whole rewrites).
        bytes_written: bytes written to the file (appends, rewrites, compactions).
        last_fsync_at: wall-clock time (ISO 8601 UTC) of its last ``fsync``, or None.
        error: why it is ``busy``, ``unavailable`` or ``failed``, or None.
        restarts: times its file was found deleted or replaced under the
            process (a cleanup of ``journal_dir``) and a new one started,
            holding every point not yet acknowledged, or only its lock file
            and the lock taken again (``trainreport.journal_deleted``).
    """

    state: str
    path: str | None
    records: int
    bytes_written: int
    last_fsync_at: str | None
    error: str | None
    restarts: int = 0


@attrs.frozen
class ReporterStats:
    """A point-in-time view of a reporter's health (``Reporter.stats()``).

    With several destinations the top-level figures are totals: requests,
    failures and bytes are summed; ``consecutive_failures`` is the largest;
    ``points_delivered`` counts the points every destination holds and
    ``points_unsent`` the points some destination does not hold yet;
    ``last_error`` is the first destination's (in list order) that has one;
    ``last_success_at`` the latest. ``destinations`` has each one's own figures.

    Attributes:
        state: the reporter's lifecycle state (``new``, ``running``, ``closing``,
            ``closed``, ``inert``).
        requests_sent: requests attempted (failed ones, opens and journal
            recovery's included: ``DestinationStats.requests_sent``).
        requests_failed: requests that were not delivered.
        consecutive_failures: failures since the last delivered send.
        bytes_sent: request bytes put on the wire (as the sink counts them), by
            delivered sends, journal recovery's included.
        points_recorded: series points applied to the store.
        points_delivered: points the destination is known to hold.
        points_unsent: points not yet known to be delivered.
        queue_depth: reports queued and not yet applied.
        queue_bytes: the memory guard's estimate of those reports, in bytes.
        drops: dropped items by reason (``queue_full``, ``name_cap``,
            ``not_chartable``, ``invalid_step``, ``after_close``, ...).
        rewinds: how many times the step went back (docs/design.md#metrics): each
            report that rewound one or more series counts one, and so does the
            resume purge (a run resumed from an earlier checkpoint); a
            re-reported last step is not a rewind.
        points_replaced_by_rewinds: the points those rewinds removed (the
            history a step going back deleted; the new points are counted in
            ``points_recorded``).
        last_error: the last send failure's reason, or None.
        last_success_at: wall-clock time (ISO 8601 UTC) of the last delivered send.
        report_calls: report calls made on this reporter (every call, of every kind).
        report_p50_us: median time inside a report call, microseconds (±10 %).
            ``report_train_step`` is timed by sample (its first call, then
            one in 16, each standing for 16 calls); other report calls are
            timed each time.
        report_p99_us: 99th percentile of the same, microseconds (±10 %).
        report_max_us: longest timed report call, microseconds.
        report_total_seconds: estimated total time spent inside report calls
            (the sampled training steps weighted as above), seconds.
        destinations: each destination's figures, in ``Reporter(sinks=[...])`` order.
        journal: the journal's figures; None before ``start()`` and when no
            journal is kept (``journal`` off, ``TRAINREPORT_JOURNAL=0``, or no
            destination with a job and task that is not a local file).
    """

    state: str
    requests_sent: int
    requests_failed: int
    consecutive_failures: int
    bytes_sent: int
    points_recorded: int
    points_delivered: int
    points_unsent: int
    queue_depth: int
    queue_bytes: int
    drops: Mapping[str, int]
    rewinds: int
    points_replaced_by_rewinds: int
    last_error: str | None
    last_success_at: str | None
    report_calls: int
    report_p50_us: float
    report_p99_us: float
    report_max_us: float
    report_total_seconds: float
    destinations: tuple[DestinationStats, ...] = ()
    journal: JournalStats | None = None


def journal_stats(watch: JournalWatch | None) -> JournalStats | None:
    """The journal's figures from what the reporter thread keeps up to date. Never raises."""
    if watch is None:
        return None
    keeper = watch.keeper
    if keeper is None:
        return JournalStats(watch.state, watch.path, 0, 0, None, watch.error)
    journal = keeper.journal
    state = "recording"
    if journal.unavailable:  # kept only to deliver what dead processes left
        state = "unavailable"
    elif journal.failed:
        state = "failed"
    elif journal.closed:
        state = "removed" if journal.removed else "kept"
    return JournalStats(
        state=state,
        path=str(journal.paths.current),
        records=keeper.records,
        bytes_written=journal.bytes_written,
        last_fsync_at=journal.fsynced_at,
        error=journal.error,
        restarts=journal.restarts,
    )


def assemble_stats(
    *,
    state: str,
    destinations: int,
    driver: Driver | None,
    recorder: Recorder | None,
    histogram: LatencyHistogram,
    report_calls: int,
    queued: Sequence[Report],
    queued_bytes: int,
    caller_drops: Mapping[str, int],
    journal: JournalWatch | None = None,
) -> ReporterStats:
    """One :class:`ReporterStats` from the reporter's parts. Never raises.

    Args:
        state: the lifecycle state's value (``running``, ...).
        destinations: how many sinks the reporter has (before ``start()`` there
            is no driver to ask).
        driver: the reporter thread's driver, or None before ``start()``.
        recorder: the store's owner, or None before ``start()``.
        histogram: the report calls' latency histogram (training steps by
            weighted sample: ``_histogram``).
        report_calls: report calls made, of every kind.
        queued: a snapshot (a list) of the reports still queued: not applied
            yet (e.g. the stored task was never read), so recorded but unsent;
            each metric value they carry counts as a point.
        queued_bytes: the memory guard's estimate of those reports, in bytes.
        caller_drops: drops counted on the caller's side, by reason (zero
            counts are left out).
        journal: what the reporter thread keeps about the journal, or None.
    """
    drops: dict[str, int] = {}
    recorded = rewinds = replaced = 0
    delivered, unsent = (0,) * destinations, (0,) * destinations
    thinned: tuple[int | None, ...] = (None,) * destinations
    if recorder is not None:
        counts = recorder.counts()
        drops.update(counts.drops)
        recorded, rewinds = counts.points_recorded, counts.rewinds
        replaced = counts.points_replaced_by_rewinds
        delivered, unsent = counts.delivered, counts.unsent
        thinned = counts.thinned_to or thinned
    points_queued = sum(map(queued_points, queued))
    recorded += points_queued
    drops.update((reason, n) for reason, n in caller_drops.items() if n)
    per = tuple(
        DestinationStats(
            destination=dest.label,
            requests_sent=dest.requests_sent,
            requests_failed=dest.requests_failed,
            consecutive_failures=dest.scheduler.consecutive_failures,
            bytes_sent=dest.bytes_sent,
            points_delivered=delivered[dest.index],
            points_unsent=unsent[dest.index] + points_queued,
            last_error=dest.last_error,
            last_success_at=dest.last_success_at,
            superseded=dest.superseded,
            thinned_to=thinned[dest.index],
            unsent_memory_bytes=unsent[dest.index] * POINT_COLUMN_BYTES,
        )
        for dest in (driver.destinations if driver is not None else ())
    )
    successes = [d.last_success_at for d in per if d.last_success_at is not None]
    h = histogram
    return ReporterStats(
        state=state,
        requests_sent=sum(d.requests_sent for d in per),
        requests_failed=sum(d.requests_failed for d in per),
        consecutive_failures=max((d.consecutive_failures for d in per), default=0),
        bytes_sent=sum(d.bytes_sent for d in per),
        points_recorded=recorded,
        points_delivered=min(delivered),
        points_unsent=max(unsent) + points_queued,
        queue_depth=len(queued),
        queue_bytes=max(queued_bytes, 0),
        drops=drops,
        rewinds=rewinds,
        points_replaced_by_rewinds=replaced,
        last_error=next((d.last_error for d in per if d.last_error is not None), None),
        last_success_at=max(successes) if successes else None,
        report_calls=report_calls,
        report_p50_us=h.percentile_us(0.5),
        report_p99_us=h.percentile_us(0.99),
        report_max_us=h.max_ns / 1000.0,
        report_total_seconds=h.total_ns / 1e9,
        destinations=per,
        journal=journal_stats(journal),
    )
