"""The rules that relate one part of a manifest to another (spec §3.3-§3.11): unique paths
and datasets, echoes, the returned state tree, static state, prefixes."""

from __future__ import annotations

from ...support.slots import check_tuple_slots
from .entries import MANIFEST_NAME, LuxPath, Manifest, ResultEntry, format_path
from .schema import (
    ROLES,
)
from .schema import fail as _fail

#: Reactant's exporter (``Serialization.export_to_enzymejax``), as recorded in metadata and in
#: converted bundles' producer; here so that readers of a producer need not import
#: reactant_export/.
REACTANT_EXPORTER = "Reactant.Serialization.export_to_enzymejax"

PRODUCER_KEYS = (
    "tool",
    "tool_version",
    "julia",
    "lux",
    "reactant",
    "made_with_julia",
    "note",
    "created",
)


def _check_files(m: Manifest) -> None:
    """Every file the manifest names is a different file, and none is the manifest itself."""
    # Case-folded: on macOS and Windows "Model.mlir" and "model.mlir" are one file.
    taken: dict[str, str] = {MANIFEST_NAME: "the manifest"}
    for key, ref in m.files():
        folded = ref.file.casefold()
        if folded in taken:
            raise _fail(
                f"{key}.file",
                f"{ref.file!r} is also {taken[folded]}; every file of a bundle has its own name",
            )
        taken[folded] = f"{key}.file"


def check_consistency(m: Manifest) -> None:
    """Check the rules relating one part of `m` to another (spec §3.3-§3.11, §6 step 2).

    Raises:
        ManifestError: a rule is broken, named by the entry that breaks it.
    """
    seen: dict[tuple[str, LuxPath], int] = {}
    datasets: dict[str, str] = {}
    for a in m.arguments:
        for p in (a.path, *a.tied_paths):
            key = (a.role, p)
            if key in seen:
                raise _fail(
                    f"arguments[{a.index}]",
                    f"{format_path(a.role, p)} is also argument {seen[key]}; paths must be unique",
                )
            seen[key] = a.index
        if a.dataset is not None:
            _claim_dataset(datasets, a.dataset, f"arguments[{a.index}].dataset")
    if m.examples is not None:
        for group, entries in (("inputs", m.examples.inputs), ("outputs", m.examples.outputs)):
            for j, entry in enumerate(entries):
                _claim_dataset(datasets, entry.dataset, f"examples.{group}[{j}].dataset")
    for r in m.results:
        if r.echo_of is not None:
            _check_echo(m, r, r.echo_of)
    # Integer and named steps cannot share a parent, and no path may be a prefix of another.
    outputs: dict[LuxPath, str] = {}
    for r in m.results:
        for j, p in enumerate(r.paths):
            _claim(outputs, p, f"results[{r.index}].paths[{j}]")
    for j, al in enumerate(m.aliases):
        _claim(outputs, al.path, f"aliases[{j}].path")
    _check_prefixes(list(outputs), "output")
    _check_step_kinds(list(outputs), "output")
    for role in ROLES:
        _check_prefixes([p for (r, p) in seen if r == role], role)
    static = {leaf.path: j for j, leaf in enumerate(m.static_state)}
    if len(static) != len(m.static_state):
        raise _fail("static_state", "a path appears twice; each state leaf is listed once")
    for group, role in (("params", "parameter"), ("state", "state")):
        empties = m.empty.get(group, ())
        leaves = {p for (r, p) in seen if r == role}
        if role == "state":
            _check_static_paths(static, leaves)
            leaves |= set(static)
        # Every prefix of every leaf, so each empty path is checked in O(its length).
        inner = {leaf[:n] for leaf in leaves for n in range(len(leaf) + 1)}
        for e in empties:
            if e in inner or any(e[:n] in leaves for n in range(len(e) + 1)):
                raise _fail(
                    f"empty.{group}",
                    f"{list(e)} is listed as an empty container but holds or is a leaf",
                )
        _check_prefixes(list(leaves), role)
        _check_step_kinds([*leaves, *empties], role)
        check_tuple_slots([*leaves, *empties], f"{MANIFEST_NAME}: the {group} tree")
    _check_step_kinds([p for (r, p) in seen if r == "input"], "input")
    _check_returned_state(m)


def _check_static_paths(static: dict[LuxPath, int], state_leaves: set[LuxPath]) -> None:
    """A static leaf is a leaf of the state tree beside the arrays: not on, above or below one."""
    above = {leaf[:n] for leaf in state_leaves for n in range(len(leaf))}
    for p, j in static.items():
        w = f"static_state[{j}].path"
        if p in state_leaves:
            raise _fail(w, f"{list(p)} is also a state argument; a leaf is an array or static")
        if p in above:
            raise _fail(
                w,
                f"{list(p)} is above the state argument(s) below it; a leaf cannot also be a "
                "container",
            )
        for n in range(1, len(p)):
            if p[:n] in state_leaves:
                raise _fail(
                    w,
                    f"{list(p)} is below the state argument {list(p[:n])}; a leaf cannot also "
                    "be a container",
                )


