"""Request planning for series-suffix sends: split an update into bodies that fit a cap.

Pure (no I/O): sizes are measured on the encoded bodies. A series stays in
order; one larger than a request is cut into offset-contiguous chunks, each in
a request of its own (a JSON object cannot name a series twice); only the
first request carries ``status`` and ``status_details``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeAlias

from trainreport._payloads import encode_suffix_body, encode_suffix_series
from trainreport._sink import SeriesUpdate, Update

__all__ = ["Part", "head_that_fits", "piece_bytes", "plan_requests", "slice_series"]

#: Bytes reserved in a split request for the envelope's variable parts (sequence digits).
_ENVELOPE_SLACK = 64

#: One request of a send: (its series, or ``None`` for all of the update's;
#: whether it carries the details; whether it was planned already).
Part: TypeAlias = "tuple[tuple[SeriesUpdate, ...] | None, bool, bool]"


def piece_bytes(series: SeriesUpdate) -> int:
    """Encoded size of one series member ``"name":{...},`` of a suffix body, in bytes."""
    return (
        len(json.dumps(series.name, ensure_ascii=False).encode())
        + 2
        + len(encode_suffix_series(series).encode())
    )


def slice_series(series: SeriesUpdate, start: int, stop: int) -> SeriesUpdate:
    """Points ``[start, stop)`` of ``series`` as a suffix at ``offset + start``."""
    return SeriesUpdate(
        series.name,
        series.offset + start,
        series.steps[start:stop],
        series.epochs[start:stop],
        series.values[start:stop],
    )


def head_that_fits(series: SeriesUpdate, space: int) -> tuple[SeriesUpdate | None, SeriesUpdate]:
    """The longest prefix of ``series`` (>= 1 point, not all) whose member fits ``space`` bytes.

    Returns:
        (head, rest); head is ``None`` when not even one point fits.
    """
    n = len(series)
    if n <= 1 or space <= 0:
        return None, series
    per_point = max(piece_bytes(series) / n, 1.0)
    k = min(int(space / per_point * 0.95), n - 1)
    while k >= 1:
        head = slice_series(series, 0, k)
        if piece_bytes(head) <= space:
            return head, slice_series(series, k, n)
        k = min(k - 1, int(k * 0.8))
    return None, series


def plan_requests(
    update: Update,
    series: Sequence[SeriesUpdate] | None,
    details: bool,
    *,
    generation: int,
    sequence: int,
    cap: int,
) -> list[Part]:
    """Split ``series`` (+ details) into requests whose bodies fit the cap.

    Series stay in order; a series larger than one request is cut into
    offset-contiguous chunks, each in its own request (a JSON object
    cannot name a series twice). Only the first request carries details.
    """
    chosen = tuple(update.series or ()) if series is None else tuple(series)

    def envelope(with_details: bool) -> int:
        empty = encode_suffix_body(
            update,
            writer_generation=generation,
            sequence=sequence,
            series=(),
            include_details=with_details,
        )
        return len(empty) + len('"series":{}') + _ENVELOPE_SLACK

    sizes = {True: envelope(True) if details else 0, False: envelope(False)}
    plan: list[Part] = []
    current: list[SeriesUpdate] = []
    used = 0
    with_details = details

    def flush() -> None:
        nonlocal used, with_details
        plan.append((tuple(current), with_details, True))
        current.clear()
        used = 0
        with_details = False

    for whole in chosen:
        rest: SeriesUpdate | None = whole
        while rest is not None:
            space = cap - sizes[with_details] - used
            size = piece_bytes(rest)
            if size <= space:
                current.append(rest)
                used += size
                rest = None
                continue
            head, tail = head_that_fits(rest, space)
            if head is None:
                if current or with_details:
                    flush()
                    continue
                head, tail = slice_series(rest, 0, 1), slice_series(rest, 1, len(rest))
                if not len(tail):
                    current.append(head)
                    flush()
                    break
            current.append(head)
            flush()
            rest = tail
    if current or with_details or not plan:
        flush()
    return plan
