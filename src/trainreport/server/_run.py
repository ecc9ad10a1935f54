"""Running the reference server: in a daemon thread, as a subprocess, or in the foreground.

All three bind the listening socket themselves before uvicorn starts, so that
``port=0`` picks a free port and the URL is known before the first request.
Waits are bounded by deadlines and never sleep blindly: they poll a condition
with ``Event.wait``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import urllib3

from trainreport._environment import DB, SERVER_TOKEN
from trainreport._protocol import CAPABILITIES_PATH
from trainreport.server._app import (
    DEFAULT_BODY_BUDGET_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    DEFAULT_MAX_RESPONSE_MEMORY_BYTES,
    create_app,
)
from trainreport.server._retention import DEFAULT_RETENTION_INTERVAL_SECONDS
from trainreport.server._security import allowed_host_names
from trainreport.server._stale import DEFAULT_STALE_AFTER_SECONDS
from trainreport.server._storage import is_postgres_url

__all__ = [
    "DEFAULT_BODY_TIMEOUT_SECONDS",
    "DEFAULT_HEAD_TIMEOUT_SECONDS",
    "DEFAULT_MAX_CONNECTIONS",
    "DB_ENV_VAR",
    "TOKEN_ENV_VAR",
    "ServerHandle",
    "bind_socket",
    "format_url",
    "make_uvicorn_server",
    "start_in_thread",
    "start_subprocess",
]

#: The environment variable ``trainreport serve`` reads its token from (keeps it off ``ps``).
TOKEN_ENV_VAR = SERVER_TOKEN
#: The environment variable ``trainreport serve`` reads ``--db`` from when the flag is absent
#: (a PostgreSQL URL may hold a password: keep it off ``ps``).
DB_ENV_VAR = DB
#: Seconds a client has to send a request's head (request line and headers).
DEFAULT_HEAD_TIMEOUT_SECONDS = 5.0
#: Seconds a client has to send a request's body, once its head is in.
DEFAULT_BODY_TIMEOUT_SECONDS = 10.0
#: Open connections served at once; beyond it a new connection gets 503 and is closed.
DEFAULT_MAX_CONNECTIONS = 100
#: Seconds uvicorn waits for open requests at shutdown before closing them.
_GRACEFUL_SHUTDOWN_SECONDS = 3
_POLL_SECONDS = 0.01


class ServerHandle:
    """A running reference server; stop it with :meth:`stop` or a ``with`` block.

    Attributes:
        url: the base URL, e.g. ``"http://127.0.0.1:54321"`` (no trailing slash).
        db_path: the SQLite file the server writes (a ``Path``), or its
            ``postgresql://`` URL (a ``str``; never shown by ``repr``).
        pid: the server's process id when it runs as a subprocess, else ``None``.

    Not thread-safe; :meth:`stop` is idempotent.
    """

    def __init__(
        self,
        url: str,
        db_path: Path | str,
        stop: Callable[[float], None],
        pid: int | None = None,
    ) -> None:
        self.url = url
        self.db_path = db_path
        self.pid = pid
        self._stop = stop
        self._stopped = False

    def __repr__(self) -> str:
        db = "postgresql://..." if isinstance(self.db_path, str) else str(self.db_path)
        return f"ServerHandle(url={self.url!r}, db_path={db!r}, pid={self.pid})"

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Shut the server down and wait for it, bounded by ``timeout_seconds``.

        In-thread: asks uvicorn to exit (open requests get a few seconds),
        then joins the thread. Subprocess: SIGTERM, then SIGKILL once the
        timeout has passed. Idempotent; never raises.
        """
        if self._stopped:
            return
        self._stopped = True
        self._stop(timeout_seconds)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _db_target(db_path: str | os.PathLike[str]) -> Path | str:
    """A PostgreSQL URL as given, anything else as a ``Path``."""
    return db_path if is_postgres_url(db_path) else Path(db_path)  # type: ignore[return-value]


