"""The one place juliabridge touches JAX's private API.

JAX has no public way to wrap foreign StableHLO as an ``Exported`` or to serialize an MLIR module
to a portable artifact, and these names move between releases. Everything private is reached
through this module, and tests/test_jaxinternals.py checks each piece against the installed jax.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence

import jax
from jax import export as jax_export
from jax.extend.core import Primitive
from jax.interpreters import ad, batching
from jax.interpreters import mlir as jax_mlir
from jaxlib.mlir import ir

from ..errors import BackendUnavailableError

__all__ = [
    "ARRAY_IMPL",
    "ad",
    "batching",
    "build_exported",
    "custom_call_allowlist",
    "geqrf",
    "global_x64",
    "initialize_lapack",
    "ir",
    "jax_mlir",
    "make_context",
    "make_primitive",
    "serialize_portable",
    "x64_scope",
]


def _array_impl() -> type:
    try:
        from jax._src.array import ArrayImpl
    except ImportError:  # pragma: no cover - depends on the jax release
        from jaxlib._jax import ArrayImpl  # type: ignore[import-not-found,no-redef]
    return ArrayImpl  # type: ignore[no-any-return]


#: The class of JAX's concrete arrays, and of nothing else: tracers and numpy arrays are other
#: types, so ``type(x) is ARRAY_IMPL`` tells an eager call's argument apart in one comparison.
ARRAY_IMPL: type = _array_impl()


def x64_scope() -> contextlib.AbstractContextManager[None]:
    """A scope in which JAX keeps 64-bit types, whatever jax_enable_x64 says outside it.

    The lax backend evaluates a module inside it so that 64-bit values internal to the module
    (Reactant's i64 loop counters and indices) keep their StableHLO types exactly.
    """
    return jax.enable_x64(True)  # type: ignore[no-any-return]


def global_x64() -> bool:
    """The process-wide jax_enable_x64, not a ``jax.enable_x64`` context's value inside one
    (JAX has no public reader of the global value)."""
    from jax._src import config as _config

    return bool(_config.enable_x64.get_global())


@contextlib.contextmanager
def global_x64_kept() -> Iterator[None]:
    """Restore the process-wide jax_enable_x64 on exit, whatever the body set it to.

    For code that sets the flag with ``jax.config.update`` and restores the value it *saw*,
    which under a ``jax.enable_x64`` context is the context's, not the global one (jax2onnx's
    converter does this).
    """
    before = global_x64()
    try:
        yield
    finally:
        if global_x64() != before:
            jax.config.update("jax_enable_x64", before)


def make_primitive(name: str) -> Primitive:
    """A multiple-results primitive; rules are registered by juliabridge.transforms."""
    p = Primitive(name)
    p.multiple_results = True
    return p


#: JAX's dialect registrations (jax._src.interpreters.mlir._create_ir_context), by module
#: and function name, and whether a context without it is of no use to juliabridge.
_DIALECTS = (
    ("sdy", "register_dialect", False),
    ("mpmd", "register_dialect", False),
    ("mhlo", "register_mhlo_dialect", False),
    ("chlo", "register_dialect", True),
    ("hlo", "register_dialect", True),
)


def _register_dialects(ctx: ir.Context, *, load: bool) -> bool:
    """Register JAX's dialects in `ctx`; False when a required one is missing."""
    from jax._src.lib.mlir import dialects

    for module, function, required in _DIALECTS:
        register = getattr(getattr(dialects, module, None), function, None)
        if register is None:
            if required:
                return False
            continue
        register(ctx, load=load)
    return True


def _lean_context() -> ir.Context | None:
    """A new context with JAX's dialects registered but not loaded; None where jax lacks
    the pieces."""
    try:
        from jax._src.interpreters import mlir as impl

        # JaxIrContext skips ir.Context.__init__, which loads every dialect linked in.
        ctx: ir.Context = impl.JaxIrContext()
        ctx.append_dialect_registry(impl.upstream_dialects)
        ctx.set_thread_pool(impl.global_thread_pool)
    except (ImportError, AttributeError):  # pragma: no cover - jax release
        return None
    return ctx if _register_dialects(ctx, load=False) else None


def _eager_context() -> ir.Context:
    """The fallback: a plain new context with every dialect loaded up front (slower).

    Never ``jax_mlir.make_ir_context()``: since jax 0.11 that is JAX's own per-thread context.
    """
    ctx = ir.Context()
    try:
        from jax._src.interpreters import mlir as impl

        ctx.append_dialect_registry(impl.upstream_dialects)  # func and the other upstream ones
        ctx.load_all_available_dialects()
        _register_dialects(ctx, load=True)
    except (ImportError, AttributeError):  # pragma: no cover - jax release
        pass  # what ir.Context() itself loaded (the dialects jaxlib links in) is all there is
    return ctx


