"""Tests for trainreport._record._machines: the task, phase, reporter and destination tables.

See docs/design.md#lifecycle.
"""

# House style writes asserts as `expected == actual`; ruff's SIM300 says otherwise.

from __future__ import annotations

import importlib.util
import itertools
import json
import pickle
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainreport._record._machines import (
    DESTINATION_TRANSITIONS,
    PHASE_TRANSITIONS,
    REPORTER_TRANSITIONS,
    TASK_TRANSITIONS,
    TERMINAL_STATUSES,
    DestinationInput,
    DestinationState,
    Outcome,
    Phase,
    ReporterInput,
    ReporterMachine,
    ReporterState,
    TaskEvent,
    TaskMachine,
    TaskStatus,
    destination_next,
)
from trainreport.exceptions import TransitionError
from trainreport.testing import capture_events

S, E, P = TaskStatus, TaskEvent, Phase
R, In = ReporterState, ReporterInput

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make_lifecycle_diagrams.py"
DOC = ROOT / "docs" / "lifecycle.md"

TERMINAL_EVENTS = (E.COMPLETE, E.FAIL, E.CANCEL)
PROGRESS_EVENTS = (
    E.TRAINING_START,
    E.TRAIN_STEP,
    E.VALIDATION,
    E.OTHER_METRICS,
    E.CHECKPOINT,
    E.EPOCH_END,
)

# Written out independently of the module: the tests pin the contract, not the code.
EXPECTED_TASK: dict[tuple[TaskStatus, TaskEvent], TaskStatus] = {
    (S.PENDING, E.ATTEMPT_START): S.RUNNING,
    **{(S.RUNNING, e): S.RUNNING for e in (E.ATTEMPT_START, *PROGRESS_EVENTS)},
    (S.RUNNING, E.COMPLETE): S.COMPLETED,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.RUNNING, E.CANCEL): S.CANCELLED,
    **{(t, E.ATTEMPT_START): S.RUNNING for t in (S.COMPLETED, S.FAILED, S.CANCELLED)},
    **{(t, E.VALIDATION): t for t in (S.COMPLETED, S.FAILED, S.CANCELLED)},
    **{(t, E.OTHER_METRICS): t for t in (S.COMPLETED, S.FAILED, S.CANCELLED)},
}

RUNNING_PHASES = (P.SETUP, P.TRAINING, P.VALIDATION, P.CHECKPOINTING)

EXPECTED_PHASE: dict[tuple[Phase, TaskEvent], Phase] = {
    **{(p, E.ATTEMPT_START): P.SETUP for p in Phase},
    **{(p, E.TRAIN_STEP): P.TRAINING for p in RUNNING_PHASES},
    **{(p, E.VALIDATION): P.VALIDATION for p in RUNNING_PHASES},
    **{(p, E.OTHER_METRICS): p for p in RUNNING_PHASES},
    **{(p, E.EPOCH_END): p for p in RUNNING_PHASES},
    (P.SETUP, E.TRAINING_START): P.TRAINING,
    (P.VALIDATION, E.TRAINING_START): P.TRAINING,
    (P.SETUP, E.CHECKPOINT): P.SETUP,
    (P.TRAINING, E.CHECKPOINT): P.CHECKPOINTING,
    (P.VALIDATION, E.CHECKPOINT): P.CHECKPOINTING,
    (P.CHECKPOINTING, E.CHECKPOINT): P.CHECKPOINTING,
    # A terminal status ends the phase: the run is over, whatever it was doing last.
    **{(p, e): P.DONE for p in RUNNING_PHASES for e in TERMINAL_EVENTS},
    # A final evaluation after the end is recorded and leaves the run done.
    (P.DONE, E.VALIDATION): P.DONE,
    (P.DONE, E.OTHER_METRICS): P.DONE,
}

