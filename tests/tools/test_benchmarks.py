"""The benchmark scripts run (issue #5): tiny sizes, and no timed assertions anywhere.

``benchmarks/report.py`` is run in a subprocess with ``--quick`` on a tiny N
(no peers, a one-second load test, a one-second read timeout for the
synchronous design), writing its document to a temporary file; the micro
benchmark files are run under pytest with ``--benchmark-disable``. What is
checked is that they finish and print what they promise, never how fast.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
MODES = ["healthy (peers: local)", "slow", "hanging", "down"]


def extrapolate_cumulative(per_step: list[float], n: int) -> float:
    """``benchmarks/_figures.extrapolate_cumulative`` (the benchmarks are not a package)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return float(importlib.import_module("_figures").extrapolate_cumulative(per_step, n))


def _cells(stdout: str, figure: str) -> list[list[str]]:
    """The table rows of ``figure`` (split into cells) from the report's stdout."""
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in stdout.splitlines()
        if line.startswith(f"| {figure}")
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_report_quick_prints_the_table_with_trainreport_rows_and_writes_the_doc(
    tmp_path: Path,
) -> None:
    """report.py --quick on 200 steps exits 0, prints trainreport cells per mode, writes a doc."""
    pytest.importorskip("uvicorn")  # the report starts the reference server
    doc = tmp_path / "performance.md"
    result = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "report.py"),
            "--quick",
            "--steps",
            "200",
            "--no-peers",
            "--load-seconds",
            "1",
            "--sync-read-timeout",
            "1",
            "--output",
            str(doc),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )

    assert 0 == result.returncode, result.stderr[-4000:]
    header = _cells(result.stdout, "figure")[0]
    assert ["figure", "N", "server", "target", "trainreport"] == header[:5]
    p50 = _cells(result.stdout, "report call p50")
    assert MODES == [row[2] for row in p50]
    assert all(("met" in row[4]) or ("missed" in row[4]) for row in p50)
    assert ["not run (--no-peers)"] * 3 == p50[0][-3:]
    slowdown = _cells(result.stdout, "loop slowdown")
    assert MODES == [row[2] for row in slowdown]
    assert ["16", "64"] == [
        line.split("|")[1].strip()
        for line in result.stdout.splitlines()
        if line.startswith(("| 16 ", "| 64 "))
    ]
    embedded = _cells(result.stdout, "trainreport |")
    assert 1 == len(embedded)
    assert "200" == embedded[0][1]
    assert re.fullmatch(r"\d+\.\d\dx \((met|missed): < 1\.5x\)", embedded[0][4])
    journal = [line for line in result.stdout.splitlines() if line.startswith("| 200 | ")]
    assert 1 == len(journal)
    assert re.search(r"\(([+-]\d\.\d{3}), (met|missed)\)", journal[0])
    text = doc.read_text(encoding="utf-8")
    for heading in (
        "## Machine",
        "## Read this first",
        "## Results",
        "## The embedded default (FileSink run log)",
        "## The journal's cost on HttpSink",
        "## Targets",
    ):
        assert heading in text
    assert "min_report_interval_seconds = 10 ms" in text
    assert "--steps 200" in text


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_micro_benchmark_files_run_under_pytest_with_benchmarking_disabled() -> None:
    """Every benchmarks/bench_*.py collects and passes under pytest --benchmark-disable."""
    pytest.importorskip("uvicorn")  # bench_bytes.py starts the reference server
    files = sorted(str(p.relative_to(ROOT)) for p in BENCHMARKS.glob("bench_*.py"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *files,
            "--benchmark-disable",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )

    assert 0 == result.returncode, result.stdout[-4000:]
    assert "passed" in result.stdout.splitlines()[-1]


def test_extrapolation_recovers_a_quadratic_cumulative_cost() -> None:
    """A per-step cost growing linearly (cumulative: quadratic) is extrapolated exactly."""
    per_step = [1.0 + 0.5 * k for k in range(1, 301)]  # step k costs 1 + k/2

    expected = 1000 * 1.0 + 0.5 * 1000 * 1001 / 2  # the exact sum over 1000 steps
    assert expected == pytest.approx(extrapolate_cumulative(per_step, 1000), rel=1e-6)


def test_extrapolation_of_a_few_steps_is_linear_in_the_step_count() -> None:
    """Under 10 steps (a hanging server: each call waits its timeout), the total scales with N."""
    assert 10_000.0 == pytest.approx(extrapolate_cumulative([10.0, 10.0], 1000))


def test_report_keeps_the_hand_written_sections_of_the_previous_document() -> None:
    """Sections marked as written by hand survive a regeneration, whole and in order."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    report = importlib.import_module("report")
    previous = "\n".join(
        [
            "# Performance",
            "## Results",
            "generated",
            "## Profile (issue 9)",
            "",
            report.HAND_WRITTEN,
            "",
            "by hand, first",
            "",
            "## Targets",
            "generated",
            "## Replicas (issue 15)",
            report.HAND_WRITTEN,
            "by hand, second",
        ]
    )
    kept = report.hand_written_sections(previous)
    assert kept == [
        f"## Profile (issue 9)\n\n{report.HAND_WRITTEN}\n\nby hand, first",
        f"## Replicas (issue 15)\n{report.HAND_WRITTEN}\nby hand, second",
    ]
    real = report.hand_written_sections((ROOT / "docs" / "performance.md").read_text("utf-8"))
    assert [section.splitlines()[0] for section in real] == [
        "## Long runs",
        "## Reference server under load: profile and fixes (issue 9)",
        "## Replicas on PostgreSQL, a replica killed (issue 15)",
        "## The journal's cost on HttpSink, three sittings (issue 12)",
        "## What limits the missed targets (issue 14)",
        "## The chart page (issue 24)",
        "## Reporter ingest throughput (issue 23)",
        "## Resuming and reading a long run (issue 23)",
    ]


def test_gpu_sync_benchmark_exits_cleanly_without_cuda() -> None:
    """``python benchmarks/bench_gpu_sync.py`` on a machine without CUDA says so and exits 0."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_gpu_sync.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert 0 == result.returncode, result.stderr[-2000:]
    assert "no CUDA device here" in result.stdout
    assert "nothing measured" in result.stdout
