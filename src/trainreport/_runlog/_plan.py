"""Planning a run log's upload: what one update must carry to a service (pure).

:func:`plan_sync` and :func:`plan_recovery` are pure: from what the log holds
and what the service holds (the task :meth:`Sink.open` returned), they decide
what one update must carry. Two drivers share them: ``trainreport sync``
(``trainreport.cli._sync.sync``) and the engine's journal recovery
(``trainreport._engine._journal_feed``), which delivers what a dead process's journal
holds before the first send. The rules (``docs/engine.md``, "Uploading
a run with trainreport sync"):

- **Points.** Per series, the log's points past the service's length are
  sent, nothing twice. With the series-suffix extension that is a suffix at
  the service's length, with each point's time (the sink sends the times
  column only to a service that announces ``series-times-v1``); in
  full-state mode (a plain job API) the merged curves are sent whole,
  without times: the service's points, then the log's past them, and every
  series the service holds, so nothing stored is dropped.
- **The service holds more.** A series the service holds more points of than
  the log is left as stored (never shortened), and so is a series whose
  stored points disagree with the log's (another run wrote it), said per series.
- **A journal** (a reporter's, left by a killed process: its RUN record
  says ``journal``) wins where it disagrees with the service: the dead process
  was the task's writer and the service holds what it sent, so a disagreement
  is a rewind the service never received; the journal's points are sent from
  the first differing index. A journal whose process never read the stored
  task (``offsets: local``) counts its indices from its own first point: each
  series is placed after the stored points before its first step, the rule a
  reporter follows when it records before it could read the stored task.
- **Whose a journal is.** A journal says which writer generation its
  content was last sent under and whether its writer was superseded
  (:class:`~trainreport._runlog._journal.JournalOwner`); the reference server
  says which generation wrote the task last (``last_writer_generation``). A
  journal whose writer was superseded, or one older than the task's last
  writer, is never replayed over the newer writer's points and status
  (:class:`StaleJournalError`, unless ``force``); one whose writer claimed the
  task after its last write has its task fields sent whatever the clocks
  say. A journal whose process never opened its service (``offsets: local``,
  no generation) is stale where the service names a last writer and the
  task was written after the journal was started (by the clocks:
  :func:`stale_reason`). A journal without these fields (an
  earlier version's) and a service that does not say (a plain job API,
  full-state mode) are planned as before.
- **Task fields.** The log's status and ``status_details`` are sent when they
  differ from the stored ones, unless the service looks newer: its
  ``updated_at`` is later than the log's, or it holds more points of a series
  (``updated_at`` from earlier versions has one-second resolution, so a tie is
  decided by the points; a journal's series that replaces the service's from
  where they differ is a rewind, not the service being ahead). The next of
  several left-overs recovered in turn has its fields sent over those the
  recovery just sent from an older one, whatever the stamps say. Both stamps
  come from one writer's clock when the journal's writer wrote the task last,
  so the comparison needs no two hosts' clocks to agree; otherwise it does (a
  plain job API cannot do better).
"""

from __future__ import annotations

import datetime
from array import array
from bisect import bisect_left
from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from trainreport._record._machines import TERMINAL_STATUSES
from trainreport._runlog._journal import LOCAL_OFFSETS, JournalOwner, is_journal
from trainreport._runlog._state import LogState
from trainreport._wire._payloads import StoredState, finite_or_none, parse_stored_task
from trainreport._wire._protocol import new_columns
from trainreport._wire._sink_interface import (
    SeriesUpdate,
    Update,
)
from trainreport._wire._task_record import Columns

__all__ = [
    "SeriesOutcome",
    "StaleJournalError",
    "SyncError",
    "SyncPlan",
    "place_local_journal",
    "plan_recovery",
    "plan_sync",
    "stale_reason",
]

_Columns: TypeAlias = "tuple[array[int], array[int], array[float]]"


class SyncError(Exception):
    """The upload could not be made; the message says why (never contains a token).

    Args:
        message: why.
        status_code: the HTTP status of the refusal, when there was one (a 401
            or 403 gets the command line's token hint).
    """

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class StaleJournalError(SyncError):
    """A journal of a superseded or older writer would replace a newer writer's points.

    Kept, never replayed, unless ``force`` (``trainreport sync --force``).
    """


