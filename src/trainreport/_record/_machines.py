"""The task, phase, reporter and destination lifecycles: enums plus explicit transition tables.

This module is the spec (docs/design.md#lifecycle): every rule about which report may move a
task's status or phase lives in one of the tables below, and
``docs/lifecycle.md`` is generated from them by
``scripts/make_lifecycle_diagrams.py``. A ``(state, input)`` pair missing from a
table is refused. The module is pure: no threads, no clock, no I/O.

Four machines:

1. The task status (``TASK_TRANSITIONS``): ``pending -> running -> completed |
   failed | cancelled``, per attempt. ``ATTEMPT_START`` begins a new attempt at
   ``running`` from any status (a process that starts on a stored task ignores
   the stored status). Within an attempt a terminal status is final and the
   first terminal report wins; validation and other metrics after it are still
   recorded (a final evaluation) without changing the status.
2. The phase (``PHASE_TRANSITIONS``), consulted for every report the status
   table accepts: ``setup -> training``, with ``validation`` and
   ``checkpointing`` as excursions that return to ``training``, and ``done``
   once the status is terminal (the run is over, whatever it did last). A
   phase never goes backwards within an attempt; a missing phase pair keeps
   the phase and is logged, but the report itself is still recorded.
3. The reporter object (``REPORTER_TRANSITIONS``): ``new -> running -> closing
   -> closed``, or ``inert`` (disabled, another rank, a forked child).
4. One destination of a reporter (``DESTINATION_TRANSITIONS``): ``new ->
   seeding -> open``, through ``unreachable`` or ``refused`` while its opens
   fail, ``reopening`` after a resynchronise that needs a new open, and the
   ends ``superseded`` (a later attempt owns the task) and ``delivered`` (it
   held everything when ``close()`` ended). The engine applies it
   (``_engine/_destination.py``); an input missing from that table is an engine bug and
   always raises :class:`~trainreport.exceptions.TransitionError`.

Refused transitions are log events, never exceptions, unless a machine is built
with ``strict=True`` (for tests), in which case they raise
:class:`~trainreport.exceptions.TransitionError` and leave the machine unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from trainreport._logging import OnceLogger
from trainreport._wire._protocol import TERMINAL_STATUSES, TaskStatus
from trainreport._wire._protocol import StrEnum as _StrEnum
from trainreport.exceptions import TransitionError

__all__ = [
    "PHASE_TRANSITIONS",
    "REPORTER_TRANSITIONS",
    "DESTINATION_TRANSITIONS",
    "TASK_TRANSITIONS",
    "TERMINAL_STATUSES",
    "Outcome",
    "Phase",
    "ReporterInput",
    "ReporterMachine",
    "ReporterState",
    "TaskEvent",
    "TaskMachine",
    "DestinationInput",
    "DestinationState",
    "TaskStatus",
    "destination_next",
]


class Phase(_StrEnum):
    """What a task is doing: ``done`` once its status is terminal (docs/lifecycle.md)."""

    SETUP = "setup"
    TRAINING = "training"
    VALIDATION = "validation"
    CHECKPOINTING = "checkpointing"
    DONE = "done"
    """The attempt has ended (completed, failed or cancelled): no phase, no ETA."""


class TaskEvent(enum.Enum):
    """A report as the lifecycle sees it; each ``Reporter.report_*`` call maps to one.

    Reports that carry no lifecycle meaning (``report_hyperparameters``) have no
    event and are always recorded.
    """

    ATTEMPT_START = "attempt_start"
    """A process starts (or resumes) the task: a new attempt, whatever the stored status."""
    TRAINING_START = "training_start"
    """``report_training_start``."""
    TRAIN_STEP = "train_step"
    """``report_train_step``."""
    VALIDATION = "validation"
    """``report_validation``."""
    OTHER_METRICS = "other_metrics"
    """``report_metrics`` with any other phase (test, system streams); never moves the phase."""
    CHECKPOINT = "checkpoint"
    """``report_checkpoint_saved``."""
    EPOCH_END = "epoch_end"
    """``report_epoch_end``; never moves the phase."""
    COMPLETE = "complete"
    """``report_completed``."""
    FAIL = "fail"
    """``report_error``."""
    CANCEL = "cancel"
    """``report_cancelled``; the reason ("preempted", "interrupted", ...) is the caller's."""


