"""Wire encoding (strict JSON, both shapes) and lenient parsing of stored tasks."""

from __future__ import annotations

import json
import math
from array import array
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainreport._wire._payloads import (
    NO_EPOCH,
    ColumnPoints,
    StoredState,
    encode_patch_body,
    encode_suffix_body,
    parse_stored_task,
)
from trainreport._wire._protocol import decode_column
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport.sinks._http._read import compact_points, dict_points


def series(name: str, values: list[float], offset: int = 0) -> SeriesUpdate:
    n = len(values)
    return SeriesUpdate(
        name,
        offset,
        array("q", range(offset + 1, offset + n + 1)),
        array("i", [1] * n),
        array("d", values),
    )


def strict_loads(body: bytes) -> object:
    def refuse(token: str) -> object:
        raise ValueError(f"non-strict JSON token {token}")

    return json.loads(body, parse_constant=refuse)


def test_patch_body_has_the_baseline_shape_with_null_for_non_finite() -> None:
    """Full-state PATCH: status, details and complete metrics; NaN/Inf become null."""
    update = Update(
        "running",
        {"step": 3, "phase": "training"},
        (series("train_loss", [1.0, math.nan, math.inf]),),
        True,
    )
    body = strict_loads(encode_patch_body(update))
    assert {
        "status": "running",
        "status_details": {
            "step": 3,
            "phase": "training",
            "metrics": {
                "train_loss": [
                    {"step": 1, "epoch": 1, "value": 1.0},
                    {"step": 2, "epoch": 1, "value": None},
                    {"step": 3, "epoch": 1, "value": None},
                ]
            },
        },
    } == body


def test_update_without_series_carries_no_metrics_key() -> None:
    """series=None means no ``metrics`` at all (never an empty replacement)."""
    body = strict_loads(encode_patch_body(Update(None, {"phase": "setup"}, None, True)))
    assert {"status_details": {"phase": "setup"}} == body


def test_suffix_body_carries_columns_offsets_generation_and_sequence() -> None:
    """The extension body: writer generation, sequence, details and binary per-series columns."""
    update = Update("running", {"step": 5}, (series("a", [0.5, -math.inf], offset=3),), False)
    body = strict_loads(encode_suffix_body(update, writer_generation=2, sequence=9))
    assert isinstance(body, dict)
    columns = body["series"]["a"]
    assert {
        "writer_generation": 2,
        "sequence": 9,
        "status": "running",
        "status_details": {"step": 5},
    } == {k: v for k, v in body.items() if k != "series"}
    assert 3 == columns["offset"]
    assert [4, 5] == decode_column(columns["steps"], "q").tolist()
    assert [1, 1] == decode_column(columns["epochs"], "i").tolist()
    assert [0.5, -math.inf] == decode_column(columns["values"], "d").tolist()


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=30), st.text(max_size=20))
def test_bodies_are_always_strict_json(values: list[float], name: str) -> None:
    """Whatever the values and names, both bodies parse as strict JSON."""
    update = Update("running", {"note": name}, (series(name or "x", values),), True)
    strict_loads(encode_patch_body(update))
    strict_loads(encode_suffix_body(update, writer_generation=1, sequence=1))


def test_stored_task_parses_curves_and_datasets() -> None:
    """A well-formed stored task yields columns, dataset order and the other details."""
    state = parse_stored_task(
        {
            "status": "failed",
            "status_details": {
                "owner": "x",
                "val_datasets": ["a", "b"],
                "metrics": {
                    "train_loss": [
                        {"step": 1, "epoch": 1, "value": None},
                        {"step": 2, "epoch": 1, "value": 3},
                    ]
                },
            },
        }
    )
    assert isinstance(state, StoredState)
    steps, _epochs, values = state.series["train_loss"]
    assert [1, 2] == list(steps)
    assert math.isnan(values[0])
    assert 3.0 == values[1]
    assert ("a", "b") == state.val_datasets
    assert {"owner": "x", "val_datasets": ["a", "b"]} == state.details
    assert "failed" == state.status


def test_missing_task_is_an_empty_state() -> None:
    """None (a 404) is an empty stored state, not a failure."""
    assert StoredState(series={}) == parse_stored_task(None)


@pytest.mark.parametrize("task", [[], {"status_details": []}, "x"])
def test_a_stored_task_that_is_not_a_task_gives_a_reason(task: object) -> None:
    """A task or ``status_details`` that is not an object yields a reason string."""
    assert isinstance(parse_stored_task(task), str)


