"""Nested containers addressed by Lux paths (named steps -> dict keys, 1-based ints -> tuples)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..bundle.manifest import LuxPath, format_path
from ..errors import CallArgumentError
from ..support.slots import check_tuple_slots


def build_tree(
    leaves: Iterable[tuple[LuxPath, Any]], empty: Iterable[LuxPath] = (), what: str = "the tree"
) -> Any:
    """Nest `(path, leaf)` pairs: string steps become dicts, integer steps tuples (1-based).

    Insertion order follows the pairs, which is Julia's field order for manifest order.
    `empty` paths become empty dicts (Lux's empty NamedTuples, e.g. a MaxPool's parameters).

    Raises:
        ResourceLimitError: the paths ask for more tuple slots than `check_tuple_slots`
            allows (checked before any tuple is built); `what` names the tree.
    """
    leaves = list(leaves)
    empty = list(empty)
    check_tuple_slots([p for p, _ in leaves] + empty, what)
    root: dict[Any, Any] = {}
    single: list[Any] = []
    for path in empty:
        node = root
        for step in path:
            node = node.setdefault(step, {})
    for path, leaf in leaves:
        if not path:
            single.append(leaf)
            continue
        node = root
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = leaf
    if single:
        return single[0]
    return _tuplify(root)


def _tuplify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(isinstance(k, int) for k in node):
        n = max(node)
        return tuple(_tuplify(node.get(i + 1)) for i in range(n))
    return {k: _tuplify(v) for k, v in node.items()}


def lookup(tree: Any, path: LuxPath, root: str, expected: str | None = None) -> Any:
    """The leaf at `path`, with an error naming the path when the tree lacks it.

    Args:
        tree: the tree passed (params, state or the inputs).
        path: the Lux path of the leaf.
        root: how the tree is named in messages: "params", "state" or "x".
        expected: what to pass instead, for the message (default: "the same tree structure
            as model.params" / "model.state"; the inputs have no such attribute, so a model
            says their form).
    """
    node = tree
    for depth, step in enumerate(path):
        try:
            if isinstance(step, int) and isinstance(node, (tuple, list)):
                node = node[step - 1]
            else:
                node = node[step]
        except (KeyError, IndexError, TypeError) as e:
            advice = expected or (
                f"the same tree structure as model.{root}"
                if root in ("params", "state")
                else "the same tree structure as the model's signature['arguments'] lists"
            )
            raise CallArgumentError(
                f"{format_path(root, path)}: missing from the {root} you passed (no "
                f"{format_path(root, path[: depth + 1])}); pass {advice}"
            ) from e
    return node
