"""One destination's state, and what its sink's answers do to it (sans-I/O, clock-free).

A reporter sends to one or several destinations (``Reporter(sinks=[...])``).
Each has its own :class:`Destination`: its scheduler (debounce, backoff,
Retry-After, rejection backoff, the sink's own floor), its opened state and
wire mode, its counters, and at most one request in flight (a :class:`Job`).
What each destination is known to hold lives in the recorder (series lengths,
sticky fields), indexed by :attr:`Destination.index`.

:func:`settle_open` and :func:`settle_send` are the result handling: given the
destination, the recorder and a sink's answer, they update both and say what
the driver must do (set ``cancel_requested``). They read no clock (``now`` and
``wall`` come in), own no thread and do no I/O, so tests drive them directly.
:func:`seed_source` is the resume rule across destinations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from trainreport._engine._scheduler import SendScheduler
from trainreport._logging import OnceLogger, describe_exception, get_logger
from trainreport._record._machines import DestinationInput, DestinationState, destination_next
from trainreport._record._recorder import Build, Recorder
from trainreport._record._thinning import MIN_POINTS, next_budget
from trainreport._reporting_config import ReportingConfig
from trainreport._wire._payloads import (
    MIN_POINT_JSON_BYTES,
    POINT_JSON_BYTES,
    ColumnTask,
    StoredState,
    parse_stored_task,
)
from trainreport._wire._sink_interface import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Rejected,
    Resynchronise,
    RetryLater,
    SendResult,
    Sink,
    Split,
    sink_repr,
)

if TYPE_CHECKING:
    from trainreport._engine._journal_feed import RecoveryOutcome, RecoveryStep

__all__ = [
    "MAX_FLOOR_SECONDS",
    "Destination",
    "Job",
    "Settled",
    "floor_of",
    "is_superseded",
    "keeps_local_run_log",
    "new_destination",
    "seed_source",
    "settle_error",
    "settle_open",
    "settle_send",
    "thin_ahead",
    "warn_if_unsent_old",
]

_log = get_logger()
_IN = DestinationInput
#: The states of a destination no open of which succeeded yet.
_NEVER_OPENED = frozenset(
    {DestinationState.NEW, DestinationState.UNREACHABLE, DestinationState.REFUSED}
)
#: What a thinned destination holds (``trainreport.metrics_thinned``).
_THINNED = (
    "its curves still cover the whole run (first and last point, each bucket's lowest"
    " and highest value; every status field and current value exact), at reduced resolution"
)
_THINNED_HINT = (
    "to send every point, use the reference server (the series-suffix extension,"
    " `trainreport serve`) or raise the job API's body limit; a FileSink beside the"
    " HttpSink keeps every point on disk, and `trainreport sync RUN.log --url ...`"
    " uploads it to a service that takes it"
)
#: A field smaller than this (bytes) is never dropped for size: leaving it out cannot help.
_MIN_DROPPED_FIELD_BYTES = 1024
#: A sink's ``min_interval_seconds`` at or past this (a day) is ignored as unusable.
MAX_FLOOR_SECONDS = 86_400.0


#: A refusal with this status says a later attempt (or writer) owns the task: ``HttpSink``
#: maps the protocol's 409 ``stale_writer`` and ``stale_attempt`` to ``Rejected(..., 409)``
#: (every other 409 is a ``Resynchronise``); a custom sink says the same with this status.
SUPERSEDED_STATUS = 409


def is_superseded(result: object) -> bool:
    """Whether ``result`` says a later attempt owns the task (``Rejected`` with status 409)."""
    return isinstance(result, Rejected) and result.status_code == SUPERSEDED_STATUS


def floor_of(sink: Sink) -> float:
    """The sink's ``min_interval_seconds`` as a finite number >= 0 (0.0 when unusable)."""
    value = getattr(sink, "min_interval_seconds", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if 0.0 <= value < MAX_FLOOR_SECONDS else 0.0


def keeps_local_run_log(sink: Sink) -> bool:
    """Whether the sink keeps the run on local disk itself (``Sink.local_run_log``). Never raises.

    Such a sink is its own journal: no journal is kept in front of it
    (``journal_identity``), and it is sent to at the journal's interval when that
    is shorter than the debounce interval (:func:`new_destination`). Only ``True``
    counts, so a custom sink's odd attribute never turns it on.
    """
    return getattr(sink, "local_run_log", False) is True


@attrs.define(eq=False)
class Job:
    """One request to a destination: an open (``build`` None), a send, or a recovery request.

    A recovery request (``recovery``, ``build`` None) is the send of a
    left-over journal or a re-open while the journal's destination delivers
    what dead processes left (``docs/engine.md``, "Recovery"). The sender
    fills ``result`` (or ``error``, when the sink raised) and then sets
    ``done``; the reporter thread reads them only after ``done``.
    """

    build: Build | None
    recovery: RecoveryStep | None = None
    include_metrics: bool = True
    closing: bool = False
    #: A ``flush()`` waited when it was made (its attempt's send carries the curves).
    complete: bool = False
    timeout: float | None = None
    result: OpenResult | SendResult | RecoveryOutcome | None = None
    error: Exception | None = None
    done: bool = False


@attrs.frozen
class Settled:
    """What a settled answer asks of the driver.

    Args:
        delivered: a send was delivered (or an open succeeded).
        cancel: the destination asks the run to stop.
    """

    delivered: bool
    cancel: bool = False


@attrs.define(eq=False)
class Destination:
    """One destination of a reporter: its sink, scheduler, wire mode, counters, request in flight.

    Args:
        index: its position in ``Reporter(sinks=[...])`` (the recorder's ``d``).
        sink: where its updates go.
        scheduler: its own send schedule.

    Owned by the reporter thread; other threads read the counters only.
    """

    index: int
    sink: Sink
    scheduler: SendScheduler
    label: str = ""
    #: Where it is in its life (``DESTINATION_TRANSITIONS``, docs/lifecycle.md#destination).
    state: DestinationState = DestinationState.NEW
    #: Its stored task, as read by its first successful open (while ``seeding``).
    stored: StoredState | None = None
    #: Its first successful open found the task stored there (it can seed a resume).
    holds_task: bool = False
    suffix_mode: bool = False
    requests_sent: int = 0
    requests_failed: int = 0
    bytes_sent: int = 0
    last_error: str | None = None
    last_success_at: str | None = None
    resyncs: int = 0
    job: Job | None = None
    last_unsent_warning: float | None = None
    #: When its current run of failed requests began (scheduling clock, seconds), or ``None``.
    failing_since: float | None = None
    #: Stored points that differ from the run's record, found by :func:`adopt`, that its
    #: next send replaces (``trainreport.destination_replaced`` is logged when it is made).
    replacing: int = 0
    once: OnceLogger = attrs.field(factory=OnceLogger)

    def __attrs_post_init__(self) -> None:
        if not self.label:
            self.label = sink_repr(self.sink)  # HttpSink's shows URL, job and task

    def apply(self, event: DestinationInput) -> None:
        """Move to the state ``DESTINATION_TRANSITIONS`` gives for ``event``.

        Raises:
            TransitionError: the input is not allowed in this state (an engine bug).
        """
        self.state = destination_next(self.state, event)

    @property
    def is_open(self) -> bool:
        """Opened (``seeding`` or ``open``): the next request is a send, not an open."""
        return self.state in _OPENED

    @property
    def in_step(self) -> bool:
        """Open and in step with the store: an update can be built and sent to it."""
        return self.state is DestinationState.OPEN

    @property
    def first_open_ended(self) -> bool:
        """An open of it has ended (successfully or not): seeding may go on without it."""
        return self.state is not DestinationState.NEW

    @property
    def never_opened(self) -> bool:
        """No open of it succeeded yet (new, unreachable or refused): it may hold the task."""
        return self.state in _NEVER_OPENED

    @property
    def answered(self) -> bool:
        """It answered at least once (anything but a refused or unresolvable connection)."""
        return self.state not in _UNANSWERED

    @property
    def superseded(self) -> bool:
        """A later attempt owns the task at this destination: nothing more is sent to it."""
        return self.state is DestinationState.SUPERSEDED

    def due_at(self) -> float | None:
        """When its next send is due (scheduling clock, seconds), or ``None`` when none will be.

        Its scheduler's time (``SendScheduler.due_at``), except in the state that
        takes nothing more: superseded (a later attempt owns the task), where no
        send is ever due again, whatever is recorded, flushed or waited. The
        state is the one source of truth; the scheduler keeps no copy of it.
        """
        return None if self.superseded else self.scheduler.due_at()

    def is_due(self, now: float) -> bool:
        """True when a send should be made at ``now`` (:meth:`due_at` has passed)."""
        due = self.due_at()
        return due is not None and due <= now

    @property
    def finished_cleanly(self) -> bool:
        """``close()`` ended with it open and holding everything recorded."""
        return self.state is DestinationState.DELIVERED

    @property
    def in_flight(self) -> bool:
        """A request to it is in flight (a property, so a type checker does not narrow it)."""
        return self.job is not None

    @property
    def waits_for_seed(self) -> bool:
        """Opened, but the store is not seeded yet: nothing can be sent to it before it is.

        Another destination's first open is still in flight (``_engine/_resume.py``);
        its due send sets no wake and a ``flush()`` cannot force it.
        """
        return self.state is DestinationState.SEEDING

    @property
    def full_state(self) -> bool:
        """The destination takes complete ``metrics`` only (no series-suffix extension)."""
        return not self.suffix_mode


_OPENED = frozenset({DestinationState.SEEDING, DestinationState.OPEN})
_UNANSWERED = frozenset({DestinationState.NEW, DestinationState.UNREACHABLE})


def new_destination(
    index: int, sink: Sink, config: ReportingConfig, *, interval: float | None = None
) -> Destination:
    """Destination ``index`` of a reporter, with its scheduler made from ``config``.

    A destination's own floor (``Sink.min_interval_seconds``, e.g. Kubeflow
    Trainer's 5 s) holds whatever the config says: for regular sends, and as a
    gap between any two attempts (events, retries, flush).

    Args:
        index: its position in ``Reporter(sinks=[...])``.
        sink: where its updates go.
        config: the reporter's configuration (intervals and backoff, seconds).
        interval: a send interval (seconds) used instead of the config's when
            shorter, for a sink that keeps a local run log (its own journal,
            :func:`keeps_local_run_log`); ignored for any other.
    """
    floor = floor_of(sink)
    regular = config.min_report_interval_seconds
    if interval is not None and keeps_local_run_log(sink):
        regular = min(regular, interval)
    scheduler = SendScheduler(
        min_interval=max(regular, floor),
        min_request_gap=floor,
        heartbeat=config.heartbeat_seconds,
        backoff_initial=config.backoff_initial_seconds,
        backoff_max=config.backoff_max_seconds,
        backoff_multiplier=config.backoff_multiplier,
        backoff_jitter=config.backoff_jitter,
        rejected_backoff=config.rejected_backoff_seconds,
    )
    return Destination(index=index, sink=sink, scheduler=scheduler)


def seed_source(
    destinations: list[Destination], *, stop_waiting: bool = False, running: bool = False
) -> Destination | bool | None:
    """Which destination's stored task seeds the store, once that can be decided.

    The first destination, in list order, whose first open succeeded and that
    holds the task. Nothing is decided before one open succeeded. A
    destination whose first open is still in flight holds the others back
    until ``stop_waiting`` (``Resume.seed_if_decided``: running, one debounce
    interval after the first successful open; closing, a bound computed from
    the close's deadline). While ``running``, so does one whose opens all
    failed so far (a 503, no listener): it may hold the task, and its retry
    comes within the backoff, well inside the interval; seeded without it, its
    stored points would be replaced when it opens. While closing, a
    destination whose first open failed does not hold the others back (the
    close would give them only its last moments).

    Returns:
        the destination to seed from; ``None`` when none holds the task (a new
        task: seed from nothing); ``False`` when it cannot be decided yet.
    """
    opened = [d for d in destinations if d.waits_for_seed]
    if not opened:
        return False
    pending = [d for d in destinations if not d.first_open_ended or (running and d.never_opened)]
    if not stop_waiting and pending:
        return False
    for dest in opened:
        if dest.holds_task:
            return dest
    return None


def _stored_state(opened: Opened) -> StoredState:
    stored = opened.stored_task
    # Already columns (a run log's replay): never through the GET shape's points.
    state = stored.state if isinstance(stored, ColumnTask) else parse_stored_task(stored)
    if isinstance(state, str):
        _log.warning("trainreport.stored_task_malformed", reason=state[:300])
        return StoredState(series={})
    for problem in state.problems:
        _log.warning("trainreport.stored_task_malformed", reason=problem[:300])
    return state


def settle_open(dest: Destination, recorder: Recorder, result: OpenResult, now: float) -> Settled:
    """Apply ``Sink.open()``'s answer at ``now`` (monotonic seconds).

    The first successful open keeps the stored task for seeding (the driver
    decides with :func:`seed_source`); once the store is seeded, a
    destination opened for the first time is brought up to date from its own
    lengths (:meth:`Recorder.adopt`); a later open (after a resynchronise)
    resends from the lengths it reports and every sticky field.
    """
    if not isinstance(result, Opened):
        if not is_superseded(result):  # superseded: _failed applies it
            unreachable = isinstance(result, RetryLater) and result.unreachable
            dest.apply(_IN.OPEN_UNREACHABLE if unreachable else _IN.OPEN_FAILED)
        _failed(dest, result, now)
        if not isinstance(result, RetryLater) and not is_superseded(result):
            dest.scheduler.on_open_refused()
        return Settled(delivered=False)
    first = dest.state is not DestinationState.REOPENING
    dest.apply(_IN.OPENED)
    dest.suffix_mode = CAPABILITY_SERIES_SUFFIX in result.capabilities
    if dest.full_state:  # the whole state goes every time: no point may leave memory
        recorder.keep_every_point(dest.index)
    state = _stored_state(result)
    if first:
        _log.info(
            "trainreport.destination_opened",
            destination=dest.label,
            wire_mode="series-suffix" if dest.suffix_mode else "full-state",
            new_task=result.stored_task is None,
            **({"page": result.page_url} if result.page_url else {}),
        )
        dest.stored = state
        dest.holds_task = result.stored_task is not None
        if recorder.seeded:
            adopt(dest, recorder)
    else:
        recorder.resynchronise(dest.index, {n: len(s[0]) for n, s in state.series.items()})
    return Settled(delivered=True)


def adopt(dest: Destination, recorder: Recorder) -> None:
    """Bring a destination the store was not seeded from up to date from its own stored task.

    Its stored points past the prefix it shares with the store are replaced by
    its next send (:func:`sending`), not here: a destination adopted while
    closing may be sent nothing more (``EngineCore.seed_if_decided``).
    """
    state = dest.stored if dest.stored is not None else StoredState(series={})
    dest.replacing = recorder.adopt(dest.index, state, dest.full_state)
    dest.apply(_IN.SEEDED)
    dest.stored = None


def sending(dest: Destination) -> None:
    """A send to ``dest`` was built: the first since :func:`adopt` replaces what it found.

    Logs ``trainreport.destination_replaced`` (how many stored points) once,
    for that send. Never raises.
    """
    if dest.replacing:
        _log.warning(
            "trainreport.destination_replaced",
            destination=dest.label,
            stored_points_replaced=dest.replacing,
        )
        dest.replacing = 0


def settle_send(
    dest: Destination,
    recorder: Recorder,
    job: Job,
    result: SendResult,
    now: float,
    *,
    wall: str,
    queue_empty: bool,
) -> Settled:
    """Apply ``Sink.send()``'s answer to ``job`` at ``now`` (monotonic seconds).

    Args:
        dest: the destination the job went to.
        recorder: the run's record.
        job: the send (its build says what it carried).
        result: the sink's answer.
        now: monotonic seconds, when the answer is settled.
        wall: the wall-clock time (ISO 8601 UTC) for ``last_success_at``.
        queue_empty: no report waits in the queue (nothing left out of this send).
    """
    build = job.build
    assert build is not None
    scheduler = dest.scheduler
    d = dest.index
    if isinstance(result, Delivered):
        dest.resyncs = 0
        dest.bytes_sent += result.bytes_sent
        recorder.on_delivered(d, build, None if dest.full_state else result.series_lengths)
        left = not queue_empty or recorder.has_changes(d)
        failures = scheduler.consecutive_failures
        scheduler.on_delivered(now, everything_sent=not left, carried_curves=job.include_metrics)
        dest.last_success_at = wall
        if dest.last_error is not None or failures:
            _recovered(dest, recorder, failures, build.update.point_count, now)
        return Settled(delivered=True, cancel=result.cancel_requested)
    if isinstance(result, Split):
        _too_large(dest, recorder, build, result, now)
        return Settled(delivered=False)
    if isinstance(result, Resynchronise):
        dest.requests_failed += 1
        dest.resyncs += 1
        _log.info("trainreport.resynchronise", reason=result.reason[:300], destination=dest.label)
        if result.series_lengths is None:
            dest.apply(_IN.NEEDS_OPEN)
        recorder.resynchronise(d, result.series_lengths)
        if dest.resyncs == 1:  # resend from the server's state at once, once
            scheduler.note_change(now, urgent=True)
        else:  # a server that keeps disagreeing gets the backoff, not a busy loop
            scheduler.on_retry_later(now)
            dest.last_error = result.reason[:300]
            if dest.failing_since is None:
                dest.failing_since = now
        return Settled(delivered=False)
    _failed(dest, result, now)
    return Settled(delivered=False)


def _recovered(
    dest: Destination, recorder: Recorder, failures: int, points: int, now: float
) -> None:
    """The first delivered send after failures: one ``trainreport.destination_recovered``.

    Sends are declarative, so the points recorded while the destination was
    down are not lost: this send carried them (``points_delivered``), or the
    next ones will (``points_unsent``, sent at the regular cadence).
    """
    since = dest.failing_since
    _log.info(
        "trainreport.destination_recovered",
        destination=dest.label,
        consecutive_failures=failures,
        down_seconds=None if since is None else round(max(now - since, 0.0), 3),
        points_delivered=points,
        points_unsent=recorder.unsent_points(dest.index),
        last_error=dest.last_error,
        consequence="nothing recorded while it was down is lost: it is sent from the store",
    )
    dest.last_error = None
    dest.failing_since = None


def settle_error(dest: Destination, exc: Exception, now: float, *, opening: bool = False) -> None:
    """The sink (or the engine) raised: log it once per type, count it, and back off.

    Something ran, so the destination is not known to be a wrong URL: an open
    that raised is a failed open (``opening``), any other error keeps the state
    (from ``new`` or ``unreachable``, it counts as an answer).
    """
    if dest.failing_since is None:
        dest.failing_since = now
    dest.requests_failed += 1
    dest.apply(_IN.OPEN_FAILED if opening else _IN.ERROR)
    dest.once.warning(
        ("cycle", type(exc).__name__),
        "trainreport.reporter_error",
        error=describe_exception(exc, 500),
        destination=dest.label,
    )
    dest.last_error = describe_exception(exc)
    dest.scheduler.on_retry_later(now)


def _too_large(
    dest: Destination, recorder: Recorder, build: Build, result: Split, now: float
) -> None:
    """The destination refused the update's size (413): leave out what cannot fit.

    A once-sent field (``hyperparameters``, ...) larger than the curves is
    dropped (counted, logged once) and the rest is resent at once; it never
    holds back the curves. Otherwise, in full-state mode, ``metrics`` is what
    does not fit: it cannot be split under a shallow merge, so the curves are
    resent at once thinned to fewer points a series (``_record/_thinning.py``, sized
    by what the ``Split`` says; one ``trainreport.metrics_thinned`` the first
    time), and only when even the thinnest do not fit does the reporter go on
    without them (for this destination). With nothing left to leave out, the
    refusal is a rejection.
    """
    update = build.update
    metrics_bytes = update.point_count * POINT_JSON_BYTES if update.full_state else 0
    if recorder.drop_field(dest.index, update, metrics_bytes, _MIN_DROPPED_FIELD_BYTES):
        dest.requests_failed += 1
        dest.scheduler.note_change(now, urgent=True)
        return
    if update.series is not None and update.full_state:
        dest.requests_failed += 1
        lengths = [len(s) for s in update.series]
        _thin(dest, recorder, lengths, result)
        dest.scheduler.note_change(now, urgent=True)
        return
    _failed(dest, Rejected(result.reason, 413), now)


def thin_ahead(dest: Destination, recorder: Recorder) -> None:
    """Thin a full-state destination's curves before building a state that cannot fit.

    When the sink states its body limit (``Sink.max_body_bytes``) and the
    curves, at ``MIN_POINT_JSON_BYTES`` a point (the shortest a point is
    encoded), are already over it, the body of every point would only be
    copied, encoded and refused (a :class:`Split`, the same thinning after
    it): at a fast loop's 5,000,000 points between two sends, hundreds of MB
    for nothing. The budget is sized as a refusal of that size would size it
    (at ``POINT_JSON_BYTES`` a point), at least ``MIN_POINTS``: an estimate
    never refuses the curves for good, a refusal of a real body does; a
    thinned body still over the limit is refused and thinned again as
    before. A state that might fit is built whole: thinning stays exact below
    the limit (docs/engine.md, "Thinning under a body limit"). Called at each
    running pass (so the thinning starts as the state outgrows the limit,
    and the backlog rule of a thinned destination applies from then on) and
    before each full-state build with the curves; it costs a length a series
    until the destination is thinned.
    """
    limit = dest.sink.max_body_bytes
    if limit is None or recorder.thinned_to(dest.index) is not None:
        return
    if recorder.metrics_refused(dest.index):
        return
    lengths = recorder.series_lengths()
    points = sum(lengths)
    if points * MIN_POINT_JSON_BYTES <= limit:
        return
    estimate = points * POINT_JSON_BYTES
    reason = f"about {estimate} bytes of curves, over max_body_bytes ({limit})"
    refusal = Split(reason, body_bytes=estimate, limit_bytes=limit)
    budget = next_budget(lengths, estimate, limit)
    if budget is None:  # an estimate never refuses the curves: a real refusal decides that
        if max(lengths, default=0) <= MIN_POINTS:
            return
        budget = MIN_POINTS
    _thin_to(dest, recorder, budget, refusal)


def _thin(dest: Destination, recorder: Recorder, lengths: list[int], refusal: Split) -> None:
    """Thin ``dest``'s curves to fit what ``refusal`` says, or go on without them.

    One ``trainreport.metrics_thinned`` when thinning starts (further
    reductions are silent); ``trainreport.metrics_too_large`` when even the
    thinnest curves cannot fit (``_record/_thinning.py``, ``next_budget``).
    """
    budget = next_budget(lengths, refusal.body_bytes, refusal.limit_bytes)
    if budget is not None:
        _thin_to(dest, recorder, budget, refusal)
        return
    recorder.refuse_metrics(dest.index)
    _log.warning(
        "trainreport.metrics_too_large",
        reason=refusal.reason[:300],
        points=sum(lengths),
        destination=dest.label,
    )


def _thin_to(dest: Destination, recorder: Recorder, budget: int, refusal: Split) -> None:
    """Thin ``dest``'s curves to ``budget`` points a series; log when thinning starts."""
    if recorder.thin_metrics(dest.index, budget) is None:
        _log.warning(
            "trainreport.metrics_thinned",
            destination=dest.label,
            points_per_series=budget,
            refused_body_bytes=refusal.body_bytes,
            body_limit_bytes=refusal.limit_bytes,
            reason=refusal.reason[:300],
            consequence=_THINNED,
            hint=_THINNED_HINT,
        )


def _failed(dest: Destination, result: object, now: float) -> None:
    if dest.failing_since is None:
        dest.failing_since = now
    dest.requests_failed += 1
    scheduler = dest.scheduler
    if is_superseded(result):
        assert isinstance(result, Rejected)
        dest.last_error = result.reason[:300]
        if not dest.superseded:
            dest.apply(_IN.SUPERSEDED)
            scheduler.on_superseded(now)
            _log.warning(
                "trainreport.destination_superseded",
                reason=result.reason[:300],
                status_code=result.status_code,
                destination=dest.label,
                consequence="a later attempt owns the task: nothing more is sent here",
            )
        return
    if isinstance(result, RetryLater):
        delay = scheduler.on_retry_later(now, result.delay_seconds)
        reason = result.reason
        failures = scheduler.consecutive_failures
        if failures in (1, 3) or failures % 20 == 0:
            _log.warning(
                "trainreport.send_failed",
                reason=reason[:300],
                consecutive_failures=failures,
                retry_in_seconds=round(delay, 3),
                destination=dest.label,
            )
    else:
        delay = scheduler.on_rejected(now)
        reason = getattr(result, "reason", repr(result))
        hint = getattr(result, "hint", None)
        dest.once.warning(
            ("rejected", reason),
            "trainreport.send_rejected",
            reason=reason[:300],
            status_code=getattr(result, "status_code", None),
            retry_with_new_data_in_seconds=round(delay, 3),
            destination=dest.label,
            **({"hint": hint[:300]} if isinstance(hint, str) else {}),
        )
    dest.last_error = reason[:300]


def warn_if_unsent_old(
    destinations: list[Destination], recorder: Recorder, limit: float, now: float
) -> None:
    """Log ``trainreport.unsent_data_old`` for each destination with data unsent ``limit`` s.

    Once per ``limit`` seconds per destination at most; ``limit`` <= 0 turns the
    warning off. ``now`` is the scheduling clock (seconds).
    """
    if limit <= 0:
        return
    for dest in destinations:
        since = dest.scheduler.pending_since
        if dest.superseded or since is None or now - since < limit:
            continue
        last = dest.last_unsent_warning
        if last is not None and now - last < limit:
            continue
        dest.last_unsent_warning = now
        _log.warning(
            "trainreport.unsent_data_old",
            age_seconds=round(now - since, 1),
            unsent_points=recorder.unsent_points(dest.index),
            consecutive_failures=dest.scheduler.consecutive_failures,
            last_error=dest.last_error,
            destination=dest.label,
        )