@pytest.mark.parametrize(
    "points",
    [
        {},
        [1],
        [{"step": "1", "value": 1}],
        [{"step": -1, "value": 1}],
        [{"step": 2, "value": 1}, {"step": 1, "value": 1}],
        [{"step": 1, "value": "x"}],
        [{"step": True, "value": 1}],
    ],
)
def test_damage_is_judged_per_series(points: object) -> None:
    """An unreadable series is kept exactly as stored, with a reason; the others parse."""
    good = [{"step": 1, "epoch": 1, "value": 2.0}]
    state = parse_stored_task({"status_details": {"metrics": {"good": good, "a": points}}})
    assert isinstance(state, StoredState)
    assert ["good"] == list(state.series)
    assert {"a": points} == dict(state.damaged)
    assert ["a"] == list(state.damage_reasons)
    assert () == state.problems


def test_a_series_with_an_unusable_name_is_kept_as_stored() -> None:
    """A stored name the client could never send (a control character) is damaged, not dropped."""
    points = [{"step": 1, "epoch": 1, "value": 2.0}]
    state = parse_stored_task({"status_details": {"metrics": {"bad\x00": points}}})
    assert isinstance(state, StoredState)
    assert {} == dict(state.series)
    assert {"bad\x00": points} == dict(state.damaged)


@pytest.mark.parametrize(
    ("details", "problem"),
    [
        ({"metrics": []}, "metrics"),
        ({"val_datasets": "ab"}, "val_datasets"),
    ],
)
def test_unreadable_metrics_or_datasets_are_a_problem_not_a_failure(
    details: dict[str, Any], problem: str
) -> None:
    """A bad ``metrics`` or ``val_datasets`` is reported; the rest of the task still parses."""
    state = parse_stored_task({"status": "failed", "status_details": {"owner": "x", **details}})
    assert isinstance(state, StoredState)
    assert "failed" == state.status
    assert "x" == state.details["owner"]
    assert () == state.val_datasets
    assert any(problem in p for p in state.problems)


def test_an_unreadable_series_is_kept_as_strict_json() -> None:
    """A NaN token a lenient reader accepted becomes ``null``, so the series can be sent back."""
    points = [{"step": 2, "value": math.nan}, {"step": 1, "value": 1.0}]
    state = parse_stored_task({"status_details": {"metrics": {"a": points}}})
    assert isinstance(state, StoredState)
    assert [{"step": 2, "value": None}, {"step": 1, "value": 1.0}] == state.damaged["a"]
    update = Update(None, {}, (), True, foreign_series=state.damaged)
    body = strict_loads(encode_patch_body(update))
    assert isinstance(body, dict)
    assert {"a": state.damaged["a"]} == body["status_details"]["metrics"]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.one_of(st.none(), st.integers(0, 2**31 - 1)),
            st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
        ),
        max_size=30,
    )
)
def test_column_points_from_json_reads_as_the_get_shape(
    points: list[tuple[int, int | None, float | None]],
) -> None:
    """``/series`` columns (``null`` epochs and values included) as arrays equal the point list."""
    expected = [{"step": s, "epoch": e, "value": v} for s, e, v in points]
    column = {
        "steps": [p[0] for p in points],
        "epochs": [p[1] for p in points],
        "values": [p[2] for p in points],
    }

    compact = compact_points(column)

    assert isinstance(compact, ColumnPoints)
    assert expected == list(compact)
    assert compact == expected
    assert expected == dict_points(column)


@pytest.mark.parametrize(
    "column",
    [
        {"steps": [1.5], "epochs": [1], "values": [0.5]},
        {"steps": [2**64], "epochs": [1], "values": [0.5]},
        {"steps": [1], "epochs": [NO_EPOCH], "values": [0.5]},
        {"steps": [1], "epochs": [1], "values": ["x"]},
        {"steps": [1, 2], "epochs": [1], "values": [0.5]},
    ],
    ids=["float-step", "step-past-int64", "the-sentinel-epoch", "text-value", "lengths-differ"],
)
def test_a_column_the_arrays_cannot_hold_is_kept_as_point_dictionaries(
    column: dict[str, list[Any]],
) -> None:
    """Never a wrong array: what int64/float64 cannot hold stays as read (a dict a point)."""
    if len(column["steps"]) != len(column["epochs"]):
        with pytest.raises(ValueError, match="differ in length"):
            ColumnPoints.from_json(column["steps"], column["epochs"], column["values"])
        return
    kept = compact_points(column)

    assert isinstance(kept, list)
    assert dict_points(column) == kept