def stale_reason(
    run: Mapping[str, str],
    last_writer_generation: int | None,
    *,
    log_details: Mapping[str, Any] | None = None,
    stored_task: Mapping[str, Any] | None = None,
) -> str | None:
    """Why the journal with RUN fields ``run`` must not be replayed, or ``None``.

    A journal sent under a generation is judged by generations alone. One
    whose process never opened its service (``offsets: local``, no
    ``writer_generation``) is judged only where the service names a last
    writer, whom that journal cannot have seen: it is stale when the task
    was written after the journal was started (``journal_started_at``). A
    journal without that stamp is stale when the task is terminal, or was
    written after the journal's last record (its ``updated_at``). That order
    compares two hosts' clocks; the generation rule does not
    (``docs/engine.md``, "Recovery").

    Args:
        run: the journal's RUN fields (:class:`JournalOwner`).
        last_writer_generation: the generation whose update the task's last
            write was, as the service said before this process wrote
            (``None``: it does not say).
        log_details: the journal's ``status_details`` (its ``updated_at``).
        stored_task: what the service holds (``GET`` shape), or ``None``.

    Never raises.
    """
    owner = JournalOwner.of(run)
    if owner.superseded:
        return (
            f"this journal's writer ({owner.describe()}) was superseded: a later attempt "
            "or writer took the task, and the service holds that writer's points and status"
        )
    mine = owner.writer_generation
    if mine is not None and last_writer_generation is not None and last_writer_generation > mine:
        return (
            f"the task was last written by writer generation {last_writer_generation}, "
            f"newer than this journal's ({owner.describe()}): a later attempt or writer "
            "wrote it after this journal's"
        )
    never_opened = mine is None and run.get("offsets") == LOCAL_OFFSETS
    if never_opened and last_writer_generation is not None and stored_task is not None:
        return _never_opened_reason(owner, log_details or {}, stored_task, last_writer_generation)
    return None


def _never_opened_reason(
    owner: JournalOwner, log_details: Mapping[str, Any], stored_task: Mapping[str, Any], last: int
) -> str | None:
    """:func:`stale_reason` for a journal whose process never opened its service."""
    never = (
        f"this journal ({owner.describe()}) never reached the service, so writer "
        f"generation {last}, which wrote the task last, is a writer it never saw"
    )
    status = stored_task.get("status")
    stored_details = stored_task.get("status_details")
    stored_at = stored_details.get("updated_at") if isinstance(stored_details, Mapping) else None
    theirs = _stamp(stored_at)
    started = _stamp(owner.journal_started_at)
    if started is not None:
        # A terminal status written before the journal started ended its predecessor
        # (a retry, a resumed run): only a write after the start is another writer's.
        if theirs is None or theirs <= started:
            return None
        since = f"after this journal was started ({owner.journal_started_at})"
        return f"{never}; it wrote at {stored_at}, {since}, by the two hosts' clocks"
    if status in TERMINAL_STATUSES:
        return f"the task is {status}: {never}, and it ended the run"
    ours = _stamp(log_details.get("updated_at"))
    if theirs is None or ours is None or theirs <= ours:
        return None
    since = f"after this journal's last record (updated_at {log_details['updated_at']})"
    return f"{never}; it wrote at {stored_at}, {since}, by the two hosts' clocks"


@attrs.frozen
class SeriesOutcome:
    """What sync does with one series.

    Attributes:
        name: the series.
        log_points: its length in the log (counted from index 0).
        server_points: its length at the service before the upload.
        sent_from: index of the first point sent, or ``None`` when none is.
        note: why nothing is sent, or ``""``.
    """

    name: str
    log_points: int
    server_points: int
    sent_from: int | None = None
    note: str = ""

    @property
    def sent(self) -> int:
        """Points sent (0 when none)."""
        return 0 if self.sent_from is None else self.log_points - self.sent_from


@attrs.frozen
class SyncPlan:
    """One upload: the update to send (``None``: nothing) and what it does per series."""

    update: Update | None
    series: tuple[SeriesOutcome, ...]
    details_sent: bool
    details_note: str


