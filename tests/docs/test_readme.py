"""The README's plain-loop examples (the shortest first, then the long one) run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainreport import read_task

ROOT = Path(__file__).resolve().parents[2]


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def plain_loop_example() -> str:
    examples = [b for b in python_blocks() if 'FileSink("trainreport-runs/example.log")' in b]
    assert 1 == len(examples)
    return examples[0]


def test_plain_loop_example_runs_and_writes_the_curves(tmp_path: Path) -> None:
    """Run the README's long plain-loop block in a fresh interpreter and read its run log."""
    example = plain_loop_example()
    subprocess.run([sys.executable, "-c", example], cwd=tmp_path, check=True, timeout=120)
    task = read_task(tmp_path / "trainreport-runs" / "example.log")
    details = task["status_details"]
    assert not (tmp_path / "trainreport-runs" / "example.json").exists()
    assert "completed" == task["status"]
    assert 200 == details["step"]
    assert 100.0 == details["percentage_done"]
    assert list(range(1, 201)) == [p["step"] for p in details["metrics"]["train_loss"]]
    assert [1] * 100 + [2] * 100 == [p["epoch"] for p in details["metrics"]["train_loss"]]
    assert [50, 100, 150, 200] == [p["step"] for p in details["metrics"]["val_loss"]]
    assert "ckpt/step-200" == details["checkpoint_path"]
    assert {"optimizer/lr": 0.1, "batch_size": 32} == details["hyperparameters"]
    assert ("done", False) == (details["phase"], "eta_seconds" in details)  # the run is over


# Ctrl-C at the 120th step: the loop's `math.exp` raises KeyboardInterrupt, as the
# interpreter's SIGINT handler would between two bytecodes of the loop. Only calls made
# by the example's own code (the `-c` script, "<string>") are counted, so what the
# imports call at start-up (`import random` calls `math.exp` when it first loads) cannot
# move the interrupt: the test depends on the example's loop alone.
_INTERRUPT_AT_STEP_120 = """
import itertools, math, sys
_exp, _calls = math.exp, itertools.count(1)
def _exp_interrupted(x):
    if sys._getframe(1).f_code.co_filename == "<string>" and next(_calls) == 120:
        raise KeyboardInterrupt
    return _exp(x)
math.exp = _exp_interrupted
"""


def test_plain_loop_example_reports_ctrl_c_as_cancelled_interrupted(tmp_path: Path) -> None:
    """The README's pattern (``except BaseException: report_error``) records Ctrl-C as a cancel.

    The example runs as written; Ctrl-C arrives during step 120. The process
    still dies of the KeyboardInterrupt (the example re-raises it).
    """
    example = plain_loop_example()
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_AT_STEP_120 + example],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    task = read_task(tmp_path / "trainreport-runs" / "example.log")
    details = task["status_details"]

    assert 0 != proc.returncode
    assert "KeyboardInterrupt" in proc.stderr
    assert ("cancelled", "interrupted", "done") == (
        task["status"],
        details.get("cancel_reason"),
        details["phase"],
    )
    assert ("error" not in details, 119) == (True, details["step"])


def shortest_example() -> str:
    examples = [b for b in python_blocks() if "Reporter.from_env() as reporter" in b]
    assert 1 == len(examples)
    return examples[0]


def test_the_shortest_example_comes_first_in_the_plain_loop_section() -> None:
    """The ``with Reporter.from_env()`` form is the section's first block, before the long one."""
    section = (ROOT / "README.md").read_text().split("## A plain training loop", 1)[1]
    first = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    assert shortest_example() == first
    assert "step=" not in first  # the steps are counted for the caller


def test_the_shortest_example_runs_and_counts_its_steps(tmp_path: Path) -> None:
    """No environment: a run log under ./trainreport-runs/, completed, steps 1 to N, none given."""
    example = shortest_example()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAINREPORT_", "KUBEFLOW_TRAINER_"))
    }
    subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=env, check=True, timeout=120)
    logs = list((tmp_path / "trainreport-runs").glob("*.log"))
    assert 1 == len(logs)
    task = read_task(logs[0])
    details = task["status_details"]
    n = int(re.findall(r"range\((\d+)\)", example)[0])
    assert ("completed", "done", n) == (task["status"], details["phase"], details["step"])
    assert list(range(1, n + 1)) == [p["step"] for p in details["metrics"]["train_loss"]]


def test_pytorch_example_records_tensor_values_every_step(tmp_path: Path) -> None:
    """README's PyTorch block (tensors reported each step) runs and records every step."""
    pytest.importorskip("torch")
    examples = [b for b in python_blocks() if 'FileSink("trainreport-runs/torch.log")' in b]
    assert 1 == len(examples)
    subprocess.run([sys.executable, "-c", examples[0]], cwd=tmp_path, check=True, timeout=120)
    task = read_task(tmp_path / "trainreport-runs" / "torch.log")
    details = task["status_details"]
    assert ("completed", 100) == (task["status"], details["step"])
    for name in ("train_loss", "train_grad_norm"):
        points = details["metrics"][name]
        assert list(range(1, 101)) == [p["step"] for p in points]
        assert all(isinstance(p["value"], float) for p in points)
