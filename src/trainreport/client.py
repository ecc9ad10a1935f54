"""Read jobs and tasks back from a job-status service: the reference server or a plain job API.

::

    from trainreport import client

    task = client.read_task("http://127.0.0.1:8321", "job-1", "train", token=None)
    task["status"], task["status_details"]["step"]
    frame = client.to_pandas(task)        # columns series, step, epoch, value

    for job in client.list_jobs("http://127.0.0.1:8321"):
        print(job["job_id"], [t["status"] for t in job["tasks"]])

Each call is one ``GET`` (10 s timeout by default, no retries) over urllib3,
with TLS verification on. Failures are :class:`~trainreport.exceptions.ClientError`
subclasses whose message names the URL (userinfo redacted) and the job:
:class:`~trainreport.exceptions.UnreachableError`,
:class:`~trainreport.exceptions.UnauthorizedError`,
:class:`~trainreport.exceptions.NotFoundError`. The shapes returned are those
of ``docs/protocol.md``. For a local run log written by ``FileSink``, read
the file instead.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from array import array
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import urllib3

from trainreport._wire._payloads import NO_EPOCH, ColumnPoints
from trainreport._wire._protocol import (
    CAPABILITIES_PATH,
    JOB_PATH_TEMPLATE,
    JOBS_PATH,
    base_url_problem,
    task_path,
)
from trainreport.exceptions import (
    ClientError,
    NotFoundError,
    UnauthorizedError,
    UnreachableError,
)
from trainreport.sinks._http._read import compact_points, dict_points, read_task_by_series
from trainreport.sinks._http._transport import shown_url as _shown_url
from trainreport.sinks._http._transport import split_userinfo as _split_userinfo
from trainreport.sinks._http._transport import userinfo_problem as _userinfo_problem

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "list_jobs",
    "read_capabilities",
    "read_job",
    "read_task",
    "to_pandas",
]

#: Seconds a read may take (connect and read each) unless the caller says otherwise.
DEFAULT_TIMEOUT_SECONDS = 10.0
_MESSAGE_CHARS = 300


def read_task(
    url: str,
    job_id: str,
    task_id: str,
    token: str | None = None,
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    columns: bool = False,
) -> dict[str, Any]:
    """The stored task with every point (``GET /v1/jobs/{job_id}/tasks/{task_id}``).

    From the reference server the curves are read as columns
    (``?metrics=false``, then ``GET .../series/summary`` and ``GET .../series``
    for groups of about 200,000 points), so a read never holds one JSON
    document of the whole task; from a plain job API (which answers the
    first ``GET`` with every point, or has no ``/series``) it is that one
    ``GET``. The answer is the same either way; of a task still being
    written, each group of series is as of its own read (docs/protocol.md).

    By default each series is a list of point dictionaries, exactly the
    ``GET`` (``json.dumps`` it, append to it): about 280 bytes a point.
    With ``columns=True`` each series read as columns is a
    :class:`~trainreport._wire._payloads.ColumnPoints` instead: three arrays,
    24 bytes a point, that read as that list (indexing, slicing, iteration,
    ``len``, ``==`` a list of points) and that :func:`to_pandas` turns into a
    frame without a dictionary per point. Use it for a long run
    (``trainreport show`` does); ``list(points)`` gives the dictionaries.

    Args:
        url: the service's base URL, e.g. ``http://127.0.0.1:8321`` (a
            ``user:password@`` in it is sent as Basic auth when there is no token).
        job_id: the job.
        task_id: the task, e.g. ``"train"``.
        token: a bearer token (the admin token or the job's token), or ``None``.
        timeout_seconds: the connect and the read timeout, in seconds.
        columns: keep each series read from ``/series`` as columns (see above);
            a plain job API's answer is returned as it came.

    Returns:
        The task in the ``GET`` shape: ``{"status": str, "status_details":
        {..., "metrics": {name: [{"step", "epoch", "value"}, ...]}}}``.

    Raises:
        UnreachableError: the service could not be reached.
        UnauthorizedError: 401 or 403.
        NotFoundError: 404 (no such task, or no such job).
        ClientError: another error status, or an answer that is not a JSON object.
    """
    ids = {"job_id": job_id, "task_id": task_id}

    def get(path: str) -> Any:
        return _get(url, path, token, timeout_seconds, **ids)

    task = read_task_by_series(
        get,
        task_path(_quote(job_id), _quote(task_id)),
        compact_points if columns else dict_points,
    )
    if not isinstance(task, dict):
        raise _error(ClientError, "the answer is not a task object", url, job_id, task_id, 200)
    return task


def read_job(
    url: str,
    job_id: str,
    token: str | None = None,
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """``GET /v1/jobs/{job_id}`` (reference server): the job and a summary of each task.

    Args:
        url: the service's base URL.
        job_id: the job.
        token: a bearer token, or ``None``.
        timeout_seconds: the connect and the read timeout, in seconds.

    Returns:
        ``{"job_id", "created_at", "updated_at", "cancel_requested", "tasks": [...]}``.

    Raises:
        UnreachableError, UnauthorizedError, NotFoundError, ClientError: as
            :func:`read_task`.
    """
    job = _get(
        url, JOB_PATH_TEMPLATE.format(job_id=_quote(job_id)), token, timeout_seconds, job_id=job_id
    )
    if not isinstance(job, dict):
        raise _error(ClientError, "the answer is not a job object", url, job_id, None, 200)
    return job


def read_capabilities(
    url: str, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """``GET /v1/capabilities`` (no token): what the reference server supports.

    Returns:
        ``{"extensions": [...], "encodings": [...], ...}`` (docs/protocol.md).

    Raises:
        UnreachableError, NotFoundError (a plain job API, or a path that is no
            service), ClientError: as :func:`read_task`.
    """
    answer = _get(url, CAPABILITIES_PATH, None, timeout_seconds)
    if not isinstance(answer, dict):
        raise _error(ClientError, "the answer is not a capabilities object", url, None, None, 200)
    return answer


def list_jobs(
    url: str,
    token: str | None = None,
    *,
    limit: int | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> list[dict[str, Any]]:
    """``GET /v1/jobs`` (reference server): the newest jobs first, each with its task summaries.

    With a job token, the server lists that job only.

    Args:
        url: the service's base URL.
        token: a bearer token, or ``None``.
        limit: the most jobs returned (1..1000; the server's default, 100, when ``None``).
        timeout_seconds: the connect and the read timeout, in seconds.

    Raises:
        UnreachableError, UnauthorizedError, ClientError: as :func:`read_task`
            (``ClientError`` with status 400 for a limit out of range).
    """
    path = JOBS_PATH if limit is None else f"{JOBS_PATH}?limit={int(limit)}"
    body = _get(url, path, token, timeout_seconds)
    jobs = body.get("jobs") if isinstance(body, dict) else None
    if not isinstance(jobs, list):
        raise _error(ClientError, "the answer is not a list of jobs", url, None, None, 200)
    return jobs


def to_pandas(task: Mapping[str, Any]) -> pd.DataFrame:
    """Every point of a task as one tidy frame: one row per point, series in stored order.

    Needs pandas (``pip install "trainreport[pandas]"``).

    Args:
        task: a task in the ``GET`` shape (from :func:`read_task`, ``MemorySink.task``
            or ``Reporter.snapshot()``); a series held as ``ColumnPoints``
            (``read_task(..., columns=True)``) is read from its arrays, with no
            dictionary a point.

    Returns:
        A ``pandas.DataFrame`` with columns ``series`` (str), ``step`` (int64),
        ``epoch`` (nullable Int64: a point may have none) and ``value``
        (float64, NaN for a non-finite point, stored as ``null``). A task
        without series gives an empty frame with these columns.

    Raises:
        ImportError: pandas is not installed (the message names the extra).
        KeyError: a point without a ``step``.
        ValueError: a step or epoch that is not a whole number (1.5; 2.0 is 2).
    """
    try:
        import pandas as pd  # noqa: PLC0415 - an optional dependency
    except ImportError as exc:
        raise ImportError(
            'to_pandas needs pandas: pip install "trainreport[pandas]"', name="pandas"
        ) from exc
    import numpy as np  # noqa: PLC0415 - pandas' own dependency

    details = task.get("status_details") or {}
    metrics: Mapping[str, Any] = details.get("metrics") or {}
    names: list[Any] = []
    steps: list[Any] = []
    epochs: list[Any] = []
    values: list[Any] = []

    def whole_numbers(column: Any) -> Any:
        """int64 of a step or epoch column; 1.5 raises ValueError (pandas' int64 rule)."""
        if isinstance(column, array):
            return np.asarray(column, dtype=np.int64)
        return pd.Series(column, dtype="int64").to_numpy()

    for name, points in metrics.items():
        if isinstance(points, ColumnPoints):  # from the arrays: no dictionary a point
            step_column, epoch_column, value_column = points.columns()
        else:
            step_column = [point["step"] for point in points]
            epoch_column = [point.get("epoch") for point in points]
            value_column = [point.get("value") for point in points]
        step_array = whole_numbers(step_column)
        epoch_array = whole_numbers(
            epoch_column
            if isinstance(epoch_column, array)
            else [NO_EPOCH if e is None else e for e in epoch_column]
        )
        value_array = np.asarray(
            value_column
            if isinstance(value_column, array)
            else [math.nan if v is None else float(v) for v in value_column],
            dtype=np.float64,
        )
        names.append(np.full(len(step_array), name, dtype=object))
        steps.append(step_array)
        epochs.append(epoch_array)
        values.append(value_array)
    epoch_all = np.concatenate(epochs) if epochs else np.zeros(0, dtype=np.int64)
    value_all = np.concatenate(values) if values else np.zeros(0, dtype=np.float64)
    value_all[~np.isfinite(value_all)] = math.nan
    unknown = epoch_all == NO_EPOCH
    return pd.DataFrame(
        {
            "series": pd.Series(
                np.concatenate(names) if names else np.zeros(0, dtype=object), dtype="object"
            ),
            "step": pd.Series(
                np.concatenate(steps) if steps else np.zeros(0, dtype=np.int64), dtype="int64"
            ),
            "epoch": pd.Series(
                pd.arrays.IntegerArray(np.where(unknown, 0, epoch_all), unknown), dtype="Int64"
            ),
            "value": pd.Series(value_all, dtype="float64"),
        }
    )


# -- HTTP -------------------------------------------------------------------------------


def _quote(segment: str) -> str:
    return urllib.parse.quote(str(segment), safe="")


def _what(job_id: str | None, task_id: str | None) -> str:
    if job_id is None:
        return "the jobs"
    if task_id is None:
        return f"job {job_id!r}"
    return f"task {task_id!r} of job {job_id!r}"


def _error(
    kind: type[ClientError],
    reason: str,
    url: str,
    job_id: str | None,
    task_id: str | None,
    status: int | None,
) -> ClientError:
    shown = _shown_url(url)
    return kind(
        f"reading {_what(job_id, task_id)} at {shown}: {reason}",
        url=shown,
        job_id=job_id,
        task_id=task_id,
        status=status,
    )


def _get(
    url: str,
    path: str,
    token: str | None,
    timeout_seconds: float,
    *,
    job_id: str | None = None,
    task_id: str | None = None,
) -> Any:
    problem = _userinfo_problem(url)
    if problem is not None:  # never guess the host: the password could go to another one
        raise _error(ClientError, problem, url, job_id, task_id, None)
    problem = base_url_problem(url)
    if problem is not None:  # urllib3 would guess http:// with a FutureWarning
        raise _error(UnreachableError, problem, url, job_id, task_id, None)
    base, userinfo = _split_userinfo(url.rstrip("/"))
    headers = {"Accept": "application/json", "User-Agent": "trainreport"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif userinfo is not None:
        headers.update(urllib3.util.make_headers(basic_auth=userinfo))
    timeout = urllib3.Timeout(connect=timeout_seconds, read=timeout_seconds)
    try:
        response = urllib3.request(
            "GET", base + path, headers=headers, timeout=timeout, retries=False
        )
    except (urllib3.exceptions.HTTPError, ValueError) as exc:  # ValueError: an unusable URL
        raise _error(
            UnreachableError,
            f"cannot reach it ({_unreachable_reason(exc)})",
            url,
            job_id,
            task_id,
            None,
        ) from exc
    if response.status != 200:
        raise _status_error(response, url, job_id, task_id, token)
    try:
        return json.loads(response.data)
    except ValueError as exc:
        raise _error(
            ClientError, "the answer is not JSON", url, job_id, task_id, response.status
        ) from exc


def _unreachable_reason(exc: BaseException | None) -> str:
    """Why a request could not be made, in a few lower-case words. Never raises.

    The operating system's words for the first ``OSError`` in ``exc``'s chain of
    causes ("connection refused", "name or service not known"), else "timed out"
    for a timeout, else the message of an unusable URL or the exception's type name.

    Args:
        exc: what urllib3 raised (``None``: "unknown error").
    """
    chain: list[BaseException] = []
    cause = exc
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for cause in chain:
        if isinstance(cause, OSError) and cause.strerror:
            return str(cause.strerror).lower()
    # after the OS's words: urllib3's NewConnectionError is a ConnectTimeoutError too
    if any(isinstance(c, TimeoutError | urllib3.exceptions.TimeoutError) for c in chain):
        return "timed out"
    if exc is None:
        return "unknown error"
    if isinstance(exc, ValueError) and str(exc):
        return str(exc).rstrip(".")
    return type(exc).__name__


def _status_error(
    response: urllib3.BaseHTTPResponse,
    url: str,
    job_id: str | None,
    task_id: str | None,
    token: str | None,
) -> ClientError:
    message = ""
    try:
        body = json.loads(response.data)
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            message = body["message"][:_MESSAGE_CHARS]
    except ValueError:
        pass
    if token:
        message = message.replace(token, "***")
    status = response.status
    said = f" ({message})" if message else ""
    if status == 401:
        reason = "the service refused the token" if token else "the service requires a token"
        return _error(UnauthorizedError, f"{reason} (401){said}", url, job_id, task_id, status)
    if status == 403:
        return _error(
            UnauthorizedError, f"the token may not read this (403){said}", url, job_id, task_id, 403
        )
    if status == 404:
        return _error(NotFoundError, f"not found (404){said}", url, job_id, task_id, status)
    return _error(ClientError, f"the service answered {status}{said}", url, job_id, task_id, status)
