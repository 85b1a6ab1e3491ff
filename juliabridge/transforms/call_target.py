"""CallTarget: what the juliabridge primitives need from a backend, as traceable functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

import jax
import numpy as np

from .. import dtypes
from ..stablehlo import TensorSpec
from .typed_errors import Compiled

Arrays = tuple[jax.Array, ...]
Fn = Callable[..., Arrays]


def is_differentiable(spec: TensorSpec) -> bool:
    """Only floating and complex values carry tangents (integers and Bool get float0)."""
    return np.issubdtype(dtypes.to_numpy(spec.dtype), np.inexact)


class CallTarget:
    """One module's primal, forward-mode and reverse-mode computations.

    `primal(*args)`, `jvp(*primals, *diff_tangents)` and `vjp(*primals, *all_cotangents)` are
    traceable (they are lowered inside the caller's XLA program). `jvp` and `vjp` are produced
    lazily by `jvp_factory` / `vjp_factory`, which raise TransformError when the backend cannot
    provide them. Identity-hashed: it is a static parameter of the primitives.
    """

    def __init__(
        self,
        *,
        name: str,
        in_specs: Sequence[TensorSpec],
        out_specs: Sequence[TensorSpec],
        primal: Fn,
        jvp_factory: Callable[[], Fn],
        vjp_factory: Callable[[], Fn],
    ) -> None:
        self.name = name
        self.in_specs = tuple(in_specs)
        self.out_specs = tuple(out_specs)
        self.primal = primal
        self._jvp_factory = jvp_factory
        self._vjp_factory = vjp_factory
        self.diff_in = tuple(i for i, s in enumerate(self.in_specs) if is_differentiable(s))
        self.diff_out = tuple(k for k, s in enumerate(self.out_specs) if is_differentiable(s))

    @cached_property
    def jvp(self) -> Fn:
        """(*primals, *tangents of diff_in) -> tangents of diff_out."""
        return self._jvp_factory()

    @cached_property
    def vjp(self) -> Fn:
        """(*primals, *cotangents of every result) -> cotangents of every argument."""
        return self._vjp_factory()

    @cached_property
    def jit_primal(self) -> Fn:
        """The primal under jax.jit, for eager calls (failures are ExecutionErrors)."""
        return Compiled(self.name, None, self.primal)

    @cached_property
    def jit_jvp(self) -> Fn:
        """The JVP under jax.jit, for eager calls (failures are TransformErrors)."""
        return Compiled(self.name, "forward-mode derivative", self.jvp)

    @cached_property
    def jit_vjp(self) -> Fn:
        """The VJP under jax.jit, for eager calls (failures are TransformErrors)."""
        return Compiled(self.name, "reverse-mode derivative", self.vjp)

    def __repr__(self) -> str:
        return f"<CallTarget {self.name}>"
