"""HttpSink on its own: wire modes, classification, tokens, proxies, env, timeouts, gzip.

Against the real reference server (fixtures in conftest.py), with tests/faults.py's
proxy in between where a fault is needed. No mocks.
"""

from __future__ import annotations

import datetime
import email.utils
import gzip
import json
import os
import pickle
from array import array
from pathlib import Path
from typing import Any

import pytest
import urllib3
from hypothesis import given
from hypothesis import strategies as st

from faults import FaultProxy, black_hole_server, closed_port
from trainreport import Delivered, Opened, Rejected, Resynchronise, RetryLater, Split
from trainreport._wire._payloads import encode_patch_body, encode_suffix_body
from trainreport._wire._protocol import (
    ERROR_SERIES_GAP,
    ERROR_STALE_ATTEMPT,
    ERROR_STALE_WRITER,
    EXTENSION_SERIES_TIMES,
)
from trainreport._wire._sink_interface import (
    CAPABILITY_GZIP,
    CAPABILITY_SERIES_SUFFIX,
    SeriesUpdate,
    Update,
)
from trainreport.exceptions import ConfigError
from trainreport.server import ServerHandle
from trainreport.sinks._http._gzip import GZIP_MIN_BYTES, gzip_isal, gzip_zlib, isal_available
from trainreport.sinks._http._sink import HttpSink
from trainreport.sinks._http._transport import Response, classify_failure, parse_retry_after
from trainreport.testing import capture_events

pytestmark = pytest.mark.timeout(60)

TOKEN = "s3cret-token"  # the conftest token_server's token
NOW = datetime.datetime(2026, 11, 29, 16, 0, 0, tzinfo=datetime.timezone.utc)


def points(name: str, offset: int, steps: range | list[int], value: float = 0.5) -> SeriesUpdate:
    """A series suffix with epoch 1 and ``value + step`` values."""
    steps = list(steps)
    return SeriesUpdate(
        name,
        offset,
        array("q", steps),
        array("i", [1] * len(steps)),
        array("d", [value + s for s in steps]),
    )


def update(*series: SeriesUpdate, status: str | None = "running", **details: Any) -> Update:
    """A series-suffix update."""
    return Update(status, details or {"step": 1}, tuple(series), False)