def _claim_dataset(datasets: dict[str, str], name: str, where: str) -> None:
    if name in datasets:
        raise _fail(where, f"{name} is also used by {datasets[name]}; each dataset holds one value")
    datasets[name] = where


def _check_echo(m: Manifest, r: ResultEntry, echo_of: int) -> None:
    """An echoed argument comes back as it went in: same shape, dtype and batch axis."""
    a = m.arguments[echo_of]
    w = f"results[{r.index}]"
    if (r.shape, r.dtype) != (a.shape, a.dtype):
        raise _fail(
            w,
            f"echo_of argument {a.index} ({a.label}, {a.dtype} {list(a.shape)}) but the result "
            f"is {r.dtype} {list(r.shape)}; an echoed argument keeps its shape and dtype",
        )
    if r.batch_axis != a.batch_axis:
        raise _fail(
            f"{w}.batch_axis",
            f"expected {a.batch_axis} (the batch_axis of argument {a.index}, which it echoes), "
            f"found {r.batch_axis}",
        )


def _check_returned_state(m: Manifest) -> None:
    """new_state is the state tree: every returned state leaf is a state argument's leaf.

    Lux returns the whole state with some leaves replaced, so a value returned at
    ``["state", *p]`` must be the state argument at `p`, with its shape and dtype.
    """
    state_args = {a.path: a for a in m.arguments if a.role == "state"}
    returned: list[tuple[LuxPath, str, tuple[int, ...], str]] = []
    for r in m.results:
        returned += [
            (p, f"results[{r.index}].paths[{j}]", r.shape, r.dtype) for j, p in enumerate(r.paths)
        ]
    for j, al in enumerate(m.aliases):
        src = m.arguments[al.argument]
        returned.append((al.path, f"aliases[{j}].path", src.shape, src.dtype))
    for path, where, shape, dtype in returned:
        if path[0] != "state":
            continue
        target = state_args.get(path[1:])
        if target is None:
            raise _fail(
                where,
                f"{list(path)} is not the path of a state argument; the returned state must "
                "be the same tree as the state passed in (Lux returns st with leaves replaced)",
            )
        if (target.shape, target.dtype) != (shape, dtype):
            raise _fail(
                where,
                f"returns {dtype} {list(shape)} for {target.label}, which is "
                f"{target.dtype} {list(target.shape)}; a state leaf keeps its shape and dtype",
            )


def _check_step_kinds(paths: list[LuxPath], what: str) -> None:
    """Below one parent, steps are all integers (Tuple/Array) or all names (NamedTuple/Dict);
    and no integer step is larger than the number of paths of the tree.

    The tree is built with one slot per Tuple position up to the largest (lux/trees.py), so
    a position is an allocation: every position holding an array or an empty container is a
    path listed here, so a larger one could only be reached through unlisted positions (the
    schema admits 2^31, which built a 2^31-slot tuple: MemoryError after a minute).
    """
    kinds: dict[LuxPath, type] = {}
    for p in paths:
        for n, step in enumerate(p):
            if isinstance(step, int) and step > len(paths):
                raise _fail(
                    what,
                    f"path {list(p)} has the position {step} below {list(p[:n])}, but the "
                    f"{what} tree lists only {len(paths)} paths; a Tuple's positions are "
                    "1 to its length, each holding a listed array or empty container",
                )
            kind = int if isinstance(step, int) else str
            if kinds.setdefault(p[:n], kind) is not kind:
                raise _fail(
                    what,
                    f"below {list(p[:n])} some path steps are integers and some are names; a "
                    "Julia container is either a Tuple/Array (integer steps) or a NamedTuple, "
                    "struct or Dict (names), never both",
                )


def _claim(outputs: dict[LuxPath, str], path: LuxPath, where: str) -> None:
    if path in outputs:
        raise _fail(
            where,
            f"output path {list(path)} is also given by {outputs[path]}; "
            "each output path appears once",
        )
    outputs[path] = where


def _check_prefixes(paths: list[LuxPath], what: str) -> None:
    ordered = sorted(paths, key=lambda p: (len(p), [str(s) for s in p]))
    as_set = set(paths)
    for p in ordered:
        for n in range(len(p)):
            if p[:n] in as_set:
                raise _fail(
                    what,
                    f"path {list(p[:n])} is a leaf but {list(p)} continues below it; "
                    "a leaf cannot also be a container",
                )
