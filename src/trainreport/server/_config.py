"""The reference server's configuration: one frozen value, its defaults defined once.

:class:`ServerConfig` is what ``trainreport serve`` builds from its flags and
what :func:`~trainreport.server.create_app`, ``start_in_thread`` and
``start_subprocess`` run with. This module imports neither Starlette nor
uvicorn, so that the command line's parser takes its defaults from here
without the ``server`` extra (``trainreport --help`` works without it).
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Iterable
from typing import Any

import attrs

from trainreport._wire._job_tokens import check_secret

__all__ = [
    "DEFAULT_BODY_BUDGET_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "DEFAULT_MAX_RESPONSE_MEMORY_BYTES",
    "DEFAULT_RETENTION_INTERVAL_SECONDS",
    "ServerConfig",
    "server_config",
]

#: Default limit on the request body bytes received (8 MiB).
DEFAULT_MAX_BODY_BYTES = 8 * 2**20
#: Default limit on a gzip request body after decompression (4 MiB: 4x the largest update
#: HttpSink sends by default, see docs/server.md).
DEFAULT_MAX_DECOMPRESSED_BYTES = 4 * 2**20
#: Default budget of request body bytes (after decompression) held at once, server-wide.
DEFAULT_BODY_BUDGET_BYTES = 32 * 2**20
#: Default budget of memory for responses that carry curves, held at once, server-wide
#: (estimated per response from its point count; docs/server.md, "Limits").
DEFAULT_MAX_RESPONSE_MEMORY_BYTES = 256 * 2**20
#: Default seconds between two retention passes.
DEFAULT_RETENTION_INTERVAL_SECONDS = 300.0


def _fspath(value: str | os.PathLike[str]) -> str:
    return os.fspath(value)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _shown_db(db: str) -> str:
    """``repr`` of a database: a URL's password replaced by ``***``. Never raises."""
    try:
        parts = urllib.parse.urlsplit(db)
        password = parts.password
    except ValueError:
        return "'...'"
    if password is None:
        return repr(db)
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return repr(urllib.parse.urlunsplit(parts._replace(netloc=f"{name}:***@{host}")))


def _at_least_one(unit: str) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{attribute.name} must be an integer of at least 1 {unit}: {value!r}")

    return check


