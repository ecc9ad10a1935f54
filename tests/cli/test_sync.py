"""``trainreport sync``: the upload plan (pure), and the command against the real server.

The end-to-end tests run ``python -m trainreport.cli sync`` in a subprocess against
the reference server over real sockets, in both wire modes (the series-suffix
extension, and full-state PATCH with ``--full-state``), with logs written by a
real FileSink run.
"""

from __future__ import annotations

import json
import subprocess
import time
from array import array
from pathlib import Path
from typing import Any

import pytest
import urllib3

from helpers import ScriptedSink, clean_env, curve, run_cli
from trainreport import (
    FileSink,
    HttpSink,
    MemorySink,
    Reporter,
    ReportingConfig,
    Resynchronise,
    read_task,
)
from trainreport._environment import auth_hint
from trainreport._runlog._plan import SyncError, plan_recovery, plan_sync
from trainreport._runlog._state import LogState
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport.cli._sync import sync as sync_log

pytestmark = pytest.mark.timeout(120)

MODES = ["extension", "full-state"]


def state_of(task: dict[str, Any]) -> LogState:
    return LogState.from_task(task)


def task_with(curves: dict[str, list[int]], status: str = "running", **details: Any) -> Any:
    return {
        "status": status,
        "status_details": {
            **details,
            "metrics": {
                name: [{"step": s, "epoch": 1, "value": s / 10} for s in steps]
                for name, steps in curves.items()
            },
        },
    }


# -- the plan ---------------------------------------------------------------------------


def test_plan_sends_each_series_from_the_services_length() -> None:
    """Points past the service's length are sent as suffixes at that length, nothing twice."""
    log = state_of(task_with({"a": [1, 2, 3, 4], "b": [1, 2]}, updated_at="2026-01-01T00:00:10Z"))
    stored = task_with({"a": [1, 2]}, updated_at="2026-01-01T00:00:05Z")

    plan = plan_sync(log, stored, full_state=False)

    assert plan.update is not None
    sent = {s.name: (s.offset, list(s.steps)) for s in plan.update.series or ()}
    assert {"a": (2, [3, 4]), "b": (0, [1, 2])} == sent
    assert plan.details_sent
    assert "running" == plan.update.status


def test_plan_in_full_state_mode_sends_whole_merged_curves_and_every_stored_series() -> None:
    """A plain job API replaces metrics wholesale: the stored-only series goes back as stored."""
    log = state_of(task_with({"a": [1, 2, 3]}))
    stored = task_with({"a": [1], "other": [5, 6]})

    plan = plan_sync(log, stored, full_state=True)

    assert plan.update is not None
    assert plan.update.full_state
    sent = {s.name: (s.offset, list(s.steps)) for s in plan.update.series or ()}
    assert {"a": (0, [1, 2, 3]), "other": (0, [5, 6])} == sent


def test_plan_in_full_state_mode_sends_back_a_stored_series_it_cannot_parse_as_stored() -> None:
    """Damage is judged per series: an unreadable stored series is never overwritten."""
    log = state_of(task_with({"a": [1, 2, 3]}))
    stored = task_with({"a": [1]})
    foreign = [{"step": 9}, {"step": 3}]  # another tool's series, steps going backwards
    stored["status_details"]["metrics"]["other"] = foreign

    plan = plan_sync(log, stored, full_state=True)

    assert plan.update is not None
    assert ["a"] == [s.name for s in plan.update.series or ()]
    assert {"other": foreign} == dict(plan.update.foreign_series)


def test_plan_never_shortens_a_longer_stored_series_nor_overwrites_newer_fields() -> None:
    """The service holds more of a: a is left as stored and the log's fields are not sent."""
    log = state_of(task_with({"a": [1, 2], "b": [1, 2]}, "completed"))
    stored = task_with({"a": [1, 2, 3], "b": [1]})

    plan = plan_sync(log, stored, full_state=True)

    outcomes = {o.name: o for o in plan.series}
    assert outcomes["a"].sent_from is None
    assert "holds 1 more" in outcomes["a"].note
    assert not plan.details_sent
    assert plan.update is not None
    sent = {s.name: list(s.steps) for s in plan.update.series or ()}
    assert {"a": [1, 2, 3], "b": [1, 2]} == sent
    assert plan.update.status is None


