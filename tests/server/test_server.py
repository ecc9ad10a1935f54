"""The reference job-status service over real sockets (urllib3 client, no mocks).

Most tests share one in-thread server per module (``module_server``) and use
their own job ids; tests that need other limits, a token or a restart start
their own.
"""

from __future__ import annotations

import array
import base64
import gzip
import json
import math
import os
import signal
import sqlite3
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import urllib3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import new_database
from trainreport import cli
from trainreport.server import (
    DEFAULT_MAX_BODY_BYTES,
    ServerHandle,
    create_app,
    start_in_thread,
)
from trainreport.server._db._database import (
    Applied,
    Database,
    SeriesGap,
    StaleAttempt,
    WriterOpened,
)
from trainreport.server._db._migrations import MIGRATIONS
from trainreport.server._db._migrations import ddl as migration_ddl
from trainreport.server._db._sqlite import SqliteBackend
from trainreport.server._wire import (
    ApiError,
    SeriesPoints,
    TaskUpdate,
    WriterClaim,
    parse_json,
    validate_patch,
    validate_update,
)

pytestmark = pytest.mark.both_backends

# -- client helpers ---------------------------------------------------------------------


class Reply(NamedTuple):
    status: int
    body: Any
    headers: Any


_MISSING: Any = object()


class Client:
    """A thin urllib3 client: JSON in, ``Reply(status, parsed body, headers)`` out."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=20.0))
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def call(
        self,
        method: str,
        path: str,
        payload: Any = _MISSING,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> Reply:
        all_headers = {**self.headers, **(headers or {})}
        if payload is not _MISSING:
            body = json.dumps(payload).encode()
        if method not in ("GET", "HEAD", "OPTIONS"):  # writes are JSON (docs/server.md)
            all_headers.setdefault("Content-Type", "application/json")
        response = self.pool.request(
            method, self.url + path, body=body, headers=all_headers, **kwargs
        )
        data = response.data
        is_json = response.headers.get("content-type", "").startswith("application/json")
        return Reply(response.status, json.loads(data) if is_json else data, response.headers)

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.call("GET", path, **kwargs)

    def patch(self, path: str, payload: Any = _MISSING, **kwargs: Any) -> Reply:
        return self.call("PATCH", path, payload, **kwargs)

    def post(self, path: str, payload: Any = _MISSING, **kwargs: Any) -> Reply:
        return self.call("POST", path, payload, **kwargs)

    def close(self) -> None:
        self.pool.clear()


def columns(
    offset: int,
    steps: list[int],
    values: list[Any],
    epochs: list[int | None] | None = None,
) -> dict[str, Any]:
    """One series suffix in the extension's column shape (epoch 1 unless given)."""
    return {
        "offset": offset,
        "steps": steps,
        "epochs": epochs if epochs is not None else [1] * len(steps),
        "values": values,
    }


def curve(reply: Reply, name: str) -> list[tuple[int, float | None]]:
    """``[(step, value), ...]`` of one series from a GET task reply."""
    return [(p["step"], p["value"]) for p in reply.body["status_details"]["metrics"][name]]


@pytest.fixture
def make_client() -> Iterator[Callable[..., Client]]:
    """A factory ``make_client(url, token=None)``; every client is closed at teardown."""
    made: list[Client] = []

    def make(url: str, token: str | None = None) -> Client:
        made.append(Client(url, token))
        return made[-1]

    yield make
    for client in made:
        client.close()


@pytest.fixture
def api(module_server: ServerHandle, make_client: Callable[..., Client]) -> Client:
    return make_client(module_server.url)


@pytest.fixture
def task() -> str:
    """A task path on a job id of its own: ``/v1/jobs/<unique>/tasks/train``."""
    return f"/v1/jobs/job-{uuid.uuid4().hex[:12]}/tasks/train"


def open_writer(api: Client, task: str) -> int:
    reply = api.post(task + "/writers", {})
    assert 200 == reply.status
    generation: int = reply.body["writer_generation"]
    return generation


# -- baseline ---------------------------------------------------------------------------


def test_get_of_a_task_never_written_is_404_json(api: Client, task: str) -> None:
    """A task nobody wrote is a 404 with a JSON error body (the client's "new task")."""
    reply = api.get(task)

    assert (404, "not_found") == (reply.status, reply.body["error"])


def test_patch_creates_the_task_with_status_pending_by_default(api: Client, task: str) -> None:
    """PATCH to a missing task creates it (and its job); status defaults to pending."""
    reply = api.patch(task, {"status_details": {"phase": "setup"}})

    assert (200, {"status": "pending", "cancel_requested": False}) == (reply.status, reply.body)
    assert {"status": "pending", "status_details": {"phase": "setup"}} == api.get(task).body


def test_patch_merges_status_details_shallowly(api: Client, task: str) -> None:
    """A sent key replaces the stored value wholesale (nested objects too); others are kept."""
    api.patch(task, {"status": "running", "status_details": {"step": 1, "hp": {"a": 1, "b": 2}}})
    api.patch(task, {"status_details": {"step": 2, "hp": {"c": 3}, "phase": "training"}})

    assert {
        "status": "running",
        "status_details": {"step": 2, "hp": {"c": 3}, "phase": "training"},
    } == api.get(task).body


def test_patch_metrics_replace_every_stored_series(api: Client, task: str) -> None:
    """``metrics`` is sent complete: series missing from it are removed, the rest replaced."""
    api.patch(
        task,
        {
            "status_details": {
                "metrics": {
                    "train_loss": [{"step": 1, "epoch": 1, "value": 2.0}],
                    "train_lr": [{"step": 1, "epoch": 1, "value": 0.1}],
                }
            }
        },
    )
    api.patch(
        task,
        {"status_details": {"metrics": {"train_loss": [{"step": 5, "epoch": 1, "value": 1.0}]}}},
    )

    assert {"train_loss": [{"step": 5, "epoch": 1, "value": 1.0}]} == api.get(task).body[
        "status_details"
    ]["metrics"]


def test_patch_without_metrics_keeps_the_series(api: Client, task: str) -> None:
    """A PATCH that does not send ``metrics`` leaves every stored point alone."""
    api.patch(
        task,
        {"status_details": {"metrics": {"loss": [{"step": 1, "epoch": None, "value": None}]}}},
    )
    api.patch(task, {"status": "running", "status_details": {"step": 3}})

    assert {
        "status": "running",
        "status_details": {
            "step": 3,
            "metrics": {"loss": [{"step": 1, "epoch": None, "value": None}]},
        },
    } == api.get(task).body


