"""What a user who configures logging reads: where the run goes, what was delivered, what to do.

A healthy run says where it reports at ``start()``, that each destination
opened, and at ``close()`` what was delivered, in a handful of INFO lines;
every warning about a problem carries a ``hint`` that says what to do
(docs/engine.md, "Log events").
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import urllib3

from helpers import ScriptedSink, drive
from trainreport import (
    Delivered,
    FileSink,
    HttpSink,
    MemorySink,
    Reporter,
    ReportingConfig,
    RetryLater,
)
from trainreport._engine._destination import Destination, Job, settle_send
from trainreport._engine._scheduler import SendScheduler
from trainreport._environment import auth_hint
from trainreport._record._recorder import Recorder
from trainreport._wire._protocol import split_api_prefix
from trainreport._wire._sink_interface import sink_repr
from trainreport.server import ServerHandle
from trainreport.testing import FakeClock, capture_events

HEALTHY_RUN = """
import logging, sys
from trainreport import FileSink, Reporter
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
with Reporter(FileSink(sys.argv[1]), rank=0) as reporter:
    reporter.report_training_start(max_steps=3)
    for step in range(1, 4):
        reporter.report_train_step(step=step, metrics={"loss": 1.0 / step})
"""


def _events(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == f"trainreport.{name}"]


def test_a_healthy_run_logs_where_it_goes_and_what_was_delivered_in_three_lines(
    tmp_path: Path,
) -> None:
    """``logging.basicConfig(level=INFO)`` and a healthy run to a file: three lines, no more."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINREPORT_")}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HEALTHY_RUN), "run.log"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=env,
    )

    assert 0 == proc.returncode, proc.stderr
    lines = proc.stderr.splitlines()
    events = [line.split()[2] for line in lines if line.startswith("INFO trainreport ")]
    expected = [
        "trainreport.reporting_to",
        "trainreport.destination_opened",
        "trainreport.closed",
    ]
    assert expected == events, proc.stderr
    assert len(lines) == len(events), proc.stderr  # nothing else, at any level
    log = tmp_path / "run.log"
    assert f"trainreport show --file {log}" in lines[0]
    closed = lines[2]
    assert "status='completed'" in closed
    assert "delivered=True" in closed
    assert f"run log {log}" in closed
    assert "3 points delivered, 0 unsent" in closed


def test_the_start_and_close_lines_name_every_destination_and_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two destinations and a journal: each is named at start; close counts per destination."""
    monkeypatch.delenv("TRAINREPORT_JOURNAL")
    http = HttpSink("http://127.0.0.1:9", "job-lines", token="t0ps3cret")  # never opened
    file = FileSink(tmp_path / "run.log")
    config = ReportingConfig(journal_dir=str(tmp_path / "journal"), close_unanswered_seconds=0.1)
    reporter = Reporter(sinks=[MemorySink(), file, http], config=config, rank=0)
    with capture_events() as events:
        drive(reporter)
    (start,) = _events(events, "reporting_to")
    assert [
        "memory (MemorySink.task)",
        f"run log {tmp_path / 'run.log'} (read it: trainreport show --file {tmp_path / 'run.log'})",
        "job-status service http://127.0.0.1:9 job 'job-lines' task 'train'",
    ] == start["destinations"]
    assert str(tmp_path / "journal" / "job-lines" / "train.log") == start["journal"]
    assert "t0ps3cret" not in repr(events)
    reporter.close(timeout=0.2)


def test_the_first_open_of_the_reference_server_names_its_chart_page(server: ServerHandle) -> None:
    """After the first successful open: ``destination_opened`` with the task's page URL."""
    reporter = Reporter(HttpSink(server.url, "job-page", "fit"), rank=0)
    with capture_events() as events:
        reporter.start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        reporter.report_completed()
        assert reporter.close(timeout=10)

    (opened,) = _events(events, "destination_opened")
    assert f"{server.url}/jobs/job-page/tasks/fit" == opened["page"]
    assert "series-suffix" == opened["wire_mode"]
    page = urllib3.request("GET", opened["page"])
    assert 200 == page.status
    (closed,) = _events(events, "closed")
    assert "completed" == closed["status"]
    assert [
        f"job-status service {server.url} job 'job-page' task 'fit': 1 points delivered, 0 unsent"
    ] == closed["destinations"]


