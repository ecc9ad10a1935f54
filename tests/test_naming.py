"""Tests for trainreport._naming: metric naming and value rules (DESIGN §3)."""

# House style asserts `expected == actual` (STYLE.md), which SIM300 calls a Yoda condition.

from __future__ import annotations

import math
import numbers
import pickle
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trainreport._naming as naming
from trainreport._naming import (
    MAX_NAME_LENGTH,
    MAX_PARAM_ITEMS,
    STRIPPED_PREFIXES,
    UNCONVERTIBLE,
    DatasetOrder,
    EpochRule,
    NotChartable,
    SeriesSelector,
    caller_value,
    canonical_prefix,
    check_name,
    flatten_params,
    flatten_params_bounded,
    qualify,
    to_chartable,
    to_step,
)
from trainreport.testing import capture_events

# --------------------------------------------------------------------------- hostile objects


class ItemRaises:
    """Tensor-like whose .item() fails (a multi-element tensor, a freed buffer)."""

    def item(self) -> float:
        raise RuntimeError("a Tensor with 2 elements cannot be converted to Scalar")


class FakeTensor:
    """A 0-d tensor stand-in: .item() returns a plain number."""

    def __init__(self, value: object) -> None:
        self._value = value

    def item(self) -> object:
        return self._value


class GetattrRaises:
    """Attribute lookup of anything missing raises something other than AttributeError."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name} for you")


class GetattributeRaises:
    """Every attribute access raises, including __class__ (used by isinstance)."""

    def __getattribute__(self, name: str) -> object:
        raise RuntimeError(f"no {name} for you")


class ClassPropertyRaises:
    """isinstance() consults __class__, which raises here."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("no class")


class ReprRaises:
    """str() and repr() both raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class BadReal:
    """Registered as a numbers.Real, but float() of it raises."""

    def __float__(self) -> float:
        raise ValueError("not today")


numbers.Real.register(BadReal)


class BadIntegral:
    """Registered as a numbers.Integral, but int() of it raises."""

    def __int__(self) -> int:
        raise ValueError("not today")

    def __float__(self) -> float:
        raise ValueError("not today")


numbers.Integral.register(BadIntegral)


class ItemReturnsHostile:
    """.item() succeeds but returns an object whose attribute access raises."""

    def item(self) -> object:
        return GetattributeRaises()


HOSTILE: list[object] = [
    ItemRaises(),
    GetattrRaises(),
    GetattributeRaises(),
    ClassPropertyRaises(),
    ReprRaises(),
    BadReal(),
    BadIntegral(),
    ItemReturnsHostile(),
    FakeTensor(GetattributeRaises()),
    UNCONVERTIBLE,
    Fraction(10**400, 3),
    np.array([1.0, 2.0]),
    np.array(["a"]),
]

# --------------------------------------------------------------------------- phase prefixes

TABLE_ENTRIES = [
    (phase, prefix) for phase, prefixes in STRIPPED_PREFIXES.items() for prefix in prefixes
]


def test_stripped_prefix_table_is_pinned() -> None:
    """The stripped-prefix table holds exactly the entries DESIGN §3 lists."""
    assert {
        "train": ("train_", "train/"),
        "validation": (
            "val_",
            "val/",
            "eval_",
            "eval/",
            "valid_",
            "validation_",
            "validation/",
        ),
    } == dict(STRIPPED_PREFIXES)


def test_max_name_length_is_200() -> None:
    """Metric names up to 200 characters are accepted."""
    assert 200 == MAX_NAME_LENGTH


@pytest.mark.parametrize(
    ("phase", "expected"),
    [("train", "train_"), ("validation", "val_"), ("test", "test_"), ("system", "system_")],
)
def test_canonical_prefix_per_phase(phase: str, expected: str) -> None:
    """Train and validation have fixed prefixes; any other phase P gets 'P_'."""
    assert expected == canonical_prefix(phase)


@pytest.mark.parametrize(("phase", "prefix"), TABLE_ENTRIES)
def test_every_table_prefix_is_replaced_by_the_canonical_one(phase: str, prefix: str) -> None:
    """Each listed prefix of a phase is stripped before the canonical prefix is added."""
    assert canonical_prefix(phase) + "loss" == qualify(prefix + "loss", phase)


@pytest.mark.parametrize(("phase", "prefix"), TABLE_ENTRIES)
def test_name_that_is_exactly_a_prefix_is_not_stripped(phase: str, prefix: str) -> None:
    """A name equal to a prefix keeps it (nothing would remain), under the canonical prefix."""
    assert canonical_prefix(phase) + prefix == qualify(prefix, phase)


@pytest.mark.parametrize(("phase", "prefix"), TABLE_ENTRIES)
def test_every_table_prefix_works_with_a_dataset_qualifier(phase: str, prefix: str) -> None:
    """The qualifier goes between the canonical prefix and the stripped name."""
    assert canonical_prefix(phase) + "b_loss" == qualify(prefix + "loss", phase, "b")


@pytest.mark.parametrize(
    ("name", "phase", "expected"),
    [
        ("loss", "train", "train_loss"),
        ("train/loss", "train", "train_loss"),
        ("eval_loss", "validation", "val_loss"),
        ("loss", "validation", "val_loss"),
        ("acc", "test", "test_acc"),
        ("test_acc", "test", "test_acc"),
        ("test/acc", "test", "test_acc"),
        ("test_", "test", "test_test_"),
        ("gpu_util", "system", "system_gpu_util"),
        ("system/gpu_util", "system", "system_gpu_util"),
    ],
)
def test_qualify_examples(name: str, phase: str, expected: str) -> None:
    """The examples of DESIGN §3 and the task brief, including phases outside the table."""
    assert expected == qualify(name, phase)


@pytest.mark.parametrize(
    ("name", "phase", "expected"),
    [
        ("train_train_loss", "train", "train_train_loss"),
        ("train/train_loss", "train", "train_train_loss"),
        ("val_eval_loss", "validation", "val_eval_loss"),
        ("eval_val_loss", "validation", "val_val_loss"),
        ("test_test_acc", "test", "test_test_acc"),
    ],
)
def test_double_prefix_strips_only_one(name: str, phase: str, expected: str) -> None:
    """At most one prefix is stripped; a second one is part of the metric's name."""
    assert expected == qualify(name, phase)


