"""stablehlo.sort (spec.md#sort).

A comparator that is LT or GT on the two arguments of one operand (in either argument order,
as Julia's `rev=true` swaps them), with or without TOTALORDER, or a lexicographic chain
`or(P0, and(EQ0, or(P1, ...)))` of those, becomes `lax.sort` with `num_keys`: descending keys
are reversed by a transform that keeps ties tied, so a stable sort stays stable exactly as
StableHLO's would; TOTALORDER keys are sorted by their totalOrder integer. JAX differentiates
and batches `lax.sort`.

Any other comparator (e.g. `isless(abs(a), abs(b))` from `sort(x; by=abs)`) drives a bitonic
sorting network built from the comparator region itself (see _sort_util.sort_network): exact
for every comparator that is a strict weak order, batched by vmap and differentiable in both
modes, so no transformation is lost.
"""

from __future__ import annotations

from typing import Any

from ..registry import Impl, OpView, lifts
from ._indexing_util import flag
from ._sort_util import comparator_keys, sort_by_keys, sort_network


@lifts("stablehlo.sort", regions=True)
def sort(view: OpView) -> Impl:
    """spec.md#sort: operands sorted together along `dimension` (negative counts from the end)
    by the comparator; `is_stable` keeps equal elements in order."""
    rank = view.tensor(view.result_types[0], "result 0").rank
    dim = view.get_int("dimension", -1)
    dim += rank if dim < 0 else 0
    if not 0 <= dim < rank:
        raise view.error(f"dimension {view.get_int('dimension', -1)} is outside rank {rank}")
    stable = flag(view, "is_stable")
    keys = comparator_keys(view)

    def impl(regions: Any, *xs: Any) -> list[Any]:
        if keys is not None:
            return sort_by_keys(xs, keys, dim, stable)
        return sort_network(xs, lambda *pairs: regions[0](*pairs)[0], dim)

    return impl