def format_url(host: str, port: int) -> str:
    """``http://host:port``, with an IPv6 literal in brackets. Never raises."""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    return f"http://{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (``port=0``: a free one), not yet listening.

    Raises:
        OSError: the address cannot be resolved or bound (e.g. the port is taken).
    """
    family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        if os.name != "nt":  # on Windows SO_REUSEADDR lets two servers share a port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def make_uvicorn_server(
    app: Any,
    *,
    access_log: bool,
    configure_logging: bool,
    head_timeout_seconds: float = DEFAULT_HEAD_TIMEOUT_SECONDS,
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> Any:
    """A ``uvicorn.Server`` for ``app`` with trainreport's settings.

    Args:
        app: the ASGI app from :func:`~trainreport.server.create_app`.
        access_log: log every request (uvicorn's access log); off by default
            in every entry point.
        configure_logging: let uvicorn install its logging configuration
            (the CLI); ``False`` leaves the host process's logging alone.
        head_timeout_seconds: time a client has to send a request's head, in
            seconds; then 408 and the connection is closed (slow clients).
        body_timeout_seconds: time a client has to send a request's body once
            its head is in, in seconds; then 408 and the connection is closed.
        max_connections: open connections served at once; a further one is
            answered 503 with ``Retry-After: 1`` and closed.

    Raises:
        ValueError: a timeout that is not positive or ``max_connections`` below 1.
    """
    import uvicorn  # noqa: PLC0415 - an optional dependency, imported when serving

    from trainreport.server._connections import guarded_protocol  # noqa: PLC0415 - uvicorn

    protocol = guarded_protocol(
        head_timeout_seconds=head_timeout_seconds,
        body_timeout_seconds=body_timeout_seconds,
        max_connections=max_connections,
    )
    kwargs: dict[str, Any] = {}
    if not configure_logging:
        kwargs["log_config"] = None
    config = uvicorn.Config(
        app,
        http=protocol,
        lifespan="on",
        ws="none",
        access_log=access_log,
        log_level="info" if access_log else "warning",
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
        server_header=False,
        **kwargs,
    )
    return uvicorn.Server(config)


def start_in_thread(
    db_path: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    secret: bytes | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    body_budget_bytes: int = DEFAULT_BODY_BUDGET_BYTES,
    max_response_memory_bytes: int = DEFAULT_MAX_RESPONSE_MEMORY_BYTES,
    allowed_hosts: Sequence[str] = (),
    head_timeout_seconds: float = DEFAULT_HEAD_TIMEOUT_SECONDS,
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
    clock: Callable[[], float] | None = None,
    access_log: bool = False,
    startup_timeout_seconds: float = 10.0,
    retain_days: float | None = None,
    retention_interval_seconds: float = DEFAULT_RETENTION_INTERVAL_SECONDS,
) -> ServerHandle:
    """Serve the reference app with uvicorn in a daemon thread of this process.

    Args:
        db_path: the SQLite database file, or a ``postgresql://`` URL.
        host: the address to listen on (loopback by default, docs/design.md#guarantees).
        port: the TCP port; 0 picks a free one (see :attr:`ServerHandle.url`).
        token: the admin token required on ``/v1`` (see ``create_app``).
        secret: the secret job tokens are verified with (see ``create_app``).
        max_body_bytes: the request body limit, in bytes.
        max_decompressed_bytes: the gzip body limit after decompression, in bytes.
        body_budget_bytes: request body bytes (after decompression) held at
            once across all requests; over it, 503 with ``Retry-After``.
        max_response_memory_bytes: memory of responses carrying curves held at
            once, in bytes; over it, 503 with ``Retry-After`` (see ``create_app``).
        allowed_hosts: ``Host`` names answered for besides loopback and ``host``.
        head_timeout_seconds: time to receive a request's head, in seconds.
        body_timeout_seconds: time to receive a request's body, in seconds.
        max_connections: open connections served at once.
        stale_after_seconds: silence after which a running task is stale, in
            seconds (see ``create_app``).
        clock: the server's wall clock, seconds since the epoch (see
            ``create_app``; tests inject one).
        access_log: log every request through the ``uvicorn.access`` logger.
        startup_timeout_seconds: how long to wait for the server to accept
            connections, in seconds.
        retain_days: delete finished jobs this many days after their last
            write (``None``: keep every job).
        retention_interval_seconds: seconds between retention passes.

    Returns:
        The handle, once the server accepts connections.

    Raises:
        OSError: the address cannot be bound.
        RuntimeError: the server did not start within the timeout.
    """
    app = create_app(
        db_path,
        token=token,
        secret=secret,
        max_body_bytes=max_body_bytes,
        max_decompressed_bytes=max_decompressed_bytes,
        body_budget_bytes=body_budget_bytes,
        max_response_memory_bytes=max_response_memory_bytes,
        allowed_hosts=sorted(allowed_host_names(host, allowed_hosts)),
        retain_days=retain_days,
        retention_interval_seconds=retention_interval_seconds,
        clock=clock,
        stale_after_seconds=stale_after_seconds,
    )
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    server = make_uvicorn_server(
        app,
        access_log=access_log,
        configure_logging=False,
        head_timeout_seconds=head_timeout_seconds,
        body_timeout_seconds=body_timeout_seconds,
        max_connections=max_connections,
    )
    thread = threading.Thread(
        target=server.run,
        kwargs={"sockets": [sock]},
        name=f"trainreport-server-{bound_port}",
        daemon=True,
    )
    thread.start()
    waiter = threading.Event()
    deadline = time.monotonic() + startup_timeout_seconds
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(startup_timeout_seconds)
            sock.close()
            app.state.database.close()
            raise RuntimeError(f"the trainreport server did not start on {host}:{bound_port}")
        waiter.wait(_POLL_SECONDS)

    def stop(timeout_seconds: float) -> None:
        server.should_exit = True
        thread.join(timeout_seconds)
        if thread.is_alive():
            server.force_exit = True
            thread.join(timeout_seconds)
        sock.close()

    return ServerHandle(format_url(host, bound_port), _db_target(db_path), stop)


def _free_port(host: str) -> int:
    with bind_socket(host, 0) as sock:
        port: int = sock.getsockname()[1]
        return port


def start_subprocess(
    db_path: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    secret_file: str | os.PathLike[str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    body_budget_bytes: int = DEFAULT_BODY_BUDGET_BYTES,
    max_response_memory_bytes: int = DEFAULT_MAX_RESPONSE_MEMORY_BYTES,
    allowed_hosts: Sequence[str] = (),
    head_timeout_seconds: float = DEFAULT_HEAD_TIMEOUT_SECONDS,
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
    access_log: bool = False,
    startup_timeout_seconds: float = 30.0,
    retain_days: float | None = None,
    retention_interval_seconds: float = DEFAULT_RETENTION_INTERVAL_SECONDS,
) -> ServerHandle:
    """Run ``python -m trainreport.cli serve`` in a child process and wait until it answers.

    The token is handed over in the ``TRAINREPORT_SERVER_TOKEN`` environment
    variable, never on the command line (which ``ps`` shows).

    Args:
        db_path: the SQLite database file, or a ``postgresql://`` URL (passed
            to the child in ``TRAINREPORT_DB``, off the command line, since it
            may hold a password).
        host: the address to listen on.
        port: the TCP port; 0 picks a free one before starting the child.
        token: the admin token required on ``/v1``.
        secret_file: a file holding the secret job tokens are verified with
            (``--secret-file``; the path is on the command line, the secret is not).
        max_body_bytes: the request body limit, in bytes.
        max_decompressed_bytes: the gzip body limit after decompression, in bytes.
        body_budget_bytes: request body bytes held at once across all requests.
        max_response_memory_bytes: memory of responses carrying curves held at
            once, in bytes (see ``create_app``).
        allowed_hosts: ``Host`` names answered for besides loopback and ``host``.
        head_timeout_seconds: time to receive a request's head, in seconds.
        body_timeout_seconds: time to receive a request's body, in seconds.
        max_connections: open connections served at once.
        stale_after_seconds: ``--stale-after``, in seconds.
        access_log: pass ``--access-log``.
        startup_timeout_seconds: how long to wait for ``GET /v1/capabilities``
            to answer, in seconds.
        retain_days: ``--retain-days``.
        retention_interval_seconds: ``--retention-interval``.

    Returns:
        The handle (``pid`` set), once the server answers.

    Raises:
        RuntimeError: the child exited or did not answer within the timeout
            (its stderr is in the message).
    """
    port = port or _free_port(host)
    argv = [
        sys.executable,
        "-m",
        "trainreport.cli",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
        "--max-body-bytes",
        str(max_body_bytes),
        "--max-decompressed-bytes",
        str(max_decompressed_bytes),
        "--body-budget-bytes",
        str(body_budget_bytes),
        "--max-response-memory-bytes",
        str(max_response_memory_bytes),
        "--head-timeout",
        repr(float(head_timeout_seconds)),
        "--body-timeout",
        repr(float(body_timeout_seconds)),
        "--max-connections",
        str(max_connections),
        "--stale-after",
        repr(float(stale_after_seconds)),
    ]
    for name in allowed_hosts:
        argv += ["--allowed-hosts", name]
    if secret_file is not None:
        argv += ["--secret-file", os.fspath(secret_file)]
    if access_log:
        argv.append("--access-log")
    if retain_days is not None:
        argv += ["--retain-days", repr(float(retain_days))]
    argv += ["--retention-interval", repr(float(retention_interval_seconds))]
    env = dict(os.environ)
    env.pop(TOKEN_ENV_VAR, None)
    env[DB_ENV_VAR] = os.fspath(db_path)
    if token is not None:
        env[TOKEN_ENV_VAR] = token
    stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env
    )
    url = format_url(host, port)

    def stop(timeout_seconds: float) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout_seconds)
        stderr.close()

    if not _wait_until_answering(url, process, startup_timeout_seconds):
        if process.poll() is None:
            process.kill()
            process.wait(startup_timeout_seconds)
        stderr.seek(0)
        output = stderr.read().decode(errors="replace")
        stderr.close()
        raise RuntimeError(f"the trainreport server did not start at {url}:\n{output}")
    return ServerHandle(url, _db_target(db_path), stop, pid=process.pid)


def _wait_until_answering(url: str, process: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    waiter = threading.Event()
    with urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=1.0)) as pool:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if pool.request("GET", url + CAPABILITIES_PATH).status == 200:
                    return True
            except urllib3.exceptions.HTTPError:
                pass
            waiter.wait(0.05)
    return False
