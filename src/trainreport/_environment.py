"""The environment a job system hands a pod, read in one place.

Every ``TRAINREPORT_*`` variable the library reads, and Kubeflow Trainer's
``KUBEFLOW_TRAINER_SERVER_*`` ones, is named here, but the reference server's
two (``TRAINREPORT_SERVER_TOKEN``, ``TRAINREPORT_DB``): the server reads them
and imports only the wire layer, so they are named in ``_wire/_protocol.py``,
and :data:`KNOWN_VARIABLES` lists them from there. The destination settings
are frozen values parsed by the converter that parses ``ReportingConfig``
(:data:`trainreport._reporting_config.CONVERTER`), by its runtime side's rule
(:func:`trainreport._reporting_config.lenient`): the training process never fails on its
environment. Problems are that rule's log events (docs/configuration.md):

- ``trainreport.config_field_invalid`` (``field``, ``variable``, ``problem``):
  a value that cannot be used; the field keeps its default.
- ``trainreport.config_field_unknown`` (``field``, ``variable``,
  ``did_you_mean``): a ``TRAINREPORT_*`` variable nothing reads, such as
  ``TRAINREPORT_JOBID`` (did you mean ``TRAINREPORT_JOB_ID``), once per variable.

Nothing here builds a sink: ``trainreport.sinks`` turns these settings into
``HttpSink``, ``KubeflowSink`` or the default ``FileSink``.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from typing import Any, Final, TypeVar

import attrs
from cattrs.gen import make_dict_structure_fn, override

from trainreport._logging import get_logger
from trainreport._record._selection import check_globs
from trainreport._reporting_config import (
    CONVERTER,
    ENV_PREFIX,
    REPLACED_VARIABLES,
    ReportingConfig,
    env_variable,
    lenient,
)
from trainreport._wire._attempt import ATTEMPT_VARIABLES
from trainreport._wire._protocol import (
    SERVER_DB_VARIABLE,
    SERVER_TOKEN_VARIABLE,
    base_url_problem,
)

__all__ = [
    "CA_CERTS",
    "CONNECT_TIMEOUT",
    "DISABLED",
    "JOB_ID",
    "JOURNAL",
    "KNOWN_VARIABLES",
    "KUBEFLOW_CA_CERT",
    "KUBEFLOW_METRICS",
    "KUBEFLOW_TOKEN",
    "KUBEFLOW_URL",
    "MAX_BODY_BYTES",
    "READ_TIMEOUT",
    "TASK_ID",
    "TOKEN",
    "TOKEN_FILE",
    "URL",
    "DestinationSettings",
    "HttpDestination",
    "KubeflowDestination",
    "auth_hint",
    "journal_off",
    "read_destinations",
    "read_http_destination",
    "read_http_settings",
    "read_kubeflow_destination",
    "unknown_variables",
    "warn_unknown_variables",
]

_log = get_logger()

# --- the variables ---------------------------------------------------------------------

#: Base URL of the job-status service; set, the reporter sends there over HTTP.
URL: Final = "TRAINREPORT_URL"
#: The job's id (the run's name, for the default file too).
JOB_ID: Final = "TRAINREPORT_JOB_ID"
#: The task's id within the job (default ``train``).
TASK_ID: Final = "TRAINREPORT_TASK_ID"
#: A bearer token (never logged).
TOKEN: Final = "TRAINREPORT_TOKEN"  # noqa: S105 - a variable name
#: A file holding the bearer token, re-read when it changes (rotated secrets).
TOKEN_FILE: Final = "TRAINREPORT_TOKEN_FILE"  # noqa: S105 - a variable name
#: A CA bundle (PEM file) that verifies the service's TLS certificate.
CA_CERTS: Final = "TRAINREPORT_CA_CERTS"
#: HTTP connect timeout, seconds.
CONNECT_TIMEOUT: Final = "TRAINREPORT_CONNECT_TIMEOUT_SECONDS"
#: HTTP read timeout, seconds.
READ_TIMEOUT: Final = "TRAINREPORT_READ_TIMEOUT_SECONDS"
#: The largest full-state body the job API takes, bytes (``HttpSink(max_body_bytes=...)``).
MAX_BODY_BYTES: Final = "TRAINREPORT_MAX_BODY_BYTES"
#: ``1``/``true``/``yes``/``on``: every reporter does nothing.
DISABLED: Final = "TRAINREPORT_DISABLED"
#: ``0``/``false``/``no``/``off``: no reporter of the process keeps a journal, whatever
#: its config says (also the ``journal`` field's variable).
JOURNAL: Final = "TRAINREPORT_JOURNAL"
#: Kubeflow Trainer's TrainJob status endpoint (the full URL), injected into every container.
KUBEFLOW_URL: Final = "KUBEFLOW_TRAINER_SERVER_URL"
#: Path of the CA certificate that signs the Kubeflow endpoint's TLS certificate.
KUBEFLOW_CA_CERT: Final = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
#: Path of the projected service-account token (rotated in place; about an hour long).
KUBEFLOW_TOKEN: Final = "KUBEFLOW_TRAINER_SERVER_TOKEN"  # noqa: S105 - a variable name
#: Comma-separated globs of the metrics ``KubeflowSink`` posts first (its ``metrics``).
KUBEFLOW_METRICS: Final = "TRAINREPORT_KUBEFLOW_METRICS"

#: Every ``TRAINREPORT_*`` variable something reads: the destination's, the
#: config fields', the attempt's, the server's, and the replaced ones (which
#: ``ReportingConfig.from_env`` names the replacement of).
KNOWN_VARIABLES: Final[frozenset[str]] = frozenset(
    {URL, JOB_ID, TASK_ID, TOKEN, TOKEN_FILE, CA_CERTS, CONNECT_TIMEOUT, READ_TIMEOUT}
    | {MAX_BODY_BYTES}
    | {DISABLED, KUBEFLOW_METRICS, SERVER_TOKEN_VARIABLE, SERVER_DB_VARIABLE}
    | {env_variable(field.name) for field in attrs.fields(ReportingConfig)}
    | {name for name in ATTEMPT_VARIABLES if name.startswith(ENV_PREFIX)}
    | set(REPLACED_VARIABLES)
)

# --- the settings ----------------------------------------------------------------------


def _positive_seconds(value: object, _type: object) -> float:
    """A timeout from its text: a finite number > 0. Raises ValueError."""
    try:
        seconds = float(str(value).strip())
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError("expected a positive number of seconds")
    return seconds


def _positive_bytes(value: object, _type: object) -> int:
    """A size from its text: a whole number of bytes > 0. Raises ValueError."""
    text = str(value).strip()
    if not (text.isdecimal() and int(text) > 0):
        raise ValueError("expected a positive whole number of bytes")
    return int(text)


def _text(value: object, _type: object) -> str:
    return str(value).strip()


def _optional_text(value: object, _type: object) -> str | None:
    return str(value).strip() or None


def _globs(value: object, _type: object) -> tuple[str, ...]:
    """Comma-separated globs (blanks dropped). Raises ValueError on an unusable entry."""
    entries = [entry.strip() for entry in str(value).split(",")]
    globs, problems = check_globs([e for e in entries if e], field="metrics")
    if problems:
        raise ValueError("; ".join(problems))
    return globs


@attrs.frozen
class HttpDestination:
    """Where ``HttpSink.from_env`` sends: what ``TRAINREPORT_*`` says about the service.

    Args:
        url: the service's base URL (``TRAINREPORT_URL``; ``""`` when unset).
        job_id: ``TRAINREPORT_JOB_ID``, or ``None`` when unset (a fresh run id is used).
        task_id: ``TRAINREPORT_TASK_ID`` (default ``"train"``).
        token: ``TRAINREPORT_TOKEN``; never in the repr.
        token_file: ``TRAINREPORT_TOKEN_FILE`` (used only without ``token``).
        ca_certs: ``TRAINREPORT_CA_CERTS``, a PEM bundle path.
        connect_timeout_seconds: ``TRAINREPORT_CONNECT_TIMEOUT_SECONDS``, seconds > 0.
        read_timeout_seconds: ``TRAINREPORT_READ_TIMEOUT_SECONDS``, seconds > 0.
        max_body_bytes: ``TRAINREPORT_MAX_BODY_BYTES``, bytes > 0, or ``None``
            (``HttpSink(max_body_bytes=...)``).
    """

    url: str = ""
    job_id: str | None = None
    task_id: str = "train"
    token: str | None = attrs.field(default=None, repr=False)
    token_file: str | None = None
    ca_certs: str | None = None
    connect_timeout_seconds: float = 5.0
    read_timeout_seconds: float = 10.0
    max_body_bytes: int | None = None


@attrs.frozen
class KubeflowDestination:
    """Kubeflow Trainer's TrainJob status endpoint, as its plugin injects it.

    Args:
        url: ``KUBEFLOW_TRAINER_SERVER_URL`` (the full status URL; ``""`` when unset).
        token_file: ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (a path).
        ca_certs: ``KUBEFLOW_TRAINER_SERVER_CA_CERT`` (a path).
        metrics: ``TRAINREPORT_KUBEFLOW_METRICS``, the globs of the metrics
            posted first (``KubeflowSink(metrics=...)``).
    """

    url: str = ""
    token_file: str | None = None
    ca_certs: str | None = None
    metrics: tuple[str, ...] = ()


@attrs.frozen
class DestinationSettings:
    """Every destination the environment names (each ``None`` when not configured).

    Args:
        http: the job-status service of ``TRAINREPORT_URL``.
        kubeflow: the TrainJob status endpoint of ``KUBEFLOW_TRAINER_SERVER_URL``.
        job_id: ``TRAINREPORT_JOB_ID`` (``None`` when unset), also the default file's name.
        task_id: ``TRAINREPORT_TASK_ID`` (default ``"train"``).
    """

    http: HttpDestination | None
    kubeflow: KubeflowDestination | None
    job_id: str | None = None
    task_id: str = "train"


#: Each settings class's field -> the variable it is read from.
_HTTP_VARIABLES: Final[Mapping[str, str]] = {
    "url": URL,
    "job_id": JOB_ID,
    "task_id": TASK_ID,
    "token": TOKEN,
    "token_file": TOKEN_FILE,
    "ca_certs": CA_CERTS,
    "connect_timeout_seconds": CONNECT_TIMEOUT,
    "read_timeout_seconds": READ_TIMEOUT,
    "max_body_bytes": MAX_BODY_BYTES,
}
_KUBEFLOW_VARIABLES: Final[Mapping[str, str]] = {
    "url": KUBEFLOW_URL,
    "token_file": KUBEFLOW_TOKEN,
    "ca_certs": KUBEFLOW_CA_CERT,
    "metrics": KUBEFLOW_METRICS,
}


def _register(cls: type[Any]) -> None:
    """Teach the shared converter one settings class: texts stripped, seconds checked."""
    hooks: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.type in ("float", float):
            hooks[field.name] = override(struct_hook=_positive_seconds)
        elif field.type == "int | None":
            hooks[field.name] = override(struct_hook=_positive_bytes)
        elif field.type in ("str", str):
            hooks[field.name] = override(struct_hook=_text)
        elif field.type == "tuple[str, ...]":
            hooks[field.name] = override(struct_hook=_globs)
        else:
            hooks[field.name] = override(struct_hook=_optional_text)
    CONVERTER.register_structure_hook(cls, make_dict_structure_fn(cls, CONVERTER, **hooks))


_register(HttpDestination)
_register(KubeflowDestination)

_T = TypeVar("_T")


def _structure(cls: type[_T], variables: Mapping[str, str], env: Mapping[str, str]) -> _T:
    """Parse the set, non-blank variables into ``cls``; a bad field keeps its default (logged)."""
    raw = {
        field: env[variable]
        for field, variable in variables.items()
        if isinstance(env.get(variable), str) and env[variable].strip()
    }
    return lenient(CONVERTER.structure, cls, raw, cls(), variables)


def read_http_settings(environ: Mapping[str, str] | None = None) -> HttpDestination:
    """The ``TRAINREPORT_*`` HTTP settings, with or without a URL (``url`` is then ``""``).

    For tools that take the URL elsewhere (``trainreport show --url``, ``sync``)
    but the token, token file and CA bundle from the environment. A bad timeout
    keeps its default (logged). Never raises.
    """
    env = os.environ if environ is None else environ
    return _structure(HttpDestination, _HTTP_VARIABLES, env)


def read_http_destination(environ: Mapping[str, str] | None = None) -> HttpDestination | None:
    """The job-status service the environment names, or ``None`` without ``TRAINREPORT_URL``.

    A URL that is not ``http://`` or ``https://`` is kept (sends to it will be
    rejected) and logged; a bad timeout keeps its default (logged). Never raises.
    """
    env = os.environ if environ is None else environ
    if not str(env.get(URL, "")).strip():
        return None
    destination = _structure(HttpDestination, _HTTP_VARIABLES, env)
    problem = base_url_problem(destination.url)
    if problem is not None:
        _log.warning(
            "trainreport.config_field_invalid",
            field="url",
            variable=URL,
            problem=f"{problem}; sends will be rejected",
        )
    return destination


def read_kubeflow_destination(
    environ: Mapping[str, str] | None = None,
) -> KubeflowDestination | None:
    """The TrainJob status endpoint, or ``None`` without ``KUBEFLOW_TRAINER_SERVER_URL``.

    The URL itself is judged by ``KubeflowSink`` (it must be ``https://``). Never raises.
    """
    env = os.environ if environ is None else environ
    if not str(env.get(KUBEFLOW_URL, "")).strip():
        return None
    return _structure(KubeflowDestination, _KUBEFLOW_VARIABLES, env)


def read_destinations(environ: Mapping[str, str] | None = None) -> DestinationSettings:
    """Every destination the environment names, parsed once (both may be set).

    Also warns once about each misspelled ``TRAINREPORT_*`` variable
    (:func:`warn_unknown_variables`). Never raises.
    """
    env = os.environ if environ is None else environ
    warn_unknown_variables(env)
    return DestinationSettings(
        http=read_http_destination(env),
        kubeflow=read_kubeflow_destination(env),
        job_id=str(env.get(JOB_ID, "")).strip() or None,
        task_id=str(env.get(TASK_ID, "")).strip() or "train",
    )


def journal_off(environ: Mapping[str, str]) -> bool:
    """Whether :data:`JOURNAL` turns the journal off (``0``, ``false``, ``no``, ``off``,
    any case) for every reporter of the process. Never raises."""
    return environ.get(JOURNAL, "").strip().lower() in ("0", "false", "no", "off")


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """Each set ``TRAINREPORT_*`` variable nothing reads, with the closest known one.

    Returns:
        ``(variable, closest)`` pairs in name order; ``closest`` is ``None`` when
        no known variable is near (``difflib``'s ratio of the names without
        ``TRAINREPORT_`` under 0.6). Never raises.
    """
    names = sorted(
        name
        for name in environ
        if isinstance(name, str) and name.startswith(ENV_PREFIX) and name not in KNOWN_VARIABLES
    )
    # compared without the shared prefix, which would make every pair look alike
    known = {name[len(ENV_PREFIX) :]: name for name in KNOWN_VARIABLES}
    pairs = []
    for name in names:
        close = difflib.get_close_matches(name[len(ENV_PREFIX) :], sorted(known), n=1)
        pairs.append((name, known[close[0]] if close else None))
    return pairs


def warn_unknown_variables(environ: Mapping[str, str]) -> None:
    """Log ``trainreport.config_field_unknown`` once for each unknown ``TRAINREPORT_*`` variable.

    Like an unknown key of ``ReportingConfig.from_mapping``: the variable is
    ignored, and the event names the closest valid one (``did_you_mean``).
    Never raises.
    """
    for name, closest in unknown_variables(environ):
        _log.warning(
            "trainreport.config_field_unknown",
            field=name[len(ENV_PREFIX) :].lower(),
            variable=name,
            did_you_mean=closest,
        )


def auth_hint(status: int | None, *, token_sent: bool, command_line: bool = False) -> str | None:
    """What to do when the job-status service refuses the credentials (401 or 403).

    The one rule for the reporter's log events (``HttpSink``'s
    :class:`~trainreport.Rejected` ``hint``) and ``trainreport show`` and
    ``sync``: the server's own message speaks to an HTTP client ("send
    'Authorization: Bearer'"); a library user sets a variable, a command-line
    user passes a flag. Never names a token's value. Pure; never raises.

    Args:
        status: the HTTP status of the refusal (``None``: there was none).
        token_sent: credentials went with the request (refused, rather than missing).
        command_line: the hint is for ``trainreport show``/``sync`` (flags), not
            for a training process (variables and ``HttpSink`` arguments).

    Returns:
        one sentence, or ``None`` for any other status.
    """
    if status == 403:
        return (
            "a job token is good for its own job only: use this job's token "
            "(`trainreport token JOB_ID` issues one) or the admin token"
        )
    if status != 401:
        return None
    if command_line:
        if token_sent:
            return f"check the token given by --token-file, --token, {TOKEN} or {TOKEN_FILE}"
        return f"pass --token-file FILE (a file holding the token) or set {TOKEN} (or {TOKEN_FILE})"
    if token_sent:
        return (
            f"the token was refused: check {TOKEN} or {TOKEN_FILE} "
            "(or HttpSink's token= or token_file=)"
        )
    return f"set {TOKEN} or {TOKEN_FILE} (or pass token= or token_file= to HttpSink)"
