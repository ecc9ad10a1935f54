"""A stand-in for CUDA tensors and the part of torch ``trainreport._record._device`` uses.

No GPU is needed: :class:`FakeTorch` records every call with the thread that
made it, so a test can assert that the training thread never called
``.item()`` or a synchronize, and it decides when a "copy" completes
(:meth:`FakeTorch.complete`). A stacked tensor takes its values at the call
(as the stack kernel, ordered on the stream before any later in-place
change, does); the host copy holds them, readable once its event completed.
Each thread has a current device (0 until ``torch.cuda.device(i)`` sets it,
as in CUDA); an event query and a read note it next to the copy's own device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from trainreport._record import _device


@attrs.frozen
class FakeDevice:
    """``torch.device``: a type and an index (hashable)."""

    type: str = "cuda"
    index: int = 0


class FakeTensor:
    """A one-element tensor on a fake device (or a stacked vector of them)."""

    def __init__(
        self,
        torch: FakeTorch,
        values: list[float],
        device: FakeDevice,
        dtype: str = "float32",
    ) -> None:
        self._torch = torch
        self.values = values
        self.device = device
        self.dtype = dtype

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def numel(self) -> int:
        return len(self.values)

    def item(self) -> float:
        self._torch.note("item")
        return self.values[0]

    def detach(self) -> FakeTensor:
        self._torch.note("detach")
        return FakeTensor(self._torch, self.values, self.device, self.dtype)  # a view: shared

    def reshape(self, shape: tuple[int, ...]) -> FakeTensor:
        return FakeTensor(self._torch, self.values, self.device, self.dtype)

    def to(self, dtype: str) -> FakeTensor:
        self._torch.note("to")
        if self._torch.fail_on == "to":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return FakeTensor(self._torch, list(self.values), self.device, dtype)

    def add_(self, amount: float) -> FakeTensor:
        """In place, as a later optimizer step changes a tensor."""
        self.values[0] += amount
        return self


class FakeHost:
    """A pinned host tensor: a copy's destination."""

    def __init__(self, torch: FakeTorch, n: int, dtype: str, pin_memory: bool) -> None:
        self._torch = torch
        self.n = n
        self.dtype = dtype
        self.pin_memory = pin_memory
        self.values: list[float] | None = None
        self.event: FakeEvent | None = None
        #: The device the copy came from (set by :meth:`copy_`).
        self.device: FakeDevice | None = None

    def copy_(self, source: FakeTensor, non_blocking: bool = False) -> FakeHost:
        self._torch.note("copy_", non_blocking=non_blocking)
        if self._torch.fail_on == "copy_":
            raise RuntimeError("CUDA error: device-side assert triggered")
        self.values = list(source.values)
        self.device = source.device
        self._torch.hosts.append(self)
        return self

    def tolist(self) -> list[float]:
        self._torch.note("tolist", **self._torch.devices(self.device))
        assert self.values is not None
        return list(self.values)


class FakeEvent:
    """``torch.cuda.Event``: complete when the test says so."""

    def __init__(self, torch: FakeTorch) -> None:
        self._torch = torch
        self.done = False
        self.stream: object = None
        #: The device of the stream it was recorded on.
        self.device: FakeDevice | None = None

    def record(self, stream: tuple[str, FakeDevice | None]) -> None:
        self._torch.note("record")
        self.stream = stream
        self.device = stream[1]
        self._torch.events.append(self)

    def query(self) -> bool:
        self._torch.note("query", **self._torch.devices(self.device))
        if self._torch.fail_on == "query":
            raise RuntimeError("CUDA error: unspecified launch failure")
        return self.done

    def synchronize(self) -> None:
        self._torch.note("synchronize")
        self.done = True


class _Cuda:
    def __init__(self, torch: FakeTorch) -> None:
        self._torch = torch

    def Event(self) -> FakeEvent:  # noqa: N802 - torch's name
        return FakeEvent(self._torch)

    def current_stream(self, device: FakeDevice | None = None) -> tuple[str, FakeDevice | None]:
        self._torch.note("current_stream")
        return ("stream", device)

    @contextmanager
    def device(self, index: int | None) -> Iterator[None]:
        """``torch.cuda.device``: the calling thread's current device, for the block."""
        local = self._torch.local
        before = getattr(local, "device", 0)
        if index is not None and index >= 0:
            local.device = index
        try:
            yield
        finally:
            local.device = before

    def synchronize(self, device: object = None) -> None:
        self._torch.note("synchronize")


class FakeTorch:
    """The torch functions ``_device`` calls, recording each call and its thread."""

    float64 = "float64"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.events: list[FakeEvent] = []
        self.hosts: list[FakeHost] = []
        self.cuda = _Cuda(self)
        #: The name of a call that raises (a device error), or None.
        self.fail_on: str | None = None
        #: Per thread: ``device``, the current device's index (0 until set).
        self.local = threading.local()

    def note(self, name: str, **details: Any) -> None:
        self.calls.append((name, threading.current_thread().name, details))

    def devices(self, own: FakeDevice | None) -> dict[str, int | None]:
        """A call's details: the calling thread's current device and the object's own."""
        current = getattr(self.local, "device", 0)
        return {"current": current, "own": None if own is None else own.index}

    def calls_on(self, thread: str) -> list[str]:
        """The names of the calls made on ``thread``."""
        return [name for name, on, _ in self.calls if on == thread]

    def tensor(self, value: float, *, device: int = 0, dtype: str = "float32") -> FakeTensor:
        """A one-element tensor on ``cuda:<device>``."""
        return FakeTensor(self, [value], FakeDevice("cuda", device), dtype)

    def stack(self, tensors: list[FakeTensor]) -> FakeTensor:
        self.note("stack")
        if self.fail_on == "stack":
            raise RuntimeError("CUDA error: out of memory")
        assert len({t.device for t in tensors}) == 1, "stack across devices"
        return FakeTensor(self, [t.values[0] for t in tensors], tensors[0].device, tensors[0].dtype)

    def empty(self, n: int, *, dtype: str, pin_memory: bool = False) -> FakeHost:
        self.note("empty", pin_memory=pin_memory)
        return FakeHost(self, n, dtype, pin_memory)

    def complete(self) -> None:
        """Every copy made so far has completed (the device caught up)."""
        for event in self.events:
            event.done = True


def install(monkeypatch: Any, torch: FakeTorch | None = None) -> FakeTorch:
    """Make ``trainreport._record._device`` use a :class:`FakeTorch` (returned)."""
    fake = torch if torch is not None else FakeTorch()
    getter: Callable[[], Any] = lambda: fake  # noqa: E731
    monkeypatch.setattr(_device, "_torch", getter)
    return fake
