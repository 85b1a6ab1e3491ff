"""Reading a `stablehlo.custom_call` against a target's contract.

A custom call is an opaque kernel: its meaning is fixed by the target's implementation, not
by the op. Each target the lax backend lifts therefore states its contract — operand and
result shapes, element types, memory layouts and attributes — and `Call` checks the op
against it at load time, so a module that would make the kernel read or write past a buffer,
or see a transposed matrix, is refused with the target named instead of computed wrongly.

Layouts are MLIR's minor-to-major dimension lists. The linear-algebra kernels read matrices in
Fortran (column-major) order: jaxlib gives every value of the operands' highest rank the layout
(r-2, r-1, r-3, ..., 0) and every other value the default row-major (r-1, ..., 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ....errors import TransformError, UnsupportedOpError
from ....support.jaxinternals import ir
from .. import attrs
from ..registry import Impl, OpView
from ..valtypes import TensorType

Shape = tuple[int, ...]


def column_major(rank: int) -> Shape:
    """The Fortran-order layout of a (batch of) matrices of this rank."""
    return (rank - 2, rank - 1, *range(rank - 3, -1, -1)) if rank >= 2 else row_major(rank)


def row_major(rank: int) -> Shape:
    """MLIR's default layout."""
    return tuple(range(rank - 1, -1, -1))


def _config_value(attr: ir.Attribute) -> Any:
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, ir.FloatAttr):
        return float(attr.value)
    if isinstance(attr, ir.StringAttr):
        return str(attr.value)
    return str(attr)


