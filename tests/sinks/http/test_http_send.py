"""Sending one update (sinks/_http/_send.py) through HttpSink: sequences, splitting, 413s, answers.

Against the real reference server (fixtures in conftest.py), with tests/faults.py's
proxy in between where a fault is needed. No mocks. The helpers that build
updates and read the stored task are test_http_sink.py's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
import urllib3
from test_http_sink import decoded, points, steps_of, stored, update

from faults import FaultProxy
from trainreport import (
    Delivered,
    Rejected,
    Reporter,
    ReportingConfig,
    Resynchronise,
    RetryLater,
    Split,
)
from trainreport._wire._sink_interface import SeriesUpdate, Update
from trainreport.server import ServerHandle
from trainreport.sinks._http._send import BodyLimit
from trainreport.sinks._http._sink import HttpSink
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(60)


# --- series-suffix mode: one update, one or several requests ------------------------------


def test_suffix_send_delivers_with_the_servers_lengths(server: ServerHandle) -> None:
    """The answer carries the lengths the server holds and the bytes put on the wire."""
    sink = HttpSink(server.url, "job-1")
    sink.open()
    result = sink.send(update(points("a", 0, range(1, 4)), points("b", 0, [1])))
    assert isinstance(result, Delivered)
    assert {"a": 3, "b": 1} == result.series_lengths
    assert not result.cancel_requested
    assert result.bytes_sent > 200
    assert [1, 2, 3] == steps_of(stored(server.url), "a")


def test_large_update_is_split_per_series_and_into_contiguous_chunks(server: ServerHandle) -> None:
    """Above the cap, each request is under it; details ride in the first request only."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1", max_request_bytes=4096)
        sink.open()
        big = update(
            points("long", 0, range(1, 1001)),
            points("short", 0, range(1, 4)),
            points("mid", 0, range(1, 201)),
            step=1000,
        )
        result = sink.send(big)
        assert isinstance(result, Delivered)
        assert {"long": 1000, "short": 3, "mid": 200} == result.series_lengths
        bodies = [
            json.loads(decoded(r.body, r.headers)) for r in proxy.requests if r.method == "POST"
        ][1:]
    assert len(bodies) >= 4
    assert all(len(json.dumps(b, separators=(",", ":"))) <= 4096 for b in bodies)
    assert ["status_details" in b for b in bodies] == [True] + [False] * (len(bodies) - 1)
    sequences = [b["sequence"] for b in bodies]
    assert sorted(set(sequences)) == sequences
    offsets = [b["series"]["long"]["offset"] for b in bodies if "long" in b.get("series", {})]
    assert 0 == offsets[0]
    assert sorted(offsets) == offsets
    task = stored(server.url)
    assert list(range(1, 1001)) == steps_of(task, "long")
    assert list(range(1, 201)) == steps_of(task, "mid")
    assert 1000 == task["status_details"]["step"]


def test_a_failed_request_of_a_split_update_fails_the_send_and_a_resend_repairs_it(
    server: ServerHandle,
) -> None:
    """Partial success claims nothing; resending the same update leaves no hole or duplicate."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1", max_request_bytes=4096)
        sink.open()
        big = update(points("a", 0, range(1, 601)), points("b", 0, range(1, 601)))
        proxy.fail_next(1, 503, path="/updates", skip=2)
        result = sink.send(big)
        assert isinstance(result, RetryLater)
        assert isinstance(sink.send(big), Delivered)
    task = stored(server.url)
    assert list(range(1, 601)) == steps_of(task, "a")
    assert list(range(1, 601)) == steps_of(task, "b")


def test_413_halves_the_cap_and_retries_before_giving_up(server: ServerHandle) -> None:
    """A 413 on a large body is absorbed by splitting further; the update is delivered."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1")
        sink.open()
        proxy.fail_next(1, 413, path="/updates")
        result = sink.send(update(points("a", 0, range(1, 3001))))
        assert isinstance(result, Delivered)
        assert {"a": 3000} == result.series_lengths
        faults = [r.fault for r in proxy.requests if r.path.endswith("/updates")]
    assert "fail" == faults[0]
    assert len(faults) >= 3
    assert list(range(1, 3001)) == steps_of(stored(server.url), "a")


