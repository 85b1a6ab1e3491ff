"""stablehlo.sort (spec.md#sort).

A comparator that is LT or GT on the two arguments of one operand (in either argument order,
as Julia's `rev=true` swaps them), with or without TOTALORDER, or a lexicographic chain
`or(P0, and(EQ0, or(P1, ...)))` of those, becomes `lax.sort` with `num_keys`: descending keys
are reversed by a transform that keeps ties tied, so a stable sort stays stable exactly as
StableHLO's would; TOTALORDER keys are sorted by their totalOrder integer. JAX differentiates
and batches `lax.sort`.

Those keys are claimed only where `lax.sort` gives XLA's result for every input: integer and
Boolean keys, and float keys under TOTALORDER. A plain float or complex LT/GT is no strict weak
order on data with NaN (NaN compares false), and XLA's result then depends on its sorting
algorithm. Those, and any other comparator (e.g. `isless(abs(a), abs(b))` from
`sort(x; by=abs)`), run as XLA's sort with the comparator region itself (_sort_exact.py),
batched by vmap and differentiable in both modes.
"""

from __future__ import annotations

from typing import Any

from ..registry import Impl, OpView, lifts
from ._indexing_util import flag
from ._sort_exact import sort_with_comparator
from ._sort_util import claimable, comparator_keys, sort_by_keys


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
    if keys is not None and not claimable(view, keys):
        keys = None

    def impl(regions: Any, *xs: Any) -> list[Any]:
        if keys is not None:
            return sort_by_keys(xs, keys, dim, stable)
        return sort_with_comparator(xs, lambda *pairs: regions[0](*pairs)[0], dim, stable)

    return impl