def make_context(*, allow_unregistered: bool = False) -> ir.Context:
    """A new MLIR context of juliabridge's own, with JAX's dialects (stablehlo, chlo, func,
    sdy...) registered; each is loaded when a module first uses it.

    Not ``jax_mlir.make_ir_context()``: that loads every dialect up front, and since jax
    0.11 it hands out a per-thread context that JAX's own lowering reuses, which would share
    this context's flags (``allow_unregistered_dialects``) and the modules parsed in it with
    JAX.
    """
    ctx = _lean_context() or _eager_context()
    ctx.allow_unregistered_dialects = allow_unregistered
    return ctx


def _export_module():  # type: ignore[no-untyped-def]
    try:
        from jax._src.export import _export
    except ImportError as e:  # pragma: no cover - depends on the jax release
        raise BackendUnavailableError(
            f"this jax ({jax.__version__}) has no jax._src.export._export; the xla backend "
            "supports jax 0.10.x. Install a supported jax or use backend='enzyme'."
        ) from e
    return _export


def serialize_portable(module: ir.Module) -> bytes:
    """Serialize `module` the way jax.export does (CHLO legalized, VHLO at jax's target version)."""
    return bytes(_export_module()._module_to_bytecode(module))


def custom_call_allowlist() -> frozenset[str]:
    """Custom-call targets jax.export itself treats as stable and registered in stock jaxlib."""
    return frozenset(_export_module()._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)


def geqrf(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """LAPACK-style QR in Householder form (packed reflectors and taus) — the primitive JAX's
    QR lowers to; `jax.lax.linalg` does not export it."""
    from jax._src.lax import linalg

    return linalg.geqrf(a)  # type: ignore[no-any-return]


def initialize_lapack() -> None:
    """Point jaxlib's CPU LAPACK kernels at their LAPACK functions.

    jaxlib fills the kernels' function pointers lazily, when JAX itself first lowers a linear
    algebra op (jax/_src/lax/linalg.py calls lapack.prepare_lapack_call). A module that calls
    lapack_*_ffi targets without JAX ever lowering one would jump through a null pointer
    (SIGSEGV, seen on the enzyme backend), so backends call this first. Idempotent.
    """
    from jaxlib import lapack

    lapack._lapack.initialize()


def current_platform() -> str:
    """The lowering platform name ("cpu", "cuda", "rocm", "tpu") of JAX's default backend."""
    from jax._src import xla_bridge

    return str(xla_bridge.canonicalize_platform(jax.default_backend()))


def _exported_fields(_export: object) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(_export.Exported))  # type: ignore[attr-defined]


def build_exported(
    *,
    name: str,
    module_bytecode: bytes,
    in_avals: Sequence[jax.core.ShapedArray],
    out_avals: Sequence[jax.core.ShapedArray],
    extra_custom_calls: Sequence[str] = (),
    get_vjp: Callable[[jax_export.Exported], jax_export.Exported] | None = None,
) -> jax_export.Exported:
    """Wrap a serialized single-device StableHLO module whose @main has these avals.

    The platform check is disabled: Reactant's StableHLO is platform-neutral, so the same
    module runs on whatever backend JAX uses at call time.
    """
    _export = _export_module()
    n_in, n_out = len(in_avals), len(out_avals)
    in_tree = jax.tree_util.tree_structure((tuple(range(n_in)), {}))
    out_tree = jax.tree_util.tree_structure(tuple(range(n_out)))
    checks = [jax_export.DisabledSafetyCheck.platform()]
    checks += [jax_export.DisabledSafetyCheck.custom_call(t) for t in extra_custom_calls]
    fields: dict[str, object] = {}
    if "_has_named_shardings" in _exported_fields(_export):
        # jax <= 0.11.0 has this field (and requires it); 0.11.1 removed it.
        fields["_has_named_shardings"] = True
    return _export.Exported(
        **fields,
        fun_name=name,
        in_tree=in_tree,
        in_avals=tuple(in_avals),
        out_tree=out_tree,
        out_avals=tuple(out_avals),
        _in_named_shardings=(None,) * n_in,
        _out_named_shardings=(None,) * n_out,
        in_shardings_hlo=(None,) * n_in,
        out_shardings_hlo=(None,) * n_out,
        nr_devices=1,
        platforms=(current_platform(),),
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=tuple(checks),
        mlir_module_serialized=module_bytecode,
        calling_convention_version=jax_export.maximum_supported_calling_convention_version,
        module_kept_var_idx=tuple(range(n_in)),
        uses_global_constants=False,
        _get_vjp=get_vjp,
    )