def test_413_on_a_small_body_is_split(server: ServerHandle) -> None:
    """A body already at the floor cannot be split further: Split."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1")
        sink.open()
        proxy.fail_next(1, 413, path="/updates")
        assert isinstance(sink.send(update(points("a", 0, [1]))), Split)


# --- sequences and what an answer means ------------------------------------------------


def test_lost_response_resend_uses_a_new_sequence_and_is_idempotent(server: ServerHandle) -> None:
    """The server applied it, the client never heard: the resend is a new sequence, no duplicate."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1")
        sink.open()
        first = update(points("a", 0, [1, 2]))
        proxy.drop_responses_next(1, path="/updates")
        assert isinstance(sink.send(first), RetryLater)
        result = sink.send(update(points("a", 0, [1, 2, 3])))
        assert isinstance(result, Delivered)
        assert {"a": 3} == result.series_lengths
        sequences = [
            json.loads(decoded(r.body, r.headers))["sequence"]
            for r in proxy.requests
            if r.path.endswith("/updates")
        ]
    assert [1, 2] == sequences
    assert [1, 2, 3] == steps_of(stored(server.url), "a")


def test_a_gap_asks_to_resynchronise_with_the_stored_lengths(server: ServerHandle) -> None:
    """An offset beyond the stored series is refused with the lengths held (409 series_gap)."""
    sink = HttpSink(server.url, "job-1")
    sink.open()
    sink.send(update(points("a", 0, [1, 2])))
    result = sink.send(update(points("a", 5, [9])))
    assert isinstance(result, Resynchronise)
    assert {"a": 2} == result.series_lengths


def test_a_fenced_writer_is_rejected(server: ServerHandle) -> None:
    """Writer A is fenced once writer B opens: A's sends are Rejected (409 stale_writer)."""
    a, b = HttpSink(server.url, "job-1"), HttpSink(server.url, "job-1")
    a.open()
    assert isinstance(a.send(update(points("x", 0, [1]))), Delivered)
    b.open()
    result = a.send(update(points("x", 0, [1, 2])))
    assert isinstance(result, Rejected)
    assert 409 == result.status_code
    assert "stale_writer" in result.reason
    assert [1] == steps_of(stored(server.url), "x")


def test_a_malformed_success_answer_is_retried_later(server: ServerHandle) -> None:
    """A 2xx that is not the update answer is not taken as delivered."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1")
        sink.open()
        proxy.fail_next(1, 200, body=b"<html>hi</html>", path="/updates")
        result = sink.send(update())
        assert RetryLater("malformed response to POST .../updates") == result


def test_cancel_requested_is_reported_in_both_modes(server: ServerHandle) -> None:
    """After ``POST /v1/jobs/{job}/cancel`` a delivery says cancel_requested."""
    for use_extension in (True, False):
        job = f"job-{use_extension}"
        sink = HttpSink(server.url, job, use_extension=use_extension)
        sink.open()
        first = sink.send(Update("running", {"step": 1}, None, not use_extension))
        assert isinstance(first, Delivered)
        assert not first.cancel_requested
        urllib3.request(
            "POST",
            f"{server.url}/v1/jobs/{job}/cancel",
            headers={"Content-Type": "application/json"},
        )
        second = sink.send(Update("running", {"step": 2}, None, not use_extension))
        assert isinstance(second, Delivered)
        assert second.cancel_requested


# --- baseline mode: the body limit (docs/engine.md, "Thinning under a body limit") --------


def _full_state(*series: SeriesUpdate) -> Update:
    return Update("running", {"step": 1}, tuple(series), True)


def test_a_full_state_body_over_max_body_bytes_is_a_split_without_a_request(
    server: ServerHandle,
) -> None:
    """Over the configured limit nothing is sent: a Split with the size and the limit."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1", use_extension=False, max_body_bytes=2048)
        sink.open()
        before = proxy.requests_seen
        result = sink.send(_full_state(points("a", 0, range(1, 200))))
        assert before == proxy.requests_seen
        assert isinstance(sink.send(_full_state(points("a", 0, range(1, 20)))), Delivered)
    assert isinstance(result, Split)
    assert result.body_bytes is not None
    assert result.body_bytes > 2048
    assert 2048 == result.limit_bytes


