"""No function a screen too long, and package faces that are faces (issue 42).

Beside tests/test_import_graph.py, which keeps the floors: every function (and method) in
juliabridge/ holds at most MAX_FUNCTION_LINES lines of code, counted from its ``def`` (or first
decorator) to its last line without its docstring, unless LONG_FUNCTIONS names it with the
reason a reader accepts; and every package ``__init__.py`` is a face: its docstring, imports,
``__all__`` and ``if TYPE_CHECKING:`` imports, with at most MAX_FACE_LOGIC_LINES lines of
anything else. A long function is split along what it does (parse, check, decide, write);
a face's logic moves to a module named for what it holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import juliabridge

PACKAGE = Path(juliabridge.__file__).resolve().parent

MAX_FUNCTION_LINES = 80
MAX_FACE_LOGIC_LINES = 10

#: "module:qualified name" -> why it may be longer than MAX_FUNCTION_LINES (keep it tiny).
LONG_FUNCTIONS: dict[str, str] = {}


def _docstring_lines(node: ast.AST) -> int:
    """Lines of `node`'s docstring (0 without one)."""
    body = getattr(node, "body", None)
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return int(body[0].end_lineno or body[0].lineno) - body[0].lineno + 1
    return 0


def function_lengths(source: str, module: str) -> dict[str, int]:
    """``module:qualname`` -> lines of code of every function and method in `source` (nested
    ones too, named through their parents), docstrings left out."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                lines = int(child.end_lineno or child.lineno) - first + 1
                out[f"{module}:{prefix}{child.name}"] = lines - _docstring_lines(child)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def face_logic_lines(source: str) -> int:
    """Lines of a package ``__init__`` that are not its face: everything but the module
    docstring, imports, ``__all__`` and ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(source)
    n = 0
    for i, stmt in enumerate(tree.body):
        if i == 0 and _docstring_lines(tree):
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        if [getattr(t, "id", None) for t in targets] == ["__all__"]:
            continue
        if (
            isinstance(stmt, ast.If)
            and ast.unparse(stmt.test).endswith("TYPE_CHECKING")
            and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body)
        ):
            continue
        n += int(stmt.end_lineno or stmt.lineno) - stmt.lineno + 1
    return n


def _sources() -> dict[str, Path]:
    """Dotted module name -> file, for every module of juliabridge/."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["juliabridge", *path.relative_to(PACKAGE).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_no_function_is_longer_than_a_screen() -> None:
    long = {}
    for module, path in _sources().items():
        for name, lines in function_lengths(path.read_text(), module).items():
            if lines > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS:
                long[name] = lines
    assert not long, (
        f"functions over {MAX_FUNCTION_LINES} lines of code (docstring left out): {long}; split "
        "each along what it does (parse, check, decide, write), or name it in LONG_FUNCTIONS "
        "with the reason a reader accepts"
    )


def test_the_allowed_long_functions_exist_and_say_why() -> None:
    every: dict[str, int] = {}
    for module, path in _sources().items():
        every.update(function_lengths(path.read_text(), module))
    for name, why in LONG_FUNCTIONS.items():
        assert name in every, f"LONG_FUNCTIONS names {name}, which is gone: drop it"
        assert why.strip() and "\n" not in why, name


def test_package_faces_hold_no_logic() -> None:
    heavy = {}
    for path in sorted(PACKAGE.rglob("__init__.py")):
        n = face_logic_lines(path.read_text())
        if n > MAX_FACE_LOGIC_LINES:
            heavy[str(path.relative_to(PACKAGE.parent))] = n
    assert not heavy, (
        f"package faces with more than {MAX_FACE_LOGIC_LINES} lines besides docstring, imports "
        f"and __all__: {heavy}; move the logic to a module named for what it holds"
    )


def test_the_measures_can_fail() -> None:
    # A planted long function (nested, in a class, decorated) and a planted face with logic.
    body = "\n".join(f"        x{i} = {i}" for i in range(85))
    source = (
        "class C:\n"
        "    @staticmethod\n"
        "    def f():\n"
        '        """One line of docstring."""\n'
        f"{body}\n"
        "        def g():\n"
        "            return 1\n"
        "        return g\n"
    )
    lengths = function_lengths(source, "m")
    assert lengths == {"m:C.f": 1 + 1 + 85 + 3, "m:C.f.g": 2}
    face = (
        '"""Doc."""\n'
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from .a import b\n"
        "if TYPE_CHECKING:\n"
        "    from .c import d\n"
        '__all__ = ["b"]\n'
    )
    assert face_logic_lines(face) == 0
    assert face_logic_lines(face + "def f():\n    return 1\n\nX = 2\n") == 3
    # And the real tree is measured (a walk that found nothing would pass).
    sources = _sources()
    assert "juliabridge.cli.commands" in sources and "juliabridge.backends.enzyme" in sources
    assert function_lengths(sources["juliabridge.cli.commands"].read_text(), "c")["c:main"] > 5
