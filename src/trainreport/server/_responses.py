"""Response memory: a server-wide budget for the large answers, taken before they are built.

A task's curves are read back by ``GET`` of the task, by ``POST .../writers``
(a reporter resuming: the stored task comes back with every point) and by
``GET .../series``. Building one such answer costs far more memory than its
JSON: the rows, three Python lists, the document, its text and its bytes
(about 450 bytes a point at the peak, measured on a 1 M-point task whose
JSON is 56 MB; docs/server.md, "Limits"). So every such request estimates
its cost from the point count (:func:`estimated_bytes`, one cheap read of the
stored lengths) *before* reading the points, and takes it from the
server's response budget (a ``_body.MemoryBudget``, :func:`hold_response`):

* it fits: the request goes on; the bytes go back once the response has been
  sent (:class:`HeldResponse`), or at once if building it failed;
* it does not fit: 503 ``server_busy`` with ``Retry-After``, nothing built;
* a response larger than the whole budget is served when nothing else holds
  any of it (alone), so a big task can always be read; memory stays bounded by
  the larger of the budget and one response.

The budget is touched only on the event loop's thread, so it needs no lock
(the same rule as the request body budget, ``_body``).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from trainreport.server._body import RETRY_AFTER_SECONDS, MemoryBudget
from trainreport.server._wire import ApiError

__all__ = [
    "BYTES_PER_POINT",
    "BASE_RESPONSE_BYTES",
    "HeldResponse",
    "estimated_bytes",
    "hold_response",
]

#: Peak memory of a response per stored point it reads, in bytes (measured: one ``GET`` of a
#: 1 M-point task alone took the server from 98 MiB to 528 MiB, ~450 B a point).
BYTES_PER_POINT = 448
#: What any response may cost besides its points (details, the document), in bytes.
BASE_RESPONSE_BYTES = 64 * 1024


def estimated_bytes(points: int) -> int:
    """The memory a response reading ``points`` stored points may take at its peak, in bytes."""
    return BASE_RESPONSE_BYTES + max(points, 0) * BYTES_PER_POINT


def hold_response(budget: MemoryBudget, size: int) -> Callable[[], None]:
    """Take ``size`` bytes from ``budget``; return the function that gives them back (once).

    ``budget`` is the server's response budget (made with
    ``alone_may_exceed=True``): a size over the whole budget is taken when
    nothing else is held.

    Raises:
        ApiError: 503 ``server_busy`` (``retry_after_seconds`` in the body)
            when the bytes do not fit now; nothing is taken.
    """
    if not budget.take(size):
        raise ApiError(
            503,
            "server_busy",
            "the server is building too many large responses at once (the curves of "
            "big tasks); retry shortly",
            {
                "retry_after_seconds": RETRY_AFTER_SECONDS,
                "estimated_bytes": size,
                "limit_bytes": budget.limit_bytes,
            },
        )
    given = False

    def give() -> None:
        nonlocal given
        if not given:
            given = True
            budget.give(size)

    return give


class HeldResponse(Response):
    """A built response that gives its bytes back to the budget once it has been sent.

    Sent, or not (the client went away): the bytes go back when the inner
    response's ``__call__`` ends, however it ends.

    Args:
        inner: the response, already rendered.
        release: what :func:`hold_response` returned.
    """

    def __init__(self, inner: Response, release: Callable[[], None]) -> None:
        # Not Response.__init__: the inner response is rendered already.
        self._inner = inner
        self._release = release
        self.status_code = inner.status_code
        self.body = inner.body
        self.raw_headers = inner.raw_headers
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the inner response, then give the bytes back."""
        try:
            await self._inner(scope, receive, send)
        finally:
            self._release()