def test_a_413_says_the_size_refused_and_the_largest_body_taken(
    start_server: Callable[..., ServerHandle],
) -> None:
    """A plain 413 teaches the sink the refused body's size; what fitted before (a body
    far smaller) is not given as a size to aim at (the reporter halves instead)."""
    server = start_server(max_body_bytes=16 * 1024)
    sink = HttpSink(server.url, "job-1", use_extension=False)
    sink.open()
    small = _full_state(points("a", 0, range(1, 50)))
    assert isinstance(sink.send(small), Delivered)
    taken = sink._body_limit.fitted
    result = sink.send(_full_state(points("a", 0, range(1, 5000))))
    assert isinstance(result, Split)
    assert result.body_bytes is not None
    assert result.body_bytes > 16 * 1024
    assert (True, None) == (0 < 2 * taken < result.body_bytes, result.limit_bytes)


def test_a_body_limit_far_above_the_largest_body_taken_is_found_by_halving_not_by_it(
    start_server: Callable[..., ServerHandle],
) -> None:
    """The first full state taken was one step (a few hundred bytes); the first refused, 2,000
    steps. Sizing the thinned curves to what fitted would cut them to a handful of points a
    series (or freeze them: ``metrics_too_large``) under a limit a hundred times larger: the
    budget is halved until a body fits, within a factor of two of the limit."""
    server = start_server(max_body_bytes=64 * 1024)
    config = ReportingConfig(journal=False, min_report_interval_seconds=0.2)
    reporter = Reporter(HttpSink(server.url, "thin-1", use_extension=False), config, rank=0)
    reporter.start()
    noise = random.Random(7)  # values gzip cannot shrink much: the body is over the limit
    with capture_events() as events:
        reporter.report_train_step(step=1, metrics={f"m{i}": 1.0 for i in range(5)})
        assert reporter.flush(timeout=10)
        for step in range(2, 2001):
            reporter.report_train_step(
                step=step, metrics={f"m{i}": noise.random() for i in range(5)}
            )
        assert reporter.flush(timeout=30)
        thinned_to = reporter.stats().destinations[0].thinned_to
        reporter.close(timeout=10)

    assert [] == [e for e in events if e["event"] == "trainreport.metrics_too_large"]
    assert thinned_to is not None
    assert thinned_to >= 100, thinned_to


def test_a_413_below_what_fitted_before_forgets_it() -> None:
    """The limit went down: a body the size of one taken before is no longer known to fit."""
    limit = BodyLimit(None)
    limit.fitted = 10_000
    assert 10_000 == limit.refused(20_000)
    assert limit.refused(9_000) is None
    assert 0 == limit.fitted
    assert 5_000 == BodyLimit(5_000).refused(8_000)


def test_a_body_taken_far_below_the_refused_one_is_no_size_to_aim_at() -> None:
    """What fitted counts only within a factor of two of what was refused; else the
    reporter halves (``None``); a configured limit always counts."""
    limit = BodyLimit(None)
    limit.fitted = 10_000
    assert limit.refused(20_001) is None
    assert 10_000 == limit.fitted  # still true: a later, smaller refusal may use it
    assert 10_000 == limit.refused(15_000)
    configured = BodyLimit(5_000)
    configured.fitted = 4_000
    assert 5_000 == configured.refused(1_000_000)