@pytest.mark.parametrize(
    ("name", "phase", "expected"),
    [
        ("val_loss", "train", "train_val_loss"),
        ("train_loss", "validation", "val_train_loss"),
        ("Train_loss", "train", "train_Train_loss"),
        ("trainloss", "train", "train_trainloss"),
        ("evaluation_loss", "validation", "val_evaluation_loss"),
    ],
)
def test_only_the_phases_own_prefixes_are_stripped(name: str, phase: str, expected: str) -> None:
    """Another phase's prefix, a different case or a missing separator is not stripped."""
    assert expected == qualify(name, phase)


def test_longest_listed_prefix_is_stripped_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """When two listed prefixes match, the longer one is stripped (whatever the table order)."""
    monkeypatch.setattr(naming, "STRIPPED_PREFIXES", {"validation": ("val_", "val_x_")})
    assert "val_loss" == qualify("val_x_loss", "validation")


@pytest.mark.parametrize(
    ("name", "phase", "qualifier", "expected"),
    [
        ("loss", "validation", "squad", "val_squad_loss"),
        ("eval_loss", "validation", "b", "val_b_loss"),
        ("loss", "validation", None, "val_loss"),
        ("acc", "test", "mnist", "test_mnist_acc"),
    ],
)
def test_dataset_qualifier_follows_the_canonical_prefix(
    name: str, phase: str, qualifier: str | None, expected: str
) -> None:
    """qualify('loss', 'validation', 'squad') is 'val_squad_loss' (DESIGN §3)."""
    assert expected == qualify(name, phase, qualifier)


