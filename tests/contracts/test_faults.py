"""The fault-injection helpers themselves (tests/faults.py), against the reference server."""

from __future__ import annotations

import json
import threading
import time

import pytest
import urllib3

from faults import FaultProxy, black_hole_server, closed_port
from trainreport.server import ServerHandle

CAPS = "/v1/capabilities"


def _pool() -> urllib3.PoolManager:
    return urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=2.0, read=2.0))


def test_pass_through_forwards_and_keeps_the_connection_alive(server: ServerHandle) -> None:
    """Requests pass to the server and answers come back on one kept-alive connection."""
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        first = pool.request("GET", proxy.url + CAPS)
        second = pool.request("GET", proxy.url + CAPS)
        assert (200, 200) == (first.status, second.status)
        assert "series-suffix-v1" in json.loads(first.data)["extensions"]
        assert ["pass", "pass"] == [r.fault for r in proxy.requests]
        assert 1 == pool.connection_from_url(proxy.url).num_connections


def test_fail_next_answers_n_requests_itself_then_passes(server: ServerHandle) -> None:
    """``fail_next(2, 503, headers)`` answers two requests itself, then forwards again."""
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        proxy.fail_next(2, 503, {"Retry-After": "7"})
        statuses = [pool.request("GET", proxy.url + CAPS) for _ in range(3)]
        assert [503, 503, 200] == [r.status for r in statuses]
        assert "7" == statuses[0].headers["Retry-After"]
        assert 3 == proxy.requests_seen


def test_fail_next_path_filter_and_skip(server: ServerHandle) -> None:
    """Only requests whose path contains ``path`` match, after ``skip`` matching ones pass."""
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        proxy.fail_next(1, 404, path=CAPS, skip=1)
        assert 404 == pool.request("GET", proxy.url + "/v1/jobs/j/tasks/t").status
        assert 200 == pool.request("GET", proxy.url + CAPS).status
        assert 404 == pool.request("GET", proxy.url + CAPS).status
        assert 200 == pool.request("GET", proxy.url + CAPS).status


def test_reset_next_breaks_the_connection(server: ServerHandle) -> None:
    """A reset request fails in the client with a connection error; the next one works."""
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        proxy.reset_next(1)
        with pytest.raises(urllib3.exceptions.ProtocolError):
            pool.request("GET", proxy.url + CAPS)
        assert 200 == pool.request("GET", proxy.url + CAPS).status


def test_drop_responses_next_applies_the_write_but_the_client_never_hears(
    server: ServerHandle,
) -> None:
    """The PATCH reaches the server (the task exists) while the client gets no answer."""
    body = json.dumps({"status": "running", "status_details": {"step": 3}}).encode()
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        proxy.drop_responses_next(1)
        with pytest.raises(urllib3.exceptions.ProtocolError):
            pool.request(
                "PATCH",
                proxy.url + "/v1/jobs/j/tasks/t",
                body=body,
                headers={"Content-Type": "application/json"},
            )
        task = pool.request("GET", server.url + "/v1/jobs/j/tasks/t")
        assert 3 == json.loads(task.data)["status_details"]["step"]


def test_hang_holds_requests_until_switched_back(server: ServerHandle) -> None:
    """A hung request times out in the client; after ``pass_through`` requests work again."""
    with FaultProxy.for_url(server.url) as proxy:
        proxy.hang()
        with urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(read=0.3)) as pool:
            started = time.monotonic()
            with pytest.raises(urllib3.exceptions.ReadTimeoutError):
                pool.request("GET", proxy.url + CAPS)
            assert time.monotonic() - started < 2.0
            proxy.pass_through()
            assert 200 == pool.request("GET", proxy.url + CAPS).status


def test_hang_stops_by_itself_after_its_seconds(server: ServerHandle) -> None:
    """``hang(seconds)`` is time-boxed: the held request is closed, later ones pass."""
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        proxy.hang(0.2)
        with pytest.raises(urllib3.exceptions.ProtocolError):
            pool.request("GET", proxy.url + CAPS)
        assert 200 == pool.request("GET", proxy.url + CAPS).status


def test_refuse_then_restore_on_the_same_port(server: ServerHandle) -> None:
    """While refused, connects fail; ``restore`` listens on the same port again."""
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        assert 200 == pool.request("GET", proxy.url + CAPS).status
        proxy.refuse()
        with pytest.raises(urllib3.exceptions.HTTPError):
            pool.request("GET", proxy.url + CAPS)
        with pytest.raises(urllib3.exceptions.NewConnectionError):
            pool.request("GET", proxy.url + CAPS)
        proxy.restore()
        assert 200 == pool.request("GET", proxy.url + CAPS).status


def test_refuse_with_seconds_restores_by_itself(server: ServerHandle) -> None:
    """``refuse(seconds)`` ends by itself; polling with a deadline sees the port answer again."""
    with FaultProxy.for_url(server.url) as proxy, _pool() as pool:
        proxy.refuse(0.2)
        deadline = time.monotonic() + 5.0
        status = None
        while time.monotonic() < deadline:
            try:
                status = pool.request("GET", proxy.url + CAPS).status
                break
            except urllib3.exceptions.HTTPError:
                threading.Event().wait(0.02)
        assert 200 == status


def test_black_hole_server_never_answers() -> None:
    """A connection to the black hole is accepted, and the read times out."""
    with (
        black_hole_server() as url,
        _pool() as pool,
        pytest.raises(urllib3.exceptions.ReadTimeoutError),
    ):
        pool.request("GET", url + CAPS, timeout=urllib3.Timeout(connect=1.0, read=0.2))


def test_closed_port_refuses_connections() -> None:
    """Nothing listens on ``closed_port()``: the connect is refused at once."""
    with (
        closed_port() as port,
        _pool() as pool,
        pytest.raises(urllib3.exceptions.NewConnectionError),
    ):
        pool.request("GET", f"http://127.0.0.1:{port}/")
