"""The README's plain-loop example runs as written and leaves the expected curves."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_plain_loop_example_runs_and_writes_the_curves(tmp_path: Path) -> None:
    """Run the README's first Python block in a fresh interpreter and read its JSON file."""
    examples = [b for b in python_blocks() if "FileSink(" in b]
    assert 1 == len(examples)
    example = examples[0]
    subprocess.run([sys.executable, "-c", example], cwd=tmp_path, check=True, timeout=120)
    task = json.loads((tmp_path / "trainreport-runs" / "example.json").read_text())
    details = task["status_details"]
    assert "completed" == task["status"]
    assert 200 == details["step"]
    assert 100.0 == details["percentage_done"]
    assert list(range(1, 201)) == [p["step"] for p in details["metrics"]["train_loss"]]
    assert [1] * 100 + [2] * 100 == [p["epoch"] for p in details["metrics"]["train_loss"]]
    assert [50, 100, 150, 200] == [p["step"] for p in details["metrics"]["val_loss"]]
    assert "ckpt/step-200" == details["checkpoint_path"]
    assert {"optimizer/lr": 0.1, "batch_size": 32} == details["hyperparameters"]