class Outcome(enum.Enum):
    """What :meth:`TaskMachine.apply` decided about a report."""

    APPLIED = "applied"
    """Allowed: record the report's data. The status and phase may have changed."""
    REFUSED = "refused"
    """Not allowed: the caller must not record the report's data (the machine logged it)."""


_S = TaskStatus
_E = TaskEvent
_P = Phase

TASK_TRANSITIONS: Mapping[tuple[TaskStatus, TaskEvent], TaskStatus] = MappingProxyType(
    {
        # Before the attempt starts, only the start itself is accepted.
        (_S.PENDING, _E.ATTEMPT_START): _S.RUNNING,
        # Running: progress reports keep the status; the first terminal report ends it.
        (_S.RUNNING, _E.ATTEMPT_START): _S.RUNNING,
        (_S.RUNNING, _E.TRAINING_START): _S.RUNNING,
        (_S.RUNNING, _E.TRAIN_STEP): _S.RUNNING,
        (_S.RUNNING, _E.VALIDATION): _S.RUNNING,
        (_S.RUNNING, _E.OTHER_METRICS): _S.RUNNING,
        (_S.RUNNING, _E.CHECKPOINT): _S.RUNNING,
        (_S.RUNNING, _E.EPOCH_END): _S.RUNNING,
        (_S.RUNNING, _E.COMPLETE): _S.COMPLETED,
        (_S.RUNNING, _E.FAIL): _S.FAILED,
        (_S.RUNNING, _E.CANCEL): _S.CANCELLED,
        # Terminal: final within the attempt. A final evaluation is still recorded;
        # a new attempt (a new process on the stored task) starts over at running.
        (_S.COMPLETED, _E.ATTEMPT_START): _S.RUNNING,
        (_S.COMPLETED, _E.VALIDATION): _S.COMPLETED,
        (_S.COMPLETED, _E.OTHER_METRICS): _S.COMPLETED,
        (_S.FAILED, _E.ATTEMPT_START): _S.RUNNING,
        (_S.FAILED, _E.VALIDATION): _S.FAILED,
        (_S.FAILED, _E.OTHER_METRICS): _S.FAILED,
        (_S.CANCELLED, _E.ATTEMPT_START): _S.RUNNING,
        (_S.CANCELLED, _E.VALIDATION): _S.CANCELLED,
        (_S.CANCELLED, _E.OTHER_METRICS): _S.CANCELLED,
    }
)
"""``(status, report) -> next status`` (docs/design.md#lifecycle). A missing pair is refused."""

