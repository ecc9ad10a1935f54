"""Tests for trainreport._record._name_rules: phase prefixes, names, datasets (design.md#metrics).

That every rule of the naming modules takes hostile input without raising is pinned with
the other report-call promises, in tests/contracts/test_never_raises.py."""

# House style asserts `expected == actual`, which SIM300 calls a Yoda condition.

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trainreport._record._name_rules as naming
from trainreport._record._name_rules import (
    MAX_NAME_LENGTH,
    STRIPPED_PREFIXES,
    DatasetOrder,
    canonical_prefix,
    qualify,
)
from trainreport._record._params import MAX_PARAM_ITEMS, flatten_params, flatten_params_bounded
from trainreport._record._values import (
    to_chartable,
    to_step,
)
from trainreport._wire._protocol import check_name

# --------------------------------------------------------------------------- phase prefixes

TABLE_ENTRIES = [
    (phase, prefix) for phase, prefixes in STRIPPED_PREFIXES.items() for prefix in prefixes
]


def test_stripped_prefix_table_is_pinned() -> None:
    """The stripped-prefix table holds exactly the entries docs/design.md#metrics lists."""
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
    """The examples of docs/design.md#metrics and the brief, with phases outside the table."""
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
    """qualify('loss', 'validation', 'squad') is 'val_squad_loss' (docs/design.md#metrics)."""
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
