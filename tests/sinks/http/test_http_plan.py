"""Splitting a series-suffix update into requests (sinks/_http/_plan.py), and encoding once.

Pure properties of the planner (sizes by arithmetic against sizes by encoding,
bodies assembled from cached members against the one encoder), and one send
against the real reference server with a 413 in the way, counting what is encoded.
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faults import FaultProxy
from trainreport import Delivered
from trainreport._wire._payloads import (
    encode_suffix_body,
    join_suffix_body,
    suffix_details,
    suffix_member,
    suffix_member_bytes,
)
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport.server import ServerHandle
from trainreport.sinks._http import _plan as _http_plan
from trainreport.sinks._http._plan import (
    Members,
    head_that_fits,
    members_bytes_bound,
    piece_bytes,
    plan_requests,
    slice_series,
)
from trainreport.sinks._http._sink import HttpSink

pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="the document is little-endian")

names = st.text(min_size=1, max_size=12).filter(lambda n: n.strip() == n and n)


@st.composite
def series_updates(draw: Any, name: str | None = None) -> SeriesUpdate:
    n = draw(st.integers(0, 40))
    steps = draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n))
    epochs = draw(st.lists(st.integers(1, 2**31 - 1), min_size=n, max_size=n))
    values = draw(st.lists(st.floats(allow_nan=True), min_size=n, max_size=n))
    times = draw(  # the fourth column, series-times-v1 (or none)
        st.none() | st.lists(st.floats(allow_nan=True), min_size=n, max_size=n)
    )
    return SeriesUpdate(
        name if name is not None else draw(names),
        draw(st.integers(0, 10**12)),
        array("q", steps),
        array(draw(st.sampled_from(["i", "q"])), epochs),  # the wire's int32, or int64
        array("d", values),
        None if times is None else array("d", times),
    )


@st.composite
def updates(draw: Any) -> Update:
    chosen = draw(st.lists(names, max_size=5, unique=True))
    series = tuple(draw(series_updates(name)) for name in chosen)
    details = draw(st.dictionaries(names, st.integers() | st.text(max_size=20), max_size=4))
    status = draw(st.none() | st.sampled_from(["running", "completed"]))
    return Update(status, details, series, False)


@given(series_updates())
def test_a_members_size_by_arithmetic_is_its_encoded_size(series: SeriesUpdate) -> None:
    """suffix_member_bytes (no column encoded) equals the encoded member's UTF-8 length."""
    assert len(suffix_member(series).encode()) == suffix_member_bytes(series)


@given(st.lists(series_updates(), max_size=4))
def test_the_cheap_bound_of_a_bodys_series_is_never_below_their_exact_size(
    series: list[SeriesUpdate],
) -> None:
    """members_bytes_bound (lengths only) >= the members' encoded size, so a send whose
    bound fits the cap never needed splitting."""
    exact = sum(len(suffix_member(s).encode()) + 1 for s in series)
    assert members_bytes_bound(series) >= exact


@given(updates(), st.integers(1, 10**6), st.integers(0, 10**9))
def test_a_body_from_encoded_parts_is_the_one_encoders_body(
    update: Update, generation: int, sequence: int
) -> None:
    """join_suffix_body over cached members and details equals encode_suffix_body."""
    for include in (True, False):
        expected = encode_suffix_body(
            update, writer_generation=generation, sequence=sequence, include_details=include
        )
        members = Members()
        joined = join_suffix_body(
            generation,
            sequence,
            suffix_details(update) if include else "",
            [members(s) for s in update.series or ()],
        )
        assert expected == joined
        assert _document(update, generation, sequence, include) == json.loads(joined)


