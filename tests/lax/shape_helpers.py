"""Test helpers for the shape, indexing and sort families: module text, 64-bit scope,
finite differences, and checks that vmap batches instead of looping."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

import juliabridge

LOOPS = frozenset({"while", "scan"})


def main(args: Sequence[str], results: Sequence[str], body: str) -> str:
    """A module whose @main takes `args` (MLIR types) as %a0, %a1... and returns `results`."""
    sig = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    res = ", ".join(results)
    return f"module {{\n  func.func @main({sig}) -> ({res}) {{\n{body}\n  }}\n}}"


def lax_fn(text: str) -> Callable[..., tuple[Any, ...]]:
    """The module on the lax backend."""
    return juliabridge.load_mlir(text, backend="lax")


def primitives(jaxpr: Any) -> set[str]:
    """Every primitive name in a (closed) jaxpr, sub-jaxprs included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    names: set[str] = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    names |= primitives(sub)
    return names


def loop_count(jaxpr: Any) -> int:
    """How many while/scan equations a jaxpr has, sub-jaxprs included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in jaxpr.eqns:
        total += eqn.primitive.name in LOOPS
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    total += loop_count(sub)
    return total


def check_vmap(
    fn: Callable[..., Any], batched: Sequence[Any], in_axes: Any = 0, *, own_loops: bool = False
) -> None:
    """jax.vmap(fn) equals stacking per-sample calls, and its jaxpr has no loop — or, with
    `own_loops`, exactly the loops of one unbatched call (none over the batch)."""
    vf = jax.vmap(fn, in_axes=in_axes)
    got = vf(*batched)
    axes = in_axes if isinstance(in_axes, (tuple, list)) else [in_axes] * len(batched)
    n = next(np.shape(b)[0] for b, ax in zip(batched, axes) if ax is not None)
    for k in range(n):
        sample = [b if ax is None else np.asarray(b)[k] for b, ax in zip(batched, axes)]
        for g, w in zip(got, fn(*sample)):
            g, w = np.asarray(g)[k], np.asarray(w)
            if g.dtype.kind in "biu":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    batched_loops = loop_count(jax.make_jaxpr(vf)(*batched))
    if own_loops:
        sample = [b if ax is None else np.asarray(b)[0] for b, ax in zip(batched, axes)]
        assert batched_loops == loop_count(jax.make_jaxpr(fn)(*sample)), "vmap added a loop"
    else:
        assert batched_loops == 0, f"vmap left {batched_loops} loops"


def numeric_grad(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central finite differences of a scalar function of one f64 array."""
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        up = f(x)
        flat[i] = old - eps
        down = f(x)
        flat[i] = old
        gflat[i] = (up - down) / (2 * eps)
    return g


def check_grad(fn: Callable[..., Any], args: Sequence[Any], argnums: Sequence[int]) -> None:
    """jax.grad of a random linear functional of every float result vs finite differences,
    and jax.jvp along a random direction vs the same differences (forward mode)."""
    rng = np.random.default_rng(7)
    outs = fn(*args)
    weights = [rng.standard_normal(np.shape(o)) for o in outs]

    def loss(*xs: Any) -> Any:
        total = 0.0
        for o, w in zip(fn(*xs), weights):
            if np.issubdtype(o.dtype, np.floating):
                total = total + (o * w).sum()
        return total

    grads = jax.grad(loss, argnums=tuple(argnums))(*args)
    fast = jax.jit(loss)
    for k, g in zip(argnums, grads):
        base = [np.array(a, copy=True) for a in args]

        def f_k(x: np.ndarray, k: int = k, base: list[np.ndarray] = base) -> float:
            return float(fast(*[x if i == k else b for i, b in enumerate(base)]))

        want = numeric_grad(f_k, base[k].astype(np.float64))
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6, atol=1e-6)
        direction = rng.standard_normal(np.shape(args[k]))
        tangents = [np.zeros_like(a) if i != k else direction for i, a in enumerate(args)]
        tangents = [
            t if np.issubdtype(np.asarray(a).dtype, np.floating) else None
            for t, a in zip(tangents, args)
        ]
        _, jvp = jax.jvp(
            lambda *xs: loss(*xs),
            tuple(args),
            tuple(_tangent(a, t) for a, t in zip(args, tangents)),
        )
        np.testing.assert_allclose(
            float(jvp), float((want * direction).sum()), rtol=1e-6, atol=1e-6
        )


def _tangent(a: Any, t: Any) -> Any:
    """A tangent for argument `a`: float0 zeros for integer arguments."""
    if t is not None:
        return t
    return np.zeros(np.shape(a), jax.dtypes.float0)