def _stamp(value: object) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def _details_decision(
    log: LogState,
    stored: StoredState,
    exists: bool,
    outcomes: list[SeriesOutcome],
    *,
    log_is_newer: bool = False,
    prefer_log: bool = False,
) -> tuple[bool, str]:
    """Whether the log's status and fields are sent, and why not (rules in the module doc).

    With ``prefer_log`` (a journal), a series whose points replace the
    service's from where they differ does not make the service "ahead": the
    journal's shorter series is a rewind the service never received.
    """
    details = log.task.details
    missing = object()
    if (
        exists
        and stored.status == log.task.status
        and all(stored.details.get(k, missing) == v for k, v in details.items())
    ):
        return False, "the service holds them already"
    if log_is_newer:
        return True, "sent: the journal's writer claimed the task after its last write"
    stored_at = stored.details.get("updated_at")
    ours, theirs = _stamp(details.get("updated_at")), _stamp(stored_at)
    if theirs is not None and (ours is None or theirs > ours):
        return False, f"not sent: the service's are newer (updated_at {stored_at})"
    ahead = [
        o.name
        for o in outcomes
        if o.server_points > o.log_points and not (prefer_log and o.sent_from is not None)
    ]
    if ahead:
        return False, f"not sent: the service is ahead of the log ({ahead[0]} has more points)"
    return True, "sent"


def _disagreement(server: _Columns, log: Columns, base: int, upto: int) -> int | None:
    """First index in ``[base, upto)`` where the service's points differ from the log's.

    Times are not compared: a service that keeps none holds the same points without them.
    """
    n = upto - base
    if n <= 0:
        return None
    pairs: list[tuple[list[Any], list[Any]]] = [
        (server[0][base:upto].tolist(), log[0][:n].tolist()),
        (server[1][base:upto].tolist(), log[1][:n].tolist()),
        (finite_or_none(server[2][base:upto]), finite_or_none(log[2][:n])),
    ]
    first = None
    for theirs, ours in pairs:
        if theirs != ours:
            i = next(i for i, (t, o) in enumerate(zip(theirs, ours, strict=True)) if t != o)
            first = i if first is None else min(first, i)
    return None if first is None else base + first


def _series_outcome(
    name: str, cols: Columns, base: int, server: _Columns | None, *, prefer_log: bool
) -> SeriesOutcome:
    end = base + len(cols[0])
    held = len(server[0]) if server is not None else 0
    if held < base:
        return SeriesOutcome(
            name, end, held, None, f"the log starts at index {base:,}: the service lacks points"
        )
    if server is not None:
        diverged = _disagreement(server, cols, base, min(held, end))
        if diverged is not None and prefer_log:
            note = f"replaces the service's points from index {diverged:,}"
            return SeriesOutcome(name, end, held, diverged, note)
        if diverged is not None:
            return SeriesOutcome(
                name, end, held, None, f"differs from the service's at index {diverged:,}: kept"
            )
    if held >= end:
        note = "up to date" if held == end else f"the service holds {held - end:,} more: kept"
        return SeriesOutcome(name, end, held, None, note)
    return SeriesOutcome(name, end, held, held)


def place_local_journal(log: LogState, stored: StoredState) -> None:
    """Give a journal with local offsets the service's indices, in place.

    Each series whose first point is at step ``s`` starts at the index of the
    first stored point at or after ``s`` (the stored points before it stay;
    the journal's replace the rest), as a reporter seeds its store under
    points it recorded before it could read the stored task. A series a
    journal trimmed (already placed) is left as it is.
    """
    for name, (steps, *_) in log.task.series.items():
        if not steps or log.bases.get(name, 0):
            continue
        held = stored.series.get(name)
        keep = bisect_left(held[0], steps[0]) if held is not None else 0
        if keep:
            log.bases[name] = keep


