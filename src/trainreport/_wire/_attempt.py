"""Which attempt of a job this process is: the identity a writer claims a task with.

A job system that restarts a failed run starts a new *attempt*. An old attempt
can outlive its replacement (a zombie: partitioned at start, it reaches the
service later), so the service orders writers by their attempts, not by the
order in which they open (``docs/protocol.md``, ``POST .../writers``). The
identity is an attempt number when the job system gives one, read from
:data:`ATTEMPT_VARIABLES` (first one set wins), and the process's start time,
which orders attempts that have no number. A process that takes over a task's
journal from a dead attempt (:func:`follow`) comes after it on that task
whatever its clock says: its start time for that job and task is moved past
the dead attempt's (:func:`ordered_after`). Other tasks the process reports
(it may run several reporters) keep its own start time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping

import attrs

from trainreport._logging import get_logger

__all__ = [
    "ATTEMPT_VARIABLES",
    "AttemptIdentity",
    "current_attempt",
    "follow",
    "ordered_after",
    "process_started_at",
]

#: Environment variables read, in order, for the attempt number (a non-negative integer).
#: ``TRAINREPORT_ATTEMPT`` is for job systems that know the attempt but set none of
#: the others (or whose count restarts, such as torchrun's in a replaced pod).
ATTEMPT_VARIABLES = (
    "TRAINREPORT_ATTEMPT",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_RESTART_COUNT",
    "AWS_BATCH_JOB_ATTEMPT",
)

_log = get_logger()
#: Wall-clock time at which this module was first imported: the start time where
#: the operating system does not tell (seconds since the Unix epoch).
_IMPORTED_AT = time.time()
#: How far past a predecessor's start time :func:`ordered_after` moves this
#: process's (seconds): /proc's resolution (10 ms clock ticks).
FOLLOW_MARGIN_SECONDS = 0.01
#: The dead attempts this process took the journals of (:func:`follow`), by (job id, task id).
_predecessors: dict[tuple[str, str], list[AttemptIdentity]] = {}
_predecessors_lock = threading.Lock()


@attrs.frozen
class AttemptIdentity:
    """The attempt a writer belongs to.

    Args:
        number: the attempt number from the job system, or ``None``.
        started_at: the process's start time, seconds since the Unix epoch, or ``None``.
    """

    number: int | None = None
    started_at: float | None = None

    def to_json(self) -> dict[str, int | float | None]:
        """The ``attempt`` object of a ``POST .../writers`` body."""
        return {"number": self.number, "started_at": self.started_at}


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            for line in stat:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_started_at() -> float:
    """This process's start time, seconds since the Unix epoch. Never raises.

    From ``/proc`` on Linux (boot time plus the process's start in clock ticks,
    10 ms resolution); elsewhere the time trainreport was first imported.
    """
    boot = _boot_time()
    if boot is None:
        return _IMPORTED_AT
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return round(boot + int(fields[19]) / ticks, 3)
    except (OSError, ValueError, IndexError):
        return _IMPORTED_AT


def attempt_number(environ: Mapping[str, str]) -> int | None:
    """The attempt number: the first of :data:`ATTEMPT_VARIABLES` that holds an integer >= 0.

    A variable that is set to anything else is skipped with one warning
    (``trainreport.attempt_unreadable``). Never raises.
    """
    for name in ATTEMPT_VARIABLES:
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        try:
            number = int(raw)
        except ValueError:
            number = -1
        if number >= 0:
            return number
        _log.warning("trainreport.attempt_unreadable", variable=name, value=raw[:50])
    return None


def ordered_after(own: AttemptIdentity, predecessor: AttemptIdentity) -> AttemptIdentity:
    """``own``, its start time moved past ``predecessor``'s where start times order them.

    The service orders two claims by their numbers when both have one and
    they differ, else by their start times (docs/protocol.md, ``POST
    .../writers``). A process that holds the journal of a dead attempt began
    after that attempt by causality (it could take the lock only once the
    other died), but its start time is read from a wall clock that may have
    been stepped back since (``/proc/stat``'s boot time moves with it). So
    where start times decide and ``own``'s is earlier, it becomes the
    predecessor's plus :data:`FOLLOW_MARGIN_SECONDS`.

    Args:
        own: this process's identity.
        predecessor: the identity recorded in a dead attempt's journal.

    Returns:
        the identity to claim with. Never raises.
    """
    numbered = own.number is not None and predecessor.number is not None
    if numbered and own.number != predecessor.number:
        return own  # the numbers order them, not the clocks
    if own.started_at is None or predecessor.started_at is None:
        return own
    if own.started_at >= predecessor.started_at:
        return own  # already later, or equal (the service takes it as the same attempt)
    return attrs.evolve(own, started_at=round(predecessor.started_at + FOLLOW_MARGIN_SECONDS, 3))


def follow(job_id: str, task_id: str, predecessor: AttemptIdentity) -> None:
    """Record that this process took over ``job_id``/``task_id``'s journal from ``predecessor``.

    From then on :func:`current_attempt` for that job and task is ordered
    after the dead attempt (:func:`ordered_after`); other tasks are not (no
    dead process held them, so nothing says this one came after it there).
    Called by the journal when it claims a task whose previous journal a dead
    process left (``_runlog/_journal.py``), before any destination opens.
    Never raises.

    Args:
        job_id: the job's id.
        task_id: the task's id within the job.
        predecessor: the identity recorded in the dead attempt's journal.
    """
    with _predecessors_lock:
        _predecessors.setdefault((job_id, task_id), []).append(predecessor)


def current_attempt(
    job_id: str, task_id: str, environ: Mapping[str, str] | None = None
) -> AttemptIdentity:
    """The identity this process claims ``job_id``/``task_id`` with: its number and start time.

    The number comes from ``environ`` (when set); the start time is moved past
    every dead attempt this process took that task's journal from
    (:func:`follow`, :func:`ordered_after`).

    Args:
        job_id: the job's id.
        task_id: the task's id within the job.
        environ: the environment (default ``os.environ``).

    Never raises.
    """
    env = os.environ if environ is None else environ
    own = AttemptIdentity(number=attempt_number(env), started_at=process_started_at())
    with _predecessors_lock:
        predecessors = list(_predecessors.get((job_id, task_id), ()))
    for predecessor in predecessors:
        own = ordered_after(own, predecessor)
    return own
