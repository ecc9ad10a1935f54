"""Credentials in the base URL (``http://user:TOKEN@host``) never show, and they are used.

Issue 9: the token in a base URL's userinfo showed in ``repr(sink)``. It is
now left out (``http://host``) of the repr, ``base_url``, ``describe()``, every
log event and every result reason, and sent the way a user expects it to be:
as ``Authorization: Basic`` (unless a bearer token is configured). A raw ``/``,
``?``, ``#`` or ``@`` in the userinfo makes the host ambiguous: refused at
construction, never guessed. A query or fragment never shows either.
"""

from __future__ import annotations

import base64
import http.server
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from faults import closed_port
from trainreport import Reporter, ReportingConfig
from trainreport._environment import HttpDestination
from trainreport.exceptions import ConfigError
from trainreport.sinks._http._sink import HttpSink
from trainreport.sinks._http._transport import shown_url
from trainreport.testing import capture_events

SECRET = "s3cret-TOKEN-in-url"


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A server that answers 404 to everything and records each request's headers and target."""
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append({"target": self.path, **{k.lower(): v for k, v in self.headers.items()}})
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


@pytest.mark.parametrize(
    "url",
    [
        f"http://user:{SECRET}@127.0.0.1:1",
        f"http://{SECRET}@127.0.0.1:1/prefix/",
        f"http://{SECRET}:@[::1]:1",
        f"https://user:{SECRET}@jobs.example",
        f"http://user:s3@{SECRET}@127.0.0.1:1",  # the host follows the last '@' (RFC 3986)
    ],
)
def test_repr_and_base_url_redact_the_userinfo(url: str) -> None:
    """The whole userinfo becomes ``***``; host, port and path stay readable."""
    sink = HttpSink(url, "job-1")

    assert SECRET not in repr(sink)
    assert "user:" not in repr(sink)
    assert "userinfo='***'" in repr(sink)  # says credentials came with the URL, not which
    assert SECRET not in sink.base_url
    assert "@" not in sink.base_url  # copyable: a shown ``***@`` would be sent as Basic ``***``
    assert url.rsplit("@", maxsplit=1)[-1].rstrip("/") == sink.base_url.split("://")[-1]


def test_result_reasons_and_log_events_never_contain_the_userinfo() -> None:
    """A run against a closed port with credentials in its URL: nothing logged shows them."""
    with closed_port() as port:
        url = f"http://user:{SECRET}@127.0.0.1:{port}"
        sink = HttpSink(url, "job-1", connect_timeout_seconds=0.5)
        reasons = [repr(sink.open()), repr(HttpSink(f"http://user:{SECRET}@", "j").open())]
        config = ReportingConfig(min_report_interval_seconds=0.01, backoff_max_seconds=0.05)
        with capture_events() as events:
            reporter = Reporter(HttpSink(url, "job-1"), config, rank=0).start()
            reporter.report_train_step(step=1, metrics={"loss": 1.0})
            reporter.close(timeout=1.0)
            reasons.append(repr(reporter.stats()))
            reasons.append(repr(reporter))

    assert [] == [text for text in reasons if SECRET in text]
    assert SECRET not in repr(events)
    assert events  # the failures were logged


def test_the_userinfo_is_sent_as_basic_auth_and_not_in_the_request_target(
    recorder: tuple[str, list[dict[str, str]]],
) -> None:
    """``user:password`` from the URL becomes ``Authorization: Basic``, as curl and requests do."""
    address, seen = recorder

    HttpSink(f"http://user:{SECRET}@{address}", "job-1").open()

    expected = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
    assert seen
    assert {expected} == {request.get("authorization") for request in seen}
    assert not any(SECRET in request["target"] for request in seen)


def test_a_bearer_token_wins_over_the_userinfo(recorder: tuple[str, list[dict[str, str]]]) -> None:
    """With ``token=`` too, only the bearer token is sent (one Authorization header)."""
    address, seen = recorder

    HttpSink(f"http://user:{SECRET}@{address}", "job-1", token="bearer-token").open()

    assert {"Bearer bearer-token"} == {request.get("authorization") for request in seen}


