"""The package never relies on `assert`: python -O strips it, and a failed one is no typed error.

Every check a hostile bundle or a wrong call can reach raises a JuliaBridgeError naming what
was wrong; invariants mypy needs narrowed are checked the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "juliabridge"


def test_no_assert_statements_in_the_package() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [
            f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Assert)
        ]
    assert not found, f"assert statements in the package: {found}"
