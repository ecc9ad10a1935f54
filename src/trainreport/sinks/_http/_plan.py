"""Request planning for series-suffix sends: split an update into bodies that fit a cap.

Pure (no I/O). A series stays in order; one larger than a request is cut into
offset-contiguous chunks, each in a request of its own (a JSON object cannot
name a series twice); only the first request carries ``status`` and
``status_details``.

Nothing is encoded twice (docs/engine.md, "The cost of a send"): sizes are
arithmetic (:func:`~trainreport._wire._payloads.suffix_member_bytes`), so planning
encodes no point, and :class:`Members` encodes each series (or chunk) of a send
once, however often a 413 makes the send plan again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from trainreport._wire._payloads import suffix_member, suffix_member_bytes
from trainreport._wire._sink_interface import SeriesUpdate, Update

__all__ = [
    "Members",
    "Part",
    "head_that_fits",
    "members_bytes_bound",
    "piece_bytes",
    "plan_requests",
    "slice_series",
]

#: Bytes reserved in a split request for the envelope's variable parts (sequence digits).
_ENVELOPE_SLACK = 64

#: One request of a send: (its series, or ``None`` for all of the update's;
#: whether it carries the details; whether it was planned already).
Part: TypeAlias = "tuple[tuple[SeriesUpdate, ...] | None, bool, bool]"


class Members:
    """The encoded members (``"name":{...}``) of one send's series, each encoded at most once.

    Keyed by the series object (it is held, so its identity is not reused while cached).
    """

    def __init__(self) -> None:
        self._encoded: dict[int, tuple[SeriesUpdate, str]] = {}

    def __call__(self, series: SeriesUpdate) -> str:
        """:func:`~trainreport._wire._payloads.suffix_member` of ``series``, encoded once."""
        hit = self._encoded.get(id(series))
        if hit is not None and hit[0] is series:
            return hit[1]
        text = suffix_member(series)
        self._encoded[id(series)] = (series, text)
        return text


def piece_bytes(series: SeriesUpdate) -> int:
    """Encoded size of one series member ``"name":{...},`` of a suffix body, in bytes."""
    return suffix_member_bytes(series) + 1


#: Per series, the most a member adds besides 6 bytes per name character and 32 per point
#: (43 with times): quotes, colon and comma (4), the frame (46) and each column's base64
#: rounding (3 x 4), and a times column's frame and rounding (11 + 4).
_MEMBER_OVERHEAD_BOUND = 4 + 46 + 12 + 15


def members_bytes_bound(series: Sequence[SeriesUpdate]) -> int:
    """An upper bound of ``sum(piece_bytes(s) for s in series)``, without JSON or base64.

    A name character takes at most 6 bytes in JSON (``\\u001f``), a point at most 32
    base64 characters (three columns of at most 8 bytes an item; 43 with a times
    column), so a send whose bound fits the cap is encoded straight away, and only a
    larger one is sized exactly.
    """
    total = 0
    for s in series:
        per_point = 32 if s.times is None else 43
        total += (
            6 * len(s.name)
            + per_point * len(s.values)
            + len(str(s.offset))
            + _MEMBER_OVERHEAD_BOUND
        )
    return total


def slice_series(series: SeriesUpdate, start: int, stop: int) -> SeriesUpdate:
    """Points ``[start, stop)`` of ``series`` as a suffix at ``offset + start``."""
    return SeriesUpdate(
        series.name,
        series.offset + start,
        series.steps[start:stop],
        series.epochs[start:stop],
        series.values[start:stop],
        None if series.times is None else series.times[start:stop],
    )


def head_that_fits(series: SeriesUpdate, space: int) -> tuple[SeriesUpdate | None, SeriesUpdate]:
    """The longest prefix of ``series`` (>= 1 point, not all) whose member fits ``space`` bytes.

    Sizes are arithmetic (a binary search over the prefix length); only the
    returned slices are built.

    Returns:
        (head, rest); head is ``None`` when not even one point fits.
    """
    n = len(series)
    if n <= 1 or space <= 0:
        return None, series
    # The size of a prefix of k points, without slicing: the same name and offset.
    fixed = piece_bytes(slice_series(series, 0, 0))
    widths = [series.steps.itemsize, series.epochs.itemsize, series.values.itemsize]
    if series.times is not None:  # the fourth column (series-times-v1)
        widths.append(series.times.itemsize)

    def size(k: int) -> int:
        return fixed + sum(4 * ((k * w + 2) // 3) for w in widths)

    if size(1) > space:
        return None, series
    low, high = 1, n - 1  # the longest prefix that fits has a length in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        if size(mid) <= space:
            low = mid
        else:
            high = mid - 1
    return slice_series(series, 0, low), slice_series(series, low, n)


def plan_requests(
    update: Update,
    series: Sequence[SeriesUpdate] | None,
    details: bool,
    *,
    envelope_bytes: tuple[int, int],
    cap: int,
) -> list[Part]:
    """Split ``series`` (+ details) into requests whose bodies fit the cap.

    Series stay in order; a series larger than one request is cut into
    offset-contiguous chunks, each in its own request (a JSON object
    cannot name a series twice). Only the first request carries details.

    Args:
        update: the update whose series are split (when ``series`` is ``None``).
        series: the series to split, or ``None`` for all of ``update.series``.
        details: whether the first request carries the details.
        envelope_bytes: the size of a body with no series, (without details,
            with details), bytes.
        cap: the largest body, bytes.
    """
    chosen = tuple(update.series or ()) if series is None else tuple(series)
    slack = len('"series":{}') + _ENVELOPE_SLACK
    sizes = {False: envelope_bytes[0] + slack, True: envelope_bytes[1] + slack}
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