def test_a_pickled_sink_carries_its_credentials(recorder: tuple[str, list[dict[str, str]]]) -> None:
    """As documented: a pickle holds the token, so the copy authenticates like the original."""
    address, seen = recorder
    sink = HttpSink(f"http://user:{SECRET}@{address}", "job-1")

    pickle.loads(pickle.dumps(sink)).open()

    assert {"Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()} == {
        request.get("authorization") for request in seen
    }


@pytest.mark.parametrize("char", ["/", "?", "#"])
def test_a_raw_delimiter_in_the_password_is_refused_at_construction(char: str) -> None:
    """``user:s3/cret@host``: which host is meant is ambiguous, so the URL is refused, and the
    message says how to percent-encode it, without the password."""
    secret = f"s3{char}cret-{SECRET}"

    with pytest.raises(ConfigError) as raised:
        HttpSink(f"http://user:{secret}@127.0.0.1:1/prefix", "job-1")

    assert "%2F" in str(raised.value)
    assert "@ $.base_url" in str(raised.value)
    assert SECRET not in str(raised.value)


def test_an_ambiguous_url_from_the_environment_is_rejected_and_never_shown() -> None:
    """From the environment (never raises): logged once, every send rejected, nothing shown."""
    url = f"http://user:s3/{SECRET}@127.0.0.1:1"
    with capture_events() as events:
        sink = HttpSink.from_destination(HttpDestination(url=url, job_id="job-1"))
        opened = sink.open()
        reporter = Reporter(sink, ReportingConfig(close_unanswered_seconds=0.2), rank=0).start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        reporter.close(timeout=1.0)

    assert "percent-encode" in getattr(opened, "reason", "")
    assert [] == [t for t in (repr(sink), sink.describe(), repr(opened)) if SECRET in t]
    assert SECRET not in repr(events)
    assert ["url"] == [
        e["field"] for e in events if e["event"] == "trainreport.config_field_invalid"
    ]


def test_a_percent_encoded_slash_in_the_password_is_sent_decoded_to_the_right_host(
    recorder: tuple[str, list[dict[str, str]]],
) -> None:
    """``s3%2Fcret`` is the way to write ``s3/cret``: Basic auth carries ``s3/cret``."""
    address, seen = recorder

    HttpSink(f"http://user:s3%2F{SECRET}@{address}", "job-1").open()

    expected = "Basic " + base64.b64encode(f"user:s3/{SECRET}".encode()).decode()
    assert seen
    assert {expected} == {request.get("authorization") for request in seen}


@pytest.mark.parametrize(
    "url",
    [
        f"http://127.0.0.1:1/?token={SECRET}",
        f"http://127.0.0.1:1/prefix?token={SECRET}#x",
        f"http://127.0.0.1:1/prefix#{SECRET}",
        f"http://user:{SECRET}@127.0.0.1:1/prefix/?token={SECRET}",
    ],
)
def test_a_query_or_fragment_never_shows_in_describe_repr_or_the_log(url: str) -> None:
    """A token in a query string is not printed by describe(), repr() or a real short run."""
    sink = HttpSink(url, "job-1", connect_timeout_seconds=0.2)
    config = ReportingConfig(close_unanswered_seconds=0.2)
    with capture_events() as events:
        reporter = Reporter(sink, config, rank=0).start()
        reporter.report_train_step(step=1, metrics={"loss": 1.0})
        reporter.close(timeout=1.0)

    assert [] == [t for t in (repr(sink), sink.describe(), sink.base_url) if SECRET in t]
    assert any(e["event"] == "trainreport.reporting_to" for e in events)
    assert SECRET not in repr(events)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://user:pw@host:1/prefix/", "https://host:1/prefix"),
        ("https://host:1/?token=abc", "https://host:1"),
        ("https://host:1?token=abc#frag", "https://host:1"),
        ("https://u:s3/cret@host:1", "https://<hidden>"),
        ("https://u:s3?cret@host:1", "https://<hidden>"),
        ("https://host/a@b", "https://<hidden>"),
        ("user:pw@host", "host"),
        ("", ""),
    ],
)
def test_shown_url_has_no_userinfo_query_or_fragment(url: str, expected: str) -> None:
    """The one display form of a URL; an ambiguous one is not shown at all."""
    assert expected == shown_url(url)