def test_a_destination_that_comes_back_logs_one_recovered_line_with_the_outage() -> None:
    """Three failed sends from t=100, delivered at t=130.5: failures, seconds down, points."""
    recorder = Recorder(ReportingConfig(), destinations=1)
    recorder.start_attempt()
    from trainreport._wire._payloads import StoredState  # noqa: PLC0415

    recorder.seed(StoredState(series={}))
    dest = Destination(index=0, sink=MemorySink(), scheduler=SendScheduler(backoff_jitter=0.0))
    dest.label = "dest"
    build = recorder.build_update(0, wall="2026-01-01T00:00:00.000Z", full_state=True)
    job = Job(build)
    with capture_events() as events:
        for now in (100.0, 110.0, 120.0):
            settle_send(dest, recorder, job, RetryLater("down"), now, wall="w", queue_empty=True)
        settle_send(dest, recorder, job, Delivered(), 130.5, wall="w", queue_empty=True)
        settle_send(dest, recorder, job, Delivered(), 140.0, wall="w", queue_empty=True)

    (recovered,) = _events(events, "destination_recovered")
    assert "dest" == recovered["destination"]
    assert 3 == recovered["consecutive_failures"]
    assert 30.5 == recovered["down_seconds"]
    assert 0 == recovered["points_unsent"]
    assert "down" == recovered["last_error"]


def test_an_undelivered_close_with_a_journal_names_it_and_the_sync_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service stays down: ``close_undelivered`` says the points are safe, and how to upload."""
    monkeypatch.delenv("TRAINREPORT_JOURNAL")
    sink = ScriptedSink()
    sink.open_results.extend([RetryLater("down", unreachable=True)] * 50)
    sink.job_id, sink.task_id = "job-safe", "train"  # type: ignore[attr-defined]
    config = ReportingConfig(
        journal_dir=str(tmp_path), close_unanswered_seconds=0.1, backoff_initial_seconds=0.01
    )
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0)
    worker = drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker.cycle()
    with capture_events() as events:
        assert not reporter.close(timeout=0.5)

    (warning,) = _events(events, "close_undelivered")
    journal = tmp_path / "job-safe" / "train.log"
    assert str(journal) == warning["journal"]
    assert f"safe in the journal {journal}" in warning["hint"]
    assert journal.exists()


def test_an_undelivered_close_to_a_service_names_the_sync_command_with_its_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an ``HttpSink`` the hint is the exact command: ``trainreport sync PATH --url URL``."""
    monkeypatch.delenv("TRAINREPORT_JOURNAL")
    sink = HttpSink("http://127.0.0.1:9", "job-sync", connect_timeout_seconds=0.2)
    config = ReportingConfig(journal_dir=str(tmp_path), close_unanswered_seconds=0.2)
    reporter = Reporter(sink, config, rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with capture_events() as events:
        assert not reporter.close(timeout=2.0)

    (warning,) = _events(events, "close_undelivered")
    journal = tmp_path / "job-sync" / "train.log"
    assert f"trainreport sync {journal} --url http://127.0.0.1:9" in warning["hint"]


@pytest.mark.parametrize(
    ("credentials", "flag"),
    [
        ({"base_url": "http://user:s3cret-PW@127.0.0.1:9"}, "--token-file TOKEN_FILE"),
        ({"token": "s3cret-PW"}, "--token-file TOKEN_FILE"),
        ({"token_file": "/run/secrets/s3cret-PW-file"}, "--token-file /run/secrets/"),
    ],
)
def test_the_sync_hint_of_a_sink_with_credentials_is_copyable_and_names_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, credentials: dict[str, Any], flag: str
) -> None:
    """No ``***@`` to copy (it would send Basic ``***``): the bare URL and ``--token-file``."""
    monkeypatch.delenv("TRAINREPORT_JOURNAL")
    base_url = credentials.pop("base_url", "http://127.0.0.1:9")
    sink = HttpSink(base_url, "job-sync", connect_timeout_seconds=0.2, **credentials)
    config = ReportingConfig(journal_dir=str(tmp_path), close_unanswered_seconds=0.2)
    with capture_events() as events:
        reporter = Reporter(sink, config, rank=0).start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        assert not reporter.close(timeout=2.0)

    (warning,) = _events(events, "close_undelivered")
    journal = tmp_path / "job-sync" / "train.log"
    assert f"trainreport sync {journal} --url http://127.0.0.1:9 {flag}" in warning["hint"]
    assert "s3cret-PW" not in repr(events).replace("/run/secrets/s3cret-PW-file", "")
    assert "***" not in warning["hint"]


