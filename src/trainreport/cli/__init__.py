"""The ``trainreport`` command line: ``serve | token | demo | show | sync`` and ``--version``.

Each subcommand is one ``_add_<name>(subparsers)`` function in :data:`_COMMANDS`
that registers its parser and sets ``handler``, a function from the parsed
arguments to the exit status. Heavy imports (the server's Starlette and uvicorn)
happen inside the handler, so ``trainreport --help`` works without the
``server`` extra; ``serve`` reads its defaults from the import-light
:class:`~trainreport.server.ServerConfig` and leaves its start-up policy to the
server package.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from trainreport import _environment
from trainreport._wire._protocol import SERVER_DB_VARIABLE, SERVER_TOKEN_VARIABLE
from trainreport.exceptions import ClientError, NotFoundError, UnauthorizedError, UnreachableError
from trainreport.server._config import ServerConfig

if TYPE_CHECKING:
    from trainreport._runlog._runfile import RunFile

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]
#: ``trainreport serve``'s defaults: the server's own (no copies).
_SERVE = ServerConfig()
DEFAULT_FOLLOW_INTERVAL_SECONDS = 2.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``trainreport`` command line.

    Args:
        argv: the arguments after the program name (``None``: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when the command failed, 2 for a
        usage error. argparse itself exits with 2 on a malformed command line.
    """
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader went away (``trainreport show ... | head``): what it read was what
        # it wanted. Python's documented recipe: point stdout at devnull so the flush
        # at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered. Never raises."""
    parser = argparse.ArgumentParser(
        prog="trainreport",
        description="Report training progress and metric curves to a job-status service.",
    )
    parser.add_argument("--version", action="version", version=f"trainreport {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(subparsers)
    return parser


def _version() -> str:
    """The installed distribution's version (``unknown`` when run from a bare source tree)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("trainreport")
    except PackageNotFoundError:
        return "unknown"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {value}")
    return value


# -- serve ------------------------------------------------------------------------------


def _add_serve(subparsers: Any) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="run the reference job-status service and its live chart page",
        description=(
            "Run the reference job-status service (docs/protocol.md) with its chart page "
            "at /. Listens on loopback unless --host says otherwise."
        ),
    )
    serve.add_argument(
        "--db",
        help=(
            "SQLite database file, created if missing, or a postgresql://user@host/dbname URL "
            f"(needs the 'postgres' extra; put a password in ${SERVER_DB_VARIABLE} or "
            f"~/.pgpass, not on the command line) (default: ${SERVER_DB_VARIABLE}, else "
            f"./{_SERVE.db})"
        ),
    )
    serve.add_argument(
        "--retain-days",
        type=_positive_seconds,
        metavar="DAYS",
        help=(
            "delete finished jobs (no task pending or running) this many days after their "
            "last write, in small batches (default: keep every job)"
        ),
    )
    serve.add_argument(
        "--retention-interval",
        type=_positive_seconds,
        default=_SERVE.retention_interval_seconds,
        metavar="SECONDS",
        help=(
            f"seconds between two retention passes (default: {_SERVE.retention_interval_seconds:g})"
        ),
    )
    serve.add_argument(
        "--host", default=_SERVE.host, help=f"address to listen on (default: {_SERVE.host})"
    )
    serve.add_argument(
        "--port",
        type=_port,
        default=_SERVE.port,
        help=f"TCP port; 0 picks a free one (default: {_SERVE.port})",
    )
    token = serve.add_mutually_exclusive_group()
    token.add_argument(
        "--token",
        help=(
            "require 'Authorization: Bearer TOKEN' on every /v1 request (visible in the process "
            f"list: prefer --token-file or ${SERVER_TOKEN_VARIABLE})"
        ),
    )
    token.add_argument("--token-file", type=Path, help="read the admin token from this file")
    serve.add_argument(
        "--secret-file",
        type=Path,
        help=(
            "accept per-job tokens issued with `trainreport token JOB_ID --secret-file` from "
            "this secret (at least 32 bytes; e.g. openssl rand -hex 32)"
        ),
    )
    serve.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=_SERVE.max_body_bytes,
        help=f"largest request body accepted, in bytes (default: {_SERVE.max_body_bytes})",
    )
    serve.add_argument(
        "--max-decompressed-bytes",
        type=_positive_int,
        default=_SERVE.max_decompressed_bytes,
        help=(
            "largest gzip request body after decompression, in bytes "
            f"(default: {_SERVE.max_decompressed_bytes})"
        ),
    )
    serve.add_argument(
        "--body-budget-bytes",
        type=_positive_int,
        default=_SERVE.body_budget_bytes,
        help=(
            "request body bytes (after decompression) held at once across all requests; "
            f"over it, 503 with Retry-After (default: {_SERVE.body_budget_bytes})"
        ),
    )
    serve.add_argument(
        "--max-response-memory-bytes",
        type=_positive_int,
        default=_SERVE.max_response_memory_bytes,
        help=(
            "memory the responses carrying curves (GET of a task, a writer's open, "
            "/series) may take at once, estimated from their point counts; over it, 503 "
            "with Retry-After; a larger one is served alone "
            f"(default: {_SERVE.max_response_memory_bytes})"
        ),
    )
    serve.add_argument(
        "--allowed-hosts",
        action="append",
        default=[],
        metavar="NAME",
        help=(
            "answer requests whose Host header is NAME, besides loopback names and --host "
            "(repeat, or separate with commas; '*' answers any host)"
        ),
    )
    serve.add_argument(
        "--head-timeout",
        type=_positive_seconds,
        default=_SERVE.head_timeout_seconds,
        metavar="SECONDS",
        help=(
            "time a client has to send a request's head; then 408 and close "
            f"(default: {_SERVE.head_timeout_seconds:g})"
        ),
    )
    serve.add_argument(
        "--body-timeout",
        type=_positive_seconds,
        default=_SERVE.body_timeout_seconds,
        metavar="SECONDS",
        help=(
            "time a client has to send a request's body once its head is in; then 408 and "
            f"close (default: {_SERVE.body_timeout_seconds:g})"
        ),
    )
    serve.add_argument(
        "--max-connections",
        type=_positive_int,
        default=_SERVE.max_connections,
        help=(
            "open connections served at once; a further one gets 503 and is closed "
            f"(default: {_SERVE.max_connections})"
        ),
    )
    serve.add_argument(
        "--stale-after",
        type=_positive_seconds,
        default=_SERVE.stale_after_seconds,
        metavar="SECONDS",
        help=(
            "a running task without an update for this long is shown as stale (its process "
            f"may have died) (default: {_SERVE.stale_after_seconds:g}, three heartbeats)"
        ),
    )
    serve.add_argument(
        "--access-log", action="store_true", help="log every request (off by default)"
    )
    serve.set_defaults(handler=_serve)


def _server_config(args: argparse.Namespace) -> ServerConfig:
    """The :class:`ServerConfig` that ``serve``'s flags give, but for the database and files.

    Raises:
        ValueError: a value the configuration refuses (``--token ''``).
    """
    return ServerConfig(
        host=args.host,
        port=args.port,
        token=args.token,
        allowed_hosts=tuple(name for value in args.allowed_hosts for name in value.split(",")),
        max_body_bytes=args.max_body_bytes,
        max_decompressed_bytes=args.max_decompressed_bytes,
        body_budget_bytes=args.body_budget_bytes,
        max_response_memory_bytes=args.max_response_memory_bytes,
        head_timeout_seconds=args.head_timeout,
        body_timeout_seconds=args.body_timeout,
        max_connections=args.max_connections,
        stale_after_seconds=args.stale_after,
        retain_days=args.retain_days,
        retention_interval_seconds=args.retention_interval,
        access_log=args.access_log,
    )


def _serve(args: argparse.Namespace) -> int:
    from trainreport.server._run import serve  # noqa: PLC0415 - needs the server extra
    from trainreport.server._startup import prepare  # noqa: PLC0415

    try:
        config = prepare(
            _server_config(args),
            db=args.db,
            token_file=args.token_file,
            secret_file=args.secret_file,
        )
    except ValueError as exc:  # StartupError included: the message says what to do
        print(f"trainreport serve: {exc}", file=sys.stderr)
        return 2
    return serve(config)


# -- token ------------------------------------------------------------------------------


def _add_token(subparsers: Any) -> None:
    token = subparsers.add_parser(
        "token",
        help="issue a token that reads and writes one job of the reference server",
        description=(
            "Print a job token for JOB_ID, signed with the secret that `trainreport serve "
            "--secret-file` was given. It reads and writes that job only; the server stores "
            "nothing per token (rotate the secret to revoke every token). See docs/server.md."
        ),
    )
    token.add_argument("job_id", metavar="JOB_ID", help="the job the token is for")
    token.add_argument(
        "--secret-file", type=Path, required=True, help="the server's secret (see serve)"
    )
    token.add_argument(
        "--expires-in",
        type=_positive_int,
        metavar="SECONDS",
        help="the token stops working this many seconds from now (default: never)",
    )
    token.set_defaults(handler=_token)


def _token(args: argparse.Namespace) -> int:
    import time  # noqa: PLC0415

    from trainreport._wire._job_tokens import issue_job_token, read_secret_file  # noqa: PLC0415

    try:
        secret = read_secret_file(args.secret_file)
        expires_at = None if args.expires_in is None else int(time.time()) + args.expires_in
        print(issue_job_token(secret, args.job_id, expires_at=expires_at))
    except (OSError, ValueError) as exc:
        print(f"trainreport token: {exc}", file=sys.stderr)
        return 2
    return 0


# -- demo -------------------------------------------------------------------------------


def _add_demo(subparsers: Any) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="train a small model on real data and report it to the embedded server",
        description=(
            "Train a numpy MLP on scikit-learn's handwritten digits (no download), reporting "
            "every step through trainreport to the reference server started in-process "
            "(or to --url), then print a summary. Needs the 'demo' extra."
        ),
    )
    demo.add_argument(
        "--steps",
        type=_positive_int,
        default=300,
        help="optimizer steps over 3 epochs (default: 300)",
    )
    demo.add_argument("--job-id", help="job id (default: demo-<local time>)")
    demo.add_argument("--url", help="report to this job-status service instead of starting one")
    token = demo.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file", type=Path, help="read the bearer token for --url from this file"
    )
    token.add_argument(
        "--token",
        help=(
            "bearer token for --url (default: $TRAINREPORT_TOKEN, else the file named by "
            "$TRAINREPORT_TOKEN_FILE; visible in the process list: prefer --token-file)"
        ),
    )
    demo.add_argument(
        "--interval",
        type=float,
        default=0.2,
        help=(
            "seconds between regular sends (min_report_interval_seconds); shorter than the "
            "library's 10 s because the demo trains for a few seconds (default: 0.2)"
        ),
    )
    demo.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("trainreport-runs"),
        help="database and checkpoints go here (default: ./trainreport-runs)",
    )
    demo.add_argument(
        "--keep-serving",
        action="store_true",
        help=(
            "keep the embedded server and its chart page running after training, until "
            "Ctrl-C (without it, the server stops when the demo ends)"
        ),
    )
    demo.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    try:
        from trainreport.cli._demo import (  # noqa: PLC0415 - needs the demo extra
            check_service,
            default_job_id,
            run_demo,
        )
    except ImportError as exc:
        print(
            f"trainreport demo needs the 'demo' extra ({exc}): pip install 'trainreport[demo]'",
            file=sys.stderr,
        )
        return 1
    try:
        args.token = _show_token(args)
    except OSError as exc:
        print(f"trainreport demo: cannot read the token file: {exc}", file=sys.stderr)
        return 2
    args.job_id = args.job_id or default_job_id()
    if args.url is not None:
        args.url = _base_url("demo", args.url)
        try:  # before training: a wrong URL or token must not cost a whole run
            check_service(args.url, args.job_id, args.token)
        except ClientError as exc:
            explained = _explain_client_error(exc, args.url, args.token)
            print(f"trainreport demo: {explained}", file=sys.stderr)
            return 2
    try:
        result = run_demo(args)
    except ClientError as exc:  # reading the task back after training
        url = exc.url if args.url is None else args.url
        print(f"trainreport demo: {_explain_client_error(exc, url, args.token)}", file=sys.stderr)
        return 1
    return 0 if result.task.get("status") == "completed" and result.closed_cleanly else 1


# -- show -------------------------------------------------------------------------------


def _add_show(subparsers: Any) -> None:
    show = subparsers.add_parser(
        "show",
        help="print a stored task (status, progress, series, hyperparameters) or list the jobs",
        description=(
            "Print a task stored by a job-status service (--url URL JOB_ID) or by a FileSink "
            "(--file: a run log, or the task record written at close). --url URL without a "
            "job id lists the jobs of the reference server. Without --url or --file, the "
            f"service is $TRAINREPORT_URL, else the local reference server ({_LOCAL_URL}). "
            "A token comes from --token-file, --token, $TRAINREPORT_TOKEN or "
            "$TRAINREPORT_TOKEN_FILE, in that order."
        ),
    )
    source = show.add_mutually_exclusive_group()
    source.add_argument(
        "--url",
        help=f"base URL of the job-status service (default: $TRAINREPORT_URL or {_LOCAL_URL})",
    )
    source.add_argument(
        "--file",
        type=Path,
        help="a run log (trainreport-runs/<run id>.log) or a task record (.json) of a FileSink",
    )
    show.add_argument("job_id", nargs="?", help="the job (with --url; without it: list the jobs)")
    show.add_argument("--task", default="train", help="the task id (default: train)")
    show.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help=(
            "watch the task: read it again and print a fresh summary every --interval "
            "seconds until it is completed, failed or cancelled (Ctrl-C stops)"
        ),
    )
    show.add_argument(
        "--interval",
        type=_positive_seconds,
        default=DEFAULT_FOLLOW_INTERVAL_SECONDS,
        metavar="SECONDS",
        help=(
            "seconds between two reads with --follow "
            f"(default: {DEFAULT_FOLLOW_INTERVAL_SECONDS:g})"
        ),
    )
    token = show.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file", type=Path, help="read the bearer token from this file (for --url)"
    )
    token.add_argument(
        "--token",
        help="bearer token (visible in the process list: prefer --token-file)",
    )
    show.set_defaults(handler=_show)


#: Where ``trainreport serve`` listens by default: ``show``'s service when none is named.
_LOCAL_URL = "http://127.0.0.1:8321"


def _show_token(args: argparse.Namespace) -> str | None:
    """The bearer token for ``show --url`` and ``sync``: flags first, then the environment."""
    if args.token_file is not None:
        return str(args.token_file.read_text(encoding="utf-8").strip()) or None
    if args.token:
        return str(args.token)
    settings = _environment.read_http_settings()
    if settings.token:
        return settings.token
    if settings.token_file:
        return Path(settings.token_file).read_text(encoding="utf-8").strip() or None
    return None


def _show(args: argparse.Namespace) -> int:
    from trainreport import client  # noqa: PLC0415
    from trainreport.cli._summary import describe_jobs, describe_task  # noqa: PLC0415

    if args.file is not None:
        if args.follow:
            return _follow(lambda: _file_task(args.file), interval_seconds=args.interval)
        return _show_file(args.file)
    url = _base_url("show", args.url or _environment.read_http_settings().url or _LOCAL_URL)
    try:
        token = _show_token(args)
    except OSError as exc:
        print(f"trainreport show: cannot read the token file: {exc}", file=sys.stderr)
        return 2
    if args.follow:
        if not args.job_id:
            print(
                "trainreport show: --follow needs a JOB_ID (or --file): it watches one task",
                file=sys.stderr,
            )
            return 2
        return _follow(
            lambda: _url_task(url, args.job_id, args.task, token), interval_seconds=args.interval
        )
    try:
        if not args.job_id:
            print(describe_jobs(client.list_jobs(url, token)))
            print(
                f"\nshow a task: trainreport show --url {_shown_url(url)} JOB_ID [--task TASK_ID]"
            )
            return 0
        task = _read_shown_task(url, args.job_id, args.task, token)
    except ClientError as exc:
        explained = _explain_client_error(exc, url, token, url_from="--url or $TRAINREPORT_URL")
        print(f"trainreport show: {explained}", file=sys.stderr)
        return 1
    print(describe_task(task))
    return 0


def _read_shown_task(url: str, job_id: str, task_id: str, token: str | None) -> dict[str, Any]:
    """``client.read_task`` with each series kept as columns (no dict per point) for ``show``.

    Raises:
        ClientError: as ``client.read_task``.
    """
    from trainreport import client  # noqa: PLC0415

    return client.read_task(url, job_id, task_id, token, columns=True)


#: What clears a terminal and puts the cursor at its top left (ANSI: home, erase display).
_CLEAR_SCREEN = "\x1b[H\x1b[2J"


def _follow(
    read: Callable[[], Mapping[str, Any] | None],
    *,
    interval_seconds: float,
    sleep: Callable[[float], object] = time.sleep,
    out: TextIO | None = None,
) -> int:
    """``show --follow``: print a fresh summary of ``read()`` every ``interval_seconds``.

    Stops when the task is terminal (completed, failed, cancelled) or on Ctrl-C.
    On a terminal the screen is cleared before each summary; otherwise the
    summaries follow one another (a log of the run's progress).

    Args:
        read: reads the task once; ``None`` when the read failed, having printed why.
        interval_seconds: the wait between two reads, in seconds.
        sleep: how to wait (``time.sleep``; tests pass a recorder).
        out: where summaries go (default: ``sys.stdout``).

    Returns:
        0 once the task is terminal or on Ctrl-C; 1 when the first read fails
        (a later failed read is retried: a server restarting, a log being written).
        Never raises ``KeyboardInterrupt``.
    """
    from trainreport._record._machines import TERMINAL_STATUSES  # noqa: PLC0415
    from trainreport.cli._summary import describe_task  # noqa: PLC0415

    stream = sys.stdout if out is None else out
    clear = stream.isatty()
    first = True
    try:
        while True:
            task = read()
            if task is None and first:
                return 1
            if task is not None:
                shown = describe_task(task)
                stream.write(f"{_CLEAR_SCREEN if clear else ''}{shown}\n")
                status = task.get("status")
                if isinstance(status, str) and status in TERMINAL_STATUSES:
                    stream.flush()
                    return 0
                stream.write(
                    f"\n(read {time.strftime('%H:%M:%S')}; again every {interval_seconds:g} s "
                    "until the task ends; Ctrl-C stops)\n"
                )
                stream.flush()
            first = False
            sleep(interval_seconds)
    except KeyboardInterrupt:
        return 0


def _url_task(url: str, job_id: str, task_id: str, token: str | None) -> dict[str, Any] | None:
    """One read of ``show --url --follow``; ``None`` after printing why it failed."""

    try:
        return _read_shown_task(url, job_id, task_id, token)
    except ClientError as exc:
        explained = _explain_client_error(exc, url, token, url_from="--url or $TRAINREPORT_URL")
        print(f"trainreport show: {explained}", file=sys.stderr, flush=True)
        return None


def _file_task(path: Path) -> Mapping[str, Any] | None:
    """One read of ``show --file --follow``; ``None`` after printing why it failed."""
    run = _load("show", path)
    return None if run is None else run.shown_task()


@contextlib.contextmanager
def _quiet_library_log() -> Iterator[None]:
    """Keep trainreport's own log events (e.g. ``run_log_damaged``) off the terminal.

    The command says the same in a sentence of its own; without a handler, Python
    would print the raw event to stderr as well.
    """
    logger = logging.getLogger("trainreport")
    handler = logging.NullHandler()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _load(command: str, path: Path) -> RunFile | None:
    """Read a run log or task record for ``command``; prints why not and returns None."""
    from trainreport._runlog._runfile import load_run_file  # noqa: PLC0415
    from trainreport.exceptions import RunLogError  # noqa: PLC0415

    try:
        with _quiet_library_log():
            run = load_run_file(path)
    except OSError as exc:
        print(f"trainreport {command}: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return None
    except RunLogError as exc:
        print(f"trainreport {command}: {exc}", file=sys.stderr)
        return None
    if run.damage is not None:
        print(
            f"trainreport {command}: {path} is damaged: read its {run.records} intact records; "
            f"{run.lost}",
            file=sys.stderr,
        )
    return run


def _show_file(path: Path) -> int:
    from trainreport._runlog._runfile import log_and_record_paths  # noqa: PLC0415
    from trainreport.cli._summary import describe_task  # noqa: PLC0415

    run = _load("show", path)
    if run is None:
        return 1
    print(describe_task(run.shown_task()))  # the columns, never a dict per point
    if run.trimmed:
        print(
            f"note: a trimmed journal: {len(run.trimmed)} series start past their first point "
            "(the service holds the rest)"
        )
    log = log_and_record_paths(path)[0]
    if not run.is_log and log.exists() and log.stat().st_mtime > path.stat().st_mtime:
        print(
            f"note: {log} is newer than this record (a run still going, or one that did not "
            f"close): trainreport show --file {log}",
            file=sys.stderr,
        )
    return 0


def _shown_url(url: str) -> str:
    """``url`` as shown to the user: no userinfo, query or fragment. Never raises."""
    from trainreport.sinks._http._transport import shown_url  # noqa: PLC0415

    return shown_url(url)


def _explain_client_error(
    exc: ClientError, url: str, token: str | None, *, url_from: str = "--url"
) -> str:
    """One line on what a failed read of ``url`` means and what to do (never the token).

    The one wording for ``show`` and ``demo`` alike; ``url_from`` names where the
    URL came from. Never raises.
    """
    from trainreport._wire._protocol import base_url_problem  # noqa: PLC0415

    problem = base_url_problem(url)
    if problem is not None:
        return f"{_shown_url(url)} is {problem}"
    if isinstance(exc, UnreachableError):
        from trainreport.client import _unreachable_reason  # noqa: PLC0415

        return (
            f"cannot reach {exc.url}: {_unreachable_reason(exc.__cause__)}; is "
            f"`trainreport serve` running there? check {url_from}"
        )
    if isinstance(exc, UnauthorizedError):
        return _explain_unauthorized(exc, token)
    if isinstance(exc, NotFoundError):
        if exc.job_id is None:
            return f"{exc}; is {_shown_url(url)} a trainreport job-status service?"
        return _explain_not_found(exc, url, token)
    return str(exc)


def _base_url(command: str, url: str) -> str:
    """``url`` without a trailing ``/v1`` (the rule ``HttpSink`` follows), saying so once."""
    from trainreport._wire._protocol import split_api_prefix  # noqa: PLC0415

    root, removed = split_api_prefix(url)
    if removed:
        print(
            f"trainreport {command}: using {_shown_url(root)}, the base URL without /v1 "
            "(API paths are added to it)",
            file=sys.stderr,
        )
    return root


def _explain_unauthorized(exc: ClientError, token: str | None) -> str:
    """What a refused ``show --url`` means and what to do about it (never the token)."""
    hint = _environment.auth_hint(exc.status, token_sent=token is not None, command_line=True)
    if exc.status == 403:
        return f"{exc}; {hint}"
    if token is None:
        return f"{exc.url} requires a token: {hint}"
    return f"{exc.url} refused the token (401): {hint}"


def _explain_not_found(exc: ClientError, base_url: str, token: str | None) -> str:
    """A 404 for a task: is the job missing, or only the task? Name both."""
    from trainreport import client  # noqa: PLC0415

    url, job_id, task_id = exc.url, str(exc.job_id), str(exc.task_id)
    try:
        job = client.read_job(base_url, job_id, token)
    except ClientError as inner:
        if inner.status == 404:
            return f"no job {job_id!r} at {url}; `trainreport show --url {url}` lists the jobs"
        return f"no task {task_id!r} in job {job_id!r} at {url} (404)"
    tasks = [str(t.get("task_id")) for t in job.get("tasks") or [] if isinstance(t, dict)]
    listed = f"its tasks: {', '.join(tasks)} (pick one with --task)" if tasks else "it has no tasks"
    return f"job {job_id!r} has no task {task_id!r} at {url}; {listed}"


# -- sync -------------------------------------------------------------------------------


def _add_sync(subparsers: Any) -> None:
    sync = subparsers.add_parser(
        "sync",
        help="upload a run log (or a task record) to a job-status service, without training",
        description=(
            "Upload a FileSink's run log (or task record) to a job-status service: the "
            "offline-node workflow (record on a node without network, upload later). Sends "
            "each series' points past what the service holds, nothing twice: running it again "
            "sends nothing new. A series the service holds more of, or holds different points "
            "of, is left as stored; the log's status and fields are sent unless the service's "
            "are as new or newer (updated_at). Do not sync a run that is still reporting to the "
            "same task: with the reference server's extension, sync takes over the task's "
            "writer. A journal whose writer was superseded, or one older than the task's last "
            "writer, is refused (exit status 2): it would replace a newer attempt's points and "
            "status; --force uploads it anyway. A token comes from --token-file, --token, "
            "$TRAINREPORT_TOKEN or $TRAINREPORT_TOKEN_FILE, in that order; "
            "$TRAINREPORT_CA_CERTS verifies TLS."
        ),
    )
    sync.add_argument("path", type=Path, help="the run log (.log) or task record (.json)")
    sync.add_argument(
        "--url", help="base URL of the job-status service (default: $TRAINREPORT_URL)"
    )
    sync.add_argument(
        "--job", help="the job id (default: the one the log recorded, else the file's name)"
    )
    sync.add_argument("--task", help="the task id (default: the one the log recorded, else train)")
    token = sync.add_mutually_exclusive_group()
    token.add_argument("--token-file", type=Path, help="read the bearer token from this file")
    token.add_argument(
        "--token", help="bearer token (visible in the process list: prefer --token-file)"
    )
    sync.add_argument(
        "--full-state",
        action="store_true",
        help=(
            "send full-state PATCH bodies (the baseline) even when the service offers the "
            "series-suffix extension"
        ),
    )
    sync.add_argument(
        "--force",
        action="store_true",
        help=(
            "upload a journal even when a later attempt or writer owns the task (its points "
            "and status replace the newer writer's)"
        ),
    )
    sync.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=60.0,
        help="seconds each of the open and the send may take (default: 60)",
    )
    sync.set_defaults(handler=_run_sync)


def _run_sync(args: argparse.Namespace) -> int:
    from trainreport._runlog._journal import mark_sent_under  # noqa: PLC0415
    from trainreport._runlog._plan import StaleJournalError, SyncError  # noqa: PLC0415
    from trainreport._runlog._runfile import LOG_SUFFIX, RECORD_SUFFIX  # noqa: PLC0415
    from trainreport.cli._sync import describe_sync, sync  # noqa: PLC0415
    from trainreport.exceptions import ConfigError  # noqa: PLC0415
    from trainreport.sinks import HttpSink  # noqa: PLC0415

    run = _load("sync", args.path)
    if run is None:
        return 1
    name = args.path.name
    if args.path.suffix in (LOG_SUFFIX, RECORD_SUFFIX):
        name = args.path.stem
    job = args.job or run.run.get("job_id") or name
    task = args.task or run.run.get("task_id") or "train"
    try:
        token = _show_token(args)
    except OSError as exc:
        print(f"trainreport sync: cannot read the token file: {exc}", file=sys.stderr)
        return 2
    given = args.url or _environment.read_http_settings().url
    if not given:
        print("trainreport sync: give --url URL (or set TRAINREPORT_URL)", file=sys.stderr)
        return 2
    url = _base_url("sync", given)
    try:
        sink = HttpSink(
            url,
            job,
            task,
            token,
            ca_certs=_environment.read_http_settings().ca_certs,
            connect_timeout_seconds=min(args.timeout, 10.0),
            read_timeout_seconds=args.timeout,
            use_extension=not args.full_state,
        )
    except ConfigError as exc:
        print(f"trainreport sync: {'; '.join(exc.problems)}", file=sys.stderr)
        return 2
    print(f"trainreport sync: {args.path} -> {sink.base_url} job {job!r} task {task!r}")
    try:
        with _quiet_library_log():
            report = sync(
                run.state,
                sink,
                timeout_seconds=args.timeout,
                run=run.run,
                force=args.force,
                sent_under=lambda generation: mark_sent_under(args.path, generation),
            )
    except StaleJournalError as exc:
        print(
            f"trainreport sync: refused: {exc}. Nothing was sent; the journal is kept. "
            "Run with --force to upload it over the newer writer's.",
            file=sys.stderr,
        )
        return 2
    except SyncError as exc:
        hint = _environment.auth_hint(
            exc.status_code, token_sent=token is not None, command_line=True
        )
        print(f"trainreport sync: {exc}{f'; {hint}' if hint else ''}", file=sys.stderr)
        return 1
    print(describe_sync(report))
    return 0


_COMMANDS: tuple[Callable[[Any], None], ...] = (
    _add_serve,
    _add_token,
    _add_demo,
    _add_show,
    _add_sync,
)


if __name__ == "__main__":
    raise SystemExit(main())
