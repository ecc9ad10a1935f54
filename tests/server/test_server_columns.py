"""Binary (base64) series columns validate exactly like the same values sent as JSON arrays.

The binary path checks whole arrays at once (``min``, ``sum``) instead of each
point in Python (issue 9's profile: every value was checked twice); this pins
that the shortcut accepts, converts and refuses exactly what the per-point
path does, path of the error included.
"""

from __future__ import annotations

import array
import base64
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from trainreport.server._wire import ApiError, validate_update


def _b64(typecode: str, values: list[Any]) -> str:
    column = array.array(typecode, values)
    if column.itemsize > 1 and array.array("H", [1]).tobytes()[0] == 0:  # big-endian host
        column.byteswap()
    return base64.b64encode(column.tobytes()).decode()


def _outcome(series: dict[str, Any]) -> Any:
    try:
        update = validate_update({"writer_generation": 1, "sequence": 1, "series": {"s": series}})
    except ApiError as exc:
        return ("refused", exc.status_code, exc.extra.get("path"))
    (points,) = update.series
    return (list(points.steps), list(points.epochs), list(points.values))


@given(data=st.data())
def test_binary_columns_validate_like_json_arrays(data: st.DataObject) -> None:
    """Same steps, epochs and values: the same SeriesPoints, or the same 422 and path."""
    n = data.draw(st.integers(0, 6))
    steps = data.draw(st.lists(st.integers(-3, 2**63 - 1), min_size=n, max_size=n))
    epochs = data.draw(st.lists(st.integers(-3, 2**31 - 1), min_size=n, max_size=n))
    values = data.draw(
        st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=n, max_size=n)
    )
    as_json = {
        "offset": 0,
        "steps": steps,
        "epochs": epochs,
        "values": [v if math.isfinite(v) else None for v in values],  # JSON has no NaN
    }
    as_binary = {
        "offset": 0,
        "steps": _b64("q", steps),
        "epochs": _b64("i", epochs),
        "values": _b64("d", values),
    }

    assert _outcome(as_json) == _outcome(as_binary)


def test_large_finite_values_whose_sum_overflows_are_kept() -> None:
    """``sum`` of finite values can overflow to inf: the values are still finite, and kept."""
    values = [1.5e308, 1.5e308, -1.0]
    series = {"offset": 0, "steps": _b64("q", [1, 2, 3]), "epochs": _b64("i", [1, 1, 1])}

    assert values == _outcome({**series, "values": _b64("d", values)})[2]