def test_get_omits_metrics_when_asked(api: Client, task: str) -> None:
    """``?metrics=false`` (the page's poll) returns the details without the curves."""
    api.patch(task, {"status_details": {"step": 1, "metrics": {"a": [{"step": 1, "value": 1}]}}})

    assert {"step": 1} == api.get(task + "?metrics=false").body["status_details"]


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ([], "$"),
        ({"status": "done"}, "$.status"),
        ({"status": None}, "$.status"),
        ({"stat": "running"}, "$"),
        ({"status_details": []}, "$.status_details"),
        ({"status_details": {"metrics": []}}, "$.status_details.metrics"),
        ({"status_details": {"metrics": {"a": {}}}}, '$.status_details.metrics["a"]'),
        ({"status_details": {"metrics": {"a": [{"step": -1, "value": 1}]}}}, "[0].step"),
        ({"status_details": {"metrics": {"a": [{"step": True, "value": 1}]}}}, "[0].step"),
        ({"status_details": {"metrics": {"a": [{"step": 1.5, "value": 1}]}}}, "[0].step"),
        ({"status_details": {"metrics": {"a": [{"step": 2**63, "value": 1}]}}}, "[0].step"),
        ({"status_details": {"metrics": {"a": [{"step": 1, "value": "x"}]}}}, "[0].value"),
        ({"status_details": {"metrics": {"a": [{"step": 1, "value": False}]}}}, "[0].value"),
        ({"status_details": {"metrics": {"a": [{"step": 1, "value": 10**400}]}}}, "[0].value"),
        ({"status_details": {"metrics": {"a": [{"step": 1, "epoch": -1, "value": 1}]}}}, "epoch"),
        ({"status_details": {"metrics": {"a": [{"step": 1}]}}}, '["a"][0]'),
        ({"status_details": {"metrics": {"a": [{"step": 1, "value": 1, "x": 0}]}}}, '["a"][0]'),
        ({"status_details": {"metrics": {"a": [5]}}}, '["a"][0]'),
        ({"status_details": {"metrics": {"": []}}}, "$.status_details.metrics"),
        ({"status_details": {"metrics": {"x" * 201: []}}}, "$.status_details.metrics"),
        ({"status_details": {"metrics": {"a\nb": []}}}, "$.status_details.metrics"),
    ],
)
def test_invalid_patch_is_422_naming_the_path(
    api: Client, task: str, payload: Any, path: str
) -> None:
    """Every malformed body is refused as a whole with 422 and the path of the problem."""
    reply = api.patch(task, payload)

    assert (422, "invalid_body") == (reply.status, reply.body["error"])
    assert path in reply.body["path"]
    assert 404 == api.get(task).status


def test_series_name_of_200_characters_is_accepted(api: Client, task: str) -> None:
    """The name limit is inclusive: 200 characters (any non-control character) are fine."""
    name = "é" * 199 + "/"

    point = {"step": 1, "epoch": 1, "value": 1.0}
    reply = api.patch(task, {"status_details": {"metrics": {name: [point]}}})

    assert 200 == reply.status
    assert {name: [point]} == api.get(task).body["status_details"]["metrics"]


# -- extension: series-suffix-v1 -------------------------------------------------------


def test_capabilities_announce_the_extension_gzip_and_the_limit(api: Client) -> None:
    """GET /v1/capabilities is what a client discovers the extension from."""
    reply = api.get("/v1/capabilities")

    assert 200 == reply.status
    assert ["series-suffix-v1", "series-times-v1"] == reply.body["extensions"]
    assert ["gzip"] == reply.body["encodings"]
    assert DEFAULT_MAX_BODY_BYTES == reply.body["max_body_bytes"]


def test_opening_a_writer_increments_the_generation_without_creating_the_task(
    api: Client, task: str
) -> None:
    """Each writers call issues generation + 1; the task stays absent until its first update."""
    first = api.post(task + "/writers", {})
    second = api.post(task + "/writers")  # an absent body is fine too

    assert (1, None, {}) == (
        first.body["writer_generation"],
        first.body["task"],
        first.body["series_lengths"],
    )
    assert 2 == second.body["writer_generation"]
    assert 404 == api.get(task).status


def claim(number: int | None = None, started_at: float | None = None) -> dict[str, Any]:
    """A writers body claiming with an attempt identity."""
    return {"attempt": {"number": number, "started_at": started_at}}


def test_a_claim_older_than_the_holders_attempt_is_refused_with_409(api: Client, task: str) -> None:
    """Attempt 2 holds the task: attempt 1 opening late is refused; nothing is fenced."""
    assert 1 == api.post(task + "/writers", claim(2, 100.0)).body["writer_generation"]

    refused = api.post(task + "/writers", claim(1, 200.0))

    assert 409 == refused.status
    assert "stale_attempt" == refused.body["error"]
    assert 1 == refused.body["writer_generation"]
    assert {"number": 2, "started_at": 100.0} == refused.body["holder"]
    update = {"writer_generation": 1, "sequence": 1, "series": {"a": columns(0, [1], [1.0])}}
    assert 200 == api.post(task + "/updates", update).status  # the holder still writes


@pytest.mark.parametrize(
    ("holder", "claimant", "accepted"),
    [
        ((2, 100.0), (2, 100.0), True),  # the same attempt re-opens (after a resynchronise)
        ((2, 100.0), (3, 50.0), True),  # a newer attempt number wins whatever the clock says
        ((None, 100.0), (None, 50.0), False),  # no numbers: the process that started later
        ((None, 100.0), (None, 150.0), True),
        ((2, 100.0), (None, 50.0), False),  # one number only: the start times decide
        ((2, 100.0), (None, None), True),  # a claim without identity (an older client)
        ((None, None), (1, 10.0), True),
    ],
)
def test_claims_follow_the_attempts_order_not_the_order_writers_open(
    api: Client,
    task: str,
    holder: tuple[int | None, float | None],
    claimant: tuple[int | None, float | None],
    accepted: bool,
) -> None:
    """Attempt numbers decide when both have one, else process start times; ties re-open."""
    api.post(task + "/writers", claim(*holder))

    reply = api.post(task + "/writers", claim(*claimant))

    assert (200 if accepted else 409) == reply.status
    if accepted:
        assert 2 == reply.body["writer_generation"]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"attempt": "x"}, "$.attempt"),
        ({"attempt": {"number": -1}}, "$.attempt.number"),
        ({"attempt": {"number": 1.5}}, "$.attempt.number"),
        ({"attempt": {"started_at": "now"}}, "$.attempt.started_at"),
        ({"attempt": {"started_at": -3.0}}, "$.attempt.started_at"),
    ],
)
def test_a_malformed_claim_is_422(api: Client, task: str, body: Any, path: str) -> None:
    """A claim the server cannot order is refused, naming where."""
    reply = api.post(task + "/writers", body)

    assert (422, path) == (reply.status, reply.body["path"])


def test_a_version_1_database_gains_attempt_claims(tmp_path: Path) -> None:
    """A file of the first schema is migrated in place: its writers keep their generation."""
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[0]:  # the first schema's tables, as a version-1 server made them
        conn.execute(migration_ddl(statement, "sqlite"))
    conn.execute("INSERT INTO writers VALUES ('j', 't', 4, 9)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()

    db = Database(path)
    try:
        opened = db.tasks.open_writer("j", "t", WriterClaim(number=1, started_at=5.0))
        assert isinstance(opened, WriterOpened)
        assert 5 == opened.generation
        assert isinstance(
            db.tasks.open_writer("j", "t", WriterClaim(number=0, started_at=9.0)), StaleAttempt
        )
    finally:
        db.close()


def test_writer_open_returns_the_stored_task_and_lengths(api: Client, task: str) -> None:
    """A resuming writer learns the stored task (GET shape) and each series' length."""
    api.patch(
        task,
        {"status": "failed", "status_details": {"metrics": {"a": [{"step": 1, "value": 1.0}]}}},
    )

    reply = api.post(task + "/writers", {})

    assert api.get(task).body == reply.body["task"]
    assert {"a": 1} == reply.body["series_lengths"]


def test_update_appends_suffixes_and_answers_every_length(api: Client, task: str) -> None:
    """Suffixes at the stored length append; the answer lists every series' length."""
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 1, "series": {"a": columns(0, [1, 2], [1.0, 2.0])}},
    )

    reply = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 2,
            "status": "running",
            "series": {"a": columns(2, [3], [3.0]), "b": columns(0, [3], [None])},
        },
    )

    assert {
        "series_lengths": {"a": 3, "b": 1},
        "sequence": 2,
        "status": "running",
        "cancel_requested": False,
    } == reply.body
    task_reply = api.get(task)
    assert [(1, 1.0), (2, 2.0), (3, 3.0)] == curve(task_reply, "a")
    assert [(3, None)] == curve(task_reply, "b")


