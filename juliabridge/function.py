"""ImportedFunction: a loaded module as a JAX-callable with checked arguments; load_mlir makes one
from a bare Reactant module (path or text)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import jax
import numpy as np
from jax.export import is_symbolic_dim

from . import dtypes
from .backends import Backend, make_backend, resolve_backend_name
from .errors import CallArgumentError
from .jaxinternals import ARRAY_IMPL
from .stablehlo import StableHLOModule, TensorSpec, parse_module
from .transforms import CallTarget, call_p
from .transforms.typed_errors import Compiled


def _shape(x: Any) -> tuple[Any, ...]:
    """The shape of `x`: ints, and jax.export's symbolic dimensions as they are (no int())."""
    return tuple(d if is_symbolic_dim(d) else int(d) for d in np.shape(x))


def _describe(x: Any) -> str:
    try:
        dt = dtypes.from_numpy(x.dtype) or str(x.dtype)
        return str(TensorSpec(_shape(x), dt))
    except (AttributeError, TypeError):
        return type(x).__name__


def check_call_args(
    args: Sequence[Any], specs: Sequence[TensorSpec], labels: Sequence[str], what: str
) -> list[Any]:
    """Validate count, shape and dtype of `args` against `specs`; return them as arrays.

    Python scalars and lists are converted with the expected dtype; arrays must already have it,
    because silently casting e.g. float64 data to Float32 parameters hides bugs.
    """
    if len(args) != len(specs):
        raise CallArgumentError(
            f"{what} takes {len(specs)} array(s) ({', '.join(labels[:8])}"
            f"{', ...' if len(labels) > 8 else ''}) but got {len(args)}"
        )
    out = []
    for x, spec, label in zip(args, specs, labels):
        want = dtypes.to_numpy(spec.dtype)
        if not hasattr(x, "dtype"):
            try:
                x = np.asarray(x, dtype=want)
            except (TypeError, ValueError) as e:
                raise CallArgumentError(
                    f"{what}: {label} expects {spec}, got a {type(x).__name__} that is not "
                    f"convertible to an array ({e})"
                ) from e
        shape = _shape(x)
        if shape != spec.shape or np.dtype(x.dtype) != want:
            hint = ""
            if any(map(is_symbolic_dim, shape)):
                hint = (
                    " A symbolic dimension (jax.export) cannot stand for a traced one: this "
                    "function runs at the traced shapes; vmap it over a new leading axis "
                    "(juliabridge.export_jax(fn, batch='b') does), or import the bundle with "
                    "import_lux, whose models serve any batch size."
                )
            elif shape != spec.shape and shape == tuple(reversed(spec.shape)) and len(shape) > 1:
                hint = (
                    " The dims look reversed: arguments use the MLIR (row-major) order, i.e. "
                    "Julia's dims reversed; pass x.T or use layout='julia' where offered."
                )
            elif np.dtype(x.dtype) != want:
                hint = f" Cast it first, e.g. x.astype(np.{want.name})."
            raise CallArgumentError(
                f"{what}: {label} expects {spec} ({dtypes.MLIR_TO_JULIA[spec.dtype]}), "
                f"got {_describe(x)}.{hint}"
            )
        out.append(x)
    return out


def all_concrete_arrays(args: Sequence[Any]) -> bool:
    """True when every one of `args` is a concrete jax array (not a tracer, numpy or scalar).

    Such arguments can go straight to a jax.jit whose traced body checks them: jax.jit never
    casts a jax array, while it silently casts float64 numpy arrays to float32 with x64 off.
    """
    for a in args:  # noqa: SIM110 - all() over a generator costs 2-3x this on every call
        if type(a) is not ARRAY_IMPL:
            return False
    return True