# --------------------------------------------------------------------------- check_name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("loss", None),
        ("a" * 200, None),
        ("train/loss ü 损失", None),
        (" ", None),
        ("a" * 201, "too long"),
        ("", "empty"),
        (None, "not a string"),
        (3, "not a string"),
        (b"loss", "not a string"),
        (("loss",), "not a string"),
        ("lo\nss", "control character"),
        ("lo\x00ss", "control character"),
        ("lo\x7fss", "control character"),
        ("lo\x85ss", "control character"),
        ("lo\ud800ss", "surrogate character"),
    ],
)
def test_check_name(name: object, expected: str | None) -> None:
    """Usable names are non-empty strings of at most 200 characters without control characters."""
    assert expected == check_name(name)


# --------------------------------------------------------------------------- datasets


def test_the_unnamed_dataset_seen_first_keeps_plain_names_and_is_remembered() -> None:
    """dataset=None is a dataset like any other: first seen, it keeps plain val_ names."""
    order = DatasetOrder()
    assert [None, "heldout", None] == [order.qualifier(d) for d in [None, "heldout", None]]
    assert ("unnamed", "heldout") == order.datasets


def test_the_unnamed_dataset_after_a_named_one_is_qualified() -> None:
    """A named dataset seen first keeps plain names; the unnamed one then gets its own."""
    order = DatasetOrder()
    assert [None, "unnamed", None] == [order.qualifier(d) for d in ["heldout", None, "heldout"]]
    assert ("heldout", "unnamed") == order.datasets


def test_first_named_dataset_keeps_plain_names_later_ones_are_qualified() -> None:
    """The first dataset seen gets plain names; every later distinct one its own name."""
    order = DatasetOrder()
    assert [None, "b", None, "c", "b"] == [order.qualifier(d) for d in ["a", "b", "a", "c", "b"]]
    assert ("a", "b", "c") == order.datasets


def test_an_empty_or_unnamed_dataset_name_is_the_unnamed_dataset() -> None:
    """``""`` and ``"unnamed"`` name the same dataset as ``None``."""
    order = DatasetOrder()
    assert [None, "a", None, None] == [order.qualifier(d) for d in ["", "a", None, "unnamed"]]
    assert ("unnamed", "a") == order.datasets


def test_dataset_order_seeded_from_a_resumed_task_keeps_names() -> None:
    """A resumed run seeded with val_datasets names its datasets as before, new ones after."""
    order = DatasetOrder(["a", "b"])
    assert ["b", None, "c"] == [order.qualifier(d) for d in ["b", "a", "c"]]
    assert ("a", "b", "c") == order.datasets


def test_dataset_order_seed_skips_repeats_and_junk() -> None:
    """Malformed stored entries (repeats, empty, non-strings) are skipped when seeding."""
    order = DatasetOrder(["a", "", "a", 3, None, "b"])  # type: ignore[list-item]
    assert ("a", "b") == order.datasets


def test_a_stored_order_with_the_unnamed_dataset_restores_its_place() -> None:
    """Stored ``["heldout", "unnamed"]``: a resumed run keeps heldout plain, unnamed qualified."""
    order = DatasetOrder(["heldout", "unnamed"])
    assert ["unnamed", None] == [order.qualifier(d) for d in [None, "heldout"]]


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


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(ItemRaises(), id="item-raises"),
        pytest.param(GetattrRaises(), id="getattr-raises"),
        pytest.param(GetattributeRaises(), id="getattribute-raises"),
        pytest.param(ClassPropertyRaises(), id="class-property-raises"),
        pytest.param(np.ones(3), id="multi-element-array"),
    ],
)
def test_caller_value_failed_conversion_gives_the_sentinel(value: object) -> None:
    """.item() raising, or attribute access raising, gives UNCONVERTIBLE instead of raising."""
    assert UNCONVERTIBLE is caller_value(value)


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
    """int, float, numpy scalars and other real numbers become floats (DESIGN §3)."""
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


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(GetattrRaises(), id="getattr-raises"),
        pytest.param(GetattributeRaises(), id="getattribute-raises"),
        pytest.param(ClassPropertyRaises(), id="class-property-raises"),
        pytest.param(BadReal(), id="float-raises"),
        pytest.param(ReprRaises(), id="repr-raises"),
    ],
)
def test_to_chartable_refuses_hostile_objects_without_raising(value: object) -> None:
    """Objects whose attribute access or float() raises are refused, not raised."""
    assert isinstance(to_chartable(value), NotChartable)


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


