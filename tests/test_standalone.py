"""A clone stands alone: a test reads something outside the checkout only through tests/outside.py.

The real Reactant modules in ../shared are the one outside resource tests read; a clone has
nothing beside it, so each such read must skip with its reason there (issue 51). An AST scan
of every Python file under tests/ follows the paths built from `__file__` (`.parent`,
`.parents[k]`, `/ ".."`, `os.path.dirname`, names bound to them) and finds each that climbs
above the checkout's root: only tests/outside.py may build one.
"""

from __future__ import annotations

import ast
import math
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from tests import outside

REPO = Path(__file__).resolve().parents[1]
#: The one module allowed to build a path leaving the checkout (its reads skip when absent).
GUARD = "tests/outside.py"


@dataclass(frozen=True)
class Climb:
    """A path built from `__file__`: `up` folders above the file's own, `top` the most so far."""

    up: float
    top: float

    def step(self, n: float) -> Climb:
        return Climb(self.up + n, max(self.top, self.up + n))


_SAME = {"resolve", "absolute", "expanduser", "with_name", "with_suffix", "with_stem"}
_OS_SAME = {"abspath", "realpath", "normpath", "expanduser"}


def _parts(node: ast.expr) -> list[str] | None:
    """The path steps of a string constant ('../shared/x' -> ['..', 'shared', 'x'])."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [p for p in node.value.split("/") if p]
    return None


class _Scan:
    def __init__(self, tree: ast.Module) -> None:
        self.names: dict[str, Climb] = {}
        # Flow-insensitive: a name bound anywhere to a path from __file__ (twice, so that a
        # name bound from another name defined further down resolves too).
        for _ in range(2):
            for node in ast.walk(tree):
                self._bind(node)

    def _bind(self, node: ast.AST) -> None:
        pairs: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.For | ast.comprehension):
            # Iterating a path's `.parents` (or a slice of it) binds each ancestor.
            pairs = [(node.target, node.iter)]
        for target, value in pairs:
            if isinstance(target, ast.Name) and (climb := self.eval(value)) is not None:
                self.names[target.id] = climb

    def eval(self, node: ast.expr) -> Climb | None:
        """Where `node` points relative to the file, or None if it is not a path from __file__."""
        if isinstance(node, ast.Name):
            return Climb(0, 0) if node.id == "__file__" else self.names.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            base = self.eval(node.value)
            return base.step(1) if base else None
        if isinstance(node, ast.Attribute) and node.attr == "parents":
            base = self.eval(node.value)  # every ancestor, when iterated whole
            return base.step(math.inf) if base else None
        if isinstance(node, ast.Subscript):
            parents = node.value
            if not (isinstance(parents, ast.Attribute) and parents.attr == "parents"):
                return None
            base = self.eval(parents.value)
            if base is None:
                return None
            index = node.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, int):
                return base.step(index.value + 1)
            if isinstance(index, ast.Slice):
                upper = index.upper
                if isinstance(upper, ast.Constant) and isinstance(upper.value, int):
                    return base.step(upper.value)  # the highest of parents[lower:upper]
            return base.step(math.inf)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            base = self.eval(node.left)
            return self._join(base, [node.right]) if base else None
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in {"Path", "PurePath", "PurePosixPath"}:
                return self.eval(node.args[0]) if node.args else None
            if isinstance(func, ast.Attribute):
                owner = ast.unparse(func.value)
                if owner in {"os.path", "path"}:
                    if not node.args:
                        return None
                    first = self.eval(node.args[0])
                    if first is None:
                        return None
                    if func.attr == "dirname":
                        return first.step(1)
                    if func.attr in _OS_SAME:
                        return first
                    if func.attr == "join":
                        return self._join(first, node.args[1:])
                    return None
                base = self.eval(func.value)
                if base is None:
                    return None
                if func.attr in _SAME:
                    return base
                if func.attr == "joinpath":
                    return self._join(base, node.args)
        return None

    @staticmethod
    def _join(base: Climb, parts: list[ast.expr]) -> Climb:
        for part in parts:
            steps = _parts(part)
            if steps is None:  # a name: one step down, whatever it holds
                base = base.step(-1)
                continue
            for s in steps:
                base = base.step(1 if s == ".." else 0 if s == "." else -1)
        return base


def paths_leaving(source: str, rel: PurePosixPath) -> list[int]:
    """The lines of `source` (a file at `rel` in the checkout) that build a path from
    `__file__` climbing above the checkout's root."""
    tree = ast.parse(source)
    scan = _Scan(tree)
    depth = len(rel.parts)  # climbing this many folders from the file reaches the root
    # `x.parents` alone is every ancestor; under a subscript only the chosen ones count.
    subscripted = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
    lines = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or id(node) in subscripted:
            continue
        if (climb := scan.eval(node)) and climb.top > depth:
            lines.add(node.lineno)
    return sorted(lines)


