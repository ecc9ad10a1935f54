"""The published contract: OpenAPI 3.1 and JSON Schemas generated from the validating code.

The checked-in copies in ``docs/`` must equal what the code generates (run
``python scripts/make_contract.py`` after changing a rule); real validators
(``openapi-spec-validator``, ``jsonschema``) check the documents; generated
bodies that the server's validators accept must validate against the schemas;
and real answers of a live server must match the response schemas.
"""

from __future__ import annotations

import array
import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import urllib3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.routing import Mount, Route

from trainreport.server import ServerHandle, create_app
from trainreport.server._contract import STANDALONE_SCHEMAS, openapi_document, standalone_schema
from trainreport.server._errors import ApiError
from trainreport.server._routes import ENDPOINTS
from trainreport.server._wire import validate_patch, validate_update

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
JSON = {"Content-Type": "application/json"}


def _checked_in(name: str) -> Any:
    return json.loads((DOCS / name).read_text(encoding="utf-8"))


# -- the checked-in copies and the served document --------------------------------------


def test_the_checked_in_openapi_document_is_what_the_code_generates() -> None:
    """A changed rule, endpoint or response must be regenerated into docs/openapi.json."""
    assert openapi_document() == _checked_in("openapi.json"), (
        "docs/openapi.json is stale: run python scripts/make_contract.py"
    )


@pytest.mark.parametrize("stem", sorted(STANDALONE_SCHEMAS))
def test_the_checked_in_json_schemas_are_what_the_code_generates(stem: str) -> None:
    """docs/schemas/*.schema.json come from the declarations that validate requests."""
    assert standalone_schema(stem) == _checked_in(f"schemas/{stem}.schema.json"), (
        "docs/schemas is stale: run python scripts/make_contract.py"
    )


def test_the_regeneration_script_reports_no_drift() -> None:
    """``scripts/make_contract.py --check`` exits 0 on an up-to-date tree."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_contract.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert (0, "") == (proc.returncode, proc.stderr)


def test_the_openapi_document_is_valid_openapi_3_1() -> None:
    """openapi-spec-validator accepts the document (schemas, refs, parameters, security)."""
    document = _checked_in("openapi.json")

    validate_openapi(document)

    assert document["openapi"].startswith("3.1")


@pytest.mark.parametrize("stem", sorted(STANDALONE_SCHEMAS))
def test_the_json_schemas_are_valid_draft_2020_12(stem: str) -> None:
    """jsonschema's meta-schema check accepts every standalone schema."""
    schema = _checked_in(f"schemas/{stem}.schema.json")

    jsonschema.Draft202012Validator.check_schema(schema)

    assert schema["$schema"].endswith("2020-12/schema")


def test_the_server_serves_the_checked_in_document_without_a_token(
    start_server: Any,
) -> None:
    """``GET /v1/openapi.json`` is open (like discovery) and equals docs/openapi.json."""
    handle = start_server(token="contract-admin-token")

    response = urllib3.request("GET", handle.url + "/v1/openapi.json", retries=False, timeout=20)

    assert 200 == response.status
    assert response.headers["Content-Type"].startswith("application/json")
    assert _checked_in("openapi.json") == json.loads(response.data)


def test_every_route_of_the_app_is_in_the_contract_and_nothing_else(tmp_path: Path) -> None:
    """The document lists exactly the API routes the app serves (the page shells and their
    static files aside)."""
    app = create_app(tmp_path / "c.db")
    served = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route | Mount)
        for method in getattr(route, "methods", set()) - {"HEAD"}
        if not route.path.startswith(("/jobs", "/static/")) and route.path != "/"
    }
    paths = _checked_in("openapi.json")["paths"]
    documented = {(m.upper(), path) for path, ops in paths.items() for m in ops}

    assert served == documented
    assert len(ENDPOINTS) == len(documented)
    app.state.database.close()


def test_each_operation_states_its_access_rule() -> None:
    """Open operations need no security; every other names the bearer scheme."""
    for path, operations in _checked_in("openapi.json")["paths"].items():
        for method, operation in operations.items():
            access = operation["x-trainreport-access"]
            assert (access == "open") == (operation["security"] == []), (method, path)


# -- the schemas agree with the validators ----------------------------------------------


def _validator(stem: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(standalone_schema(stem))


_PATCH_SCHEMA = _validator("task_patch")
_UPDATE_SCHEMA = _validator("task_update")

_names = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=8)
_ints = st.one_of(st.integers(0, 5), st.sampled_from([0, 2**31 - 1, 2**63 - 1]))
_floats = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False), st.integers(-9, 9))
_statuses = st.sampled_from(["pending", "running", "completed", "failed", "cancelled"])
_details = st.dictionaries(
    st.text(max_size=6).filter(lambda k: k != "metrics"),
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4), _floats),
    max_size=4,
)


def _b64(typecode: str, items: list[Any]) -> str:
    column = array.array(typecode, items)
    if sys.byteorder == "big":
        column.byteswap()
    return base64.b64encode(column.tobytes()).decode()


