"""The job-status protocol's constants and codecs, declared once for client and server.

``docs/protocol.md`` specifies the protocol; this module is its one definition
in code. The client (sinks, payload encoding, naming) and the reference server
(``server/_wire.py``, ``server/_app.py``) both import it, the way
prometheus_client's writer and parser share one ``METRIC_NAME_RE``. The two
*validators* stay separate on purpose: the server checks what arrives with its
own code, so the end-to-end tests still check one side against the other
(:func:`check_name` is the client's check of a series name: the record refuses a
metric name with it, and payload encoding skips a name it refuses). The one
merge rule the server and the local sinks' records share,
:func:`forget_running_only_details`, is defined here for both, and so are the
two variables the reference server reads (:data:`SERVER_TOKEN_VARIABLE`,
:data:`SERVER_DB_VARIABLE`), which the client's environment reader must know
too, so that it never takes them for misspellings.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import enum
import re
import sys
import urllib.parse
from array import array
from base64 import b64decode
from binascii import b2a_base64
from collections.abc import MutableMapping
from typing import Any, Final

__all__ = [
    "API_PREFIX",
    "BASE_URL_PROBLEM",
    "CAPABILITIES_PATH",
    "COLUMN_TYPECODES",
    "ENCODING_GZIP",
    "EPOCHS_TYPECODE",
    "ERROR_SERIES_GAP",
    "ERROR_STALE_ATTEMPT",
    "ERROR_STALE_WRITER",
    "EXTENSION_SERIES_SUFFIX",
    "EXTENSION_SERIES_TIMES",
    "ID_PATTERN",
    "JOBS_PATH",
    "JOB_PATH_TEMPLATE",
    "MAX_ID_CHARS",
    "MAX_SERIES_NAME_CHARS",
    "PAGE_PATH_TEMPLATE",
    "RUNNING_ONLY_DETAILS",
    "SERVER_DB_VARIABLE",
    "SERVER_TOKEN_VARIABLE",
    "STEPS_TYPECODE",
    "StrEnum",
    "TASK_PATH_TEMPLATE",
    "TASK_STATUSES",
    "TERMINAL_STATUSES",
    "TIMES_TYPECODE",
    "TaskStatus",
    "UPDATES_PATH",
    "VALUES_TYPECODE",
    "WRITERS_PATH",
    "base_url_problem",
    "check_name",
    "decode_column",
    "encode_column",
    "forget_running_only_details",
    "new_columns",
    "split_api_prefix",
    "task_path",
]

# --- discovery and paths -----------------------------------------------------------------

#: The server's extension that takes series as idempotent suffixes (``docs/protocol.md``).
EXTENSION_SERIES_SUFFIX: Final[str] = "series-suffix-v1"
#: The server stores each point's wall-clock time: a series suffix may carry a ``times``
#: column and a baseline point a ``"time"`` (``docs/protocol.md``). A client sends them
#: only to a server that lists this extension, so an older server never sees them.
EXTENSION_SERIES_TIMES: Final[str] = "series-times-v1"
#: The request ``Content-Encoding`` a server may list under ``encodings``.
ENCODING_GZIP: Final[str] = "gzip"
#: The ``error`` codes of a 409 that a client tells apart (``docs/protocol.md``, "Errors"):
#: a suffix starts beyond its series' stored length (resend from ``series_lengths``) ...
ERROR_SERIES_GAP: Final[str] = "series_gap"
#: ... the update's writer generation is not the task's current one (a later writer
#: opened the task: stop writing) ...
ERROR_STALE_WRITER: Final[str] = "stale_writer"
#: ... or a writer claimed the task with an older attempt than the current writer's.
ERROR_STALE_ATTEMPT: Final[str] = "stale_attempt"
#: Every API path starts with it; a base URL never ends with it (:func:`split_api_prefix`).
API_PREFIX: Final[str] = "/v1"
#: ``GET`` here tells a client the server's ``extensions`` and ``encodings``.
CAPABILITIES_PATH: Final[str] = API_PREFIX + "/capabilities"
#: The jobs collection (``GET``: the reference server's job list).
JOBS_PATH: Final[str] = API_PREFIX + "/jobs"
#: One job (``GET``: the job and its tasks on the reference server).
JOB_PATH_TEMPLATE: Final[str] = JOBS_PATH + "/{job_id}"
#: The task resource: ``GET`` (read), ``PATCH`` (baseline write).
TASK_PATH_TEMPLATE: Final[str] = JOB_PATH_TEMPLATE + "/tasks/{task_id}"
#: Below the task path: ``POST`` opens a writer (extension).
WRITERS_PATH: Final[str] = "/writers"
#: Below the task path: ``POST`` applies one series-suffix update (extension).
UPDATES_PATH: Final[str] = "/updates"
#: The reference server's chart page of one task (not an API path: a browser opens it).
PAGE_PATH_TEMPLATE: Final[str] = "/jobs/{job_id}/tasks/{task_id}"


def split_api_prefix(base_url: str) -> tuple[str, bool]:
    """A base URL without a trailing ``/v1`` (or ``/v1/``), and whether one was removed.

    The one rule for every client (``HttpSink``, ``trainreport show`` and
    ``sync``): the base URL is the service's root, and API paths, which all
    start with ``/v1``, are appended to it. A URL copied from an API path's
    root (``http://host:8080/v1``) would ask for ``/v1/v1/...`` and get a bare
    404, so the prefix is removed and the caller says so once
    (docs/configuration.md). Trailing slashes go too. Pure; never raises.

    Args:
        base_url: the URL as given.

    Returns:
        ``(url, removed)``: the URL without trailing slashes and ``/v1``.
    """
    url = base_url.rstrip("/")
    _scheme, _sep, rest = url.rpartition("://")
    path = rest.partition("/")[2]  # after the host: "http://v1" has no path
    if ("/" + path).endswith(API_PREFIX):
        return url[: -len(API_PREFIX)].rstrip("/"), True
    return url, False


#: Why a base URL cannot be used: not ``http(s)://host[:port][/prefix]``.
BASE_URL_PROBLEM: Final[str] = (
    "not an http:// or https:// URL with a host: give the scheme, e.g. http://HOST:PORT"
)


def base_url_problem(base_url: str) -> str | None:
    """Why ``base_url`` cannot be a service's base URL (:data:`BASE_URL_PROBLEM`), or ``None``.

    The one rule for every client (``HttpSink``, ``TRAINREPORT_URL``,
    ``trainreport.client`` and the CLI): the scheme is ``http`` or ``https``
    and there is a host (``127.0.0.1:8321`` without its scheme is refused, not
    guessed). Pure; never raises.
    """
    try:
        parts = urllib.parse.urlsplit(base_url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unparsable port or IPv6 literal
        usable = False
    return None if usable else BASE_URL_PROBLEM


def task_path(job_id: str, task_id: str, template: str = TASK_PATH_TEMPLATE) -> str:
    """The task's path: ``template`` with the ids filled in as they are (no quoting).

    Raises:
        KeyError: when ``template`` names a field other than ``job_id``/``task_id``.
    """
    return template.format(job_id=job_id, task_id=task_id)


# --- ids, names, statuses ------------------------------------------------------------------

#: Longest job or task id, in characters.
MAX_ID_CHARS: Final[int] = 128
#: A valid job or task id (match it whole, ``fullmatch``): safe in a URL path and a file name.
ID_PATTERN: Final[re.Pattern[str]] = re.compile(
    rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_CHARS - 1}}}"
)
#: Longest series (metric) name, in characters.
MAX_SERIES_NAME_CHARS: Final[int] = 200
# C0 and C1 control characters, and lone surrogates (they cannot be encoded as UTF-8).
_BAD_CHARACTER: Final[re.Pattern[str]] = re.compile("[\x00-\x1f\x7f-\x9f]|([\ud800-\udfff])")


def check_name(name: object) -> str | None:
    """Say whether ``name`` is usable as a metric (series) name (docs/design.md#metrics).

    A usable name is a ``str`` of 1 to :data:`MAX_SERIES_NAME_CHARS` characters with
    no control characters (C0, DEL, C1) and no lone surrogates (which cannot be
    sent as UTF-8).

    Args:
        name: anything the caller used as a key of its metrics mapping.

    Returns:
        ``None`` when usable, otherwise a short reason: ``"not a string"``,
        ``"empty"``, ``"too long"``, ``"control character"`` or
        ``"surrogate character"``. Never raises.
    """
    try:
        if not isinstance(name, str):
            return "not a string"
        if not name:
            return "empty"
        if len(name) > MAX_SERIES_NAME_CHARS:
            return "too long"
        bad = _BAD_CHARACTER.search(name)
        if bad is None:
            return None
        return "surrogate character" if bad.group(1) else "control character"
    except Exception:  # a hostile str subclass
        return "not a string"


class StrEnum(str, enum.Enum):
    """A ``str`` enum whose ``str()`` and ``format()`` are its value on every Python >= 3.10."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return str(self.value).__format__(format_spec)


class TaskStatus(StrEnum):
    """A task's status, as stored by the job-status service (docs/design.md#lifecycle)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: Every status a task may hold, as the strings on the wire.
TASK_STATUSES: Final[frozenset[str]] = frozenset(s.value for s in TaskStatus)

TERMINAL_STATUSES: Final[frozenset[TaskStatus]] = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
)
"""Statuses that end an attempt (docs/design.md#lifecycle; the task machine,
``_record/_machines.py``, moves a task into them)."""

RUNNING_ONLY_DETAILS: Final[frozenset[str]] = frozenset({"eta_seconds"})
"""``status_details`` keys that mean something only while the task runs (docs/protocol.md).

``eta_seconds`` is the time left of a running task. A write that leaves the task
in a terminal status removes them from the stored record (the reference server,
``FileSink`` and ``MemorySink`` records, ``Reporter.snapshot()``), because a
shallow merge would otherwise keep the last running value beside ``completed``.
"""

_TERMINAL_VALUES: Final[frozenset[str]] = frozenset(s.value for s in TERMINAL_STATUSES)


def forget_running_only_details(status: object, details: MutableMapping[str, Any]) -> None:
    """Remove :data:`RUNNING_ONLY_DETAILS` from ``details`` when ``status`` is terminal.

    The merge rule the reference server and the local sinks' records share
    (docs/protocol.md: a terminal status removes ``eta_seconds``).

    Args:
        status: the task's status after a write (a :class:`TaskStatus` or its
            string value); anything else leaves ``details`` alone.
        details: a stored ``status_details`` mapping, changed in place.

    Never raises.
    """
    if status in _TERMINAL_VALUES:
        for key in RUNNING_ONLY_DETAILS:
            details.pop(key, None)


# --- the reference server's variables ----------------------------------------------------

#: The variable ``trainreport serve`` reads its admin token from when neither
#: ``--token-file`` nor ``--token`` is given (keeps it off ``ps``); ``start_subprocess``
#: hands the token over in it.
SERVER_TOKEN_VARIABLE: Final[str] = "TRAINREPORT_SERVER_TOKEN"  # noqa: S105 - a variable name
#: The variable ``trainreport serve`` reads ``--db`` from when the flag is absent: a SQLite
#: file or a ``postgresql://`` URL (which may hold a password: kept off ``ps``);
#: ``start_subprocess`` hands the database over in it.
SERVER_DB_VARIABLE: Final[str] = "TRAINREPORT_DB"

# --- binary columns (extension) ----------------------------------------------------------

#: ``array`` typecode of a series' steps column: int64.
STEPS_TYPECODE: Final[str] = "q"
#: ``array`` typecode of a series' epochs column: int32.
EPOCHS_TYPECODE: Final[str] = "i"
#: ``array`` typecode of a series' values column: float64 (NaN/±Inf travel as IEEE bits).
VALUES_TYPECODE: Final[str] = "d"
#: ``array`` typecode of a series' optional times column: float64 seconds since the Unix
#: epoch (NaN: the time of that point is unknown, ``null`` once stored).
TIMES_TYPECODE: Final[str] = "d"
#: A series suffix's columns in wire order: ``(key, typecode)``.
COLUMN_TYPECODES: Final[tuple[tuple[str, str], ...]] = (
    ("steps", STEPS_TYPECODE),
    ("epochs", EPOCHS_TYPECODE),
    ("values", VALUES_TYPECODE),
)
_BIG_ENDIAN: Final[bool] = sys.byteorder == "big"


def new_columns() -> tuple[array[int], array[int], array[float]]:
    """Empty ``(steps, epochs, values)`` columns of the wire's typecodes. Never raises."""
    return array(STEPS_TYPECODE), array(EPOCHS_TYPECODE), array(VALUES_TYPECODE)


def encode_column(column: array[Any]) -> str:
    """One column as base64 of its little-endian bytes (``docs/protocol.md``). Never raises.

    Copying bytes costs a few nanoseconds a point where formatting a float as
    decimal text costs hundreds, all of it GIL time taken from training.
    """
    if _BIG_ENDIAN:
        column = array(column.typecode, column)
        column.byteswap()
    # binascii reads the array's buffer: no copy of the column into a bytes object first.
    return b2a_base64(column, newline=False).decode("ascii")


def decode_column(text: str | bytes, typecode: str) -> array[Any]:
    """The column :func:`encode_column` wrote, as an ``array`` of ``typecode``.

    Only the codec: the values are not judged (a server or client validates
    them with its own rules).

    Raises:
        ValueError: ``text`` is not base64 (``binascii.Error``), not ASCII, or
            not a whole number of items.
    """
    raw = b64decode(text.encode("ascii") if isinstance(text, str) else text, validate=True)
    column: array[Any] = array(typecode)
    if len(raw) % column.itemsize:
        raise ValueError(f"expected a multiple of {column.itemsize} bytes")
    column.frombytes(raw)
    if _BIG_ENDIAN:
        column.byteswap()
    return column