def test_an_undelivered_close_without_a_journal_says_what_is_lost() -> None:
    """No journal, no run log: the hint says the points reached nothing that keeps them."""
    sink = ScriptedSink()
    sink.open_results.extend([RetryLater("down", unreachable=True)] * 50)
    config = ReportingConfig(close_unanswered_seconds=0.1)
    reporter = Reporter(sink, config, clock=FakeClock(), rank=0)
    worker = drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0, "lr": 0.1})
    worker.cycle()
    with capture_events() as events:
        assert not reporter.close(timeout=0.5)

    (warning,) = _events(events, "close_undelivered")
    assert "journal" not in warning
    assert "lost" in warning["hint"]
    assert "2 points" in warning["hint"]


class _KeepsARunLog(ScriptedSink):
    """A custom sink that keeps a run log of its own (``Sink.run_log_path``), not a FileSink."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def run_log_path(self) -> str | None:
        return str(self.path)


def _close_beside(keeper: Any) -> dict[str, Any]:
    """Close a reporter whose first destination never answers and whose second is ``keeper``."""
    down = ScriptedSink()
    down.open_results.extend([RetryLater("down", unreachable=True)] * 500)
    config = ReportingConfig(close_unanswered_seconds=0.1, journal=False)
    reporter = Reporter(sinks=[down, keeper], config=config, rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with capture_events() as events:
        assert not reporter.close(timeout=5.0)
    (warning,) = _events(events, "close_undelivered")
    return warning


def test_an_undelivered_close_beside_a_file_sink_names_its_run_log(tmp_path: Path) -> None:
    """The destination that lacks the points is told the run log that holds them, to sync."""
    warning = _close_beside(FileSink(tmp_path / "run.log"))

    log = tmp_path / "run.log"
    hint = f"the run log {log} holds them: upload them with `trainreport sync {log}"
    assert hint in warning["hint"]


def test_the_run_log_a_close_names_is_any_sink_s_that_keeps_one(tmp_path: Path) -> None:
    """close() asks the Sink interface (``run_log_path``), not for a FileSink: any sink counts."""
    warning = _close_beside(_KeepsARunLog(tmp_path / "custom.log"))

    log = tmp_path / "custom.log"
    hint = f"the run log {log} holds them: upload them with `trainreport sync {log}"
    assert hint in warning["hint"]


def test_only_a_sink_that_keeps_a_run_log_names_one(tmp_path: Path) -> None:
    """``Sink.run_log_path()`` is None by default; a FileSink's is its log's absolute path."""
    relative = Path(os.path.relpath(tmp_path / "run.log"))

    assert (None, None, os.path.abspath(relative)) == (
        MemorySink().run_log_path(),
        HttpSink("http://127.0.0.1:9", "job").run_log_path(),
        FileSink(relative).run_log_path(),
    )


class _LongRepr(ScriptedSink):
    """A custom sink with a very long repr and no ``describe()`` of its own."""

    def __repr__(self) -> str:
        return "L" * 1000


class _BrokenRepr(ScriptedSink):
    """A custom sink whose repr raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    ("sink", "expected"), [(_LongRepr(), "L" * 300), (_BrokenRepr(), "<_BrokenRepr>")]
)
def test_a_sink_is_named_in_log_lines_by_one_rule(sink: ScriptedSink, expected: str) -> None:
    """The ``destination`` field and the default ``describe()``: the repr, cut, or the type."""
    label = Destination(index=0, sink=sink, scheduler=SendScheduler()).label

    assert (expected, expected, expected) == (sink_repr(sink), label, sink.describe())