EXPECTED_REPORTER: dict[tuple[ReporterState, ReporterInput], ReporterState] = {
    (R.NEW, In.START): R.RUNNING,
    (R.NEW, In.START_INERT): R.INERT,
    (R.NEW, In.CLOSE): R.CLOSED,
    (R.RUNNING, In.CLOSE): R.CLOSING,
    (R.RUNNING, In.FORKED): R.INERT,
    (R.CLOSING, In.CLOSE): R.CLOSING,
    (R.CLOSING, In.CLOSED): R.CLOSED,
    (R.CLOSING, In.FORKED): R.INERT,
    (R.CLOSED, In.CLOSE): R.CLOSED,
    (R.CLOSED, In.FORKED): R.CLOSED,
    (R.INERT, In.CLOSE): R.INERT,
    (R.INERT, In.FORKED): R.INERT,
}

ALL_TASK_PAIRS = list(itertools.product(TaskStatus, TaskEvent))
ALL_PHASE_PAIRS = list(itertools.product(Phase, TaskEvent))
ALL_REPORTER_PAIRS = list(itertools.product(ReporterState, ReporterInput))


def _ids(pair: tuple[Any, Any]) -> str:
    return f"{pair[0].value}-{pair[1].value}"


def _refusals(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


def _running(phase: Phase = Phase.SETUP, *, strict: bool = False) -> TaskMachine:
    machine = TaskMachine(strict=strict)
    assert Outcome.APPLIED == machine.apply(E.ATTEMPT_START)
    machine.phase = phase
    return machine


# --- the task status table ------------------------------------------------------------


@pytest.mark.parametrize("pair", ALL_TASK_PAIRS, ids=_ids)
def test_task_table_pins_every_status_event_pair(pair: tuple[TaskStatus, TaskEvent]) -> None:
    """Every (status, event) pair maps to its result; a missing pair stays missing.

    The table of docs/design.md#lifecycle.
    """
    assert EXPECTED_TASK.get(pair) == TASK_TRANSITIONS.get(pair)


def test_task_table_has_exactly_the_expected_pairs() -> None:
    """The table holds the 20 allowed pairs and nothing else (30 pairs are refused)."""
    assert set(EXPECTED_TASK) == set(TASK_TRANSITIONS)
    assert 30 == len(ALL_TASK_PAIRS) - len(TASK_TRANSITIONS)


@pytest.mark.parametrize("pair", ALL_TASK_PAIRS, ids=_ids)
def test_apply_follows_the_status_table_for_every_pair(
    pair: tuple[TaskStatus, TaskEvent],
) -> None:
    """apply() moves the status as the table says, and refuses exactly the missing pairs."""
    status, event = pair
    machine = TaskMachine(status=status, phase=Phase.VALIDATION)

    outcome = machine.apply(event)

    if pair in EXPECTED_TASK:
        assert (Outcome.APPLIED, EXPECTED_TASK[pair]) == (outcome, machine.status)
    else:
        assert (Outcome.REFUSED, status, Phase.VALIDATION) == (
            outcome,
            machine.status,
            machine.phase,
        )


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        (S.PENDING, False),
        (S.RUNNING, False),
        (S.COMPLETED, True),
        (S.FAILED, True),
        (S.CANCELLED, True),
    ],
)
def test_is_terminal_is_true_only_for_completed_failed_cancelled(
    status: TaskStatus, terminal: bool
) -> None:
    """is_terminal names the statuses that end an attempt."""
    assert terminal == TaskMachine(status=status).is_terminal


def test_status_and_phase_values_are_the_wire_strings() -> None:
    """The enums are str subclasses whose str() and format() are the stored strings."""
    assert ["pending", "running", "completed", "failed", "cancelled"] == [str(s) for s in S]
    assert ["setup", "training", "validation", "checkpointing", "done"] == [f"{p}" for p in P]
    assert '["completed", "training"]' == json.dumps([S.COMPLETED, P.TRAINING])
    assert TaskStatus.FAILED is TaskStatus("failed")


# --- the phase table ------------------------------------------------------------------


@pytest.mark.parametrize("pair", ALL_PHASE_PAIRS, ids=_ids)
def test_phase_table_pins_every_phase_event_pair(pair: tuple[Phase, TaskEvent]) -> None:
    """Every (phase, event) pair maps to its result; a missing pair stays missing.

    The table of docs/design.md#lifecycle.
    """
    assert EXPECTED_PHASE.get(pair) == PHASE_TRANSITIONS.get(pair)