# --------------------------------------------------------------------------- SeriesSelector


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured events called ``name``."""
    return [e for e in events if e["event"] == name]


def test_none_means_every_metric_by_default() -> None:
    """time_series_metrics=None keeps a history of every metric."""
    selector = SeriesSelector(None)
    assert (("*",), True, True) == (
        selector.patterns,
        selector.is_series("train_loss"),
        selector.is_series("system_gpu"),
    )


def test_none_means_the_adapters_default() -> None:
    """With an adapter's default list, None selects only what the default matches."""
    selector = SeriesSelector(None, default=("train_loss", "val_*"))
    assert [True, True, False] == [
        selector.is_series(n) for n in ["train_loss", "val_acc", "train_learning_rate"]
    ]


def test_star_means_every_metric() -> None:
    """['*'] keeps a history of every metric."""
    selector = SeriesSelector(["*"])
    assert [True, True] == [selector.is_series(n) for n in ["train_loss", "test_x"]]


def test_empty_list_means_no_history() -> None:
    """[] keeps no history at all, and has no pattern to warn about."""
    selector = SeriesSelector([])
    assert ((), False, ()) == (
        selector.patterns,
        selector.is_series("train_loss"),
        selector.unmatched_patterns(),
    )


def test_bare_string_is_one_pattern() -> None:
    """A bare str is one pattern, not a list of one-character patterns."""
    selector = SeriesSelector("val_*")
    assert (("val_*",), True, False, False) == (
        selector.patterns,
        selector.is_series("val_loss"),
        selector.is_series("v"),
        selector.is_series("train_loss"),
    )


def test_patterns_match_case_sensitively() -> None:
    """Matching uses fnmatchcase: 'Train_*' does not match 'train_loss'."""
    selector = SeriesSelector(["Train_*"])
    assert (False, True) == (selector.is_series("train_loss"), selector.is_series("Train_loss"))


def test_glob_features_are_supported() -> None:
    """Character classes and '?' work as in fnmatch."""
    selector = SeriesSelector(["train_[lg]?ss", "val_*acc"])
    assert [True, True, False, True, False] == [
        selector.is_series(n)
        for n in ["train_loss", "train_gass", "train_moss", "val_top1_acc", "val_acc_top1"]
    ]


def test_repeated_patterns_are_kept_once() -> None:
    """A pattern listed twice is one pattern (and at most one warning)."""
    assert ("a*", "b") == SeriesSelector(["a*", "b", "a*"]).patterns


def test_non_string_entries_are_dropped_with_one_warning_each() -> None:
    """Non-string entries are dropped, one warning each; the usable ones stay."""
    with capture_events() as events:
        selector = SeriesSelector(["train_*", 3, None, "val_loss"])
    dropped = events_named(events, "trainreport.config_pattern_dropped")
    assert [(1, "int", "warning"), (2, "NoneType", "warning")] == [
        (e["index"], e["type"], e["log_level"]) for e in dropped
    ]
    assert (("train_*", "val_loss"), [], False) == (
        selector.patterns,
        events_named(events, "trainreport.config_patterns_unusable"),
        selector.is_series("test_acc"),
    )


def test_all_entries_unusable_means_every_metric() -> None:
    """If entries were given but none is a string, every metric gets a history, with a warning."""
    with capture_events() as events:
        selector = SeriesSelector([3, None])
    assert 2 == len(events_named(events, "trainreport.config_pattern_dropped"))
    assert 1 == len(events_named(events, "trainreport.config_patterns_unusable"))
    assert (True, True) == (selector.is_series("train_loss"), selector.is_series("x"))


@pytest.mark.parametrize("patterns", [5, 1.5, True, b"train_*", object()])
def test_non_iterable_patterns_mean_every_metric(patterns: object) -> None:
    """Any other non-list input is treated like all-unusable: every metric, one warning."""
    with capture_events() as events:
        selector = SeriesSelector(patterns)
    assert 1 == len(events_named(events, "trainreport.config_patterns_unusable"))
    assert (True, ()) == (selector.is_series("train_loss"), selector.unmatched_patterns())


