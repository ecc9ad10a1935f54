"""The server's configuration and start-up policy: one ``ServerConfig`` for the CLI and the app.

``trainreport serve`` builds a :class:`ServerConfig` from its flags (their
defaults are the config's), hands it to the start-up policy in
``server/_startup.py`` and runs it; ``create_app``, ``start_in_thread`` and
``start_subprocess`` take the same value, or a database plus fields set on
top of the defaults.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import urllib3

from trainreport import cli
from trainreport.server import ServerConfig, ServerHandle, create_app
from trainreport.server._run import serve, serve_arguments
from trainreport.server._startup import StartupError, prepare, start_lines

SECRET = b"0123456789abcdef0123456789abcdef-server-secret"


def test_building_the_cli_parser_imports_no_server_stack() -> None:
    """``trainreport --help`` and the serve defaults need neither Starlette nor uvicorn."""
    code = (
        "import sys, trainreport.cli as cli; cli.build_parser().parse_args(['serve']); "
        "from trainreport.server import ServerConfig, DEFAULT_MAX_BODY_BYTES; ServerConfig(); "
        "import trainreport.server._startup; "
        "print(sorted(m for m in ('starlette', 'uvicorn', 'prometheus_client') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "[]" == out.stdout.strip()


def test_the_serve_flags_default_to_the_server_config() -> None:
    """No copies: ``trainreport serve`` without flags runs ``ServerConfig()``."""
    args = cli.build_parser().parse_args(["serve"])

    assert ServerConfig() == prepare(cli._server_config(args), environ={})


def _every_field_changed() -> ServerConfig:
    return ServerConfig(
        host="::1",
        port=4321,
        allowed_hosts=("a.internal", "b.internal"),
        max_body_bytes=11,
        max_decompressed_bytes=12,
        body_budget_bytes=13,
        max_response_memory_bytes=14,
        head_timeout_seconds=1.5,
        body_timeout_seconds=2.5,
        max_connections=7,
        stale_after_seconds=45.0,
        retain_days=3.5,
        retention_interval_seconds=60.0,
        access_log=True,
    )


def test_the_subprocess_flags_give_the_cli_back_the_same_config() -> None:
    """``start_subprocess``'s command line parses to the config it was given (but secrets)."""
    config = _every_field_changed()
    unchanged = [f.name for f in attrs.fields(ServerConfig) if getattr(config, f.name) == f.default]
    args = cli.build_parser().parse_args(["serve", *serve_arguments(config)])

    assert ["db", "token", "secret"] == unchanged
    assert config == cli._server_config(args)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("token", "", "token must be a non-empty string"),
        ("secret", b"short", "at least 32"),
        ("max_body_bytes", 0, "max_body_bytes must be an integer of at least 1 byte"),
        ("max_response_memory_bytes", -1, "max_response_memory_bytes"),
        ("max_connections", 0, "max_connections"),
        ("head_timeout_seconds", 0.0, "head_timeout_seconds must be a positive number"),
        ("stale_after_seconds", float("nan"), "stale_after_seconds"),
        ("retain_days", 0.0, "retain_days must be a positive number of days"),
        ("retention_interval_seconds", float("inf"), "retention_interval_seconds"),
        ("port", 70000, "port must be a TCP port"),
    ],
)
def test_a_config_refuses_a_bad_value_naming_the_field(
    field: str, value: Any, message: str
) -> None:
    """Checked once, when the value is made, for every entry point alike."""
    with pytest.raises(ValueError, match=message):
        ServerConfig(**{field: value})


def test_a_config_repr_shows_no_token_secret_or_database_password() -> None:
    """A logged or printed config leaks no credential."""
    config = ServerConfig(
        db="postgresql://app:pg-passw0rd@db.internal/runs", token="admin-t0ken", secret=SECRET
    )

    shown = repr(config)

    assert "postgresql://app:***@db.internal/runs" in shown
    assert [] == [s for s in ("pg-passw0rd", "admin-t0ken", SECRET.decode()) if s in shown]


def test_create_app_checks_options_set_on_top_of_a_config(tmp_path: Path) -> None:
    """Fields given as keywords replace the config's and are checked; a typo is a TypeError."""
    base = ServerConfig(db=str(tmp_path / "a.db"))

    with pytest.raises(ValueError, match="max_decompressed_bytes"):
        create_app(base, max_decompressed_bytes=0)
    with pytest.raises(TypeError):
        create_app(base, max_body_byte=1)
    assert not (tmp_path / "a.db").exists()


def test_start_in_thread_serves_a_config_and_keeps_its_keyword_form(
    tmp_path: Path, start_server: Callable[..., ServerHandle]
) -> None:
    """A config, a config with a field on top, and ``start_server(max_body_bytes=...)``."""
    from trainreport.server import start_in_thread  # noqa: PLC0415

    config = ServerConfig(db=str(tmp_path / "c.db"), port=0, max_body_bytes=1234)
    with start_in_thread(config) as handle:
        from_config = _capabilities(handle.url)["max_body_bytes"]
    with start_in_thread(config, max_body_bytes=999) as handle:
        on_top = _capabilities(handle.url)["max_body_bytes"]
    from_options = _capabilities(start_server(max_body_bytes=4321).url)["max_body_bytes"]

    assert (1234, 999, 4321) == (from_config, on_top, from_options)