@st.composite
def _suffix(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 4))
    steps = draw(st.lists(_ints, min_size=n, max_size=n))
    epochs = draw(st.lists(st.one_of(st.none(), st.integers(0, 9)), min_size=n, max_size=n))
    values = draw(st.lists(_floats, min_size=n, max_size=n))
    columns: dict[str, Any] = {"offset": draw(_ints)}
    binary = draw(st.booleans())
    if n or draw(st.booleans()):
        columns["steps"] = _b64("q", steps) if binary else steps
        columns["epochs"] = _b64("i", [e or 0 for e in epochs]) if binary else epochs
        columns["values"] = _b64("d", [float(v or 0) for v in values]) if binary else values
    return columns


@st.composite
def _update(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "writer_generation": draw(st.integers(1, 2**63 - 1)),
        "sequence": draw(st.integers(1, 9)),
    }
    if draw(st.booleans()):
        body["status"] = draw(_statuses)
    if draw(st.booleans()):
        body["status_details"] = draw(_details)
    if draw(st.booleans()):
        body["series"] = draw(st.dictionaries(_names, _suffix(), max_size=3))
    return body


@st.composite
def _patch(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if draw(st.booleans()):
        body["status"] = draw(_statuses)
    if draw(st.booleans()):
        details: dict[str, Any] = dict(draw(_details))
        if draw(st.booleans()):
            point = st.fixed_dictionaries(
                {"step": _ints, "value": _floats},
                optional={"epoch": st.one_of(st.none(), st.integers(0, 9))},
            )
            details["metrics"] = draw(st.dictionaries(_names, st.lists(point, max_size=3)))
        body["status_details"] = details
    return body


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(2**63 - 2, 2**64),
    st.floats(),
    st.text(max_size=3),
    st.just([]),
    st.just({}),
    st.just("AAAAAAAAAAA="),
)


def _mutate(doc: Any, draw: Callable[[st.SearchStrategy[Any]], Any]) -> Any:
    """Replace one random node of ``doc`` (or add a stray key) with a random leaf."""
    if isinstance(doc, dict) and doc and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(doc)))
        return {**doc, key: _mutate(doc[key], draw)}
    if isinstance(doc, list) and doc and draw(st.booleans()):
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], _mutate(doc[i], draw), *doc[i + 1 :]]
    if isinstance(doc, dict) and draw(st.booleans()):
        return {**doc, draw(st.sampled_from(["x", "metrics", "offset", "step"])): draw(_leaves)}
    return draw(_leaves)


def _refusal(validate: Any, doc: Any) -> str | None:
    """``None`` when ``validate`` accepts ``doc``, else its 422 message (any other: a failure)."""
    status, message = 200, None
    try:
        validate(doc)
    except ApiError as exc:
        status, message = exc.status_code, exc.message
    assert status in (200, 422)
    return message


_settings = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(st.one_of(_update().map(lambda b: ("update", b)), _patch().map(lambda b: ("patch", b))))
def test_valid_bodies_pass_the_validator_and_the_schema(kind_body: tuple[str, Any]) -> None:
    """Well-formed bodies of every shape: accepted by the server's validator and the schema."""
    kind, body = kind_body
    validate, schema = (
        (validate_update, _UPDATE_SCHEMA) if kind == "update" else (validate_patch, _PATCH_SCHEMA)
    )

    assert _refusal(validate, body) is None
    assert [] == [e.message for e in schema.iter_errors(body)]


# What the schema cannot express: equal column lengths, base64 whose length is a whole
# number of items, and integers written without a fraction (JSON Schema counts 1.0 as an
# integer; the protocol does not). The validator may refuse these alone.
_BEYOND_SCHEMA = ("must have the same length", "multiple of", "expected base64")


def _has_integral_float(doc: Any) -> bool:
    if isinstance(doc, float):
        return doc.is_integer()
    if isinstance(doc, dict):
        return any(_has_integral_float(v) for v in doc.values())
    if isinstance(doc, list):
        return any(_has_integral_float(v) for v in doc)
    return False


@_settings
@given(st.data())
def test_the_validator_and_the_schema_agree_on_broken_bodies(data: st.DataObject) -> None:
    """Mutated bodies: whatever the validator accepts the schema accepts, and the schema
    refuses nothing more, except the rules it cannot express (listed above)."""
    kind = data.draw(st.sampled_from(["update", "patch"]))
    body = _mutate(data.draw(_update() if kind == "update" else _patch()), data.draw)
    validate, schema = (
        (validate_update, _UPDATE_SCHEMA) if kind == "update" else (validate_patch, _PATCH_SCHEMA)
    )
    schema_ok = schema.is_valid(body)
    refusal = _refusal(validate, body)

    if refusal is None:
        assert schema_ok, [e.message for e in schema.iter_errors(body)]
    elif schema_ok:
        integral = "expected an integer" in refusal and _has_integral_float(body)
        assert integral or any(rule in refusal for rule in _BEYOND_SCHEMA), refusal


# -- real answers match the response schemas --------------------------------------------