def stored(url: str, job: str = "job-1", task: str = "train", token: str | None = None) -> Any:
    """The task the server holds (GET), or None when it does not exist."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = urllib3.request("GET", f"{url}/v1/jobs/{job}/tasks/{task}", headers=headers)
    return None if response.status == 404 else json.loads(response.data)


def steps_of(task: Any, name: str) -> list[int]:
    return [p["step"] for p in task["status_details"]["metrics"][name]]


def decoded(body: bytes, headers: Any) -> bytes:
    return gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body


# --- Retry-After ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 3 ", 3.0),
        ("1.5", 1.5),
        (email.utils.format_datetime(NOW + datetime.timedelta(seconds=30), usegmt=True), 30.0),
        (email.utils.format_datetime(NOW - datetime.timedelta(hours=1), usegmt=True), 0.0),
        ("Sun, 29 Nov 2026 16:00:05", 5.0),  # no zone: read as UTC
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1e3", None),
        ("nan", None),
        ("inf", None),
        ("12abc", None),
        ("Mon, 99 Foo 2026 99:99:99 GMT", None),
    ],
)
def test_retry_after_parses_seconds_and_http_dates_and_ignores_garbage(
    header: str | None, expected: float | None
) -> None:
    """Delay-seconds and HTTP dates (relative to ``now``) are honoured; garbage gives None."""
    assert expected == parse_retry_after(header, now=NOW)


@given(st.text(max_size=60))
def test_retry_after_never_raises_and_is_never_negative(header: str) -> None:
    """Any header text yields None or a delay >= 0.

    See docs/design.md#guarantees: a sink never raises.
    """
    delay = parse_retry_after(header, now=NOW)
    assert delay is None or delay >= 0


# --- classification (docs/design.md#failure-handling) ---------------------------------------------


def _answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else b""
    return classify_failure(Response(status, headers or {}, data), NOW)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
def test_transient_statuses_are_retried_later(status: int) -> None:
    """408, 429 and 5xx (but 501) are RetryLater with the Retry-After delay."""
    result = _answer(status, {"error": "busy", "message": "later"}, {"retry-after": "4"})
    assert RetryLater(f"HTTP {status} busy: later", 4.0) == result


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 410, 418, 422, 451, 501, 302])
def test_client_errors_and_501_are_rejected_with_the_status(status: int) -> None:
    """400/401/403/404/422, 501 and any other non-2xx are Rejected, naming the status."""
    result = _answer(status, {"error": "nope", "message": "x" * 1000})
    assert isinstance(result, Rejected)
    assert status == result.status_code
    assert result.reason.startswith(f"HTTP {status} nope: xxx")
    assert len(result.reason) < 300


def test_413_asks_to_split() -> None:
    """413 is Split (docs/design.md#failure-handling)."""
    assert isinstance(_answer(413, {"error": "body_too_large", "message": "m"}), Split)


def test_409_series_gap_resynchronises_with_the_servers_lengths() -> None:
    """A series gap carries the lengths the server holds."""
    result = _answer(409, {"error": "series_gap", "message": "m", "series_lengths": {"a": 3}})
    assert Resynchronise("HTTP 409 series_gap: m", {"a": 3}) == result


def test_409_stale_writer_is_rejected_and_other_409s_resynchronise_by_reopening() -> None:
    """A fenced (zombie) writer must not write; an unexplained 409 reopens."""
    assert isinstance(_answer(409, {"error": "stale_writer", "message": "m"}), Rejected)
    assert Resynchronise("HTTP 409", None) == _answer(409)
    bad_lengths = _answer(409, {"error": "series_gap", "series_lengths": {"a": -1}})
    assert Resynchronise("HTTP 409 series_gap", None) == bad_lengths


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (ERROR_STALE_WRITER, Rejected("HTTP 409 stale_writer: m", 409)),
        (ERROR_STALE_ATTEMPT, Rejected("HTTP 409 stale_attempt: m", 409)),
        (ERROR_SERIES_GAP, Resynchronise("HTTP 409 series_gap: m", None)),
    ],
)
def test_each_409_code_is_classified_by_the_protocol_s_one_definition(
    code: str, expected: Any
) -> None:
    """The 409 codes the sink tells apart are the wire's constants, which the server sends."""
    assert expected == _answer(409, {"error": code, "message": "m"})


# --- construction, pickling, repr, env --------------------------------------------------


def test_unopened_sink_pickles_and_holds_no_pool() -> None:
    """An unstarted sink pickles (Lightning sends loggers to spawned workers)."""
    sink = HttpSink("http://127.0.0.1:1", "job-1", token=TOKEN)
    clone = pickle.loads(pickle.dumps(sink))
    assert clone._transport.pool is None
    assert "job-1" == clone.job_id


def test_opened_sink_pickles_without_its_pool(server: ServerHandle) -> None:
    """Pickling after open drops the pool (a connection is never shared across processes)."""
    sink = HttpSink(server.url, "job-1")
    assert isinstance(sink.open(), Opened)
    assert pickle.loads(pickle.dumps(sink))._transport.pool is None
    sink.close()