def test_terminal_events_lead_only_to_done() -> None:
    """complete/fail/cancel end the phase from every running phase, and lead nowhere else."""
    terminal_targets = {t for (_, e), t in PHASE_TRANSITIONS.items() if e in TERMINAL_EVENTS}
    sources = {p for (p, e) in PHASE_TRANSITIONS if e in TERMINAL_EVENTS}

    assert ({P.DONE}, set(RUNNING_PHASES)) == (terminal_targets, sources)


@pytest.mark.parametrize(
    "pair",
    [(p, e) for p, e in ALL_PHASE_PAIRS if p in RUNNING_PHASES and e not in TERMINAL_EVENTS],
    ids=_ids,
)
def test_apply_follows_the_phase_table_while_running(pair: tuple[Phase, TaskEvent]) -> None:
    """While running, the phase moves as the table says; a missing pair keeps the phase."""
    phase, event = pair
    machine = _running(phase)

    outcome = machine.apply(event)

    assert (Outcome.APPLIED, S.RUNNING, EXPECTED_PHASE.get(pair, phase)) == (
        outcome,
        machine.status,
        machine.phase,
    )


@pytest.mark.parametrize("event", TERMINAL_EVENTS, ids=lambda e: e.value)
@pytest.mark.parametrize("phase", RUNNING_PHASES, ids=lambda p: p.value)
def test_terminal_report_ends_the_phase(phase: Phase, event: TaskEvent) -> None:
    """Ending the attempt moves the phase to done, not the last excursion (checkpointing)."""
    machine = _running(phase)

    machine.apply(event)

    assert Phase.DONE == machine.phase


# --- docs/design.md#lifecycle scenarios -----------------------------------------------------------


def test_fit_then_test_reporting_completion_twice_yields_one_terminal_state() -> None:
    """fit() completes, test() records its metrics and completes again: one completion."""
    machine = _running()
    machine.apply(E.TRAIN_STEP)

    outcomes = [
        machine.apply(E.COMPLETE),
        machine.apply(E.OTHER_METRICS),
        machine.apply(E.COMPLETE),
    ]

    assert [Outcome.APPLIED, Outcome.APPLIED, Outcome.REFUSED] == outcomes
    assert S.COMPLETED == machine.status


@pytest.mark.parametrize("later", TERMINAL_EVENTS, ids=lambda e: e.value)
def test_failure_reported_first_stays_a_failure(later: TaskEvent) -> None:
    """The first terminal report wins: nothing after a failure changes the status."""
    machine = _running()
    machine.apply(E.FAIL)

    outcome = machine.apply(later)

    assert (Outcome.REFUSED, S.FAILED) == (outcome, machine.status)


@pytest.mark.parametrize("terminal", TERMINAL_EVENTS, ids=lambda e: e.value)
@pytest.mark.parametrize("event", [E.VALIDATION, E.OTHER_METRICS], ids=lambda e: e.value)
def test_validation_after_completion_is_recorded_without_reopening(
    terminal: TaskEvent, event: TaskEvent
) -> None:
    """A final evaluation after a terminal status is applied; status and phase stay over."""
    machine = _running(Phase.TRAINING)
    machine.apply(terminal)
    status = machine.status

    outcome = machine.apply(event)

    assert (Outcome.APPLIED, status, Phase.DONE) == (outcome, machine.status, machine.phase)


@pytest.mark.parametrize(
    "event",
    [E.TRAIN_STEP, E.TRAINING_START, E.CHECKPOINT, E.EPOCH_END],
    ids=lambda e: e.value,
)
def test_train_step_after_completion_is_refused(event: TaskEvent) -> None:
    """Training progress after the attempt ended is refused: its data must not be recorded."""
    machine = _running(Phase.TRAINING)
    machine.apply(E.COMPLETE)

    outcome = machine.apply(event)

    assert (Outcome.REFUSED, S.COMPLETED, Phase.DONE) == (
        outcome,
        machine.status,
        machine.phase,
    )


