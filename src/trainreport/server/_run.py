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
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TextIO

import attrs
import urllib3

from trainreport._wire._protocol import CAPABILITIES_PATH, SERVER_DB_VARIABLE, SERVER_TOKEN_VARIABLE
from trainreport.server._app import create_app
from trainreport.server._config import ServerConfig, server_config
from trainreport.server._db._backend import StorageUnavailable, is_postgres_url
from trainreport.server._startup import start_lines

__all__ = [
    "ServerHandle",
    "bind_socket",
    "format_url",
    "make_uvicorn_server",
    "serve",
    "serve_arguments",
    "start_in_thread",
    "start_subprocess",
]

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


def make_uvicorn_server(app: Any, config: ServerConfig, *, configure_logging: bool) -> Any:
    """A ``uvicorn.Server`` for ``app`` with trainreport's settings.

    Args:
        app: the ASGI app from :func:`~trainreport.server.create_app`.
        config: the access log switch, the slow-client deadlines
            (``head_timeout_seconds``, ``body_timeout_seconds``: then 408 and
            the connection is closed) and ``max_connections`` (a further one
            is answered 503 with ``Retry-After: 1`` and closed).
        configure_logging: let uvicorn install its logging configuration
            (the CLI); ``False`` leaves the host process's logging alone.
    """
    import uvicorn  # noqa: PLC0415 - an optional dependency, imported when serving

    from trainreport.server._connections import guarded_protocol  # noqa: PLC0415 - uvicorn

    protocol = guarded_protocol(
        head_timeout_seconds=config.head_timeout_seconds,
        body_timeout_seconds=config.body_timeout_seconds,
        max_connections=config.max_connections,
    )
    kwargs: dict[str, Any] = {}
    if not configure_logging:
        kwargs["log_config"] = None
    settings = uvicorn.Config(
        app,
        http=protocol,
        lifespan="on",
        ws="none",
        access_log=config.access_log,
        log_level="info" if config.access_log else "warning",
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
        server_header=False,
        **kwargs,
    )
    return uvicorn.Server(settings)


def start_in_thread(
    config: ServerConfig | str | os.PathLike[str],
    /,
    *,
    clock: Callable[[], float] | None = None,
    startup_timeout_seconds: float = 10.0,
    **options: Any,
) -> ServerHandle:
    """Serve the reference app with uvicorn in a daemon thread of this process.

    Args:
        config: the server's configuration (:class:`ServerConfig`), or only
            its database (a SQLite file or a ``postgresql://`` URL), which
            then listens on a free port (``port=0``) unless ``options`` say.
        clock: the server's wall clock, seconds since the epoch (see
            ``create_app``; tests inject one).
        startup_timeout_seconds: how long to wait for the server to accept
            connections, in seconds.
        options: fields of :class:`ServerConfig` set on top of ``config``
            (``token=``, ``max_body_bytes=``, ``head_timeout_seconds=``, ...).

    Returns:
        The handle, once the server accepts connections. The host process's
        logging configuration is left alone.

    Raises:
        ValueError: a value :class:`ServerConfig` refuses.
        TypeError: an option that is not a field of :class:`ServerConfig`.
        OSError: the address cannot be bound.
        RuntimeError: the server did not start within the timeout.
    """
    if not isinstance(config, ServerConfig):
        options.setdefault("port", 0)
    config = server_config(config, **options)
    host = config.host
    app = create_app(config, clock=clock)
    sock = bind_socket(host, config.port)
    bound_port = sock.getsockname()[1]
    server = make_uvicorn_server(app, config, configure_logging=False)
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

    return ServerHandle(format_url(host, bound_port), _db_target(config.db), stop)


def _free_port(host: str) -> int:
    with bind_socket(host, 0) as sock:
        port: int = sock.getsockname()[1]
        return port


