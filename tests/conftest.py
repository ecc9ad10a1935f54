"""Shared fixtures: the reference server over real sockets, in-thread or as a subprocess.

Every fixture yields a :class:`trainreport.server.ServerHandle` (``.url``,
``.db_path``, ``.pid``, ``.stop()``) and stops it at teardown. The server
imports (Starlette, uvicorn) happen inside the fixtures, so test modules that
use none of them run without the ``server`` extra.

- ``server``: in-thread, fresh database, one per test.
- ``token_server``: in-thread, requires ``Authorization: Bearer s3cret-token``
  (the ``server_token`` fixture).
- ``server_process``: ``trainreport serve`` in a child process (restart and
  kill -9 tests); ``start_server_process`` starts more on any database.
- ``start_server``: a factory for in-thread servers with other options
  (``start_server(max_body_bytes=1024)``); each is stopped at teardown.
- ``module_server``: one in-thread server shared by a test module; tests using
  it must use their own job ids.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from trainreport.server import ServerHandle

SERVER_TOKEN = "s3cret-token"


@pytest.fixture(autouse=True)
def _no_journal_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TRAINREPORT_JOURNAL=0`` for every test: journals are kept per job and task under the
    working directory, and tests reuse job ids. Tests of the journal delete the variable
    and give ``journal_dir`` a temporary directory."""
    monkeypatch.setenv("TRAINREPORT_JOURNAL", "0")


@pytest.fixture
def server_token() -> str:
    """The token ``token_server`` requires."""
    return SERVER_TOKEN


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., ServerHandle]]:
    """A factory ``start_server(db_path=None, **options) -> ServerHandle`` for in-thread servers.

    ``options`` are those of :func:`trainreport.server.start_in_thread` (``token``,
    ``max_body_bytes``, ...). Without ``db_path`` each server gets a fresh file.
    """
    from trainreport.server import start_in_thread  # noqa: PLC0415 - needs the server extra

    handles: list[ServerHandle] = []

    def start(db_path: str | os.PathLike[str] | None = None, **options: Any) -> ServerHandle:
        path = db_path if db_path is not None else tmp_path / f"server-{len(handles)}.db"
        handle = start_in_thread(path, **options)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


@pytest.fixture
def start_server_process(tmp_path: Path) -> Iterator[Callable[..., ServerHandle]]:
    """A factory ``start_server_process(db_path=None, **options)`` for subprocess servers."""
    from trainreport.server import start_subprocess  # noqa: PLC0415 - needs the server extra

    handles: list[ServerHandle] = []

    def start(db_path: str | os.PathLike[str] | None = None, **options: Any) -> ServerHandle:
        path = db_path if db_path is not None else tmp_path / f"process-{len(handles)}.db"
        handle = start_subprocess(path, **options)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


@pytest.fixture
def server(start_server: Callable[..., ServerHandle]) -> ServerHandle:
    """The reference server in a thread of this process, on a fresh database."""
    return start_server()


@pytest.fixture
def token_server(start_server: Callable[..., ServerHandle]) -> ServerHandle:
    """The reference server requiring the bearer token ``server_token`` on ``/v1``."""
    return start_server(token=SERVER_TOKEN)


@pytest.fixture
def server_process(start_server_process: Callable[..., ServerHandle]) -> ServerHandle:
    """``trainreport serve`` in a child process, on a fresh database (``.pid`` is set)."""
    return start_server_process()


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One in-thread server shared by a whole test module (use distinct job ids per test)."""
    from trainreport.server import start_in_thread  # noqa: PLC0415 - needs the server extra

    with start_in_thread(tmp_path_factory.mktemp("module-server") / "server.db") as handle:
        yield handle
