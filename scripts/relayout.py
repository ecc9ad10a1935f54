"""Move trainreport's flat private modules into layer packages, and rewrite every reference.

Usage (from the repository root, on a clean work tree)::

    python scripts/relayout.py --dry-run    # say what would move; change nothing
    python scripts/relayout.py              # git mv, create the packages, rewrite the texts

The one table below (``MAPPING``) says where each module goes (``docs/design.md#layout``
explains the layers, and ``tests/docs/test_layering.py`` checks what may import what). The
script is idempotent: a module already at its new place is not moved again, and a
reference already rewritten no longer matches, so it can be run again after more branches
are merged (a straggler that still names an old module is rewritten then). A module
under ``src/trainreport/``, ``sinks/`` or ``server/`` that the table does not name stops
the script before anything changes: add its row, then run it again.

What is rewritten, in src/, tests/, benchmarks/, scripts/, docs/*.md, README.md and
pyproject.toml (never CHANGELOG.md, which cites the past):

- dotted names ``trainreport.<old>`` (imports, ``monkeypatch``/``mock.patch`` targets,
  ``importlib`` strings, docs), and ``from trainreport import <old>`` statements;
- paths ``trainreport/<old>.py`` and ``sinks/<old>.py``, ``server/<old>.py``;
- a bare file name: in Markdown, one that is unique in the tree becomes its path from
  ``trainreport/``; in Python (tests compare ``path.name``), one whose base name changed
  becomes the new base name.

Afterwards it runs ``ruff check --select I --fix`` and ``ruff format`` on the Python files
it changed (imports re-sorted), and names every line it lengthened past 100 characters.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "trainreport"

#: Each module of the flat tree (dotted, relative to ``trainreport``) -> its module in the
#: layered tree. A row whose module is gone (folded into another) is skipped. ``cli``
#: becomes the package ``cli/`` (its ``__init__.py``; ``python -m trainreport.cli`` keeps
#: working through a generated ``__main__.py``). Rows whose two sides are equal stay put.
MAPPING: Mapping[str, str] = {
    # -- foundation: every layer may import these ---------------------------------------
    "_logging": "_logging",
    "_config": "_reporting_config",  # was a namesake of server/_config.py
    "exceptions": "exceptions",
    # -- _wire: what crosses a boundary (client <-> server, engine <-> sink) ---------------
    "_protocol": "_wire._protocol",
    "_job_tokens": "_wire._job_tokens",
    "_attempt": "_wire._attempt",
    "_payloads": "_wire._payloads",
    "_stamps": "_wire._stamps",
    "_sink": "_wire._sink_interface",  # the Sink interface: see docs/design.md#layout
    "sinks._record": "_wire._task_record",  # the server's merge rules, for local sinks
    # -- _record: the run's record (sans-I/O, owned by the reporter thread) ----------------
    "_recorder": "_record._recorder",
    "_run_record": "_record._run_record",
    "_store": "_record._store",
    "_ingest": "_record._ingest",
    "_columnar": "_record._columnar",
    "_reports": "_record._reports",
    "_device": "_record._device",
    "_naming": "_record._name_rules",  # was a namesake of _metric_names
    "_metric_names": "_record._name_table",
    "_selection": "_record._selection",
    "_values": "_record._values",
    "_params": "_record._params",
    "_epochs": "_record._epochs",
    "_events": "_record._events",
    "_details": "_record._details",
    "_sticky": "_record._sticky",
    "_seeding": "_record._seeding",
    "_rewinds": "_record._rewinds",
    "_delivery": "_record._delivery",
    "_thinning": "_record._thinning",  # full-state curves under a body limit
    "_lifecycle": "_record._machines",  # was a namesake of _reporter_lifecycle
    # -- the environment: the one reader of the variables a job system sets ---------------
    "_environment": "_environment",
    # -- _runlog: the run-log format, its files, replay, sync's plan ----------------------
    "sinks._runlog": "_runlog._format",
    "sinks._runlog_state": "_runlog._state",
    "sinks._runlog_replay": "_runlog._replay",
    "sinks._runlog_writer": "_runlog._writer",
    "sinks._runfile": "_runlog._runfile",
    "sinks._journal": "_runlog._journal",
    "_sync": "cli._sync",  # the upload driver; its plan is _runlog._plan
    "sinks._runlog_plan": "_runlog._plan",  # sync's and the journal recovery's upload plan
    # -- sinks: the destinations (public package) -----------------------------------------
    "sinks": "sinks",
    "sinks._file": "sinks._file",
    "sinks._memory": "sinks._memory",
    "sinks._kubeflow": "sinks._kubeflow",
    "sinks._kubeflow_status": "sinks._kubeflow_status",
    "sinks._token": "sinks._token",
    "sinks._http": "sinks._http._sink",
    "sinks._http_open": "sinks._http._open",
    "sinks._http_plan": "sinks._http._plan",
    "sinks._http_send": "sinks._http._send",
    "sinks._http_transport": "sinks._http._transport",
    "sinks._gzip": "sinks._http._gzip",
    # -- _engine: the reporter thread and the decisions it applies ------------------------
    "_worker": "_engine._worker",
    "_core": "_engine._core",
    "_dispatch": "_engine._dispatch",
    "_destination": "_engine._destination",
    "_scheduler": "_engine._scheduler",
    "_closing": "_engine._closing",
    "_flushing": "_engine._flushing",
    "_cadence": "_engine._cadence",
    "_sender": "_engine._sender",
    "_resume": "_engine._resume",
    "_journal_feed": "_engine._journal_feed",
    "_system": "_engine._system",
    # -- _facade: the Reporter the training loop calls ------------------------------------
    "_reporter": "_facade._reporter",
    "_report_calls": "_facade._report_calls",
    "_report_queue": "_facade._report_queue",
    "_terminal_reports": "_facade._terminal_reports",
    "_reporter_lifecycle": "_facade._reporter_lifecycle",
    "_reporter_stats": "_facade._reporter_stats",
    "_close_report": "_facade._close_report",
    "_process_hooks": "_facade._process_hooks",
    "_histogram": "_facade._histogram",
    # -- the public modules and the command line ------------------------------------------
    "__init__": "__init__",
    "client": "client",
    "testing": "testing",
    "cli": "cli",
    "_demo": "cli._demo",
    "_summary": "cli._summary",
    # -- the reference server, its storage under server/_db/ ------------------------------
    "server": "server",
    "server._app": "server._app",
    "server._auth": "server._auth",
    "server._body": "server._body",
    "server._config": "server._config",
    "server._connections": "server._connections",
    "server._contract": "server._contract",
    "server._errors": "server._errors",
    "server._metrics": "server._metrics",
    "server._page": "server._page",
    "server._responses": "server._responses",
    "server._retention": "server._retention",
    "server._routes": "server._routes",
    "server._run": "server._run",
    "server._schema": "server._schema",
    "server._security": "server._security",
    "server._stale": "server._stale",
    "server._startup": "server._startup",
    "server._text": "server._text",
    "server._wire": "server._wire",
    "server._db": "server._db._database",
    "server._storage": "server._db._backend",
    "server._sqlite": "server._db._sqlite",
    "server._postgres": "server._db._postgres",
    "server._migrations": "server._db._migrations",
    "server._commit": "server._db._commit",
    "server._db_health": "server._db._health",
    "server._db_jobs": "server._db._jobs",
    "server._db_retention": "server._db._purges",  # was a namesake of server/_retention.py
    "server._db_rows": "server._db._rows",
    "server._db_tasks": "server._db._tasks",
}

#: The packages the layout creates, and the docstring of each new ``__init__.py``
#: (``scripts/module_map.py`` shows them as the headings of the module map).
PACKAGES: Mapping[str, str] = {
    "_wire": "The wire: what crosses a boundary, the job-status protocol and the Sink interface.",
    "_record": "The run's record: store, names, values, task machine; applies reports (sans-I/O).",
    "_runlog": "The run log: its format, its files (the journal's too), replay, and sync's plan.",
    "_engine": "The engine: the reporter thread's driver and the rules it applies to destinations.",
    "_facade": "The Reporter the training loop calls, and what runs on the training thread.",
    "sinks._http": "HttpSink and its parts: opening, planning, sending, one kept-alive transport.",
    "server._db": "The reference server's storage: one interface, SQLite and PostgreSQL behind it.",
}

#: The folders whose modules must all be named by MAPPING (not their subpackages).
SCANNED = ("", "sinks", "server")
#: Where references are rewritten (CHANGELOG.md is history and keeps the old names).
TEXT_ROOTS = ("src", "tests", "benchmarks", "scripts", "docs")
TEXT_FILES = ("README.md", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".sh", ".cfg", ".ini", ".html", ".js"}
LINE_LIMIT = 100
#: Files that name the old modules on purpose: this script and its test.
UNTOUCHED = {"relayout.py", "test_relayout.py"}
CLI_MAIN = '''"""``python -m trainreport.cli``: the command line (``trainreport.cli.main``)."""

from trainreport.cli import main

raise SystemExit(main())
'''


class LayoutError(Exception):
    """The tree holds a module the table does not place, or the table is inconsistent."""


def module_path(dotted: str, *, package: bool = False) -> Path:
    """The file of a dotted module (relative to ``trainreport``), as a flat module or package."""
    if dotted == "__init__":
        return PKG / "__init__.py"
    parts = dotted.split(".")
    if package:
        return PKG.joinpath(*parts, "__init__.py")
    return PKG.joinpath(*parts[:-1], parts[-1] + ".py")


def check_table() -> None:
    """Fail when two rows share a target or a target package is not declared.

    Raises:
        LayoutError: naming the rows at fault.
    """
    targets: dict[str, str] = {}
    for old, new in MAPPING.items():
        if new in targets:
            raise LayoutError(f"{old!r} and {targets[new]!r} both move to {new!r}")
        targets[new] = old
        parent = new.rpartition(".")[0]
        declared = parent in PACKAGES or parent in MAPPING.values() or not parent
        if not declared:
            raise LayoutError(f"{old!r} -> {new!r}: package {parent!r} is not in PACKAGES")


def unplaced_modules() -> list[str]:
    """The modules in the scanned folders that MAPPING neither moves nor keeps."""
    known = set(MAPPING) | set(MAPPING.values())
    unplaced = []
    for folder in SCANNED:
        directory = PKG / folder
        prefix = f"{folder}." if folder else ""
        for path in sorted(directory.glob("*.py")):
            name = path.stem
            dotted = folder if name == "__init__" and folder else prefix + name
            if dotted not in known:
                unplaced.append(str(path.relative_to(ROOT)))
    return unplaced


def planned_moves() -> list[tuple[str, Path, Path]]:
    """The ``(old, source, destination)`` of every row whose module is still at its old place."""
    moves = []
    for old, new in MAPPING.items():
        source = module_path(old)
        # A package at the old name (``sinks._http`` once moved) is the new layout's own.
        if old in (new, "cli") or not source.is_file():
            continue
        moves.append((old, source, module_path(new)))
    if module_path("cli").is_file():
        moves.append(("cli", module_path("cli"), module_path("cli", package=True)))
    return moves


def git(*args: str) -> None:
    """Run one git command in the repository, failing loudly."""
    subprocess.run(["git", *args], cwd=ROOT, check=True)  # noqa: S603, S607 - our own arguments


def create_packages(dry_run: bool) -> list[Path]:
    """Write each declared package's ``__init__.py`` (and ``cli/__main__.py``) if missing."""
    created = []
    files = {module_path(name, package=True): f'"""{doc}"""\n' for name, doc in PACKAGES.items()}
    files[PKG / "cli" / "__main__.py"] = CLI_MAIN
    for path, text in files.items():
        if path.exists():
            continue
        created.append(path)
        if not dry_run:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return created


