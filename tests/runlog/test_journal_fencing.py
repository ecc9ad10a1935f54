"""Whose a journal is: a zombie's never replaces a newer attempt's run; order without clocks.

Issue 21, breaks 1, 4 and 5 (``docs/engine.md``, "Recovery"), against the
real reference server: a fenced zombie's journal, left-over journals whose
names a stepped wall clock reversed, and a task last written by a host whose
clock runs an hour ahead.
"""

from __future__ import annotations

import datetime
import json
from array import array
from pathlib import Path
from typing import Any

import attrs
import pytest
import urllib3

from helpers import run_cli
from trainreport import HttpSink, Reporter, ReportingConfig
from trainreport._runlog._journal import Journal, JournalOwner
from trainreport._runlog._plan import StaleJournalError, plan_recovery
from trainreport._runlog._runfile import load_run_file
from trainreport._runlog._state import LogState
from trainreport._runlog._writer import RunLogWriter
from trainreport._wire._sink_interface import Opened, SeriesUpdate, Update
from trainreport.server import ServerHandle
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(autouse=True)
def _journal_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINREPORT_JOURNAL", raising=False)


def config_for(journal_dir: Path) -> ReportingConfig:
    return ReportingConfig(
        min_report_interval_seconds=0.02,
        journal_interval_seconds=0.02,
        journal_dir=str(journal_dir),
        backoff_initial_seconds=0.02,
        backoff_max_seconds=0.1,
        close_unanswered_seconds=0.3,
    )


def reporter_for(url: str, journal_dir: Path, job: str) -> Reporter:
    sink = HttpSink(url, job, connect_timeout_seconds=0.5, read_timeout_seconds=5.0)
    return Reporter(sink, config_for(journal_dir), rank=0).start()


def stored(url: str, job: str) -> dict[str, Any]:
    answer = urllib3.request("GET", f"{url}/v1/jobs/{job}/tasks/train", timeout=10.0)
    assert 200 == answer.status
    task: dict[str, Any] = json.loads(answer.data)
    return task


def points(task: dict[str, Any]) -> list[tuple[int, float]]:
    return [(p["step"], p["value"]) for p in task["status_details"]["metrics"]["train_loss"]]


def loss_update(offset: int, steps: list[int], value: float, **details: Any) -> Update:
    series = SeriesUpdate(
        "train_loss",
        offset,
        array("q", steps),
        array("i", [1] * len(steps)),
        array("d", [value] * len(steps)),
    )
    status = details.pop("status", "running")
    return Update(status, details, (series,), False)


