"""A throwaway PostgreSQL server for tests and benchmarks: ``initdb`` + ``pg_ctl``, no mock.

:class:`PostgresInstance` creates a cluster in a temporary directory, starts it on
a free loopback port (no Unix socket outside its directory), and removes it on
:meth:`~PostgresInstance.destroy`. PostgreSQL refuses to run as root: when the
tests run as root the cluster's directory is given to the ``postgres`` system
user (Debian's package creates it) and the server programs run through
``runuser -u postgres --``.

The binaries come from ``$TRAINREPORT_PG_BIN`` when it is set (only there),
else the newest ``/usr/lib/postgresql/*/bin`` (Debian's layout), else ``PATH``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

__all__ = ["PostgresInstance", "PostgresMissing", "find_bin_dir"]


class PostgresMissing(RuntimeError):  # noqa: N818 - reads as a state
    """No PostgreSQL server binaries (``initdb``, ``pg_ctl``) on this machine."""


def find_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``.

    Raises:
        PostgresMissing: none found.
    """
    configured = os.environ.get("TRAINREPORT_PG_BIN")
    candidates = [Path(configured)] if configured else []
    candidates += (
        []
        if configured
        else sorted(
            (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
            key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
            reverse=True,
        )
    )
    on_path = None if configured else shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    raise PostgresMissing(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's 'postgresql' "
        "package (.ci/run does) or set TRAINREPORT_PG_BIN"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresInstance:
    """One PostgreSQL cluster of its own, started on a free loopback port.

    Args:
        settings: extra server settings (``-c name=value``), e.g. ``{"fsync": "off"}``.

    Raises:
        PostgresMissing: no binaries.
        subprocess.CalledProcessError: ``initdb`` or ``pg_ctl start`` failed.
    """

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.bin_dir = find_bin_dir()
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="trainreport-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_root = os.geteuid() == 0
        self._settings = {
            "listen_addresses": "127.0.0.1",
            "max_connections": "300",
            **(settings or {}),
        }
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        self.start()

    def _run(self, program: str, *args: str) -> None:
        argv = [str(self.bin_dir / program), *args]
        if self._as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        """The URL of the ``postgres`` database as its superuser (trust authentication)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server (again) on the same port; returns once it accepts connections."""
        options = " ".join(f"-c {name}={value}" for name, value in self._settings.items())
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
            "-o", f"-p {self.port} -k {self.root} {options}", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: abort transactions; ``immediate``: like a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def new_schema(self) -> str:
        """A URL whose connections use a schema of their own, just created (a fresh database)."""
        import psycopg  # noqa: PLC0415 - the postgres extra

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url}?options=-csearch_path%3D{name}"

    def destroy(self) -> None:
        """Stop the server and remove its directory. Idempotent; never raises."""
        if self.root.exists():
            with contextlib.suppress(Exception):
                self.stop("immediate")
            shutil.rmtree(self.root, ignore_errors=True)
