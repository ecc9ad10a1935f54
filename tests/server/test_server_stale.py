"""Dead runs are visible: a running task silent past ``stale_after_seconds`` is marked stale.

The rule (``server/_stale.py``) is pure and tested on its own; the server is
then driven over real sockets with an injected wall clock, so "four minutes
later" takes no time: ``GET`` of the task, the job list, ``/metrics``,
``trainreport show`` and (in ``test_server_page.py`` style, headless Chromium)
the page all say the same thing.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from browser import Browser, needs_chromium
from trainreport import cli
from trainreport._wire._payloads import parse_stored_task
from trainreport.cli._summary import describe_jobs, describe_task
from trainreport.server import create_app
from trainreport.server._contract import openapi_document
from trainreport.server._stale import describe_silence, is_stale, staleness

JSON = {"Content-Type": "application/json"}
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DEAD = "no update for 4 min: the process may have died"


class ManualClock:
    """A wall clock the test moves by hand (seconds since the epoch)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _call(url: str, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
    body = None if payload is None else json.dumps(payload).encode()
    response = urllib3.request(
        method, url + path, body=body, headers=JSON, retries=False, timeout=20.0
    )
    return response.status, json.loads(response.data) if response.data else None


def _run(url: str, job: str, status: str = "running", task: str = "train") -> None:
    """Write a task the way a reporter does: a writer, then an update with a point."""
    path = f"/v1/jobs/{job}/tasks/{task}"
    generation = _call(url, "POST", path + "/writers", {})[1]["writer_generation"]
    update = {
        "writer_generation": generation,
        "sequence": 1,
        "status": status,
        "status_details": {"phase": "training", "step": 7, "eta_seconds": 600.0},
        "series": {"train_loss": {"offset": 0, "steps": [7], "epochs": [1], "values": [0.5]}},
    }
    assert 200 == _call(url, "POST", path + "/updates", update)[0]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def job() -> str:
    return f"stale-{uuid.uuid4().hex[:8]}"


# -- the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "span"),
    [
        (0, "0 s"),
        (59.9, "59 s"),
        (119, "119 s"),
        (120, "2 min"),
        (245, "4 min"),
        (7199, "119 min"),
        (7200, "2 h"),
        (9000, "2 h 30 min"),
        (2 * 86400 - 1, "47 h 59 min"),
        (3 * 86400 + 5, "3 days"),
        (float("nan"), "0 s"),
    ],
)
def test_the_silence_is_said_in_whole_units_rounded_down(seconds: float, span: str) -> None:
    """Seconds, then minutes, hours and days; never more time than has passed."""
    assert f"no update for {span}: the process may have died" == describe_silence(seconds)


def test_only_a_running_task_silent_for_longer_than_the_limit_is_stale() -> None:
    """At the limit it is not stale yet; one millisecond past it, it is; other statuses never."""
    assert not is_stale("running", T0, now=T0 + 180, stale_after_seconds=180)
    assert is_stale("running", T0, now=T0 + 180.001, stale_after_seconds=180)
    for status in ("pending", "completed", "failed", "cancelled"):
        assert not is_stale(status, T0, now=T0 + 10**6, stale_after_seconds=180)


def test_a_timestamp_that_does_not_parse_is_never_stale() -> None:
    """A damaged row must not fail a read: it reads as not stale."""
    assert staleness("running", "yesterday", now=T0, stale_after_seconds=1) is None


# -- the server -------------------------------------------------------------------------