def test_plan_leaves_a_series_whose_stored_points_differ() -> None:
    """Another run's curve under the same name is not appended to."""
    log = state_of(task_with({"a": [1, 2, 3, 4]}))
    stored = task_with({"a": [1, 7]})

    plan = plan_sync(log, stored, full_state=False)

    assert plan.series[0].sent_from is None
    assert "differs from the service's at index 1" in plan.series[0].note


def test_plan_with_everything_stored_sends_nothing() -> None:
    """The same task on both sides: no update at all."""
    task = task_with({"a": [1, 2]}, updated_at="2026-01-01T00:00:05Z", step=2)
    plan = plan_sync(state_of(task), json.loads(json.dumps(task)), full_state=False)
    assert plan.update is None
    assert "holds them already" in plan.details_note


def test_plan_of_fields_older_than_the_services_sends_only_points() -> None:
    """The service's updated_at is later: its status and fields stay."""
    log = state_of(task_with({"a": [1, 2]}, "failed", updated_at="2026-01-01T00:00:05Z"))
    stored = task_with({"a": [1]}, updated_at="2026-01-01T00:00:09Z")

    plan = plan_sync(log, stored, full_state=False)

    assert plan.update is not None
    assert plan.update.status is None
    assert {} == plan.update.status_details
    assert "newer" in plan.details_note


def test_plan_of_a_trimmed_journal_sends_only_what_the_service_lacks() -> None:
    """A log whose series starts at index 3: the service must hold at least 3 points."""
    log = LogState()
    steps = [1, 2, 3, 4, 5]
    log.apply(
        Update(
            "running",
            {},
            (SeriesUpdate("a", 0, array("q", steps), array("i", [1] * 5), array("d", [0.1] * 5)),),
            False,
        )
    )
    log.trim({"a": 3})
    behind = plan_sync(log, task_with({"a": [1]}), full_state=False)
    assert behind.series[0].sent_from is None
    assert "lacks points" in behind.series[0].note

    caught_up = task_with({"a": [1, 2, 3, 4]})
    caught_up["status_details"]["metrics"]["a"][3]["value"] = 0.1
    plan = plan_sync(log, caught_up, full_state=True)
    assert plan.update is not None
    assert [1, 2, 3, 4, 5] == list((plan.update.series or ())[0].steps)


def test_plan_refuses_a_stored_task_it_cannot_parse() -> None:
    """Curves this client cannot read are never overwritten."""
    with pytest.raises(SyncError, match="cannot be parsed"):
        plan_sync(state_of(task_with({"a": [1]})), {"status_details": 3}, full_state=True)


def test_sync_reopens_once_after_a_resynchronise_and_then_gives_up() -> None:
    """Another writer moved the task between open and send: sync plans again, once."""
    log = state_of(task_with({"a": [1, 2, 3]}, "completed"))
    sink = ScriptedSink(MemorySink(series_suffix=True))
    sink.fail_sends.append(Resynchronise("series_gap"))

    report = sync_log(log, sink)

    assert 2 == sink.inner.opens
    assert [1, 2, 3] == [p[0] for p in curve(sink.task, "a")]
    assert 3 == sum(s.sent for s in report.plan.series)
    stubborn = ScriptedSink(MemorySink(series_suffix=True))
    stubborn.fail_sends.extend([Resynchronise("again"), Resynchronise("and again")])
    with pytest.raises(SyncError, match="and again"):
        sync_log(log, stubborn)


# -- the command against the reference server ---------------------------------------------


