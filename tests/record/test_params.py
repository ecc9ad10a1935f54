"""Tests for trainreport._record._params: flattening hyperparameters (docs/design.md#public-api)."""

# House style asserts `expected == actual`, which SIM300 calls a Yoda condition.

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from hostile_values import (
    ReprRaises,
)
from trainreport._record._params import flatten_params

# --------------------------------------------------------------------------- flatten_params


def test_nested_params_are_flattened_with_slashes() -> None:
    """Nested mappings become one level of 'a/b' keys (docs/design.md#public-api)."""
    assert {"opt/lr": 1e-4, "opt/betas/0": 0.9, "seed": 1} == flatten_params(
        {"opt": {"lr": 1e-4, "betas": {"0": 0.9}}, "seed": 1}
    )


def test_custom_separator() -> None:
    """The separator between nested keys can be chosen."""
    assert {"opt.lr": 0.1} == flatten_params({"opt": {"lr": 0.1}}, sep=".")


def test_json_scalars_are_kept_with_their_types() -> None:
    """str, int, finite float, bool and None are kept as they are (bool stays bool)."""
    params = {"s": "adam", "i": 3, "f": 0.5, "t": True, "n": None, "big": 10**30}
    flat = flatten_params(params)
    assert params == flat
    assert bool is type(flat["t"])


@pytest.mark.parametrize(
    ("value", "expected"), [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")]
)
def test_non_finite_floats_become_their_repr(value: float, expected: str) -> None:
    """NaN and ±Inf are not JSON; they are kept as the strings 'nan', 'inf', '-inf'."""
    assert {"x": expected} == flatten_params({"x": value})


def test_numpy_scalars_become_python_scalars() -> None:
    """numpy integers, floats and bools become the matching Python scalar."""
    flat = flatten_params({"i": np.int64(4), "f": np.float64(0.5), "b": np.bool_(False)})
    assert [(4, int), (0.5, float), (False, bool)] == [(v, type(v)) for v in flat.values()]


def test_lists_of_scalars_are_kept_as_lists() -> None:
    """Lists and tuples of scalars are kept as lists, elements converted like scalars."""
    assert {"l": [1, "a", None, "nan"], "t": [0.9, 0.999]} == flatten_params(
        {"l": [1, "a", None, math.nan], "t": (0.9, 0.999)}
    )


def test_other_values_become_truncated_strings() -> None:
    """Anything else is str(value), cut at 1000 characters."""

    class Model:
        def __str__(self) -> str:
            return "M" * 5000

    flat = flatten_params({"model": Model(), "nested": [{"a": 1}], "set": {1}})
    assert {"model": "M" * 1000, "nested": "[{'a': 1}]", "set": "{1}"} == flat


def test_long_lists_become_strings() -> None:
    """A list of more than 1000 scalars is kept as (truncated) text, not as a huge list."""
    flat = flatten_params({"ids": list(range(2000))})
    assert (str, 1000) == (type(flat["ids"]), len(flat["ids"]))  # type: ignore[arg-type]


def test_non_string_keys_are_converted_with_str() -> None:
    """Keys such as ints and tuples become their str()."""
    assert {"1": "a", "(2, 3)/x": 1} == flatten_params({1: "a", (2, 3): {"x": 1}})  # type: ignore[dict-item]


def test_cycles_are_cut() -> None:
    """A mapping containing itself is cut with '<cycle>' instead of recursing forever."""
    params: dict[str, object] = {"lr": 0.1}
    params["self"] = {"again": params}
    assert {"lr": 0.1, "self/again": "<cycle>"} == flatten_params(params)


def test_shared_sub_mappings_are_not_cycles() -> None:
    """The same sub-mapping under two keys is flattened twice, not cut."""
    shared = {"lr": 0.1}
    assert {"a/lr": 0.1, "b/lr": 0.1} == flatten_params({"a": shared, "b": shared})


def test_empty_sub_mappings_contribute_nothing() -> None:
    """An empty nested mapping has no leaves."""
    assert {"x": 1} == flatten_params({"empty": {}, "x": 1})


def test_deep_nesting_does_not_raise() -> None:
    """Nesting deeper than the recursion limit gives text at the cut, never RecursionError."""
    params: dict[str, object] = {}
    node = params
    for _ in range(5000):
        child: dict[str, object] = {}
        node["k"] = child
        node = child
    flat = flatten_params(params)
    assert 1 == len(flat)
    (key,) = flat
    assert 64 == key.count("k")


def test_hostile_values_and_keys_do_not_raise() -> None:
    """Values and keys whose str() raises become placeholders."""
    flat = flatten_params({"v": ReprRaises(), ReprRaises(): 1})  # type: ignore[dict-item]
    assert {"v": "<unprintable ReprRaises>", "<unprintable ReprRaises>": 1} == flat


def test_mapping_that_fails_while_iterating_keeps_what_was_read() -> None:
    """A mapping whose iteration raises keeps the items read before the failure."""

    class Broken(dict[str, object]):
        def items(self) -> Any:
            yield ("a", 1)
            raise RuntimeError("broken")

    assert {"a": 1} == flatten_params(Broken())


def test_non_mapping_params_give_nothing() -> None:
    """Something that is not a mapping flattens to an empty dict instead of raising."""
    assert {} == flatten_params([("a", 1)])  # type: ignore[arg-type]