def test_setup_never_comes_back_after_training() -> None:
    """Once training has begun, no report but a new attempt returns the phase to setup."""
    for event in PROGRESS_EVENTS:
        for start in (Phase.TRAINING, Phase.VALIDATION, Phase.CHECKPOINTING):
            machine = _running(start)
            machine.apply(event)
            assert Phase.SETUP != machine.phase, (start, event)


def test_training_start_after_training_keeps_the_phase_but_records_the_report() -> None:
    """A second training start is refused for the phase only: the report is still applied."""
    machine = _running()
    machine.apply(E.TRAINING_START)
    machine.apply(E.CHECKPOINT)

    outcome = machine.apply(E.TRAINING_START)

    assert (Outcome.APPLIED, S.RUNNING, Phase.CHECKPOINTING) == (
        outcome,
        machine.status,
        machine.phase,
    )


def test_sanity_check_validation_before_training_then_training_starts() -> None:
    """Validation straight from setup is allowed, and training_start then begins training."""
    machine = _running()
    phases = []
    for event in (E.VALIDATION, E.TRAINING_START):
        machine.apply(event)
        phases.append(machine.phase)

    assert [Phase.VALIDATION, Phase.TRAINING] == phases


def test_validation_and_checkpoint_excursions_return_to_training() -> None:
    """validation and checkpointing are excursions that the next train step ends."""
    machine = _running()
    phases = []
    for event in (E.TRAIN_STEP, E.VALIDATION, E.CHECKPOINT, E.TRAIN_STEP, E.CHECKPOINT):
        machine.apply(event)
        phases.append(machine.phase)
    machine.apply(E.TRAIN_STEP)
    phases.append(machine.phase)

    assert [
        Phase.TRAINING,
        Phase.VALIDATION,
        Phase.CHECKPOINTING,
        Phase.TRAINING,
        Phase.CHECKPOINTING,
        Phase.TRAINING,
    ] == phases


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.value)
@pytest.mark.parametrize("stored", list(TaskStatus), ids=lambda s: s.value)
def test_new_attempt_from_any_stored_status_begins_at_running(
    stored: TaskStatus, phase: Phase
) -> None:
    """A process starting on a stored task begins a new attempt at running / setup."""
    machine = TaskMachine(status=stored, phase=phase)

    outcome = machine.apply(E.ATTEMPT_START)

    assert (Outcome.APPLIED, S.RUNNING, Phase.SETUP) == (outcome, machine.status, machine.phase)


@pytest.mark.parametrize(
    "event", [e for e in TaskEvent if e is not E.ATTEMPT_START], ids=lambda e: e.value
)
def test_reports_before_attempt_start_are_refused(event: TaskEvent) -> None:
    """A fresh machine is pending / setup and refuses every report but the attempt start."""
    machine = TaskMachine()

    outcome = machine.apply(event)

    assert (Outcome.REFUSED, S.PENDING, Phase.SETUP) == (outcome, machine.status, machine.phase)


# --- logging and strict mode ----------------------------------------------------------


def test_refused_transition_is_logged_once_per_pair_not_per_step() -> None:
    """A loop that keeps stepping after completion logs one refusal, not 10,000."""
    machine = _running(Phase.TRAINING)
    machine.apply(E.COMPLETE)

    with capture_events() as events:
        outcomes = {machine.apply(E.TRAIN_STEP) for _ in range(10_000)}

    assert {Outcome.REFUSED} == outcomes
    assert [
        {
            "event": "trainreport.transition_refused",
            "log_level": "warning",
            "status": "completed",
            "phase": "done",
            "report": "train_step",
        }
    ] == events


def test_distinct_refused_pairs_are_logged_separately() -> None:
    """Each (status, event) pair gets its own single log event."""
    machine = _running()
    machine.apply(E.FAIL)

    with capture_events() as events:
        for event in (E.COMPLETE, E.TRAIN_STEP, E.COMPLETE, E.TRAIN_STEP, E.CANCEL):
            machine.apply(event)

    assert ["complete", "train_step", "cancel"] == [
        e["report"] for e in _refusals(events, "trainreport.transition_refused")
    ]