# --- rewriting references ----------------------------------------------------------------


def renames() -> dict[str, str]:
    """Old dotted -> new dotted, for every row that changes a name."""
    return {old: new for old, new in MAPPING.items() if old not in (new, "__init__")}


def _children(old: str, table: Mapping[str, str]) -> list[str]:
    """The submodules of a new package whose name is an old module (``sinks._http``)."""
    prefix = old + "."
    return sorted(
        {new[len(prefix) :].split(".")[0] for new in table.values() if new.startswith(prefix)}
    )


def dotted_patterns(table: Mapping[str, str]) -> list[tuple[re.Pattern[str], str]]:
    """One pattern per renamed module for ``trainreport.<old>``, longest names first.

    When the old name is now a package (``sinks._http``), a name followed by one of its
    new submodules (``trainreport.sinks._http._send``, or ``from trainreport.sinks._http
    import _send``) is already rewritten and left alone.
    """
    patterns = []
    for old in sorted(table, key=len, reverse=True):
        children = _children(old, table)
        names = "|".join(map(re.escape, children))
        # ``trainreport.sinks._http._send`` and ``from trainreport.sinks._http import _send``
        guard = rf"(?!\.(?:{names})\b)(?!\s+import\s+\(?\s*(?:{names})\b)" if children else ""
        pattern = re.compile(rf"(?<![\w.])trainreport\.{re.escape(old)}(?!\w){guard}")
        patterns.append((pattern, f"trainreport.{table[old]}"))
    return patterns


