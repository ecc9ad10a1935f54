"""The attempt identity a writer claims a task with: number from the environment, start time."""

from __future__ import annotations

import time

import pytest

from trainreport._wire._attempt import (
    ATTEMPT_VARIABLES,
    FOLLOW_MARGIN_SECONDS,
    AttemptIdentity,
    attempt_number,
    current_attempt,
    follow,
    ordered_after,
    process_started_at,
)
from trainreport.testing import capture_events


def test_the_first_variable_set_gives_the_attempt_number() -> None:
    """TRAINREPORT_ATTEMPT wins over the job systems' own counters."""
    environ = {"TORCHELASTIC_RESTART_COUNT": "4", "TRAINREPORT_ATTEMPT": "7"}
    assert 7 == attempt_number(environ)
    assert 4 == attempt_number({"TORCHELASTIC_RESTART_COUNT": "4", "SLURM_RESTART_COUNT": "1"})
    assert 2 == attempt_number({"AWS_BATCH_JOB_ATTEMPT": " 2 "})
    assert attempt_number({}) is None


@pytest.mark.parametrize("raw", ["x", "-1", "1.5"])
def test_an_unreadable_attempt_variable_is_skipped_with_a_warning(raw: str) -> None:
    """A bad value is logged once and the next variable is read."""
    with capture_events() as events:
        number = attempt_number({"TRAINREPORT_ATTEMPT": raw, "SLURM_RESTART_COUNT": "3"})
    assert 3 == number
    assert ["TRAINREPORT_ATTEMPT"] == [
        e["variable"] for e in events if e["event"] == "trainreport.attempt_unreadable"
    ]


def test_the_variables_are_the_documented_ones() -> None:
    """The list docs/protocol.md gives, in its order."""
    assert (
        "TRAINREPORT_ATTEMPT",
        "TORCHELASTIC_RESTART_COUNT",
        "SLURM_RESTART_COUNT",
        "AWS_BATCH_JOB_ATTEMPT",
    ) == ATTEMPT_VARIABLES


def test_the_process_start_time_is_before_now_and_stable() -> None:
    """The start time is in the past (this process is running) and the same at every call."""
    started = process_started_at()
    assert started <= time.time()
    assert started > time.time() - 24 * 3600
    assert started == process_started_at()


def test_current_attempt_combines_both() -> None:
    """The identity holds the number from the environment and the process start time."""
    assert AttemptIdentity(5, process_started_at()) == current_attempt(
        "job-1", "train", {"TRAINREPORT_ATTEMPT": "5"}
    )


@pytest.mark.parametrize(
    ("own", "predecessor", "expected"),
    [
        # start times decide (no numbers, equal numbers, one missing): moved past
        (AttemptIdentity(None, 100.0), AttemptIdentity(None, 3700.0), 3700.01),
        (AttemptIdentity(2, 100.0), AttemptIdentity(2, 3700.0), 3700.01),
        (AttemptIdentity(None, 100.0), AttemptIdentity(4, 3700.0), 3700.01),
        (AttemptIdentity(4, 100.0), AttemptIdentity(None, 3700.0), 3700.01),
        # already later, or equal (the service takes equal as the same attempt): kept
        (AttemptIdentity(None, 3800.0), AttemptIdentity(None, 3700.0), 3800.0),
        (AttemptIdentity(None, 3700.0), AttemptIdentity(None, 3700.0), 3700.0),
        # numbers that differ order them: the clock is not consulted
        (AttemptIdentity(3, 100.0), AttemptIdentity(2, 3700.0), 100.0),
        (AttemptIdentity(1, 100.0), AttemptIdentity(2, 3700.0), 100.0),
        # no start time on either side: nothing to order by
        (AttemptIdentity(None, 100.0), AttemptIdentity(None, None), 100.0),
        (AttemptIdentity(None, None), AttemptIdentity(None, 3700.0), None),
    ],
)
def test_an_attempt_that_follows_a_dead_one_is_ordered_after_it(
    own: AttemptIdentity, predecessor: AttemptIdentity, expected: float | None
) -> None:
    """Where the service would order the two by start time, the follower's is moved past
    the predecessor's (a clock stepped back must not make it the older attempt)."""
    moved = ordered_after(own, predecessor)
    assert (own.number, expected) == (moved.number, moved.started_at)


def test_current_attempt_is_ordered_after_every_attempt_it_followed() -> None:
    """``follow`` is remembered for the process: the latest predecessor wins, in any order."""
    own = process_started_at()
    follow("job-1", "train", AttemptIdentity(None, own + 7200.0))
    follow("job-1", "train", AttemptIdentity(None, own + 3600.0))
    follow("job-1", "train", AttemptIdentity(9, own + 99999.0))  # numbered: by number against 5
    assert AttemptIdentity(5, round(own + 7200.0 + FOLLOW_MARGIN_SECONDS, 3)) == current_attempt(
        "job-1", "train", {"TRAINREPORT_ATTEMPT": "5"}
    )


def test_following_a_dead_attempt_on_one_task_leaves_every_other_task_s_identity() -> None:
    """The order is per job and task: the same task id in another job, or another task of
    the same job, is claimed with this process's own start time."""
    own = process_started_at()
    follow("job-1", "train", AttemptIdentity(None, own + 3600.0))
    assert [AttemptIdentity(None, own)] * 3 == [
        current_attempt(job, task, {})
        for job, task in [("job-1", "eval"), ("job-2", "train"), ("job-1train", "")]
    ]
    assert AttemptIdentity(None, round(own + 3600.0 + FOLLOW_MARGIN_SECONDS, 3)) == (
        current_attempt("job-1", "train", {})
    )
