"""Small helpers for running imported modules on sharded (multi-device) arrays."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..stablehlo.hlosharding import read_sharding
from ..support.shown import clipped


def unshard_leading_axis(x: Any) -> Any:
    """Reshard `x` so its axis 0 is not split over an Explicit mesh axis.

    lax.map loops over axis 0, which JAX refuses when that axis is explicitly sharded; the
    loop is over chunks or vmapped copies, so gathering that axis keeps results exact.
    """
    try:
        sharding = jax.typeof(x).sharding
        spec = sharding.spec
    except AttributeError:
        return x
    if not spec or spec[0] is None:
        return x
    return jax.sharding.reshard(x, NamedSharding(sharding.mesh, P(None, *spec[1:])))


def explicit_mesh(values: Sequence[Any]) -> Any | None:
    """The abstract mesh of the first of `values` typed with Explicit mesh axes, else None.

    Only Explicit axes appear in a value's type (sharding-in-types); Auto axes are left to
    XLA's propagation and Manual ones (inside shard_map) are local already.
    """
    for v in values:
        try:
            mesh = jax.typeof(v).sharding.mesh
        except AttributeError:
            continue
        if tuple(getattr(mesh, "explicit_axes", ())):
            return mesh
    return None


def spec_of(x: Any) -> P:
    """The PartitionSpec in `x`'s type (its Explicit axes; ``P()`` for an unsharded value)."""
    try:
        return P(*jax.typeof(x).sharding.spec)
    except (AttributeError, TypeError):
        return P()


def spec_entry(x: Any, axis: int) -> Any:
    """The mesh axis (or tuple of axes) that axis `axis` of `x` is explicitly split over."""
    spec = tuple(spec_of(x))
    return spec[axis] if axis < len(spec) else None


def spec_with(rank: int, axis: int | None, entry: Any) -> P:
    """A PartitionSpec of `rank` dims splitting only `axis` over `entry`."""
    return P(*[entry if i == axis else None for i in range(rank)])


def run_with_auto_axes(
    mesh: Any,
    fn: Callable[..., tuple[Any, ...]],
    args: Sequence[Any],
    out_specs: Sequence[P],
) -> tuple[Any, ...]:
    """``fn(*args)`` with the mesh's Explicit axes made Auto inside, results typed `out_specs`.

    An imported module is a whole program written for one device: its ops (convolutions
    contracting a split batch in their gradients, reshapes merging a split axis) have no
    sharding rule JAX's explicit typing accepts, while XLA's propagation partitions them.
    `jax.sharding.auto_axes` lets XLA do that inside and pins the results' shardings at the
    boundary, so the caller's types stay explicit.
    """
    shardings = tuple(NamedSharding(mesh, s) for s in out_specs)
    axes = tuple(mesh.explicit_axes)
    wrapped = jax.sharding.auto_axes(lambda *a: tuple(fn(*a)), axes=axes, out_sharding=shardings)
    return tuple(wrapped(*args))


def device_conflict(trees: dict[str, Any]) -> str | None:
    """Where committed concrete arrays in `trees` (named by label) sit on different devices.

    Returns one "label[path] on devices [...]" per distinct device set, or None when they
    share one (uncommitted arrays go wherever the others are, so they never conflict).
    """
    seen: dict[tuple[int, ...], str] = {}
    for label, tree in trees.items():
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if isinstance(leaf, jax.core.Tracer) or not isinstance(leaf, jax.Array):
                continue
            if not getattr(leaf, "committed", False):
                continue
            ids = tuple(sorted(d.id for d in leaf.sharding.device_set))  # type: ignore[attr-defined]
            seen.setdefault(ids, label + jax.tree_util.keystr(path))
    if len(seen) < 2:
        return None
    return "; ".join(f"{where} on devices {list(ids)}" for ids, where in seen.items())


def recorded_tiling(text: str, rank: int) -> tuple[int, ...] | None:
    """Pieces per dim an ``mhlo.sharding`` string splits a rank-`rank` value into.

    ``{replicated}`` is one piece per dim and ``{devices=[a,b,...]...}`` a tiling (its last
    entry dropped when it counts replicas, ``last_tile_dim_replicate``); None for what has no
    per-dim tiling to compare (``{maximal device=0}``, ``{manual}``, tuples) and for a tiling
    of another rank. The module's load already refused a malformed tiling (stablehlo.hlosharding).
    """
    if text.strip().strip('"').strip() == "{replicated}":
        return (1,) * rank
    tiling = read_sharding(text, "mhlo.sharding")
    if tiling is None:
        return None
    return tiling.pieces if len(tiling.pieces) == rank else None


def caller_tiling(x: Any, mesh: Any) -> tuple[int, ...]:
    """Pieces per dim the Explicit mesh axes in `x`'s type split it into."""
    spec = tuple(spec_of(x))
    rank = len(jax.numpy.shape(x))
    spec += (None,) * (rank - len(spec))
    out = []
    for entry in spec:
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        pieces = 1
        for name in names:
            pieces *= int(mesh.shape[name])
        out.append(pieces)
    return tuple(out)


def sharding_disagreements(
    recorded: dict[int, str], args: Sequence[Any], labels: Sequence[str], mesh: Any
) -> list[str]:
    """One line per argument whose recorded ``mhlo.sharding`` splits it otherwise than the call.

    Where they agree the call already runs as the module was sharded; where they do not, the
    caller's placement is what runs, and the line says both.
    """
    lines = []
    for i, text in sorted(recorded.items()):
        if i >= len(args):
            continue
        rank = len(jax.numpy.shape(args[i]))
        want = recorded_tiling(text, rank)
        if want is None:
            continue
        got = caller_tiling(args[i], mesh)
        if got != want:
            lines.append(
                f"{labels[i]}: the module records mhlo.sharding {clipped(text.strip(), 120)} "
                f"(pieces per dim {list(want)}), the call splits it {list(got)} "
                f"(spec {tuple(spec_of(args[i]))})"
            )
    return lines