def test_resending_the_same_suffix_is_idempotent(api: Client, task: str) -> None:
    """ "From index k on, the series is exactly these points": sending it twice changes nothing."""
    gen = open_writer(api, task)
    suffix = {"a": columns(0, [1, 2, 3], [3.0, 2.0, 1.0])}
    api.post(task + "/updates", {"writer_generation": gen, "sequence": 1, "series": suffix})
    before = api.get(task).body

    reply = api.post(task + "/updates", {"writer_generation": gen, "sequence": 2, "series": suffix})

    assert {"a": 3} == reply.body["series_lengths"]
    assert before == api.get(task).body


def test_overlapping_resend_after_a_lost_response_heals(api: Client, task: str) -> None:
    """A client that never heard the answer resends from its last acknowledged length."""
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 1, "series": {"a": columns(0, [1, 2], [1.0, 2.0])}},
    )
    # this answer is "lost": the client still believes the server holds 2 points
    api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 2, "series": {"a": columns(2, [3, 4], [3.0, 4.0])}},
    )

    reply = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 3,
            "series": {"a": columns(2, [3, 4, 5], [3.0, 4.0, 5.0])},
        },
    )

    assert {"a": 5} == reply.body["series_lengths"]
    assert [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0)] == curve(api.get(task), "a")


def test_a_shorter_suffix_truncates_the_series_on_rewind(api: Client, task: str) -> None:
    """An empty suffix below the length truncates; a new suffix replaces the old tail."""
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {
                "a": columns(0, [1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0]),
                "b": columns(0, [2, 4], [0.5, 0.4]),
            },
        },
    )

    reply = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 2,
            "series": {"a": columns(2, [3], [9.0]), "b": columns(1, [], [])},
        },
    )

    assert {"a": 3, "b": 1} == reply.body["series_lengths"]
    task_reply = api.get(task)
    assert [(1, 1.0), (2, 2.0), (3, 9.0)] == curve(task_reply, "a")
    assert [(2, 0.5)] == curve(task_reply, "b")


def test_a_series_emptied_by_a_suffix_is_dropped(api: Client, task: str) -> None:
    """A suffix that leaves a series with no points removes it: GET and the lengths omit it.

    A server keeps points, not names, so what ``GET`` returns equals the client's
    record, where a series a rewind emptied does not exist either.
    """
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {
                "a": columns(0, [1, 2], [1.0, 2.0]),
                "b": columns(0, [2, 4], [0.5, 0.4]),
            },
        },
    )

    reply = api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 2, "series": {"b": columns(0, [], [])}},
    )

    assert {"a": 2} == reply.body["series_lengths"]
    assert {"a"} == set(api.get(task).body["status_details"]["metrics"])
    reply = api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 3, "series": {"a": columns(0, [], [])}},
    )
    assert {} == reply.body["series_lengths"]
    assert "metrics" not in api.get(task).body["status_details"]
    assert {} == api.post(task + "/writers", {}).body["series_lengths"]


def test_a_patch_stores_no_empty_series(api: Client, task: str) -> None:
    """An empty list in a PATCH's ``metrics`` stores no series (nothing to keep)."""
    api.patch(
        task,
        {
            "status_details": {
                "metrics": {"a": [], "b": [{"step": 1, "epoch": 1, "value": 2.0}]},
            }
        },
    )

    assert {"b": [{"step": 1, "epoch": 1, "value": 2.0}]} == api.get(task).body["status_details"][
        "metrics"
    ]


def test_a_gap_is_409_with_the_lengths_and_applies_nothing(api: Client, task: str) -> None:
    """An offset beyond the stored length refuses the whole update and says what is stored."""
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 1, "series": {"a": columns(0, [1], [1.0])}},
    )
    before = api.get(task).body

    reply = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 2,
            "status": "completed",
            "status_details": {"step": 9},
            "series": {"a": columns(1, [2], [2.0]), "b": columns(3, [9], [9.0])},
        },
    )

    assert (409, "series_gap", {"a": 1}) == (
        reply.status,
        reply.body["error"],
        reply.body["series_lengths"],
    )
    assert before == api.get(task).body


def test_a_late_duplicate_sequence_is_ignored(api: Client, task: str) -> None:
    """A sequence at or below the last applied one answers ``duplicate`` and changes nothing."""
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 1, "series": {"a": columns(0, [1], [1.0])}},
    )
    api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 2, "series": {"a": columns(0, [7], [7.0])}},
    )

    late = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "status": "failed",
            "series": {"a": columns(0, [1], [1.0])},
        },
    )
    repeated = api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 2, "series": {"a": columns(0, [8], [8.0])}},
    )

    for reply in (late, repeated):
        assert (200, True, {"a": 1}) == (
            reply.status,
            reply.body["duplicate"],
            reply.body["series_lengths"],
        )
    task_reply = api.get(task)
    assert ("pending", [(7, 7.0)]) == (task_reply.body["status"], curve(task_reply, "a"))


def test_a_stale_writer_is_refused_and_its_data_not_applied(api: Client, task: str) -> None:
    """After a new writer opens, the old generation (a zombie) gets 409 stale_writer."""
    old = open_writer(api, task)
    api.post(
        task + "/updates",
        {"writer_generation": old, "sequence": 1, "series": {"a": columns(0, [1], [1.0])}},
    )
    new = open_writer(api, task)

    reply = api.post(
        task + "/updates",
        {
            "writer_generation": old,
            "sequence": 2,
            "status": "failed",
            "series": {"a": columns(1, [2], [2.0])},
        },
    )

    assert (409, "stale_writer", new) == (
        reply.status,
        reply.body["error"],
        reply.body["writer_generation"],
    )
    task_reply = api.get(task)
    assert ("pending", [(1, 1.0)]) == (task_reply.body["status"], curve(task_reply, "a"))


@pytest.mark.parametrize("generation_offset", [1, 5])
def test_a_generation_never_issued_is_stale(api: Client, task: str, generation_offset: int) -> None:
    """A generation above the current one (or on a task with no writer) is refused too."""
    assert (
        409 == api.post(task + "/updates", {"writer_generation": 1, "sequence": 1}).status
    )  # no writer issued yet
    gen = open_writer(api, task)

    reply = api.post(
        task + "/updates", {"writer_generation": gen + generation_offset, "sequence": 1}
    )

    assert (409, "stale_writer") == (reply.status, reply.body["error"])
    assert 404 == api.get(task).status