def _document(update: Update, generation: int, sequence: int, include: bool) -> dict[str, Any]:
    """The body docs/protocol.md specifies for ``update``, built without the encoders."""
    doc: dict[str, Any] = {"writer_generation": generation, "sequence": sequence}
    if include:
        if update.status is not None:
            doc["status"] = update.status
        doc["status_details"] = dict(update.status_details)
    if update.series:
        doc["series"] = {
            s.name: {
                "offset": s.offset,
                "steps": base64.b64encode(s.steps.tobytes()).decode(),
                "epochs": base64.b64encode(s.epochs.tobytes()).decode(),
                "values": base64.b64encode(s.values.tobytes()).decode(),
                **(
                    {}
                    if s.times is None
                    else {"times": base64.b64encode(s.times.tobytes()).decode()}
                ),
            }
            for s in update.series
        }
    return doc


@given(series_updates(), st.integers(-10, 2000))
def test_the_head_that_fits_is_the_longest_prefix_that_fits(
    series: SeriesUpdate, space: int
) -> None:
    """head_that_fits returns the longest proper prefix whose member fits ``space``."""
    head, rest = head_that_fits(series, space)
    if head is None:
        assert rest is series
        assert len(series) <= 1 or space <= 0 or piece_bytes(slice_series(series, 0, 1)) > space
        return
    k = len(head)
    assert 1 <= k < len(series)
    assert piece_bytes(head) <= space
    assert k == len(series) - 1 or piece_bytes(slice_series(series, 0, k + 1)) > space
    assert list(head.steps) + list(rest.steps) == list(series.steps)
    assert rest.offset == series.offset + k


@settings(max_examples=200)
@given(updates(), st.integers(200, 3000))
def test_planned_requests_fit_the_cap_and_carry_every_point_once_in_order(
    update: Update, cap: int
) -> None:
    """Every planned body fits the cap (unless it is one point), details ride in the first
    request only, and the chunks of each series are contiguous and complete."""
    details = suffix_details(update)
    empty = len(join_suffix_body(1, 10**9, "", ()))
    plan = plan_requests(
        update, None, True, envelope_bytes=(empty, empty + len(details.encode())), cap=cap
    )
    assert [with_details for _, with_details, _ in plan] == [True] + [False] * (len(plan) - 1)
    seen: dict[str, list[float]] = {}
    for series, with_details, planned in plan:
        assert planned
        assert series is not None
        body = encode_suffix_body(
            update, writer_generation=1, sequence=10**9, series=series, include_details=with_details
        )
        single_point = len(series) == 1 and len(series[0]) == 1
        assert len(body) <= cap or single_point or (not series and with_details)
        for s in series:
            assert s.name not in [t.name for t in series if t is not s]
            held = seen.setdefault(s.name, [])
            assert s.offset == _offset_of(update, s.name) + len(held)
            held.extend(s.steps)
    for s in update.series or ():
        assert list(s.steps) == seen.get(s.name, [])


def _offset_of(update: Update, name: str) -> int:
    return next(s.offset for s in update.series or () if s.name == name)


@pytest.mark.timeout(60)
def test_a_split_send_encodes_each_series_and_chunk_once_even_after_a_413(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the cap and refused once with 413, a send still encodes no member twice, and
    the server holds every point."""
    encoded: list[tuple[str, int, int]] = []
    real = suffix_member

    def counting(series: SeriesUpdate) -> str:
        encoded.append((series.name, series.offset, len(series)))
        return real(series)

    monkeypatch.setattr(_http_plan, "suffix_member", counting)
    long = SeriesUpdate(
        "long",
        0,
        array("q", range(1, 3001)),
        array("i", [1] * 3000),
        array("d", [0.5] * 3000),
    )
    short = SeriesUpdate("short", 0, array("q", [1]), array("i", [1]), array("d", [1.0]))
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-plan", max_request_bytes=32 * 1024)
        sink.open()
        proxy.fail_next(1, 413, path="/updates")
        result = sink.send(Update("running", {"step": 3000}, (short, long), False))
        assert isinstance(result, Delivered), result
        assert {"long": 3000, "short": 1} == result.series_lengths
    assert len(encoded) == len(set(encoded))
    assert 1 == sum(1 for name, _, _ in encoded if name == "short")
