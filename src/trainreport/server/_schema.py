"""Declarative request shapes: each node validates a parsed JSON value *and* describes itself.

The reference server's request bodies are declared once, as trees of these
nodes (``_wire``): the same tree checks a request (``node.check(value, "$")``,
raising a 422 ``ApiError`` whose ``path`` names the first problem) and
generates the JSON Schema published in ``docs/`` and in the OpenAPI document
(``node.schema()``). There is no second, hand-written copy of a rule to drift.

A JSON Schema cannot say everything a check does; where it cannot, the check
is stricter and the schema's ``description`` says so (equal column lengths,
base64 columns whose length is a whole number of items, Unicode text without
lone surrogates). So a body the server accepts always validates against the
schema; ``tests/server/test_server_contract.py`` checks that with generated bodies.

Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol

import attrs

from trainreport._wire._protocol import (
    EPOCHS_TYPECODE,
    STEPS_TYPECODE,
    VALUES_TYPECODE,
    decode_column,
)
from trainreport.server._errors import ApiError

__all__ = [
    "MAX_INT",
    "Boolean",
    "Column",
    "Enum",
    "Field",
    "Forbidden",
    "Integer",
    "List",
    "MapOf",
    "Node",
    "Nullable",
    "Number",
    "Open",
    "Record",
    "Text",
    "expect_int",
    "expect_number",
    "expect_object",
    "invalid",
]

#: Largest step, epoch, offset, generation or sequence accepted (SQLite's INTEGER).
MAX_INT = 2**63 - 1
_MAX_FLOAT = sys.float_info.max


class Node(Protocol):
    """A JSON value's rule: ``check`` enforces it, ``schema`` publishes it."""

    def check(self, value: Any, path: str) -> Any:
        """Return the value as stored (ints as floats for numbers, columns decoded).

        Raises:
            ApiError: 422 ``invalid_body`` naming ``path`` (or a path below it).
        """

    def schema(self) -> dict[str, Any] | bool:
        """The JSON Schema (draft 2020-12) of the values ``check`` accepts, or wider."""


def invalid(message: str, path: str) -> NoReturn:
    """Raise the 422 ``invalid_body`` error for ``path`` (``"... @ $.a.b"``)."""
    raise ApiError(422, "invalid_body", f"{message} @ {path}", {"path": path})