def test_update_merges_status_details_shallowly(api: Client, task: str) -> None:
    """Update details merge like PATCH: sent keys replace, others stay, series untouched."""
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "status_details": {"phase": "setup", "hp": {"a": 1}},
            "series": {"a": columns(0, [1], [1.0])},
        },
    )

    api.post(
        task + "/updates",
        {"writer_generation": gen, "sequence": 2, "status_details": {"phase": "training"}},
    )

    assert {
        "phase": "training",
        "hp": {"a": 1},
        "metrics": {"a": [{"step": 1, "epoch": 1, "value": 1.0}]},
    } == api.get(task).body["status_details"]


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_write_that_ends_the_run_removes_the_stored_eta(
    api: Client, task: str, status: str
) -> None:
    """A run that is over has no time left: a terminal status drops ``eta_seconds``.

    The shallow merge would keep the last running ETA (often "0 s") beside
    ``completed``; PATCH and extension updates follow the same rule.
    """
    api.patch(
        task, {"status": "running", "status_details": {"phase": "training", "eta_seconds": 9.5}}
    )
    api.patch(task, {"status": status, "status_details": {"phase": "done", "eta_seconds": 0.0}})
    patched = api.get(task).body
    other = task + "-update"
    gen = open_writer(api, other)
    api.post(
        other + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "status": "running",
            "status_details": {"eta_seconds": 9.5},
        },
    )
    api.post(other + "/updates", {"writer_generation": gen, "sequence": 2, "status": status})

    assert {"status": status, "status_details": {"phase": "done"}} == patched
    assert {"status": status, "status_details": {}} == api.get(other).body


def test_the_eta_is_kept_while_the_task_runs(api: Client, task: str) -> None:
    """Only a terminal status removes the ETA; a running write without it keeps it."""
    api.patch(task, {"status": "running", "status_details": {"eta_seconds": 9.5}})
    api.patch(task, {"status_details": {"step": 2}})

    assert {"eta_seconds": 9.5, "step": 2} == api.get(task).body["status_details"]


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"sequence": 1}, "$.writer_generation"),
        ({"writer_generation": 1}, "$.sequence"),
        ({"writer_generation": 1, "sequence": 0}, "$.sequence"),
        ({"writer_generation": 1, "sequence": 1, "status_details": {"metrics": {}}}, "details"),
        ({"writer_generation": 1, "sequence": 1, "series": []}, "$.series"),
        ({"writer_generation": 1, "sequence": 1, "series": {"a": columns(-1, [], [])}}, "offset"),
        (
            {
                "writer_generation": 1,
                "sequence": 1,
                "series": {"a": {"offset": 0, "steps": [1], "epochs": [], "values": [1.0]}},
            },
            '$.series["a"]',
        ),
        (
            {"writer_generation": 1, "sequence": 1, "series": {"a": columns(0, [1], ["x"])}},
            '$.series["a"].values[0]',
        ),
        (
            {"writer_generation": 1, "sequence": 1, "series": {"a": {"offset": 0, "pts": []}}},
            '$.series["a"]',
        ),
    ],
)
def test_invalid_update_is_422_naming_the_path(
    api: Client, task: str, payload: Any, path: str
) -> None:
    """Malformed updates are 422 before any fencing or storage happens."""
    open_writer(api, task)

    reply = api.post(task + "/updates", payload)

    assert (422, "invalid_body") == (reply.status, reply.body["error"])
    assert path in reply.body["path"]


def b64_column(typecode: str, items: list[Any]) -> str:
    """A column as the client packs it: base64 of little-endian int64/int32/float64 items."""
    column = array.array(typecode, items)
    if sys.byteorder == "big":
        column.byteswap()
    return base64.b64encode(column.tobytes()).decode("ascii")


def test_columns_may_travel_as_base64_binary(api: Client, task: str) -> None:
    """Binary columns (q/i/d, little-endian) store like JSON arrays; non-finite floats are null."""
    gen = open_writer(api, task)

    reply = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {
                "a": {
                    "offset": 0,
                    "steps": b64_column("q", [1, 2, 3]),
                    "epochs": b64_column("i", [1, 1, 2]),
                    "values": b64_column("d", [0.5, math.nan, -math.inf]),
                },
                "b": columns(0, [1], [2.0]),
            },
        },
    )

    assert {"a": 3, "b": 1} == reply.body["series_lengths"]
    assert [
        {"step": 1, "epoch": 1, "value": 0.5},
        {"step": 2, "epoch": 1, "value": None},
        {"step": 3, "epoch": 2, "value": None},
    ] == api.get(task).body["status_details"]["metrics"]["a"]


@pytest.mark.parametrize(
    ("column", "path"),
    [
        ({"values": "not base64!"}, '$.series["a"].values'),
        ({"values": base64.b64encode(b"1234567").decode()}, '$.series["a"].values'),
        ({"steps": b64_column("q", [-1])}, '$.series["a"].steps[0]'),
        ({"values": 5}, '$.series["a"].values'),
    ],
)
def test_bad_binary_columns_are_422(
    api: Client, task: str, column: dict[str, Any], path: str
) -> None:
    """Undecodable base64, a partial item or an out-of-range step is refused with its path."""
    gen = open_writer(api, task)
    series = {
        "offset": 0,
        "steps": b64_column("q", [1]),
        "epochs": b64_column("i", [1]),
        "values": b64_column("d", [1.0]),
        **column,
    }

    reply = api.post(
        task + "/updates", {"writer_generation": gen, "sequence": 1, "series": {"a": series}}
    )

    assert (422, path) == (reply.status, reply.body["path"])


def test_series_keep_the_order_they_were_created_in(api: Client, task: str) -> None:
    """GET lists series in creation order, not alphabetically."""
    gen = open_writer(api, task)
    api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {"z": columns(0, [1], [1.0]), "a": columns(0, [1], [1.0])},
        },
    )

    assert ["z", "a"] == list(api.get(task).body["status_details"]["metrics"])


def test_series_endpoint_returns_columns_and_thins_them(api: Client, task: str) -> None:
    """The page's series read: columns per name, full length, at most max_points points."""
    gen = open_writer(api, task)
    steps = list(range(1, 101))
    api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {
                "a": columns(0, steps, [float(s) for s in steps]),
                "b": columns(0, [1], [None]),
            },
        },
    )

    full = api.get(task + "/series?names=b").body["series"]
    thin = api.get(task + "/series?max_points=10").body["series"]

    assert {
        "b": {
            "length": 1,
            "first_index": 0,
            "steps": [1],
            "epochs": [1],
            "values": [None],
            "times": [None],
        }
    } == full
    assert 100 == thin["a"]["length"]
    assert len(thin["a"]["steps"]) <= 12
    assert (1, 100) == (thin["a"]["steps"][0], thin["a"]["steps"][-1])


@pytest.mark.parametrize(
    ("max_points", "status", "returned"),
    [
        ("0", 200, 10),
        ("1", 400, None),
        ("2", 400, None),
        ("3", 400, None),
        ("4", 200, 4),
        ("5", 200, 4),
        ("2.5", 400, None),
        ("four", 400, None),
        ("-1", 400, None),
    ],
)
def test_max_points_is_zero_or_at_least_four(
    api: Client, task: str, max_points: str, status: int, returned: int | None
) -> None:
    """``max_points`` 1 to 3 cannot keep a bucket's first, last, min and max: 400, not all points.

    0 returns every point, 4 and above thin (a monotonic series keeps one low
    and one high per bucket: 4 points for 4 or 5); 1, 2, 3, a non-integer and
    a negative number are refused with ``invalid_query`` naming the rule.
    """
    gen = open_writer(api, task)
    steps = list(range(1, 11))
    api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {"a": columns(0, steps, [float(s) for s in steps])},
        },
    )

    reply = api.get(task + f"/series?max_points={max_points}")

    assert status == reply.status
    if returned is None:
        assert "invalid_query" == reply.body["error"]
        assert (
            "max_points must be 0 (every point) or an integer in [4, 1000000]"
            == (reply.body["message"])
        )
    else:
        assert returned == len(reply.body["series"]["a"]["steps"])


