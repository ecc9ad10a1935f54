"""The promise "clocks are injected, never patched" (docs/design.md), for the suite itself.

The reporter takes its scheduling clock (``Reporter(clock=...)``) and the
report calls' timing clock (``Reporter(timer=...)``) as arguments, so no test
needs to patch ``time.perf_counter_ns``: a patched module clock leaks into
every thread that reads it and hides a call that was not given the injected one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
#: The clock no test may patch (an attribute or a name, wherever it was imported).
PATCHED = "perf_counter_ns"
#: Calls that patch an attribute: ``monkeypatch.setattr``, ``setattr``, ``mock.patch``
#: and ``mock.patch.object``.
PATCHING_CALLS = frozenset({"setattr", "patch", "object"})


def _names_the_clock(node: ast.AST) -> bool:
    """Whether ``node`` is the clock: a string ending in it, an attribute or a name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit(".", 1)[-1] == PATCHED
    if isinstance(node, ast.Attribute):
        return node.attr == PATCHED
    return isinstance(node, ast.Name) and node.id == PATCHED


def patches_of_the_clock(source: str) -> list[int]:
    """The line numbers in ``source`` where ``perf_counter_ns`` is patched or reassigned."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in PATCHING_CALLS and any(_names_the_clock(a) for a in node.args):
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == PATCHED for t in targets):
                lines.append(node.lineno)
    return sorted(lines)


@pytest.mark.parametrize(
    "source",
    [
        'monkeypatch.setattr(time, "perf_counter_ns", fake)',
        'monkeypatch.setattr("time.perf_counter_ns", fake)',
        'monkeypatch.setattr(_reporter, "perf_counter_ns", fake)',
        "monkeypatch.setattr(time.perf_counter_ns, fake)",
        'setattr(time, "perf_counter_ns", fake)',
        'mock.patch("time.perf_counter_ns", fake)',
        'mock.patch.object(time, "perf_counter_ns", fake)',
        "time.perf_counter_ns = fake",
        "module.perf_counter_ns: object = fake",
    ],
)
def test_the_scan_finds_every_way_of_patching_the_clock(source: str) -> None:
    """Each form a test could patch the timing clock with is found (so the scan can fail)."""
    assert [1] == patches_of_the_clock(source)


def test_the_scan_leaves_reading_and_injecting_the_clock_alone() -> None:
    """Reading the clock, or handing a stand-in to ``Reporter(timer=...)``, is no patch."""
    source = "t0 = time.perf_counter_ns()\nReporter(sink, timer=fake)\nsetattr(o, 'clock', c)\n"
    assert [] == patches_of_the_clock(source)


def test_no_test_patches_perf_counter_ns() -> None:
    """No file under tests/ patches ``perf_counter_ns``: give ``Reporter(timer=...)`` a stand-in."""
    found = {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if (lines := patches_of_the_clock(path.read_text(encoding="utf-8")))
    }
    assert {} == found