def _positive_seconds(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attribute.name == "retain_days":
        return
    unit = "days" if attribute.name == "retain_days" else "seconds"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{attribute.name} must be a positive number of {unit}: {value!r}")


def _port(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"{attribute.name} must be a TCP port from 0 to 65535: {value!r}")


def _token(_instance: object, _attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and not value:
        raise ValueError("token must be a non-empty string or None")


def _secret(
    _instance: object, _attribute: attrs.Attribute[bytes | None], value: bytes | None
) -> None:
    if value is not None:
        check_secret(value)


@attrs.frozen(kw_only=True)
class ServerConfig:
    """How the reference server runs: storage, address, tokens, limits, deadlines.

    A frozen value, checked when it is made; change it with ``attrs.evolve``.
    Every field has the default ``trainreport serve`` uses (its flag in
    brackets; ``docs/server.md``, "Running it").

    Attributes:
        db: the SQLite database file (created with its tables if missing) or
            a ``postgresql://`` URL (the ``postgres`` extra; ``repr`` hides its
            password) [``--db``, else ``$TRAINREPORT_DB``, else ``trainreport.db``].
        host: the address to listen on; loopback unless you say otherwise
            [``--host``, ``127.0.0.1``].
        port: the TCP port, 0 for a free one [``--port``, 8321;
            ``start_in_thread`` and ``start_subprocess`` default to 0].
        token: the admin token: it reads and writes every job and cancels.
            With it or ``secret`` set, every ``/v1`` request but the open ones
            needs ``Authorization: Bearer <token>``; never logged, never in
            ``repr`` [``--token-file``, ``--token``, ``$TRAINREPORT_SERVER_TOKEN``].
        secret: the server secret per-job tokens (``trainreport token``) are
            verified with, at least 32 bytes; a job token reads and writes its
            own job only. Never in ``repr`` [``--secret-file``].
        allowed_hosts: ``Host`` names answered for besides loopback and
            ``host``; ``"*"`` answers any host. A name with a port, a path or
            spaces is refused by ``create_app`` [``--allowed-hosts``].
        max_body_bytes: limit on the request body bytes received (after
            transfer decoding, before gzip decompression), in bytes; larger
            gets 413 [``--max-body-bytes``, 8 MiB].
        max_decompressed_bytes: limit on a gzip body after decompression, in
            bytes; larger gets 413 [``--max-decompressed-bytes``, 4 MiB].
        body_budget_bytes: request body bytes (after decompression) the
            whole server holds at once; over it, 503 with ``Retry-After``
            [``--body-budget-bytes``, 32 MiB].
        max_response_memory_bytes: memory, in bytes, the responses that carry
            curves may take at once, each estimated from its point count; over
            it, 503 with ``Retry-After``; a larger one is served alone
            [``--max-response-memory-bytes``, 256 MiB].
        head_timeout_seconds: time a client has to send a request's head, in
            seconds; then 408 and close [``--head-timeout``, 5].
        body_timeout_seconds: time a client has to send a request's body once
            its head is in, in seconds; then 408 and close [``--body-timeout``, 10].
        max_connections: open connections served at once; a further one gets
            503 and is closed [``--max-connections``, 100].
        stale_after_seconds: a ``running`` task without a write for longer
            than this, in seconds, is reported stale [``--stale-after``, 180:
            three heartbeats].
        retain_days: delete finished jobs this many days after their last
            write; ``None`` keeps every job [``--retain-days``, ``None``].
        retention_interval_seconds: seconds between two retention passes
            [``--retention-interval``, 300].
        access_log: log every request through uvicorn's access log
            [``--access-log``, off].

    Raises:
        ValueError: when made with an empty token, a secret under 32 bytes, a
            limit below 1, a time that is not a positive number, or a port
            outside 0-65535 (the message names the field).
        TypeError: a name that is not a field.
    """

    db: str = attrs.field(default="trainreport.db", converter=_fspath, repr=_shown_db)
    host: str = "127.0.0.1"
    port: int = attrs.field(default=8321, validator=_port)
    token: str | None = attrs.field(default=None, repr=False, validator=_token)
    secret: bytes | None = attrs.field(default=None, repr=False, validator=_secret)
    allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=_names)
    max_body_bytes: int = attrs.field(
        default=DEFAULT_MAX_BODY_BYTES, validator=_at_least_one("byte")
    )
    max_decompressed_bytes: int = attrs.field(
        default=DEFAULT_MAX_DECOMPRESSED_BYTES, validator=_at_least_one("byte")
    )
    body_budget_bytes: int = attrs.field(
        default=DEFAULT_BODY_BUDGET_BYTES, validator=_at_least_one("byte")
    )
    max_response_memory_bytes: int = attrs.field(
        default=DEFAULT_MAX_RESPONSE_MEMORY_BYTES, validator=_at_least_one("byte")
    )
    head_timeout_seconds: float = attrs.field(default=5.0, validator=_positive_seconds)
    body_timeout_seconds: float = attrs.field(default=10.0, validator=_positive_seconds)
    max_connections: int = attrs.field(default=100, validator=_at_least_one("connection"))
    stale_after_seconds: float = attrs.field(default=180.0, validator=_positive_seconds)
    retain_days: float | None = attrs.field(default=None, validator=_positive_seconds)
    retention_interval_seconds: float = attrs.field(
        default=DEFAULT_RETENTION_INTERVAL_SECONDS, validator=_positive_seconds
    )
    access_log: bool = False


def server_config(config: ServerConfig | str | os.PathLike[str], /, **options: Any) -> ServerConfig:
    """``config`` with ``options`` set: how every entry point reads its arguments.

    Args:
        config: a whole configuration, or only the database (a SQLite file or
            a ``postgresql://`` URL), the other fields at their defaults.
        options: fields of :class:`ServerConfig` to set (``token=``,
            ``max_body_bytes=``, ...), as ``attrs.evolve`` sets them.

    Raises:
        ValueError: a value a field refuses.
        TypeError: an option that is not a field of :class:`ServerConfig`.
    """
    if not isinstance(config, ServerConfig):
        return ServerConfig(db=config, **options)
    return attrs.evolve(config, **options) if options else config
