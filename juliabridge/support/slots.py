"""The one bound on the tuple slots a tree's paths may ask for, shared by every reader that
builds a tree: a bundle's manifest, a Julia export's description, a weights file's tree record,
a Reactant export's paths, and lux/trees.py's build_tree itself."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..errors import ResourceLimitError

#: A path: named steps (dict keys) and 1-based integer steps (tuple positions).
TreePath = tuple[int | str, ...]

#: Tuple slots the paths of one tree may ask for in all (a Tuple is as long as its largest
#: position, so each integer step is an allocation): a fixed allowance plus this many per
#: path. Shared by every reader that builds a tree (a bundle's manifest, a Julia export's
#: description, a weights file's tree record, a Reactant export's paths) and checked before
#: any tuple is built: 20,000 paths ``["eK", 20000]`` ask for 4*10^8 slots from 360 KB.
TUPLE_SLOTS_BASE = 1 << 16
TUPLE_SLOTS_PER_PATH = 64


def slot_allowance(n_paths: int) -> int:
    """The tuple slots a tree of `n_paths` paths may ask for (TUPLE_SLOTS_BASE + per path)."""
    return TUPLE_SLOTS_BASE + TUPLE_SLOTS_PER_PATH * n_paths


def tuple_slots(paths: Iterable[TreePath]) -> tuple[int, int, TreePath]:
    """The tuple slots `paths` ask for: each container below which steps are integers is as
    long as its largest step. Linear in the paths' total length; allocates no tuple.

    Returns:
        ``(total, largest step, a path holding it)`` (``(0, 0, ())`` without integer steps).
    """
    longest: dict[TreePath, tuple[int, TreePath]] = {}
    for path in paths:
        for n, step in enumerate(path):
            if type(step) is int and step > longest.get(path[:n], (0, ()))[0]:
                longest[path[:n]] = (step, path)
    total = sum(step for step, _ in longest.values())
    step, where = max(longest.values(), default=(0, ()), key=lambda v: v[0])
    return total, step, where


def check_tuple_slots(paths: Collection[TreePath], what: str) -> None:
    """Refuse `paths` whose integer steps would build more tuple slots than they justify.

    Args:
        paths: every path of one tree (leaves and empty containers).
        what: the tree and where it comes from, for the message (e.g. ``"x.json: params"``).

    Raises:
        ResourceLimitError: more than `slot_allowance(len(paths))` slots; the message names the
            total, the largest step and its path.
    """
    total, step, where = tuple_slots(paths)
    allowed = slot_allowance(len(paths))
    if total > allowed:
        raise ResourceLimitError(
            f"{what}: the paths' positions ask for {total} tuple slots (the largest step is "
            f"{step}, in {list(where)[:8]}) for {len(paths)} paths, more than the {allowed} "
            f"juliabridge allows ({TUPLE_SLOTS_BASE} plus {TUPLE_SLOTS_PER_PATH} per path); "
            "a Lux Tuple's positions are 1 to its length, each holding a listed array or "
            "empty container, so the file was not written by save_params or JuliaBridge"
        )


__all__ = [
    "TUPLE_SLOTS_BASE",
    "TUPLE_SLOTS_PER_PATH",
    "check_tuple_slots",
    "slot_allowance",
    "tuple_slots",
]