class Call:
    """One custom call as its target handler sees it; `error` names the target and line."""

    def __init__(self, view: OpView, target: str) -> None:
        self.view = view
        self.target = target
        self.operands = [self._tensor(t, f"operand {i}") for i, t in enumerate(view.operand_types)]
        self.results = [self._tensor(t, f"result {i}") for i, t in enumerate(view.result_types)]
        self.config = self._config()
        self.string_config = (
            str(ir.StringAttr(view.raw("backend_config")).value)
            if view.has("backend_config") and isinstance(view.raw("backend_config"), ir.StringAttr)
            else ""
        )

    # --- errors ----------------------------------------------------------------------------

    def error(self, what: str, *, hint: str = "") -> UnsupportedOpError:
        """A typed error naming the target."""
        return self.view.error(f"custom call target {self.target!r}: {what}", hint=hint)

    def _tensor(self, t: Any, what: str) -> TensorType:
        if not isinstance(t, TensorType):
            raise self.view.error(
                f"custom call target {self.target!r}: {what} is {t}; the lifted targets take "
                "and return tensors only"
            )
        return t

    # --- attributes ------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        """The typed-FFI attributes: `backend_config` as a dictionary (StableHLO's form) or
        `mhlo.backend_config` (what JAX prints)."""
        out: dict[str, Any] = {}
        for name in ("backend_config", "mhlo.backend_config"):
            if self.view.has(name) and isinstance(self.view.raw(name), ir.DictAttr):
                config = ir.DictAttr(self.view.raw(name))
                for i in range(len(config)):
                    key = config[i].name
                    try:  # by name: NamedAttribute.attr aborts on dense complex data
                        out[key] = _config_value(config[key])
                    except TypeError as e:
                        raise self.error(f"backend_config.{key} cannot be read") from e
        return out

    def option(self, name: str, allowed: dict[Any, Any], default: Any = None) -> Any:
        """backend_config[name] mapped through `allowed` (raw value -> meaning)."""
        if name not in self.config:
            if default is None:
                raise self.error(f"backend_config has no {name}")
            return default
        raw = self.config[name]
        if raw not in allowed:
            shown = {chr(k) if isinstance(k, int) and 32 <= k < 127 else k for k in allowed}
            raise self.error(f"backend_config {name} = {raw!r}; the target accepts {shown}")
        return allowed[raw]

    def flag(self, name: str, default: bool | None = None) -> bool:
        """A Boolean backend_config entry."""
        return bool(self.option(name, {True: True, False: False}, default))

    def _layouts(self, name: str, count: int) -> list[Shape | None]:
        if not self.view.has(name):
            return [None] * count
        try:
            layouts = [attrs.integers(a) for a in ir.ArrayAttr(self.view.raw(name))]
        except (ValueError, TypeError, attrs.AttributeError_) as e:
            raise self.error(f"{name} cannot be read ({e})") from e
        if len(layouts) != count:
            raise self.error(f"{name} lists {len(layouts)} layouts for {count} values")
        return list(layouts)

    # --- contract checks -------------------------------------------------------------------

    def expect_operands(self, count: int) -> None:
        if len(self.operands) != count:
            raise self.error(f"takes {count} operands, the op passes {len(self.operands)}")

    def matrix(self, i: int, *, square: bool = False) -> tuple[Shape, int, int]:
        """(batch dims, rows, cols) of operand i, a (batch of) matrices."""
        t = self.operands[i]
        if t.rank < 2:
            raise self.error(f"operand {i} is {t}; a matrix (rank >= 2) is expected")
        m, n = t.shape[-2:]
        if square and m != n:
            raise self.error(f"operand {i} is {t}; a square matrix is expected")
        return t.shape[:-2], m, n

    def expect_dtype(self, i: int, allowed: Sequence[np.dtype]) -> np.dtype:
        dt = self.operands[i].dtype
        if dt not in allowed:
            names = ", ".join(attrs.element_type_name(d) for d in allowed)
            raise self.error(f"operand {i} is {self.operands[i]}; the target computes on {names}")
        return dt

    def expect_results(self, want: Sequence[tuple[Shape, Any] | None]) -> None:
        """Result k must be exactly (shape, dtype) want[k]; None accepts any tensor (a result
        the caller must leave unused)."""
        if len(self.results) != len(want):
            raise self.error(f"returns {len(want)} values, the op declares {len(self.results)}")
        for k, (got, w) in enumerate(zip(self.results, want)):
            if w is None:
                continue
            shape, dtype = w
            if got.shape != tuple(shape) or got.dtype != np.dtype(dtype):
                dims = "x".join(str(d) for d in shape)
                elem = attrs.element_type_name(np.dtype(dtype))
                raise self.error(
                    f"result {k} is declared {got}, but the kernel writes "
                    f"tensor<{dims + 'x' if dims else ''}{elem}> there (a result of another "
                    "shape would be read or written out of bounds)"
                )

    def expect_layouts(self, *, fortran: bool = True) -> None:
        """Every operand and result has the layout the kernel reads (module docstring)."""
        top = max((t.rank for t in self.operands), default=0)
        for name, values in (("operand_layouts", self.operands), ("result_layouts", self.results)):
            for k, (t, got) in enumerate(zip(values, self._layouts(name, len(values)))):
                want = column_major(t.rank) if fortran and t.rank == top else row_major(t.rank)
                have = row_major(t.rank) if got is None else tuple(got)
                if have != want:
                    raise self.error(
                        f"{name}[{k}] is {list(have)} but the kernel reads {t} in layout "
                        f"{list(want)}; with another layout it would see the data permuted",
                        hint="Export the module with the layouts JAX/Reactant emit for it",
                    )

    def unused(self, *ks: int, why: str) -> None:
        """Results that hold workspace or were not computed must not be read."""
        for k in ks:
            if k < len(self.view.op.results) and list(self.view.op.results[k].uses):
                raise self.error(f"result {k} is read, but {why}")


def forward_only(fn: Callable[..., list[Any]], call: Call, primitive: str) -> Impl:
    """`fn` with every derivative refused by name (JAX has no rule for `primitive`)."""
    message = (
        f"{call.view.name} {call.target} at {call.view.where}: JAX has no derivative for "
        f"{primitive}, so jax.grad/jvp/jacfwd/hessian cannot pass through this custom call"
    )

    @jax.custom_jvp
    def wrapped(*args: Any) -> tuple[Any, ...]:
        return tuple(fn(*args))

    def no_jvp(primals: Any, tangents: Any) -> Any:
        raise TransformError(message)

    wrapped.defjvp(no_jvp)
    return lambda *args: list(wrapped(*args))
