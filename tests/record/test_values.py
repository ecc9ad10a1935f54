"""Tests for trainreport._record._values: metric values, steps, epochs (docs/design.md#metrics)."""

# House style asserts `expected == actual`, which SIM300 calls a Yoda condition.

from __future__ import annotations

import math
import pickle
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from hostile_values import (
    BadIntegral,
    BadReal,
    FakeTensor,
    GetattributeRaises,
    ItemRaises,
)
from trainreport._record._values import (
    UNCONVERTIBLE,
    EpochRule,
    NotChartable,
    caller_value,
    to_chartable,
    to_step,
)
from trainreport.testing import capture_events

# --------------------------------------------------------------------------- caller_value


@pytest.mark.parametrize("value", [0, 1, -5, 10**30, 0.5, math.nan, math.inf])
def test_caller_value_returns_plain_numbers_themselves(value: object) -> None:
    """int and float are returned as they are (the same object), at no cost."""
    assert value is caller_value(value)


@pytest.mark.parametrize(
    "value", [True, np.float64(1.5), None, "loss", [1.0], {"a": 1.0}, (1,), object()]
)
def test_caller_value_leaves_values_without_item_alone(value: object) -> None:
    """Values that are int/float subclasses or have no .item() are returned unchanged."""
    assert value is caller_value(value)


@pytest.mark.parametrize(
    ("value", "expected", "expected_type"),
    [
        (np.float32(1.5), 1.5, float),
        (np.float16(0.25), 0.25, float),
        (np.int64(7), 7, int),
        (np.uint8(255), 255, int),
        (np.array(2.5), 2.5, float),
        (np.array(3), 3, int),
        (np.bool_(True), True, bool),
        (FakeTensor(0.125), 0.125, float),
    ],
)
def test_caller_value_converts_with_item(
    value: object, expected: object, expected_type: type
) -> None:
    """numpy scalars, 0-d arrays and tensor-likes become plain Python values via .item()."""
    converted = caller_value(value)
    assert (expected, expected_type) == (converted, type(converted))


def test_caller_value_ignores_a_non_callable_item_attribute() -> None:
    """An object whose 'item' is data, not a method, is returned unchanged."""

    class HasItemField:
        item = 3

    value = HasItemField()
    assert value is caller_value(value)


def test_unconvertible_is_reported_as_item_failed() -> None:
    """A value whose .item() raised is not chartable, with the reason 'item() failed'."""
    assert NotChartable("item() failed") == to_chartable(caller_value(ItemRaises()))


def test_unconvertible_keeps_its_identity_through_pickle() -> None:
    """Queued reports of an unstarted Reporter may be pickled; the sentinel stays itself."""
    assert UNCONVERTIBLE is pickle.loads(pickle.dumps(UNCONVERTIBLE))


# --------------------------------------------------------------------------- to_chartable


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0.0),
        (3, 3.0),
        (-2.5, -2.5),
        (10**300, 1e300),
        (np.float32(1.5), 1.5),
        (np.float64(0.25), 0.25),
        (np.float16(2.0), 2.0),
        (np.int64(-4), -4.0),
        (np.uint64(2**63), float(2**63)),
        (Fraction(1, 4), 0.25),
    ],
)
def test_real_numbers_are_chartable(value: object, expected: float) -> None:
    """int, float, numpy scalars and other real numbers become floats (docs/design.md#metrics)."""
    result = to_chartable(value)
    assert (expected, float) == (result, type(result))


@pytest.mark.parametrize("value", [math.inf, -math.inf, np.float32("inf")])
def test_infinities_are_kept_as_floats(value: object) -> None:
    """±Inf is kept as a point (encoded as JSON null by the payload builder)."""
    assert float(value) == to_chartable(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.nan, np.float64("nan"), np.float32("nan")])
