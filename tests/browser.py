"""Headless Chromium for tests: the flags every run uses, and a DOM dump after scripts ran.

Debian's ``chromium`` (CI installs it; tests that need it are skipped without
it). Every run gets a fresh profile directory, no network beyond what the page
asks for (no sync, component updates or background requests), and a virtual
time budget, so a page's script runs until it is idle or the budget is spent.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"

needs_chromium = pytest.mark.skipif(
    not shutil.which(CHROMIUM),
    reason=f"{CHROMIUM} is not installed (apt-get install chromium); CI installs it",
)


def _command(profile: Path, extra: Sequence[str]) -> list[str]:
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *extra,
    ]


def dump_dom(url: str, profile: Path, *, budget_ms: int = 5000, extra: Sequence[str] = ()) -> str:
    """The page's DOM (as HTML) after its scripts ran for up to ``budget_ms`` of virtual time."""
    command = _command(profile, [*extra, f"--virtual-time-budget={budget_ms}", "--dump-dom", url])
    done = subprocess.run(command, capture_output=True, timeout=120, check=False, text=True)
    return done.stdout
