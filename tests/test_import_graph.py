"""The house has no circles and no stairs going up (issue 30; docs/architecture.md, "Floors").

Every `import` in juliabridge/ (at module level, inside functions and under
``if TYPE_CHECKING:``) is an edge of a graph whose nodes are the package's modules. Each module
lives in a room, the longest prefix of its dotted name that LAYERS names, and each room on a
floor. The graph must have no cycle, and an edge may only go down: to a room on a strictly
lower floor, or within the module's own room. A package's ``__init__`` may import its own
subpackages and submodules (that is how it re-exports them). docs/architecture.md prints the
same table; `test_the_architecture_doc_prints_the_same_floors` keeps the two equal.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import juliabridge

PACKAGE = Path(juliabridge.__file__).resolve().parent
DOC = PACKAGE.parent / "docs" / "architecture.md"

#: Room (dotted prefix) -> floor; 0 is the ground floor. Rooms on one floor do not import
#: each other.
LAYERS: dict[str, int] = {
    "juliabridge._version": 0,
    "juliabridge.errors": 0,
    "juliabridge.support": 1,
    "juliabridge.stablehlo": 2,
    "juliabridge.bundle.files": 3,
    "juliabridge.bundle.manifest": 4,
    "juliabridge.bundle.weights": 5,
    "juliabridge.bundle": 6,
    "juliabridge.transforms": 7,
    "juliabridge.backends.base": 8,
    "juliabridge.backends.lax": 8,
    "juliabridge.backends.xla": 9,
    "juliabridge.backends.enzyme": 10,
    "juliabridge.backends": 11,
    "juliabridge.function": 12,
    "juliabridge.bundle.write": 13,
    "juliabridge.lux": 14,
    "juliabridge.reactant_export": 15,
    "juliabridge.julia_export": 15,
    "juliabridge.importers": 16,
    "juliabridge.verification": 17,
    "juliabridge.exporting": 17,
    "juliabridge.flax": 18,
    "juliabridge.equinox": 18,
    "juliabridge.driver": 18,
    "juliabridge.examples": 18,
    "juliabridge.exporting_onnx": 18,
    "juliabridge.testing": 19,
    "juliabridge.cli": 20,
    "juliabridge.__main__": 21,
    "juliabridge": 21,
}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package __init__) for every module of juliabridge/."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["juliabridge", *path.relative_to(PACKAGE).with_suffix("").parts]
        is_init = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    return found


def _imports(name: str, path: Path, is_init: bool, modules: set[str]) -> set[str]:
    """The package modules `name` imports, anywhere in its file."""
    package = name.split(".") if is_init else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import sub` imports the module pkg.sub; `from mod import name`, mod.
            targets = [
                f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names
            ]
        else:
            continue
        out.update(t for t in targets if t in modules and t != name)
    return out


def _graph() -> tuple[dict[str, set[str]], dict[str, bool]]:
    modules = _modules()
    names = set(modules)
    graph = {n: _imports(n, p, init, names) for n, (p, init) in modules.items()}
    return graph, {n: init for n, (_, init) in modules.items()}


def room_of(module: str) -> str | None:
    """The longest LAYERS prefix of `module` (None when no room holds it)."""
    best = None
    for room in LAYERS:
        if (module == room or module.startswith(room + ".")) and (
            best is None or len(room) > len(best)
        ):
            best = room
    return best


def upward_edges(graph: dict[str, set[str]], is_init: dict[str, bool]) -> list[str]:
    """Every edge that does not go down a floor or stay in its room, as readable lines."""
    bad = []
    for src, targets in graph.items():
        src_room = room_of(src)
        for dst in sorted(targets):
            dst_room = room_of(dst)
            if src_room is None or dst_room is None or src_room == dst_room:
                continue
            if is_init[src] and dst.startswith(src + "."):
                continue  # a package re-exporting its own parts
            if LAYERS[dst_room] >= LAYERS[src_room]:
                bad.append(
                    f"{src} (floor {LAYERS[src_room]}, {src_room}) imports {dst} "
                    f"(floor {LAYERS[dst_room]}, {dst_room})"
                )
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: one path per strongly connected component of size > 1
    (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is small, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_room() -> None:
    graph, _ = _graph()
    homeless = sorted(m for m in graph if room_of(m) is None)
    assert not homeless, f"add these modules' rooms to LAYERS (and the doc): {homeless}"


def test_there_is_no_import_cycle() -> None:
    graph, _ = _graph()
    assert not cycles(graph), "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles(graph))


def test_no_import_goes_up_a_floor() -> None:
    graph, is_init = _graph()
    bad = upward_edges(graph, is_init)
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_checks_can_fail() -> None:
    # The same functions on graphs with a planted circle and a planted upward edge.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    up = {"juliabridge.errors": {"juliabridge.cli.commands"}, "juliabridge.cli.commands": set()}
    inits = {"juliabridge.errors": False, "juliabridge.cli.commands": False}
    assert upward_edges(up, inits) == [
        "juliabridge.errors (floor 0, juliabridge.errors) imports juliabridge.cli.commands "
        "(floor 20, juliabridge.cli)"
    ]
    # Same floor, different rooms: refused too.
    side = {"juliabridge.flax": {"juliabridge.equinox"}, "juliabridge.equinox": set()}
    assert len(upward_edges(side, {"juliabridge.flax": False, "juliabridge.equinox": False})) == 1
    # A package __init__ re-exporting its own subpackage is allowed; the reverse is not.
    pkg = {
        "juliabridge.backends": {"juliabridge.backends.enzyme"},
        "juliabridge.backends.xla": {"juliabridge.backends"},
    }
    inits = {"juliabridge.backends": True, "juliabridge.backends.xla": False}
    assert upward_edges(pkg, inits) == [
        "juliabridge.backends.xla (floor 9, juliabridge.backends.xla) imports "
        "juliabridge.backends (floor 11, juliabridge.backends)"
    ]
    # And the real graph is not empty (a parser that found nothing would pass the checks).
    graph, _ = _graph()
    assert "juliabridge.backends.xla" in graph["juliabridge.backends"]
    assert "juliabridge.errors" in graph["juliabridge.support.dtypes"]
    # A function-level import and one under TYPE_CHECKING count too.
    assert "juliabridge.reactant_export.sharding" in graph["juliabridge.reactant_export.directory"]
    assert "juliabridge.lux.model" in graph["juliabridge.driver.session"]


def test_the_architecture_doc_prints_the_same_floors() -> None:
    text = DOC.read_text()
    rows = re.findall(r"^\| *(\d+) *\| *(.+?) *\|$", text, re.MULTILINE)
    doc: dict[str, int] = {}
    for floor, rooms in rows:
        for room in re.findall(r"`([\w.]+)`", rooms):
            doc[room] = int(floor)
    assert doc == LAYERS, "docs/architecture.md's floor table differs from LAYERS"


#: The package root: public entry points and the package-wide error types; plumbing lives in
#: juliabridge/support/.
ROOT_MODULES = {
    "__init__",
    "__main__",
    "_version",
    "equinox",
    "errors",
    "exporting",
    "flax",
    "function",
    "importers",
    "verification",
}


def test_the_package_root_holds_only_the_listed_modules() -> None:
    found = {p.stem for p in PACKAGE.glob("*.py")}
    assert found == ROOT_MODULES, (
        f"modules added at the root: {sorted(found - ROOT_MODULES)}, gone: "
        f"{sorted(ROOT_MODULES - found)}; plumbing belongs in juliabridge/support/"
    )