def test_iterable_that_fails_midway_means_every_metric() -> None:
    """An iterable that raises while being read is treated like all-unusable."""

    def broken() -> Iterator[str]:
        yield "train_*"
        raise RuntimeError("broken config source")

    with capture_events() as events:
        selector = SeriesSelector(broken())
    assert 1 == len(events_named(events, "trainreport.config_patterns_unusable"))
    assert True is selector.is_series("val_loss")


def test_tuple_and_generator_inputs_are_lists_of_patterns() -> None:
    """Any iterable of strings is accepted as the pattern list."""
    assert ("a", "b") == SeriesSelector(("a", "b")).patterns
    assert ("a", "b") == SeriesSelector(p for p in ["a", "b"]).patterns


def test_never_matched_patterns_are_warned_about_naming_arrived_metrics() -> None:
    """At close, each pattern that never matched gets one warning listing the arrived names."""
    selector = SeriesSelector(["train_*", "val_acc*", "tset_*"])
    arrived = ["val_loss", "train_loss", "train_lr"]
    for name in arrived:
        selector.is_series(name)
    with capture_events() as events:
        selector.log_unmatched(arrived)
    warned = events_named(events, "trainreport.pattern_never_matched")
    expected_arrived = ["train_loss", "train_lr", "val_loss"]
    assert [
        ("val_acc*", expected_arrived, 3, "warning"),
        ("tset_*", expected_arrived, 3, "warning"),
    ] == [(e["pattern"], e["arrived"], e["arrived_count"], e["log_level"]) for e in warned]


def test_never_matched_warning_lists_at_most_20_sorted_names() -> None:
    """The arrived list is sorted and cut at 20 names; the full count is a field."""
    selector = SeriesSelector(["nothing_*"])
    arrived = [f"train_m{i:02d}" for i in reversed(range(25))]
    for name in arrived:
        selector.is_series(name)
    with capture_events() as events:
        selector.log_unmatched(arrived)
    (warned,) = events_named(events, "trainreport.pattern_never_matched")
    assert ([f"train_m{i:02d}" for i in range(20)], 25) == (
        warned["arrived"],
        warned["arrived_count"],
    )


def test_pattern_shadowed_by_an_earlier_one_still_counts_as_matched() -> None:
    """A pattern matching a name that an earlier pattern already selected is not 'never matched'."""
    selector = SeriesSelector(["*", "train_loss", "val_*"])
    selector.is_series("train_loss")
    assert ("val_*",) == selector.unmatched_patterns()


def test_every_pattern_is_unmatched_before_any_metric() -> None:
    """Before any name is checked, every user-given pattern is unmatched."""
    assert ("a", "b*") == SeriesSelector(["a", "b*"]).unmatched_patterns()


def test_nothing_is_warned_when_every_pattern_matched() -> None:
    """No never-matched warning when each pattern selected something."""
    selector = SeriesSelector(["train_*"])
    selector.is_series("train_loss")
    with capture_events() as events:
        selector.log_unmatched(["train_loss"])
    assert [] == events_named(events, "trainreport.pattern_never_matched")


@pytest.mark.parametrize("selector_args", [(None, ("val_*",)), (None, ("*",)), ([3], ("*",))])
def test_default_and_fallback_patterns_are_never_warned_about(
    selector_args: tuple[object, tuple[str, ...]],
) -> None:
    """Only patterns the user wrote are reported as never matched, not defaults or fallbacks."""
    patterns, default = selector_args
    selector = SeriesSelector(patterns, default=default)
    with capture_events() as events:
        selector.log_unmatched([])
    assert ((), []) == (
        selector.unmatched_patterns(),
        events_named(events, "trainreport.pattern_never_matched"),
    )


# --------------------------------------------------------------------------- flatten_params


def test_nested_params_are_flattened_with_slashes() -> None:
    """Nested mappings become one level of 'a/b' keys (DESIGN §2)."""
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


# --------------------------------------------------------------------------- never raises


def hostile(index: int) -> object:
    """The hostile object at ``index`` (a named function, so Hypothesis can describe it)."""
    return HOSTILE[index]