def _test_files() -> list[PurePosixPath]:
    return sorted(PurePosixPath(p.relative_to(REPO).as_posix()) for p in REPO.glob("tests/**/*.py"))


def test_only_the_guard_builds_paths_leaving_the_checkout() -> None:
    found = {}
    for rel in _test_files():
        lines = paths_leaving((REPO / rel).read_text(encoding="utf-8"), rel)
        if lines:
            found[str(rel)] = lines
    # The guard is found (the scan sees the real pattern), and nothing else.
    assert set(found) == {GUARD}, (
        "tests reading outside the checkout must go through tests/outside.py "
        f"(reactant_fixture and friends skip where it is absent): {found}"
    )


@pytest.mark.parametrize(
    ("rel", "line"),
    [
        ("tests/lax/t.py", 'F = Path(__file__).resolve().parents[2] / ".." / "shared"'),
        ("tests/t.py", 'F = Path(__file__).resolve().parents[1].parent / "shared"'),
        ("tests/t.py", "F = Path(__file__).parents[2]"),
        ("tests/t.py", 'F = Path(__file__).parent.parent.parent / "shared"'),
        ("tests/t.py", 'H = Path(__file__).resolve()\nF = [p / "s" for p in H.parents[1:4]]'),
        ("tests/t.py", "H = Path(__file__)\nfor p in H.parents:\n    print(p)"),
        ("tests/t.py", 'R = Path(__file__).parents[1]\nF = R / "../shared/fixtures"'),
        ("tests/t.py", 'R = Path(__file__).parents[1]\nF = R.joinpath("..", "shared")'),
        ("tests/t.py", "F = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))"),
        ("tests/t.py", 'F = os.path.join(os.path.dirname(__file__), "..", "..")'),
    ],
)
def test_the_scan_finds_paths_leaving_the_checkout(rel: str, line: str) -> None:
    assert paths_leaving(line + "\n", PurePosixPath(rel)), line


@pytest.mark.parametrize(
    ("rel", "line"),
    [
        ("tests/lax/t.py", 'F = Path(__file__).resolve().parents[1] / "docs" / "x.md"'),
        ("tests/lax/t.py", 'F = Path(__file__).resolve().parents[2] / "docs"'),
        ("tests/t.py", 'F = Path(__file__).resolve().parent.parent / "README.md"'),
        ("tests/t.py", 'R = Path(__file__).parents[1]\nF = R / "docs" / ".." / "tools"'),
        ("tests/t.py", 'F = os.path.join(os.path.dirname(__file__), "..")'),
        ("tests/t.py", 'F = Path("/etc/passwd").parent.parent'),  # not from __file__
    ],
)
def test_the_scan_lets_paths_inside_the_checkout_be(rel: str, line: str) -> None:
    assert paths_leaving(line + "\n", PurePosixPath(rel)) == [], line


# --- the guard skips with its reason ------------------------------------------------------------


def test_each_read_skips_naming_what_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = (tmp_path / "a" / "shared" / "fixtures" / "reactant",)
    monkeypatch.setattr(outside, "CANDIDATES", nowhere)
    assert outside.reactant_fixture_dir() is None
    assert outside.reactant_fixture_names() == []
    for read in (
        lambda: outside.reactant_fixture("sine_loop_while.mlir"),
        lambda: outside.reactant_fixture_text("sine_loop_while.mlir"),
        outside.skip_without_reactant_fixtures,
    ):
        with pytest.raises(pytest.skip.Exception) as skipped:
            read()
        reason = str(skipped.value)
        assert "not found" in reason and "../shared/fixtures/reactant" in reason
        assert str(nowhere[0]) in reason


def test_a_present_folder_is_read_and_a_missing_file_still_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "x" / "shared" / "fixtures" / "reactant"
    full = tmp_path / "shared" / "fixtures" / "reactant"
    empty.mkdir(parents=True)  # a folder without modules is no folder of modules
    full.mkdir(parents=True)
    (full / "b.mlir").write_text("module {}\n")
    (full / "a.mlir").write_text("func\n")
    (full / "SOURCES.md").write_text("provenance\n")
    monkeypatch.setattr(outside, "CANDIDATES", (empty, full))
    assert outside.reactant_fixture_dir() == full
    assert outside.skip_without_reactant_fixtures() == full
    assert outside.reactant_fixture_names() == ["a.mlir", "b.mlir"]
    assert outside.reactant_fixture("a.mlir") == full / "a.mlir"
    assert outside.reactant_fixture_text("b.mlir") == "module {}\n"
    with pytest.raises(pytest.skip.Exception, match=r"fixture c\.mlir not found"):
        outside.reactant_fixture("c.mlir")


def test_the_guard_looks_beside_the_checkout_first() -> None:
    assert outside.REPO == REPO
    assert os.path.relpath(outside.CANDIDATES[0], REPO) == "../shared/fixtures/reactant"
    assert all(REPO not in c.parents for c in outside.CANDIDATES)
