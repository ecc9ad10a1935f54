"""Move the flat test files into folders laid out like the code, and rewrite what names them.

Usage (from the repository root, on a clean work tree)::

    python scripts/mirror_tests.py --dry-run    # say what would move; change nothing
    python scripts/mirror_tests.py              # git mv, fix paths, rewrite references
    python scripts/mirror_tests.py --check      # exit 1 if a flat test file is left

The one table below (``MAPPING``) says which folder under ``tests/`` each flat test file
goes to, decided by what it tests (its imports), not by its name; ``FOLDERS`` says what
each folder mirrors (the "Tests" section of docs/design.md is generated from it). The
shared modules (``helpers.py``, ``conftest.py``, ``core_driving.py``, ...), ``data/``,
``contracts/`` (one file per promise) and ``typing/`` stay where they are: pytest's
``pythonpath = ["tests"]`` lets every test import the shared modules by plain name, and
``tests/conftest.py`` serves its fixtures to every folder below it.

The script is re-runnable: a file already in its folder is not moved again, a
reference already rewritten no longer matches, and a row whose file is gone is
skipped. A ``tests/test_*.py`` the table does not name stops the script before
anything changes (so a new test file is never left behind): add its row, run again.
The folders have no ``__init__.py`` (like ``tests/contracts/`` today), so test modules
are imported by their base name: a move that would give two test files one base name
stops the script too.

What the move would break, and how the script mends it:

- a path computed from ``__file__`` in a moved file (``Path(__file__).resolve().parent
  .parent``, ``.parents[1]``, ``.parent / "data"``) climbs one level more per folder
  level; another use of ``__file__``'s directory (``os.path.dirname``) stops the script;
- ``tests/test_<name>.py`` named in src/, tests/, benchmarks/, scripts/, docs/*.md,
  README.md, pyproject.toml and .ci/ (never CHANGELOG.md, which cites
  the past) becomes its new path;
- docs/design.md gets its "Tests" section (added once), its table made from ``FOLDERS``.

Afterwards it runs ``ruff check --select I --fix`` (imports re-sorted) and ``ruff format``
on the Python files it moved or changed.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

#: Each folder under ``tests/`` -> what its files test (the code it mirrors).
FOLDERS: Mapping[str, str] = {
    "wire": "`_wire/`: the protocol's constants and codecs, payloads, the attempt identity",
    "record": "`_record/`: store, names, values, selection, reports, rewinds, task machine",
    "runlog": "`_runlog/`: the run-log format, writer, replay, `read_task`, journal files",
    "engine": "`_engine/`: the core and its regimes, scheduler, destinations, journaling",
    "facade": "`_facade/`: the `Reporter` end to end, its stats, close, log lines",
    "foundation": "`_reporting_config.py`, `_environment.py`: configuration and environment",
    "api": "the public API: `__all__`, `trainreport.client`",
    "sinks": "`sinks/`: `MemorySink`, `FileSink`, `KubeflowSink`",
    "sinks/http": "`sinks/_http/`: `HttpSink`, its plan, sends and connection",
    "cli": "`cli/`: the `trainreport` command and its subcommands",
    "integrations": "`integrations/`: the framework adapters and process hooks",
    "server": "`server/`: the reference service over real sockets, its page and contract",
    "server/db": "`server/_db/`: the storage on both backends, group commit",
    "docs": "the docs and the tree: references, README examples, module map, layering",
    "tools": "`scripts/` and `benchmarks/`: the layout scripts, the benchmarks run",
    "contracts": "one file per promise (never raises, deadlines, nothing lost, processes)",
    "typing": "the public API's types, checked by mypy",
}

#: Each flat test file (its stem) -> its folder under ``tests/`` (a key of ``FOLDERS``).
MAPPING: Mapping[str, str] = {
    # -- _wire ---------------------------------------------------------------------------
    "test_attempt": "wire",
    "test_payloads": "wire",
    "test_payloads_strict_json": "wire",
    "test_protocol": "wire",
    # -- _record -------------------------------------------------------------------------
    "test_columnar": "record",
    "test_device_values": "record",
    "test_lifecycle": "record",
    "test_naming": "record",
    "test_params": "record",
    "test_recorder": "record",
    "test_recorder_resume": "record",
    "test_reports": "record",
    "test_rewinds": "record",
    "test_selection": "record",
    "test_series_defaults": "record",
    "test_store": "record",
    "test_thinning": "record",
    "test_values": "record",
    # -- _runlog -------------------------------------------------------------------------
    "test_journal_fencing": "runlog",
    "test_runfile": "runlog",
    "test_runlog": "runlog",
    "test_runlog_writer": "runlog",
    # -- _engine -------------------------------------------------------------------------
    "test_behind": "engine",  # a destination that falls behind (_engine/_behind.py)
    "test_cadence": "engine",
    "test_closing": "engine",
    "test_core": "engine",
    "test_destinations": "engine",
    "test_flushing": "engine",
    "test_journal": "engine",  # the reporter thread's journaling (_engine/_journal_feed.py)
    "test_resume_columns": "engine",
    "test_scheduler": "engine",
    "test_scheduler_never_spins": "engine",
    "test_sink_floor": "engine",
    "test_system_metrics": "engine",
    # -- _facade -------------------------------------------------------------------------
    "test_histogram": "facade",
    "test_log_lines": "facade",
    "test_properties": "facade",
    "test_reporter": "facade",
    "test_reporter_consistency": "facade",
    "test_status_at_close": "facade",
    # -- the foundation and the public API -------------------------------------------------
    "test_config": "foundation",
    "test_environment": "foundation",
    "test_client": "api",
    "test_public_api": "api",
    # -- sinks ---------------------------------------------------------------------------
    "test_kubeflow_sink": "sinks",
    "test_sinks": "sinks",
    "test_http_connection": "sinks/http",
    "test_http_end_to_end": "sinks/http",
    "test_http_plan": "sinks/http",
    "test_http_send": "sinks/http",
    "test_http_sink": "sinks/http",
    "test_http_sink_userinfo": "sinks/http",
    # -- cli -----------------------------------------------------------------------------
    "test_cli": "cli",
    "test_demo": "cli",
    "test_sync": "cli",
    # -- integrations --------------------------------------------------------------------
    "test_hooks": "integrations",
    "test_integration_accelerate": "integrations",
    "test_integration_huggingface": "integrations",
    "test_integration_keras": "integrations",
    "test_integration_lightning": "integrations",
    "test_integration_nemo_rl": "integrations",
    # -- server --------------------------------------------------------------------------
    "test_server": "server",
    "test_server_columns": "server",
    "test_server_config": "server",
    "test_server_contract": "server",
    "test_server_cross_origin": "server",
    "test_server_limits": "server",
    "test_server_operations": "server",
    "test_server_page": "server",
    "test_server_replicas": "server",
    "test_server_retention": "server",
    "test_server_stale": "server",
    "test_server_text": "server",
    "test_server_tokens": "server",
    "test_server_commit": "server/db",
    "test_server_storage": "server/db",
    # -- the docs and the tree -------------------------------------------------------------
    "test_docs_references": "docs",
    "test_layering": "docs",
    "test_module_map": "docs",
    "test_readme": "docs",
    # -- scripts and benchmarks ------------------------------------------------------------
    "test_benchmarks": "tools",
    "test_mirror_tests": "tools",
}

#: Where ``tests/test_<name>.py`` is rewritten (CHANGELOG.md is history: never).
TEXT_ROOTS = ("src", "tests", "benchmarks", "scripts", "docs", ".ci")
TEXT_FILES = ("README.md", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".sh", ".cfg", ".ini", ".html", ".js", ""}
#: Files that name the flat paths on purpose: this script and its test.
UNTOUCHED = {"mirror_tests.py", "test_mirror_tests.py"}
#: The generated block in docs/design.md (its section ``#tests``).
DESIGN = ROOT / "docs" / "design.md"
BLOCK_START = "<!-- test-map: generated by scripts/mirror_tests.py; do not edit -->"
BLOCK_END = "<!-- test-map: end -->"
#: The section the script appends to docs/design.md when the block is not there yet.
SECTION = """\
## Tests

