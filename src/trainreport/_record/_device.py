"""Device values: a report's CUDA tensors read without a device sync on the training thread.

The rule (docs/design.md#device-values): a metric value that is a one-element
tensor on a CUDA device (``tensor.is_cuda``, ROCm included; other
accelerators, ``mps``, ``xpu``, ..., are converted with ``.item()`` as CPU
tensors are) is
never converted with ``.item()`` on the caller's thread, which would wait for
every kernel queued so far. Instead :func:`gather_to_host`, on the training
thread, per device:

1. stacks the device's values into one tensor (``torch.stack`` of the
   detached 0-d views, one small kernel; then cast to float64, which holds
   bf16, fp16, fp32 and int32 values exactly, as the store does);
2. copies it with ``non_blocking=True`` into a pinned host tensor (torch's
   caching host allocator reuses the pinned blocks);
3. records a ``torch.cuda.Event`` on that device's current stream.

The report is queued as a :class:`DeviceReport`, whose device values are the
placeholder :data:`ON_DEVICE` until the reporter thread finds every event
complete (``event.query()``, which never waits) and fills them in
(:meth:`PendingValues.fill`), each query and read with the copy's device
current (``torch.cuda.device``: the reporter thread's own is 0, and a CUDA
call there would create a context on GPU 0 from every rank). The copies are
ordered on each stream after the kernels that produced the values, and the
stack is a new tensor, so a value changed in place after the call is
recorded as it was at the call. A value produced on another stream must be
synchronised to the current one by the caller, as for any use of it
(torch's stream rule).

Nothing here imports torch: it is taken from ``sys.modules`` (a CUDA tensor
exists, so torch is imported), through :func:`_torch`, the one seam the
tests replace with a stand-in.

A failure (torch raising in the gather, the copy or the event; a sticky CUDA
error) never reaches the training thread: the values are dropped, counted
under ``device_values`` and logged once, on the reporter thread. No fallback
to ``.item()``: after a device error it would raise too, and it is the sync
this module exists to avoid.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from trainreport._logging import describe_exception

__all__ = [
    "DEVICE_POLL_SECONDS",
    "ON_DEVICE",
    "DeviceReport",
    "PendingValues",
    "await_device_values",
    "device_head",
    "gather_to_host",
    "give_up_pending",
    "is_device_scalar",
]

#: How often (seconds) the reporter thread looks again at a device report at the
#: head of the queue while something waits for it (a flush, close, the run's first
#: point, an event report behind it, a journal record it kept points out of).
DEVICE_POLL_SECONDS: Final = 0.002


class _Placeholder(enum.Enum):
    ON_DEVICE = "ON_DEVICE"

    def __repr__(self) -> str:
        return "<ON_DEVICE>"


#: Stands in a queued metrics dict for a value still being copied off the device.
ON_DEVICE: Final[object] = _Placeholder.ON_DEVICE


def _torch() -> Any:
    """The torch module (imported: a tensor was passed). The test seam."""
    torch = sys.modules.get("torch")
    if torch is None:  # a tensor-like object from elsewhere claiming a cuda device
        import torch  # noqa: PLC0415 - only ever imported when a CUDA tensor was passed
    return torch


def is_device_scalar(value: object) -> bool:
    """Whether ``value`` is a one-element CUDA tensor (``is_cuda``, ROCm included). Never raises.

    One attribute lookup for a CPU tensor or a numpy scalar (``Tensor.is_cuda``
    is a plain ``bool`` property; ``.device`` would build a ``torch.device``
    object); plain numbers never get here.
    """
    try:
        return getattr(value, "is_cuda", False) is True and value.numel() == 1  # type: ignore[attr-defined]
    except Exception:
        return False


class _Copy:
    """One device's values on their way to host memory.

    ``index``: the device's index (``None`` when it has none), made current
    around the reporter thread's query and read (:func:`_on_device`).
    """

    __slots__ = ("event", "host", "index", "keys")

    def __init__(self, keys: list[Any], host: Any, event: Any, index: int | None) -> None:
        self.keys = keys
        self.host = host
        self.event = event
        self.index = index


def _on_device(index: int | None) -> Any:
    """``torch.cuda.device(index)``: the copy's device current on the reporter thread.

    That thread's current device is 0: a CUDA call there for an event of
    ``cuda:1`` would create a context on GPU 0 (hundreds of MiB) from every
    rank of a multi-GPU job. torch restores the thread's device on exit
    without creating a context for it.
    """
    return _torch().cuda.device(index)


class PendingValues:
    """A report's device values on their way to host memory (one copy per device).

    Built on the training thread by :func:`gather_to_host`; read on the
    reporter thread (:meth:`ready`, :meth:`fill`). Never raises.

    Args:
        target: the queued metrics dict the values belong to (its device values
            are :data:`ON_DEVICE`).
        copies: one per device.
        error: why the gather failed on the training thread, or ``None``.
    """

    __slots__ = ("_copies", "error", "target")

    def __init__(self, target: dict[Any, Any], copies: list[_Copy], error: str | None) -> None:
        self.target = target
        self._copies = copies
        #: Why the values are lost (``None`` while they are not).
        self.error = error

    @property
    def keys(self) -> list[Any]:
        """The metric names whose values are on the device."""
        return [key for key, value in self.target.items() if value is ON_DEVICE]

    def ready(self) -> bool:
        """True once every copy has completed, or failed (``event.query()``: never waits)."""
        if self.error is not None:
            return True
        try:
            for copy in self._copies:
                with _on_device(copy.index):
                    if not copy.event.query():
                        return False
        except Exception as exc:  # a device error: the values are lost, never retried
            self.error = f"event query failed: {describe_exception(exc)}"
        return True

    def give_up(self, reason: str) -> None:
        """Lose the values that are not ready (close's deadline): :meth:`fill` drops them."""
        if not self.ready():
            self.error = reason

    def fill(self) -> int:
        """Put the host values into :attr:`target` (or remove lost ones); call once :meth:`ready`.

        Returns:
            How many values were lost (removed from the dict). Never raises.
        """
        target = self.target
        if self.error is None:
            try:
                for copy in self._copies:
                    with _on_device(copy.index):
                        values = copy.host.tolist()
                    for key, value in zip(copy.keys, values, strict=True):
                        target[key] = value
            except Exception as exc:
                self.error = f"reading the copy failed: {describe_exception(exc)}"
        lost = 0
        if self.error is not None:
            for key in self.keys:
                del target[key]
                lost += 1
        self._copies = []  # the pinned buffers go back to torch's cache
        return lost


class DeviceReport:
    """A queued report (either form) whose metrics wait on :attr:`pending`.

    Args:
        pending: the values being copied.
        report: the report itself (its metrics dict is ``pending.target``).
    """

    __slots__ = ("pending", "report")

    def __init__(self, pending: PendingValues, report: Any) -> None:
        self.pending = pending
        self.report = report


def gather_to_host(target: dict[Any, Any], keys: Sequence[Any]) -> PendingValues:
    """Start copying ``target[key]`` for each key (device tensors) to host memory.

    On the caller's thread: per device one stack, one cast, one
    ``non_blocking`` copy into pinned memory and one event recorded on the
    device's current stream; no ``.item()``, no synchronize. The values in
    ``target`` become :data:`ON_DEVICE` (so the dict holds no tensor).

    Never raises an ``Exception``: a failure is carried in
    :attr:`PendingValues.error` and counted on the reporter thread.
    """
    by_device: dict[Any, list[Any]] = {}
    tensors: dict[Any, Any] = {}
    for key in keys:
        value = target[key]
        target[key] = ON_DEVICE
        tensors[key] = value
        try:
            device = value.device
        except Exception:
            device = None
        by_device.setdefault(device, []).append(key)
    copies: list[_Copy] = []
    try:
        torch = _torch()
        float64 = torch.float64
        for device, group in by_device.items():
            views = [tensors[key].detach().reshape(()) for key in group]
            if len({view.dtype for view in views}) == 1:
                gathered = torch.stack(views).to(float64)
            else:  # mixed dtypes: each cast first, so no promotion rounds an int
                gathered = torch.stack([view.to(float64) for view in views])
            host = torch.empty(len(group), dtype=float64, pin_memory=True)
            host.copy_(gathered, non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            copies.append(_Copy(group, host, event, getattr(device, "index", None)))
    except Exception as exc:
        return PendingValues(target, [], f"copy failed: {describe_exception(exc)}")
    return PendingValues(target, copies, None)


def device_head(queue: Sequence[object]) -> DeviceReport | None:
    """The queue's first report when it is a device report, else ``None``. Never raises.

    After a drain of the reporter thread (the store seeded), a device report
    at the head is one whose copy had not completed: the drain stopped
    there, and what is behind it waits too. Its copy may have completed
    since; the next drain takes it.
    """
    try:
        head = queue[0]
    except IndexError:
        return None
    return head if type(head) is DeviceReport else None


def give_up_pending(queue: Sequence[object], reason: str) -> None:
    """Lose every queued report's device values not ready now (close's deadline)."""
    for item in list(queue):
        if type(item) is DeviceReport:
            item.pending.give_up(reason)


def await_device_values(
    queue: Sequence[object],
    wait: Callable[[float], object],
    *,
    until: float,
    now: Callable[[], float],
) -> None:
    """Close: wait until every queued report's device values are ready, or ``until`` passes.

    Then the values still not ready are given up (:meth:`PendingValues.give_up`):
    the drain that follows applies their reports without them (counted drops).

    Args:
        queue: the report queue.
        wait: waits about the given seconds (an ``Event.wait``: a wake cuts it short).
        until: when to stop waiting (``now``'s clock, seconds).
        now: the clock of ``until``.
    """
    while any(type(item) is DeviceReport and not item.pending.ready() for item in list(queue)):
        left = until - now()
        if left <= 0:
            give_up_pending(queue, "unfinished at close's deadline")
            return
        wait(min(DEVICE_POLL_SECONDS, left))