PHASE_TRANSITIONS: Mapping[tuple[Phase, TaskEvent], Phase] = MappingProxyType(
    {
        # A new attempt always begins in setup.
        (_P.SETUP, _E.ATTEMPT_START): _P.SETUP,
        (_P.TRAINING, _E.ATTEMPT_START): _P.SETUP,
        (_P.VALIDATION, _E.ATTEMPT_START): _P.SETUP,
        (_P.CHECKPOINTING, _E.ATTEMPT_START): _P.SETUP,
        # Setup: training starts on its announcement or its first step; a sanity-check
        # validation may come first; a checkpoint saved before training starts nothing.
        (_P.SETUP, _E.TRAINING_START): _P.TRAINING,
        (_P.SETUP, _E.TRAIN_STEP): _P.TRAINING,
        (_P.SETUP, _E.VALIDATION): _P.VALIDATION,
        (_P.SETUP, _E.CHECKPOINT): _P.SETUP,
        (_P.SETUP, _E.OTHER_METRICS): _P.SETUP,
        (_P.SETUP, _E.EPOCH_END): _P.SETUP,
        # Training: validation and checkpointing are excursions. A second
        # TRAINING_START is missing on purpose: training has already begun.
        (_P.TRAINING, _E.TRAIN_STEP): _P.TRAINING,
        (_P.TRAINING, _E.VALIDATION): _P.VALIDATION,
        (_P.TRAINING, _E.CHECKPOINT): _P.CHECKPOINTING,
        (_P.TRAINING, _E.OTHER_METRICS): _P.TRAINING,
        (_P.TRAINING, _E.EPOCH_END): _P.TRAINING,
        # Validation returns to training on the next step. TRAINING_START is accepted
        # here because validation may have come straight from setup (a sanity check).
        (_P.VALIDATION, _E.TRAINING_START): _P.TRAINING,
        (_P.VALIDATION, _E.TRAIN_STEP): _P.TRAINING,
        (_P.VALIDATION, _E.VALIDATION): _P.VALIDATION,
        (_P.VALIDATION, _E.CHECKPOINT): _P.CHECKPOINTING,
        (_P.VALIDATION, _E.OTHER_METRICS): _P.VALIDATION,
        (_P.VALIDATION, _E.EPOCH_END): _P.VALIDATION,
        # Checkpointing returns to training on the next step, or goes on to validation.
        (_P.CHECKPOINTING, _E.TRAIN_STEP): _P.TRAINING,
        (_P.CHECKPOINTING, _E.VALIDATION): _P.VALIDATION,
        (_P.CHECKPOINTING, _E.CHECKPOINT): _P.CHECKPOINTING,
        (_P.CHECKPOINTING, _E.OTHER_METRICS): _P.CHECKPOINTING,
        (_P.CHECKPOINTING, _E.EPOCH_END): _P.CHECKPOINTING,
        # A terminal status ends the phase: a finished run is not "checkpointing".
        (_P.SETUP, _E.COMPLETE): _P.DONE,
        (_P.SETUP, _E.FAIL): _P.DONE,
        (_P.SETUP, _E.CANCEL): _P.DONE,
        (_P.TRAINING, _E.COMPLETE): _P.DONE,
        (_P.TRAINING, _E.FAIL): _P.DONE,
        (_P.TRAINING, _E.CANCEL): _P.DONE,
        (_P.VALIDATION, _E.COMPLETE): _P.DONE,
        (_P.VALIDATION, _E.FAIL): _P.DONE,
        (_P.VALIDATION, _E.CANCEL): _P.DONE,
        (_P.CHECKPOINTING, _E.COMPLETE): _P.DONE,
        (_P.CHECKPOINTING, _E.FAIL): _P.DONE,
        (_P.CHECKPOINTING, _E.CANCEL): _P.DONE,
        # Done: a final evaluation is recorded and the run stays over; a new attempt
        # (a new process on the stored task) starts over in setup. Every other report
        # is refused by the status table before the phase is looked up.
        (_P.DONE, _E.ATTEMPT_START): _P.SETUP,
        (_P.DONE, _E.VALIDATION): _P.DONE,
        (_P.DONE, _E.OTHER_METRICS): _P.DONE,
    }
)
"""``(phase, report) -> next phase``, consulted for every report the status table accepts.

A missing pair (``TRAINING_START`` once training or checkpointing has been
reached) keeps the phase: a phase never goes backwards (docs/design.md#lifecycle). The
terminal reports lead to ``done`` from every phase of a running task.
"""


class ReporterState(_StrEnum):
    """The lifecycle of one ``Reporter`` object (docs/design.md#shape, #public-api, #guarantees)."""

    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"
    INERT = "inert"


class ReporterInput(enum.Enum):
    """What happens to a ``Reporter`` object."""

    START = "start"
    """``start()`` on the reporting process: the worker thread starts."""
    START_INERT = "start_inert"
    """``start()`` where nothing may be sent: disabled, another rank, a forked child."""
    CLOSE = "close"
    """``close()`` (or ``__exit__``, or the ``atexit`` fallback). Idempotent."""
    CLOSED = "closed"
    """The worker has drained, made its final send and stopped (or the deadline passed)."""
    FORKED = "forked"
    """The process was forked; applied in the child, which must never send.

    See docs/design.md#guarantees.
    """


