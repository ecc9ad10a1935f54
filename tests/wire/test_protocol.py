"""The protocol module: each constant and codec of docs/protocol.md is defined once.

The client and the reference server import :mod:`trainreport._wire._protocol`; their
validators stay separate (the end-to-end tests check one against the other).
"""

from __future__ import annotations

import ast
import binascii
import math
from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trainreport
from trainreport._record._machines import TaskStatus
from trainreport._wire import _protocol
from trainreport.server import _wire

SRC = Path(trainreport.__file__).parent

#: Literals that only the protocol module may write (a second copy would drift).
PROTOCOL_LITERALS = [
    _protocol.EXTENSION_SERIES_SUFFIX,
    _protocol.CAPABILITIES_PATH,
    _protocol.JOBS_PATH,
    _protocol.JOB_PATH_TEMPLATE,
    _protocol.TASK_PATH_TEMPLATE,
    _protocol.WRITERS_PATH,
    _protocol.UPDATES_PATH,
    _protocol.ENCODING_GZIP,
    _protocol.ID_PATTERN.pattern,
]
#: Literals too short to look for inside other text: only an exact copy counts.
EXACT_ONLY = {_protocol.WRITERS_PATH, _protocol.UPDATES_PATH, _protocol.ENCODING_GZIP}


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """Every string literal of a module's code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.add(id(value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_each_protocol_literal_is_written_only_in_the_protocol_module() -> None:
    """Client and server code never spell a protocol constant themselves.

    A path or the extension name counts anywhere inside a string
    (``"/v1/jobs/" + ...``); a short suffix (``/updates``) only as a whole
    literal, since messages quote it. Task statuses are also plain words of
    messages and of frameworks' own vocabularies (Lightning's ``"failed"``):
    they are pinned by :func:`test_client_and_server_share_the_protocol_objects`.
    """
    copies = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_protocol.py":
            continue
        for line, text in _code_strings(path):
            for literal in PROTOCOL_LITERALS:
                if (text == literal) if literal in EXACT_ONLY else (literal in text):
                    copies.append(f"{path.relative_to(SRC)}:{line}: {literal!r}")
    assert [] == copies


def test_client_and_server_share_the_protocol_objects() -> None:
    """The server's validator accepts exactly the protocol's statuses, ids and name lengths."""
    assert _protocol.TaskStatus is TaskStatus  # the client's lifecycle uses the protocol's enum
    for status in TaskStatus:
        assert status.value == _wire.validate_patch({"status": status.value}).status
    with pytest.raises(_wire.ApiError):
        _wire.validate_patch({"status": "paused"})
    longest = "a" * _protocol.MAX_ID_CHARS
    assert longest == _wire.validate_id(longest, "job_id")
    with pytest.raises(_wire.ApiError, match="must match"):
        _wire.validate_id(longest + "a", "job_id")
    name = "n" * _protocol.MAX_SERIES_NAME_CHARS
    assert name == _wire.validate_series_name(name, "$")
    with pytest.raises(_wire.ApiError):
        _wire.validate_series_name(name + "n", "$")


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("job-1", True),
        ("a" * _protocol.MAX_ID_CHARS, True),
        ("a" * (_protocol.MAX_ID_CHARS + 1), False),
        ("-leading-dash", False),
        ("has/slash", False),
        ("", False),
        ("Run.2_b", True),
    ],
)
def test_id_pattern_accepts_url_and_file_safe_ids_up_to_the_limit(value: str, valid: bool) -> None:
    """The one id rule: what the server accepts and the client names its run files by."""
    assert valid == (_protocol.ID_PATTERN.fullmatch(value) is not None)


def test_task_path_fills_the_template() -> None:
    """The default task path (docs/protocol.md) with the ids in it."""
    assert "/v1/jobs/j/tasks/t" == _protocol.task_path("j", "t")
    assert "/api/j/t" == _protocol.task_path("j", "t", "/api/{job_id}/{task_id}")


@given(
    steps=st.lists(st.integers(0, 2**63 - 1)),
    epochs=st.lists(st.integers(-(2**31), 2**31 - 1)),
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True)),
)
def test_column_codec_round_trips_every_value_bit_for_bit(
    steps: list[int], epochs: list[int], values: list[float]
) -> None:
    """``decode_column(encode_column(c))`` is ``c`` for each wire typecode (NaN bits too)."""
    for typecode, items in (("q", steps), ("i", epochs), ("d", values)):
        column = array(typecode, items)
        decoded = _protocol.decode_column(_protocol.encode_column(column), typecode)
        assert column.tobytes() == decoded.tobytes()


def test_column_codec_is_little_endian_base64() -> None:
    """The bytes on the wire are little-endian whatever the machine (docs/protocol.md)."""
    assert "AQAAAAAAAAA=" == _protocol.encode_column(array("q", [1]))
    assert math.isinf(_protocol.decode_column("AAAAAAAA8H8=", "d")[0])


@pytest.mark.parametrize(
    ("text", "error"),
    [("AQAAAA==", ValueError), ("not base64!", binascii.Error), ("\u00e9", ValueError)],
    ids=["part-of-an-item", "not-base64", "not-ascii"],
)
def test_decode_column_refuses_what_is_not_whole_items_of_base64(
    text: str, error: type[Exception]
) -> None:
    """Four bytes are not an int64; a bad alphabet or non-ASCII text is no base64."""
    with pytest.raises(error):
        _protocol.decode_column(text, "q")


def test_the_column_codec_is_defined_once() -> None:
    """One ``decode_column`` in the package (``_wire/_protocol.py``), shared by client and server.

    A second one (a list-returning wrapper once lived in ``_payloads``) would be
    a second rule for what a column on the wire means.
    """
    src = Path(trainreport.__file__).resolve().parent
    defined = sorted(
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name == "decode_column"
    )

    assert ["_wire/_protocol.py"] == defined


def test_new_columns_have_the_wire_typecodes() -> None:
    """Stores, records and logs build their columns with the wire's typecodes."""
    assert ("q", "i", "d") == tuple(c.typecode for c in _protocol.new_columns())
    assert (("steps", "q"), ("epochs", "i"), ("values", "d")) == _protocol.COLUMN_TYPECODES