@pytest.fixture(scope="module")
def responses() -> jsonschema.Draft202012Validator:
    """A validator factory over the OpenAPI document's components."""
    document = _checked_in("openapi.json")
    return Registry().with_resource(
        "urn:trainreport:openapi",
        Resource.from_contents(document, default_specification=DRAFT202012),
    )


def _schema_for(document: dict[str, Any], method: str, path: str, status: int) -> Any:
    responses = document["paths"][path][method.lower()]["responses"]
    reply = responses.get(str(status)) or responses[f"{str(status)[0]}XX"]
    content = reply["content"]
    return next(iter(content.values()))["schema"]


def test_real_answers_match_the_response_schemas(server: ServerHandle, responses: Registry) -> None:
    """Drive every endpoint over a real socket: each request body validates against its schema
    exactly when the server accepts it, and each answer validates against its response schema."""
    document = _checked_in("openapi.json")
    job = f"c-{uuid.uuid4().hex[:8]}"
    task = f"/v1/jobs/{job}/tasks/train"
    update = {
        "writer_generation": 1,
        "sequence": 1,
        "status": "running",
        "status_details": {"step": 2, "train_loss": 0.5},
        "series": {
            "train_loss": {"offset": 0, "steps": [1, 2], "epochs": [1, None], "values": [1.0, None]}
        },
    }
    calls: list[tuple[str, str, str, Any]] = [
        ("GET", "/v1/capabilities", "/v1/capabilities", None),
        ("GET", "/v1/openapi.json", "/v1/openapi.json", None),
        ("POST", task + "/writers", "/v1/jobs/{job_id}/tasks/{task_id}/writers", {}),
        ("POST", task + "/updates", "/v1/jobs/{job_id}/tasks/{task_id}/updates", update),
        ("POST", task + "/updates", "/v1/jobs/{job_id}/tasks/{task_id}/updates", update),
        ("POST", task + "/writers", "/v1/jobs/{job_id}/tasks/{task_id}/writers", {}),
        ("POST", task + "/updates", "/v1/jobs/{job_id}/tasks/{task_id}/updates", update),
        ("PATCH", task, "/v1/jobs/{job_id}/tasks/{task_id}", {"status_details": {"step": 3}}),
        ("PATCH", task, "/v1/jobs/{job_id}/tasks/{task_id}", {"status": "nope"}),
        ("GET", task, "/v1/jobs/{job_id}/tasks/{task_id}", None),
        ("GET", task + "?metrics=false", "/v1/jobs/{job_id}/tasks/{task_id}", None),
        ("GET", task + "/series?max_points=4", "/v1/jobs/{job_id}/tasks/{task_id}/series", None),
        ("PUT", f"/v1/jobs/{job}", "/v1/jobs/{job_id}", None),
        ("PUT", f"/v1/jobs/{job}-new", "/v1/jobs/{job_id}", None),
        ("GET", f"/v1/jobs/{job}", "/v1/jobs/{job_id}", None),
        ("POST", f"/v1/jobs/{job}/cancel", "/v1/jobs/{job_id}/cancel", None),
        ("GET", "/v1/jobs?limit=5", "/v1/jobs", None),
        ("GET", "/v1/jobs/nope/tasks/x", "/v1/jobs/{job_id}/tasks/{task_id}", None),
        ("GET", "/healthz", "/healthz", None),
        ("GET", "/readyz", "/readyz", None),
        ("GET", "/metrics", "/metrics", None),
    ]
    seen = []
    for method, url_path, template, payload in calls:
        body = None if payload is None else json.dumps(payload).encode()
        headers = JSON if method not in ("GET", "HEAD") else {}
        response = urllib3.request(
            method, server.url + url_path, body=body, headers=headers, retries=False, timeout=20
        )
        schema = _schema_for(document, method, template, response.status)
        if response.headers["Content-Type"].startswith("application/json"):
            answer = json.loads(response.data)
        else:
            answer = response.data.decode()
        validator = jsonschema.Draft202012Validator(
            {"$ref": "urn:trainreport:openapi" + schema["$ref"]}, registry=responses
        )
        errors = [e.message for e in validator.iter_errors(answer)]
        seen.append(response.status)
        assert [] == errors, (method, url_path, response.status, answer)
        operation = document["paths"][template][method.lower()]
        if payload is not None and "requestBody" in operation:
            request_schema = operation["requestBody"]["content"]["application/json"]["schema"]
            request_validator = jsonschema.Draft202012Validator(
                {"$ref": "urn:trainreport:openapi" + request_schema["$ref"]}, registry=responses
            )
            assert (response.status != 422) == request_validator.is_valid(payload), url_path

    assert {200, 201, 404, 409, 422} <= set(seen)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_other_methods_on_the_contract_are_405_json(server: ServerHandle, method: str) -> None:
    """The contract endpoint is read-only: a clean 405, never a 500."""
    response = urllib3.request(
        method, server.url + "/v1/openapi.json", body=b"{}", headers=JSON, retries=False
    )

    assert (405, "method_not_allowed") == (response.status, json.loads(response.data)["error"])