numpy_values = st.one_of(
    st.floats(width=32).map(np.float32),
    st.floats().map(np.float64),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.integers(0, 255).map(np.uint8),
    st.booleans().map(np.bool_),
    st.floats().map(np.array),
    st.lists(st.floats(), max_size=3).map(np.array),
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.complex_numbers(),
    st.fractions(),
    st.decimals(),
    st.text(),
    st.binary(),
    numpy_values,
    # Indices, not the objects: Hypothesis describes sampled elements, which hostile ones resist.
    st.integers(min_value=0, max_value=len(HOSTILE) - 1).map(hostile),
)

arbitrary = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=5), children, max_size=4),
        st.tuples(children, children),
        children.map(FakeTensor),
    ),
    max_leaves=10,
)


@given(arbitrary)
def test_caller_value_and_to_chartable_never_raise(value: object) -> None:
    """Whatever a caller reports, conversion yields a float or a NotChartable, never an error."""
    for candidate in (value, caller_value(value)):
        assert isinstance(to_chartable(candidate), (float, NotChartable))


@given(arbitrary)
def test_to_step_never_raises(value: object) -> None:
    """to_step yields an int in [0, 2**53] or a NotChartable for anything."""
    for candidate in (value, caller_value(value)):
        result = to_step(candidate)
        assert isinstance(result, NotChartable) or (type(result) is int and 0 <= result <= 2**53)


@given(
    arbitrary,
    st.integers(min_value=0, max_value=10**6),
    st.one_of(st.none(), st.integers(min_value=-5, max_value=100)),
    st.sampled_from([None, True, False]),
)
def test_epoch_rule_never_raises(
    value: object, step: int, num_epochs: int | None, zero_based: bool | None
) -> None:
    """resolve yields None, an int >= 1 (capped when num_epochs >= 1) or a NotChartable."""
    rule = EpochRule(zero_based=zero_based)
    for candidate in (value, caller_value(value)):
        result = rule.resolve(candidate, step=step, num_epochs=num_epochs)
        if result is None or isinstance(result, NotChartable):
            continue
        assert type(result) is int
        assert result >= 1
        if num_epochs is not None and num_epochs >= 1:
            assert result <= num_epochs


@given(arbitrary)
def test_check_name_and_flatten_params_never_raise(value: object) -> None:
    """Name checks and hyperparameter flattening accept anything without raising."""
    assert check_name(value) is None or isinstance(check_name(value), str)
    flat = flatten_params({"p": value, "q": {"r": value}})
    assert {"p", "q/r"} <= set(flat) or isinstance(value, dict)


@given(st.floats(allow_nan=False))
def test_floats_chart_as_themselves(value: float) -> None:
    """Every non-NaN float is charted unchanged (NaN is covered separately)."""
    assert value == to_chartable(value)


@given(st.integers(min_value=0, max_value=2**53))
def test_integers_in_range_are_their_own_step(value: int) -> None:
    """Every int from 0 to 2**53 is a step equal to itself."""
    assert value == to_step(value)


def test_flattening_is_bounded_and_counts_what_it_left_out() -> None:
    """1,500 keys of 1,000 floats: at most MAX_PARAM_ITEMS items flattened, the rest counted."""
    params = {f"k{i}": [float(j) for j in range(1000)] for i in range(1500)}
    flat, dropped = flatten_params_bounded(params, MAX_PARAM_ITEMS)
    kept_items = sum(1 + (len(v) if isinstance(v, list) else 0) for v in flat.values())
    assert kept_items <= MAX_PARAM_ITEMS
    assert len(flat) >= 1
    assert 1500 == len(flat) + dropped


def test_flattening_within_the_budget_keeps_everything() -> None:
    """A real run's hyperparameters (a few hundred keys) are far inside the budget."""
    params = {"optimizer": {"lr": 0.1, "betas": [0.9, 0.999]}, **{f"k{i}": i for i in range(300)}}
    flat, dropped = flatten_params_bounded(params, MAX_PARAM_ITEMS)
    assert 0 == dropped
    assert flat == flatten_params(params)
