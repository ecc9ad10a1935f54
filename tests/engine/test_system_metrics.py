"""The system stream (docs/design.md#the-system-stream): names, units, cadence, absence, rank."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import curve, drive, held
from trainreport import MemorySink, Reporter, ReportingConfig
from trainreport._engine import _worker as worker_module
from trainreport._engine._system import SystemSampler, load_nvml, load_psutil
from trainreport.testing import FakeClock, capture_events

pytestmark = pytest.mark.timeout(60)


class FakeProcess:
    def cpu_percent(self, interval: float | None = None) -> float:
        assert interval is None, "a blocking cpu_percent would stall the reporter thread"
        return 150.0

    def memory_info(self) -> SimpleNamespace:
        return SimpleNamespace(rss=123_456_789)


class FakePsutil:
    """The psutil calls the sampler makes (all non-blocking)."""

    def __init__(self) -> None:
        self.cpu_calls: list[float | None] = []

    def Process(self, pid: int) -> FakeProcess:  # noqa: N802 - psutil's name
        return FakeProcess()

    def cpu_percent(self, interval: float | None = None) -> float:
        self.cpu_calls.append(interval)
        return 42.5

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(percent=61.0)


class FakeNvml:
    """Two GPUs; the second has no power reading (NVML_ERROR_NOT_SUPPORTED)."""

    NVML_TEMPERATURE_GPU = 0

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=90 + h, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=(h + 1) * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        if h == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 350_500  # milliwatts

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        return 60 + h


def test_names_and_units_of_one_sample() -> None:
    """CPU %, memory %, RSS bytes; per GPU index: utilisation %, memory bytes, watts, °C."""
    sampler = SystemSampler(1.0, clock=FakeClock(), psutil=FakePsutil(), nvml=FakeNvml())
    assert {
        "cpu_percent": 42.5,
        "memory_used_percent": 61.0,
        "process_cpu_percent": 150.0,
        "process_rss_bytes": 123_456_789.0,
        "gpu0_utilization_percent": 90.0,
        "gpu0_memory_used_bytes": float(2**30),
        "gpu0_power_watts": 350.5,
        "gpu0_temperature_celsius": 60.0,
        "gpu1_utilization_percent": 91.0,
        "gpu1_memory_used_bytes": float(2**31),
        "gpu1_temperature_celsius": 61.0,
    } == sampler.sample()


def test_cpu_percent_never_blocks() -> None:
    """Every psutil.cpu_percent call is non-blocking (interval=None); the first is a primer."""
    psutil = FakePsutil()
    sampler = SystemSampler(1.0, clock=FakeClock(), psutil=psutil, nvml=None)
    sampler.sample()
    assert [None, None] == psutil.cpu_calls


def test_sampling_cadence_follows_the_interval_on_the_injected_clock() -> None:
    """Due one interval after start, then every interval; a late call does not make a burst."""
    clock = FakeClock()
    sampler = SystemSampler(1.0, clock=clock, psutil=FakePsutil(), nvml=None)
    start = clock()
    taken = []
    for _ in range(40):  # 4 s in 0.1 s steps
        clock.advance(0.1)
        if sampler.sample_if_due(clock()) is not None:
            taken.append(round(clock() - start, 1))
    assert [1.0, 2.0, 3.0, 4.0] == taken
    clock.advance(10.0)  # the thread was busy: one sample, not ten
    assert sampler.sample_if_due(clock()) is not None
    assert sampler.sample_if_due(clock() + 0.5) is None
    assert clock() + 1.0 == sampler.next_due()


def test_streams_are_absent_without_the_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil and pynvml not importable: no system series, one INFO event, no error."""
    monkeypatch.setitem(sys.modules, "psutil", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert load_psutil() is None
    assert load_nvml() is None
    clock = FakeClock()
    sink = MemorySink()
    reporter = Reporter(sink, ReportingConfig(system_metrics_seconds=1.0), clock=clock, rank=0)
    with capture_events() as events:
        worker = drive(reporter)
        for step in range(1, 4):
            reporter.report_train_step(step=step, metrics={"loss": 1.0})
            clock.advance(1.5)
            worker.cycle()
        reporter.report_completed()
        assert reporter.close(timeout=5)
    metrics = held(sink)["status_details"]["metrics"]
    assert [] == [name for name in metrics if name.startswith("system_")]
    partial = [e for e in events if e["event"] == "trainreport.system_metrics_partial"]
    assert 1 == len(partial)
    assert "info" == partial[0]["log_level"]
    assert [] == [e for e in events if e["log_level"] in ("warning", "error")]


def test_series_are_recorded_at_the_last_training_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample is stored as ``system_*`` points at the last training step applied."""
    monkeypatch.setattr(worker_module, "load_psutil", FakePsutil)
    monkeypatch.setattr(worker_module, "load_nvml", FakeNvml)
    clock = FakeClock()
    sink = MemorySink()
    config = ReportingConfig(system_metrics_seconds=1.0, min_report_interval_seconds=10.0)
    reporter = Reporter(sink, config, clock=clock, rank=0)
    worker = drive(reporter)
    for step in range(1, 7):
        reporter.report_train_step(step=step, metrics={"loss": 1.0})
        clock.advance(0.5)
        worker.cycle()
    assert reporter.close(timeout=5)
    assert [2, 4, 6] == [p[0] for p in curve(sink.task, "system_cpu_percent")]
    assert [350.5, 350.5, 350.5] == [p[2] for p in curve(sink.task, "system_gpu0_power_watts")]
    assert "system_gpu1_power_watts" not in held(sink)["status_details"]["metrics"]


def test_reporter_thread_wakes_for_the_next_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a 10 s send interval and a 1 s sample interval, the thread sleeps at most ~1 s."""
    monkeypatch.setattr(worker_module, "load_psutil", FakePsutil)
    monkeypatch.setattr(worker_module, "load_nvml", lambda: None)
    clock = FakeClock()
    config = ReportingConfig(system_metrics_seconds=1.0, min_report_interval_seconds=10.0)
    reporter = Reporter(MemorySink(), config, clock=clock, rank=0)
    worker = drive(reporter)
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    worker.cycle()
    clock.advance(0.25)
    assert 0.75 == pytest.approx(worker.cycle())
    reporter.close(timeout=5)


@pytest.mark.parametrize(("rank", "samples"), [(0, True), (1, False)])
def test_only_the_reporting_rank_samples(
    monkeypatch: pytest.MonkeyPatch, rank: int, samples: bool
) -> None:
    """An inert reporter (rank 1) loads no library and samples nothing."""
    loaded: list[str] = []

    def fake_psutil() -> Any:
        loaded.append("psutil")
        return FakePsutil()

    monkeypatch.setattr(worker_module, "load_psutil", fake_psutil)
    monkeypatch.setattr(worker_module, "load_nvml", lambda: None)
    reporter = Reporter(MemorySink(), ReportingConfig(system_metrics_seconds=0.5), rank=rank)
    reporter.start()
    reporter.report_train_step(step=1, metrics={"loss": 1.0})
    reporter.close(timeout=5)
    assert (["psutil"] if samples else []) == loaded


def test_off_by_default() -> None:
    """No ``system_metrics_seconds``: no sampler, no library import."""
    reporter = Reporter(MemorySink(), rank=0)
    worker = drive(reporter)
    assert worker.system is None
    assert None is ReportingConfig().system_metrics_seconds
    reporter.close(timeout=5)


@pytest.mark.parametrize(
    ("text", "expected"), [("1.5", 1.5), ("0", 0.0), ("", None), ("off", None), ("None", None)]
)
def test_environment_variable(text: str, expected: float | None) -> None:
    """TRAINREPORT_SYSTEM_METRICS_SECONDS: seconds, or empty/off/none for off."""
    env = {"TRAINREPORT_SYSTEM_METRICS_SECONDS": text}
    assert expected == ReportingConfig.from_env(env).system_metrics_seconds