# -- series times and ranges (series-times-v1, the page's zoom and live refresh) ---------

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _b64(typecode: str, items: list[Any]) -> str:
    return base64.b64encode(array.array(typecode, items).tobytes()).decode()


def write_ramp(api: Client, task: str, n: int, *, times: bool = True) -> None:
    """Series ``a``: steps 10, 20, ... 10n, value = index, time = T0 + index (when sent)."""
    gen = open_writer(api, task)
    steps = [10 * (i + 1) for i in range(n)]
    suffix = columns(0, steps, [float(i) for i in range(n)])
    if times:
        suffix["times"] = [T0 + i for i in range(n)]
    reply = api.post(
        task + "/updates", {"writer_generation": gen, "sequence": 1, "series": {"a": suffix}}
    )
    assert 200 == reply.status, reply.body


def test_a_suffix_stores_each_points_time_in_either_column_form(api: Client, task: str) -> None:
    """``times`` (JSON numbers or base64 float64) is stored per point; GET and /series show it.

    NaN in a binary column is an unknown time: stored and served as ``null``.
    A task's GET keeps the baseline point shape (times are the page's, via /series).
    """
    gen = open_writer(api, task)
    binary = {
        "offset": 0,
        "steps": _b64("q", [1, 2]),
        "epochs": _b64("i", [1, 1]),
        "values": _b64("d", [0.5, 0.25]),
        "times": _b64("d", [T0, math.nan]),
    }
    api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {"b": binary, "j": {**columns(0, [3], [1.0]), "times": [T0 + 3]}},
        },
    )

    series = api.get(task + "/series").body["series"]
    metrics = api.get(task).body["status_details"]["metrics"]

    assert ([T0, None], [T0 + 3]) == (series["b"]["times"], series["j"]["times"])
    assert [
        {"step": 1, "epoch": 1, "value": 0.5},
        {"step": 2, "epoch": 1, "value": 0.25},
    ] == metrics["b"]


def test_points_sent_without_times_have_null_times(api: Client, task: str) -> None:
    """A client of an older version sends no times: its points read back as before, times null."""
    write_ramp(api, task, 3, times=False)

    assert [None, None, None] == api.get(task + "/series").body["series"]["a"]["times"]
    assert {"step": 10, "epoch": 1, "value": 0.0} == api.get(task).body["status_details"][
        "metrics"
    ]["a"][0]


def test_a_patch_stores_the_time_of_each_point(api: Client, task: str) -> None:
    """Baseline ``metrics`` points may carry ``"time"``; a point without one stays unknown."""
    points = [{"step": 1, "value": 1.0, "time": T0}, {"step": 2, "value": 2.0}]
    assert 200 == api.patch(task, {"status_details": {"metrics": {"a": points}}}).status

    assert [T0, None] == api.get(task + "/series").body["series"]["a"]["times"]


def test_a_times_column_of_another_length_is_refused(api: Client, task: str) -> None:
    """``times`` must have as many items as ``steps``: 422 naming the series, nothing stored."""
    gen = open_writer(api, task)
    reply = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {"a": {**columns(0, [1, 2], [1.0, 2.0]), "times": [T0]}},
        },
    )

    assert (422, '$.series["a"]') == (reply.status, reply.body["path"])


def test_the_series_summary_gives_each_series_length_and_last_point_and_no_columns(
    api: Client, task: str
) -> None:
    """``/series/summary`` (the page's first read): per series, in creation order, its stored
    length and last point (step, epoch, value, time); a rewind and a null value show as such."""
    write_ramp(api, task, 10)  # a: steps 10..100, values 0..9, times T0..T0+9
    gen = open_writer(api, task)
    reply = api.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "series": {
                "a": columns(5, [], []),  # rewound to its first 5 points
                "z": columns(0, [1, 2], [1.0, None], epochs=[1, 2]),
            },
        },
    )
    assert 200 == reply.status, reply.body

    summary = api.get(task + "/series/summary")

    assert 200 == summary.status
    assert {
        "series": {
            "a": {
                "length": 5,
                "last_step": 50,
                "last_epoch": 1,
                "last_value": 4.0,
                "last_time": T0 + 4,
            },
            "z": {
                "length": 2,
                "last_step": 2,
                "last_epoch": 2,
                "last_value": None,
                "last_time": None,
            },
        }
    } == summary.body
    assert ["a", "z"] == list(summary.body["series"])


def test_the_series_summary_of_a_task_without_series_or_of_no_task(api: Client, task: str) -> None:
    """A task without curves lists none; an absent task is 404 ``not_found``."""
    api.patch(task, {"status": "running", "status_details": {"step": 1}})

    assert {"series": {}} == api.get(task + "/series/summary").body
    missing = api.get(task + "-absent/series/summary")
    assert (404, "not_found") == (missing.status, missing.body["error"])


def test_from_and_to_return_the_step_range_inclusive(api: Client, task: str) -> None:
    """``from``/``to`` keep the points whose step is within (inclusive); first_index says where.

    Either bound may be given alone; a range with no point answers empty columns.
    """
    write_ramp(api, task, 10)  # steps 10..100, indices 0..9

    both = api.get(task + "/series?from=30&to=55").body["series"]["a"]
    low = api.get(task + "/series?from=85").body["series"]["a"]
    high = api.get(task + "/series?to=10").body["series"]["a"]
    empty = api.get(task + "/series?from=41&to=49").body["series"]["a"]

    assert (10, 2, [30, 40, 50], [T0 + 2, T0 + 3, T0 + 4]) == (
        both["length"],
        both["first_index"],
        both["steps"],
        both["times"],
    )
    assert (8, [90, 100]) == (low["first_index"], low["steps"])
    assert (0, [10]) == (high["first_index"], high["steps"])
    assert ([], [], 10) == (empty["steps"], empty["times"], empty["length"])


def test_max_points_thins_within_the_range_keeping_its_ends_and_extremes(
    api: Client, task: str
) -> None:
    """A zoom re-read: the range is thinned on its own (first, last, lows and highs kept)."""
    write_ramp(api, task, 1000)  # steps 10..10000

    zoomed = api.get(task + "/series?from=2000&to=3000&max_points=10").body["series"]["a"]

    assert 199 == zoomed["first_index"]
    assert (2000, 3000) == (zoomed["steps"][0], zoomed["steps"][-1])
    assert len(zoomed["steps"]) <= 12
    assert all(2000 <= s <= 3000 for s in zoomed["steps"])
    assert len(zoomed["steps"]) == len(zoomed["times"]) == len(zoomed["values"])