The tests are laid out like the code: a folder under `tests/` for each layer or
package of `src/trainreport/` (a file goes where what it tests lives, read from its
imports), beside `tests/contracts/`, which holds each promise in one place (never
raises, deadlines, nothing lost, processes). The shared test modules (the
fixtures' `conftest.py`, `helpers.py`, the fault proxy, the stand-ins) and the
data files stay at the top of `tests/`, where every test imports them by plain
name (pytest's `pythonpath = ["tests"]`). The folders are not packages, so two
test files never share a base name. `scripts/mirror_tests.py` made this layout
(one table, file -> folder) and refuses a flat `tests/test_*.py` it does not place;
the table below is generated from it.

{block}
"""

#: ``Path(__file__)``, maybe ``.resolve()``, then ``.parent`` links or ``.parents[N]``.
_FILE_PATH = re.compile(
    r"Path\(__file__\)(?P<resolve>\.resolve\(\))?"
    r"(?:(?P<parents>(?:\.parent\b(?!s))+)|\.parents\[(?P<index>\d+)\])"
)
#: The directory of ``__file__`` taken another way: the script cannot mend it.
_OTHER_FILE_DIR = re.compile(r"os\.path\.\w+\(\s*(?:os\.path\.\w+\(\s*)*__file__")


class MirrorError(Exception):
    """A flat test file has no row, a row names an unknown folder, or a move would clash."""


def destination(stem: str) -> Path:
    """Where the flat test file ``tests/<stem>.py`` belongs."""
    return TESTS / MAPPING[stem] / f"{stem}.py"


def check_table() -> None:
    """Fail when a row names a folder ``FOLDERS`` does not describe.

    Raises:
        MirrorError: naming the rows at fault.
    """
    unknown = sorted(
        f"{stem} -> {folder}" for stem, folder in MAPPING.items() if folder not in FOLDERS
    )
    if unknown:
        raise MirrorError("these rows name a folder that FOLDERS lacks:\n  " + "\n  ".join(unknown))


def unplaced_files() -> list[str]:
    """The flat ``tests/test_*.py`` files that MAPPING does not name."""
    return [p.name for p in sorted(TESTS.glob("test_*.py")) if p.stem not in MAPPING]


def planned_moves() -> list[tuple[Path, Path]]:
    """``(source, destination)`` of every row whose file is still flat.

    Raises:
        MirrorError: when a file is both flat and at its destination, or when two test
            files would share a base name after the moves (the folders are not packages).
    """
    moves = []
    for stem in MAPPING:
        source, target = TESTS / f"{stem}.py", destination(stem)
        if not source.is_file():
            continue  # moved already, or gone
        if target.exists():
            raise MirrorError(
                f"{source.relative_to(ROOT)} and {target.relative_to(ROOT)} both exist"
            )
        moves.append((source, target))
    moving = {source for source, _ in moves}
    after = [p for p in TESTS.rglob("test_*.py") if p not in moving] + [t for _, t in moves]
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted(after):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen[path.name] = path
    if clashes:
        raise MirrorError(
            "test modules are imported by base name; rename one of each pair:\n  "
            + "\n  ".join(clashes)
        )
    return moves


# --- what a move breaks ------------------------------------------------------------------


def _literal_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of the strings and comments of Python source."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    kinds = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [
        (starts[token.start[0] - 1] + token.start[1], starts[token.end[0] - 1] + token.end[1])
        for token in tokens
        if token.type in kinds
    ]


def deepen_file_paths(text: str, levels: int) -> str:
    """Paths computed from ``__file__`` climb ``levels`` more directories.

    ``Path(__file__).resolve().parent.parent`` -> ``Path(__file__).resolve().parents[2]``
    for a file moved one folder down; ``Path(__file__).parent`` -> ``.parents[1]``. Only
    code is changed: the same text in a string or a comment is left as it is.

    Raises:
        MirrorError: when the code takes ``__file__``'s directory another way.
    """
    if levels == 0:
        return text
    spans = _literal_spans(text)

    def in_literal(match: re.Match[str]) -> bool:
        return any(start <= match.start() < end for start, end in spans)

    if any(not in_literal(m) for m in _OTHER_FILE_DIR.finditer(text)):
        raise MirrorError("uses os.path on __file__: write it as Path(__file__).parent...")

    def deeper(match: re.Match[str]) -> str:
        if in_literal(match):
            return match[0]
        ups = match["parents"].count(".parent") if match["parents"] else int(match["index"]) + 1
        return f"Path(__file__){match['resolve'] or ''}.parents[{ups + levels - 1}]"

    return _FILE_PATH.sub(deeper, text)


def reference_patterns(table: Mapping[str, str]) -> list[tuple[re.Pattern[str], str]]:
    """One pattern per row: ``tests/<stem>.py`` (not already in a folder) -> its new path."""
    return [
        (
            re.compile(rf"(?<![\w-])tests/{re.escape(stem)}\.py(?!\w)"),
            f"tests/{folder}/{stem}.py",
        )
        for stem, folder in table.items()
    ]


def rewrite_references(text: str, table: Mapping[str, str] = MAPPING) -> str:
    """Every ``tests/<stem>.py`` of the table in ``text`` named by its folder."""
    for pattern, replacement in reference_patterns(table):
        text = pattern.sub(replacement, text)
    return text


def folder_table() -> str:
    """The table of docs/design.md's "Tests" section: each folder and what it mirrors."""
    rows = [f"| `tests/{folder}/` | {what} |" for folder, what in FOLDERS.items()]
    return "\n".join(["| folder | what its files test |", "|---|---|", *rows])


def rewrite_design(text: str) -> str:
    """``docs/design.md`` with its generated block made current (the section added if absent)."""
    start, end = text.find(BLOCK_START), text.find(BLOCK_END)
    if start < 0 or end < start:
        return (
            text.rstrip("\n")
            + "\n\n"
            + SECTION.format(block=f"{BLOCK_START}\n{folder_table()}\n{BLOCK_END}")
        )
    return text[: start + len(BLOCK_START)] + "\n" + folder_table() + "\n" + text[end:]


def text_files() -> list[Path]:
    """The tracked and untracked-but-not-ignored text files where references are rewritten."""
    listed = subprocess.run(  # noqa: S603 - our own arguments
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *TEXT_ROOTS, *TEXT_FILES],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    paths = []
    for name in sorted(set(listed)):
        path = ROOT / name
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES or path.name in UNTOUCHED:
            continue
        if name.startswith("docs/") and path.suffix != ".md":
            continue
        if path.suffix == "" and not name.startswith(".ci/"):
            continue
        paths.append(path)
    return paths


def rewrite_all(dry_run: bool) -> list[Path]:
    """Rewrite every text file's references (and the design block); return those changed."""
    changed = []
    for path in text_files():
        before = path.read_text(encoding="utf-8")
        after = rewrite_references(before)
        if path == DESIGN:
            after = rewrite_design(after)
        if after != before:
            changed.append(path)
            if not dry_run:
                path.write_text(after, encoding="utf-8")
    return changed


def git(*args: str) -> None:
    """Run one git command in the repository, failing loudly."""
    subprocess.run(["git", *args], cwd=ROOT, check=True)  # noqa: S603, S607 - our own arguments


def tidy(paths: Sequence[Path], ruff: str | None) -> None:
    """Sort the imports and format the moved and changed Python files with ruff.

    A test that imports another test module by name (``from test_http_sink import``) had
    it as first-party while both were in ``tests/`` (ruff's ``src``); in a folder it is
    sorted with the third-party imports.
    """
    python = sorted({str(p) for p in paths if p.suffix == ".py" and p.exists()})
    if not python:
        return
    if not ruff:
        print("ruff not found: run `ruff check --select I --fix` and `ruff format` yourself")
        return
    subprocess.run(  # noqa: S603 - the ruff the caller named
        [ruff, "check", "--select", "I", "--fix", "--quiet", *python], cwd=ROOT, check=False
    )
    subprocess.run([ruff, "format", "--quiet", *python], cwd=ROOT, check=False)  # noqa: S603


def main(argv: Sequence[str] | None = None) -> int:
    """Move the test files, mend their paths and rewrite the references; return the status.

    Returns:
        0 when done (or nothing to do); 1 with ``--check`` when a file is still flat; 2
        when a flat test file has no row, a row is inconsistent or a move would clash
        (nothing changed then).
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would change")
    parser.add_argument("--check", action="store_true", help="fail if a test file is flat")
    parser.add_argument("--ruff", default=shutil.which("ruff"), help="the ruff to format with")
    args = parser.parse_args(argv)
    try:
        check_table()
        unplaced = unplaced_files()
        if unplaced:
            raise MirrorError(
                "these test files have no row in scripts/mirror_tests.py's MAPPING; add one "
                "for each (its folder, by what it tests), then run the script again:\n  "
                + "\n  ".join(unplaced)
            )
        moves = planned_moves()
        mended = {}
        for source, target in moves:
            levels = len(target.relative_to(source.parent).parts) - 1
            before = source.read_text(encoding="utf-8")
            try:
                after = deepen_file_paths(before, levels)
            except MirrorError as exc:
                raise MirrorError(f"{source.relative_to(ROOT)} {exc}") from None
            if after != before:
                mended[target] = after
    except MirrorError as exc:
        print(f"mirror_tests: {exc}", file=sys.stderr)
        return 2
    if args.check:
        for source, target in moves:
            print(
                f"flat: {source.relative_to(ROOT)} (belongs in {target.parent.relative_to(ROOT)}/)"
            )
        return 1 if moves else 0
    for source, target in moves:
        print(f"move {source.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
        if not args.dry_run:
            target.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(source), str(target))
    for target, text in mended.items():
        print(f"mend paths from __file__ in {target.relative_to(ROOT)}")
        if not args.dry_run:
            target.write_text(text, encoding="utf-8")
    changed = rewrite_all(args.dry_run)
    for path in changed:
        print(f"rewrite {path.relative_to(ROOT)}")
    if args.dry_run:
        return 0
    tidy([target for _, target in moves] + changed, args.ruff)
    print(f"mirror_tests: {len(moves)} moved, {len(mended)} mended, {len(changed)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
