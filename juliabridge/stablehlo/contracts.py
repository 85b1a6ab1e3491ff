"""The contract each admitted op must meet before XLA sees it.

MLIR's verifier checks that a module is well formed, not that running it is safe. Three kinds
of op pass the verifier and still crash or hang the process:

- **Custom calls.** A jaxlib kernel trusts the shapes it is given: the CPU LAPACK kernels
  (jaxlib/cpu/lapack_kernels.cc) size every loop from the *first operand* and write the
  results without checking their sizes, so ``lapack_sgetrf_ffi`` declared with a 2x2 result
  for a 64x64 operand writes 16 KiB into a 16-byte buffer (a heap overflow). Their enum
  attributes are decoded by a plain cast (XLA_FFI_REGISTER_ENUM_ATTR_DECODING), so an unknown
  ``mode`` byte reaches LAPACK. Each admitted target therefore has a contract here, written
  from jaxlib's kernel bindings (the ``Ffi::Bind()`` lists) and from the result types JAX's own
  lowerings produce (jax/_src/lax/linalg.py); tests/test_module_hardening.py checks every
  contract against JAX's lowering of the same operation. A target without a contract is
  refused even though jax.export lists it as stable.
- **fft.** The verifier checks ``fft_length`` against the operand for RFFT and IRFFT but not
  for FFT/IFFT; a mismatch aborts inside the FFT library ("array sizes are not conformable").
- **Host I/O and collectives.** ``infeed``/``outfeed``/``send``/``recv`` wait for a host or a
  peer that never comes (the call hangs forever); they are refused by name. A token (which
  orders them) holds no data and is allowed without them. A module runs on one device here,
  so a collective naming another replica or partition can only fail or wait.

- **Host-evaluated extents.** XLA computes shapes, paddings, strides and dilations on the host
  in int64 while it compiles, and aborts (SIGABRT) when that arithmetic overflows: ``pad`` with
  ``low = 2^63 - 2`` and ``high = -(2^63 - 2)`` is valid StableHLO (their sum with the operand's
  size is the result's), and so is the same padding of a ``reduce_window``, or as the constant
  operands of a ``dynamic_pad``. The rule (`check_extents`): every integer an op carries as an
  attribute, or as a constant operand that sizes its result, times one more than the op's
  largest dimension, stays within 2^58; every product and sum of a few such terms (XLA's
  extent formulas: ``(n - 1) * interior + low + high + n``, a dilated window, a strided output)
  then fits in int64. Real paddings, strides and dilations are a few times a dimension at most.

Every check is O(size of the op), so checking a module is linear in its size.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ModuleContractError, UnsupportedModuleError
from ..support.jaxinternals import ir
from ..support.shown import shown
from .lifted_custom_calls import lifted_targets

Type = tuple[tuple[int, ...], str]  # (static shape, MLIR element type) of one tensor

#: Ops that wait on the host or on another program: refused outright.
HOST_IO_OPS = frozenset(
    {"stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send", "stablehlo.recv"}
)
#: Collectives: every replica and partition id they name must be 0 (one device).
COLLECTIVE_OPS = frozenset(
    {
        "stablehlo.all_reduce",
        "stablehlo.all_gather",
        "stablehlo.all_to_all",
        "stablehlo.reduce_scatter",
        "stablehlo.collective_permute",
        "stablehlo.collective_broadcast",
    }
)


class Broken(Exception):
    """A contract violation; the caller adds the op and its location."""


def where(op: ir.Operation, origin: str) -> str:
    """'origin, line L' (or the op's location) for messages."""
    loc = str(op.location)
    m = re.match(r'loc\("[^"]*":(\d+):(\d+)\)', loc)
    if m:
        return f"{origin}, line {m.group(1)}"
    return f"{origin} ({loc[:120]})"


# --- types and attributes ---------------------------------------------------------------------


def tensor_type(t: ir.Type) -> Type:
    """(shape, element type) of a statically shaped ranked tensor; Broken otherwise."""
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
        raise Broken(f"expected a statically shaped tensor, found {t}")
    return tuple(int(d) for d in t.shape), str(t.element_type)


def _attr(a: ir.Attribute) -> tuple[str, Any]:
    """A small attribute as (kind, value): ('bool', True), ('ui8', 65), ('str', 'x')..."""
    if isinstance(a, ir.BoolAttr):
        return "bool", bool(a.value)
    if isinstance(a, ir.IntegerAttr):
        return str(a.type), int(a.value)
    if isinstance(a, ir.StringAttr):
        return "str", a.value
    if isinstance(a, ir.FloatAttr):
        return "float", float(a.value)
    return "other", str(a)[:80]


def ints(a: ir.Attribute) -> list[int]:
    """The integers of a dense integer elements or i64 array attribute."""
    return [int(a[i]) for i in range(len(a))]  # type: ignore[index, arg-type]


def _dict(a: ir.Attribute) -> dict[str, tuple[str, Any]]:
    d = ir.DictAttr(a)
    # By name (TypeError for dense complex data, which parse_module reports), never through
    # NamedAttribute.attr, which aborts the process on it.
    return {d[i].name: _attr(d[d[i].name]) for i in range(len(d))}


# --- custom-call contracts ----------------------------------------------------------------------

_F32, _F64, _C64, _C128 = "f32", "f64", "complex<f32>", "complex<f64>"
_REAL = {_F32: _F32, _F64: _F64, _C64: _F32, _C128: _F64}
_COMPLEX = {_F32: _C64, _F64: _C128, _C64: _C64, _C128: _C128}
_LAPACK_PREFIX = {"s": _F32, "d": _F64, "c": _C64, "z": _C128}
_I32 = "i32"


@dataclass(frozen=True)
class Call:
    """What a contract sees of one custom call."""

    operands: tuple[Type, ...]
    attrs: dict[str, tuple[str, Any]]
    dtype: str | None  # element type implied by the target name (LAPACK), else None


#: (call, declared result types) -> None, or Broken when the kernel would write otherwise.
Rule = Callable[[Call, Sequence[Type]], None]


def exact(fn: Callable[[Call], list[Type]]) -> Rule:
    """A rule from a function giving the one list of result types the kernel writes."""

    def rule(call: Call, outs: Sequence[Type]) -> None:
        _expect(outs, [fn(call)])

    rule.__name__ = fn.__name__
    return rule


def _expect(outs: Sequence[Type], allowed: list[list[Type]]) -> None:
    if list(outs) not in allowed:
        raise Broken(
            f"declares results ({_show(outs)}); for these operands the kernel writes "
            f"({_show(allowed[0])})"
        )


@dataclass(frozen=True)
class Contract:
    """One admitted custom-call target: where it runs and what it may be given."""

    platforms: frozenset[str]  # JAX platform names whose jaxlib registers the target
    n_operands: int
    attrs: dict[str, frozenset[Any] | type]  # attribute name -> allowed values, or int/bool
    rule: Rule
    typed_ffi: bool = True  # an XLA FFI handler (attributes in a dictionary)


def _char(*chars: str) -> frozenset[Any]:
    return frozenset(("ui8", ord(c)) for c in chars)


_BOOL = frozenset({("bool", True), ("bool", False)})


def _matrix(call: Call, i: int = 0, *, square: bool = False) -> tuple[tuple[int, ...], int, int]:
    """(batch, rows, cols) of operand `i`, a batch of matrices of the target's dtype."""
    shape, et = call.operands[i]
    if len(shape) < 2:
        raise Broken(f"operand {i} must be a (batch of) matrices, found rank {len(shape)}")
    if call.dtype is not None and et != call.dtype:
        raise Broken(f"operand {i} has element type {et}; this target takes {call.dtype}")
    if call.dtype is None and et not in _REAL:
        raise Broken(f"operand {i} has element type {et}; expected f32, f64 or complex")
    *batch, m, n = shape
    if m < 1 or n < 1:
        # LAPACK rejects leading dimensions < 1 through xerbla; JAX never calls it on empties.
        raise Broken(f"operand {i} is an empty matrix ({m}x{n})")
    if square and m != n:
        raise Broken(f"operand {i} must be square, found {m}x{n}")
    return tuple(batch), m, n


def _dt(call: Call) -> str:
    return call.dtype or call.operands[0][1]


def _getrf(c: Call) -> list[Type]:
    b, m, n = _matrix(c)
    return [((*b, m, n), _dt(c)), ((*b, min(m, n)), _I32), (b, _I32)]


def _geqrf(c: Call) -> list[Type]:
    b, m, n = _matrix(c)
    return [((*b, m, n), _dt(c)), ((*b, min(m, n)), _dt(c))]


def _orgqr(c: Call) -> list[Type]:
    b, m, n = _matrix(c)
    tau_shape, tau_et = c.operands[1]
    if tau_et != _dt(c) or len(tau_shape) != len(b) + 1 or tuple(tau_shape[:-1]) != b:
        raise Broken(f"tau must be {_dt(c)} of shape batch + [k], found {tau_shape} {tau_et}")
    k = tau_shape[-1]
    if not m >= n >= k >= 0:  # LAPACK ?orgqr: M >= N >= K >= 0
        raise Broken(f"needs rows >= cols >= len(tau), found {m} x {n} with {k}")
    return [((*b, m, n), _dt(c))]


def _potrf(c: Call) -> list[Type]:
    b, n, _ = _matrix(c, square=True)
    return [((*b, n, n), _dt(c)), (b, _I32)]


def _svd_cpu(c: Call, outs: Sequence[Type]) -> None:
    b, m, n = _matrix(c)
    k = min(m, n)
    t = _dt(c)
    full = [((*b, m, m), t), ((*b, n, n), t)]
    reduced = [((*b, m, k), t), ((*b, k, n), t)]
    # Mode 'N' leaves U and VT alone; JAX allocates them at either size.
    uv = {"A": [full], "S": [reduced], "N": [full, reduced]}[chr(c.attrs["mode"][1])]
    head = [((*b, m, n), t), ((*b, k), _REAL[t])]
    _expect(outs, [[*head, *u_vt, (b, _I32)] for u_vt in uv])


def _syevd(c: Call) -> list[Type]:
    b, n, _ = _matrix(c, square=True)
    return [((*b, n, n), _dt(c)), ((*b, n), _REAL[_dt(c)]), (b, _I32)]


def _geev(c: Call) -> list[Type]:
    b, n, _ = _matrix(c, square=True)
    t = _dt(c)
    vecs = ((*b, n, n), _COMPLEX[t])
    if t in (_F32, _F64):  # real and imaginary parts of the eigenvalues
        return [((*b, n), t), ((*b, n), t), vecs, vecs, (b, _I32)]
    return [((*b, n), t), vecs, vecs, (b, _I32)]


def _gees(c: Call) -> list[Type]:
    b, n, _ = _matrix(c, square=True)
    t = _dt(c)
    mat = ((*b, n, n), t)
    vals = [((*b, n), t), ((*b, n), t)] if t in (_F32, _F64) else [((*b, n), t)]
    return [mat, mat, *vals, (b, _I32), (b, _I32)]


def _gehrd(c: Call) -> list[Type]:
    b, n, _ = _matrix(c, square=True)
    low, high = c.attrs["low"][1], c.attrs["high"][1]
    if not 1 <= low <= high <= n:  # LAPACK ?gehrd: 1 <= ILO <= IHI <= N
        raise Broken(f"needs 1 <= low <= high <= {n}, found low={low}, high={high}")
    return [((*b, n, n), _dt(c)), ((*b, n - 1), _dt(c)), (b, _I32)]


def _sytrd(c: Call) -> list[Type]:
    b, n, _ = _matrix(c, square=True)
    t, r = _dt(c), _REAL[_dt(c)]
    return [((*b, n, n), t), ((*b, n), r), ((*b, n - 1), r), ((*b, n - 1), t), (b, _I32)]


def _trsm(c: Call) -> list[Type]:
    b, m, n = _matrix(c, 1)  # the right-hand side sizes everything (lapack_kernels.cc)
    k = m if chr(c.attrs["side"][1]) == "L" else n
    if c.operands[0] != ((*b, k, k), _dt(c)):
        raise Broken(f"the triangular operand must be {_dt(c)} of shape {[*b, k, k]}")
    return [((*b, m, n), _dt(c))]


def _gtsv(c: Call) -> list[Type]:
    b, m, n = _matrix(c, 3)
    diag = ((*b, m), _dt(c))
    for i in range(3):
        if c.operands[i] != diag:
            raise Broken(f"operand {i} (a diagonal) must be {_dt(c)} of shape {[*b, m]}")
    return [diag, diag, diag, ((*b, m, n), _dt(c)), (b, _I32)]


def _gtsv2(c: Call) -> list[Type]:
    b, m, n = _matrix(c, 3)
    for i in range(3):
        if c.operands[i] != ((*b, m), _dt(c)):
            raise Broken(f"operand {i} (a diagonal) must be {_dt(c)} of shape {[*b, m]}")
    return [((*b, m, n), _dt(c))]


def _gesvd_gpu(c: Call) -> list[Type]:
    # jaxlib/gpu/solver_kernels_ffi.cc GesvdDispatch: m >= n after the optional transpose.
    b, rows, cols = _matrix(c)
    transposed = c.attrs["transposed"][1]
    m, n = (cols, rows) if transposed else (rows, cols)
    if n > m:
        raise Broken("needs rows >= cols (after `transposed`)")
    t = _dt(c)
    out = [((*b, rows, cols), t), ((*b, n), _REAL[t])]
    if c.attrs["compute_uv"][1]:
        reduced_u = (*b, n, m) if transposed else (*b, m, n)
        u = (*b, m, m) if c.attrs["full_matrices"][1] else reduced_u
        return [*out, (u, t), ((*b, n, n), t), (b, _I32)]
    return [*out, ((), t), ((), t), (b, _I32)]


def _gesvdj_gpu(c: Call) -> list[Type]:
    b, m, n = _matrix(c)
    k = min(m, n)
    t = _dt(c)
    full = c.attrs["full_matrices"][1]
    u, v = ((*b, m, m), (*b, n, n)) if full else ((*b, m, k), (*b, n, k))
    return [((*b, m, n), t), ((*b, k), _REAL[t]), (u, t), (v, t), (b, _I32)]


def _pivots(c: Call, outs: Sequence[Type]) -> None:
    ((shape, et),) = c.operands
    if et != _I32 or not shape:
        raise Broken("pivots must be i32 of shape batch + [k]")
    # jaxlib/gpu/linalg_kernels.cc: same batch, permutation at least as long as the pivots.
    ok = len(outs) == 1 and outs[0][1] == _I32 and len(outs[0][0]) == len(shape)
    if not ok or tuple(outs[0][0][:-1]) != tuple(shape[:-1]) or outs[0][0][-1] < shape[-1]:
        raise Broken(
            f"the permutation must be i32 of shape {list(shape[:-1])} + [p], p >= {shape[-1]}"
        )


def _threefry(c: Call) -> list[Type]:
    first = c.operands[0]
    if first[1] != "ui32" or any(o != first for o in c.operands):
        raise Broken("all four operands must be ui32 of one shape (JAX broadcasts them)")
    return [first, first]


def _identity(c: Call) -> list[Type]:
    return [c.operands[0]]


_CPU = frozenset({"cpu"})
_CUDA = frozenset({"cuda"})
_ROCM = frozenset({"rocm"})


def _lapack(
    fam: str, n_ops: int, attrs: dict[str, frozenset[Any] | type], rule: Rule
) -> dict[str, Contract]:
    return {f"lapack_{p}{fam}_ffi": Contract(_CPU, n_ops, attrs, rule) for p in _LAPACK_PREFIX}


def _lapack_named(
    names: dict[str, str], n_ops: int, attrs: dict[str, Any], rule: Rule
) -> dict[str, Contract]:
    return {f"lapack_{p}{fam}_ffi": Contract(_CPU, n_ops, attrs, rule) for p, fam in names.items()}


_UPLO = _char("L", "U")
_EIG = _char("N", "V")

CONTRACTS: dict[str, Contract] = {
    **_lapack("getrf", 1, {}, exact(_getrf)),
    **_lapack("geqrf", 1, {}, exact(_geqrf)),
    **_lapack_named({"s": "orgqr", "d": "orgqr", "c": "ungqr", "z": "ungqr"}, 2, {}, exact(_orgqr)),
    **_lapack("potrf", 1, {"uplo": _UPLO}, exact(_potrf)),
    **_lapack("gesdd", 1, {"mode": _char("A", "S", "N")}, _svd_cpu),
    **_lapack_named(
        {"s": "syevd", "d": "syevd", "c": "heevd", "z": "heevd"},
        1,
        {"uplo": _UPLO, "mode": _EIG},
        exact(_syevd),
    ),
    **_lapack("geev", 1, {"compute_left": _EIG, "compute_right": _EIG}, exact(_geev)),
    # sort='S' is unimplemented in the kernel (it would need a select function).
    **_lapack("gees", 1, {"mode": _EIG, "sort": _char("N")}, exact(_gees)),
    **_lapack("gehrd", 1, {"low": int, "high": int}, exact(_gehrd)),
    **_lapack_named(
        {"s": "sytrd", "d": "sytrd", "c": "hetrd", "z": "hetrd"}, 1, {"uplo": _UPLO}, exact(_sytrd)
    ),
    **_lapack(
        "trsm",
        2,
        {
            "side": _char("L", "R"),
            "uplo": _UPLO,
            "trans_x": _char("N", "T", "C"),
            "diag": _char("N", "U"),
        },
        exact(_trsm),
    ),
    **_lapack("gtsv", 4, {}, exact(_gtsv)),
}
for _gpu, _plat in (("cu", _CUDA), ("hip", _ROCM)):
    CONTRACTS.update(
        {
            f"{_gpu}solver_getrf_ffi": Contract(_plat, 1, {}, exact(_getrf)),
            f"{_gpu}solver_geqrf_ffi": Contract(_plat, 1, {}, exact(_geqrf)),
            f"{_gpu}solver_orgqr_ffi": Contract(_plat, 2, {}, exact(_orgqr)),
            f"{_gpu}solver_potrf_ffi": Contract(_plat, 1, {"lower": _BOOL}, exact(_potrf)),
            f"{_gpu}solver_syevd_ffi": Contract(
                _plat,
                1,
                {"lower": _BOOL, "algorithm": frozenset(("ui8", v) for v in (0, 1, 2))},
                exact(_syevd),
            ),
            f"{_gpu}solver_sytrd_ffi": Contract(_plat, 1, {"lower": _BOOL}, exact(_sytrd)),
            f"{_gpu}solver_gesvd_ffi": Contract(
                _plat,
                1,
                {"full_matrices": _BOOL, "compute_uv": _BOOL, "transposed": _BOOL},
                exact(_gesvd_gpu),
            ),
            f"{_gpu}solver_gesvdj_ffi": Contract(
                _plat, 1, {"full_matrices": _BOOL, "compute_uv": _BOOL}, exact(_gesvdj_gpu)
            ),
            f"{_gpu}_lu_pivots_to_permutation": Contract(_plat, 1, {}, _pivots),
            f"{_gpu}_threefry2x32_ffi": Contract(_plat, 4, {}, exact(_threefry)),
        }
    )
CONTRACTS["cusparse_gtsv2_ffi"] = Contract(_CUDA, 4, {}, exact(_gtsv2))
# Sharding annotations: the identity on one device (juliabridge compiles for one device).
_ANY = frozenset({"cpu", "cuda", "rocm", "tpu"})
for _t in ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"):
    CONTRACTS[_t] = Contract(_ANY, 1, {}, exact(_identity), typed_ffi=False)


def contract_targets() -> frozenset[str]:
    """Every custom-call target that has a contract here."""
    return frozenset(CONTRACTS)


def target_platforms(target: str) -> frozenset[str]:
    """Platforms whose jaxlib registers `target` (empty for a target without a contract)."""
    c = CONTRACTS.get(target)
    return c.platforms if c else frozenset()


def check_platform(targets: Sequence[str], platform: str, origin: str) -> None:
    """Refuse custom calls whose kernels this platform's jaxlib does not register.

    XLA would fail at compile time with a raw JaxRuntimeError ("No registered implementation
    for FFI custom call"); saying so at load time names the target and the platform it needs.
    """
    missing = sorted(
        t for t in targets if t in CONTRACTS and platform not in CONTRACTS[t].platforms
    )
    if missing:
        need = sorted({p for t in missing for p in CONTRACTS[t].platforms})
        raise UnsupportedModuleError(
            f"{origin}: custom call(s) {', '.join(missing[:6])} run only on {'/'.join(need)}, "
            f"and JAX's default platform here is {platform}; the module was lowered for another "
            "platform. Load it where that platform is available (e.g. "
            "JAX_PLATFORMS=cuda), or export the model again for this platform."
        )


def _config(op: ir.Operation, contract: Contract) -> dict[str, tuple[str, Any]]:
    """The FFI attributes of a custom call, from whichever attribute JAX's printer used."""
    attrs = op.attributes
    api = int(ir.IntegerAttr(attrs["api_version"]).value) if "api_version" in attrs else 1
    mhlo, plain = attrs.get("mhlo.backend_config"), attrs.get("backend_config")
    if not contract.typed_ffi:
        if api not in (1, 2) or (mhlo is not None and not _empty(mhlo)):
            raise Broken("takes no backend configuration")
        return {}
    if api not in (1, 4):
        raise Broken(f"api_version {api}; this FFI target needs 4 (or the dictionary form)")
    dicts = [a for a in (mhlo, plain) if a is not None and isinstance(a, ir.DictAttr)]
    if len(dicts) != 1 or any(
        a is not None and not isinstance(a, ir.DictAttr) and not _empty(a) for a in (mhlo, plain)
    ):
        raise Broken("needs exactly one dictionary of FFI attributes (mhlo.backend_config)")
    return _dict(dicts[0])


def _empty(a: ir.Attribute) -> bool:
    return (isinstance(a, ir.StringAttr) and a.value == "") or (
        isinstance(a, ir.DictAttr) and len(a) == 0
    )


def _check_attrs(contract: Contract, got: dict[str, tuple[str, Any]]) -> None:
    if set(got) != set(contract.attrs):
        raise Broken(
            f"FFI attributes {sorted(got)}; the kernel binds exactly {sorted(contract.attrs)}"
        )
    for name, allowed in contract.attrs.items():
        kind, value = got[name]
        if allowed is int:
            if kind != "i32":
                raise Broken(f"attribute {name} must be an i32, found {kind}")
        elif (kind, value) not in allowed:  # type: ignore[operator]
            listed = sorted(chr(v) if k == "ui8" and v > 32 else v for k, v in allowed)  # type: ignore[union-attr]
            raise Broken(f"attribute {name} = {shown(value)} ({kind}); allowed: {listed}")


def _check_layouts(op: ir.Operation, key: str, types: Sequence[ir.Type]) -> None:
    if key not in op.attributes:
        return
    layouts = ir.ArrayAttr(op.attributes[key])
    if len(layouts) != len(types):
        raise Broken(f"{key} has {len(layouts)} entries for {len(types)} values")
    for lay, t in zip(layouts, types):
        perm = sorted(ints(lay))
        rank = len(t.shape) if isinstance(t, ir.RankedTensorType) else -1
        if perm != list(range(rank)):
            raise Broken(f"{key}: {ints(lay)} is not a layout of rank {rank}")


def _check_aliases(op: ir.Operation, ins: Sequence[Type], outs: Sequence[Type]) -> None:
    if "output_operand_aliases" not in op.attributes:
        return
    from jaxlib.mlir.dialects import stablehlo

    for a in ir.ArrayAttr(op.attributes["output_operand_aliases"]):
        al = stablehlo.OutputOperandAlias(a)
        out_idx, op_idx = list(al.output_tuple_indices), int(al.operand_index)
        if list(al.operand_tuple_indices) or len(out_idx) > 1:
            raise Broken("aliases into tuples are not supported")
        k = out_idx[0] if out_idx else 0
        if not (0 <= op_idx < len(ins) and 0 <= k < len(outs)) or ins[op_idx] != outs[k]:
            raise Broken(
                f"aliases result {k} to operand {op_idx}, which differ in type or do not exist"
            )


def check_custom_call(op: ir.Operation, origin: str) -> None:
    """Refuse a custom call whose target has no contract, or that breaks it."""
    target = ir.StringAttr(op.attributes["call_target_name"]).value
    contract = CONTRACTS.get(target)
    at = where(op, origin)
    if contract is None and target in lifted_targets():
        # Only the lax backend admits it: it checks the call against its own contract when it
        # lifts it, and the backends that would call the kernel refuse it (lifted_custom_calls.py).
        return
    if contract is None:
        raise ModuleContractError(
            f"{at}: stablehlo.custom_call @{target} has no operand/result contract in "
            "juliabridge (juliabridge/stablehlo/contracts.py), so its kernel could be handed "
            "buffers of the wrong size. Load the module with trust=True only if you made it."
        )
    try:
        if "called_computations" in op.attributes and len(
            ir.ArrayAttr(op.attributes["called_computations"])
        ):
            raise Broken("calls no computations")
        if len(op.operands) != contract.n_operands:
            raise Broken(f"takes {contract.n_operands} operand(s), found {len(op.operands)}")
        ins = tuple(tensor_type(v.type) for v in op.operands)
        outs = tuple(tensor_type(r.type) for r in op.results)
        attrs = _config(op, contract)
        _check_attrs(contract, attrs)
        prefix = target[len("lapack_")] if target.startswith("lapack_") else None
        contract.rule(Call(ins, attrs, _LAPACK_PREFIX.get(prefix) if prefix else None), outs)
        _check_layouts(op, "operand_layouts", [v.type for v in op.operands])
        _check_layouts(op, "result_layouts", [r.type for r in op.results])
        _check_aliases(op, ins, outs)
    except Broken as e:
        raise ModuleContractError(
            f"{at}: stablehlo.custom_call @{target} {e}; running it could corrupt memory or "
            "crash the process, so the module is refused. Export it again from JAX/Reactant, "
            "or pass trust=True if you wrote it yourself."
        ) from None
    except (ValueError, TypeError, KeyError, IndexError) as e:  # attribute of an unexpected kind
        raise ModuleContractError(
            f"{at}: stablehlo.custom_call @{target} has attributes of an unexpected form "
            f"({type(e).__name__}: {str(e)[:200]}); export the module again"
        ) from None


def _show(types: Sequence[Type]) -> str:
    return ", ".join(f"tensor<{'x'.join(map(str, s)) + 'x' if s else ''}{e}>" for s, e in types)


# --- other ops -----------------------------------------------------------------------------------

_FFT_TYPE = re.compile(r"fft_type\s+(\w+)")


def check_fft(op: ir.Operation, origin: str) -> None:
    """fft_length must equal the transformed trailing dimensions (the verifier skips FFT/IFFT)."""
    try:
        kind_m = _FFT_TYPE.search(str(op.attributes["fft_type"]))
        kind = kind_m.group(1) if kind_m else "?"
        length = ints(op.attributes["fft_length"])
        ((shape, et),) = (tensor_type(v.type) for v in op.operands)
        ((rshape, ret),) = (tensor_type(r.type) for r in op.results)
        k = len(length)
        if not 1 <= k <= 3 or k > len(shape) or any(n < 1 for n in length):
            raise Broken(f"fft_length {length} for an operand of rank {len(shape)}")
        lead = tuple(shape[:-k])
        if kind in ("FFT", "IFFT"):
            want_in, want_out = (*lead, *length), (*lead, *length)
            ok_types = et in (_C64, _C128) and ret == et
        elif kind == "RFFT":
            want_in, want_out = (*lead, *length), (*lead, *length[:-1], length[-1] // 2 + 1)
            ok_types = et in (_F32, _F64) and ret == _COMPLEX[et]
        elif kind == "IRFFT":
            want_in, want_out = (*lead, *length[:-1], length[-1] // 2 + 1), (*lead, *length)
            ok_types = et in (_C64, _C128) and ret == _REAL[et]
        else:
            raise Broken(f"unknown fft_type {kind}")
        if tuple(shape) != want_in or tuple(rshape) != want_out or not ok_types:
            raise Broken(
                f"{kind} with fft_length {length} takes {list(want_in)} and gives "
                f"{list(want_out)}, found {list(shape)} {et} -> {list(rshape)} {ret}"
            )
    except Broken as e:
        raise ModuleContractError(
            f"{where(op, origin)}: stablehlo.fft {e}; the FFT library would abort the process. "
            "Export the module again."
        ) from None


def check_collective(op: ir.Operation, origin: str) -> None:
    """A collective on one device may only name replica/partition 0 (or -1, padding)."""
    ids: list[int] = []
    for key in ("replica_groups", "source_target_pairs"):
        if key in op.attributes:
            ids += ints(op.attributes[key])
    if any(i not in (0, -1) for i in ids):
        raise ModuleContractError(
            f"{where(op, origin)}: {op.name} exchanges data with other devices (ids "
            f"{sorted(set(ids))[:8]}), but juliabridge runs a module as one single-device "
            "program; it would fail or wait forever. Export the model without explicit "
            "collectives (shardings are fine)."
        )


#: Bound on |integer extent| * (largest dimension + 1); see the module docstring.
EXTENT_PRODUCT_LIMIT = 1 << 58
#: Ops whose integers are values, not extents (constants), or checked by their own contract.
_NOT_EXTENTS = frozenset(
    {"stablehlo.constant", "chlo.constant", "chlo.constant_like", "stablehlo.custom_call"}
)
#: Operands (by index) whose constant values XLA evaluates as extents of the result.
EXTENT_OPERANDS = {
    "stablehlo.dynamic_pad": (2, 3, 4),
    "stablehlo.real_dynamic_slice": (1, 2, 3),
    "stablehlo.dynamic_iota": (0,),
    "stablehlo.dynamic_broadcast_in_dim": (1,),
    "stablehlo.dynamic_reshape": (1,),
    "stablehlo.dynamic_conv": (2,),
    "stablehlo.dynamic_gather": (2,),
}


def _attr_ints(a: ir.Attribute) -> list[int] | None:
    """The integers of an integer, i64-array or dense-integer attribute; None for others."""
    if isinstance(a, ir.BoolAttr):
        return None
    if isinstance(a, ir.IntegerAttr):
        return [int(a.value)]
    if isinstance(a, ir.DenseI64ArrayAttr):
        return list(a)
    if isinstance(a, ir.DenseIntElementsAttr):
        t = ir.ShapedType(a.type)
        if t.element_type == ir.IntegerType.get_signless(1):
            return None
        if a.is_splat:
            return [int(ir.IntegerAttr(a.get_splat_value()).value)]
        return [int(a[i]) for i in range(len(a))]
    return None


def _largest_dim(op: ir.Operation) -> int:
    largest = 0
    for v in (*op.operands, *op.results):
        t = v.type
        if isinstance(t, ir.RankedTensorType) and t.has_static_shape:
            for d in t.shape:
                largest = max(largest, int(d))
    return largest


def check_extents(op: ir.Operation, origin: str) -> None:
    """Refuse an op whose integer attributes or extent operands would overflow XLA's int64
    extent arithmetic (see the module docstring)."""
    name = op.name
    if name in _NOT_EXTENTS:
        return
    values: list[tuple[str, int]] = []
    for i in range(len(op.attributes)):
        key = op.attributes[i].name
        try:
            # By name: NamedAttribute.attr aborts the process (SIGABRT) on an attribute the
            # bindings cannot wrap (dense complex), where this raises TypeError.
            attr = op.attributes[key]
        except TypeError:
            continue  # dense complex data: no extents
        found = _attr_ints(attr)
        if found:
            values += [(key, v) for v in found]
    for k in EXTENT_OPERANDS.get(name, ()):
        if k >= len(op.operands):
            continue
        owner = op.operands[k].owner
        owner = getattr(owner, "operation", owner)  # an OpView, or a Block
        if isinstance(owner, ir.Operation) and owner.name == "stablehlo.constant":
            found = _attr_ints(owner.attributes["value"])
            values += [(f"operand {k}", v) for v in found or ()]
    if not values:
        return
    scale = _largest_dim(op) + 1
    for label, v in values:
        if abs(v) * scale > EXTENT_PRODUCT_LIMIT:
            raise ModuleContractError(
                f"{where(op, origin)}: {name} has {label} = {shown(v)}, too large for XLA's int64 "
                f"extent arithmetic with dimensions up to {scale - 1} (|value| x (largest "
                f"dimension + 1) must stay within 2^58); compiling it would abort the process. "
                "The module is corrupt or crafted: export it again."
            )


def _is_bool(t: ir.Type) -> bool:
    return (
        isinstance(t, ir.RankedTensorType)
        and isinstance(t.element_type, ir.IntegerType)
        and ir.IntegerType(t.element_type).width == 1
    )


def check_bitcast(op: ir.Operation, origin: str) -> None:
    """Refuse a `bitcast_convert` between i1 and another element type: the spec leaves the
    bits of a boolean to the implementation, and XLA keeps one per byte, so for f64 ->
    tensor<64xi1> it returned an array of 8 elements under the declared shape (64,)."""
    src, dst = op.operands[0].type, op.results[0].type
    if _is_bool(src) == _is_bool(dst):
        return
    raise ModuleContractError(
        f"{where(op, origin)}: stablehlo.bitcast_convert from {src} to "
        f"{dst} reinterprets the bits of booleans, which the spec leaves to the "
        "implementation; XLA stores a boolean per byte and returns an array of another shape "
        "than the declared one, so no backend computes it. Extract the bits with "
        "shift_right_logical and and, then compare with zero"
    )


def check_op(op: ir.Operation, origin: str) -> None:
    """The contract of one op of the module (custom calls, fft, collectives, host I/O,
    extents XLA evaluates on the host)."""
    name = op.name
    if len(op.attributes) or name in EXTENT_OPERANDS:
        check_extents(op, origin)
    if name == "stablehlo.custom_call":
        check_custom_call(op, origin)
    elif name == "stablehlo.fft":
        check_fft(op, origin)
    elif name in COLLECTIVE_OPS:
        check_collective(op, origin)
    elif name == "stablehlo.bitcast_convert":
        check_bitcast(op, origin)
    elif name in HOST_IO_OPS:
        raise ModuleContractError(
            f"{where(op, origin)}: {name} waits for data from the host or another program, "
            "which never comes when juliabridge runs the module (the call would hang); "
            "export the model without host I/O"
        )