def test_after_returns_only_the_points_from_that_index_on(api: Client, task: str) -> None:
    """``after=N`` is the live page's refresh: points at index >= N, first_index N.

    At or past the stored length it answers no points, with first_index ``after``.
    """
    write_ramp(api, task, 5)

    tail = api.get(task + "/series?after=3").body["series"]["a"]
    none = api.get(task + "/series?after=5").body["series"]["a"]
    ranged = api.get(task + "/series?after=1&to=30").body["series"]["a"]

    assert (3, [40, 50], [3.0, 4.0], 5) == (
        tail["first_index"],
        tail["steps"],
        tail["values"],
        tail["length"],
    )
    assert (5, []) == (none["first_index"], none["steps"])
    assert (1, [20, 30]) == (ranged["first_index"], ranged["steps"])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("from=-1", "from must be an integer in [0, 9223372036854775807]"),
        ("to=ten", "to must be an integer in [0, 9223372036854775807]"),
        ("after=1.5", "after must be an integer in [0, 9223372036854775807]"),
        ("from=5&to=4", "from (5) must not be above to (4)"),
    ],
)
def test_bad_ranges_are_400_invalid_query(api: Client, task: str, query: str, message: str) -> None:
    """A range that is not integers >= 0, or from above to, is refused naming the rule."""
    write_ramp(api, task, 3)

    reply = api.get(task + "/series?" + query)

    assert (400, "invalid_query", message) == (
        reply.status,
        reply.body["error"],
        reply.body["message"],
    )


# -- jobs and cancel --------------------------------------------------------------------


def test_put_job_is_idempotent_201_then_200(api: Client) -> None:
    """PUT creates a job once; a repeat answers 200 with the same job."""
    path = f"/v1/jobs/job-{uuid.uuid4().hex[:12]}"

    first = api.call("PUT", path)
    second = api.call("PUT", path)

    assert (201, 200) == (first.status, second.status)
    assert first.body == second.body
    assert [] == api.get(path).body["tasks"]


def test_jobs_are_listed_newest_first_with_task_summaries(api: Client) -> None:
    """GET /v1/jobs lists jobs newest first; each task with status, phase and step."""
    older, newer = (f"job-{uuid.uuid4().hex[:12]}" for _ in range(2))
    api.patch(
        f"/v1/jobs/{older}/tasks/t",
        {"status": "running", "status_details": {"phase": "training", "step": 7}},
    )
    api.call("PUT", f"/v1/jobs/{newer}")

    jobs = api.get("/v1/jobs").body["jobs"]
    ids = [job["job_id"] for job in jobs]

    assert ids.index(newer) < ids.index(older)
    summary = jobs[ids.index(older)]["tasks"][0]
    assert ("t", "running", "training", 7) == (
        summary["task_id"],
        summary["status"],
        summary["phase"],
        summary["step"],
    )
    assert summary["updated_at"].endswith("Z")


def test_get_of_a_missing_job_is_404(api: Client) -> None:
    """A job nobody created is a 404."""
    assert 404 == api.get("/v1/jobs/never-created-job").status


def test_cancel_reaches_every_later_patch_and_update_response(api: Client, task: str) -> None:
    """After POST .../cancel, responses for the job's tasks carry cancel_requested: true."""
    job = task.split("/tasks/", maxsplit=1)[0]
    gen = open_writer(api, task)
    before = api.patch(task, {"status": "running"})

    cancelled = api.post(job + "/cancel")
    patched = api.patch(task, {"status_details": {"step": 2}})
    updated = api.post(task + "/updates", {"writer_generation": gen, "sequence": 1})

    assert (False, True) == (before.body["cancel_requested"], cancelled.body["cancel_requested"])
    assert (True, True) == (patched.body["cancel_requested"], updated.body["cancel_requested"])
    assert "running" == api.get(task).body["status"]


def test_cancel_of_a_missing_job_is_404(api: Client) -> None:
    """Cancelling a job that does not exist says so instead of creating it."""
    assert 404 == api.post("/v1/jobs/no-such-job-to-cancel/cancel").status


# -- ids, JSON, limits -------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_path",
    [
        "/v1/jobs/../tasks/x",
        "/v1/jobs/%2e%2e/tasks/x",
        "/v1/jobs/.hidden/tasks/x",
        "/v1/jobs/-dash/tasks/x",
        "/v1/jobs/a%20b/tasks/x",
        "/v1/jobs/a%00b/tasks/x",
        "/v1/jobs/j%C3%B6b/tasks/x",
        "/v1/jobs/j/tasks/" + "t" * 129,
        "/v1/jobs/j/tasks/..",
        "/v1/jobs/j/tasks/%2e%2e",
    ],
)
def test_bad_ids_are_400(module_server: ServerHandle, raw_path: str) -> None:
    """Ids outside ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ are refused, traversal included."""
    # a connection pool sends the path as written (PoolManager would normalise "..")
    host, port = module_server.url.removeprefix("http://").rsplit(":", 1)
    with urllib3.HTTPConnectionPool(host, int(port), retries=False) as pool:
        reply = pool.urlopen(
            "PATCH", raw_path, body=b"{}", headers={"Content-Type": "application/json"}
        )

        assert (400, "invalid_id") == (reply.status, json.loads(reply.data)["error"])


@pytest.mark.parametrize(
    "raw_path", ["/v1/jobs/j/tasks/..%2f..%2fetc", "/v1/jobs/a%2Fb/tasks/x", "/v1/jobs//tasks/x"]
)
def test_paths_with_extra_segments_match_no_route(
    module_server: ServerHandle, raw_path: str
) -> None:
    """An encoded slash becomes a path separator and so matches no endpoint (404)."""
    host, port = module_server.url.removeprefix("http://").rsplit(":", 1)
    with urllib3.HTTPConnectionPool(host, int(port), retries=False) as pool:
        reply = pool.urlopen(
            "PATCH", raw_path, body=b"{}", headers={"Content-Type": "application/json"}
        )

        assert 404 == reply.status


def test_an_id_of_128_characters_is_accepted(api: Client) -> None:
    """The id limit is inclusive: 128 characters from the allowed set are fine."""
    job = "J" + "a.b_c-" * 21 + "z"

    assert (128, 200) == (len(job), api.patch(f"/v1/jobs/{job}/tasks/t", {}).status)


@pytest.mark.parametrize(
    "body",
    [
        b'{"status_details": {"x": NaN}}',
        b'{"status_details": {"x": Infinity}}',
        b'{"status_details": {"x": -Infinity}}',
        b'{"status_details": {"x": 1e400}}',
        b'{"status": "running"',
        b"\xff\xfe{}",
        b"",
        b"[" * 100_000,
    ],
)
def test_non_strict_json_is_400(api: Client, task: str, body: bytes) -> None:
    """NaN/Infinity tokens, overflowing numbers and malformed bodies are 400 invalid_json."""
    reply = api.patch(task, body=body)

    assert (400, "invalid_json") == (reply.status, reply.body["error"])
    assert 404 == api.get(task).status


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """A server with a 1 KiB body limit and a 4 KiB decompressed limit."""
    db = tmp_path_factory.mktemp("small") / "small.db"
    with start_in_thread(db, max_body_bytes=1024, max_decompressed_bytes=4096) as handle:
        client = Client(handle.url)
        yield client
        client.close()


def _padded_patch(size: int) -> bytes:
    """A valid PATCH body of exactly ``size`` bytes."""
    head, tail = b'{"status_details": {"pad": "', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_a_body_at_the_limit_is_accepted(small_server: Client) -> None:
    """The limit is inclusive: exactly max_body_bytes is fine."""
    assert 200 == small_server.patch("/v1/jobs/j/tasks/at-limit", body=_padded_patch(1024)).status