_R = ReporterState
_I = ReporterInput

REPORTER_TRANSITIONS: Mapping[tuple[ReporterState, ReporterInput], ReporterState] = (
    MappingProxyType(
        {
            (_R.NEW, _I.START): _R.RUNNING,
            (_R.NEW, _I.START_INERT): _R.INERT,
            (_R.NEW, _I.CLOSE): _R.CLOSED,
            (_R.RUNNING, _I.CLOSE): _R.CLOSING,
            (_R.RUNNING, _I.FORKED): _R.INERT,
            (_R.CLOSING, _I.CLOSE): _R.CLOSING,
            (_R.CLOSING, _I.CLOSED): _R.CLOSED,
            (_R.CLOSING, _I.FORKED): _R.INERT,
            (_R.CLOSED, _I.CLOSE): _R.CLOSED,
            (_R.CLOSED, _I.FORKED): _R.CLOSED,
            (_R.INERT, _I.CLOSE): _R.INERT,
            (_R.INERT, _I.FORKED): _R.INERT,
        }
    )
)
"""``(reporter state, input) -> next state``. A missing pair is refused.

``CLOSE`` is idempotent (self-loops on ``closing``, ``closed`` and ``inert``);
``START`` is accepted only on ``new`` (a reporter is never restarted); a fork
leaves a closed or inert reporter as it is.
"""


class DestinationState(_StrEnum):
    """Where one destination of a reporter is in its life (docs/lifecycle.md#destination)."""

    NEW = "new"
    """No open of it has ended yet (the first one is due, or in flight)."""
    UNREACHABLE = "unreachable"
    """Its opens ended without an answer (refused or unresolvable connection); never opened."""
    REFUSED = "refused"
    """An open of it was answered without opening it (or raised); never opened."""
    SEEDING = "seeding"
    """Opened; its stored task is kept until the store is seeded (nothing is sent yet)."""
    OPEN = "open"
    """Opened, and in step with the store: updates are sent to it."""
    REOPENING = "reopening"
    """It was open; a resynchronise without lengths needs a new open before the next send."""
    SUPERSEDED = "superseded"
    """A later attempt (or writer) owns the task there: nothing more is sent to it."""
    DELIVERED = "delivered"
    """``close()`` ended with it open and holding everything recorded."""


class DestinationInput(enum.Enum):
    """What happens to one destination (the answers of its sink, and the engine's steps)."""

    OPEN_UNREACHABLE = "open_unreachable"
    """An open ended with ``RetryLater(unreachable=True)``: nothing answered."""
    OPEN_FAILED = "open_failed"
    """An open was answered without opening (``RetryLater``, ``Rejected``), or it raised."""
    OPENED = "opened"
    """An open returned ``Opened``."""
    SEEDED = "seeded"
    """The store was seeded from it, or it was brought up to date from its own lengths."""
    NEEDS_OPEN = "needs_open"
    """A send was answered ``Resynchronise`` without lengths: the task is read again."""
    SUPERSEDED = "superseded"
    """An answer said a later attempt owns the task (``Rejected`` with status 409)."""
    ERROR = "error"
    """The sink or the engine raised outside an open: counted, backed off, state kept."""
    CLOSED_HOLDING_ALL = "closed_holding_all"
    """``close()`` ended with it open and holding everything recorded."""


_D = DestinationState
_DI = DestinationInput

