"""Control flow, tuples and tokens (spec.md#while, #if, #case, #map, #optimization_barrier,
#tuple, #get_tuple_element, #after_all, #create_token), collectives on one device, and the
host transfers that must never run.

Regions read values defined outside them directly (program.py shares a function's slots with
its regions), so the branch and loop functions here are closures JAX traces like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax import lax

from ..differentiation import reverse_unavailable
from ..registry import TOKEN, Impl, OpView, lifts
from ._control_util import counted_trips, pack, tensor_positions, unpack

Region = Callable[..., list[Any]]


def _mark(view: OpView, values: list[Any], why: str) -> list[Any]:
    """`reverse_unavailable` on the tensor values among `values`."""
    idx = tensor_positions(view.result_types)
    marked = reverse_unavailable([values[i] for i in idx], op=view.name, where=view.where, why=why)
    out = list(values)
    for i, v in zip(idx, marked):
        out[i] = v
    return out


@lifts("stablehlo.while", regions=True)
def while_(view: OpView) -> Impl:
    """spec.md#while: a counted loop (trip count known at load) is a `lax.scan` running the
    body that many times, which reverse-differentiates; any other loop is `lax.while_loop`."""
    types = view.operand_types
    if tuple(view.result_types) != tuple(types):
        raise view.error("the results' types differ from the operands'")
    trips = counted_trips(view.op, types)
    if trips is not None:

        def counted(regions: Sequence[Region], *init: Any) -> list[Any]:
            body = regions[1]

            def step(carry: tuple[Any, ...], _: None) -> tuple[tuple[Any, ...], None]:
                return pack(body(*unpack(carry, types)), types), None

            out, _ = lax.scan(step, pack(init, types), None, length=trips)
            return unpack(out, types)

        return counted

    def generic(regions: Sequence[Region], *init: Any) -> list[Any]:
        cond, body = regions
        out = lax.while_loop(
            lambda c: cond(*unpack(c, types))[0],
            lambda c: pack(body(*unpack(c, types)), types),
            pack(init, types),
        )
        return _mark(
            view,
            unpack(out, types),
            "the loop's trip count is not known when the module is loaded (it is not an "
            "induction variable running from a constant to a constant bound in steps of 1), "
            "and JAX transposes only loops of a fixed length",
        )

    return generic


@lifts("stablehlo.if", regions=True)
def if_(view: OpView) -> Impl:
    """spec.md#if: `lax.cond` on the i1 predicate; the branches take no arguments."""
    types = view.result_types

    def impl(regions: Sequence[Region], pred: Any) -> list[Any]:
        true_fn, false_fn = regions
        out = lax.cond(pred, lambda: pack(true_fn(), types), lambda: pack(false_fn(), types))
        return unpack(out, types)

    return impl


@lifts("stablehlo.case", regions=True)
def case(view: OpView) -> Impl:
    """spec.md#case: branch `index`, and the LAST branch for any index outside [0, n) —
    `lax.switch` alone would run the first branch for a negative index."""
    types = view.result_types
    n = len(view.regions)
    if n == 0:
        raise view.error("case has no branches")
    last = np.array(n - 1, view.operand.dtype)

    def impl(regions: Sequence[Region], index: Any) -> list[Any]:
        outside = lax.bitwise_or(
            lax.lt(index, np.array(0, index.dtype)), lax.ge(index, np.array(n, index.dtype))
        )
        branches = [lambda r=r: pack(r(), types) for r in regions]
        return unpack(_tree_switch(lax.select(outside, last, index), branches, 0), types)

    return impl


#: Branches per lax.switch; more are split into a tree of lax.cond (see `_tree_switch`).
SWITCH_FANOUT = 8


def _tree_switch(index: Any, branches: list[Any], start: int) -> Any:
    """lax.switch over `branches` (numbered from `start`) as a balanced tree of conds.

    One lax.switch over n branches hands every branch the constants of all of them, so its
    tracing and lowering cost n^2 (2,500 one-op branches 0.74 GB, 10,000 over 6 GB); the tree
    hands each node only its subtree's, n log n in all.
    """
    n = len(branches)
    if n <= SWITCH_FANOUT:
        return lax.switch(index - np.array(start, index.dtype), branches)
    mid = n // 2
    return lax.cond(
        lax.lt(index, np.array(start + mid, index.dtype)),
        lambda: _tree_switch(index, branches[:mid], start),
        lambda: _tree_switch(index, branches[mid:], start + mid),
    )