def _capabilities(url: str) -> dict[str, Any]:
    response = urllib3.request("GET", url + "/v1/capabilities", timeout=10.0, retries=False)
    body: dict[str, Any] = response.json()
    return body


# -- the start-up policy ---------------------------------------------------------------------


def test_the_token_comes_from_the_file_then_the_flag_then_the_environment(
    tmp_path: Path,
) -> None:
    """``--token-file`` (stripped), else ``--token``, else ``$TRAINREPORT_SERVER_TOKEN``."""
    token_file = tmp_path / "token"
    token_file.write_text("  from-file\n")
    env = {"TRAINREPORT_SERVER_TOKEN": "from-env"}

    tokens = [
        prepare(ServerConfig(), token_file=token_file, environ=env).token,
        prepare(ServerConfig(token="from-flag"), environ=env).token,
        prepare(ServerConfig(), environ=env).token,
        prepare(ServerConfig(), environ={}).token,
    ]

    assert ["from-file", "from-flag", "from-env", None] == tokens


def test_the_database_comes_from_the_flag_then_the_environment_then_the_default() -> None:
    """``--db``, else ``$TRAINREPORT_DB``, else ``./trainreport.db``."""
    env = {"TRAINREPORT_DB": "env.db"}

    dbs = [
        prepare(ServerConfig(), db="flag.db", environ=env).db,
        prepare(ServerConfig(), environ=env).db,
        prepare(ServerConfig(), environ={}).db,
    ]

    assert ["flag.db", "env.db", "trainreport.db"] == dbs


@pytest.mark.parametrize("contents", ["", "\n  \n"])
def test_an_empty_token_file_or_variable_is_refused(tmp_path: Path, contents: str) -> None:
    """An empty token would silently disable auth."""
    token_file = tmp_path / "token"
    token_file.write_text(contents)

    with pytest.raises(StartupError, match="token is empty"):
        prepare(ServerConfig(), token_file=token_file, environ={})
    with pytest.raises(StartupError, match="token is empty"):
        prepare(ServerConfig(), environ={"TRAINREPORT_SERVER_TOKEN": contents.strip()})


def test_the_secret_is_read_from_its_file_and_a_short_one_is_refused(tmp_path: Path) -> None:
    """``--secret-file``: surrounding whitespace stripped, at least 32 bytes."""
    good, short = tmp_path / "good", tmp_path / "short"
    good.write_bytes(SECRET + b"\n")
    short.write_bytes(b"abc")

    assert SECRET == prepare(ServerConfig(), secret_file=good, environ={}).secret
    with pytest.raises(StartupError, match="at least 32"):
        prepare(ServerConfig(), secret_file=short, environ={})
    with pytest.raises(StartupError, match="No such file"):
        prepare(ServerConfig(), secret_file=tmp_path / "missing", environ={})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.com", "a.localhost"])
def test_listening_beyond_loopback_without_a_token_is_refused(host: str) -> None:
    """Anyone who can reach it could read and write every job; the message names the fix."""
    with pytest.raises(StartupError) as refused:
        prepare(ServerConfig(host=host), environ={})

    assert f"refusing to listen on {host} without a token" in str(refused.value)
    assert "--token-file and/or --secret-file" in str(refused.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.9.9", "::1", "localhost"])
def test_loopback_without_a_token_is_allowed(host: str) -> None:
    """The default: a laptop's own server, with the warning below."""
    assert host == prepare(ServerConfig(host=host), environ={}).host


def test_a_token_or_a_secret_allows_any_address() -> None:
    """With credentials, ``--host 0.0.0.0`` is a deployment, not an accident."""
    by_token = prepare(ServerConfig(host="0.0.0.0", token="t"), environ={})
    by_secret = prepare(ServerConfig(host="0.0.0.0", secret=SECRET), environ={})

    assert ("t", SECRET) == (by_token.token, by_secret.secret)


def test_the_start_lines_name_the_tokens_and_warn_without_any() -> None:
    """The URL and token kinds on stdout (never a token); the warning and note on stderr."""
    url, db = "http://127.0.0.1:8321", "/runs/x.db"

    open_lines = start_lines(ServerConfig(), url, db)
    guarded = start_lines(ServerConfig(token="t0k", secret=SECRET), url, db)
    wildcard = start_lines(ServerConfig(host="0.0.0.0", token="t0k"), url, db)

    assert (
        "trainreport server listening on http://127.0.0.1:8321/ (db: /runs/x.db, tokens: none)",
    ) == open_lines.out
    assert 1 == len(open_lines.err)
    assert open_lines.err[0].startswith("WARNING: no token and no secret")
    assert "tokens: admin token, job tokens)" in guarded.out[0]
    assert "#token=<your token>" in guarded.out[1]
    assert () == guarded.err
    assert "t0k" not in " ".join(guarded.out + wildcard.out + wildcard.err)
    assert ("note: only loopback names are answered for",) == tuple(
        line.split(";")[0] for line in wildcard.err
    )


def test_serve_on_a_bad_allowed_host_exits_2_and_closes_the_port(tmp_path: Path) -> None:
    """The app is made after the port is bound; a failure says why and frees the port."""
    err = io.StringIO()
    config = ServerConfig(db=str(tmp_path / "h.db"), port=0, allowed_hosts=("a:80",))

    status = serve(config, out=io.StringIO(), err=err)

    assert 2 == status
    assert err.getvalue().startswith("trainreport serve: not a host name: 'a:80'")