DESTINATION_TRANSITIONS: Mapping[tuple[DestinationState, DestinationInput], DestinationState] = (
    MappingProxyType(
        {
            # Before it ever opened: an answer without an open is remembered (a
            # destination that never answered gets close()'s short deadline).
            (_D.NEW, _DI.OPEN_UNREACHABLE): _D.UNREACHABLE,
            (_D.NEW, _DI.OPEN_FAILED): _D.REFUSED,
            (_D.NEW, _DI.ERROR): _D.REFUSED,
            (_D.NEW, _DI.OPENED): _D.SEEDING,
            (_D.NEW, _DI.SUPERSEDED): _D.SUPERSEDED,
            (_D.UNREACHABLE, _DI.OPEN_UNREACHABLE): _D.UNREACHABLE,
            (_D.UNREACHABLE, _DI.OPEN_FAILED): _D.REFUSED,
            (_D.UNREACHABLE, _DI.ERROR): _D.REFUSED,
            (_D.UNREACHABLE, _DI.OPENED): _D.SEEDING,
            (_D.UNREACHABLE, _DI.SUPERSEDED): _D.SUPERSEDED,
            (_D.REFUSED, _DI.OPEN_UNREACHABLE): _D.REFUSED,
            (_D.REFUSED, _DI.OPEN_FAILED): _D.REFUSED,
            (_D.REFUSED, _DI.ERROR): _D.REFUSED,
            (_D.REFUSED, _DI.OPENED): _D.SEEDING,
            (_D.REFUSED, _DI.SUPERSEDED): _D.SUPERSEDED,
            # Opened: nothing is sent until the store is seeded (from it or another).
            (_D.SEEDING, _DI.SEEDED): _D.OPEN,
            (_D.SEEDING, _DI.ERROR): _D.SEEDING,
            # Open: sends; a resynchronise may need the task read again.
            (_D.OPEN, _DI.ERROR): _D.OPEN,
            (_D.OPEN, _DI.NEEDS_OPEN): _D.REOPENING,
            (_D.OPEN, _DI.SUPERSEDED): _D.SUPERSEDED,
            (_D.OPEN, _DI.CLOSED_HOLDING_ALL): _D.DELIVERED,
            (_D.REOPENING, _DI.OPEN_UNREACHABLE): _D.REOPENING,
            (_D.REOPENING, _DI.OPEN_FAILED): _D.REOPENING,
            (_D.REOPENING, _DI.ERROR): _D.REOPENING,
            (_D.REOPENING, _DI.OPENED): _D.OPEN,
            (_D.REOPENING, _DI.SUPERSEDED): _D.SUPERSEDED,
            # Superseded takes nothing more; a cycle's error still counts against it.
            (_D.SUPERSEDED, _DI.ERROR): _D.SUPERSEDED,
        }
    )
)
"""``(destination state, input) -> next state``. A missing pair is an engine bug.

Requests run one at a time per destination, so an open's answer never meets an
open destination, and nothing follows ``delivered`` (the reporter thread has
ended). :func:`destination_next` raises for a missing pair.
"""


def destination_next(state: DestinationState, event: DestinationInput) -> DestinationState:
    """The state ``DESTINATION_TRANSITIONS`` gives for ``(state, event)``.

    Raises:
        TransitionError: the pair is missing (the engine applied an input the
            destination cannot be given in that state: a bug, never a sink's fault).
    """
    try:
        return DESTINATION_TRANSITIONS[(state, event)]
    except KeyError:
        raise TransitionError(
            f"destination input {event.value!r} refused in state {state.value!r}"
        ) from None


