"""Slow clients against ``trainreport serve``: is a normal client still served?

Starts ``trainreport serve`` from ``--src`` in a child process whose file
descriptor limit is 256, keeps ``--slow`` connections open that send a header
line every half second (reopening those the server closes), and meanwhile
sends ``GET /v1/jobs`` as a normal client would (urllib3, 10 s timeout, up to
5 retries on 503). Prints how many normal requests got through and how long
they took. Loopback only; bounded by ``--seconds``.

    git archive <old commit> src | tar -x -C /tmp/old
    python benchmarks/slowloris.py --src /tmp/old/src
    python benchmarks/slowloris.py --src src
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import urllib3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def main(argv: list[str] | None = None) -> int:
    """Run the attack and the normal client; print one line of results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="the src directory of the tree to run")
    parser.add_argument("--slow", type=int, default=300, help="slow connections held open")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    waiter = threading.Event()
    with tempfile.TemporaryDirectory(prefix="slowloris-") as directory:
        command = (
            f"ulimit -n 256; exec {sys.executable} -m trainreport.cli serve "
            f"--db {directory}/s.db --port {port}"
        )
        server = subprocess.Popen(
            ["bash", "-c", command],
            env={**os.environ, "PYTHONPATH": args.src},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(300):
                try:
                    urllib3.request("GET", url + "/v1/capabilities", timeout=1.0)
                    break
                except urllib3.exceptions.HTTPError:
                    waiter.wait(0.1)
            end = time.monotonic() + args.seconds
            held: list[socket.socket] = []

            def attack() -> None:
                while time.monotonic() < end:
                    while len(held) < args.slow:
                        try:
                            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                        except OSError:
                            break
                        held.append(sock)
                    for sock in list(held):
                        try:
                            sock.sendall(b"X-Slow: y\r\n")
                        except OSError:
                            held.remove(sock)
                            sock.close()
                    waiter.wait(0.5)

            attacker = threading.Thread(target=attack)
            attacker.start()
            waiter.wait(3.0)
            served, failed, seconds = 0, 0, []
            retry = urllib3.Retry(total=5, backoff_factor=0.2, status_forcelist=[503])
            while time.monotonic() < end - 1:
                started = time.monotonic()
                try:
                    status = urllib3.request(
                        "GET", url + "/v1/jobs", timeout=10.0, retries=retry
                    ).status
                except urllib3.exceptions.HTTPError:
                    status = 0
                seconds.append(time.monotonic() - started)
                served, failed = served + (status == 200), failed + (status != 200)
            attacker.join()
            for sock in held:
                sock.close()
        finally:
            server.terminate()
            server.wait(10)
    seconds.sort()
    print(
        f"{args.src}: normal requests served {served}, failed {failed}, "
        f"p50 {seconds[len(seconds) // 2]:.3f} s, slowest {seconds[-1]:.3f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
