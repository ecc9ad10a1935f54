"""What ``trainreport serve`` decides before it listens, and what it says once it does.

The reference server's start-up policy (``docs/server.md``, "Running it" and
"Security"): where the database, the admin token and the secret come from,
the refusal to listen beyond loopback without a token, and the lines printed
at start. The command line parses flags into a :class:`ServerConfig` and hands
it here; :func:`~trainreport.server._run.serve` prints :func:`start_lines`.
Imports neither Starlette nor uvicorn.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from trainreport._wire._job_tokens import read_secret_file
from trainreport._wire._protocol import SERVER_DB_VARIABLE, SERVER_TOKEN_VARIABLE
from trainreport.server._config import ServerConfig

__all__ = ["StartLines", "StartupError", "listens_on_loopback", "prepare", "start_lines"]

#: Listen addresses that answer on every interface (the ``--allowed-hosts`` note).
_WILDCARDS = ("0.0.0.0", "::")  # noqa: S104 - names compared against, not bound


class StartupError(ValueError):
    """The server must not start as asked; the message says why and what to do."""


def listens_on_loopback(host: str) -> bool:
    """Whether ``host`` (``--host``) is ``localhost`` or a loopback address. Never raises.

    The bind address only: ``*.localhost`` names, which ``Host`` headers may
    use (``_security.is_loopback_name``), are not trusted to resolve to
    loopback when binding.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def prepare(
    config: ServerConfig,
    *,
    db: str | None = None,
    token_file: Path | None = None,
    secret_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """The configuration ``trainreport serve`` runs with, if the policy lets it start.

    Each setting comes from the first source that has it:

    - the database: ``db`` (``--db``), ``$TRAINREPORT_DB``, ``config.db``;
    - the admin token: ``token_file`` (``--token-file``, surrounding
      whitespace stripped), ``config.token`` (``--token``),
      ``$TRAINREPORT_SERVER_TOKEN``;
    - the secret: ``secret_file`` (``--secret-file``, whitespace stripped),
      ``config.secret``.

    Args:
        config: the settings given as flags.
        db: ``--db``, or ``None`` when it was not given.
        token_file: ``--token-file``, or ``None``.
        secret_file: ``--secret-file``, or ``None``.
        environ: the environment to read (``os.environ`` when ``None``).

    Returns:
        ``config`` with the database, token and secret filled in.

    Raises:
        StartupError: a token or secret file that cannot be read, an empty
            token, a secret under 32 bytes, or a ``host`` other than loopback
            with neither a token nor a secret (anyone who can reach it could
            read and write every job). The message names the fix.
    """
    env = os.environ if environ is None else environ
    try:
        token = _read_token(config.token, token_file, env)
        secret = config.secret if secret_file is None else read_secret_file(secret_file)
    except (OSError, ValueError) as exc:
        raise StartupError(str(exc)) from exc
    if token is None and secret is None and not listens_on_loopback(config.host):
        raise StartupError(
            f"refusing to listen on {config.host} without a token: anyone who can reach it "
            "could read and write every job; give --token-file and/or --secret-file, or "
            "listen on loopback"
        )
    return attrs.evolve(
        config, db=db or env.get(SERVER_DB_VARIABLE) or config.db, token=token, secret=secret
    )


def _read_token(given: str | None, token_file: Path | None, env: Mapping[str, str]) -> str | None:
    """The admin token from the first source that has one; ``ValueError`` for an empty one."""
    if token_file is not None:
        token = token_file.read_text(encoding="utf-8").strip()
    elif given is not None:
        token = given
    else:
        found = env.get(SERVER_TOKEN_VARIABLE)
        if found is None:
            return None
        token = found
    if not token:
        raise ValueError("the token is empty")
    return token


@attrs.frozen
class StartLines:
    """What the server says once it listens: lines for stdout, and for stderr."""

    out: tuple[str, ...]
    err: tuple[str, ...]


def start_lines(config: ServerConfig, url: str, database: str) -> StartLines:
    """The lines ``trainreport serve`` prints once it listens. Never raises.

    Args:
        config: the configuration it runs with (from :func:`prepare`).
        url: its base URL, e.g. ``http://127.0.0.1:8321``.
        database: the database as shown: a resolved path, or a URL without
            its password.

    Returns:
        On stdout the URL, the database and the kinds of token taken (never
        a token), and how to open the page with one; on stderr a warning
        when there is no token at all, and a note when a wildcard address
        answers loopback names only.
    """
    kinds = (("admin token", config.token), ("job tokens", config.secret))
    auth = ", ".join(name for name, on in kinds if on)
    out = [f"trainreport server listening on {url}/ (db: {database}, tokens: {auth or 'none'})"]
    err = []
    if auth:
        out.append("open the page with #token=<your token> at the end of the URL")
    else:
        err.append(
            "WARNING: no token and no secret: any process on this machine can read and write "
            "every job; loopback only (give --token-file and/or --secret-file to protect it)"
        )
    if config.host in _WILDCARDS and not config.allowed_hosts:
        err.append(
            f"note: only loopback names are answered for; add the names clients use to reach "
            f"{config.host} with --allowed-hosts"
        )
    return StartLines(tuple(out), tuple(err))
