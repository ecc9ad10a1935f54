"""trainreport's reference job-status service and live chart page.

Needs the ``server`` extra (``pip install "trainreport[server]"``: Starlette
and uvicorn). The HTTP API is specified in ``docs/protocol.md``; running it is
described in ``docs/server.md``::

    from trainreport.server import ServerConfig, start_in_thread

    with start_in_thread("runs.db") as server:
        print(server.url)          # http://127.0.0.1:<free port>

    config = ServerConfig(db="runs.db", port=0, max_body_bytes=2**20)
    with start_in_thread(config) as server:
        ...

From a shell: ``trainreport serve --db runs.db`` (loopback, port 8321).

:class:`ServerConfig` and the ``DEFAULT_*`` limits import neither Starlette
nor uvicorn (the command line reads its defaults from them without the
extra); the other names import the server stack on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainreport.server._config import (
    DEFAULT_BODY_BUDGET_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    DEFAULT_MAX_RESPONSE_MEMORY_BYTES,
    ServerConfig,
)

if TYPE_CHECKING:
    from trainreport.server._app import create_app
    from trainreport.server._run import ServerHandle, start_in_thread, start_subprocess

__all__ = [
    "DEFAULT_BODY_BUDGET_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "DEFAULT_MAX_RESPONSE_MEMORY_BYTES",
    "ServerConfig",
    "ServerHandle",
    "create_app",
    "start_in_thread",
    "start_subprocess",
]

#: The names that need Starlette and uvicorn, and the module each lives in.
_HEAVY = {
    "create_app": "trainreport.server._app",
    "ServerHandle": "trainreport.server._run",
    "start_in_thread": "trainreport.server._run",
    "start_subprocess": "trainreport.server._run",
}


def __getattr__(name: str) -> Any:
    """Import the server stack when one of its names is first used (PEP 562)."""
    module = _HEAVY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
