"""A counting, fault-injecting HTTP/1.1 proxy in its own process (benchmarks only).

It sits between a client (``HttpSink`` or the synchronous baseline) and the
reference server, so that the bytes a client puts on the wire are counted as
they arrive (docs/design.md#performance: request bodies as sent, after compression, plus
headers), and so that server modes can be simulated:

* ``pass``: forward every request and its response;
* ``slow``: forward, then hold each response ``--delay`` seconds before
  handing it to the client;
* ``hang``: read requests and never answer them (the connection stays open
  until the client gives up, or until the parent sends ``drop``).

It runs in a separate process so that its Python code never competes with the
measured training loop for the GIL (docs/design.md#shape). Each client connection gets
its own upstream keep-alive connection, opened on first use and reopened when
the server closed it while idle.

Control protocol, one line each way over the child's stdin/stdout: the child
first prints ``port <n>``; then ``stats`` answers one JSON object (see
:class:`ProxyStats`), ``reset`` zeroes the counters and answers ``ok``,
``drop`` closes every client connection and answers ``ok``, ``quit`` exits.

Run by :class:`ProxyProcess`; ``python benchmarks/_proxy.py --help`` for the
child's flags.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import subprocess
import sys
import threading
from typing import IO, Any

import attrs

MODES = ("pass", "slow", "hang")
_LIMIT = 64 * 1024 * 1024  # a stream's buffer limit (bytes): large enough for any body we send


@attrs.frozen
class ProxyStats:
    """What the proxy counted since the last reset.

    Attributes:
        requests: requests read from clients.
        head_bytes: request heads as received (request line, headers, blank
            line), bytes.
        body_bytes: request bodies as received (after compression), bytes.
        uncompressed_bytes: the same requests with gzip bodies inflated and
            their ``Content-Encoding`` header removed, bytes.
        response_bytes: response bytes handed back to clients.
    """

    requests: int = 0
    head_bytes: int = 0
    body_bytes: int = 0
    uncompressed_bytes: int = 0
    response_bytes: int = 0

    @property
    def wire_bytes(self) -> int:
        """Request bytes on the wire: heads plus bodies as sent."""
        return self.head_bytes + self.body_bytes


class ProxyProcess:
    """Parent-side handle of a proxy child process.

    Args:
        upstream: ``host:port`` of the server to forward to.
        mode: one of :data:`MODES`.
        delay_seconds: the response delay of ``slow`` mode, seconds.

    Attributes:
        url: ``http://127.0.0.1:<port>`` to point a client at.

    Raises:
        RuntimeError: the child did not start.
    """

    def __init__(self, upstream: str, mode: str, delay_seconds: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        self.mode = mode
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--upstream",
                upstream,
                "--mode",
                mode,
                "--delay",
                str(delay_seconds),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        line = self._readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError(f"the benchmark proxy did not start (said {line!r})")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def _readline(self) -> str:
        stdout = self._process.stdout
        assert stdout is not None
        return stdout.readline().strip()

    def _command(self, command: str) -> str:
        with self._lock:
            stdin = self._process.stdin
            assert stdin is not None
            stdin.write(command + "\n")
            stdin.flush()
            return self._readline()

    def stats(self) -> ProxyStats:
        """The counters since the last :meth:`reset`."""
        return ProxyStats(**json.loads(self._command("stats")))

    def reset(self) -> None:
        """Zero the counters."""
        self._command("reset")

    def drop(self) -> None:
        """Close every client connection (releases clients hung in ``hang`` mode)."""
        self._command("drop")

    def close(self) -> None:
        """Stop the child (idempotent; never raises)."""
        process = self._process
        if process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert process.stdin is not None
                process.stdin.write("quit\n")
                process.stdin.flush()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


# --- the child -----------------------------------------------------------------------


class _Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values = ProxyStats()

    def add(self, **deltas: int) -> None:
        with self.lock:
            v = self.values
            self.values = attrs.evolve(v, **{k: getattr(v, k) + d for k, d in deltas.items()})

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return attrs.asdict(self.values)

    def reset(self) -> None:
        with self.lock:
            self.values = ProxyStats()


def _headers(head: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        if name:
            out[name.strip().lower()] = value.strip()
    return out


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    """One whole response (head and body) from ``reader``; raises IncompleteReadError at EOF."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    headers = _headers(head[:-4])
    if status < 200 or status in (204, 304):
        return head
    if "content-length" in headers:
        return head + await reader.readexactly(int(headers["content-length"]))
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = [head]
        while True:
            size_line = await reader.readuntil(b"\r\n")
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            parts.append(await reader.readexactly(size + 2))
            if size == 0:
                return b"".join(parts)
    return head + await reader.read()