def test_repr_never_shows_the_token(tmp_path: Path) -> None:
    """The token (argument or file) is masked in repr."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    for sink in (
        HttpSink("http://h:1", "j", token=TOKEN),
        HttpSink("http://h:1", "j", token_file=token_file),
    ):
        assert TOKEN not in repr(sink)
        assert "token='***'" in repr(sink)
    assert "token=None" in repr(HttpSink("http://h:1", "j"))


def test_bad_arguments_raise_one_config_error_listing_each() -> None:
    """Non-positive timeouts and a task path with unknown fields are configuration errors."""
    with pytest.raises(ConfigError) as info:
        HttpSink("http://h:1", "j", connect_timeout_seconds=0, task_path="/x/{run}")
    assert 2 == len(info.value.problems)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "1024"])
def test_max_body_bytes_is_a_positive_whole_number_or_none(limit: object) -> None:
    """A body limit that is not a positive int is a configuration error naming the field."""
    with pytest.raises(ConfigError, match="max_body_bytes"):
        HttpSink("http://h:1", "j", max_body_bytes=limit)  # type: ignore[arg-type]
    assert HttpSink("http://h:1", "j").max_body_bytes is None


def test_from_env_reads_every_variable(tmp_path: Path) -> None:
    """URL, ids, token file, timeouts and CA bundle come from the environment."""
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    sink = HttpSink.from_env(
        {
            "TRAINREPORT_URL": "https://jobs.example:8443/api/",
            "TRAINREPORT_JOB_ID": "job-7",
            "TRAINREPORT_TASK_ID": "eval",
            "TRAINREPORT_TOKEN_FILE": str(token_file),
            "TRAINREPORT_CONNECT_TIMEOUT_SECONDS": "1.5",
            "TRAINREPORT_READ_TIMEOUT_SECONDS": "7",
            "TRAINREPORT_CA_CERTS": "/etc/ssl/ca.pem",
            "TRAINREPORT_MAX_BODY_BYTES": "1048576",
        }
    )
    assert 1 << 20 == sink.max_body_bytes
    assert ("https://jobs.example:8443/api", "job-7", "eval") == (
        sink.base_url,
        sink.job_id,
        sink.task_id,
    )
    assert (1.5, 7.0, "/etc/ssl/ca.pem") == (
        sink.connect_timeout_seconds,
        sink.read_timeout_seconds,
        sink.ca_certs,
    )
    assert TOKEN == sink._transport.current_token()


def test_from_env_is_lenient_about_bad_numbers_and_a_missing_job_id() -> None:
    """Bad timeouts fall back to defaults with one event each; a missing job id gets a fresh one."""
    with capture_events() as events:
        sink = HttpSink.from_env(
            {
                "TRAINREPORT_URL": "http://127.0.0.1:1",
                "TRAINREPORT_TOKEN": TOKEN,
                "TRAINREPORT_CONNECT_TIMEOUT_SECONDS": "soon",
                "TRAINREPORT_READ_TIMEOUT_SECONDS": "-1",
                "TRAINREPORT_MAX_BODY_BYTES": "1MiB",
            }
        )
    assert (5.0, 10.0) == (sink.connect_timeout_seconds, sink.read_timeout_seconds)
    assert sink.max_body_bytes is None
    assert sink.job_id.startswith("run-")
    names = [e["event"] for e in events]
    assert 3 == names.count("trainreport.config_field_invalid")
    assert 1 == names.count("trainreport.job_id_missing")
    assert TOKEN not in repr(events)


def test_default_sink_from_env_with_a_url_is_an_http_sink() -> None:
    """``TRAINREPORT_URL`` selects HttpSink; a URL without a scheme is logged.

    See docs/design.md#public-api.
    """
    from trainreport.sinks import default_sink_from_env  # noqa: PLC0415 - the function under test

    env = {"TRAINREPORT_URL": "http://jobs:8321", "TRAINREPORT_JOB_ID": "job-9"}
    sink = default_sink_from_env(env)
    assert isinstance(sink, HttpSink)
    assert ("http://jobs:8321", "job-9", "train") == (sink.base_url, sink.job_id, sink.task_id)
    with capture_events() as events:
        HttpSink.from_env({"TRAINREPORT_URL": "jobs:8321", "TRAINREPORT_JOB_ID": "j"})
    assert ["TRAINREPORT_URL"] == [
        e["variable"] for e in events if e["event"] == "trainreport.config_field_invalid"
    ]


# --- proxies ---------------------------------------------------------------------------


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A clean proxy environment (the host's own settings must not leak in)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_http_proxy_selects_a_proxy_manager(no_proxy_env: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY applies to an http:// URL (docs/design.md#guarantees)."""
    no_proxy_env.setenv("HTTP_PROXY", "http://user:pw@proxy.internal:3128")
    pool = HttpSink("http://jobs.internal:8321", "j")._transport.make_pool()
    assert isinstance(pool, urllib3.ProxyManager)
    assert pool.proxy is not None
    assert "proxy.internal" == pool.proxy.host
    assert pool.proxy.auth is None
    assert pool.proxy_headers["proxy-authorization"].startswith("Basic ")