def plan_recovery(
    log: LogState,
    run: Mapping[str, str],
    stored_task: Mapping[str, Any] | None,
    *,
    full_state: bool,
    last_writer_generation: int | None = None,
    force: bool = False,
    after_older_journal: bool = False,
) -> SyncPlan:
    """:func:`plan_sync` for a file whose RUN record is ``run``: a journal gets its rules.

    A journal (``run["journal"] == "1"``) wins where it disagrees with the
    service, and one with ``offsets: local`` is placed first
    (:func:`place_local_journal`; ``log`` is changed in place), unless it is
    stale (:func:`stale_reason`): then it is refused, unless the service
    already holds everything in it (the plan sends nothing) or ``force``.
    When its writer claimed the task after the task's last write
    (``last_writer_generation`` below the journal's), its task fields are
    sent whatever ``updated_at`` says. Any other run log is planned as
    :func:`plan_sync` plans it.

    Args:
        log: the file's task, replayed.
        run: its RUN fields.
        stored_task: what the service holds (``GET`` shape), or ``None``.
        full_state: the service speaks only the baseline.
        last_writer_generation: the generation whose update the task's last
            write was, before the recovering process wrote (``None``: unknown).
        force: replay a stale journal anyway (``trainreport sync --force``).
        after_older_journal: the service's task fields were sent by this
            recovery from a left-over recorded before this one (an earlier
            ``journal_seq`` on this node): this journal's are newer, whatever
            the wall clock stamped (it may have been stepped between the two).

    Raises:
        StaleJournalError: the journal is stale and would change what the service holds.
        SyncError: as :func:`plan_sync`.
    """
    if not is_journal(run):
        return plan_sync(log, stored_task, full_state=full_state)
    if run.get("offsets") == LOCAL_OFFSETS:
        stored = parse_stored_task(stored_task)
        if isinstance(stored, str):
            raise SyncError(f"the service's stored task cannot be parsed ({stored}): nothing sent")
        place_local_journal(log, stored)
    mine = JournalOwner.of(run).writer_generation
    newer = mine is not None and last_writer_generation is not None
    newer = newer and last_writer_generation < mine  # type: ignore[operator]
    newer = newer or after_older_journal
    plan = plan_sync(log, stored_task, full_state=full_state, prefer_log=True, log_is_newer=newer)
    reason = stale_reason(
        run, last_writer_generation, log_details=log.task.details, stored_task=stored_task
    )
    if reason is not None and plan.update is not None and not force:
        raise StaleJournalError(reason)
    return plan


def plan_sync(
    log: LogState,
    stored_task: Mapping[str, Any] | None,
    *,
    full_state: bool,
    prefer_log: bool = False,
    log_is_newer: bool = False,
) -> SyncPlan:
    """Decide the one update that uploads ``log`` to a service holding ``stored_task``.

    Args:
        log: the run's task as replayed from its file.
        stored_task: what the service holds (``GET`` shape), or ``None``.
        full_state: the service speaks only the baseline (full-state ``metrics``).
        prefer_log: where a series' stored points differ from the log's, send
            the log's from there (a journal's rule) instead of keeping the
            service's.
        log_is_newer: the log's writer claimed the task after its last write:
            its task fields are sent whatever ``updated_at`` says.

    Raises:
        SyncError: the stored task cannot be parsed (sending could overwrite
            curves this client cannot read), or the log holds no task.
    """
    if not log.exists:
        raise SyncError("the log holds no task")
    stored = parse_stored_task(stored_task)
    if isinstance(stored, str):
        raise SyncError(f"the service's stored task cannot be parsed ({stored}): nothing sent")
    held = stored.series
    outcomes = []
    suffixes = []
    merged: dict[str, _Columns] = {}
    for name, cols in log.task.series.items():
        base = log.bases.get(name, 0)
        outcome = _series_outcome(name, cols, base, held.get(name), prefer_log=prefer_log)
        outcomes.append(outcome)
        start = outcome.sent_from
        if start is None:
            continue
        local = start - base
        suffixes.append(  # with each point's time: the sink sends it where the service keeps it
            SeriesUpdate(
                name, start, cols[0][local:], cols[1][local:], cols[2][local:], cols[3][local:]
            )
        )
        prefix = held.get(name) or new_columns()
        merged[name] = (
            prefix[0][:start] + cols[0][local:],
            prefix[1][:start] + cols[1][local:],
            prefix[2][:start] + cols[2][local:],
        )
    details = log.task.details
    send_details, note = _details_decision(
        log,
        stored,
        stored_task is not None,
        outcomes,
        log_is_newer=log_is_newer,
        prefer_log=prefer_log,
    )
    series: tuple[SeriesUpdate, ...] | None = None
    foreign: dict[str, Any] = {}
    if suffixes:
        if full_state:
            curves = {**held, **merged}
            series = tuple(SeriesUpdate(n, 0, *c) for n, c in curves.items() if len(c[0]))
            # A stored series this client cannot parse goes back exactly as stored.
            foreign = {n: raw for n, raw in stored.damaged.items() if n not in curves}
        else:
            series = tuple(suffixes)
    update = None
    if series is not None or send_details:
        update = Update(
            log.task.status if send_details else None,
            dict(details) if send_details else {},
            series,
            full_state,
            foreign_series=foreign,
        )
    return SyncPlan(update, tuple(outcomes), send_details, note)
