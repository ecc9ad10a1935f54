"""A random-choice HTTP load balancer in its own process (benchmarks and tests only).

Each request goes to a replica chosen at random, like any round-robin or
random HTTP load balancer in front of stateless servers. A replica that
refuses the connection (killed, restarting) is skipped for the other one, as
a load balancer's passive health check does; a replica that dies with the
request in flight makes the balancer answer 502, and the client retries. The
balancer records each request's method, path kind, status and upstream
latency; ``GET /__stats`` answers them (and is not forwarded).

    python benchmarks/_balancer.py --upstream http://127.0.0.1:8001 \\
        --upstream http://127.0.0.1:8002

prints ``port <n>`` once it listens on 127.0.0.1, then serves until killed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import urllib3

_FORWARDED = ("content-type", "content-encoding", "authorization", "accept-encoding")
_RETURNED = ("content-type", "content-encoding", "retry-after", "www-authenticate")


class _Balancer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, upstreams: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstreams = upstreams
        self.pool = urllib3.PoolManager(maxsize=128, retries=False, block=False)
        self.lock = threading.Lock()
        self.records: list[tuple[str, str, int, float]] = []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Balancer

    def log_message(self, format: str, *args: Any) -> None:
        del format, args

    def _forward(self) -> None:
        if self.path == "/__stats":
            with self.server.lock:
                body = json.dumps(self.server.records).encode()
            self._answer(200, {"content-type": "application/json"}, body)
            return
        length = int(self.headers.get("content-length") or 0)
        request_body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARDED}
        order = random.sample(self.server.upstreams, len(self.server.upstreams))
        started = time.perf_counter()
        status, reply_headers, data = (
            502,
            {"content-type": "application/json"},
            b'{"error":"bad_gateway"}',
        )
        for upstream in order:
            try:
                response = self.server.pool.request(
                    self.command,
                    upstream + self.path,
                    body=request_body,
                    headers=headers,
                    timeout=urllib3.Timeout(connect=1.0, read=60.0),
                    decode_content=False,
                    redirect=False,
                )
            except urllib3.exceptions.NewConnectionError:
                continue  # refused: try the next replica
            except urllib3.exceptions.HTTPError:
                break  # died with the request in flight: 502, the client retries
            status = response.status
            reply_headers = {k: v for k, v in response.headers.items() if k.lower() in _RETURNED}
            data = response.data
            break
        elapsed = time.perf_counter() - started
        kind = self.path.rsplit("/", 1)[-1] if "/tasks/" in self.path else self.path
        with self.server.lock:
            self.server.records.append((self.command, kind, status, elapsed))
        self._answer(status, reply_headers, data)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward  # noqa: N815


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", action="append", required=True)
    args = parser.parse_args(argv)
    balancer = _Balancer([u.rstrip("/") for u in args.upstream])
    print(f"port {balancer.server_address[1]}", flush=True)
    balancer.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