def path_patterns(table: Mapping[str, str]) -> list[tuple[re.Pattern[str], str]]:
    """Patterns for ``trainreport/<old>.py`` and ``sinks/``/``server/`` relative paths."""
    patterns = []
    for old in sorted(table, key=len, reverse=True):
        if old == "cli":
            continue
        old_path = old.replace(".", "/") + ".py"
        new_path = table[old].replace(".", "/") + ".py"
        patterns.append(
            (
                re.compile(rf"(?<![\w.-])trainreport/{re.escape(old_path)}(?!\w)"),
                f"trainreport/{new_path}",
            )
        )
        if "/" in old_path:
            patterns.append((re.compile(rf"(?<![\w./-]){re.escape(old_path)}(?!\w)"), new_path))
    return patterns


def basename_patterns(
    table: Mapping[str, str], *, python: bool
) -> list[tuple[re.Pattern[str], str]]:
    """Patterns for a bare file name (``_store.py``), see the module docstring.

    A quoted Python literal (``"_naming.py"``, compared with ``path.name`` in tests) takes
    the new base name when it changed. Any other bare name (Markdown, docstrings,
    comments) takes the new path from ``trainreport/`` when the old base name is unique.
    """
    counts: dict[str, int] = {}
    for name in MAPPING:
        base = name.split(".")[-1]
        counts[base] = counts.get(base, 0) + 1
    patterns = []
    for old, new in table.items():
        old_base, new_base = old.split(".")[-1], new.split(".")[-1]
        if old == "cli" or old_base.startswith("__"):
            continue
        name = re.escape(old_base) + r"\.py"
        if python and old_base != new_base:
            patterns.append((re.compile(rf"(?<=[\"']){name}(?=[\"'])"), new_base + ".py"))
        if counts.get(old_base, 0) == 1:
            replacement = new.replace(".", "/") + ".py"
            patterns.append((re.compile(rf"(?<![\w./\"'-]){name}(?!\w)"), replacement))
    return patterns