@lifts("stablehlo.map", regions=True)
def map_(view: OpView) -> Impl:
    """spec.md#map: the scalar computation applied elementwise, as `jax.vmap` over the
    flattened elements (batched, and differentiable like the computation itself)."""
    t = view.result
    dims = view.get_ints("dimensions")
    if tuple(dims) != tuple(range(t.rank)):
        raise view.error(f"dimensions = {list(dims)}; the spec requires every dimension in order")
    size = int(np.prod(t.shape, dtype=np.int64))

    def impl(regions: Sequence[Region], *xs: Any) -> list[Any]:
        flat = [lax.reshape(x, (size,)) for x in xs]
        out = jax.vmap(lambda *scalars: regions[0](*scalars)[0])(*flat)
        return [lax.reshape(out, t.shape)]

    return impl


@lifts("stablehlo.optimization_barrier")
def optimization_barrier(view: OpView) -> Impl:
    """spec.md#optimization_barrier: identity that XLA may not reorder across;
    `lax.optimization_barrier` is the same op."""
    types = view.operand_types

    def impl(*xs: Any) -> list[Any]:
        return unpack(lax.optimization_barrier(pack(xs, types)), types)

    return impl


@lifts("stablehlo.tuple")
def tuple_(view: OpView) -> Impl:
    """spec.md#tuple: a Python tuple of the operands."""
    return lambda *xs: [tuple(xs)]


@lifts("stablehlo.get_tuple_element")
def get_tuple_element(view: OpView) -> Impl:
    """spec.md#get_tuple_element: element `index` of a tuple."""
    index = view.get_int("index")
    n = len(getattr(view.operand_types[0], "elements", ()))
    if not 0 <= index < n:
        raise view.error(f"index {index} is outside a tuple of {n} elements")
    return lambda t: [t[index]]


@lifts("stablehlo.after_all", "stablehlo.create_token")
def token(view: OpView) -> Impl:
    """spec.md#after_all, #create_token: tokens only order side effects, which a lifted module
    has none of, so every token is the one TOKEN value."""
    return lambda *_: [TOKEN]


_HOST_IO = ("stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send", "stablehlo.recv")
_COLLECTIVES = (
    "stablehlo.all_gather",
    "stablehlo.all_reduce",
    "stablehlo.all_to_all",
    "stablehlo.collective_broadcast",
    "stablehlo.collective_permute",
    "stablehlo.reduce_scatter",
)


@lifts(*_HOST_IO)
def host_io(view: OpView) -> Impl:
    """Host transfers (spec.md#infeed, #outfeed, #send, #recv) have no meaning in a JAX
    function: refused at load time, never run."""
    raise view.error(
        "host transfers (infeed, outfeed, send, recv) exchange data with the runtime outside "
        "the computation; a JAX function cannot perform them",
        hint="Export the model without host callbacks or I/O inside the traced function",
    )


def _in_a_group_of_one(view: OpView, key: str) -> bool:
    """Whether process 0 is in a group of `key` (replica_groups), which must then be {0}.

    The load-time checks admit only ids 0 and -1 (padding), so on one device every group is
    {0} once padded; an empty attribute is one group of every process (XLA's reading)."""
    groups = np.asarray(view.get_dense(key)).astype(np.int64)
    if groups.size == 0:
        return True
    rows = [[int(i) for i in row if i != -1] for row in groups.reshape(groups.shape[0], -1)]
    return any(row == [0] for row in rows)


@lifts(*_COLLECTIVES)
def collective(view: OpView) -> Impl:
    """Collectives (spec.md#all_gather, #all_reduce, #all_to_all, #collective_broadcast,
    #collective_permute, #reduce_scatter) on one device: every group is process 0 alone.

    Gathering, reducing or scattering over a group of one gives each operand unchanged (the
    reduction region is never applied), as XLA runs them; a `collective_permute` whose pairs
    send nothing to process 0 gives zeros (spec: a process no pair targets). Groups naming
    other devices are refused at load for every backend (stablehlo/contracts.py); one that
    leaves process 0 out is refused here, as XLA's verifier refuses it."""
    operands = [view.tensor(t, f"operand {i}") for i, t in enumerate(view.operand_types)]
    results = [view.tensor(t, f"result {i}") for i, t in enumerate(view.result_types)]
    if [(o.shape, o.dtype) for o in operands] != [(r.shape, r.dtype) for r in results]:
        raise view.error(
            "on one device the results must have the operands' types (a group of one "
            f"gathers or scatters nothing), found {operands} -> {results}"
        )
    if view.name == "stablehlo.collective_permute":
        pairs = np.asarray(view.get_dense("source_target_pairs")).astype(np.int64)
        if [0, 0] not in pairs.reshape(-1, 2).tolist():
            return lambda *xs: [lax.full_like(x, 0) for x in xs]
        return lambda *xs: list(xs)
    if not _in_a_group_of_one(view, "replica_groups"):
        raise view.error("replica_groups leave process 0 out; XLA's verifier refuses that too")
    if view.name == "stablehlo.all_to_all" and view.get_int("split_count") != 1:
        raise view.error(f"split_count = {view.get_int('split_count')} in a group of one")
    return lambda *xs: list(xs)
