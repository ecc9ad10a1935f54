"""Write the reference server's published contract into ``docs/`` from the code that enforces it.

Usage::

    python scripts/make_contract.py            # (re)write docs/openapi.json and docs/schemas/
    python scripts/make_contract.py --check    # exit 1 if a checked-in copy is out of date

Everything comes from ``trainreport.server._contract`` (the route table, the
request declarations that validate bodies, the response declarations), so the
output is a pure function of the code; ``tests/server/test_server_contract.py`` fails
when a checked-in copy drifts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainreport.server._contract import (
    STANDALONE_SCHEMAS,
    openapi_document,
    standalone_schema,
    to_json,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"


def generated() -> dict[Path, str]:
    """Every file of the contract and its text, keyed by path under ``docs/``."""
    files = {DOCS / "openapi.json": to_json(openapi_document())}
    for stem in STANDALONE_SCHEMAS:
        files[DOCS / "schemas" / f"{stem}.schema.json"] = to_json(standalone_schema(stem))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/ is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        names = ", ".join(str(p.relative_to(DOCS.parent)) for p in stale)
        print(f"out of date: {names}; run python scripts/make_contract.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