def expect_object(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else 422 at ``path``."""
    if not isinstance(value, dict):
        invalid("expected an object", path)
    return value


def expect_int(value: Any, path: str, *, minimum: int, maximum: int = MAX_INT) -> int:
    """``value`` if it is a JSON integer (not ``true``, not ``1.0``) in range, else 422."""
    if type(value) is not int or not minimum <= value <= maximum:
        invalid(f"expected an integer >= {minimum}", path)
    return value


def expect_number(value: Any, path: str) -> float | None:
    """``value`` as a finite float, ``None`` for null, else 422 (``bool`` is not a number)."""
    if value is None:
        return None
    if type(value) is float:
        if not math.isfinite(value):
            invalid("expected a finite number or null", path)
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            invalid("number out of range", path)
    invalid("expected a number or null", path)


def _described(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {**schema, "description": description} if description else schema


def _key(name: str) -> str:
    return f"[{json.dumps(name, ensure_ascii=False)}]"


@attrs.frozen
class Integer:
    """A JSON integer in ``[minimum, maximum]``, or ``null`` when ``nullable``."""

    minimum: int = 0
    maximum: int = MAX_INT
    nullable: bool = False
    description: str = ""

    def check(self, value: Any, path: str) -> int | None:
        if type(value) is int and self.minimum <= value <= self.maximum:
            return value
        if value is None and self.nullable:
            return None
        return expect_int(value, path, minimum=self.minimum, maximum=self.maximum)

    def schema(self) -> dict[str, Any]:
        kind: Any = ["integer", "null"] if self.nullable else "integer"
        return _described(
            {"type": kind, "minimum": self.minimum, "maximum": self.maximum}, self.description
        )


@attrs.frozen
class Number:
    """A finite JSON number (stored as a float), or ``null`` when ``nullable``."""

    nullable: bool = True
    description: str = ""

    def check(self, value: Any, path: str) -> float | None:
        if type(value) is float and math.isfinite(value):
            return value
        if value is None and not self.nullable:
            invalid("expected a number", path)
        return expect_number(value, path)

    def schema(self) -> dict[str, Any]:
        kind: Any = ["number", "null"] if self.nullable else "number"
        return _described(
            {"type": kind, "minimum": -_MAX_FLOAT, "maximum": _MAX_FLOAT}, self.description
        )


@attrs.frozen
class Boolean:
    """``true`` or ``false``."""

    description: str = ""

    def check(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            invalid("expected true or false", path)
        return value

    def schema(self) -> dict[str, Any]:
        return _described({"type": "boolean"}, self.description)


@attrs.frozen
class Nullable:
    """``null`` or what ``node`` accepts."""

    node: Node
    description: str = ""

    def check(self, value: Any, path: str) -> Any:
        return None if value is None else self.node.check(value, path)

    def schema(self) -> dict[str, Any]:
        return _described({"anyOf": [self.node.schema(), {"type": "null"}]}, self.description)


@attrs.frozen
class Enum:
    """One of a fixed set of strings."""

    values: tuple[str, ...]
    description: str = ""

    def check(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or value not in self.values:
            invalid(f"expected one of {', '.join(sorted(self.values))}", path)
        return value

    def schema(self) -> dict[str, Any]:
        return _described({"type": "string", "enum": sorted(self.values)}, self.description)


@attrs.frozen
class Text:
    """A string of ``min_length..max_length`` characters (code points) matching ``pattern``.

    ``pattern`` is used as is in both the check (``re.fullmatch``) and the
    schema (anchored with ``^...$``), so it must mean the same in Python and
    ECMA-262 regular expressions (character classes with ``\\uXXXX`` do).
    """

    min_length: int = 0
    max_length: int | None = None
    pattern: str | None = None
    message: str = "expected a string"
    description: str = ""

    def check(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            invalid(self.message, path)
        too_long = self.max_length is not None and len(value) > self.max_length
        if len(value) < self.min_length or too_long:
            invalid(self.message, path)
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            invalid(self.message, path)
        return value

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "string"}
        if self.min_length:
            schema["minLength"] = self.min_length
        if self.max_length is not None:
            schema["maxLength"] = self.max_length
        if self.pattern is not None:
            schema["pattern"] = f"^{self.pattern}$"
        return _described(schema, self.description)


@attrs.frozen
class Open:
    """Any JSON value, stored as sent (documented, not checked)."""

    description: str = ""
    example: Any = None

    def check(self, value: Any, path: str) -> Any:
        return value

    def schema(self) -> dict[str, Any]:
        schema = _described({}, self.description)
        if self.example is not None:
            schema["examples"] = [self.example]
        return schema


@attrs.frozen
class Forbidden:
    """A key that must not be present (its schema is ``false``)."""

    message: str

    def check(self, value: Any, path: str) -> NoReturn:
        invalid(self.message, path)

    def schema(self) -> bool:
        return False


@attrs.frozen
class List:
    """A JSON array whose every item follows ``items``."""

    items: Node
    description: str = ""

    def check(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            invalid("expected an array", path)
        check = self.items.check
        return [check(item, f"{path}[{i}]") for i, item in enumerate(value)]

    def schema(self) -> dict[str, Any]:
        return _described({"type": "array", "items": self.items.schema()}, self.description)


@attrs.frozen
class Column:
    """A column of numbers: a JSON array of ``items``, or base64 of little-endian binary items.

    Args:
        typecode: the binary item: ``"q"`` (int64), ``"i"`` (int32) or ``"d"``
            (float64; NaN and infinities decode to ``None``).
        items: the rule for each item (for both forms).
    """

    typecode: str
    items: Integer | Number
    description: str = ""

    _NAMES = {  # noqa: RUF012 - a class constant
        STEPS_TYPECODE: "int64",
        EPOCHS_TYPECODE: "int32",
        VALUES_TYPECODE: "float64",
    }

    def check(self, value: Any, path: str) -> list[Any]:
        if isinstance(value, str):
            return self._decode(value, path)
        if not isinstance(value, list):
            invalid("expected an array or a base64 string", path)
        check = self.items.check
        return [check(item, f"{path}[{i}]") for i, item in enumerate(value)]

    def _decode(self, text: str, path: str) -> list[Any]:
        """Decode and validate a binary column with checks that run over the array in C.

        The client sends columns this way because formatting floats as decimal
        text costs the reporter thread far more GIL time than copying their
        bytes (``docs/protocol.md``). No Python code runs per item unless an
        item is out of range.
        """
        try:
            column = decode_column(text, self.typecode)
        except ValueError as exc:  # binascii.Error and UnicodeEncodeError are ValueErrors
            multiple = "multiple of" in str(exc)
            invalid(str(exc) if multiple else "expected base64 text", path)
        if self.typecode == VALUES_TYPECODE:
            if math.isfinite(sum(column)):  # a NaN or an infinity makes the sum non-finite
                return column.tolist()
            return [v if math.isfinite(v) else None for v in column]
        minimum = self.items.minimum if isinstance(self.items, Integer) else 0
        if column and min(column) < minimum:
            first = next(i for i, v in enumerate(column) if v < minimum)
            invalid(f"expected an integer >= {minimum}", f"{path}[{first}]")
        return column.tolist()

    def schema(self) -> dict[str, Any]:
        binary = {
            "type": "string",
            "contentEncoding": "base64",
            "description": (
                f"base64 of little-endian {self._NAMES[self.typecode]} items (a whole number "
                "of items; decoded items follow the same rule as array items"
                + ("; NaN and infinities are null)" if self.typecode == VALUES_TYPECODE else ")")
            ),
        }
        array_form = {"type": "array", "items": self.items.schema()}
        return _described({"oneOf": [array_form, binary]}, self.description)


@attrs.frozen
class Field:
    """One key of a :class:`Record`."""

    name: str
    node: Node
    required: bool = False


@attrs.frozen
class Record:
    """A JSON object with known keys, checked in declaration order.

    Args:
        fields: the known keys.
        extra: what other keys may hold: ``None`` refuses them (a typo would
            otherwise be silently lost), a node checks each of their values.
        rule: a check across fields, run last on the checked object.
        rule_text: that rule in words, for the schema's description.
        description: the object's description.
    """

    fields: tuple[Field, ...]
    extra: Node | None = None
    rule: Callable[[Mapping[str, Any], str], None] | None = None
    rule_text: str = ""
    description: str = ""
    _by_name: dict[str, Field] = attrs.field(init=False, repr=False, eq=False)
    _known: frozenset[str] = attrs.field(init=False, repr=False, eq=False)
    _required: frozenset[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        by_name = {f.name: f for f in self.fields}
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_known", frozenset(by_name))
        object.__setattr__(self, "_required", frozenset(f.name for f in self.fields if f.required))

    def check(self, value: Any, path: str) -> dict[str, Any]:
        obj = expect_object(value, path)
        by_name = self._by_name
        if self.extra is None and not obj.keys() <= self._known:
            unknown = sorted(k for k in obj if k not in by_name)
            invalid(f"unknown key {unknown[0]!r}", path)
        checked: dict[str, Any] = {}  # in the order the client sent
        for name, item in obj.items():
            field = by_name.get(name)
            if field is not None:
                checked[name] = field.node.check(item, f"{path}.{name}")
            else:
                assert self.extra is not None  # unknown keys were refused above
                checked[name] = self.extra.check(item, f"{path}{_key(name)}")
        if not self._required <= obj.keys():
            missing = next(f.name for f in self.fields if f.required and f.name not in obj)
            invalid(f"{missing!r} is required", f"{path}.{missing}")
        if self.rule is not None:
            self.rule(checked, path)
        return checked

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {f.name: f.node.schema() for f in self.fields},
        }
        required = [f.name for f in self.fields if f.required]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False if self.extra is None else self.extra.schema()
        text = " ".join(t for t in (self.description, self.rule_text) if t)
        return _described(schema, text)


@attrs.frozen
class MapOf:
    """A JSON object used as a map: every key follows ``key``, every value ``value``."""

    key: Text
    value: Node
    description: str = ""

    def check(self, value: Any, path: str) -> dict[str, Any]:
        obj = expect_object(value, path)
        check_key, check_value = self.key.check, self.value.check
        return {
            check_key(name, path): check_value(item, f"{path}{_key(name)}")
            for name, item in obj.items()
        }

    def schema(self) -> dict[str, Any]:
        return _described(
            {
                "type": "object",
                "propertyNames": self.key.schema(),
                "additionalProperties": self.value.schema(),
            },
            self.description,
        )