def test_get_marks_a_silent_running_task_stale_outside_status_details(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Four minutes after its last write: a ``stale`` object beside status_details."""
    server = start_server(clock=clock)
    _run(server.url, job)
    path = f"/v1/jobs/{job}/tasks/train"
    fresh = _call(server.url, "GET", path)[1]
    clock.now += 245.5

    task = _call(server.url, "GET", path)[1]
    light = _call(server.url, "GET", path + "?metrics=false")[1]

    assert "stale" not in fresh
    assert {
        "seconds_since_update": 245,
        "last_update_at": "2027-01-15T08:00:00.000Z",
        "message": DEAD,
    } == task["stale"]
    assert task["stale"] == light["stale"]
    assert "stale" not in task["status_details"]
    assert fresh["status_details"] == task["status_details"]


def test_a_write_and_a_heartbeat_end_the_staleness(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """An update with nothing in it (what a heartbeat sends) counts as a sign of life."""
    server = start_server(clock=clock)
    _run(server.url, job)
    path = f"/v1/jobs/{job}/tasks/train"
    clock.now += 600
    assert "stale" in _call(server.url, "GET", path)[1]
    generation = _call(server.url, "POST", path + "/writers", {})[1]["writer_generation"]

    status, _ = _call(
        server.url, "POST", path + "/updates", {"writer_generation": generation, "sequence": 1}
    )

    assert 200 == status
    assert "stale" not in _call(server.url, "GET", path)[1]


def test_a_finished_or_pending_task_is_never_stale(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Silence after the end (or before the start) says nothing about a process."""
    server = start_server(clock=clock)
    for status in ("completed", "failed", "cancelled", "pending"):
        _run(server.url, job, status, task=status)
    clock.now += 10**6

    statuses = ("completed", "failed", "cancelled", "pending")
    tasks = [_call(server.url, "GET", f"/v1/jobs/{job}/tasks/{s}")[1] for s in statuses]
    summaries = _call(server.url, "GET", f"/v1/jobs/{job}")[1]["tasks"]

    assert [] == [t for t in tasks + summaries if "stale" in t]


def test_stale_after_seconds_is_the_servers_option(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """With 30 s, 31 s of silence is stale; the default 180 s is not reached yet."""
    short = start_server(clock=clock, stale_after_seconds=30)
    default = start_server(clock=clock)
    for server in (short, default):
        _run(server.url, job)
    clock.now += 31

    answers = [_call(s.url, "GET", f"/v1/jobs/{job}/tasks/train")[1] for s in (short, default)]

    assert ["no update for 31 s: the process may have died", None] == [
        a.get("stale", {}).get("message") for a in answers
    ]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_a_stale_limit_that_is_not_a_positive_number_is_refused(tmp_path: Path, bad: float) -> None:
    """create_app refuses it; ``trainreport serve --stale-after 0`` exits 2 (argparse)."""
    with pytest.raises(ValueError, match="stale_after_seconds"):
        create_app(tmp_path / "x.db", stale_after_seconds=bad)


def test_serve_reads_stale_after() -> None:
    """``--stale-after SECONDS``, 180 by default; zero is refused before anything starts."""
    parser = cli.build_parser()

    assert 180.0 == parser.parse_args(["serve"]).stale_after
    assert 45.0 == parser.parse_args(["serve", "--stale-after", "45"]).stale_after
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["serve", "--stale-after", "0"])
    assert 2 == exited.value.code


def test_the_job_list_and_the_job_mark_the_stale_task_only(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Two running tasks, one silent: only its summary carries ``stale``, in every job view."""
    server = start_server(clock=clock)
    _run(server.url, job, task="dead")
    clock.now += 200
    _run(server.url, job, task="alive")

    listed = _call(server.url, "GET", "/v1/jobs")[1]["jobs"][0]["tasks"]
    one = _call(server.url, "GET", f"/v1/jobs/{job}")[1]["tasks"]

    for tasks in (listed, one):
        marks = {t["task_id"]: t.get("stale", {}).get("message") for t in tasks}
        assert {"dead": "no update for 3 min: the process may have died", "alive": None} == marks


def test_the_stale_answers_follow_the_published_contract(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """GET of a stale task and the job list validate against docs/openapi.json's schemas."""
    server = start_server(clock=clock)
    _run(server.url, job)
    clock.now += 999
    document = openapi_document()
    registry: Registry[Any] = Registry().with_resource(
        "urn:c", Resource.from_contents(document, default_specification=DRAFT202012)
    )

    def errors(name: str, answer: Any) -> list[str]:
        validator = jsonschema.Draft202012Validator(
            {"$ref": f"urn:c#/components/schemas/{name}"}, registry=registry
        )
        return [e.message for e in validator.iter_errors(answer)]

    task = _call(server.url, "GET", f"/v1/jobs/{job}/tasks/train")[1]
    jobs = _call(server.url, "GET", "/v1/jobs")[1]

    assert "stale" in task
    assert ([], []) == (errors("Task", task), errors("JobList", jobs))
    assert errors("Task", {**task, "stale": {"message": DEAD}})  # the shape is pinned


def test_a_plain_job_api_client_ignores_the_stale_field(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Resuming from a stale task reads the same state as from the task without the field."""
    server = start_server(clock=clock)
    _run(server.url, job)
    clock.now += 999
    task = _call(server.url, "GET", f"/v1/jobs/{job}/tasks/train")[1]
    plain = {k: v for k, v in task.items() if k != "stale"}

    assert "stale" in task
    assert parse_stored_task(plain) == parse_stored_task(task)


def _metric(url: str, name: str) -> float:
    text = urllib3.request("GET", url + "/metrics", retries=False, timeout=20.0).data.decode()
    values = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]
    assert 1 == len(values), name
    return values[0]


def test_the_stale_tasks_gauge_counts_by_the_same_rule(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Running and silent past the limit: counted; fresh, finished or at the limit: not."""
    server = start_server(clock=clock)
    _run(server.url, job, task="a")
    _run(server.url, job, task="b")
    _run(server.url, job, "completed", task="done")
    assert 0 == _metric(server.url, "trainreport_stale_tasks")
    clock.now += 180
    _run(server.url, job, task="fresh")
    assert 0 == _metric(server.url, "trainreport_stale_tasks")  # at the limit: not yet
    clock.now += 0.5

    stale = _metric(server.url, "trainreport_stale_tasks")
    marked = [
        t["task_id"]
        for t in _call(server.url, "GET", f"/v1/jobs/{job}")[1]["tasks"]
        if "stale" in t
    ]

    assert 2 == stale
    assert ["a", "b"] == marked
    assert 3 == _metric(server.url, "trainreport_active_tasks")


# -- readers ----------------------------------------------------------------------------


def test_show_prints_the_stale_message_in_place_of_the_eta(
    start_server: Any, clock: ManualClock, job: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trainreport show`` for the task and for the job list says the process may have died."""
    server = start_server(clock=clock)
    _run(server.url, job)
    fresh = describe_task(_call(server.url, "GET", f"/v1/jobs/{job}/tasks/train")[1])
    clock.now += 245

    assert 0 == cli.main(["show", "--url", server.url, job])
    task_text = capsys.readouterr().out
    assert 0 == cli.main(["show", "--url", server.url])
    list_text = capsys.readouterr().out

    assert "ETA" in fresh.splitlines()[0]
    first = task_text.splitlines()[0]
    assert DEAD in first
    assert "ETA" not in first
    assert DEAD in list_text


def test_summaries_of_a_plain_task_show_no_stale_message() -> None:
    """Without the field (a plain job API, a run log) the ETA is shown as before."""
    task = {"status": "running", "status_details": {"eta_seconds": 90.0}}
    jobs = [{"job_id": "j", "tasks": [{"task_id": "t", "status": "running"}]}]

    assert "may have died" not in describe_task(task) + describe_jobs(jobs)
    assert "ETA" in describe_task(task)


def _page_eta(browser: Browser, url: str, job: str) -> str:
    """The text of the task page's ETA box (the ``.stat`` whose key reads ``eta``)."""
    browser.open(f"{url}/jobs/{job}/tasks/train")
    browser.wait_for("document.querySelector('.stat') !== null")
    text = browser.evaluate(
        "Array.from(document.querySelectorAll('.stat')).find((s) => "
        "s.querySelector('.k').textContent === 'eta').querySelector('.v').textContent"
    )
    return str(text)


@needs_chromium
def test_the_page_shows_the_stale_message_in_place_of_the_eta(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Headless Chromium: the task page's ETA box and the job list's row say it."""
    server = start_server(clock=clock)
    _run(server.url, job)
    clock.now += 245

    with Browser() as browser:
        eta = _page_eta(browser, server.url, job)
        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('table.tasks') !== null")
        row = browser.evaluate("document.querySelector('table.tasks tbody tr').innerText")

    assert DEAD == eta
    assert DEAD in row.split("\t")


@needs_chromium
def test_the_job_list_shows_the_whole_stale_message(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Its cell wraps instead of cutting the message to "no update for 4…"; its title holds it."""
    server = start_server(clock=clock)
    _run(server.url, job)
    clock.now += 245

    with Browser() as browser:
        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('td.stale') !== null")
        cell = browser.evaluate(
            "(() => { const td = document.querySelector('td.stale');"
            " return [td.title, td.scrollWidth <= td.clientWidth,"
            " getComputedStyle(td).textOverflow]; })()"
        )

    assert [DEAD, True] == cell[:2]
    assert "ellipsis" != cell[2]


@needs_chromium
def test_a_live_task_page_still_shows_its_eta(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """The message replaces the ETA only when stale: a fresh run shows its ETA."""
    server = start_server(clock=clock)
    _run(server.url, job)
    clock.now += 30

    with Browser() as browser:
        eta = _page_eta(browser, server.url, job)

    assert "may have died" not in eta
    assert eta not in ("", "\N{EN DASH}")


def test_the_server_clock_is_the_injected_one(
    start_server: Any, clock: ManualClock, job: str
) -> None:
    """Writes are stamped with the app's clock, so staleness and timestamps agree."""
    server = start_server(clock=clock)
    _run(server.url, job)

    summary = _call(server.url, "GET", f"/v1/jobs/{job}")[1]

    assert "2027-01-15T08:00:00.000Z" == summary["tasks"][0]["updated_at"]
