"""MLIR snippets the module tests and the fuzzer share: JAX's own linear-algebra lowerings, the
custom calls in them as standalone modules, and type mutations."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from juliabridge.stablehlo.policy import allowed_custom_calls
from juliabridge.stablehlo.sanitize import walk
from juliabridge.support.jaxinternals import ir, make_context

L = jax.lax.linalg
ADMITTED = allowed_custom_calls()

LINALG: dict[str, Callable[[jax.Array], Any]] = {
    "lu": lambda a: L.lu(a),
    "qr_complete": lambda a: jnp.linalg.qr(a, mode="complete"),
    "qr_reduced": lambda a: jnp.linalg.qr(a),
    "cholesky": lambda a: jnp.linalg.cholesky(a),
    "svd_full": lambda a: jnp.linalg.svd(a, full_matrices=True),
    "svd_reduced": lambda a: jnp.linalg.svd(a, full_matrices=False),
    "svd_values": lambda a: jnp.linalg.svd(a, compute_uv=False),
    "svd_qr": lambda a: L.svd(a, full_matrices=False, algorithm=L.SvdAlgorithm.QR),
    "eigh": lambda a: jnp.linalg.eigh(a),
    "eig": lambda a: jnp.linalg.eig(a),
    "schur": lambda a: jax.scipy.linalg.schur(a),
    "hessenberg": lambda a: jax.scipy.linalg.hessenberg(a),
    "tridiagonal": lambda a: L.tridiagonal(a),
    "trsm_right": lambda a: L.triangular_solve(a, a[..., :2, :], left_side=False, lower=True),
    "trsm_left": lambda a: L.triangular_solve(
        a, a[..., :2], left_side=True, lower=False, transpose_a=True
    ),
    "gtsv": lambda a: L.tridiagonal_solve(a[..., 0, :], a[..., 1, :], a[..., 2, :], a[..., :2]),
    "householder": lambda a: L.householder_product(a, a[..., 0, : min(a.shape[-2:])]),
}
SQUARE_ONLY = {"cholesky", "eigh", "eig", "schur", "hessenberg", "tridiagonal", "trsm_right"}
SQUARE_ONLY |= {"trsm_left", "gtsv"}
SHAPES = [(4, 4), (2, 3, 3), (5, 3), (3, 5)]
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def lowered(name: str, shape: tuple[int, ...], dtype: Any, platform: str) -> str | None:
    f = LINALG[name]
    if name in SQUARE_ONLY and shape[-1] != shape[-2]:
        return None
    if name == "householder" and shape[-2] < shape[-1]:
        return None
    spec = jax.ShapeDtypeStruct(shape, dtype)
    with jax.enable_x64(True):
        try:
            if platform == "cpu":
                return str(jax.jit(f).lower(spec).as_text())
            exp = jax.export.export(jax.jit(f), platforms=[platform])(spec)
            return str(exp.mlir_module())
        except (NotImplementedError, ValueError):  # e.g. eig, schur on GPU: not exportable
            return None


def lowerings(platform: str, dtypes: list[Any]) -> list[tuple[str, str]]:
    out = []
    for name in LINALG:
        for shape in SHAPES:
            for dtype in dtypes:
                text = lowered(name, shape, dtype, platform)
                if text is None or "custom_call" not in text:
                    continue
                targets = set(re.findall(r"custom_call @([\w$.]+)", text))
                if targets <= ADMITTED:  # e.g. lapack_?gesvd_ffi is not on jax.export's list
                    out.append((f"{name} {shape} {np.dtype(dtype).name}", text))
    return out


def custom_calls(text: str) -> list[dict[str, Any]]:
    """Every custom call of a module: target, operand and result types, printed attributes."""
    out = []
    with make_context(allow_unregistered=True):
        module = ir.Module.parse(text)
        for op in walk(module.operation):
            if op.name != "stablehlo.custom_call":
                continue
            attrs = {
                op.attributes[i].name: str(op.attributes[i].attr)
                for i in range(len(op.attributes))
                if op.attributes[i].name not in ("call_target_name", "sdy.sharding_rule")
            }
            out.append(
                {
                    "target": ir.StringAttr(op.attributes["call_target_name"]).value,
                    "ins": [str(v.type) for v in op.operands],
                    "outs": [str(r.type) for r in op.results],
                    "attrs": attrs,
                }
            )
    return out


def standalone(call: dict[str, Any]) -> str:
    """A module whose @main is just `call` (its results returned)."""
    ins, outs = call["ins"], call["outs"]
    attrs = ", ".join(f"{k} = {v}" for k, v in call["attrs"].items())
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(ins))
    res = "%r" if len(outs) == 1 else f"%r:{len(outs)}"
    refs = ["%r"] if len(outs) == 1 else [f"%r#{i}" for i in range(len(outs))]
    return (
        f"module {{\n  func.func @main({args}) -> ({', '.join(outs)}) {{\n"
        f"    {res} = stablehlo.custom_call @{call['target']}"
        f"({', '.join(f'%a{i}' for i in range(len(ins)))}) {{{attrs}}} : "
        f"({', '.join(ins)}) -> ({', '.join(outs)})\n"
        f"    return {', '.join(refs)} : {', '.join(outs)}\n  }}\n}}\n"
    )


def mutations(t: str) -> list[str]:
    """Other tensor types: one dim smaller or larger, one more dim, another element type."""
    m = re.fullmatch(r"tensor<((?:\d+x)*)(.+)>", t)
    assert m, t
    dims = [int(d) for d in m.group(1).split("x") if d]
    et = m.group(2)

    def mk(ds: list[int], e: str = et) -> str:
        return f"tensor<{''.join(f'{d}x' for d in ds)}{e}>"

    out = [mk([*dims, 2])]
    if dims:
        out += [mk([dims[0] + 1, *dims[1:]])]
        if dims[-1] > 1:
            out += [mk([*dims[:-1], dims[-1] - 1])]
    other = {"f32": "f64", "f64": "f32", "i32": "i64", "complex<f32>": "complex<f64>"}
    other["complex<f64>"] = "f64"
    out.append(mk(dims, other.get(et, "f32")))
    return out