def test_phase_refusal_is_logged_once_at_info() -> None:
    """A refused phase move logs trainreport.phase_transition_refused once, at INFO."""
    machine = _running(Phase.TRAINING)

    with capture_events() as events:
        for _ in range(3):
            machine.apply(E.TRAINING_START)

    assert [
        {
            "event": "trainreport.phase_transition_refused",
            "log_level": "info",
            "status": "running",
            "phase": "training",
            "report": "training_start",
        }
    ] == events


def test_applied_transitions_log_nothing() -> None:
    """A normal run, final evaluation included, logs no lifecycle events."""
    machine = TaskMachine()
    run = [E.ATTEMPT_START, E.TRAINING_START, E.TRAIN_STEP, E.VALIDATION, E.CHECKPOINT]
    run += [E.EPOCH_END, E.TRAIN_STEP, E.COMPLETE, E.VALIDATION, E.OTHER_METRICS]

    with capture_events() as events:
        outcomes = {machine.apply(event) for event in run}

    assert ({Outcome.APPLIED}, []) == (outcomes, events)


def test_strict_mode_raises_transition_error_and_leaves_the_machine_unchanged() -> None:
    """In strict mode a refused status transition raises instead of logging."""
    machine = _running(Phase.TRAINING, strict=True)
    machine.apply(E.COMPLETE)

    with capture_events() as events, pytest.raises(TransitionError, match="train_step"):
        machine.apply(E.TRAIN_STEP)

    assert (S.COMPLETED, Phase.DONE, []) == (machine.status, machine.phase, events)


def test_strict_mode_raises_for_a_refused_phase() -> None:
    """In strict mode a phase that would go backwards raises too."""
    machine = _running(Phase.TRAINING, strict=True)

    with pytest.raises(TransitionError, match="training_start"):
        machine.apply(E.TRAINING_START)

    assert (S.RUNNING, Phase.TRAINING) == (machine.status, machine.phase)


def test_strict_mode_lets_allowed_transitions_through() -> None:
    """Strict mode changes nothing for allowed reports, final evaluation included."""
    machine = TaskMachine(strict=True)

    for event in (E.ATTEMPT_START, E.TRAIN_STEP, E.COMPLETE, E.VALIDATION):
        assert Outcome.APPLIED == machine.apply(event)


def test_task_machine_pickles_with_its_state_and_log_memory() -> None:
    """A machine survives pickling (an unstarted Reporter pickles) with its refusal memory."""
    machine = _running()
    machine.apply(E.COMPLETE)
    machine.apply(E.TRAIN_STEP)

    clone = pickle.loads(pickle.dumps(machine))
    with capture_events() as events:
        clone.apply(E.TRAIN_STEP)

    assert (S.COMPLETED, []) == (clone.status, events)


# --- property: the invariants hold for any sequence of reports ------------------------


@given(st.lists(st.sampled_from(list(TaskEvent)), max_size=60))
def test_any_report_sequence_keeps_the_lifecycle_invariants(events: list[TaskEvent]) -> None:
    """Whatever is reported: no exception, refusals change nothing, the first terminal
    status of an attempt is final, and setup never follows training within an attempt."""
    machine = TaskMachine()
    for event in events:
        before = (machine.status, machine.phase)
        outcome = machine.apply(event)
        after = (machine.status, machine.phase)
        if event is E.ATTEMPT_START:
            assert (Outcome.APPLIED, (S.RUNNING, Phase.SETUP)) == (outcome, after)
            continue
        if outcome is Outcome.REFUSED:
            assert before == after
        if before[0] in (S.PENDING, S.COMPLETED, S.FAILED, S.CANCELLED):
            assert before[0] == after[0]
        if before[1] is not Phase.SETUP:
            assert Phase.SETUP != after[1]
        # a terminal status and the phase done go together (the run is over)
        assert (after[0] in TERMINAL_STATUSES) == (after[1] is Phase.DONE)


# --- the reporter machine -------------------------------------------------------------


