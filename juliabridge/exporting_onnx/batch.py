"""A symbolic batch dimension in a form jax2onnx converts and onnxruntime runs.

A module traced for batch size B serves N samples as ceil(N/B) chunks of B, run batched (as
lux/batchsize.py does for jax.export). jax2onnx 0.17 converts that program only when no array
is broadcast to a size derived from N and no slice of a derived size is taken on axis 0 (it
guesses such extents wrongly there). So here the inputs are padded by a fixed B - 1 copies of
their first sample, every slice and reshape of a derived size is taken on axis 1 below a
leading axis of size 1, and the outputs are cut back to N the same way. The values are those
of the traced program on each chunk; padded rows are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax import lax

from ..bundle.manifest import Manifest
from ..errors import CallArgumentError


def _leading(x: Any, axis: int) -> Any:
    """`x` with its axis `axis` moved to position 1, below a new leading axis of size 1."""
    perm = [axis, *(i for i in range(x.ndim) if i != axis)]
    return lax.expand_dims(lax.transpose(x, perm), (0,))


def _chunk(x: Any, axis: int, size: int, chunks: Any) -> Any:
    """(chunks, ...) chunks of `size` samples, each laid out as `x` (batch at `axis`)."""
    y = _leading(x, axis)
    rest = y.shape[2:]
    if size > 1:
        first = lax.slice_in_dim(y, 0, 1, axis=1)
        pad = lax.broadcast_in_dim(first, (1, size - 1, *rest), tuple(range(y.ndim)))
        y = lax.concatenate([y, pad], 1)
        y = lax.slice_in_dim(y, 0, chunks * size, axis=1)
    y = lax.squeeze(lax.reshape(y, (1, chunks, size, *rest)), (0,))
    # (chunks, size, rest...) -> each chunk with its batch axis back at `axis`
    perm = [0, *range(2, axis + 2), 1, *range(axis + 2, y.ndim)]
    return lax.transpose(y, perm)


def _unchunk(y: Any, axis: int, n: Any) -> Any:
    """The first `n` samples of stacked chunk results `y` (chunks, ...), batch at `axis`."""
    chunks, size = y.shape[0], y.shape[axis + 1]
    perm = [0, axis + 1, *(i for i in range(1, y.ndim) if i != axis + 1)]
    y = lax.transpose(y, perm)
    rest = y.shape[2:]
    y = lax.reshape(y, (1, chunks * size, *rest))
    y = lax.squeeze(lax.slice_in_dim(y, 0, n, axis=1), (0,))
    back = [*range(1, axis + 1), 0, *range(axis + 1, y.ndim)]
    return lax.transpose(y, back)


def output_axes(manifest: Manifest, names: Sequence[str], julia: bool) -> list[int | None]:
    """The batch axis of each flat output (named as `_result_names` names them), in the
    program's layout; None for an output without one.

    Raises:
        CallArgumentError: an output carries no batch axis in the manifest.
    """
    ranks: dict[str, tuple[int | None, int]] = {}
    for r in manifest.results:
        for p in r.paths:
            ranks[".".join(map(str, p))] = (r.batch_axis, len(r.shape))
    args = manifest.arguments
    for al in manifest.aliases:
        a = args[al.argument]
        axis = a.batch_axis if a.role == "input" else None
        ranks[".".join(map(str, al.path))] = (axis, len(a.shape))
    out: list[int | None] = []
    for name in names:
        axis, rank = ranks.get(name, (None, 0))
        if axis is None:
            raise CallArgumentError(
                f"{manifest.name}: output {name} has no batch axis in the manifest, so the "
                "ONNX graph cannot take any batch size; export with batch=None (the traced "
                "shapes)"
            )
        out.append(rank - 1 - axis if julia else axis)
    return out


def any_batch(
    program: Callable[..., Any],
    in_axes: Sequence[int | None],
    out_axes: Sequence[int | None],
    size: int,
) -> Callable[..., list[Any]]:
    """`program` (traced for batch `size`, flat results) for any batch size: the inputs with a
    batch axis (`in_axes`) carry N samples, and so do the results with one (`out_axes`)."""

    def run(*args: Any) -> list[Any]:
        batched = [i for i, a in enumerate(in_axes) if a is not None]
        n = args[batched[0]].shape[in_axes[batched[0]]]  # type: ignore[index]
        chunks = (n + size - 1) // size
        stacked = {i: _chunk(args[i], in_axes[i], size, chunks) for i in batched}  # type: ignore[arg-type]

        def one(chunk: dict[int, Any]) -> list[Any]:
            full = list(args)
            for i, v in chunk.items():
                full[i] = v
            return list(jax.tree.leaves(program(*full)))

        outs = jax.vmap(one)(stacked)
        return [
            _unchunk(o, a, n) if a is not None else lax.index_in_dim(o, 0, keepdims=False)
            for o, a in zip(outs, out_axes)
        ]

    return run