def record_run(path: Path, steps: int, job: str = "offline") -> dict[str, Any]:
    """A real run to a FileSink (a send every 10 steps, validation every 20); its task."""
    sink = FileSink(path, job_id=job, task_id="train")
    reporter = Reporter(sink, ReportingConfig(min_report_interval_seconds=3600.0), rank=0).start()
    reporter.report_training_start(max_steps=steps)
    for step in range(1, steps + 1):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step, "lr": 0.1})
        if step % 20 == 0:
            reporter.report_validation(step=step, metrics={"loss": 2.0 / step})
        if step % 10 == 0:
            assert reporter.flush(timeout=10)
    reporter.report_completed()
    assert reporter.close(timeout=10)
    return read_task(path)


def stored(server: Any, job: str = "offline") -> dict[str, Any]:
    response = urllib3.request("GET", f"{server.url}/v1/jobs/{job}/tasks/train", timeout=30.0)
    assert 200 == response.status, response.data[:300]
    task: dict[str, Any] = json.loads(response.data)
    return {"status": task["status"], "status_details": task["status_details"]}


def sync(server: Any, path: Path, mode: str, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["sync", str(path), "--url", server.url, *extra]
    if mode == "full-state":
        args.append("--full-state")
    return run_cli(*args)


def cut_copy(path: Path, records: int) -> Path:
    """A copy of the log holding only its first ``records`` records (an earlier moment)."""
    from trainreport._runlog._format import HEADER, MAGIC  # noqa: PLC0415

    data = path.read_bytes()
    position = len(MAGIC)
    for _ in range(records):
        position += HEADER.size + HEADER.unpack_from(data, position)[3]
    copy = path.with_name("partial.log")
    copy.write_bytes(data[:position])
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_sync_uploads_a_log_and_a_second_sync_sends_nothing(
    server: Any, tmp_path: Path, mode: str
) -> None:
    """The service ends holding the log's task exactly; running sync again changes nothing."""
    log = tmp_path / "run.log"
    task = record_run(log, 60)

    first = sync(server, log, mode)
    after_first = stored(server)
    second = sync(server, log, mode)

    assert 0 == first.returncode, first.stderr
    assert task == after_first
    assert "job 'offline' task 'train'" in first.stdout
    assert "sent 123 points of 3 series and the task fields" in first.stdout
    mode_line = "full-state PATCH" if mode == "full-state" else "series-suffix-v1"
    assert f"mode: {mode_line}" in first.stdout
    assert 0 == second.returncode, second.stderr
    assert "nothing to send: the service holds everything in the log" in second.stdout
    assert after_first == stored(server)


@pytest.mark.slow
def test_sync_reads_the_url_from_trainreport_url_as_show_does(server: Any, tmp_path: Path) -> None:
    """Without --url, ``$TRAINREPORT_URL`` names the service (as for ``show`` and ``demo``);
    with neither, one line and exit 2."""
    log = tmp_path / "run.log"
    task = record_run(log, 10)

    from_env = run_cli("sync", str(log), env=clean_env(TRAINREPORT_URL=server.url))
    neither = run_cli("sync", str(log))

    assert 0 == from_env.returncode, from_env.stderr
    assert task == stored(server)
    assert (2, "give --url URL (or set TRAINREPORT_URL)") == (
        neither.returncode,
        neither.stderr.strip().removeprefix("trainreport sync: "),
    )


def series_times(server: Any, name: str, job: str = "offline") -> list[float | None]:
    """The stored times of one series, from the page's ``/series``."""
    url = f"{server.url}/v1/jobs/{job}/tasks/train/series?names={name}"
    response = urllib3.request("GET", url, timeout=30.0)
    assert 200 == response.status, response.data[:300]
    times: list[float | None] = json.loads(response.data)["series"][name]["times"]
    return times


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_sync_sends_each_points_time_to_a_service_that_keeps_times(
    server: Any, tmp_path: Path, mode: str
) -> None:
    """The log's times reach ``/series`` in suffix mode; the baseline keeps its point shape."""
    log = tmp_path / "run.log"
    before = time.time()
    record_run(log, 30)
    after = time.time()

    assert 0 == sync(server, log, mode).returncode

    times = series_times(server, "train_loss")
    assert 30 == len(times)
    if mode == "extension":
        assert all(t is not None and before - 1.0 <= t <= after + 1.0 for t in times), times
        assert times == sorted(times)  # type: ignore[type-var]
    else:
        assert [None] * 30 == times


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_sync_sends_only_what_the_service_lacks(server: Any, tmp_path: Path, mode: str) -> None:
    """The service holds an earlier moment of the run: the rest arrives, each point once."""
    log = tmp_path / "run.log"
    task = record_run(log, 60)
    partial = cut_copy(log, 4)  # the RUN record and the first sends
    assert 0 == sync(server, partial, mode).returncode
    held = len(curve(stored(server), "train_loss"))
    assert 0 < held < 60

    result = sync(server, log, mode)

    assert 0 == result.returncode, result.stderr
    assert task == stored(server)
    row = next(line for line in result.stdout.splitlines() if "train_loss" in line)
    assert f"{60 - held} (from index {held})" in row


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_sync_of_an_older_log_leaves_what_the_service_holds(
    server: Any, tmp_path: Path, mode: str
) -> None:
    """The service holds more than the log: no series is shortened, no field goes back."""
    log = tmp_path / "run.log"
    record_run(log, 60)
    assert 0 == sync(server, log, mode).returncode
    before = stored(server)

    result = sync(server, cut_copy(log, 4), mode)

    assert 0 == result.returncode, result.stderr
    assert before == stored(server)
    assert "more: kept" in result.stdout


@pytest.mark.slow
def test_sync_of_a_live_runs_partial_upload_completes_it(server: Any, tmp_path: Path) -> None:
    """A run reported part of its curve over HTTP, then went offline; sync uploads the rest."""
    log = tmp_path / "run.log"
    task = record_run(log, 40, job="hybrid")
    live = Reporter(HttpSink(server.url, "hybrid", "train"), rank=0).start()
    for step, _epoch, value in curve(task, "train_loss")[:15]:
        assert value is not None
        live.report_train_step(step=step, metrics={"loss": value})
    assert live.close(timeout=10)

    result = sync(server, log, "extension")

    assert 0 == result.returncode, result.stderr
    assert curve(task, "train_loss") == curve(stored(server, "hybrid"), "train_loss")
    assert "25 (from index 15)" in result.stdout


@pytest.mark.slow
def test_sync_with_a_token_file(token_server: Any, server_token: str, tmp_path: Path) -> None:
    """--token-file passes the bearer token; without it the refusal is explained."""
    log = tmp_path / "run.log"
    record_run(log, 10)
    (tmp_path / "token").write_text(server_token + "\n")

    refused = run_cli("sync", str(log), "--url", token_server.url)
    accepted = run_cli(
        "sync", str(log), "--url", token_server.url, "--token-file", str(tmp_path / "token")
    )

    assert 1 == refused.returncode
    assert "401" in refused.stderr
    assert str(auth_hint(401, token_sent=False, command_line=True)) in refused.stderr
    assert server_token not in refused.stderr + refused.stdout
    assert 0 == accepted.returncode, accepted.stderr


def test_sync_of_a_url_ending_in_v1_drops_it_and_says_so(server: Any, tmp_path: Path) -> None:
    """``--url .../v1`` uploads to the service's root, as ``show`` and ``HttpSink`` do."""
    log = tmp_path / "run.log"
    record_run(log, 10)

    proc = run_cli("sync", str(log), "--url", f"{server.url}/v1")

    assert 0 == proc.returncode, proc.stderr
    assert f"using {server.url}, the base URL without /v1" in proc.stderr


@pytest.mark.slow
def test_sync_uploads_an_old_json_record_under_the_job_named_by_the_file(
    server: Any, tmp_path: Path
) -> None:
    """A record with no RUN fields goes to the job named after the file, task train."""
    path = tmp_path / "legacy-7.json"
    task = task_with({"train_loss": [1, 2, 3]}, "completed", step=3)
    path.write_text(json.dumps(task))

    result = run_cli("sync", str(path), "--url", server.url)

    assert 0 == result.returncode, result.stderr
    assert task == stored(server, "legacy-7")


@pytest.mark.slow
def test_sync_of_an_unreadable_file_or_server_exits_1_with_a_reason(
    server: Any, tmp_path: Path
) -> None:
    """Nothing readable, or nowhere to send: a one-line reason and exit status 1."""
    junk = tmp_path / "junk.log"
    junk.write_bytes(b"\x00\x01 not a log")
    log = tmp_path / "run.log"
    record_run(log, 10)

    unreadable = run_cli("sync", str(junk), "--url", server.url)
    unreachable = run_cli("sync", str(log), "--url", "http://127.0.0.1:9", "--timeout", "2")

    assert 1 == unreadable.returncode
    assert "neither a run log" in unreadable.stderr
    assert "Traceback" not in unreadable.stderr
    assert 1 == unreachable.returncode
    assert "cannot read the stored task" in unreachable.stderr


def test_sync_never_prints_the_urls_credentials(tmp_path: Path) -> None:
    """``sync --url http://user:PW@host/?token=T``: neither shows in what it prints."""
    log = tmp_path / "run.log"
    record_run(log, 3)

    result = run_cli(
        "sync", str(log), "--url", "http://u:s3cret-PW@127.0.0.1:9/?t=s3cret-T", "--timeout", "1"
    )

    assert "-> http://127.0.0.1:9 job" in result.stdout
    assert "s3cret" not in result.stdout + result.stderr


@pytest.mark.slow
def test_sync_of_a_damaged_log_uploads_the_intact_part_and_says_what_was_not(
    server: Any, tmp_path: Path
) -> None:
    """A torn tail: the records before it are sent, and stderr names the damage."""
    log = tmp_path / "run.log"
    record_run(log, 30)
    data = log.read_bytes()
    log.write_bytes(data[:-7])

    result = run_cli("sync", str(log), "--url", server.url)

    assert 0 == result.returncode, result.stderr
    assert "is damaged" in result.stderr
    assert "ends inside a record" in result.stderr
    assert 30 == len(curve(stored(server), "train_loss"))


# -- journals ----------------------------------------------------------------------------

JOURNAL_RUN = {"job_id": "j", "task_id": "train", "journal": "1", "offsets": "absolute"}


def with_values(task: Any, name: str, value_of: Any) -> Any:
    for point in task["status_details"]["metrics"][name]:
        point["value"] = value_of(point["step"])
    return task


def test_a_journal_wins_where_the_service_differs_a_run_log_does_not() -> None:
    """A rewind the service never received: a journal sends from the first difference."""
    journal = task_with({"a": [1, 2, 3, 4]})
    log = state_of(with_values(journal, "a", lambda s: -float(s) if s >= 3 else s / 10))
    stored = task_with({"a": [1, 2, 3, 4]})

    kept = plan_recovery(state_of(journal), {}, stored, full_state=False)
    plan = plan_recovery(log, JOURNAL_RUN, stored, full_state=False)

    assert kept.update is None or kept.update.series is None
    assert plan.update is not None
    assert [("a", 2, [3, 4])] == [
        (s.name, s.offset, list(s.steps)) for s in plan.update.series or ()
    ]
    assert [-3.0, -4.0] == list((plan.update.series or ())[0].values)


@pytest.mark.parametrize("full_state", [False, True], ids=MODES)
def test_a_journal_with_local_offsets_is_placed_after_the_stored_points_before_it(
    full_state: bool,
) -> None:
    """Written before its process read the stored task: indices from its own first point."""
    local = state_of(task_with({"a": [4, 5, 6]}))
    stored = task_with({"a": [1, 2, 3, 4, 5]})

    plan = plan_recovery(local, {**JOURNAL_RUN, "offsets": "local"}, stored, full_state=full_state)

    assert plan.update is not None
    series = {s.name: (s.offset, list(s.steps)) for s in plan.update.series or ()}
    if full_state:
        assert {"a": (0, [1, 2, 3, 4, 5, 6])} == series
    else:
        assert {"a": (5, [6])} == series
