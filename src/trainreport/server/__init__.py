"""trainreport's reference job-status service and live chart page.

Needs the ``server`` extra (``pip install "trainreport[server]"``: Starlette
and uvicorn). The HTTP API is specified in ``docs/protocol.md``; running it is
described in ``docs/server.md``::

    from trainreport.server import start_in_thread

    with start_in_thread("runs.db") as server:
        print(server.url)          # http://127.0.0.1:<free port>

From a shell: ``trainreport serve --db runs.db`` (loopback, port 8321).
"""

from __future__ import annotations

from trainreport.server._app import (
    DEFAULT_BODY_BUDGET_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    DEFAULT_MAX_RESPONSE_MEMORY_BYTES,
    create_app,
)
from trainreport.server._run import ServerHandle, start_in_thread, start_subprocess

__all__ = [
    "DEFAULT_BODY_BUDGET_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "DEFAULT_MAX_RESPONSE_MEMORY_BYTES",
    "ServerHandle",
    "create_app",
    "start_in_thread",
    "start_subprocess",
]
