"""JournalKeeper: what the reporter thread writes to its journal, trims from it, and recovers.

The reporter thread drives it (``docs/engine.md``, "The journal in front of a
service"):

- :meth:`JournalKeeper.record` after a drain, at least every
  ``journal_interval_seconds``: one record holding each series' points the
  journal lacks (a suffix at the journal's length) and the task fields that
  changed, written with one ``write()``. When the store changed under the
  journal (a rewind, the stored task seeded under this process's points),
  the journal is rewritten atomically as one snapshot instead.
- :meth:`JournalKeeper.acknowledged` after a delivered send: the points the
  destination is known to hold are trimmed (in memory at once; in the file
  when it has grown past about twice what it would hold).
- :meth:`JournalKeeper.recover` at the first successful open, before the
  stored task seeds the store and before the first send: the journals a dead
  process left are planned against the stored task
  (:func:`trainreport._sync.plan_recovery`) and sent, oldest first.
- :meth:`JournalKeeper.close` at the end: the journal is removed when the
  destination holds everything, ``fsync``-ed and kept otherwise.

Runs on the reporter thread only: it reads the store without the recorder's
lock (that thread is the store's only writer) and takes the lock only to
read the task fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainreport._logging import describe_exception, get_logger
from trainreport._recorder import Recorder
from trainreport._sink import (
    CAPABILITY_SERIES_SUFFIX,
    Delivered,
    Opened,
    OpenResult,
    Resynchronise,
    RetryLater,
    SeriesUpdate,
    Sink,
    Update,
)
from trainreport._sync import SyncError, plan_recovery
from trainreport.exceptions import RunLogError
from trainreport.sinks._journal import Journal
from trainreport.sinks._runfile import load_run_file
from trainreport.sinks._runlog_replay import DamageKind, replay
from trainreport.sinks._runlog_state import LogState

__all__ = ["JournalKeeper", "journal_identity"]

_log = get_logger()
_MISSING = object()


def _recorded_nothing(path: Path) -> bool:
    """True for a run log that holds no task and no damage but a torn tail. Never raises."""
    try:
        replayed = replay(path.read_bytes())
    except OSError:
        return False
    damage = replayed.damage
    return not replayed.state.exists and (damage is None or damage.kind is DamageKind.TORN_TAIL)


def journal_identity(sink: Sink) -> tuple[str, str] | None:
    """The job and task a journal for ``sink`` is kept under, or ``None`` for no journal.

    A sink that is itself a local file (``FileSink``) needs none, and one
    without a ``job_id`` and ``task_id`` (``MemorySink``, ``KubeflowSink``)
    has nothing to key it by. Never raises.
    """
    from trainreport.sinks._file import FileSink  # noqa: PLC0415 - sinks import the engine

    if isinstance(sink, FileSink):
        return None
    job, task = getattr(sink, "job_id", None), getattr(sink, "task_id", None)
    if isinstance(job, str) and isinstance(task, str) and job and task:
        return job, task
    return None


class JournalKeeper:
    """Feeds one :class:`~trainreport.sinks._journal.Journal` from a :class:`Recorder`.

    Args:
        journal: the claimed journal.
        recorder: the attempt's state.
        interval_seconds: ``journal_interval_seconds``: :meth:`due` says yes
            this long after the last :meth:`record`.
        clock: monotonic clock (seconds).
        wall_clock: ``updated_at`` text for the records.
    """

    def __init__(
        self,
        journal: Journal,
        recorder: Recorder,
        *,
        interval_seconds: float,
        clock: Callable[[], float],
        wall_clock: Callable[[], str],
    ) -> None:
        self.journal = journal
        self.recorder = recorder
        self.interval_seconds = interval_seconds
        self.clock = clock
        self.wall_clock = wall_clock
        self.records = 0
        self._lengths: dict[str, int] = {}
        self._version: tuple[int, int, bool] | None = None
        self._last = -math.inf

    # --- recording --------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """True when ``interval_seconds`` have passed since the last :meth:`record`."""
        return now - self._last >= self.interval_seconds

    def next_due(self) -> float:
        """When the next record is due (the clock's time)."""
        return self._last + self.interval_seconds

    def record(self) -> None:
        """Append what the store holds past the journal's lengths, with one ``write()``.

        Never raises.
        """
        self._last = self.clock()
        journal = self.journal
        if journal.failed:
            return
        recorder = self.recorder
        store = recorder.store
        version = (store.points_discarded, store.rewinds, recorder.seeded)
        wall = self.wall_clock()
        with recorder.lock:
            status, details = recorder.task_fields(wall)
        if version != self._version:
            self._version = version
            self._rewrite(status, details)
            return
        lengths = self._lengths
        series = []
        for name, s in store.series.items():
            held = lengths.get(name, 0)
            n = len(s.steps)
            if n > held:
                series.append(
                    SeriesUpdate(name, held, s.steps[held:], s.epochs[held:], s.values[held:])
                )
                lengths[name] = n
        task = journal.state.task
        changed = {
            k: v
            for k, v in details.items()
            if k != "updated_at" and task.details.get(k, _MISSING) != v
        }
        if not series and not changed and status == task.status:
            return
        changed["updated_at"] = wall
        if journal.append(Update(status, changed, tuple(series) or None, False)):
            self.records += 1

    def _rewrite(self, status: str, details: dict[str, Any]) -> None:
        """The journal becomes one snapshot: every series from what the destination holds."""
        store = self.recorder.store
        series = tuple(
            SeriesUpdate(n, d, s.steps[d:], s.epochs[d:], s.values[d:])
            for n, s in store.series.items()
            for d in (s.delivered,)
        )
        state = LogState()
        state.reset(Update(status, details, series, False))
        if self.journal.reset(state, absolute=self.recorder.seeded):
            self.records += 1
        self._lengths = {n: len(s.steps) for n, s in store.series.items()}

    def acknowledged(self) -> None:
        """The destination acknowledged a send: trim what it is known to hold. Never raises."""
        if not self.recorder.seeded:
            return
        self.journal.trim({n: s.delivered for n, s in self.recorder.store.series.items()})

    # --- recovery ---------------------------------------------------------------------

    def recover(self, sink: Sink, opened: Opened, timeout_seconds: float | None) -> OpenResult:
        """Send what the journals of dead processes hold, before this process's first send.

        Args:
            sink: the destination, just opened.
            opened: its answer (the stored task).
            timeout_seconds: for each send and re-open.

        Returns:
            the :class:`Opened` to seed the store from (read again after a
            delivery), or the failed result of a send or re-open (the caller
            retries the open later; nothing is lost). A left-over journal that
            cannot be read, or that the destination rejects, is logged
            (``trainreport.journal_recovery_failed``) and left on disk for
            ``trainreport sync``. Never raises.
        """
        for path in list(self.journal.left_over):
            result = self._recover_one(sink, opened, path, timeout_seconds)
            if isinstance(result, Opened):
                opened = result
            elif result is not None:
                return result
        return opened

    def _recover_one(
        self, sink: Sink, opened: Opened, path: Path, timeout_seconds: float | None
    ) -> OpenResult | None:
        """One left-over: the re-opened task, ``None`` (nothing changed) or a failure to return."""
        journal = self.journal
        try:
            run = load_run_file(path)
        except RunLogError as exc:
            if _recorded_nothing(path):  # a process killed before its first record
                _log.info("trainreport.journal_left_over_empty", path=str(path))
                journal.delivered_left_over(path)
                return None
            self._give_up(path, str(exc))  # kept: a newer trainreport may read it
            return None
        except OSError as exc:
            self._give_up(path, f"cannot read it: {describe_exception(exc)}")
            return None
        full_state = CAPABILITY_SERIES_SUFFIX not in opened.capabilities
        for attempt in range(2):
            try:
                plan = plan_recovery(run.state, run.run, opened.stored_task, full_state=full_state)
            except SyncError as exc:
                self._give_up(path, str(exc))
                return None
            if plan.update is None:
                journal.delivered_left_over(path)
                return None
            result = sink.send(plan.update, timeout_seconds=timeout_seconds)
            if isinstance(result, Delivered):
                sent = sum(s.sent for s in plan.series)
                _log.info("trainreport.journal_recovered", path=str(path), points=sent)
                journal.delivered_left_over(path)
                return sink.open(timeout_seconds=timeout_seconds)
            if isinstance(result, RetryLater):
                return result
            if isinstance(result, Resynchronise) and not attempt:
                reopened = sink.open(timeout_seconds=timeout_seconds)
                if not isinstance(reopened, Opened):
                    return reopened
                opened = reopened
                continue
            self._give_up(path, getattr(result, "reason", type(result).__name__))
            return None
        return None  # pragma: no cover - the loop returns

    def _give_up(self, path: Path, reason: str) -> None:
        if path in self.journal.left_over:
            self.journal.left_over.remove(path)
        _log.warning(
            "trainreport.journal_recovery_failed",
            path=str(path),
            reason=reason[:300],
            kept_for="trainreport sync",
        )

    def close(self, *, delivered: bool) -> None:
        """Write what is left, then close; removed when ``delivered``. Never raises."""
        if not delivered:
            self.record()
        self.journal.close(delivered=delivered)