def test_a_body_over_the_limit_is_413_by_content_length(small_server: Client) -> None:
    """A Content-Length over the limit is refused with 413 before the body is read."""
    reply = small_server.patch("/v1/jobs/j/tasks/cl", body=_padded_patch(1025))

    assert (413, "body_too_large", 1024) == (
        reply.status,
        reply.body["error"],
        reply.body["limit_bytes"],
    )
    assert 404 == small_server.get("/v1/jobs/j/tasks/cl").status


def test_a_chunked_body_over_the_limit_is_413(small_server: Client) -> None:
    """A chunked body has no Content-Length: the bytes are counted as they arrive."""
    body = _padded_patch(3000)
    chunks = [body[i : i + 500] for i in range(0, len(body), 500)]

    reply = small_server.patch("/v1/jobs/j/tasks/chunked", body=iter(chunks), chunked=True)

    assert (413, "body_too_large") == (reply.status, reply.body["error"])
    assert 404 == small_server.get("/v1/jobs/j/tasks/chunked").status


def test_a_chunked_body_within_the_limit_is_accepted(small_server: Client) -> None:
    """Chunked transfer itself is fine; only the size counts."""
    body = _padded_patch(900)

    reply = small_server.patch(
        "/v1/jobs/j/tasks/chunked-ok", body=iter([body[:400], body[400:]]), chunked=True
    )

    assert 200 == reply.status


def test_a_gzip_body_is_accepted_beyond_the_wire_limit(small_server: Client) -> None:
    """A gzip body counts against the wire limit compressed and the second limit inflated."""
    body = _padded_patch(4000)
    compressed = gzip.compress(body)
    assert len(compressed) < 1024

    reply = small_server.patch(
        "/v1/jobs/j/tasks/gz", body=compressed, headers={"Content-Encoding": "gzip"}
    )

    assert 200 == reply.status
    assert 4000 - 31 == len(small_server.get("/v1/jobs/j/tasks/gz").body["status_details"]["pad"])


def test_a_gzip_bomb_is_413(small_server: Client) -> None:
    """A gzip body within the wire limit that inflates beyond the second limit is refused."""
    bomb = gzip.compress(_padded_patch(500_000), compresslevel=9)
    assert len(bomb) < 1024

    reply = small_server.patch(
        "/v1/jobs/j/tasks/bomb", body=bomb, headers={"Content-Encoding": "gzip"}
    )

    assert (413, "body_too_large", 4096) == (
        reply.status,
        reply.body["error"],
        reply.body["limit_bytes"],
    )


@pytest.mark.parametrize(
    ("body", "encoding", "status"),
    [
        (b"not gzip at all", "gzip", 400),
        (gzip.compress(b'{"status": "running"}')[:-6], "gzip", 400),
        (gzip.compress(b"{}") + b"trailing", "gzip", 400),
        (b"{}", "br", 415),
    ],
)
def test_bad_encodings_are_refused(
    small_server: Client, body: bytes, encoding: str, status: int
) -> None:
    """Corrupt, truncated or trailing-garbage gzip is 400; other encodings are 415."""
    reply = small_server.patch(
        "/v1/jobs/j/tasks/enc", body=body, headers={"Content-Encoding": encoding}
    )

    assert status == reply.status
    assert 404 == small_server.get("/v1/jobs/j/tasks/enc").status


# -- auth -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("GET", "/v1/jobs", _MISSING),
        ("GET", "/v1/jobs/j/tasks/t", _MISSING),
        ("GET", "/v1/jobs/j/tasks/t/series", _MISSING),
        ("PATCH", "/v1/jobs/j/tasks/t", {"status": "running"}),
        ("POST", "/v1/jobs/j/tasks/t/writers", {}),
        ("POST", "/v1/jobs/j/tasks/t/updates", {"writer_generation": 1, "sequence": 1}),
        ("PUT", "/v1/jobs/j", _MISSING),
        ("POST", "/v1/jobs/j/cancel", _MISSING),
        ("GET", "/v1/nowhere", _MISSING),
    ],
)
def test_every_v1_request_needs_the_token(
    token_server: ServerHandle,
    server_token: str,
    make_client: Callable[..., Client],
    method: str,
    path: str,
    payload: Any,
) -> None:
    """Reads and writes alike: no token or a wrong one is 401; the right one gets through."""
    anonymous, wrong, right = (
        make_client(token_server.url, token) for token in (None, "s3cret-tokem", server_token)
    )

    assert 401 == anonymous.call(method, path, payload).status
    assert 401 == wrong.call(method, path, payload).status
    assert 401 != right.call(method, path, payload).status


def test_401_says_bearer_and_capabilities_and_the_page_need_no_token(
    token_server: ServerHandle, make_client: Callable[..., Client]
) -> None:
    """A 401 carries WWW-Authenticate; discovery and the HTML shell stay open."""
    anonymous = make_client(token_server.url)

    reply = anonymous.get("/v1/jobs")

    assert ("unauthorized", 'Bearer realm="trainreport"') == (
        reply.body["error"],
        reply.headers["www-authenticate"],
    )
    assert 200 == anonymous.get("/v1/capabilities").status
    assert 200 == anonymous.get("/").status


