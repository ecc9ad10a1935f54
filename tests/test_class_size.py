"""Every class in ``src/trainreport`` can be read in one sitting (300 lines at most).

The rule comes from the developers' guide (classes readable in one sitting,
private modules with one responsibility); a class that grows past it holds two
responsibilities and is split by concern (docs/design.md#shape).
"""

from __future__ import annotations

import ast
from pathlib import Path

import trainreport

#: The most lines a class may span, decorators and docstring included.
MAX_CLASS_LINES = 300

SOURCE = Path(trainreport.__file__).parent


def class_lengths(root: Path = SOURCE) -> dict[tuple[str, str], int]:
    """Lines spanned by every class under ``root`` (nested ones too), by (module, class name)."""
    lengths: dict[tuple[str, str], int] = {}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                lengths[module, node.name] = node.end_lineno - first + 1
    return lengths


def test_no_class_is_longer_than_one_sitting() -> None:
    """No class spans more than MAX_CLASS_LINES lines."""
    too_long = {
        f"{module}:{name} ({lines} lines)"
        for (module, name), lines in class_lengths().items()
        if lines > MAX_CLASS_LINES
    }

    assert set() == too_long


def test_the_measure_counts_a_class_whole_from_its_first_decorator(tmp_path: Path) -> None:
    """A decorated class of 301 lines is measured as 301, nested classes on their own."""
    body = "\n".join(f"    x{i} = {i}" for i in range(297))
    (tmp_path / "m.py").write_text(
        f"import attrs\n\n\n@attrs.define\nclass Big:\n    class Inner:\n        y = 1\n{body}\n"
    )

    assert {("m.py", "Big"): 301, ("m.py", "Inner"): 2} == class_lengths(tmp_path)