def test_nan_is_kept_as_a_float(value: object) -> None:
    """NaN is kept as a point, so a diverging loss shows as a gap."""
    result = to_chartable(value)
    assert isinstance(result, float)
    assert math.isnan(result)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, "bool"),
        (False, "bool"),
        (np.bool_(True), "bool"),
        ("0.5", "string"),
        (b"0.5", "string"),
        (None, "None"),
        ([0.5], "container"),
        ((0.5,), "container"),
        ({"a": 0.5}, "container"),
        ({0.5}, "container"),
        (np.array([1.0, 2.0]), "container"),
        (1 + 2j, "complex"),
        (object(), "object"),
        (FakeTensor(1.0), "object"),
        (10**400, "too large for a float"),
        (Fraction(10**400, 3), "too large for a float"),
        (UNCONVERTIBLE, "item() failed"),
    ],
)
def test_values_that_are_not_chartable_say_why(value: object, reason: str) -> None:
    """Bools, strings, None, containers, other objects and huge ints are refused with a reason."""
    assert NotChartable(reason) == to_chartable(value)


# --------------------------------------------------------------------------- to_step


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (50, 50),
        (50.0, 50),
        (np.int64(50), 50),
        (np.uint32(7), 7),
        (np.float32(50.0), 50),
        (np.float64(8.0), 8),
        (2**53, 2**53),
        (float(2**53), 2**53),
        (Fraction(10, 2), 5),
    ],
)
def test_integral_values_are_steps(value: object, expected: int) -> None:
    """Ints (numpy ones too) and integral floats are steps, up to 2**53."""
    result = to_step(value)
    assert (expected, int) == (result, type(result))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, "bool"),
        (np.bool_(False), "bool"),
        ("50", "string"),
        ("50.0", "string"),
        (None, "None"),
        (-1, "negative"),
        (-1.0, "negative"),
        (np.int8(-3), "negative"),
        (2**53 + 1, "too large"),
        (1e300, "too large"),
        (50.5, "not an integer"),
        (math.nan, "non-finite"),
        (math.inf, "non-finite"),
        ([50], "container"),
        (object(), "object"),
        (UNCONVERTIBLE, "item() failed"),
        (BadIntegral(), "object"),
    ],
)
def test_values_that_are_not_steps_say_why(value: object, reason: str) -> None:
    """Bools, strings, negatives, huge or fractional numbers are not steps."""
    assert NotChartable(reason) == to_step(value)


# --------------------------------------------------------------------------- epochs


