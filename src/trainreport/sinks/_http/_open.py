"""Opening an HTTP destination: which wire mode, which writer, what it holds.

``GET /v1/capabilities`` decides the mode (a non-2xx answer other than
408/429/5xx means a plain server: baseline) and, from the server's limits,
the request cap; with the extension, ``POST {task}/writers`` claims the task
for this attempt and returns the stored task; in baseline mode ``GET {task}``
returns it, and a 404 is a new task (``stored_task=None``). See
``docs/protocol.md``.
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import attrs
import cattrs

from trainreport._logging import OnceLogger, get_logger
from trainreport._wire._attempt import AttemptIdentity, current_attempt
from trainreport._wire._payloads import (
    ColumnTask,
    WriterResponse,
    parse_stored_task,
    read_stored_columns,
    structure_response,
)
from trainreport._wire._protocol import (
    CAPABILITIES_PATH,
    ENCODING_GZIP,
    EXTENSION_SERIES_TIMES,
    WRITERS_PATH,
)
from trainreport._wire._sink_interface import (
    CAPABILITY_GZIP,
    CAPABILITY_SERIES_SUFFIX,
    Opened,
    OpenResult,
    Rejected,
    RetryLater,
    SendResult,
    Split,
)
from trainreport.exceptions import ProtocolError
from trainreport.sinks._http._transport import HttpTransport, classify_failure, is_transient

__all__ = ["Capabilities", "Session", "open_session", "read_capabilities", "series_groups"]

_log = get_logger()
_once = OnceLogger()


@attrs.frozen
class Capabilities:
    """What ``GET /v1/capabilities`` says.

    Args:
        extension: the server offers ``series-suffix-v1``.
        gzip: the server accepts gzip request bodies.
        cap: the request cap, bytes: the client's, lowered to the server's limits.
        times: the server stores each point's time (``series-times-v1``).
    """

    extension: bool = False
    gzip: bool = False
    cap: int = 1 << 20
    times: bool = False


def read_capabilities(data: bytes, cap: int) -> Capabilities:
    """Parse a capabilities document; anything unreadable means a plain server. Never raises.

    Args:
        data: the response body.
        cap: the client's own request cap, bytes.
    """
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return Capabilities(cap=cap)
    if not isinstance(doc, dict):
        return Capabilities(cap=cap)
    extensions, encodings = doc.get("extensions"), doc.get("encodings")
    for key in ("max_body_bytes", "max_decompressed_bytes"):
        limit = doc.get(key)
        if type(limit) is int and limit > 0:
            cap = max(min(cap, limit), 1)
    return Capabilities(
        extension=isinstance(extensions, list) and CAPABILITY_SERIES_SUFFIX in extensions,
        gzip=isinstance(encodings, list) and ENCODING_GZIP in encodings,
        cap=cap,
        times=isinstance(extensions, list) and EXTENSION_SERIES_TIMES in extensions,
    )


@attrs.frozen
class Session:
    """The outcome of opening: the result for the reporter and the state to send with.

    Args:
        result: what ``Sink.open`` returns.
        generation: the writer generation (extension), or ``None`` (baseline).
        cap: the request cap, bytes.
        attempt: the attempt identity claimed (read once, then kept).
    """

    result: OpenResult
    generation: int | None
    cap: int
    attempt: AttemptIdentity | None


def open_session(
    transport: HttpTransport,
    task_resource: str,
    *,
    task: tuple[str, str],
    use_extension: bool,
    attempt: AttemptIdentity | None,
    max_request_bytes: int,
    deadline: float | None,
) -> Session:
    """Learn the server's capabilities, open a writer (extension) or read the task.

    Sets ``transport.gzip`` from the capabilities.

    Args:
        transport: the sink's transport.
        task_resource: the task's path on the service.
        task: the job's and the task's ids: the claim's attempt, when
            ``attempt`` is ``None``, is this process's for them
            (:func:`~trainreport._wire._attempt.current_attempt`).
        use_extension: open a writer when the service offers the extension.
        attempt: the identity to claim with, or ``None`` to read it (once).
        max_request_bytes: the request cap, bytes, before the service's.
        deadline: the monotonic time the requests must end by, or ``None``.

    Raises:
        TransportError, ProtocolError, SinkError: as a request raises them, or a
            malformed answer; ``HttpSink.open`` turns them into results.
    """
    transport.gzip = False
    response = transport.request("GET", CAPABILITIES_PATH, None, deadline)
    now = datetime.datetime.now(datetime.timezone.utc)
    found = Capabilities(cap=max_request_bytes)
    if 200 <= response.status < 300:
        found = read_capabilities(response.data, max_request_bytes)
    elif is_transient(response.status):
        failure = classify_failure(response, now)
        assert isinstance(failure, RetryLater)
        return Session(failure, None, max_request_bytes, attempt)
    transport.gzip = found.gzip
    caps = frozenset({CAPABILITY_GZIP}) if found.gzip else frozenset()
    if found.times:
        caps |= {EXTENSION_SERIES_TIMES}
    if found.extension and use_extension:
        if attempt is None:  # read once: every re-open claims as the same attempt
            attempt = current_attempt(*task)
        claim = json.dumps({"attempt": attempt.to_json()}).encode()
        response = transport.request(
            "POST", task_resource + WRITERS_PATH + _WITHOUT_METRICS, claim, deadline
        )
        if 200 <= response.status < 300:
            try:
                writer = structure_response(json.loads(response.data), WriterResponse)
            except (ValueError, RecursionError, cattrs.BaseValidationError) as exc:
                raise ProtocolError("malformed response to POST .../writers") from exc
            del response  # the body is parsed: keep no copy while the series are read
            stored: Mapping[str, Any] | None = writer.task
            if writer.task is not None and _curves_left_out(writer.task, writer.series_lengths):
                read = _read_series(
                    transport, task_resource, writer.task, writer.series_lengths, caps, deadline
                )
                if isinstance(read, RetryLater | Rejected):
                    return Session(read, None, found.cap, attempt)
                stored = read
            opened = Opened(
                capabilities=caps | {CAPABILITY_SERIES_SUFFIX},
                writer_generation=writer.writer_generation,
                stored_task=stored,
                last_writer_generation=writer.last_writer_generation,
            )
            return Session(opened, writer.writer_generation, found.cap, attempt)
        if response.status not in (404, 405, 501):
            return Session(_open_result(classify_failure(response, now)), None, found.cap, attempt)
        _once.info(
            ("no_writers", transport.shown_url),
            "trainreport.extension_unavailable",
            status_code=response.status,
        )
    return Session(_read_task(transport, task_resource, caps, deadline), None, found.cap, attempt)


#: Asked of ``POST .../writers``: the stored task without its curves (a server that does
#: not know the query answers with them, and they are read from there as before).
_WITHOUT_METRICS = "?metrics=false"


def _curves_left_out(task: Mapping[str, Any], lengths: Mapping[str, int]) -> bool:
    """The writer's answer left the task's curves out (``?metrics=false``) and it has some."""
    details = task.get("status_details")
    return (
        isinstance(details, dict)
        and "metrics" not in details
        and any(type(n) is int and n > 0 for n in lengths.values())
    )


#: About how many stored points one ``GET .../series`` of a resume asks for: the
#: series are read in groups this large (a longer series alone), so a resume holds
#: about this many points of JSON at a time (~130 bytes each) in a few requests.
_POINTS_PER_READ = 200_000


def series_groups(lengths: Mapping[str, int], per_read: int | None = None) -> list[list[str]]:
    """The series with points, in stored order, in groups of about ``per_read`` points.

    A series longer than ``per_read`` is a group of its own. Never raises.

    Args:
        lengths: points per series, in stored order.
        per_read: points a group holds at most (``None``: ``_POINTS_PER_READ``).
    """
    limit = _POINTS_PER_READ if per_read is None else per_read
    groups: list[list[str]] = []
    held = limit
    for name, length in lengths.items():
        if not (type(length) is int and length > 0):
            continue
        if held + length > limit:
            groups.append([])
            held = 0
        groups[-1].append(name)
        held += length
    return groups


def _read_series(
    transport: HttpTransport,
    task_resource: str,
    task: Mapping[str, Any],
    lengths: Mapping[str, int],
    caps: frozenset[str],
    deadline: float | None,
) -> Mapping[str, Any] | RetryLater | Rejected | None:
    """The stored curves as columns, from ``GET {task}/series?name=...``, a group at a time.

    A resume then holds one group's JSON at a time (:data:`_POINTS_PER_READ`
    points), never the whole task as one document of a dictionary per point
    (``docs/engine.md``, "Resuming"). A series whose length is not the one
    the writer's answer gave (someone wrote between the two reads), or a
    server without the endpoint (404, 405, 501), falls back to the whole task
    from ``GET {task}``.
    """
    state = parse_stored_task(dict(task))
    if isinstance(state, str):
        return task  # the seed says why it is unreadable
    for names in series_groups(lengths):
        query = "&".join(f"name={urllib.parse.quote(n, safe='')}" for n in names)
        response = transport.request("GET", f"{task_resource}/series?{query}", None, deadline)
        if not 200 <= response.status < 300:
            if response.status in (404, 405, 501):
                return _read_whole_task(transport, task_resource, caps, deadline)
            return _open_result(
                classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
            )
        try:
            doc = json.loads(response.data)
        except (ValueError, RecursionError) as exc:
            raise ProtocolError("malformed response: GET .../series is not JSON") from exc
        del response
        found = doc.get("series") if isinstance(doc, dict) else None
        del doc
        for name in names:
            column = found.pop(name, None) if isinstance(found, dict) else None
            if not (
                isinstance(column, dict)
                and column.get("length") == lengths[name]
                and column.get("first_index", 0) == 0
            ):
                return _read_whole_task(transport, task_resource, caps, deadline)
            state = read_stored_columns(state, name, column)
            del column  # each series' JSON goes as soon as it is columns
        del found
    return ColumnTask(state, task)


def _read_whole_task(
    transport: HttpTransport, task_resource: str, caps: frozenset[str], deadline: float | None
) -> Mapping[str, Any] | RetryLater | Rejected | None:
    """``GET {task}`` (every point) after the series could not be read one by one."""
    read = _read_task(transport, task_resource, caps, deadline)
    return read.stored_task if isinstance(read, Opened) else read


def _read_task(
    transport: HttpTransport, task_resource: str, caps: frozenset[str], deadline: float | None
) -> OpenResult:
    """Baseline mode: ``GET {task}``; a 404 is a new task."""
    response = transport.request("GET", task_resource, None, deadline)
    if response.status == 404:
        return Opened(capabilities=caps, stored_task=None)
    if not 200 <= response.status < 300:
        now = datetime.datetime.now(datetime.timezone.utc)
        return _open_result(classify_failure(response, now))
    try:
        stored = json.loads(response.data)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError("malformed response: the stored task is not JSON") from exc
    if not isinstance(stored, dict):
        _log.warning("trainreport.stored_task_malformed", reason="the task is not an object")
        stored = {}
    return Opened(capabilities=caps, stored_task=stored)


def _open_result(result: SendResult) -> RetryLater | Rejected:
    """Narrow a classified failure to what ``open()`` may return."""
    if isinstance(result, RetryLater | Rejected):
        return result
    if isinstance(result, Split):
        return Rejected(result.reason, 413)
    return RetryLater(getattr(result, "reason", "unexpected answer"))
