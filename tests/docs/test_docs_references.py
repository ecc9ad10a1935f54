"""Code and docs cite only documents the repository contains, and anchors that exist.

A user or a new engineer must never meet a reference to a document they cannot
open: no ``DESIGN §N`` (a design document outside the repository), no path into
a sibling folder, and every ``something.md#section`` resolves to a file here
and a heading in it (``docs/design.md#metrics``; a ``, #other`` that follows
one names another section of the same file).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Texts that cite a document this repository does not hold.
FOREIGN = re.compile(
    r"DESIGN §|DESIGN\.md|STYLE §|STYLE habit|STYLE\.md|\.\./shared|shared/DESIGN|§\d"
)
#: A Markdown file named in text, with an optional anchor and further ``, #anchor``s.
REFERENCE = re.compile(
    r"(?<![\w/.-])((?:\.\./)*(?:[\w.-]+/)*[\w.-]+\.md)((?:#[\w-]+)(?:,\s*#[\w-]+)*)?"
)
#: Files that cite the past on purpose (the changelog names documents of its time).
HISTORY = {"CHANGELOG.md"}


def _tracked_texts() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if Path(name).suffix in {".py", ".md", ".toml", ".txt", ".sh", ".js", ".html"}
        or name.startswith(".ci/")
    ]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    in_code = False
    anchors = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def test_no_text_cites_a_document_outside_the_repository() -> None:
    """``DESIGN §N``, ``STYLE.md``, ``../shared``: none anywhere in code, docs or tests."""
    this = Path(__file__).resolve()
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in _tracked_texts()
        if path.resolve() != this and path.is_file()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FOREIGN.search(line)
    ]
    assert [] == hits


def test_every_markdown_reference_names_a_file_and_a_heading_that_exist() -> None:
    """``docs/engine.md#the-hot-path`` and friends: the file exists, and so does the heading."""
    broken = []
    this = Path(__file__).resolve()
    for path in _tracked_texts():
        if path.name in HISTORY or not path.is_file() or path.resolve() == this:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in REFERENCE.finditer(line):
                name, anchors = match.group(1), match.group(2) or ""
                if "://" in line[max(0, match.start() - 60) : match.start()]:
                    continue  # a web address, not a file of ours
                target = next(
                    (
                        base / name
                        for base in (path.parent, ROOT, ROOT / "docs")
                        if (base / name).is_file()
                    ),
                    None,
                )
                where = f"{path.relative_to(ROOT)}:{number}: {name}{anchors}"
                if target is None:
                    broken.append(where)
                    continue
                known = _anchors(target)
                broken += [where for a in re.findall(r"#([\w-]+)", anchors) if a not in known]
    assert [] == broken


@pytest.mark.parametrize(
    "section",
    [
        "shape",
        "debounce",
        "several-destinations",
        "public-api",
        "metrics",
        "lifecycle",
        "wire-modes",
        "performance",
        "guarantees",
        "failure-handling",
        "layout",
    ],
)
def test_design_has_the_sections_code_cites(section: str) -> None:
    """docs/design.md keeps the sections the code's references were written against."""
    assert section in _anchors(ROOT / "docs" / "design.md")