def start_subprocess(
    config: ServerConfig | str | os.PathLike[str],
    /,
    *,
    secret_file: str | os.PathLike[str] | None = None,
    startup_timeout_seconds: float = 30.0,
    **options: Any,
) -> ServerHandle:
    """Run ``python -m trainreport.cli serve`` in a child process and wait until it answers.

    The database and the admin token are handed over in ``TRAINREPORT_DB``
    and ``TRAINREPORT_SERVER_TOKEN``, never on the command line (which ``ps``
    shows; a PostgreSQL URL may hold a password); every other field is a
    flag (:func:`serve_arguments`).

    Args:
        config: the server's configuration (:class:`ServerConfig`), or only
            its database, which then listens on a free port unless
            ``options`` say. A ``port`` of 0 is resolved to a free port before
            the child starts.
        secret_file: a file holding the secret job tokens are verified with
            (``--secret-file``; the path is on the command line, the secret
            is not). ``config.secret`` must be ``None``.
        startup_timeout_seconds: how long to wait for ``GET /v1/capabilities``
            to answer, in seconds.
        options: fields of :class:`ServerConfig` set on top of ``config``.

    Returns:
        The handle (``pid`` set), once the server answers.

    Raises:
        ValueError: a value :class:`ServerConfig` refuses, or a
            ``config.secret`` (a child reads its secret from ``secret_file``).
        TypeError: an option that is not a field of :class:`ServerConfig`.
        RuntimeError: the child exited or did not answer within the timeout
            (its stderr is in the message).
    """
    if not isinstance(config, ServerConfig):
        options.setdefault("port", 0)
    config = server_config(config, **options)
    if config.secret is not None:
        raise ValueError("start_subprocess reads the secret from a file: pass secret_file")
    if not config.port:  # a free port now, so that the URL is known before the child starts
        config = attrs.evolve(config, port=_free_port(config.host))
    argv = [sys.executable, "-m", "trainreport.cli", "serve", *serve_arguments(config)]
    if secret_file is not None:
        argv += ["--secret-file", os.fspath(secret_file)]
    env = dict(os.environ)
    env.pop(SERVER_TOKEN_VARIABLE, None)
    env[SERVER_DB_VARIABLE] = config.db
    if config.token is not None:
        env[SERVER_TOKEN_VARIABLE] = config.token
    stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env
    )
    url = format_url(config.host, config.port)

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
    return ServerHandle(url, _db_target(config.db), stop, pid=process.pid)


def serve_arguments(config: ServerConfig) -> list[str]:
    """The ``trainreport serve`` flags that give ``config``, but for its database and tokens.

    ``db`` and ``token`` go in the environment and ``secret`` in a file (see
    :func:`start_subprocess`): nothing secret is put on a command line.
    Never raises.
    """
    argv = [
        "--host",
        config.host,
        "--port",
        str(config.port),
        "--max-body-bytes",
        str(config.max_body_bytes),
        "--max-decompressed-bytes",
        str(config.max_decompressed_bytes),
        "--body-budget-bytes",
        str(config.body_budget_bytes),
        "--max-response-memory-bytes",
        str(config.max_response_memory_bytes),
        "--head-timeout",
        repr(float(config.head_timeout_seconds)),
        "--body-timeout",
        repr(float(config.body_timeout_seconds)),
        "--max-connections",
        str(config.max_connections),
        "--stale-after",
        repr(float(config.stale_after_seconds)),
        "--retention-interval",
        repr(float(config.retention_interval_seconds)),
    ]
    for name in config.allowed_hosts:
        argv += ["--allowed-hosts", name]
    if config.retain_days is not None:
        argv += ["--retain-days", repr(float(config.retain_days))]
    if config.access_log:
        argv.append("--access-log")
    return argv


def serve(config: ServerConfig, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``trainreport serve``: run the server in the foreground until SIGINT or SIGTERM.

    Binds the port first (a busy port must not leave an empty database
    behind), then opens the database, prints :func:`~._startup.start_lines`
    and serves with uvicorn's logging configuration. Apply the start-up
    policy first (:func:`~._startup.prepare`).

    Args:
        config: the configuration, from :func:`~._startup.prepare`.
        out: where the start lines go (``sys.stdout`` when ``None``).
        err: where failures and warnings go (``sys.stderr`` when ``None``).

    Returns:
        The exit status: 0 once stopped, 1 when the address cannot be bound,
        2 when the app cannot be made (an allowed host that is not a name, a
        database that cannot be opened or was written by a newer server, a
        PostgreSQL URL without the ``postgres`` extra). Never raises
        ``KeyboardInterrupt``.
    """
    stdout = sys.stdout if out is None else out
    stderr = sys.stderr if err is None else err
    try:
        sock = bind_socket(config.host, config.port)
    except OSError as exc:
        print(
            f"trainreport serve: cannot listen on {config.host}:{config.port}: {exc}", file=stderr
        )
        return 1
    try:
        app = create_app(config)
    except (OSError, ValueError, RuntimeError, sqlite3.Error, StorageUnavailable) as exc:
        sock.close()
        print(f"trainreport serve: {exc}", file=stderr)
        return 2
    except ImportError as exc:
        sock.close()
        print(
            f"trainreport serve: a PostgreSQL database needs the 'postgres' extra "
            f"(pip install 'trainreport[postgres]'): {exc}",
            file=stderr,
        )
        return 2
    url = format_url(config.host, sock.getsockname()[1])
    shown = (
        app.state.database.description
        if is_postgres_url(config.db)
        else str(Path(config.db).resolve())
    )
    lines = start_lines(config, url, shown)
    for line in lines.out:
        print(line, file=stdout, flush=True)
    for line in lines.err:
        print(line, file=stderr, flush=True)
    server = make_uvicorn_server(app, config, configure_logging=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


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