class _Proxy:
    def __init__(self, upstream: tuple[str, int], mode: str, delay: float) -> None:
        self.upstream = upstream
        self.mode = mode
        self.delay = delay
        self.counters = _Counters()
        self.clients: set[asyncio.StreamWriter] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.add(writer)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                    return
                headers = _headers(head[:-4])
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                self._count(head, headers, body)
                if self.mode == "hang":
                    while await reader.read(65536):
                        pass
                    return
                response, upstream = await self._forward(head + body, upstream)
                if response is None:
                    return
                if self.mode == "slow":
                    await asyncio.sleep(self.delay)
                writer.write(response)
                await writer.drain()
                self.counters.add(response_bytes=len(response))
        except (asyncio.IncompleteReadError, OSError):
            return
        finally:
            self.clients.discard(writer)
            if upstream is not None:
                upstream[1].close()
            writer.close()

    def _count(self, head: bytes, headers: dict[str, str], body: bytes) -> None:
        inflated = len(head) + len(body)
        if headers.get("content-encoding", "").lower() == "gzip":
            try:
                plain = len(gzip.decompress(body))
            except (OSError, EOFError):
                plain = len(body)
            inflated = len(head) - len("Content-Encoding: gzip\r\n") + plain
        self.counters.add(
            requests=1, head_bytes=len(head), body_bytes=len(body), uncompressed_bytes=inflated
        )

    async def _forward(
        self,
        request: bytes,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None,
    ) -> tuple[bytes | None, tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]:
        for attempt in range(2):
            if upstream is None:
                try:
                    upstream = await asyncio.open_connection(*self.upstream, limit=_LIMIT)
                except OSError:
                    return None, None
            up_reader, up_writer = upstream
            try:
                up_writer.write(request)
                await up_writer.drain()
                return await _read_response(up_reader), upstream
            except (asyncio.IncompleteReadError, OSError):
                up_writer.close()
                upstream = None
                if attempt:  # the server closed an idle keep-alive connection: retry once
                    return None, None
        return None, None

    def drop(self) -> None:
        for writer in list(self.clients):
            writer.close()


def _control(proxy: _Proxy, stdin: IO[str], stdout: IO[str]) -> None:
    for line in stdin:
        command = line.strip()
        if command == "stats":
            answer = json.dumps(proxy.counters.snapshot())
        elif command == "reset":
            proxy.counters.reset()
            answer = "ok"
        elif command == "drop":
            loop = proxy.loop
            if loop is not None:
                done = threading.Event()

                def drop(done: threading.Event = done) -> None:
                    proxy.drop()
                    done.set()

                loop.call_soon_threadsafe(drop)
                done.wait(5)
            answer = "ok"
        elif command == "quit":
            break
        else:
            answer = "error"
        stdout.write(answer + "\n")
        stdout.flush()
    loop = proxy.loop
    if loop is not None:
        loop.call_soon_threadsafe(loop.stop)


def main(argv: list[str] | None = None) -> int:
    """Run the proxy until ``quit`` or the parent closes stdin."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="host:port of the server")
    parser.add_argument("--mode", choices=MODES, default="pass")
    parser.add_argument("--delay", type=float, default=0.1, help="slow mode delay, seconds")
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    proxy = _Proxy((host, int(port)), args.mode, args.delay)
    loop = asyncio.new_event_loop()
    proxy.loop = loop
    server = loop.run_until_complete(
        asyncio.start_server(proxy.handle, "127.0.0.1", 0, limit=_LIMIT, backlog=128)
    )
    bound: Any = server.sockets[0].getsockname()
    sys.stdout.write(f"port {bound[1]}\n")
    sys.stdout.flush()
    control = threading.Thread(target=_control, args=(proxy, sys.stdin, sys.stdout), daemon=True)
    control.start()
    try:
        loop.run_forever()
    finally:
        server.close()
        proxy.drop()
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
