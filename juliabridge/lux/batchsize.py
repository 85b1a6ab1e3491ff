"""Serving any batch size N with a module traced for batch size B.

Only outputs with a recorded batch axis can be split; state results without one are the same
for every chunk when samples are independent, so the first chunk's value is returned.
Inputs are edge-padded to a multiple of B (repeating a real sample keeps padded rows finite, so
their zero cotangents cannot turn into NaN in parameter gradients), split into B-sized chunks
run inside the caller's program (batched with vmap on the lax backend, lax.map otherwise),
and the results cut back to N.

N may be a jax.export symbolic dimension (``jax.export.symbolic_shape("b")``): nothing here
takes int() of a dimension, the number of chunks is ceil(N/B) as a symbolic expression, and
the inputs are always padded, by k*B - N rows (between 0 and B-1), so one exported program
serves every batch size. A model whose samples are not independent is refused while it is
traced for export, as for any other batch size.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.export import is_symbolic_dim

from ..bundle.manifest import Manifest
from ..errors import CallArgumentError
from ..transforms.sharding import (
    explicit_mesh,
    run_with_auto_axes,
    sharding_disagreements,
    spec_entry,
    spec_of,
    spec_with,
    unshard_leading_axis,
)


def _dims(x: Any) -> tuple[Any, ...]:
    """The shape of `x`: ints, or jax.export's symbolic dimensions where it is exported with
    one (never int() of those: a symbolic dimension has no value while tracing)."""
    return tuple(d if is_symbolic_dim(d) else int(d) for d in np.shape(x))


def batch_size_of(manifest: Manifest, flat: Sequence[Any], layout: str) -> Any:
    """The batch size N the inputs carry, or None when the manifest records no batch axis.

    N is an int, or a jax.export symbolic dimension when the caller is exported with one
    (``jax.export.symbolic_shape("b")``); every other dim must be a known int.

    `flat` holds the arrays in the module's (MLIR) order; `layout` is the order the caller
    passed them in ("julia": each input was transposed from Julia's order), so a wrong shape
    is reported as the caller wrote it, with advice for the layout in use.

    Raises:
        CallArgumentError: an input has the wrong rank or non-batch dims, or the inputs
            disagree on the batch size.
    """
    julia = layout == "julia"
    sizes = {}
    for a in manifest.arguments:
        if a.role != "input":
            continue
        shape = _dims(flat[a.index])
        if a.batch_axis is None:
            # Under layout="julia" the module's own check would see (and report) the
            # transposed array; check it here, in the caller's order.
            if julia and shape != tuple(a.shape):
                raise CallArgumentError(_wrong_shape(manifest.name, a, shape, julia))
            continue
        if len(shape) != len(a.shape):
            raise CallArgumentError(_wrong_rank(a, shape, julia))
        sizes[a.label] = shape[a.batch_axis]
    if not sizes:
        return None
    if len({str(v) for v in sizes.values()}) > 1:
        raise CallArgumentError(f"inputs disagree on the batch size: {sizes}")
    n = next(iter(sizes.values()))
    # Every dim but the batch axis must already match, so a wrong layout is reported as such
    # instead of being mistaken for a different batch size.
    for a in manifest.arguments:
        if a.role != "input" or a.batch_axis is None:
            continue
        got = _dims(flat[a.index])
        rest = [d for i, d in enumerate(got) if i != a.batch_axis]
        want = [d for i, d in enumerate(a.shape) if i != a.batch_axis]
        if rest != want:
            raise CallArgumentError(_wrong_shape(manifest.name, a, got, julia))
    return n


def check_fixed_shapes(manifest: Manifest, flat: Sequence[Any], layout: str) -> None:
    """Refuse an input whose shape differs from the traced one when no batch size is recorded.

    Without a `batch` entry (spec §3.6) the module runs only at the shapes it was traced with;
    saying so, and why, beats the bare signature mismatch the call would raise otherwise.

    `flat` is in the module's order; under ``layout="julia"`` both shapes are written in
    Julia's order, as the caller passed them.

    Raises:
        CallArgumentError: an input's shape is not its argument's `shape`.
    """
    julia = layout == "julia"
    for a in manifest.arguments:
        if a.role != "input":
            continue
        got = list(_dims(flat[a.index]))
        if got == list(a.shape):
            continue
        if julia and a.batch_axis is None:
            raise CallArgumentError(_wrong_shape(manifest.name, a, tuple(got), julia))
        want = list(a.shape)
        order = ""
        if julia:
            got, want, order = got[::-1], want[::-1], " in Julia's order"
        why = (
            "; a train-mode bundle's samples are not independent, so it cannot be split into "
            "traced-size calls either"
            if manifest.mode == "train"
            else ""
        )
        raise CallArgumentError(
            f"{manifest.name}: {a.label} expects exactly {want} ({a.dtype}{order}), got shape "
            f"{got}: the bundle records no batch size (docs/bundle-format.md §3.6), so it runs "
            f"only at the shapes it was traced with{why}. Export again with the batch size you "
            "need"
        )


def _wrong_rank(a: Any, got: tuple[int, ...], julia: bool) -> str:
    """The message for an input of the wrong rank: the shape it takes, N marking the batch."""
    dims = ["N" if i == a.batch_axis else str(d) for i, d in enumerate(a.shape)]
    axis, got_dims = a.batch_axis, list(got)
    order = ""
    if julia:
        dims, got_dims, axis = dims[::-1], got_dims[::-1], len(a.shape) - 1 - a.batch_axis
        order = " in Julia's order (layout='julia')"
    return (
        f"{a.label}: expects a rank-{len(a.shape)} array of shape ({', '.join(dims)}){order}: "
        f"any batch size N on axis {axis} (traced with N={a.shape[a.batch_axis]}), got shape "
        f"{got_dims}"
    )


def _channels_last(a: Any, got: tuple[int, ...]) -> bool:
    """Whether `got` (module order) is the argument's shape with its channel axis (the one
    after the batch axis) moved last, as NumPy/TensorFlow images are: (N, H, W, C)."""
    axis = a.batch_axis
    if axis != 0 or len(got) < 3 or len(got) != len(a.shape):
        return False
    moved = (got[0], got[-1], *got[1:-1])
    return moved[1:] == tuple(a.shape[1:]) and got[1:] != tuple(a.shape[1:])


def _wrong_shape(name: str, a: Any, got: tuple[int, ...], julia: bool) -> str:
    """The message for input `a` given an array of module-order shape `got`.

    Under layout="julia" both shapes are written in Julia's order (the caller's), and the
    advice names the other layout, never the one already in use.
    """
    axis = a.batch_axis
    dims = ["N" if i == axis else str(d) for i, d in enumerate(a.shape)]
    # Julia's order is the MLIR order reversed, batch axis included: compare the reversed
    # input's other dims, whatever batch size it carries.
    flipped = got[::-1]
    want_rest = [d for i, d in enumerate(a.shape) if i != axis]
    if axis is None:
        looks_reversed = len(got) > 1 and flipped == tuple(a.shape)
    else:
        looks_reversed = [d for i, d in enumerate(flipped) if i != axis] == want_rest
    if julia:
        jdims = dims[::-1]
        batch = (
            ""
            if axis is None
            else f" (any batch size N on axis {len(a.shape) - 1 - axis}; traced with "
            f"N={a.shape[axis]})"
        )
        hint = (
            " The dims look like the MLIR (row-major) order, but this model was imported with "
            "layout='julia', which takes Julia's order: pass x.T, or import with "
            "layout='mlir'."
            if looks_reversed
            else ""
        )
        return (
            f"{name}: {a.label} expects an array of shape ({', '.join(jdims)}) in Julia's order "
            f"({a.dtype}){batch}, got shape {list(flipped)}.{hint}"
        )
    batch = (
        "" if axis is None else f" (any batch size N on axis {axis}; traced with N={a.shape[axis]})"
    )
    hint = (
        " The dims look reversed: inputs use the MLIR (row-major) order, Julia's dims "
        "reversed; pass x.T or import with layout='julia'."
        if looks_reversed
        else ""
    )
    if not hint and _channels_last(a, got):
        hint = (
            " It looks channels-last (N, H, W, C); this model takes channels first, as Lux "
            "does (Julia's (W, H, C, N) reversed): pass np.moveaxis(x, -1, 1)."
        )
    want = f"tensor<{'x'.join(dims)}x{a.dtype}>"
    return f"{name}: {a.label} expects {want}{batch}, got shape {list(got)}.{hint}"


def _chunk(x: jax.Array, axis: int, b: int, k: int) -> jax.Array:
    """(k, ...) chunks of B samples each, every chunk laid out as the module takes it.

    The batch axis goes first for splitting and padding, then back to `axis` inside each
    chunk (axis + 1 of the stacked result).
    """
    x = jnp.moveaxis(x, axis, 0)
    n = x.shape[0]
    if is_symbolic_dim(n):
        # A size known only when the exported program runs (jax.export's symbolic batch):
        # always pad, by k*B - N rows (from 0 to B - 1 of them), repeating the last sample.
        last = jnp.broadcast_to(x[-1:], (k * b - n, *x.shape[1:]))
        x = jnp.concatenate([x, last])
    elif n < k * b:
        x = jnp.pad(x, [(0, k * b - n)] + [(0, 0)] * (x.ndim - 1), mode="edge")
    chunks = jnp.moveaxis(x.reshape((k, b, *x.shape[1:])), 1, axis + 1)
    return unshard_leading_axis(chunks)


def _unchunk(y: jax.Array, axis: int, n: int) -> jax.Array:
    """The first `n` samples of stacked chunk results `y` (k, ...) whose batch axis is `axis`."""
    y = jnp.moveaxis(y, axis + 1, 1)
    y = y.reshape((y.shape[0] * y.shape[1], *y.shape[2:]))[:n]
    return jnp.moveaxis(y, 0, axis)


def call_with_batch(
    manifest: Manifest,
    fn: Callable[..., tuple[jax.Array, ...]],
    flat: list[Any],
    n: int,
    *,
    batched_chunks: bool,
) -> tuple[jax.Array, ...]:
    """Run `fn` (traced for batch B) on inputs carrying N samples.

    `batched_chunks`: run the ceil(N/B) chunks under jax.vmap (for functions JAX can batch)
    instead of a sequential lax.map.

    Raises:
        CallArgumentError: the manifest does not allow another batch size.
    """
    if manifest.batch is None:
        raise CallArgumentError(
            "the inputs carry a batch size other than the traced one, and the manifest does not "
            "say the samples are independent; call with the traced shapes"
        )
    b = manifest.batch.size
    if not manifest.batch.samples_independent:
        what = f"a symbolic batch size {n} (jax.export)" if is_symbolic_dim(n) else f"{n} samples"
        raise CallArgumentError(
            f"the model was traced with batch size {b} and its samples are not independent "
            f"(e.g. BatchNorm in train mode normalises over the batch), so it cannot serve "
            f"{what} by splitting or padding; call it with exactly {b} samples or "
            "re-export it with the batch size you need"
        )
    for r in manifest.results:
        if r.batch_axis is None:
            if any(p[0] == "output" for p in r.paths):
                # Without a batch axis we cannot tell which rows belong to which chunk, and
                # keeping one chunk would silently drop samples.
                raise CallArgumentError(
                    f"{manifest.name}: output {r.label} has no batch_axis in the manifest, so a "
                    f"call with {n} samples cannot be split into traced-size ({b}) calls; call "
                    f"it with exactly {b} samples, or re-export with batch axes recorded"
                )
            continue
        if r.shape[r.batch_axis] != b:
            raise CallArgumentError(
                f"{r.label}: batch axis {r.batch_axis} has size {r.shape[r.batch_axis]}, not the "
                f"traced batch size {b}; the manifest's batch axes are inconsistent"
            )
    k = -(-n // b)
    batched = [
        a.index for a in manifest.arguments if a.role == "input" and a.batch_axis is not None
    ]
    axes = {a.index: a.batch_axis for a in manifest.arguments}
    chunks = {i: _chunk(flat[i], axes[i] or 0, b, k) for i in batched}

    def one(chunk: dict[int, jax.Array]) -> tuple[jax.Array, ...]:
        args = list(flat)
        for i, v in chunk.items():
            args[i] = v
        return tuple(fn(*args))

    # A module made of JAX primitives (lax backend) runs the chunks batched; a foreign call
    # (enzyme, xla) has no batching rule of its own, so its chunks run one after another.
    outs = jax.vmap(one)(chunks) if batched_chunks else lax.map(one, chunks)
    return tuple(
        _unchunk(o, r.batch_axis, n) if r.batch_axis is not None else o[0]
        for o, r in zip(outs, manifest.results)
    )


def call_any_batch(
    manifest: Manifest,
    fn: Callable[..., tuple[jax.Array, ...]],
    flat: list[Any],
    *,
    batched_chunks: bool,
    recorded: dict[int, str] | None = None,
    layout: str,
) -> tuple[jax.Array, ...]:
    """Run `fn` on `flat` whatever batch size the inputs carry, on any mesh.

    Inputs typed with Explicit mesh axes (``jax.make_mesh``'s default) run under
    ``auto_axes``: XLA partitions the split/pad and the module, and every result with a
    batch axis comes back split over the mesh axes the inputs' batch axis was split over
    (the others replicated), so the caller's batch stays sharded. `recorded` (the module's
    ``mhlo.sharding`` per argument) is compared with the call's Explicit placement: a
    disagreement is a RuntimeWarning naming both (the call's placement is what runs).
    `layout` is the order the caller passed the inputs in, for messages (`batch_size_of`).

    Raises:
        CallArgumentError: the inputs' shapes or batch size do not fit the manifest.
    """
    n = batch_size_of(manifest, flat, layout)

    def run(*args: Any) -> tuple[jax.Array, ...]:
        if n is None or manifest.batch is None or n == manifest.batch.size:
            return tuple(fn(*args))
        return call_with_batch(manifest, fn, list(args), n, batched_chunks=batched_chunks)

    mesh = explicit_mesh(flat)
    if mesh is None:
        return run(*flat)
    labels = [a.label for a in manifest.arguments]
    for line in sharding_disagreements(recorded or {}, flat, labels, mesh):
        warnings.warn(f"{manifest.name}: {line}", RuntimeWarning, stacklevel=4)
    entry = None
    for a in manifest.arguments:
        if a.role == "input" and a.batch_axis is not None:
            entry = spec_entry(flat[a.index], a.batch_axis)
            if entry is not None:
                break
    state_specs = {a.path: spec_of(flat[a.index]) for a in manifest.arguments if a.role == "state"}
    specs: list[Any] = []
    for r in manifest.results:
        if r.batch_axis is not None:
            specs.append(spec_with(len(r.shape), r.batch_axis, entry))
            continue
        # A state result replaces the state argument at its path: it keeps that placement.
        state = [state_specs[p[1:]] for p in r.paths if p[0] == "state" and p[1:] in state_specs]
        specs.append(state[0] if state else spec_with(len(r.shape), None, None))
    return run_with_auto_axes(mesh, run, flat, specs)
