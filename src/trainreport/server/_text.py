"""Malformed text in a parsed request body: a 422 that names the field (never a 500).

JSON text may spell strings that are not Unicode text: a lone surrogate escape
such as ``"\\ud800"`` parses into a Python ``str`` that cannot be encoded as
UTF-8, so SQLite (and every JSON encoder with ``ensure_ascii=False``) fails on
it later. The whole kind is caught at the door: every string of the document,
dictionary keys included and at any depth, must be encodable as UTF-8, else
422 ``invalid_body`` with the path of the first bad one (``$.status_details.note``,
``$.series["\\ud800"]``).

Only an escape can produce a surrogate (strict UTF-8 decoding refuses encoded
ones), so a body without ``\\uD...`` escapes (almost every body) is not walked.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from trainreport.server._wire import ApiError

__all__ = ["check_text"]

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_text(doc: Any, body: bytes | bytearray) -> Any:
    """Refuse a parsed body whose strings are not valid Unicode (lone surrogates).

    Args:
        doc: the document ``parse_json(body)`` returned.
        body: the body it was parsed from (only searched for surrogate escapes).

    Returns:
        ``doc`` unchanged.

    Raises:
        ApiError: 422 ``invalid_body`` with ``path`` naming the first malformed
            string or key.
    """
    if _SURROGATE_ESCAPE.search(body) is not None:
        _walk(doc, "$")
    return doc


def _walk(value: Any, path: str) -> None:
    if isinstance(value, str):
        if not _encodable(value):
            _refuse(path)
    elif isinstance(value, dict):
        for key, item in value.items():
            child = _child(path, key)
            if not _encodable(key):
                _refuse(child)
            _walk(item, child)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _child(path: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"  # ASCII escapes: the path itself is always valid text


def _refuse(path: str) -> NoReturn:
    raise ApiError(
        422,
        "invalid_body",
        f"text must be valid Unicode (no lone surrogate escapes) @ {path}",
        {"path": path},
    )