def zombie_and_live_attempt(
    url: str, journal_dir: Path, job: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Attempt 0 keeps recording after attempt 1 took the task over and completed it.

    Returns the zombie's journal, kept at its close. The service holds attempt
    1's 300 points (value 1.0) and ``completed``.
    """
    monkeypatch.setenv("TRAINREPORT_ATTEMPT", "0")
    zombie = reporter_for(url, journal_dir, job)
    for step in range(1, 51):
        zombie.report_train_step(step=step, epoch=1, metrics={"loss": 1.0})
    assert zombie.flush(10.0)

    monkeypatch.setenv("TRAINREPORT_ATTEMPT", "1")
    live = reporter_for(url, journal_dir, job)
    for step in range(51, 301):
        live.report_train_step(step=step, epoch=1, metrics={"loss": 1.0})
    live.report_completed()
    assert live.close(timeout=10.0)
    journal_stats = live.stats().journal
    assert journal_stats is not None
    assert "busy" == journal_stats.state

    for step in range(51, 121):  # the zombie goes on: its sends are fenced (409)
        zombie.report_train_step(step=step, epoch=1, metrics={"loss": 99.0})
    assert not zombie.close(timeout=2.0)
    kept = journal_dir / job / "train.log"
    assert kept.exists()
    return kept


def test_a_fenced_zombies_journal_knows_whose_it_is(
    tmp_path: Path, server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its RUN fields: attempt 0, the generation it wrote under, and superseded."""
    kept = zombie_and_live_attempt(server.url, tmp_path, "job-z", monkeypatch)

    owner = JournalOwner.of(load_run_file(kept).run)
    assert (0, 1, True) == (owner.attempt_number, owner.writer_generation, owner.superseded)


def test_sync_refuses_a_fenced_zombies_journal_and_force_overrides(
    tmp_path: Path, server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit status 2 saying why, nothing sent (still completed, 300 points); --force sends."""
    kept = zombie_and_live_attempt(server.url, tmp_path, "job-z", monkeypatch)

    refused = run_cli("sync", str(kept), "--url", server.url)

    assert 2 == refused.returncode, refused.stdout + refused.stderr
    assert "superseded" in refused.stderr
    assert "--force" in refused.stderr
    task = stored(server.url, "job-z")
    assert "completed" == task["status"]
    assert [(s, 1.0) for s in range(1, 301)] == points(task)

    forced = run_cli("sync", str(kept), "--url", server.url, "--force")

    assert 0 == forced.returncode, forced.stdout + forced.stderr
    assert (99.0, 120) == (
        points(stored(server.url, "job-z"))[-1][1],
        len(points(stored(server.url, "job-z"))),
    )


def test_a_restart_never_replays_a_fenced_zombies_journal_over_the_newer_attempt(
    tmp_path: Path, server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next process keeps attempt 1's points, logs the refusal, keeps the journal."""
    zombie_and_live_attempt(server.url, tmp_path, "job-z", monkeypatch)

    monkeypatch.setenv("TRAINREPORT_ATTEMPT", "2")
    with capture_events() as events:
        restart = reporter_for(server.url, tmp_path, "job-z")
        restart.close(timeout=10.0)

    assert [(s, 1.0) for s in range(1, 301)] == points(stored(server.url, "job-z"))
    refused = [e for e in events if e["event"] == "trainreport.journal_superseded"]
    assert 1 == len(refused)
    assert "superseded" in refused[0]["reason"]
    assert [] == [e for e in events if e["event"] == "trainreport.journal_recovered"]
    assert 1 == len(list((tmp_path / "job-z" / "train.left").iterdir()))


def test_left_over_journals_are_recovered_in_content_order_whatever_their_names(
    tmp_path: Path, server: ServerHandle
) -> None:
    """The older journal renamed to sort last (a clock stepped back): the newer still wins."""
    for value in (1.0, 2.0):  # two processes killed in turn, the service down for both
        journal = Journal.claim(tmp_path, "job-4", "train")
        assert journal is not None
        journal.append(loss_update(0, list(range(1, 51)), value))
        journal._release(remove_files=False)
    third = Journal.claim(tmp_path, "job-4", "train")
    assert third is not None
    third.close(delivered=True)
    left = tmp_path / "job-4" / "train.left"
    older, newer = third.left_over
    # Names a wall clock an hour back would give: the newer journal's sorts first.
    older.rename(left / "99999999999999999999-1.log")
    newer.rename(left / "00000000000000000001-2.log")

    assert reporter_for(server.url, tmp_path, "job-4").close(timeout=10.0)

    assert [(s, 2.0) for s in range(1, 51)] == points(stored(server.url, "job-4"))


def skewed_task_then_journal(url: str, journal_dir: Path, job: str) -> Path:
    """A host an hour ahead wrote step 100; the next writer claimed, recorded 200 and completed.

    The next writer's sends never landed (it was killed first): only its
    journal holds steps 101-200 and ``completed``.
    """
    ahead = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    first = HttpSink(url, job, read_timeout_seconds=5.0)
    assert isinstance(first.open(timeout_seconds=5.0), Opened)
    stamp = ahead.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    sent = first.send(
        loss_update(0, list(range(1, 101)), 1.0, step=100, updated_at=stamp), timeout_seconds=5.0
    )
    assert "Delivered" == type(sent).__name__
    first.close()

    second = HttpSink(url, job, read_timeout_seconds=5.0)
    opened = second.open(timeout_seconds=5.0)
    assert isinstance(opened, Opened)
    assert opened.writer_generation is not None
    journal = Journal.claim(journal_dir, job, "train")
    assert journal is not None
    journal.reset(LogState(), absolute=True)
    journal.mark_writer(generation=opened.writer_generation)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    journal.append(
        loss_update(
            0,
            list(range(1, 201)),
            1.0,
            status="completed",
            step=200,
            updated_at=now.replace("+00:00", "Z"),
        )
    )
    journal._release(remove_files=False)
    second.close()
    return journal_dir / job / "train.log"


def test_sync_delivers_the_writers_completed_over_a_task_stamped_an_hour_ahead(
    tmp_path: Path, server: ServerHandle
) -> None:
    """The journal's writer claimed after the skewed write: its status arrives, not by clock."""
    kept = skewed_task_then_journal(server.url, tmp_path, "job-5")

    done = run_cli("sync", str(kept), "--url", server.url)

    assert 0 == done.returncode, done.stdout + done.stderr
    task = stored(server.url, "job-5")
    assert ("completed", 200) == (task["status"], task["status_details"]["step"])
    assert 200 == len(points(task))


def test_recovery_delivers_the_writers_completed_over_a_task_stamped_an_hour_ahead(
    tmp_path: Path, server: ServerHandle
) -> None:
    """The restart's recovery sends the journal's fields (plan with the open's last writer)."""
    kept = skewed_task_then_journal(server.url, tmp_path, "job-5")
    run = load_run_file(kept)
    sink = HttpSink(server.url, "job-5", read_timeout_seconds=5.0)
    opened = sink.open(timeout_seconds=5.0)
    assert isinstance(opened, Opened)
    sink.close()

    plan = plan_recovery(
        run.state,
        run.run,
        opened.stored_task,
        full_state=False,
        last_writer_generation=opened.last_writer_generation,
    )

    assert plan.update is not None
    assert "completed" == plan.update.status


def old_version_journal(path: Path) -> None:
    """A journal as the previous version wrote it (no seq, attempt, generation): steps 1-40."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run = {"job_id": "job-o", "task_id": "train", "journal": "1", "offsets": "absolute"}
    writer = RunLogWriter.open(path, run=run)
    writer.append(loss_update(0, list(range(1, 21)), 1.0))
    writer.append(loss_update(20, list(range(21, 41)), 3.0))
    writer.flush()
    writer.close()


def test_a_journal_of_the_previous_version_is_recovered_as_before(
    tmp_path: Path, server: ServerHandle
) -> None:
    """No owner fields: not judged stale, even when the task's last writer is newer."""
    sink = HttpSink(server.url, "job-o", read_timeout_seconds=5.0)
    assert isinstance(sink.open(timeout_seconds=5.0), Opened)
    sink.send(loss_update(0, list(range(1, 21)), 1.0), timeout_seconds=5.0)
    sink.close()
    left = tmp_path / "job-o" / "train.left"
    old_version_journal(left / "01796000000000000000-7.log")

    with capture_events() as events:
        assert reporter_for(server.url, tmp_path, "job-o").close(timeout=10.0)

    expected = [(s, 1.0) for s in range(1, 21)] + [(s, 3.0) for s in range(21, 41)]
    assert expected == points(stored(server.url, "job-o"))
    assert [20] == [e["points"] for e in events if e["event"] == "trainreport.journal_recovered"]


def test_a_stale_journal_the_service_already_holds_is_removed_not_refused() -> None:
    """Nothing to send: the plan says so, no StaleJournalError; with something to send it raises."""
    log = LogState()
    log.reset(loss_update(0, [1, 2], 1.0))
    run = {"journal": "1", "offsets": "absolute", "writer_generation": "1"}
    held = {
        "status": "running",
        "status_details": {
            "metrics": {"train_loss": [{"step": s, "epoch": 1, "value": 1.0} for s in (1, 2)]}
        },
    }

    plan = plan_recovery(log, run, held, full_state=False, last_writer_generation=2)

    assert plan.update is None or plan.update.series is None
    other = LogState()
    other.reset(loss_update(0, [1, 2, 3], 5.0))
    with pytest.raises(StaleJournalError, match="generation 2"):
        plan_recovery(other, run, held, full_state=False, last_writer_generation=2)


def test_the_writers_answer_says_which_generation_wrote_the_task_last(
    server: ServerHandle,
) -> None:
    """null before any update; the updating generation after; null again after a PATCH."""
    base = f"{server.url}/v1/jobs/job-w/tasks/train"

    def claim() -> dict[str, Any]:
        answer = urllib3.request("POST", f"{base}/writers", json={}, timeout=10.0)
        assert 200 == answer.status, answer.data[:300]
        doc: dict[str, Any] = json.loads(answer.data)
        return doc

    def update(generation: int) -> None:
        body = {"writer_generation": generation, "sequence": 1, "status": "running"}
        answer = urllib3.request("POST", f"{base}/updates", json=body, timeout=10.0)
        assert 200 == answer.status, answer.data[:300]

    first = claim()
    assert None is first["last_writer_generation"]
    update(first["writer_generation"])
    second = claim()  # claims, writes nothing
    assert first["writer_generation"] == second["last_writer_generation"]
    assert first["writer_generation"] == claim()["last_writer_generation"]
    patch = urllib3.request("PATCH", base, json={"status": "running"}, timeout=10.0)
    assert 200 == patch.status
    assert None is claim()["last_writer_generation"]


def iso(when: datetime.datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def service_writes(url: str, job: str, steps: list[int], value: float, **details: Any) -> None:
    """One writer claims the task (a generation) and sends ``steps`` with ``details``."""
    sink = HttpSink(url, job, read_timeout_seconds=5.0)
    assert isinstance(sink.open(timeout_seconds=5.0), Opened)
    sent = sink.send(loss_update(0, steps, value, **details), timeout_seconds=5.0)
    assert "Delivered" == type(sent).__name__
    sink.close()


def never_opened_journal(
    path: Path, job: str, steps: list[int], value: float, *, started: datetime.datetime
) -> None:
    """A journal whose process never opened its service: local offsets, no writer generation.

    It was started at ``started``; its last record is stamped a minute later.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    run = {
        "job_id": job,
        "task_id": "train",
        "journal": "1",
        "offsets": "local",
        "journal_seq": "1",
        "attempt_number": "2",
        "attempt_started_at": str(started.timestamp()),
        "journal_started_at": iso(started),
    }
    writer = RunLogWriter.open(path, run=run)
    later = iso(started + datetime.timedelta(minutes=1))
    writer.append(loss_update(0, steps, value, step=steps[-1], updated_at=later))
    writer.flush()
    writer.close()


def completed_elsewhere_after_a_never_opened_journal(url: str, journal_dir: Path) -> Path:
    """Attempt 2 recorded steps 1-3 locally (service down) and died; attempt 3 completed 1-6.

    Returns attempt 2's journal, as a later process on its node finds it.
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    kept = journal_dir / "job-g" / "train.log"
    never_opened_journal(kept, "job-g", [1, 2, 3], 9.0, started=now - datetime.timedelta(hours=1))
    service_writes(url, "job-g", list(range(1, 7)), 1.0, status="completed", updated_at=iso(now))
    return kept


def test_sync_refuses_a_never_opened_journal_older_than_the_services_completed_run(
    tmp_path: Path, server: ServerHandle
) -> None:
    """No writer generation, older than the task: exit 2, the 6 completed points kept."""
    kept = completed_elsewhere_after_a_never_opened_journal(server.url, tmp_path)

    refused = run_cli("sync", str(kept), "--url", server.url)

    assert 2 == refused.returncode, refused.stdout + refused.stderr
    assert "--force" in refused.stderr
    task = stored(server.url, "job-g")
    assert ("completed", [(s, 1.0) for s in range(1, 7)]) == (task["status"], points(task))


def test_a_restart_sets_aside_a_never_opened_journal_older_than_the_services_run(
    tmp_path: Path, server: ServerHandle
) -> None:
    """Logged as superseded and kept in ``.left``; the completed run's curves untouched."""
    completed_elsewhere_after_a_never_opened_journal(server.url, tmp_path)

    with capture_events() as events:
        reporter_for(server.url, tmp_path, "job-g").close(timeout=10.0)

    task = stored(server.url, "job-g")
    assert [(s, 1.0) for s in range(1, 7)] == points(task)
    refused = [e for e in events if e["event"] == "trainreport.journal_superseded"]
    assert 1 == len(refused)
    assert "generation" in refused[0]["reason"]
    assert [] == [e for e in events if e["event"] == "trainreport.journal_recovered"]
    assert 1 == len(list((tmp_path / "job-g" / "train.left").iterdir()))


def test_a_never_opened_journal_newer_than_the_services_last_writer_is_replayed_once(
    tmp_path: Path, server: ServerHandle
) -> None:
    """Attempt 1 wrote 1-50; attempt 2 (service down) recorded 51-100; attempt 3 sends them once."""
    now = datetime.datetime.now(datetime.timezone.utc)
    earlier = iso(now - datetime.timedelta(hours=1))
    service_writes(server.url, "job-l", list(range(1, 51)), 1.0, updated_at=earlier)
    kept = tmp_path / "job-l" / "train.log"
    never_opened_journal(kept, "job-l", list(range(51, 101)), 2.0, started=now)

    with capture_events() as events:
        assert reporter_for(server.url, tmp_path, "job-l").close(timeout=10.0)

    expected = [(s, 1.0) for s in range(1, 51)] + [(s, 2.0) for s in range(51, 101)]
    assert expected == points(stored(server.url, "job-l"))
    assert [50] == [e["points"] for e in events if e["event"] == "trainreport.journal_recovered"]
    assert [] == [e for e in events if e["event"] == "trainreport.journal_superseded"]


def never_opened_log(steps: list[int], *, updated_at: str) -> LogState:
    log = LogState()
    log.reset(loss_update(0, steps, 9.0, updated_at=updated_at))
    return log


def held_task(status: str, updated_at: str, steps: list[int]) -> dict[str, Any]:
    series = [{"step": s, "epoch": 1, "value": 1.0} for s in steps]
    return {
        "status": status,
        "status_details": {"updated_at": updated_at, "metrics": {"train_loss": series}},
    }


@pytest.mark.parametrize("full_state", [False, True])
def test_plan_refuses_a_never_opened_journal_when_the_services_task_is_newer(
    full_state: bool,
) -> None:
    """The reviewer's case, both wire modes: no run fields but the stamps say older."""
    run = {"job_id": "j", "task_id": "t", "journal": "1", "offsets": "local", "journal_seq": "1"}
    held = held_task("running", "2024-01-02T00:00:00Z", list(range(1, 7)))

    with pytest.raises(StaleJournalError, match="generation 7"):
        plan_recovery(
            never_opened_log([1, 2, 3], updated_at="2024-01-01T00:00:00Z"),
            run,
            held,
            full_state=full_state,
            last_writer_generation=7,
        )


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_plan_refuses_a_never_opened_journal_without_a_start_over_a_terminal_task(
    status: str,
) -> None:
    """No ``journal_started_at``: a terminal task is a writer it never saw, even stamped earlier."""
    run = {"journal": "1", "offsets": "local"}
    held = held_task(status, "2024-01-01T00:00:00Z", list(range(1, 7)))

    with pytest.raises(StaleJournalError, match=f"the task is {status}"):
        plan_recovery(
            never_opened_log([1, 2, 3], updated_at="2024-01-02T00:01:00Z"),
            run,
            held,
            full_state=False,
            last_writer_generation=7,
        )


def test_plan_refuses_a_never_opened_journal_started_before_the_services_write() -> None:
    """Its last record is later, but the service was written while it ran: another writer's."""
    run = {"journal": "1", "offsets": "local", "journal_started_at": "2024-01-01T00:00:00Z"}
    held = held_task("running", "2024-01-02T00:00:00Z", list(range(1, 7)))

    with pytest.raises(StaleJournalError, match="started"):
        plan_recovery(
            never_opened_log([1, 2, 3], updated_at="2024-01-03T00:00:00Z"),
            run,
            held,
            full_state=False,
            last_writer_generation=7,
        )


@pytest.mark.parametrize("status", ["failed", "completed"])
@pytest.mark.parametrize("last_writer", [None, 7])
def test_plan_replays_a_never_opened_journal_started_after_a_terminal_write(
    last_writer: int | None, status: str
) -> None:
    """A retry after ``failed``, a run resumed after ``completed``: recovered (written before)."""
    run = {"journal": "1", "offsets": "local", "journal_started_at": "2024-01-02T00:00:00Z"}
    held = held_task(status, "2024-01-01T00:00:00Z", [1, 2])

    plan = plan_recovery(
        never_opened_log([3, 4, 5], updated_at="2024-01-02T00:01:00Z"),
        run,
        held,
        full_state=False,
        last_writer_generation=last_writer,
    )

    assert plan.update is not None
    assert plan.update.series is not None
    assert [(2, [3, 4, 5])] == [(s.offset, list(s.steps)) for s in plan.update.series]


def test_a_journal_records_when_it_was_started_by_its_wall_clock(tmp_path: Path) -> None:
    """``journal_started_at``: the claim's wall time, the order of a journal that never opened."""
    journal = Journal.claim(
        tmp_path, "job-s", "train", wall_clock=lambda: "2024-05-01T00:00:00.000Z"
    )
    assert journal is not None
    journal.append(loss_update(0, [1], 1.0))
    journal._release(remove_files=False)

    owner = JournalOwner.of(load_run_file(tmp_path / "job-s" / "train.log").run)
    assert "2024-05-01T00:00:00.000Z" == owner.journal_started_at


@pytest.mark.parametrize("extension", [True, False], ids=["extension", "full-state"])
def test_the_later_left_over_s_task_fields_win_though_its_clock_was_stepped_back(
    tmp_path: Path, server: ServerHandle, extension: bool
) -> None:
    """Two left-overs (the service down for both), the later one stamped an hour earlier.

    Recovery sends the first's fields, then the second's: they are newer
    (recorded later on this node), whatever ``updated_at`` says. Before, the
    stamp the first just delivered kept the second's ``step`` out in
    full-state mode (found by the kill harness's stepped clock).
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    stamps = [now, now - datetime.timedelta(hours=1)]
    steps = [list(range(1, 101)), list(range(31, 61))]  # the second resumed from step 31
    for value, stamp, run in zip((1.0, 2.0), stamps, steps, strict=True):
        journal = Journal.claim(tmp_path, "job-6", "train")
        assert journal is not None
        text = stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        journal.append(loss_update(0, run, value, step=run[-1], updated_at=text))
        journal._release(remove_files=False)

    sink = HttpSink(server.url, "job-6", read_timeout_seconds=5.0, use_extension=extension)
    config = attrs.evolve(config_for(tmp_path), status_at_close="keep")
    assert Reporter(sink, config, rank=0).start().close(timeout=10.0)

    task = stored(server.url, "job-6")
    assert 60 == task["status_details"]["step"]
    expected = [(s, 1.0) for s in range(1, 31)] + [(s, 2.0) for s in range(31, 61)]
    assert expected == points(task)


def test_a_journal_that_rewound_a_series_still_delivers_its_task_fields(
    tmp_path: Path, server: ServerHandle
) -> None:
    """The service holds steps 1-50; the journal went back to step 1 and saved a checkpoint.

    Its series wins from the first differing index, so the service is not
    "ahead" of it: its checkpoint path and status are sent too. Before, the
    longer stored series kept every task field of the journal out (found by
    the stateful fault machine with journals: a kill after a step went back).
    """
    sink = HttpSink(server.url, "job-7", read_timeout_seconds=5.0)
    assert isinstance(sink.open(timeout_seconds=5.0), Opened)
    sink.send(loss_update(0, list(range(1, 51)), 1.0, step=50), timeout_seconds=5.0)
    sink.close()
    journal = Journal.claim(tmp_path, "job-7", "train")
    assert journal is not None
    journal.reset(LogState(), absolute=True)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    stamp = now.replace("+00:00", "Z")
    journal.append(
        loss_update(
            0, list(range(1, 11)), 2.0, step=10, checkpoint_path="ckpt/10", updated_at=stamp
        )
    )
    journal._release(remove_files=False)

    config = attrs.evolve(config_for(tmp_path), status_at_close="keep")
    sink = HttpSink(server.url, "job-7", read_timeout_seconds=5.0)
    assert Reporter(sink, config, rank=0).start().close(timeout=10.0)

    task = stored(server.url, "job-7")
    assert [(s, 2.0) for s in range(1, 11)] == points(task)
    assert "ckpt/10" == task["status_details"].get("checkpoint_path")