def test_a_missing_token_is_a_hint_for_the_library_user(token_server: ServerHandle) -> None:
    """401 without a token: ``send_rejected`` says which variable to set, not which header."""
    reporter = Reporter(HttpSink(token_server.url, "job-401"), rank=0)
    with capture_events() as events:
        reporter.start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        assert not reporter.close(timeout=2.0)

    (rejected,) = _events(events, "send_rejected")
    assert 401 == rejected["status_code"]
    assert auth_hint(401, token_sent=False) == rejected["hint"]
    assert "TRAINREPORT_TOKEN_FILE" in rejected["hint"]


def test_the_token_hint_is_one_rule_for_library_and_command_line() -> None:
    """401 missing, 401 refused, 403; another status has no hint."""
    assert "set TRAINREPORT_TOKEN or TRAINREPORT_TOKEN_FILE" in str(
        auth_hint(401, token_sent=False)
    )
    assert "--token-file" in str(auth_hint(401, token_sent=False, command_line=True))
    assert "refused" in str(auth_hint(401, token_sent=True))
    assert "its own job" in str(auth_hint(403, token_sent=True))
    assert auth_hint(404, token_sent=True) is None
    assert auth_hint(None, token_sent=False) is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://h:8321/v1", ("http://h:8321", True)),
        ("http://h:8321/v1/", ("http://h:8321", True)),
        ("https://h/prefix/v1", ("https://h/prefix", True)),
        ("http://h:8321/", ("http://h:8321", False)),
        ("http://v1", ("http://v1", False)),
        ("http://h/v10", ("http://h/v10", False)),
    ],
)
def test_a_trailing_v1_is_removed_from_a_base_url(given: str, expected: tuple[str, bool]) -> None:
    """One rule: the API prefix at the end of a base URL goes; a host named v1 stays."""
    assert expected == split_api_prefix(given)


def test_an_http_sink_given_the_v1_url_reports_to_the_service_and_says_so_once(
    server: ServerHandle,
) -> None:
    """``HttpSink(".../v1")`` delivers (no bare 404), with one ``base_url_normalised``."""
    with capture_events() as events:
        sink = HttpSink(f"{server.url}/v1/", "job-v1")
        reporter = Reporter(sink, rank=0).start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        reporter.report_completed()
        assert reporter.close(timeout=10)

    assert server.url == sink.base_url
    (normalised,) = _events(events, "base_url_normalised")
    assert server.url == normalised["base_url"]


def test_starting_at_close_hints_at_start() -> None:
    """A forgotten ``start()``: the warning says to call it (or use ``with``)."""
    reporter = Reporter(MemorySink(), rank=0)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with capture_events() as events:
        assert reporter.close(timeout=5)

    (warning,) = _events(events, "started_at_close")
    assert "start()" in warning["hint"]


def test_a_report_after_close_hints_at_the_order() -> None:
    """A report after ``close()`` is dropped; the warning says to close after the last report."""
    reporter = Reporter(MemorySink(), rank=0).start()
    assert reporter.close(timeout=5)
    with capture_events() as events:
        reporter.report_train_step(step=2, metrics={"loss": 1.0})

    (warning,) = _events(events, "report_after_close")
    assert "close()" in warning["hint"]


def test_a_run_ended_without_status_hints_at_the_terminal_reports() -> None:
    """The exit hook without a terminal report, ``status_at_close="keep"``: the hint names
    ``report_completed`` and ``with``."""
    config = ReportingConfig(status_at_close="keep")
    reporter = Reporter(MemorySink(), config, rank=0).start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    with capture_events() as events:
        reporter._close_at_exit(None)

    (warning,) = _events(events, "run_ended_without_status")
    assert "report_completed()" in warning["hint"]
