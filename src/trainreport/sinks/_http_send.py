"""Sending one update over HTTP, and what the answer means to the protocol.

Two wire modes (``docs/protocol.md``): :func:`send_patch` is the baseline
``PATCH`` of the task with the full-state body; :class:`SuffixSender` is the
``series-suffix-v1`` ``POST .../updates``: it numbers every request (a strictly
increasing sequence, never reused), keeps the request cap a 413 lowers, and
splits an update larger than the cap into requests (``_http_plan.py``), each
series encoded once however often a 413 makes it plan again (docs/engine.md,
"The cost of a send").

Every request goes out once (``_http_transport.py``); the caller, ``HttpSink``,
turns exceptions into results and scrubs credentials from them.
"""

from __future__ import annotations

import datetime
import json

import cattrs

from trainreport._logging import get_logger
from trainreport._payloads import (
    UpdateResponse,
    encode_patch_body,
    join_suffix_body,
    structure_response,
    suffix_details,
)
from trainreport._sink import Delivered, Resynchronise, RetryLater, SendResult, Update
from trainreport.sinks._http_plan import (
    Members,
    Part,
    members_bytes_bound,
    piece_bytes,
    plan_requests,
)
from trainreport.sinks._http_transport import HttpTransport, classify_failure

__all__ = ["MIN_SPLIT_BYTES", "SuffixSender", "send_patch"]

#: The smallest request cap (bytes) a 413 halves down to before giving up with ``Split``.
MIN_SPLIT_BYTES = 16 * 1024
#: 413 answers one send absorbs (halving its cap each time) before returning ``Split``.
_MAX_413 = 8

_log = get_logger()


def send_patch(
    transport: HttpTransport, path: str, update: Update, deadline: float | None
) -> SendResult:
    """``PATCH`` the task at ``path`` with the full-state body of ``update`` (baseline mode).

    Args:
        transport: the sink's transport.
        path: the task resource below the base URL.
        update: the state the server should hold after this call.
        deadline: ``time.monotonic()`` bound of the request, or ``None``.

    Returns:
        :class:`Delivered` (with the answer's ``cancel_requested`` when it is a
        JSON object; a plain server may answer anything on success) or the
        classified failure.

    Raises:
        SinkError: the request failed (``_http_transport.py``).
    """
    response = transport.request("PATCH", path, encode_patch_body(update), deadline)
    sent = transport.last_bytes
    if not 200 <= response.status < 300:
        return classify_failure(response, datetime.datetime.now(datetime.timezone.utc))
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
            SinkError: a request failed (``_http_transport.py``).
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
