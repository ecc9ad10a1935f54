"""The attempt's start on the reporter thread: the journal, and which stored task seeds the store.

A resumed run continues the curves a destination already holds
(docs/design.md#metrics). With several destinations the store is seeded from
the first one, in list order, that holds the task (:func:`seed_source`); every
other destination is brought up to date from its own lengths
(:func:`adopt`). A destination whose first open is still in flight holds the
decision back one debounce interval at most after the first successful open,
so a hanging one never stalls the others; once ``close()`` began, until a
bound the engine core computes from the close's deadline, so that every
destination is still sent everything in time (``docs/engine.md``).

The journal (``docs/engine.md``, "The journal in front of a service") is
claimed when the attempt begins; what dead processes left in it is delivered
right after the journal destination's first open, before the stored task
seeds anything, by requests the engine core hands out like any other
(``_engine/_core.py``, ``JournalKeeper.advance``). Reports wait in the queue for
the stored task no longer than the journal allows (:meth:`Resume.reports_wait`).
"""

from __future__ import annotations

from collections.abc import Callable

from trainreport._engine._destination import Destination, adopt, seed_source
from trainreport._engine._journal_feed import JournalKeeper
from trainreport._logging import describe_exception, get_logger
from trainreport._record._machines import DestinationInput
from trainreport._record._recorder import Recorder
from trainreport._wire._payloads import StoredState

__all__ = ["Resume"]

_log = get_logger()


class Resume:
    """The journal and the seed decision of one attempt.

    Args:
        open_journal: called once with the recorder when the attempt begins;
            returns the journal keeper or ``None`` (no journal).
        interval: how long (scheduling-clock seconds) the first successful
            open waits for the others' before the store is seeded (the debounce
            interval).
    """

    def __init__(
        self,
        open_journal: Callable[[Recorder], JournalKeeper | None] | None,
        *,
        interval: float,
    ) -> None:
        self._open_journal = open_journal
        self._interval = interval
        self.journal: JournalKeeper | None = None
        #: When (scheduling clock) the first destination opened.
        self._first_opened_at: float | None = None
        #: When (scheduling clock) the attempt began: its first opens were due.
        self._began_at = 0.0

    def open_journal(self, recorder: Recorder, wall_clock: Callable[[], str], now: float) -> None:
        """Claim the journal as the attempt begins at ``now`` (scheduling clock, seconds).

        A failure means no journal (logged), never a dead thread.
        """
        self._began_at = now
        if self._open_journal is None:
            return
        try:
            self.journal = self._open_journal(recorder)
        except Exception as exc:
            _log.warning("trainreport.journal_unavailable", reason=describe_exception(exc, 300))
            return
        if self.journal is not None:
            # The sends' stamps: a journal's updated_at orders with theirs (recovery
            # sends the journal's task fields only when they are not older).
            self.journal.wall_clock = wall_clock

    def reports_wait(self, now: float, *, open_failed: bool, closing: bool = False) -> bool:
        """Whether reports wait in the queue for the stored task (the store is not seeded yet).

        They wait so that seeding is exact (epochs, dataset names:
        docs/design.md#metrics). With a journal, not once an open has failed
        (``open_failed``), nor once the first opens are ``journal_interval_seconds``
        late at ``now`` (scheduling clock), nor once ``close()`` began
        (``closing``: the process may be killed any moment): a destination
        that hangs must not keep them out of the journal (``docs/engine.md``,
        "Recording, trimming, removal"). Seeding merges the stored task under
        what was applied (``Recorder.seed``). Never raises.
        """
        journal = self.journal
        if journal is None:
            return True
        late = now - self._began_at >= journal.interval_seconds
        return not (open_failed or closing or late)

    def seed_due(self) -> float | None:
        """When (scheduling clock) the store is seeded without waiting for another first open.

        One debounce interval after the first successful open; ``None``
        before one succeeded (call it only while the store is not seeded).
        """
        first = self._first_opened_at
        return None if first is None else first + self._interval

    def seed_if_decided(
        self,
        destinations: list[Destination],
        recorder: Recorder,
        now: float,
        *,
        closing_late: bool | None,
        patient: bool,
    ) -> None:
        """Seed the store once :func:`seed_source` can decide, then adopt every other destination.

        Args:
            destinations: the reporter's destinations, in order.
            recorder: the attempt's state (not seeded yet).
            now: the scheduling clock's time (seconds).
            closing_late: ``None`` while running (first opens in flight are
                waited for one debounce interval after the first successful
                open); once ``close()`` began, whether the bound the engine
                core computes from the close's deadline has passed
                (``EngineCore.seed_if_decided``): they are waited for until then.
            patient: wait for every first open (right after one ended).
        """
        if self._first_opened_at is None and any(d.is_open for d in destinations):
            self._first_opened_at = now
        if closing_late is None:
            late = self._first_opened_at is not None and (
                now - self._first_opened_at >= self._interval
            )
        else:
            late = closing_late
        source = seed_source(
            destinations, stop_waiting=not patient and late, running=closing_late is None
        )
        if source is False:
            return
        state = StoredState(series={})
        if isinstance(source, Destination) and source.stored is not None:
            state = source.stored
        recorder.seed(state, source.index if isinstance(source, Destination) else 0)
        if state.series:
            _log.info(
                "trainreport.resumed",
                series=len(state.series),
                points=sum(len(s[0]) for s in state.series.values()),
                destination=source.label if isinstance(source, Destination) else None,
            )
        for dest in destinations:
            if dest is source:
                dest.apply(DestinationInput.SEEDED)
                dest.stored = None
            elif dest.waits_for_seed:
                adopt(dest, recorder)  # nothing stored anywhere: from nothing