def epoch_rule_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trainreport.epoch_rule events among captured ones."""
    return [e for e in events if e["event"] == "trainreport.epoch_rule"]


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        (0.0, 1),
        (0.01, 1),
        (1.0, 1),
        (1.5, 2),
        (2.0001, 3),
        (3.0, 3),
        (np.float32(1.5), 2),
        (np.float64(3.0), 3),
        (Fraction(1, 2), 1),
    ],
)
def test_float_epoch_counts_completed_epochs(epoch: object, expected: int) -> None:
    """A float epoch e becomes max(1, ceil(e)) and does not decide the int rule."""
    rule = EpochRule()
    assert (expected, None) == (rule.resolve(epoch, step=10, num_epochs=None), rule.zero_based)


def test_int_epochs_starting_at_zero_are_zero_based() -> None:
    """A run whose first int epoch is 0 counts epochs from 0 (range(n)): 0 -> 1, 2 -> 3."""
    rule = EpochRule()
    assert [1, 1, 2, 3] == [rule.resolve(e, step=5, num_epochs=None) for e in [0, 0, 1, 2]]
    assert rule.zero_based is True


def test_int_epochs_starting_above_zero_are_one_based() -> None:
    """A run whose first int epoch is not 0 counts from 1; a later 0 still gives epoch 1."""
    rule = EpochRule()
    assert [1, 2, 3, 1] == [rule.resolve(e, step=5, num_epochs=None) for e in [1, 2, 3, 0]]
    assert rule.zero_based is False


def test_int_epoch_starting_at_two_is_one_based() -> None:
    """A resumed run first reporting epoch 2 is one-based (2 stays 2)."""
    rule = EpochRule()
    assert (2, False) == (rule.resolve(2, step=5, num_epochs=None), rule.zero_based)


def test_numpy_integer_epochs_count_as_ints() -> None:
    """numpy integers follow the int rule, including deciding it."""
    rule = EpochRule()
    assert [1, 2] == [rule.resolve(np.int64(e), step=3, num_epochs=None) for e in [0, 1]]
    assert rule.zero_based is True


def test_epoch_rule_is_logged_once_when_decided() -> None:
    """The first int epoch logs trainreport.epoch_rule once, with zero_based."""
    rule = EpochRule()
    with capture_events() as events:
        rule.resolve(0.5, step=1, num_epochs=None)
        for epoch in [0, 1, 2, 0]:
            rule.resolve(epoch, step=1, num_epochs=None)
    found = epoch_rule_events(events)
    assert 1 == len(found)
    assert (True, 0, "info") == (
        found[0]["zero_based"],
        found[0]["first_epoch"],
        found[0]["log_level"],
    )


def test_epoch_rule_given_up_front_is_not_logged() -> None:
    """A rule passed to the constructor is used as is and not logged again."""
    rule = EpochRule(zero_based=False)
    with capture_events() as events:
        result = rule.resolve(0, step=3, num_epochs=None)
    assert (1, False, []) == (result, rule.zero_based, epoch_rule_events(events))


@pytest.mark.parametrize(
    ("epoch", "num_epochs", "expected"),
    [
        (5.5, 3, 3),
        (3.0, 3, 3),
        (1.5, 3, 2),
        (7, 3, 3),
        (7, None, 7),
        (7, 0, 7),
        (7.5, -1, 8),
    ],
)
def test_epoch_is_capped_at_num_epochs_when_known(
    epoch: object, num_epochs: int | None, expected: int
) -> None:
    """The resolved epoch never exceeds num_epochs; unknown or invalid num_epochs do not cap."""
    rule = EpochRule(zero_based=False)
    assert expected == rule.resolve(epoch, step=10, num_epochs=num_epochs)


def test_zero_based_last_epoch_is_capped() -> None:
    """The last zero-based epoch index (num_epochs - 1) maps to num_epochs, and no further."""
    rule = EpochRule(zero_based=True)
    assert [3, 3] == [rule.resolve(e, step=9, num_epochs=3) for e in [2, 3]]


@pytest.mark.parametrize("epoch", [0, 0.0, 2.0, 3])
def test_step_zero_belongs_to_epoch_one(epoch: object) -> None:
    """A report at step 0 is in epoch 1 whatever the epoch value."""
    assert 1 == EpochRule(zero_based=False).resolve(epoch, step=0, num_epochs=None)


def test_step_zero_still_decides_the_int_rule() -> None:
    """The first int epoch decides the rule even when it arrives at step 0 (a sanity check)."""
    rule = EpochRule()
    rule.resolve(0, step=0, num_epochs=None)
    assert (True, 2) == (rule.zero_based, rule.resolve(1, step=4, num_epochs=None))


def test_none_epoch_resolves_to_none() -> None:
    """No epoch: the caller keeps its last epoch, and the rule is not decided."""
    rule = EpochRule()
    assert (None, None) == (rule.resolve(None, step=4, num_epochs=3), rule.zero_based)


@pytest.mark.parametrize(
    ("epoch", "reason"),
    [
        (True, "bool"),
        (np.bool_(True), "bool"),
        ("1", "string"),
        (math.nan, "non-finite"),
        (math.inf, "non-finite"),
        (np.float64("nan"), "non-finite"),
        (-1, "negative"),
        (-0.5, "negative"),
        (np.int32(-2), "negative"),
        ([1], "container"),
        ({"epoch": 1}, "container"),
        (object(), "object"),
        (UNCONVERTIBLE, "item() failed"),
        (BadReal(), "object"),
        pytest.param(GetattributeRaises(), "object", id="getattribute-raises"),
    ],
)
def test_garbage_epochs_are_not_chartable(epoch: object, reason: str) -> None:
    """bool, str, non-finite, negative and other objects are refused; the rule stays undecided."""
    rule = EpochRule()
    assert (NotChartable(reason), None) == (
        rule.resolve(epoch, step=4, num_epochs=3),
        rule.zero_based,
    )