def rewrite_import_froms(text: str, table: Mapping[str, str]) -> str:
    """``from trainreport import _store as s`` -> ``from trainreport._record import _store as s``.

    Only statements that import a renamed module by name from its package are touched;
    names that are not modules stay in the original statement.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module != "trainreport" and not node.module.startswith("trainreport."):
            continue
        package = node.module[len("trainreport.") :] if node.module != "trainreport" else ""
        moved: list[ast.alias] = []
        kept: list[ast.alias] = []
        for alias in node.names:
            old = f"{package}.{alias.name}" if package else alias.name
            (moved if old in table and table[old] != old else kept).append(alias)
        if not moved:
            continue
        indent = lines[node.lineno - 1][: node.col_offset]
        statements = []
        if kept:
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
            statements.append(f"{indent}from {node.module} import {names}\n")
        for alias in moved:
            old = f"{package}.{alias.name}" if package else alias.name
            parent, _, base = table[old].rpartition(".")
            bound = alias.asname or alias.name
            source = f"trainreport.{parent}" if parent else "trainreport"
            suffix = f" as {bound}" if bound != base else ""
            statements.append(f"{indent}from {source} import {base}{suffix}\n")
        # A comment anywhere in the statement (a noqa after its opening parenthesis)
        # is kept on each statement it becomes: ruff reads a noqa per statement.
        original = lines[node.lineno - 1 : node.end_lineno]
        comments = [m.group(0) for line in original if (m := re.search(r"#.*", line))]
        if comments:
            statements = [f"{s.rstrip()}  {comments[0]}\n" for s in statements]
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, "".join(statements)))
    for start, stop, replacement in sorted(edits, reverse=True):
        lines[start:stop] = [replacement]
    return "".join(lines)


def rewrite_text(text: str, path: Path, table: Mapping[str, str]) -> str:
    """Every reference of one file rewritten (see the module docstring)."""
    if path.suffix == ".py":
        text = rewrite_import_froms(text, table)
    for pattern, replacement in dotted_patterns(table) + path_patterns(table):
        text = pattern.sub(replacement, text)
    for pattern, replacement in basename_patterns(table, python=path.suffix == ".py"):
        text = pattern.sub(replacement, text)
    return text


def text_files() -> list[Path]:
    """The tracked and untracked-but-not-ignored text files under the rewritten roots."""
    listed = subprocess.run(  # noqa: S603 - our own arguments
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *TEXT_ROOTS, *TEXT_FILES],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    paths = []
    for name in sorted(set(listed)):
        path = ROOT / name
        if path.is_file() and path.suffix in TEXT_SUFFIXES and path.name not in UNTOUCHED:
            if name.startswith("docs/") and path.suffix != ".md":
                continue
            paths.append(path)
    return paths


def rewrite_all(table: Mapping[str, str], dry_run: bool) -> list[Path]:
    """Rewrite every text file; return those that changed."""
    changed = []
    for path in text_files():
        before = path.read_text(encoding="utf-8")
        after = rewrite_text(before, path, table)
        if after != before:
            changed.append(path)
            if not dry_run:
                path.write_text(after, encoding="utf-8")
    return changed


def long_lines(paths: Iterable[Path]) -> list[str]:
    """Python lines past the line limit (after formatting, only strings and comments)."""
    found = []
    for path in paths:
        if path.suffix != ".py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if len(line) > LINE_LIMIT and not re.search(r"# (noqa|type:)", line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {len(line)} characters")
    return found


def tidy(paths: Sequence[Path], ruff: str | None) -> None:
    """Sort imports and format the changed Python files with ruff, when it is installed."""
    python = [str(p) for p in paths if p.suffix == ".py" and p.exists()]
    if not python:
        return
    if ruff is None:
        print("ruff not found: run `ruff check --select I --fix` and `ruff format` yourself")
        return
    subprocess.run(  # noqa: S603 - the ruff the caller named
        [ruff, "check", "--select", "I", "--fix", "--quiet", *python], cwd=ROOT, check=False
    )
    subprocess.run([ruff, "format", "--quiet", *python], cwd=ROOT, check=False)  # noqa: S603


def main(argv: Sequence[str] | None = None) -> int:
    """Move the modules and rewrite the references; return the exit status.

    Returns:
        0 when done (or nothing to do), 2 when the tree holds a module MAPPING does not
        place, or the table is inconsistent (nothing changed then).
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would change")
    parser.add_argument("--ruff", default=shutil.which("ruff"), help="the ruff to tidy with")
    args = parser.parse_args(argv)
    try:
        check_table()
        unplaced = unplaced_modules()
        if unplaced:
            raise LayoutError(
                "these modules have no row in scripts/relayout.py's MAPPING; add one for each "
                "(module -> its package), then run the script again:\n  " + "\n  ".join(unplaced)
            )
        moves = planned_moves()
    except LayoutError as exc:
        print(f"relayout: {exc}", file=sys.stderr)
        return 2
    table = renames()
    for _old, source, destination in moves:
        print(f"move {source.relative_to(ROOT)} -> {destination.relative_to(ROOT)}")
        if not args.dry_run:
            destination.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(source), str(destination))
    created = create_packages(args.dry_run)
    for path in created:
        print(f"create {path.relative_to(ROOT)}")
    changed = rewrite_all(table, args.dry_run)
    for path in changed:
        print(f"rewrite {path.relative_to(ROOT)}")
    if args.dry_run:
        return 0
    if created:
        git("add", *(str(p) for p in created))
    tidy(changed + created, args.ruff)
    for line in long_lines(changed):
        print(f"too long now (wrap it by hand): {line}")
    print(f"relayout: {len(moves)} moved, {len(created)} created, {len(changed)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