@attrs.define(eq=False)
class TaskMachine:
    """The per-attempt task machine (docs/design.md#lifecycle). Starts at ``PENDING`` / ``SETUP``.

    A machine belongs to one thread (the reporter thread); it is not thread-safe.
    It pickles (it holds no lock or logger of its own).

    Args:
        strict: raise :class:`~trainreport.exceptions.TransitionError` on a refused
            transition instead of logging it (for tests).
        status: the starting status. Normally left at ``PENDING``; whatever it is,
            ``ATTEMPT_START`` moves it to ``RUNNING``.
        phase: the starting phase. Normally left at ``SETUP``.
    """

    strict: bool = False
    status: TaskStatus = TaskStatus.PENDING
    phase: Phase = Phase.SETUP
    _once: OnceLogger = attrs.field(factory=OnceLogger, init=False, repr=False)

    @property
    def is_terminal(self) -> bool:
        """Whether the attempt has ended (completed, failed or cancelled). Never raises."""
        return self.status in TERMINAL_STATUSES

    def apply(self, event: TaskEvent) -> Outcome:
        """Apply one report to the machine, following the tables (docs/design.md#lifecycle).

        1. ``TASK_TRANSITIONS[(status, event)]`` missing: the report is refused,
           nothing changes, and ``trainreport.transition_refused`` is logged at
           WARNING with ``status=``, ``phase=`` and ``report=`` (the values, e.g.
           ``"completed"``, ``"training"``, ``"train_step"``), once per
           ``(status, event)`` pair for the life of the machine, so a loop that
           keeps stepping after completion logs one line, not one per step.
        2. Otherwise the status moves, and ``PHASE_TRANSITIONS[(phase, event)]``
           gives the new phase (``done`` when the status became terminal); when
           that pair is missing the phase is kept (a phase never goes
           backwards), ``trainreport.phase_transition_refused`` is logged at
           INFO once per ``(phase, event)`` pair, and the report is still
           applied (its data, e.g. ``max_steps``, is recorded).

        Args:
            event: the report.

        Returns:
            ``Outcome.APPLIED`` when the report's data should be recorded,
            ``Outcome.REFUSED`` when it must be dropped.

        Raises:
            TransitionError: only when ``strict`` is set, for either kind of
                refusal; the machine is then left unchanged and nothing is logged.
                Never raises otherwise.
        """
        new_status = TASK_TRANSITIONS.get((self.status, event))
        if new_status is None:
            self._refuse(
                ("status", self.status, event),
                "trainreport.transition_refused",
                f"report {event.value!r} refused in status {self.status.value!r}",
                event,
            )
            return Outcome.REFUSED
        new_phase = PHASE_TRANSITIONS.get((self.phase, event))
        if new_phase is None:
            self._refuse(
                ("phase", self.phase, event),
                "trainreport.phase_transition_refused",
                f"report {event.value!r} cannot move phase {self.phase.value!r}"
                " (a phase never goes backwards)",
                event,
            )
            new_phase = self.phase
        self.phase = new_phase
        self.status = new_status
        return Outcome.APPLIED

    def _refuse(
        self, key: tuple[str, enum.Enum, TaskEvent], name: str, message: str, event: TaskEvent
    ) -> None:
        if self.strict:
            raise TransitionError(message)
        fields = {"status": self.status.value, "phase": self.phase.value, "report": event.value}
        if key[0] == "status":
            self._once.warning(key, name, **fields)
        else:
            self._once.info(key, name, **fields)


@attrs.define(eq=False)
class ReporterMachine:
    """The lifecycle of one ``Reporter`` object, following ``REPORTER_TRANSITIONS``.

    Not thread-safe: the ``Reporter`` serialises calls (``start()``, ``close()``
    and the fork hook may come from different threads).

    Args:
        strict: raise :class:`~trainreport.exceptions.TransitionError` on a refused
            input instead of logging it (for tests).
        state: the starting state; normally ``NEW``.
    """

    strict: bool = False
    state: ReporterState = ReporterState.NEW
    _once: OnceLogger = attrs.field(factory=OnceLogger, init=False, repr=False)

    def apply(self, event: ReporterInput) -> bool:
        """Apply one input to the machine.

        A refused input leaves the state unchanged and logs
        ``trainreport.reporter_transition_refused`` at WARNING with ``state=`` and
        ``input=`` (values), once per ``(state, input)`` pair.

        Args:
            event: the input.

        Returns:
            ``True`` when the input was accepted (self-loops included, e.g. a
            second ``close()``), ``False`` when it was refused.

        Raises:
            TransitionError: only when ``strict`` is set, for a refused input.
                Never raises otherwise.
        """
        new_state = REPORTER_TRANSITIONS.get((self.state, event))
        if new_state is None:
            if self.strict:
                raise TransitionError(
                    f"reporter input {event.value!r} refused in state {self.state.value!r}"
                )
            self._once.warning(
                (self.state, event),
                "trainreport.reporter_transition_refused",
                state=self.state.value,
                input=event.value,
            )
            return False
        self.state = new_state
        return True