def test_the_token_never_reaches_the_logs(
    start_server: Callable[..., ServerHandle],
    make_client: Callable[..., Client],
    server_token: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the access log on, neither a right nor a wrong token is logged."""
    handle = start_server(token=server_token, access_log=True)
    caplog.set_level("DEBUG")

    make_client(handle.url, server_token).patch("/v1/jobs/j/tasks/t", {"status": "running"})
    make_client(handle.url, "not-" + server_token).get("/v1/jobs")
    handle.stop()

    assert "GET /v1/jobs" in caplog.text  # the access log did run
    assert server_token not in caplog.text


# -- persistence and concurrency ---------------------------------------------------------


def _write_run(client: Client, task: str, points: int) -> int:
    gen = open_writer(client, task)
    steps = list(range(1, points + 1))
    reply = client.post(
        task + "/updates",
        {
            "writer_generation": gen,
            "sequence": 1,
            "status": "running",
            "status_details": {"step": points},
            "series": {"loss": columns(0, steps, [1.0 / s for s in steps])},
        },
    )
    assert 200 == reply.status
    return gen


def test_data_and_generations_survive_a_restart(
    server_process: ServerHandle,
    start_server_process: Callable[..., ServerHandle],
    make_client: Callable[..., Client],
) -> None:
    """Stop the process, start another on the same file: the task and its fence are intact."""
    client = make_client(server_process.url)
    gen = _write_run(client, "/v1/jobs/j/tasks/t", 50)
    before = client.get("/v1/jobs/j/tasks/t").body
    server_process.stop()

    restarted = start_server_process(server_process.db_path)
    after = make_client(restarted.url)

    assert before == after.get("/v1/jobs/j/tasks/t").body
    assert gen + 1 == after.post("/v1/jobs/j/tasks/t/writers").body["writer_generation"]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_an_acknowledged_write_survives_kill_9(
    server_process: ServerHandle,
    start_server_process: Callable[..., ServerHandle],
    make_client: Callable[..., Client],
) -> None:
    """An update answered 200 is on disk: killing the server right after loses nothing."""
    client = make_client(server_process.url)
    _write_run(client, "/v1/jobs/j/tasks/t", 20)
    assert server_process.pid is not None
    os.kill(server_process.pid, signal.SIGKILL)
    server_process.stop()

    restarted = make_client(start_server_process(server_process.db_path).url)

    assert 20 == len(curve(restarted.get("/v1/jobs/j/tasks/t"), "loss"))


def test_concurrent_writers_to_different_tasks_all_land(api: Client) -> None:
    """Eight threads each append 20 updates to their own task; every point is stored once."""
    job = f"/v1/jobs/job-{uuid.uuid4().hex[:12]}"
    barrier = threading.Barrier(8)

    def run(worker: int) -> dict[str, int]:
        client = Client(api.url)
        task = f"{job}/tasks/w{worker}"
        gen = open_writer(client, task)
        barrier.wait(timeout=30)
        lengths: dict[str, int] = {}
        for seq in range(1, 21):
            steps = list(range((seq - 1) * 10 + 1, seq * 10 + 1))
            reply = client.post(
                task + "/updates",
                {
                    "writer_generation": gen,
                    "sequence": seq,
                    "series": {
                        "loss": columns(lengths.get("loss", 0), steps, [float(worker)] * 10)
                    },
                },
            )
            lengths = reply.body["series_lengths"]
        client.close()
        return lengths

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, range(8)))

    assert [{"loss": 200}] * 8 == results
    for worker in range(8):
        points = curve(api.get(f"{job}/tasks/w{worker}"), "loss")
        assert [(s, float(worker)) for s in range(1, 201)] == points


# -- configuration ----------------------------------------------------------------------


def test_create_app_refuses_an_empty_token_and_zero_limits(tmp_path: Path) -> None:
    """An empty token would silently disable auth; a zero limit refuses everything."""
    with pytest.raises(ValueError, match="token"):
        create_app(tmp_path / "a.db", token="")
    with pytest.raises(ValueError, match="max_body_bytes must be an integer of at least 1"):
        create_app(tmp_path / "a.db", max_body_bytes=0)


def test_a_database_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    """A file written by a newer server is not silently misread."""
    path = tmp_path / "new.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()

    with pytest.raises(RuntimeError, match="schema version 99"):
        Database(path)


def test_the_database_runs_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    """WAL plus synchronous=FULL: an acknowledged commit is fsynced (docs/server.md)."""
    db = Database(tmp_path / "d.db")
    try:
        assert isinstance(db.backend, SqliteBackend)
        conn = db.backend._conn()
        assert ("wal", 2) == (
            conn.execute("PRAGMA journal_mode").fetchone()[0],
            conn.execute("PRAGMA synchronous").fetchone()[0],
        )
    finally:
        db.close()


def test_the_cli_serve_parser_reads_every_flag(tmp_path: Path) -> None:
    """``trainreport serve`` takes the documented flags, loopback and 8321 by default."""
    defaults = cli.build_parser().parse_args(["serve"])
    args = cli.build_parser().parse_args(
        [
            "serve",
            "--db",
            str(tmp_path / "x.db"),
            "--port",
            "0",
            "--token-file",
            "tok",
            "--max-body-bytes",
            "10",
            "--access-log",
        ]
    )

    assert ("127.0.0.1", 8321, False) == (defaults.host, defaults.port, defaults.access_log)
    assert ([], 5.0, 10.0, 100) == (
        defaults.allowed_hosts,
        defaults.head_timeout,
        defaults.body_timeout,
        defaults.max_connections,
    )
    hardened = cli.build_parser().parse_args(
        [
            "serve",
            "--allowed-hosts",
            "a.internal,b.internal",
            "--allowed-hosts",
            "c.internal",
            "--head-timeout",
            "2.5",
            "--body-timeout",
            "3",
            "--max-connections",
            "7",
            "--body-budget-bytes",
            "1024",
        ]
    )
    assert (["a.internal,b.internal", "c.internal"], 2.5, 3.0, 7, 1024) == (
        hardened.allowed_hosts,
        hardened.head_timeout,
        hardened.body_timeout,
        hardened.max_connections,
        hardened.body_budget_bytes,
    )
    assert (0, Path("tok"), 10, True) == (
        args.port,
        args.token_file,
        args.max_body_bytes,
        args.access_log,
    )


def test_the_cli_refuses_an_empty_token_file(tmp_path: Path, capsys: Any) -> None:
    """An empty token file is a usage error (exit 2), not an open server."""
    token_file = tmp_path / "token"
    token_file.write_text("\n")

    status = cli.main(["serve", "--db", str(tmp_path / "x.db"), "--token-file", str(token_file)])

    assert 2 == status
    assert "token is empty" in capsys.readouterr().err


# -- properties of the pure layers -------------------------------------------------------


@pytest.fixture(scope="module")
def database(
    request: pytest.FixtureRequest, storage: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Database]:
    db = Database(new_database(request, storage, tmp_path_factory.mktemp("property")))
    yield db
    db.close()


_values = st.lists(
    st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)), max_size=6
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.integers(0, 40), _values), min_size=1, max_size=8))
def test_suffix_updates_equal_a_list_model(
    database: Database, ops: list[tuple[int, list[float | None]]]
) -> None:
    """Any sequence of suffixes leaves the series equal to ``model[offset:] = points``."""
    task_id = uuid.uuid4().hex
    opened = database.tasks.open_writer("prop", task_id)
    assert isinstance(opened, WriterOpened)
    gen = opened.generation
    model: list[tuple[int, float | None]] = []
    for sequence, (seed, values) in enumerate(ops, start=1):
        offset = seed % (len(model) + 2)  # sometimes one past the end: a gap
        steps = list(range(offset, offset + len(values)))
        update = TaskUpdate(
            writer_generation=gen,
            sequence=sequence,
            status=None,
            details={},
            series=(SeriesPoints("s", offset, steps, [None] * len(values), values),),
        )
        outcome = database.tasks.apply_update("prop", task_id, update, now="2026-01-01T00:00:00Z")
        if offset > len(model):
            assert isinstance(outcome, SeriesGap)
            continue
        model[offset:] = list(zip(steps, values, strict=True))
        assert isinstance(outcome, Applied)
        assert ({"s": len(model)} if model else {}) == outcome.series_lengths
    stored = database.tasks.series_columns("prop", task_id, None)
    if stored is not None and model:
        assert model == list(zip(stored["s"]["steps"], stored["s"]["values"], strict=True))
    elif stored is not None:
        assert "s" not in stored


@given(st.binary(max_size=200))
def test_parse_json_raises_only_400s(body: bytes) -> None:
    """Whatever bytes arrive, parsing answers a value or a 400, never another exception."""
    status = 400
    try:
        parse_json(body)
    except ApiError as exc:
        status = exc.status_code
    assert 400 == status


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "status",
                    "status_details",
                    "metrics",
                    "series",
                    "sequence",
                    "writer_generation",
                    "offset",
                    "steps",
                    "epochs",
                    "values",
                    "step",
                    "value",
                    "epoch",
                    "x",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(_json)
def test_validation_raises_only_422s(doc: Any) -> None:
    """Any JSON document validates or is refused with 422, never crashes the handler."""
    for validate in (validate_patch, validate_update):
        status = 422
        try:
            validate(doc)
        except ApiError as exc:
            status = exc.status_code
        assert 422 == status
