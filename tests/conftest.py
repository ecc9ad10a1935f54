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

Backends: every server fixture stores in ``storage``'s database, SQLite unless
the module is marked ``pytest.mark.both_backends``, which runs each of its
tests on SQLite and on PostgreSQL (a throwaway cluster for the session,
``tests/postgres.py``, a fresh schema for every database a fixture asks for).
Without PostgreSQL binaries the PostgreSQL tests fail, unless
``TRAINREPORT_SKIP_POSTGRES=1`` is set outside CI (then they are skipped).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from helpers import CALLER_ENVIRONMENT_NAMES, CALLER_ENVIRONMENT_PREFIXES, SUITE_KNOBS

if TYPE_CHECKING:
    import fake_cuda
    from trainreport.server import ServerHandle
    from trainreport.server._db._database import Database, WriterOpened

SERVER_TOKEN = "s3cret-token"
BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules marked ``both_backends`` run every server test on each backend."""
    if "storage" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "both_backends"
    ):
        metafunc.parametrize("storage", BACKENDS, scope="module")


@pytest.fixture(scope="session")
def storage() -> str:
    """The backend the server fixtures use: ``"sqlite"`` unless parametrized."""
    return "sqlite"


@pytest.fixture(scope="session")
def postgres_instance() -> Iterator[Any]:
    """A PostgreSQL cluster of this session's own (``tests/postgres.py``), started on first use.

    ``fsync=off``: the tests kill server processes, never the machine, so what
    PostgreSQL committed is still in the page cache; the benchmark runs with
    the default (``fsync=on``).
    """
    from postgres import PostgresInstance, PostgresMissing  # noqa: PLC0415

    try:
        instance = PostgresInstance({"fsync": "off", "full_page_writes": "off"})
    except PostgresMissing as exc:
        if os.environ.get("TRAINREPORT_SKIP_POSTGRES") == "1" and not os.environ.get("CI"):
            pytest.skip(f"TRAINREPORT_SKIP_POSTGRES=1: {exc}")
        pytest.fail(f"{exc} (set TRAINREPORT_SKIP_POSTGRES=1 to skip them locally)")
    yield instance
    instance.destroy()


def new_database(request: pytest.FixtureRequest, storage: str, directory: Path) -> str | Path:
    """A fresh, empty database of the ``storage`` backend: a file in ``directory`` or a URL."""
    if storage == "postgresql":
        url: str = request.getfixturevalue("postgres_instance").new_schema()
        return url
    return directory / f"{uuid.uuid4().hex[:12]}.db"


def opened_writer(db: Database, job_id: str, task_id: str) -> WriterOpened:
    """``db.tasks.open_writer(job_id, task_id)`` for a test that expects no stale attempt."""
    from trainreport.server._db._database import WriterOpened  # noqa: PLC0415 - the server extra

    opened = db.tasks.open_writer(job_id, task_id)
    assert isinstance(opened, WriterOpened), opened
    return opened


@pytest.fixture
def database_target(request: pytest.FixtureRequest, storage: str, tmp_path: Path) -> str | Path:
    """A fresh database of the test's backend (a SQLite path or a PostgreSQL URL)."""
    return new_database(request, storage, tmp_path)


@pytest.fixture(autouse=True)
def _no_journal_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts from an environment without the caller's reporting settings, and
    with ``TRAINREPORT_JOURNAL=0``: journals are kept per job and task under the working
    directory, and tests reuse job ids. Tests of the journal delete the variable and give
    ``journal_dir`` a temporary directory."""
    for name in list(os.environ):
        if name in SUITE_KNOBS:
            continue
        if name.startswith(CALLER_ENVIRONMENT_PREFIXES) or name in CALLER_ENVIRONMENT_NAMES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("TRAINREPORT_JOURNAL", "0")


@pytest.fixture(autouse=True)
def _an_attempt_that_followed_no_dead_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dead attempts this process took journals of (``_wire._attempt.follow``, by job and
    task) last as long as the process: each test starts with none, whatever journals earlier
    tests claimed."""
    from trainreport._wire import _attempt  # noqa: PLC0415 - fixtures import lazily

    monkeypatch.setattr(_attempt, "_predecessors", {})


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> fake_cuda.FakeTorch:
    """The stand-in for torch and CUDA (``fake_cuda.FakeTorch``), installed for this test."""
    import fake_cuda  # noqa: PLC0415 - only the tests of device values need it

    return fake_cuda.install(monkeypatch)


@pytest.fixture
def server_token() -> str:
    """The token ``token_server`` requires."""
    return SERVER_TOKEN


@pytest.fixture
def start_server(
    request: pytest.FixtureRequest, storage: str, tmp_path: Path
) -> Iterator[Callable[..., ServerHandle]]:
    """A factory ``start_server(db_path=None, **options) -> ServerHandle`` for in-thread servers.

    ``options`` are those of :func:`trainreport.server.start_in_thread` (``token``,
    ``max_body_bytes``, ...). Without ``db_path`` each server gets a fresh file.
    """
    from trainreport.server import start_in_thread  # noqa: PLC0415 - needs the server extra

    handles: list[ServerHandle] = []

    def start(db_path: str | os.PathLike[str] | None = None, **options: Any) -> ServerHandle:
        path = db_path if db_path is not None else new_database(request, storage, tmp_path)
        handle = start_in_thread(path, **options)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


@pytest.fixture
def start_server_process(
    request: pytest.FixtureRequest, storage: str, tmp_path: Path
) -> Iterator[Callable[..., ServerHandle]]:
    """A factory ``start_server_process(db_path=None, **options)`` for subprocess servers."""
    from trainreport.server import start_subprocess  # noqa: PLC0415 - needs the server extra

    handles: list[ServerHandle] = []

    def start(db_path: str | os.PathLike[str] | None = None, **options: Any) -> ServerHandle:
        path = db_path if db_path is not None else new_database(request, storage, tmp_path)
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
def module_server(
    request: pytest.FixtureRequest, storage: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerHandle]:
    """One in-thread server shared by a whole test module (use distinct job ids per test)."""
    from trainreport.server import start_in_thread  # noqa: PLC0415 - needs the server extra

    target = new_database(request, storage, tmp_path_factory.mktemp("module-server"))
    with start_in_thread(target) as handle:
        yield handle