def test_lower_case_https_proxy_and_scheme_matching(no_proxy_env: pytest.MonkeyPatch) -> None:
    """https_proxy applies to https:// URLs only."""
    no_proxy_env.setenv("https_proxy", "proxy.internal:3128")
    assert isinstance(HttpSink("https://jobs:1", "j")._transport.make_pool(), urllib3.ProxyManager)
    assert not isinstance(
        HttpSink("http://jobs:1", "j")._transport.make_pool(), urllib3.ProxyManager
    )


def test_no_proxy_listing_the_host_bypasses_the_proxy(no_proxy_env: pytest.MonkeyPatch) -> None:
    """NO_PROXY naming the host (or its domain) means a direct PoolManager."""
    no_proxy_env.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    no_proxy_env.setenv("NO_PROXY", "localhost,.cluster.local")
    for url in ("http://localhost:8321", "http://jobs.svc.cluster.local:80"):
        assert not isinstance(HttpSink(url, "j")._transport.make_pool(), urllib3.ProxyManager)
    assert isinstance(HttpSink("http://other:1", "j")._transport.make_pool(), urllib3.ProxyManager)


def test_requests_really_go_through_the_proxy(
    server: ServerHandle, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """With HTTP_PROXY set to a forwarding proxy, the absolute-form request reaches it."""
    with FaultProxy.for_url(server.url) as proxy:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        sink = HttpSink(server.url, "job-1")
        assert isinstance(sink.open(), Opened)
        assert proxy.requests[0].path == server.url + "/v1/capabilities"


# --- opening ---------------------------------------------------------------------------


def test_open_with_the_extension_issues_a_writer(server: ServerHandle) -> None:
    """The reference server offers series-suffix-v1 and gzip; a new task is stored_task None."""
    sink = HttpSink(server.url, "job-1")
    result = sink.open()
    caps = frozenset({CAPABILITY_SERIES_SUFFIX, CAPABILITY_GZIP, EXTENSION_SERIES_TIMES})
    assert Opened(caps, 1, None) == result
    assert Opened(caps, 2, None) == sink.open()


def test_open_without_the_extension_reads_the_task(server: ServerHandle) -> None:
    """``use_extension=False``: baseline GET; 404 is a new task, then the stored task is read."""
    sink = HttpSink(server.url, "job-1", use_extension=False)
    assert Opened(frozenset({CAPABILITY_GZIP, EXTENSION_SERIES_TIMES}), None, None) == sink.open()
    assert isinstance(sink.send(Update("running", {"step": 2}, None, True)), Delivered)
    reopened = sink.open()
    assert isinstance(reopened, Opened)
    assert {"status": "running", "status_details": {"step": 2}} == reopened.stored_task


def test_capabilities_404_means_a_plain_baseline_server(server: ServerHandle) -> None:
    """A server without /v1/capabilities gets baseline PATCHes."""
    with FaultProxy.for_url(server.url) as proxy:
        proxy.fail_next(1000, 404, path="/v1/capabilities")
        sink = HttpSink(proxy.url, "job-1")
        assert Opened(frozenset(), None, None) == sink.open()
        assert isinstance(sink.send(update(points("a", 0, [1, 2]))), Delivered)
        assert ["GET", "GET", "PATCH"] == [r.method for r in proxy.requests]


def test_open_retries_later_on_a_transient_capabilities_answer(server: ServerHandle) -> None:
    """A 503 or 429 on capabilities is not a plain server: RetryLater with its Retry-After.

    Header names are case-insensitive (Starlette sends them lower-case).
    """
    with FaultProxy.for_url(server.url) as proxy:
        proxy.fail_next(1, 503, {"retry-after": "2"})
        first = HttpSink(proxy.url, "job-1").open()
        proxy.fail_next(1, 429, {"RETRY-AFTER": "3"})
        second = HttpSink(proxy.url, "job-1").open()
    assert RetryLater("HTTP 503 injected: injected 503", 2.0) == first
    assert RetryLater("HTTP 429 injected: injected 429", 3.0) == second


def test_open_on_a_closed_port_retries_later() -> None:
    """Connection refused is transient (docs/design.md#failure-handling) and open never raises."""
    with closed_port() as port:
        result = HttpSink(f"http://127.0.0.1:{port}", "job-1").open()
    assert isinstance(result, RetryLater)
    assert "refused" in result.reason.lower()


@pytest.mark.parametrize("url", ["ftp://example.org", "", "localhost:8321"])
def test_open_with_an_unusable_url_is_rejected(url: str) -> None:
    """A URL that is not http(s) is a configuration problem: Rejected, not raised."""
    sink = HttpSink(url, "job-1")
    assert isinstance(sink.open(), Rejected)
    assert isinstance(sink.send(update()), Rejected)


def test_open_and_send_against_a_black_hole_respect_the_time_budget() -> None:
    """``timeout_seconds`` bounds the whole call even when the server never answers."""
    with black_hole_server() as url:
        sink = HttpSink(url, "job-1", read_timeout_seconds=30)
        for call in (
            lambda: sink.open(timeout_seconds=0.3),
            lambda: sink.send(update(), timeout_seconds=0.3),
        ):
            started = datetime.datetime.now()
            result = call()
            elapsed = (datetime.datetime.now() - started).total_seconds()
            assert isinstance(result, RetryLater)
            assert elapsed < 2.0
        sink.close()


# --- compression ------------------------------------------------------------------------


def _update_of_size(name: str, body_bytes: int, *, full_state: bool) -> Update:
    """An update of one series whose body is ``body_bytes`` long, give or take 100 bytes."""

    def made(n: int) -> Update:
        return Update("running", {"step": 1}, (points(name, 0, range(1, n + 1)),), full_state)

    def size(n: int) -> int:
        u = made(n)
        if full_state:
            return len(encode_patch_body(u))
        return len(encode_suffix_body(u, writer_generation=1, sequence=1))

    n = body_bytes * 1000 // size(1000)
    while size(n) > body_bytes:
        n -= 1
    return made(n)


@pytest.mark.parametrize("compress", [gzip_zlib, gzip_isal], ids=["zlib", "isal"])
def test_bodies_over_the_threshold_are_gzipped_when_the_server_accepts_it(
    server: ServerHandle, compress: Any
) -> None:
    """Content-Encoding gzip above GZIP_MIN_BYTES, none at or below it (both modes, both
    compressors); the server stores the points a gzip body carries."""
    if compress is gzip_isal and not isal_available():
        pytest.skip("python-isal (the fast extra) is not installed")
    for use_extension in (True, False):
        with FaultProxy.for_url(server.url) as proxy:
            job = f"job-{use_extension}-{compress.__name__}"
            sink = HttpSink(proxy.url, job, use_extension=use_extension)
            sink.open()
            sink._transport.compress = compress
            small = _update_of_size("a", GZIP_MIN_BYTES, full_state=not use_extension)
            big = _update_of_size("b", GZIP_MIN_BYTES + 200, full_state=not use_extension)
            for each in (small, big):
                result = sink.send(each)
                assert isinstance(result, Delivered), result
            sent = [r for r in proxy.requests if r.method == "PATCH" or r.path.endswith("/updates")]
            sizes = [len(decoded(r.body, r.headers)) for r in sent]
            encodings = [r.headers.get("content-encoding") for r in sent]
            assert [None, "gzip"] == encodings
            assert sizes[0] <= GZIP_MIN_BYTES < sizes[1]
            assert len(sent[1].body) < sizes[1] / 2  # really compressed
            assert (big.series or ())[0].steps.tolist() == steps_of(stored(server.url, job), "b")


@given(st.binary(max_size=4096) | st.text(max_size=2048).map(str.encode))
def test_isal_and_zlib_bodies_inflate_to_the_same_bytes(body: bytes) -> None:
    """The accelerated compressor (python-isal) and the standard one give standard gzip
    that inflates to the body, byte for byte (fast path against general path)."""
    if not isal_available():
        pytest.skip("python-isal (the fast extra) is not installed")
    assert body == gzip.decompress(gzip_isal(body)) == gzip.decompress(gzip_zlib(body))


def test_the_compressor_is_isal_when_installed() -> None:
    """A transport compresses with python-isal when the fast extra is installed."""
    expected = gzip_isal if isal_available() else gzip_zlib
    assert expected is HttpSink("http://jobs:1", "j")._transport.compress


# --- tokens and auth -------------------------------------------------------------------


def test_token_is_sent_as_bearer_and_a_missing_one_is_rejected(token_server: ServerHandle) -> None:
    """Without the token: Rejected 401 (open); with it: delivered."""
    result = HttpSink(token_server.url, "job-1").open()
    assert isinstance(result, Rejected)
    assert 401 == result.status_code
    sink = HttpSink(token_server.url, "job-1", token=TOKEN)
    assert isinstance(sink.open(), Opened)
    assert isinstance(sink.send(update(points("a", 0, [1]))), Delivered)


def test_token_file_is_reread_when_it_changes(token_server: ServerHandle, tmp_path: Path) -> None:
    """A rotated token file takes effect on the next request (docs/design.md#guarantees)."""
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")
    sink = HttpSink(token_server.url, "job-1", token_file=token_file)
    assert isinstance(sink.open(), Rejected)
    token_file.write_text(f"{TOKEN}\n")
    os.utime(token_file, ns=(1, 10**18))  # a different mtime even on coarse clocks
    assert isinstance(sink.open(), Opened)


def test_unreadable_token_file_is_logged_once_without_content(
    token_server: ServerHandle, tmp_path: Path
) -> None:
    """A missing token file: one event naming the path, requests go without a token."""
    missing = tmp_path / "absent"
    sink = HttpSink(token_server.url, "job-1", token_file=missing)
    with capture_events() as events:
        assert isinstance(sink.open(), Rejected)
        assert isinstance(sink.open(), Rejected)
    unreadable = [e for e in events if e["event"] == "trainreport.token_file_unreadable"]
    assert 1 == len(unreadable)
    assert str(missing) == unreadable[0]["path"]


def test_a_reason_never_contains_the_token(server: ServerHandle) -> None:
    """Even a server echoing the token in its message gets it masked."""
    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1", token=TOKEN)
        sink.open()
        proxy.fail_next(1, 400, body={"error": "bad", "message": f"bad token {TOKEN}"})
        result = sink.send(update())
    assert isinstance(result, Rejected)
    assert TOKEN not in result.reason
    assert "***" in result.reason


def test_headers_and_auth_callable_are_sent_and_an_auth_failure_is_transient(
    server: ServerHandle,
) -> None:
    """Extra headers and per-request auth headers reach the server; a failing auth retries."""
    calls: list[int] = []

    def auth() -> dict[str, str]:
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError(f"token service down {TOKEN}")
        return {"X-Auth": f"sig-{len(calls)}"}

    with FaultProxy.for_url(server.url) as proxy:
        sink = HttpSink(proxy.url, "job-1", headers={"X-Team": "vision"}, auth=auth)
        sink.open()
        assert isinstance(sink.send(update()), Delivered)
        result = sink.send(update())
        seen = proxy.requests
    assert ["vision"] * 3 == [r.headers["x-team"] for r in seen]
    assert ["sig-1", "sig-2", "sig-3"] == [r.headers["x-auth"] for r in seen]
    assert RetryLater("the auth callable failed: RuntimeError") == result


# --- process and pool ------------------------------------------------------------------


def test_a_new_pool_is_made_in_another_process(server: ServerHandle) -> None:
    """A sink used in a forked child never reuses the parent's pool (pid check)."""
    sink = HttpSink(server.url, "job-1")
    sink.open()
    parent_pool = sink._transport.pool
    sink._transport.pid = -1  # as seen from a forked child: the pool belongs to another pid
    assert isinstance(sink.open(), Opened)
    assert parent_pool is not sink._transport.pool
    assert os.getpid() == sink._transport.pid


def test_close_is_idempotent_and_a_later_open_works(server: ServerHandle) -> None:
    """close() twice is fine; the sink can be opened again afterwards."""
    sink = HttpSink(server.url, "job-1")
    sink.open()
    sink.close()
    sink.close()
    assert sink._transport.pool is None
    assert isinstance(sink.open(), Opened)