class ImportedFunction:
    """A StableHLO @main as a Python callable: arrays in @main order in, a tuple out.

    Works eagerly and inside jax.jit; the heavy lifting (parsing, serialization) happened at
    load time. Made by `load_mlir` and `import_lux` (as ``model.fn``).

    Args:
        module: the parsed, checked StableHLO module.
        backend: the backend that runs it (``juliabridge.backends.make_backend``).
        arg_labels: names of the @main arguments for error messages (default "argument i").
        result_labels: names of the @main results (default "result i").
    """

    def __init__(
        self,
        module: StableHLOModule,
        backend: Backend,
        *,
        arg_labels: Sequence[str] | None = None,
        result_labels: Sequence[str] | None = None,
    ) -> None:
        self.module = module
        self.backend = backend
        self.arg_labels = list(
            arg_labels or [f"argument {i}" for i in range(len(module.arguments))]
        )
        self.result_labels = list(
            result_labels or [f"result {i}" for i in range(len(module.results))]
        )

    @property
    def backend_name(self) -> str:
        """Name of the backend running the module ("lax", "xla" or "enzyme")."""
        return self.backend.name

    @property
    def fallback_reason(self) -> str | None:
        """Why backend="auto" could not use the lax backend (None when it did, or was not asked)."""
        return getattr(self.backend, "fallback_reason", None)

    @property
    def in_specs(self) -> tuple[TensorSpec, ...]:
        """Shapes and dtypes of the arguments, in @main order."""
        return self.module.arguments

    @property
    def out_specs(self) -> tuple[TensorSpec, ...]:
        """Shapes and dtypes of the results, in @main order."""
        return self.module.results

    @cached_property
    def _boundary_types(self) -> dict[str, str]:
        types = {lab: s.dtype for lab, s in zip(self.arg_labels, self.module.arguments)}
        types |= {lab: s.dtype for lab, s in zip(self.result_labels, self.module.results)}
        return types

    @cached_property
    def _has_64_bit_types(self) -> bool:
        return any(t in dtypes.SIXTY_FOUR_BIT for t in self._boundary_types.values())

    def _check_x64(self) -> None:
        # Checked per call: jax_enable_x64 can be switched after loading. A module without
        # 64-bit types can never fail it, so its calls skip the config read.
        if self._has_64_bit_types:
            dtypes.require_x64(self._boundary_types, self.module.origin)

    @cached_property
    def target(self) -> CallTarget:
        """The backend's primal/JVP/VJP, as the juliabridge primitives see them."""
        return CallTarget(
            name=self.module.origin,
            in_specs=self.module.arguments,
            out_specs=self.module.results,
            primal=self.backend.call,
            jvp_factory=self.backend.jvp_function,
            vjp_factory=self.backend.vjp_function,
        )

    def _checked_call(self, *args: Any) -> tuple[jax.Array, ...]:
        # The body of the eager entry point: jax.jit traces it once per argument signature
        # (shapes, dtypes, weak types, shardings), so these checks run on every new signature
        # and a cached signature is one the checks already passed. A failing trace is not
        # cached: a wrong call raises every time.
        arrays = check_call_args(args, self.module.arguments, self.arg_labels, self.module.origin)
        return tuple(self.backend.call(*arrays))

    @cached_property
    def _eager(self) -> Any:
        # One compiled program for every eager call, numpy or jax arrays alike. Whatever the
        # backend, a failure while XLA compiles or runs it is typed (and the first compile
        # kept quiet) as for call_p.
        return Compiled(self.module.origin, None, self._checked_call)

    def __call__(self, *args: Any) -> tuple[jax.Array, ...]:
        """Run @main on `args` (eagerly, or as part of a trace: jit, grad, vmap...).

        Args:
            *args: one array per @main argument, in order, of its shape and dtype.

        Returns:
            One array per @main result, in order.

        Raises:
            CallArgumentError: the wrong number, shape or dtype of arrays.
            X64DisabledError: the module uses 64-bit types and jax_enable_x64 is off.
            ExecutionError / TransformError: XLA or a derivative failed.
        """
        self._check_x64()
        if all_concrete_arrays(args):
            # Straight to jax.jit's C++ dispatch, whose signature cache stands for the checks
            # (see _checked_call).
            try:
                return self._eager(*args)  # type: ignore[no-any-return]
            except CallArgumentError:
                pass  # raised again below, from outside the trace, as for any other input
        arrays = check_call_args(args, self.module.arguments, self.arg_labels, self.module.origin)
        if not any(isinstance(a, jax.core.Tracer) for a in arrays):
            return self._eager(*arrays)  # type: ignore[no-any-return]
        if self.traceable:
            # Made of JAX primitives: JAX's own rules transform it.
            return tuple(self.backend.call(*arrays))
        return tuple(call_p.bind(*arrays, target=self.target))

    @property
    def traceable(self) -> bool:
        """Whether the backend is plain JAX (lax): no juliabridge primitive around the call."""
        return bool(getattr(self.backend, "traceable", False))

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.module.arguments[:4])
        more = ", ..." if len(self.module.arguments) > 4 else ""
        outs = ", ".join(str(s) for s in self.module.results[:4])
        origin = self.module.origin
        return f"<ImportedFunction {origin} ({ins}{more}) -> ({outs}) [{self.backend.name}]>"


def load_mlir(
    source: str | os.PathLike[str], *, backend: str = "auto", trust: bool = False
) -> ImportedFunction:
    """Load a StableHLO module as Reactant prints it; call it with arrays in @main order.

    Args:
        source: path of a .mlir file, or the module text itself.
        backend: "auto" (default: "lax" when every op of the module lifts, else "enzyme" where
            enzyme-ad imports, else "xla"; `fn.fallback_reason` says why lax was not used),
            "lax" (the module as JAX primitives: every transformation), "enzyme"
            (enzyme-ad's hlo_call) or "xla" (a jax.export.Exported).
        trust: admit ops and custom-call targets outside the allowlist (for modules you made
            yourself; never for files from elsewhere).

    Returns:
        An ImportedFunction: ``fn(*arrays) -> tuple`` of the results, jittable and
        differentiable as the backend allows.

    Raises:
        MLIRParseError: the text does not parse, or the file cannot be read.
        UnsupportedModuleError: an op, type or custom call is refused (UnsupportedOpError, its
            subclass, names the op and line when backend="lax" cannot lift it).
        BackendUnavailableError: backend="enzyme" without enzyme-ad.
        JuliaBridgeError: an unknown backend name.
    """
    backend = resolve_backend_name(backend)  # a typo fails before any parsing work
    module = parse_module(source, trust=trust)
    return ImportedFunction(module, make_backend(module, backend, trust=trust))
