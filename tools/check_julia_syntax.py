"""Parse every Julia file of the repository with tree-sitter-julia; fail on any syntax error.

    python tools/check_julia_syntax.py [PATH ...]

With no PATH, checks every ``*.jl`` file under the repository root (hidden directories,
virtual environments and build outputs skipped) and the ``%%julia`` code cells of notebooks
under ``tutorials/``. A PATH may be a file (``.jl`` or ``.ipynb``) or a directory. Prints
``file:line:col: ...`` for every ERROR or MISSING node and exits 1 if there is any; exits 2
when tree-sitter-julia is not installed (``pip install tree-sitter tree-sitter-julia``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"node_modules", "build", "dist", "__pycache__", "site-packages"}
JULIA_MAGIC = "%%julia"


@dataclass(frozen=True)
class SyntaxProblem:
    """One syntax error: where (1-based line/column) and what tree-sitter found there."""

    where: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}:{self.column}: {self.message}"


def _parser() -> Any:
    try:
        import tree_sitter
        import tree_sitter_julia
    except ImportError as exc:
        raise SystemExit(
            f"check_julia_syntax: {exc.name} is not installed; "
            "pip install tree-sitter tree-sitter-julia"
        ) from exc
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_julia.language()))


def _error_nodes(node: Any) -> Iterator[Any]:
    """ERROR nodes with no ERROR inside (the most precise ones) and MISSING nodes."""
    if not node.has_error:
        return
    inner = False
    for child in node.children:
        if child.has_error or child.is_missing:
            inner = True
            yield from _error_nodes(child)
    if node.is_missing or (node.is_error and not inner):
        yield node


def check_source(source: str, where: str, parser: Any, line_offset: int = 0) -> list[SyntaxProblem]:
    """Syntax problems of Julia `source`; `line_offset` shifts line numbers (notebook cells)."""
    tree = parser.parse(source.encode("utf-8"))
    problems = []
    for node in _error_nodes(tree.root_node):
        row, col = node.start_point
        end_row, _ = node.end_point
        if node.is_missing:
            message = f"missing {node.type!r}"
        else:
            snippet = source.encode("utf-8")[node.start_byte : node.end_byte][:40]
            text = snippet.decode("utf-8", "replace").splitlines()[0] if snippet else ""
            span = f" (to line {end_row + 1 + line_offset})" if end_row > row else ""
            message = f"syntax error near {text!r}{span}"
        problems.append(SyntaxProblem(where, row + 1 + line_offset, col + 1, message))
    return problems


def julia_cells(notebook: Path) -> Iterator[tuple[int, str]]:
    """(cell number, Julia source) of every code cell whose source starts with ``%%julia``."""
    data = json.loads(notebook.read_text(encoding="utf-8"))
    for number, cell in enumerate(data.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        if text.lstrip().startswith(JULIA_MAGIC):
            first_newline = text.find("\n")
            yield number, "" if first_newline < 0 else text[first_newline + 1 :]


def check_file(path: Path, parser: Any, root: Path) -> list[SyntaxProblem]:
    """Syntax problems of a ``.jl`` file or of the Julia cells of an ``.ipynb`` notebook."""
    try:
        shown = str(path.resolve().relative_to(root))
    except ValueError:
        shown = str(path)
    if path.suffix == ".ipynb":
        problems = []
        for number, source in julia_cells(path):
            # line 1 of the Julia code is line 2 of the cell (after the magic line)
            problems += check_source(source, f"{shown}[cell {number}]", parser, line_offset=1)
        return problems
    return check_source(path.read_text(encoding="utf-8"), shown, parser)


def discover(root: Path) -> Iterator[Path]:
    """Every ``.jl`` file under `root`, and notebooks under `root`/tutorials."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
        )
        here = Path(dirpath)
        in_tutorials = "tutorials" in here.relative_to(root).parts
        for name in sorted(filenames):
            if name.endswith(".jl") or (in_tutorials and name.endswith(".ipynb")):
                yield here / name


def expand(paths: Iterable[str]) -> Iterator[Path]:
    """Files named on the command line, directories expanded like the repository root."""
    for p in map(Path, paths):
        if p.is_dir():
            yield from discover(p)
        else:
            yield p


def main(argv: list[str] | None = None) -> int:
    """Check the given paths (default: the repository); return the exit status."""
    args = sys.argv[1:] if argv is None else argv
    try:
        parser = _parser()
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    files = list(expand(args) if args else discover(REPO))
    problems: list[SyntaxProblem] = []
    for path in files:
        if not path.is_file():
            problems.append(SyntaxProblem(str(path), 0, 0, "no such file"))
            continue
        problems += check_file(path, parser, REPO)
    for problem in problems:
        print(problem)
    print(
        f"check_julia_syntax: {len(files)} file(s), {len(problems)} problem(s)",
        file=sys.stderr,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