@pytest.mark.parametrize("pair", ALL_REPORTER_PAIRS, ids=_ids)
def test_reporter_table_pins_every_state_input_pair(
    pair: tuple[ReporterState, ReporterInput],
) -> None:
    """Every (state, input) pair maps to its expected result; a missing pair stays missing."""
    assert EXPECTED_REPORTER.get(pair) == REPORTER_TRANSITIONS.get(pair)


@pytest.mark.parametrize("pair", ALL_REPORTER_PAIRS, ids=_ids)
def test_reporter_apply_follows_the_table(pair: tuple[ReporterState, ReporterInput]) -> None:
    """apply() accepts exactly the table's pairs and leaves the state alone otherwise."""
    state, event = pair
    machine = ReporterMachine(state=state)

    accepted = machine.apply(event)

    assert (pair in EXPECTED_REPORTER, EXPECTED_REPORTER.get(pair, state)) == (
        accepted,
        machine.state,
    )


def test_reporter_close_is_idempotent() -> None:
    """start, close, closed, then close again and again: every close is accepted."""
    machine = ReporterMachine()

    results = [machine.apply(i) for i in (In.START, In.CLOSE, In.CLOSE, In.CLOSED, In.CLOSE)]

    assert ([True] * 5, R.CLOSED) == (results, machine.state)


def test_reporter_is_never_restarted_and_refusal_is_logged_once() -> None:
    """START after close is refused, logged once per pair."""
    machine = ReporterMachine()
    machine.apply(In.START)
    machine.apply(In.CLOSE)
    machine.apply(In.CLOSED)

    with capture_events() as events:
        results = [machine.apply(In.START), machine.apply(In.START)]

    assert ([False, False], R.CLOSED) == (results, machine.state)
    assert [
        {
            "event": "trainreport.reporter_transition_refused",
            "log_level": "warning",
            "state": "closed",
            "input": "start",
        }
    ] == events


def test_reporter_strict_mode_raises() -> None:
    """In strict mode a refused reporter input raises TransitionError and changes nothing."""
    machine = ReporterMachine(strict=True, state=R.RUNNING)

    with pytest.raises(TransitionError, match="start"):
        machine.apply(In.START)

    assert R.RUNNING == machine.state


# --- the destination machine ----------------------------------------------------------------------

D, DI = DestinationState, DestinationInput
_NEVER_OPENED = (D.NEW, D.UNREACHABLE, D.REFUSED)

# Written out independently of the module: the tests pin the contract, not the code.
EXPECTED_DESTINATION: dict[tuple[DestinationState, DestinationInput], DestinationState] = {
    **{(s, DI.OPENED): D.SEEDING for s in _NEVER_OPENED},
    **{(s, DI.SUPERSEDED): D.SUPERSEDED for s in (*_NEVER_OPENED, D.OPEN, D.REOPENING)},
    **{(s, DI.OPEN_FAILED): D.REFUSED for s in _NEVER_OPENED},
    **{(s, DI.ERROR): D.REFUSED for s in _NEVER_OPENED},
    (D.NEW, DI.OPEN_UNREACHABLE): D.UNREACHABLE,
    (D.UNREACHABLE, DI.OPEN_UNREACHABLE): D.UNREACHABLE,
    (D.REFUSED, DI.OPEN_UNREACHABLE): D.REFUSED,
    (D.SEEDING, DI.SEEDED): D.OPEN,
    (D.SEEDING, DI.ERROR): D.SEEDING,
    (D.OPEN, DI.ERROR): D.OPEN,
    (D.OPEN, DI.NEEDS_OPEN): D.REOPENING,
    (D.OPEN, DI.CLOSED_HOLDING_ALL): D.DELIVERED,
    **{(D.REOPENING, i): D.REOPENING for i in (DI.OPEN_UNREACHABLE, DI.OPEN_FAILED, DI.ERROR)},
    (D.REOPENING, DI.OPENED): D.OPEN,
    (D.SUPERSEDED, DI.ERROR): D.SUPERSEDED,
}


