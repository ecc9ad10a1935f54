"""Malformed text in a request body is a 422 naming the field, never a 500 (issue 9).

JSON can spell a string that is not valid Unicode: a lone surrogate escape
(``"\\ud800"``) decodes to a Python ``str`` that cannot be encoded as UTF-8,
so storing it failed deep in SQLite with a 500. Every string of every body,
keys included and at any depth, is now checked when a body contains such an
escape at all.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainreport.server import ServerHandle
from trainreport.server._db._database import Database
from trainreport.server._text import check_text
from trainreport.server._wire import ApiError, parse_json, validate_patch

JSON = {"Content-Type": "application/json"}
LONE = "\\ud800"  # as it appears in the JSON text


def _send(url: str, method: str, path: str, text: str) -> tuple[int, Any]:
    response = urllib3.request(
        method, url + path, body=text.encode(), headers=JSON, timeout=10.0, retries=False
    )
    return response.status, json.loads(response.data)


@pytest.fixture
def task() -> str:
    return f"/v1/jobs/text-{uuid.uuid4().hex[:10]}/tasks/t"


def _writer(url: str, task: str) -> int:
    status, body = _send(url, "POST", task + "/writers", "{}")
    assert 200 == status
    generation: int = body["writer_generation"]
    return generation


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ('{"status_details": {"note": "' + LONE + '"}}', "$.status_details.note"),
        ('{"status_details": {"note": "ok ' + LONE + ' ok"}}', "$.status_details.note"),
        ('{"status_details": {"note": "\\udc00\\ud800"}}', "$.status_details.note"),
        ('{"status_details": {"' + LONE + '": 1}}', '$.status_details["\\ud800"]'),
        (
            '{"status_details": {"hyperparameters": {"opt": ["adam", {"b": "\\uDBFF"}]}}}',
            "$.status_details.hyperparameters.opt[1].b",
        ),
        (
            '{"status_details": {"metrics": {"' + LONE + '": [{"step": 1, "value": 1.0}]}}}',
            '$.status_details.metrics["\\ud800"]',
        ),
        ('{"status": "' + LONE + '"}', "$.status"),
    ],
)
def test_a_patch_with_a_lone_surrogate_is_422_naming_the_field(
    module_server: ServerHandle, task: str, body: str, path: str
) -> None:
    """Values, keys, nested values, series names: each gets 422 ``invalid_body`` with its path."""
    status, error = _send(module_server.url, "PATCH", task, body)

    assert (422, "invalid_body", path) == (status, error["error"], error["path"])
    assert 404 == urllib3.request("GET", module_server.url + task, timeout=10.0).status


@pytest.mark.parametrize(
    ("fragment", "path"),
    [
        ('"status_details": {"note": "' + LONE + '"}', "$.status_details.note"),
        (
            '"series": {"' + LONE + '": {"offset": 0, "steps": [1], "epochs": [1], '
            '"values": [1.0]}}',
            '$.series["\\ud800"]',
        ),
    ],
)
def test_an_update_with_a_lone_surrogate_is_422_naming_the_field(
    module_server: ServerHandle, task: str, fragment: str, path: str
) -> None:
    """The extension's update body is checked the same way; nothing is applied."""
    generation = _writer(module_server.url, task)
    body = f'{{"writer_generation": {generation}, "sequence": 1, {fragment}}}'

    status, error = _send(module_server.url, "POST", task + "/updates", body)

    assert (422, "invalid_body", path) == (status, error["error"], error["path"])


def test_a_writer_body_with_a_lone_surrogate_is_422(module_server: ServerHandle, task: str) -> None:
    """Even a body the server does not store is refused rather than half-read."""
    status, error = _send(module_server.url, "POST", task + "/writers", '{"x": "' + LONE + '"}')

    assert (422, "$.x") == (status, error["path"])


def test_a_valid_surrogate_pair_is_one_character_and_is_stored(
    module_server: ServerHandle, task: str
) -> None:
    """``"\\ud83d\\ude00"`` is the emoji 😀, not malformed: it is stored and read back."""
    status, _ = _send(
        module_server.url, "PATCH", task, '{"status_details": {"m": "\\ud83d\\ude00"}}'
    )

    stored = urllib3.request("GET", module_server.url + task, timeout=10.0)
    assert 200 == status
    assert "\U0001f600" == json.loads(stored.data)["status_details"]["m"]


# -- the whole kind: any text, any place ----------------------------------------------------

_text = st.text(  # surrogates (category Cs) included
    alphabet=st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=6
)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | _text,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["status", "status_details", "metrics", "series", "x"]) | _text,
            children,
            max_size=3,
        )
    ),
    max_leaves=10,
)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = Database(Path(tmp_path_factory.mktemp("text")) / "text.db")
    yield db
    db.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(details=st.dictionaries(_text, _json, max_size=4), status=st.sampled_from([None, "running"]))
def test_any_details_either_store_or_are_422_never_an_error(
    database: Database, details: dict[str, Any], status: str | None
) -> None:
    """Text with or without surrogates, anywhere in details: 422, or stored and read back."""
    doc: dict[str, Any] = {"status_details": details}
    if status is not None:
        doc["status"] = status
    body = json.dumps(doc).encode()  # ASCII escapes, as a client would send them
    try:
        patch = validate_patch(check_text(parse_json(body), body))
    except ApiError as exc:
        refused: int | None = exc.status_code
    else:
        refused = None
    if refused is not None:
        assert 422 == refused
        return
    task_id = uuid.uuid4().hex
    database.tasks.patch_task("text", task_id, patch, now="2026-01-01T00:00:00Z")
    stored = database.tasks.get_task("text", task_id)
    assert stored is not None
    assert patch.details == {k: v for k, v in stored["status_details"].items() if k != "metrics"}
