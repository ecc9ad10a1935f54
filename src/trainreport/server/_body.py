"""Reading request bodies within the limits: bytes received, bytes inflated, a server-wide budget.

Three limits apply to every body (``docs/server.md``, "Limits"):

* ``max_body_bytes``: the bytes received (after transfer decoding, before
  gzip); a ``Content-Length`` over it is refused before anything is read, a
  chunked body is counted as it streams;
* ``max_decompressed_bytes``: a gzip body's size once inflated. Inflating runs
  in steps of at most :data:`INFLATE_STEP_BYTES` output bytes, each checked
  against the limit, so a bomb never expands beyond the limit in memory;
* ``body_budget_bytes``: the bytes of request bodies (after decompression)
  that the whole server holds at once. Every request takes its bytes from the
  budget as they arrive and gives them back when its handler is done; a
  request that would go over it gets 503 with ``Retry-After`` (it frees what
  it took, so nobody waits on anybody: no deadlock). Many bodies that are
  each within the limits can therefore not add up to exhaust memory.

The budget is touched only on the event loop's thread, so it needs no lock.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import AsyncIterator

import attrs
from starlette.requests import ClientDisconnect, Request

from trainreport._wire._protocol import ENCODING_GZIP
from trainreport.server._wire import ApiError

__all__ = ["INFLATE_STEP_BYTES", "RETRY_AFTER_SECONDS", "BodyLimits", "MemoryBudget", "held_body"]

#: Largest output of one decompression step, in bytes.
INFLATE_STEP_BYTES = 64 * 1024
#: The ``Retry-After`` of a 503 for an exhausted body budget, in seconds.
RETRY_AFTER_SECONDS = 1


@attrs.frozen
class BodyLimits:
    """Per-request body limits, in bytes (each >= 1).

    Args:
        max_body_bytes: bytes received, before decompression.
        max_decompressed_bytes: bytes of a gzip body after decompression.
    """

    max_body_bytes: int
    max_decompressed_bytes: int


class MemoryBudget:
    """Bytes held in memory at once, across every request: request bodies, or responses.

    One rule for both budgets of the server (``body_budget_bytes`` here,
    ``max_response_memory_bytes`` in ``_responses``): a take fits when the held
    bytes plus it stay within the limit.

    Args:
        limit_bytes: the budget, in bytes (>= 1).
        alone_may_exceed: a take larger than the limit still fits when nothing
            else is held (responses: a big task can always be read); bodies
            never exceed it.

    Not thread-safe: used from the event loop only.
    """

    def __init__(self, limit_bytes: int, *, alone_may_exceed: bool = False) -> None:
        self.limit_bytes = limit_bytes
        self.alone_may_exceed = alone_may_exceed
        self.held_bytes = 0

    def take(self, size: int) -> bool:
        """Take ``size`` bytes if they fit; ``False`` (nothing taken) if they do not."""
        alone = self.alone_may_exceed and not self.held_bytes
        if not alone and self.held_bytes + size > self.limit_bytes:
            return False
        self.held_bytes += size
        return True

    def give(self, size: int) -> None:
        """Give back ``size`` bytes taken before."""
        self.held_bytes -= size


class _Hold:
    """What one request took from the budget; given back once, at the end."""

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget
        self.size = 0

    def take(self, size: int) -> None:
        if not self._budget.take(size):
            raise ApiError(
                503,
                "server_busy",
                "the server holds too many request bodies at once; retry shortly",
                {"retry_after_seconds": RETRY_AFTER_SECONDS},
            )
        self.size += size

    def release(self) -> None:
        self._budget.give(self.size)
        self.size = 0


def _too_large(limit: int, what: str) -> ApiError:
    return ApiError(
        413,
        "body_too_large",
        f"the request body exceeds {limit} bytes {what}; split it",
        {"limit_bytes": limit},
    )


@contextlib.asynccontextmanager
async def held_body(
    request: Request, limits: BodyLimits, budget: MemoryBudget
) -> AsyncIterator[bytearray]:
    """The request's body (decompressed), held against ``budget`` until the block ends.

    Use the body (parse, validate) inside the ``async with`` block; its bytes
    go back to the budget when the block exits, however it exits.

    Raises:
        ApiError: 400 (bad Content-Length, corrupt or truncated gzip, client
            gone), 413 (a limit), 415 (an encoding other than gzip), 503 (the
            budget is exhausted; ``retry_after_seconds`` in the body).
    """
    hold = _Hold(budget)
    try:
        yield await _read(request, limits, hold)
    finally:
        hold.release()


async def _read(request: Request, limits: BodyLimits, hold: _Hold) -> bytearray:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_bytes = int(declared)
        except ValueError:
            raise ApiError(400, "bad_request", "Content-Length is not an integer") from None
        if declared_bytes > limits.max_body_bytes:
            raise _too_large(limits.max_body_bytes, "received")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", ENCODING_GZIP, ""):
        raise ApiError(
            415, "unsupported_encoding", f"Content-Encoding {encoding!r}: only gzip is accepted"
        )
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == ENCODING_GZIP else None
    received = 0
    body = bytearray()
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limits.max_body_bytes:
                raise _too_large(limits.max_body_bytes, "received")
            if inflater is None:
                hold.take(len(chunk))
                body += chunk
                continue
            data = chunk
            while True:  # until this chunk is consumed and no output is pending
                step = min(limits.max_decompressed_bytes - len(body) + 1, INFLATE_STEP_BYTES)
                out = inflater.decompress(data, step)
                if len(body) + len(out) > limits.max_decompressed_bytes:
                    raise _too_large(limits.max_decompressed_bytes, "after decompression")
                hold.take(len(out))
                body += out
                data = inflater.unconsumed_tail
                if inflater.eof:
                    if inflater.unused_data:
                        raise ApiError(400, "bad_request", "data after the end of the gzip stream")
                    break
                if not data and len(out) < step:
                    break
    except zlib.error as exc:
        raise ApiError(400, "bad_request", f"corrupt gzip body: {exc}") from None
    except ClientDisconnect:
        raise ApiError(400, "bad_request", "the client disconnected mid-body") from None
    if inflater is not None and not inflater.eof:
        raise ApiError(400, "bad_request", "truncated gzip body")
    return body