def test_destination_table_is_exactly_the_documented_one() -> None:
    """Every allowed (state, input) pair and its next state, as docs/lifecycle.md says."""
    assert EXPECTED_DESTINATION == dict(DESTINATION_TRANSITIONS)


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (s, i)
        for s in DestinationState
        for i in DestinationInput
        if (s, i) not in EXPECTED_DESTINATION
    ],
)
def test_destination_input_missing_from_the_table_raises(
    state: DestinationState, event: DestinationInput
) -> None:
    """A pair the engine must never apply (an open's answer while open, anything after the
    end) raises TransitionError naming both, rather than guessing a state."""
    with pytest.raises(TransitionError) as info:
        destination_next(state, event)

    assert f"{event.value!r} refused in state {state.value!r}" in str(info.value)


def test_destination_ends_take_nothing_but_a_counted_error() -> None:
    """delivered takes no input at all; superseded only the cycle's counted error."""
    assert set() == {i for (s, i) in DESTINATION_TRANSITIONS if s is D.DELIVERED}
    assert {DI.ERROR} == {i for (s, i) in DESTINATION_TRANSITIONS if s is D.SUPERSEDED}


def test_only_an_open_leaves_the_never_opened_states_for_seeding() -> None:
    """Nothing is sent before the store is seeded: open is reached only through seeding
    (or, once it was open, through reopening)."""
    into_open = {s for (s, _), t in DESTINATION_TRANSITIONS.items() if t is D.OPEN and s is not t}
    assert {D.SEEDING, D.REOPENING} == into_open


@given(st.lists(st.sampled_from(list(DestinationInput)), max_size=30))
def test_any_input_sequence_never_returns_to_new(events: list[DestinationInput]) -> None:
    """Once an open ended, a destination is never new again (seeding may stop waiting for it)."""
    state = D.NEW
    seen_other = False
    for event in events:
        try:
            state = destination_next(state, event)
        except TransitionError:
            continue
        seen_other = seen_other or state is not D.NEW
        assert not (seen_other and state is D.NEW)


# --- the generated document -----------------------------------------------------------


@pytest.fixture(scope="module")
def script() -> ModuleType:
    """The diagram script, imported from its file path."""
    spec = importlib.util.spec_from_file_location("make_lifecycle_diagrams", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_lifecycle_doc_matches_the_tables(script: ModuleType) -> None:
    """docs/lifecycle.md is exactly what the script renders (regenerate it if this fails)."""
    assert script.render() == DOC.read_text(encoding="utf-8")


def test_render_does_not_depend_on_table_order(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output is sorted: reversing every table's insertion order renders the same bytes."""
    expected = script.render()
    for name in (
        "TASK_TRANSITIONS",
        "PHASE_TRANSITIONS",
        "REPORTER_TRANSITIONS",
        "DESTINATION_TRANSITIONS",
    ):
        table = getattr(script, name)
        monkeypatch.setattr(script, name, MappingProxyType(dict(reversed(table.items()))))

    assert expected == script.render()


def test_diagrams_draw_every_table_entry(script: ModuleType) -> None:
    """Each transition appears on an arrow of its machine's Mermaid diagram."""
    text = script.render()
    blocks = text.split("```mermaid\n")[1:]
    tables: list[Mapping[Any, Any]] = [
        TASK_TRANSITIONS,
        PHASE_TRANSITIONS,
        REPORTER_TRANSITIONS,
        DESTINATION_TRANSITIONS,
    ]
    assert 4 == len(blocks)
    for block, table in zip(blocks, tables, strict=True):
        diagram = block.split("```")[0]
        for (source, event), target in table.items():
            arrow = f"    {source.value} --> {target.value} : "
            line = next(x for x in diagram.splitlines() if x.startswith(arrow))
            assert event.value in line[len(arrow) :].split(", ")


def test_check_flag_exits_1_when_the_doc_is_stale(script: ModuleType, tmp_path: Path) -> None:
    """--check returns 0 after writing and 1 once the file differs or is missing."""
    output = tmp_path / "lifecycle.md"
    missing = script.main(["--check", "--output", str(output)])
    written = script.main(["--output", str(output)])
    fresh = script.main(["--check", "--output", str(output)])
    output.write_text(output.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")
    stale = script.main(["--check", "--output", str(output)])

    assert (1, 0, 0, 1) == (missing, written, fresh, stale)
