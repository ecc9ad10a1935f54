"""The system stream: CPU, memory and every GPU of the node, sampled on the reporter thread.

Opt-in (``ReportingConfig.system_metrics_seconds``, docs/design.md#the-system-stream).
The reporter thread, after its drain, asks :meth:`SystemSampler.sample_if_due`;
when the interval has passed it reads the libraries below (each call returns
at once: ``psutil.cpu_percent(interval=None)`` compares with the previous
call, NVML reads counters the driver keeps) and records one ``system``
metrics report at the last training step. The training thread does nothing.

Series (stored as ``system_<name>``; GPUs named by their NVML index):

================================  =========================================
name                              what, unit
================================  =========================================
``cpu_percent``                   host CPU busy since the last sample, % of all cores
``memory_used_percent``           host memory in use, %
``process_cpu_percent``           this process's CPU since the last sample, % of one core
``process_rss_bytes``             this process's resident memory, bytes
``gpu<i>_utilization_percent``    GPU ``i`` busy (NVML), %
``gpu<i>_memory_used_bytes``      GPU ``i`` memory in use, bytes
``gpu<i>_power_watts``            GPU ``i`` power draw, W
``gpu<i>_temperature_celsius``    GPU ``i`` temperature, °C
================================  =========================================

``psutil`` and ``nvidia-ml-py`` (the ``system`` extra) are optional: without
one (not installed, no NVIDIA driver) its streams are absent, with one INFO
event ``trainreport.system_metrics_partial`` naming what is missing; never an
error. A reading that fails is left out of that sample.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from trainreport._logging import describe_exception, get_logger

__all__ = ["MIN_SAMPLE_WAIT_SECONDS", "SystemSampler", "load_nvml", "load_psutil"]

_log = get_logger()

#: The reporter thread waits at least this long (seconds) for the next sample: an
#: interval of 0 samples at every wake, never in a busy loop.
MIN_SAMPLE_WAIT_SECONDS = 0.05


def load_psutil() -> Any | None:
    """``psutil``, or None when it cannot be imported."""
    try:
        return importlib.import_module("psutil")
    except Exception:
        return None


def load_nvml() -> Any | None:
    """``pynvml`` (nvidia-ml-py), initialised, or None without it or without a driver."""
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml


class SystemSampler:
    """Samples the system stream every ``interval`` seconds (reporter thread only).

    Args:
        interval: seconds between two samples (``0``: every call).
        clock: the scheduling clock (seconds); the first sample is due one
            interval after the sampler is made (the CPU counters then cover
            a whole interval).
        psutil: the ``psutil`` module, or None (no CPU or memory streams).
        nvml: an initialised ``pynvml`` module, or None (no GPU streams).

    Not thread-safe. Never raises.
    """

    def __init__(
        self,
        interval: float,
        *,
        clock: Callable[[], float],
        psutil: Any | None,
        nvml: Any | None,
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._psutil = psutil
        self._nvml = nvml
        self._next = clock() + interval
        self._process: Any = None
        self._gpus: list[tuple[int, Any]] = []
        self._failed: set[str] = set()
        missing = []
        if psutil is not None:
            try:
                self._process = psutil.Process(os.getpid())
                psutil.cpu_percent(interval=None)  # the first call starts the counters
                self._process.cpu_percent(interval=None)
            except Exception:
                self._psutil = None
        if self._psutil is None:
            missing.append("psutil")
        if nvml is not None:
            try:
                self._gpus = [
                    (i, nvml.nvmlDeviceGetHandleByIndex(i))
                    for i in range(nvml.nvmlDeviceGetCount())
                ]
            except Exception:
                self._nvml = None
        if self._nvml is None:
            missing.append("nvidia-ml-py (or an NVIDIA driver)")
        if missing:
            _log.info(
                "trainreport.system_metrics_partial",
                missing=missing,
                hint="pip install 'trainreport[system]' for CPU, memory and GPU streams",
            )

    def next_due(self) -> float:
        """When the next sample is due (the clock's time, seconds)."""
        return self._next

    def sample_if_due(self, now: float) -> dict[str, float] | None:
        """The sample, when one is due at ``now`` (the next one is then one interval on)."""
        if now < self._next:
            return None
        self._next += self.interval
        if self._next <= now:  # late (the thread was busy): the next one interval on, no burst
            self._next = now + self.interval
        return self.sample()

    def sample(self) -> dict[str, float]:
        """One reading of every stream available (names without the ``system_`` prefix)."""
        values: dict[str, float] = {}
        psutil = self._psutil
        if psutil is not None:
            self._read(values, "cpu_percent", lambda: psutil.cpu_percent(interval=None))
            self._read(values, "memory_used_percent", lambda: psutil.virtual_memory().percent)
            process = self._process
            self._read(values, "process_cpu_percent", lambda: process.cpu_percent(interval=None))
            self._read(values, "process_rss_bytes", lambda: process.memory_info().rss)
        for index, handle in self._gpus:
            self._read_gpu(values, f"gpu{index}_", handle)
        return values

    def _read_gpu(self, values: dict[str, float], prefix: str, handle: object) -> None:
        nvml: Any = self._nvml
        read = self._read
        read(
            values,
            prefix + "utilization_percent",
            lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
        )
        read(
            values, prefix + "memory_used_bytes", lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used
        )
        read(values, prefix + "power_watts", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        read(
            values,
            prefix + "temperature_celsius",
            lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        )

    def _read(self, values: dict[str, float], name: str, read: Callable[[], object]) -> None:
        try:
            value = read()
        except Exception as exc:  # e.g. NVML_ERROR_NOT_SUPPORTED for power on some boards
            if name not in self._failed:
                self._failed.add(name)
                _log.debug(
                    "trainreport.system_metric_unavailable",
                    metric=name,
                    error=describe_exception(exc),
                )
            return
        if isinstance(value, int | float) and not isinstance(value, bool):
            values[name] = float(value)
