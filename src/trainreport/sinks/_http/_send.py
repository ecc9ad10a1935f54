"""Sending one update over HTTP, and what the answer means to the protocol.

Two wire modes (``docs/protocol.md``): :func:`send_patch` is the baseline
``PATCH`` of the task with the full-state body (a body over the destination's
limit, configured or met as a 413, is a ``Split`` that says by how much:
:class:`BodyLimit`); :class:`SuffixSender` is the
``series-suffix-v1`` ``POST .../updates``: it numbers every request (a strictly
increasing sequence, never reused), keeps the request cap a 413 lowers, and
splits an update larger than the cap into requests (``sinks/_http/_plan.py``), each
series encoded once however often a 413 makes it plan again (docs/engine.md,
"The cost of a send").

Every request goes out once (``sinks/_http/_transport.py``); the caller, ``HttpSink``,
turns exceptions into results and scrubs credentials from them.
"""

from __future__ import annotations

import datetime
import json

import cattrs

from trainreport._logging import get_logger
from trainreport._wire._payloads import (
    UpdateResponse,
    encode_patch_body,
    join_suffix_body,
    structure_response,
    suffix_details,
)
from trainreport._wire._sink_interface import (
    Delivered,
    Resynchronise,
    RetryLater,
    SendResult,
    Split,
    Update,
)
from trainreport.sinks._http._plan import (
    Members,
    Part,
    members_bytes_bound,
    piece_bytes,
    plan_requests,
)
from trainreport.sinks._http._transport import HttpTransport, classify_failure

__all__ = ["MIN_SPLIT_BYTES", "BodyLimit", "SuffixSender", "send_patch"]

#: The smallest request cap (bytes) a 413 halves down to before giving up with ``Split``.
MIN_SPLIT_BYTES = 16 * 1024
#: 413 answers one send absorbs (halving its cap each time) before returning ``Split``.
_MAX_413 = 8

_log = get_logger()


class BodyLimit:
    """What a full-state destination's body limit is known to be (docs/engine.md, "Thinning").

    A plain job API says nothing of its limit but a 413; ``HttpSink(max_body_bytes=...)``
    states one. The reporter thins the curves to fit (``_record/_thinning.py``); this says by
    how much: a :class:`Split` carries the size that did not fit and a size known to
    fit (the configured limit, or the largest body the destination took when it is
    smaller than the refused one), else none (the reporter then halves).

    Driven by the sink's one thread; kept across opens.

    Args:
        configured: the largest body to send, bytes before compression, or ``None``.
    """

    __slots__ = ("configured", "fitted")

    def __init__(self, configured: int | None) -> None:
        self.configured = configured
        #: The largest body (as sent) the destination took, bytes (0: none yet).
        self.fitted = 0

    def refused(self, body_bytes: int) -> int | None:
        """A body of ``body_bytes`` (as sent) was refused: a size known to fit, or ``None``.

        The configured limit when there is one. Else the largest body taken,
        but only when it is at least half the refused one: the limit lies
        somewhere between the two, and a body taken far below (the first
        full state of a run, one step) says little of where; sizing the curves
        to it would thin them to a few points a series (or freeze them,
        ``metrics_too_large``) under a limit a hundred times larger. ``None``
        lets the reporter halve instead (``_record/_thinning.next_budget``), so
        a few refusals find the limit within a factor of two.
        """
        if body_bytes <= self.fitted:  # the limit went down: what fitted is no evidence now
            self.fitted = 0
        if self.configured is not None:
            return self.configured if self.configured < body_bytes else None
        if self.fitted and 2 * self.fitted >= body_bytes:
            return self.fitted
        return None


def send_patch(
    transport: HttpTransport,
    path: str,
    update: Update,
    deadline: float | None,
    limit: BodyLimit | None = None,
) -> SendResult:
    """``PATCH`` the task at ``path`` with the full-state body of ``update`` (baseline mode).

    A body with ``metrics`` over ``limit.configured`` is not sent: it is a
    :class:`Split` at once, as a 413 is, each saying what did not fit and what
    is known to fit (:class:`BodyLimit`), so the reporter thins the curves.

    Args:
        transport: the sink's transport.
        path: the task resource below the base URL.
        update: the state the server should hold after this call.
        deadline: ``time.monotonic()`` bound of the request, or ``None``.
        limit: what the destination's body limit is known to be (``None``: no limit known).

    Returns:
        :class:`Delivered` (with the answer's ``cancel_requested`` when it is a
        JSON object; a plain server may answer anything on success) or the
        classified failure.

    Raises:
        SinkError: the request failed (``sinks/_http/_transport.py``).
    """
    limit = BodyLimit(None) if limit is None else limit
    body = encode_patch_body(update)
    if limit.configured is not None and len(body) > limit.configured and update.series:
        return Split(
            f"the body ({len(body)} bytes) is over max_body_bytes ({limit.configured})",
            body_bytes=len(body),
            limit_bytes=limit.configured,
        )
    response = transport.request("PATCH", path, body, deadline)
    sent = transport.last_bytes
    if not 200 <= response.status < 300:
        result = classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
        if isinstance(result, Split):
            refused = transport.last_body_bytes
            result = Split(result.reason, refused, limit.refused(refused))
        return result
    limit.fitted = max(limit.fitted, transport.last_body_bytes)
    cancel = False
    try:
        doc = json.loads(response.data) if response.data else None
    except (ValueError, RecursionError):
        doc = None  # a plain server may answer anything on success
    if isinstance(doc, dict):
        cancel = doc.get("cancel_requested") is True
    return Delivered(cancel_requested=cancel, bytes_sent=sent)


class SuffixSender:
    """The ``series-suffix-v1`` sends of one sink: sequence numbers, the request cap, the split.

    Driven by one thread (the sink's); holds no connection of its own.

    Args:
        transport: the sink's transport.
        updates_path: ``{task}/updates`` below the base URL.
        cap: the request cap, bytes (the opener sets it again at every open).
    """

    def __init__(self, transport: HttpTransport, updates_path: str, cap: int) -> None:
        self._transport = transport
        self._updates_path = updates_path
        #: The largest request body, bytes: set at open, halved by a 413 (down to MIN_SPLIT_BYTES).
        self.cap = cap
        #: The last sequence number sent; never reused, even for a resend or a new generation.
        self.sequence = 0

    def send(self, update: Update, generation: int, deadline: float | None) -> SendResult:
        """Deliver ``update`` as writer ``generation`` in as many requests as the cap needs.

        ``status`` and ``status_details`` ride in the first request only; a 413
        halves the cap (down to ``MIN_SPLIT_BYTES``, at most 8 times a send) and
        plans the refused request again before the failure (``Split``) is
        returned. If any request fails, that failure is returned and nothing is
        claimed delivered (resending is idempotent).

        Args:
            update: the state the server should hold after this call.
            generation: the writer generation issued at open.
            deadline: ``time.monotonic()`` bound of each request, or ``None``.

        Returns:
            :class:`Delivered` with the server's series lengths,
            :class:`Resynchronise` (a duplicate sequence), :class:`RetryLater`
            (a malformed answer) or the classified failure.

        Raises:
            SinkError: a request failed (``sinks/_http/_transport.py``).
        """
        # Each part: (series or None for all of the update's, carries details, already planned).
        parts: list[Part] = [(None, True, False)]
        lengths: dict[str, int] = {}
        cancel = False
        sent = 0
        refusals = 0
        # Encoded once per send, whatever the splitting (docs/engine.md, "The cost of a send").
        details_json = suffix_details(update)
        details_bytes = len(details_json.encode())
        members = Members()
        while parts:
            series, details, planned = parts.pop(0)
            chosen = (update.series or ()) if series is None else series
            self.sequence += 1  # never reused, even for a resend after a lost response
            empty = len(join_suffix_body(generation, self.sequence, "", ()))
            envelope_bytes = (empty, empty + details_bytes)
            if not planned and chosen:
                # Over the cap? A cheap bound first, then the exact size by arithmetic:
                # a body that must be split is planned before any point is encoded.
                room = self.cap - envelope_bytes[details] - len(',"series":{}') + 1
                if members_bytes_bound(chosen) > room and (
                    sum(piece_bytes(s) for s in chosen) > room
                ):
                    parts[:0] = plan_requests(
                        update, series, details, envelope_bytes=envelope_bytes, cap=self.cap
                    )
                    continue
            body = join_suffix_body(
                generation,
                self.sequence,
                details_json if details else "",
                [members(s) for s in chosen],  # each encoded once: a re-plan reuses them
            )
            response = self._transport.request("POST", self._updates_path, body, deadline)
            sent += self._transport.last_bytes
            if response.status == 413 and not chosen:
                # Details alone are too large: splitting cannot help; the reporter drops the field.
                return classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
            if response.status == 413 and len(body) > MIN_SPLIT_BYTES and refusals < _MAX_413:
                refusals += 1
                self.cap = max(min(self.cap, len(body)) // 2, MIN_SPLIT_BYTES)
                _log.info("trainreport.request_too_large", request_cap_bytes=self.cap)
                parts[:0] = plan_requests(
                    update, series, details, envelope_bytes=envelope_bytes, cap=self.cap
                )
                continue
            if not 200 <= response.status < 300:
                return classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
            try:
                answer = structure_response(json.loads(response.data), UpdateResponse)
            except (ValueError, RecursionError, cattrs.BaseValidationError):
                return RetryLater("malformed response to POST .../updates")
            if answer.duplicate:
                return Resynchronise("the server saw this sequence already", answer.series_lengths)
            lengths.update(answer.series_lengths)
            cancel |= answer.cancel_requested
        return Delivered(series_lengths=lengths, cancel_requested=cancel, bytes_sent=sent)
