"""Generators of the differential harness for the numeric families the interpreter cannot run
(or cannot run across @main): complex element types, CHLO, fft, batch_norm and the LAPACK
custom calls. Each family draws a `RefCase`, which tests/lax/test_differential.py runs like
any `differential.Case` and which adds:

- an independent reference written from the defining formulas (numpy / scipy), checked
  against lax's results within a bound the case states (`reference`);
- where the results are unique only up to an implementation's choice (the order of a sum in
  fft, the sign or phase of a singular or eigen vector), its own comparison with XLA
  (`compare`) instead of the per-element ulp distance;
- `xla = False` where XLA cannot run the form (it then has the reference alone), and
  `trust = True` where the xla backend needs it (targets off jax.export's stable list).

Complex values cannot cross the interpreter's @main, so the complex family's modules take and
return real tensors and build / decompose the complex values inside (stablehlo.complex, real,
imag); the interpreter checks those too. It aborts on CHLO, batch_norm_* and custom calls:
those families have XLA and the reference only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import ml_dtypes
import numpy as np
import scipy.special as sp
from hypothesis import strategies as st

from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from ._elementwise_util import cplx, module
from .differential import Case, array_of, disagreement, features_of

#: Results an oracle is compared with: a problem, or None.
Check = Callable[[Sequence[np.ndarray]], "str | None"]


@dataclass
class RefCase(Case):
    """A Case with an independent reference and, where needed, its own XLA comparison."""

    #: lax's results -> a problem with them against the defining formulas, or None.
    reference: Callable[[Sequence[np.ndarray]], str | None] | None = None
    #: (lax's results, an oracle's) -> a problem, or None; None: the per-element ulp bound.
    compare: Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], str | None] | None = None
    #: XLA can run this form.
    xla: bool = True
    #: the xla backend needs trust=True (a custom-call target off jax.export's stable list).
    trust: bool = False
    #: jax.vmap of the lifted module is compared with per-sample calls.
    vmap: bool = True


def _tensor(shape: Sequence[int], t: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + t + ">"


def within(
    got: np.ndarray, want: np.ndarray, atol: float | np.ndarray, rtol: float, what: str
) -> str | None:
    """|got - want| <= atol + rtol |want| elementwise (complex as a whole); NaN where NaN,
    infinities equal; a problem, or None."""
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return f"{what}: shape {g.shape} vs {w.shape}"
    wide = np.complex128 if np.iscomplexobj(g) or np.iscomplexobj(w) else np.float64
    g, w = g.astype(wide), w.astype(wide)
    gn, wn = np.isnan(g), np.isnan(w)
    if (gn != wn).any():
        return f"{what}: NaN placement {g.tolist()} vs {w.tolist()}"
    inf = np.isinf(g) | np.isinf(w)
    if (g[inf & ~gn] != w[inf & ~gn]).any():
        return f"{what}: infinities {g.tolist()} vs {w.tolist()}"
    bound = np.broadcast_to(np.asarray(atol, np.float64), g.shape)  # a scalar or per element
    with np.errstate(invalid="ignore", over="ignore"):
        ok = gn | inf | (np.abs(g - w) <= bound + rtol * np.abs(w))
    if not ok.all():
        k = int(np.argmin(ok.reshape(-1)))
        return (f"{what}: {g.reshape(-1)[k]} vs {w.reshape(-1)[k]} at {k} beyond "
                f"{bound.reshape(-1)[k]:.3g} + {rtol:.3g}|want|")  # fmt: skip
    return None


def ulps_of(want: Sequence[np.ndarray], ulps: int) -> Check:
    """A reference check: lax's results within `ulps` of `want`, result by result."""

    def check(got: Sequence[np.ndarray]) -> str | None:
        for k, (g, w) in enumerate(zip(got, want)):
            why = disagreement(np.asarray(g), np.asarray(w).astype(np.asarray(g).dtype), ulps)
            if why:
                return f"result {k}: {why}"
        return None

    return check


# --- complex element types ------------------------------------------------------------------

PARTS = {"complex<f32>": "f32", "complex<f64>": "f64"}
N = 6
#: complex -> complex ops (spec.md: each defined on complex operands).
COMPLEX_UNARY = ("negate", "sqrt", "rsqrt", "exponential", "exponential_minus_one", "log",
                 "log_plus_one", "logistic", "sign", "sine", "cosine", "tan", "tanh")  # fmt: skip
COMPLEX_BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum")
#: Ops the complex family draws (the op under test; stablehlo.complex/real/imag frame them).
COMPLEX_OPS = (*COMPLEX_UNARY, *COMPLEX_BINARY, "abs", "compare", "clamp", "convert", "complex",
               "real", "imag")  # fmt: skip
#: complex arithmetic whose result the interpreter (C++ std::complex) and XLA compute with
#: different formulas: compared with the interpreter only on finite, moderate operands.
_FORMULA_OPS = frozenset(COMPLEX_UNARY) - {"negate"} | {"divide", "power", "abs"}


def _parts(draw: Any, part: str, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """Real and imaginary parts, each mostly edge values (signed zeros, inf, NaN, extremes,
    denormals) so either part carries them, in every combination."""
    return array_of(draw, part, n), array_of(draw, part, n)


def _complex_features(t: str, parts: Sequence[np.ndarray]) -> set[str]:
    feats = features_of(parts) | {"complex", t}
    big = any((np.abs(p.astype(np.float64)) > 1e4).any() for p in parts)
    tiny = any(((p != 0) & (np.abs(p.astype(np.float64)) < 1e-4)).any() for p in parts)
    return feats | ({"huge"} if big else set()) | ({"tiny"} if tiny else set())


def _underflows(op: str, args: Sequence[np.ndarray]) -> bool:
    """Whether numpy's result of the complex op has a denormal part (XLA flushes those)."""
    from . import test_elementwise as te

    fns = {**te.UNARY_COMPLEX, **te.BINARY_COMPLEX, "abs": np.abs}
    zs = [cplx(a, b) for a, b in zip(args[::2], args[1::2])]
    with np.errstate(all="ignore"):
        w = np.asarray(fns[op](*zs)).astype(
            np.complex64 if args[0].dtype == np.float32 else np.complex128
        )
    tiny = float(ml_dtypes.finfo(args[0].dtype).tiny)
    parts = np.concatenate([np.abs(w.real), np.abs(w.imag)])
    return bool(((parts > 0) & (parts < tiny)).any())


def _moderate(parts: Sequence[np.ndarray]) -> bool:
    """Every part finite, nonzero-or-zero, and between 1e-4 and 1e4 in magnitude (or 0)."""
    w = np.concatenate([p.astype(np.float64).reshape(-1) for p in parts])
    return bool(
        np.isfinite(w).all() and ((w == 0) | ((np.abs(w) > 1e-4) & (np.abs(w) < 1e4))).all()
    )


@st.composite
def complex_case(draw: Any) -> Case:
    """One op on complex<f32>/complex<f64> values built inside @main from real parts; results
    leave as their real and imaginary parts (or as Booleans, or real values)."""
    t = draw(st.sampled_from(sorted(PARTS)))
    part = PARTS[t]
    op = draw(st.sampled_from(COMPLEX_OPS))
    ct, pt, bt = f"tensor<{N}x{t}>", f"tensor<{N}x{part}>", f"tensor<{N}xi1>"
    re, im = _parts(draw, part)
    body = [f"%x = stablehlo.complex %a0, %a1 : {ct}"]
    ins, args = [pt, pt], [re, im]
    split = lambda v: [f"%re = stablehlo.real {v} : ({ct}) -> {pt}",  # noqa: E731
                       f"%im = stablehlo.imag {v} : ({ct}) -> {pt}"]  # fmt: skip
    outs = [("%re", pt), ("%im", pt)]
    feats: set[str] = set()
    interp = True
    if op in COMPLEX_UNARY:
        body += [f"%0 = stablehlo.{op} %x : {ct}", *split("%0")]
    elif op == "abs":
        body.append(f"%0 = stablehlo.abs %x : ({ct}) -> {pt}")
        outs = [("%0", pt)]
    elif op in COMPLEX_BINARY or op in ("compare", "clamp"):
        re2, im2 = _parts(draw, part)
        if draw(st.booleans()):  # equal real parts: the imaginary part decides the order
            re2 = re.copy()
        body.append(f"%y = stablehlo.complex %a2, %a3 : {ct}")
        ins, args = [pt] * 4, [re, im, re2, im2]
        if op == "compare":
            d = draw(st.sampled_from(["EQ", "NE", "LT", "LE", "GT", "GE"]))
            body.append(f"%0 = stablehlo.compare {d}, %x, %y, FLOAT : ({ct}, {ct}) -> {bt}")
            outs = [("%0", bt)]
            feats.add(f"compare-{d}")
            # The interpreter aborts its process on an ordered complex compare.
            interp = d in ("EQ", "NE")
        elif op == "clamp":
            lo, hi = ("%y", "%x") if draw(st.booleans()) else ("%x", "%y")
            re3, im3 = _parts(draw, part)
            body.append(f"%z = stablehlo.complex %a4, %a5 : {ct}")
            ins, args = [pt] * 6, [re, im, re2, im2, re3, im3]
            body += [f"%0 = stablehlo.clamp {lo}, %z, {hi} : {ct}", *split("%0")]
        else:
            body += [f"%0 = stablehlo.{op} %x, %y : {ct}", *split("%0")]
    elif op == "convert":
        other = draw(st.sampled_from(["complex<f32>", "complex<f64>", "f16", "bf16", "f32",
                                      "f64", "i1", "i8", "i32", "ui64"]))  # fmt: skip
        if draw(st.booleans()) or other.startswith("complex"):  # from complex
            ot = _tensor((N,), other)
            body.append(f"%0 = stablehlo.convert %x : ({ct}) -> {ot}")
            if other.startswith("complex"):
                op_t = _tensor((N,), PARTS[other])
                body += [f"%re = stablehlo.real %0 : ({ot}) -> {op_t}",
                         f"%im = stablehlo.imag %0 : ({ot}) -> {op_t}"]  # fmt: skip
                outs = [("%re", op_t), ("%im", op_t)]
            else:
                outs = [("%0", ot)]
            feats.add(f"to-{other}")
        else:  # to complex, from a real type
            src = other
            xt = _tensor((N,), src)
            x = array_of(draw, src, N)
            body = [f"%0 = stablehlo.convert %a0 : ({xt}) -> {ct}", *split("%0")]
            ins, args = [xt], [x]
            feats |= {f"from-{src}"}
            # bf16 to complex: the interpreter takes no bf16 argument (interpretable()).
    elif op == "complex":
        body += split("%x")  # complex, then both parts back: identity on every bit
    else:  # real / imag of a value computed inside (so the op reads a live complex value)
        body += [f"%n = stablehlo.negate %x : {ct}",
                 f"%0 = stablehlo.{op} %n : ({ct}) -> {pt}"]  # fmt: skip
        outs = [("%0", pt)]
    feats |= _complex_features(t, [a for a in args if a.dtype.kind == "f" or a.dtype.kind == "V"])
    if op in _FORMULA_OPS and _underflows(op, args):
        feats.add("denormal")  # a denormal result part, which XLA flushes to zero
    text = module(ins, body, outs)
    return RefCase("complex", op, text, args, feats, interpret=interp)


# --- CHLO -----------------------------------------------------------------------------------

#: The reference's bound per float type, as (rtol, atol): |lax - ref| <= atol + rtol |ref|,
#: ref computed in f64 (scipy/numpy) and rounded to the type. f16/bf16: XLA computes in f32
#: and rounds, so 2 ulp; f32: its polynomial approximations, 64 ulp; f64: 1e-11, as
#: tests/lax/test_chlo.py (XLA's f64 lgamma/digamma/erf_inv are ~1e-12 off scipy's).
REF_BOUND = {
    "f16": (2.0**-9, 2.0**-14),
    "bf16": (2.0**-6, 2.0**-14),
    "f32": (2.0**-17, 2.0**-20),
    "f64": (1e-11, 1e-13),
}


def _ref_check(want: Sequence[np.ndarray], t: str | None = None) -> Check:
    """lax's results against `want`: exact for integers/Booleans, REF_BOUND for floats."""

    def check(got: Sequence[np.ndarray]) -> str | None:
        for k, (g, w) in enumerate(zip(got, want)):
            g, w = np.asarray(g), np.asarray(w)
            if g.dtype.kind in "biu":
                if g.shape != w.shape or not np.array_equal(g, w.astype(g.dtype)):
                    return f"result {k}: {g.tolist()} vs {w.tolist()}"
                continue
            rtol, atol = REF_BOUND[t or _name(g.dtype)]
            why = within(g, w, atol, rtol, f"result {k}")
            if why:
                return why
        return None

    return check


def _name(d: np.dtype) -> str:
    if d.kind == "c":
        return "f32" if d == np.complex64 else "f64"
    return next(k for k, v in ELEMENT_TYPES.items() if v == d)


def _rounded(f: Callable[..., np.ndarray], *xs: np.ndarray, to: np.dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        wide = f(*(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64) for x in xs))
        return np.asarray(wide).astype(to)


@functools.cache
def _chlo_refs() -> dict[str, Any]:
    from . import test_chlo as tc

    return {"unary": tc.UNARY_REAL, "complex": tc.UNARY_COMPLEX, "pred": tc.PREDICATES,
            "top_k": tc._top_k_ref, "mulhi": tc._mulhi_ref, "groups": tc._groups}  # fmt: skip


CHLO_UNARY = ("acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i1e", "cosh",
              "digamma", "erf", "erf_inv", "erfc", "lgamma", "sinh", "square", "tan",
              "conj")  # fmt: skip
CHLO_COMPLEX = ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "square",
                "tan", "conj")  # fmt: skip
CHLO_PRED = ("is_inf", "is_pos_inf", "is_neg_inf")
BROADCAST_FLOAT = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
                   "divide": np.divide, "remainder": np.fmod, "power": np.power,
                   "maximum": np.maximum, "minimum": np.minimum, "atan2": np.arctan2}  # fmt: skip
BROADCAST_INT = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
                 "and", "or", "xor", "shift_left", "shift_right_logical",
                 "shift_right_arithmetic")  # fmt: skip
BROADCAST_SPECIAL = ("next_after", "polygamma", "zeta")
CHLO_OPS = (*CHLO_UNARY, *CHLO_PRED, *BROADCAST_SPECIAL, "mulhi", "top_k", "constant",
            "constant_like", "ragged_dot",
            *(f"broadcast_{op}" for op in (*BROADCAST_FLOAT, *BROADCAST_INT, *BROADCAST_SPECIAL,
                                           "compare", "select", "complex")))  # fmt: skip
#: Every CHLO case leaves the interpreter out: it aborts its process on any chlo op.
_CHLO = {"interpret": False}


def _special_ref(op: str, x: np.ndarray) -> np.ndarray:
    return _rounded(_chlo_refs()["unary"][op], x, to=x.dtype)


@st.composite
def chlo_unary_case(draw: Any) -> Case:
    """A CHLO elementwise function of one operand (real floats of every width with edge
    values, or complex values built inside), and the is_inf predicates."""
    kind = draw(st.sampled_from(["real", "real", "complex", "pred"]))
    if kind == "complex":
        t = draw(st.sampled_from(sorted(PARTS)))
        part, op = PARTS[t], draw(st.sampled_from(CHLO_COMPLEX))
        ct, pt = f"tensor<{N}x{t}>", f"tensor<{N}x{part}>"
        if draw(st.booleans()):
            re, im = _parts(draw, part)
        else:  # moderate values, where numpy's branch cuts and XLA's agree
            vals = st.floats(-3, 3, width=32, allow_subnormal=False)
            re, im = (np.array(draw(st.lists(vals, min_size=N, max_size=N)), ELEMENT_TYPES[part])
                      for _ in range(2))  # fmt: skip
        body = [f"%x = stablehlo.complex %a0, %a1 : {ct}", f"%0 = chlo.{op} %x : {ct} -> {ct}",
                f"%re = stablehlo.real %0 : ({ct}) -> {pt}",
                f"%im = stablehlo.imag %0 : ({ct}) -> {pt}"]  # fmt: skip
        text = module([pt, pt], body, [("%re", pt), ("%im", pt)])
        ref = None
        if _moderate([re, im]) and np.abs(re).max() <= 3 and np.abs(im).max() <= 3:
            z = cplx(re, im)
            w = _rounded(_chlo_refs()["complex"][op], z, to=np.dtype(np.complex128))
            ref = _ref_check([w.real.astype(re.dtype), w.imag.astype(re.dtype)], part)
        return RefCase("chlo", f"chlo.{op}", text, [re, im], _complex_features(t, [re, im]), **_CHLO,
                       reference=ref)  # fmt: skip
    t = draw(st.sampled_from(("f16", "bf16", "f32", "f64")))
    x = array_of(draw, t, N)
    tt = f"tensor<{N}x{t}>"
    if kind == "pred":
        op = draw(st.sampled_from(CHLO_PRED))
        bt = f"tensor<{N}xi1>"
        text = module([tt], [f"%0 = chlo.{op} %a0 : {tt} -> {bt}"], [("%0", bt)])
        want = _chlo_refs()["pred"][op](x.astype(np.float64))
        return RefCase("chlo", f"chlo.{op}", text, [x], features_of([x]), **_CHLO,
                       reference=_ref_check([want]))  # fmt: skip
    op = draw(st.sampled_from(CHLO_UNARY))
    text = module([tt], [f"%0 = chlo.{op} %a0 : {tt} -> {tt}"], [("%0", tt)])
    want = _special_ref(op, x)
    feats = features_of([x])
    w = np.abs(_rounded(_chlo_refs()["unary"][op], x, to=np.dtype(np.float64)))
    if ((w < float(ml_dtypes.finfo(ELEMENT_TYPES[t]).tiny)) & (w > 0)).any() or (w == 0).any():
        feats.add("tiny-result")  # exactly 0 or below the smallest normal of the type
    if op == "lgamma" and (np.isfinite(x) & (x.astype(np.float64) < 0)).any():
        feats.add("negative-argument")  # the reflection formula: JAX's and XLA's differ
    return RefCase("chlo", f"chlo.{op}", text, [x], feats, **_CHLO,
                   reference=_ref_check([want]))  # fmt: skip


def _broadcast_shapes(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(result, lhs, rhs): numpy-style broadcasting; each operand a suffix of the result
    with some dimensions of size 1."""
    out = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))

    def operand() -> tuple[int, ...]:
        k = draw(st.integers(0, len(out)))
        return tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in out[len(out) - k :])

    lhs, rhs = operand(), operand()
    return tuple(np.broadcast_shapes(lhs, rhs)), lhs, rhs


def _special_binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op == "next_after":  # numpy's nextafter on the f32/f64 values themselves
        return np.nextafter(*np.broadcast_arrays(a, b))
    f = (lambda n, x: sp.polygamma(n, x)) if op == "polygamma" else sp.zeta
    return _rounded(f, a, b, to=a.dtype)


def _broadcast_ref(
    kind: str, op: str, a: np.ndarray, b: np.ndarray, out: tuple[int, ...]
) -> list[np.ndarray]:
    """numpy's result of chlo.broadcast_`op` (`a` shaped for numpy's broadcasting)."""
    from ._elementwise_util import int_ref

    if kind == "float":
        return [_rounded(BROADCAST_FLOAT[op], a, b, to=a.dtype)]
    if kind == "int":
        aa, bb = (np.broadcast_to(v, out).reshape(-1) for v in (a, b))
        return [int_ref(op, aa, bb).reshape(out)]
    if kind == "special":
        return [np.broadcast_to(_special_binary(op, a, b), out)]
    return [np.broadcast_to(a, out), np.broadcast_to(b, out)]  # complex: the parts


@st.composite
def chlo_broadcast_case(draw: Any) -> Case:
    """chlo.broadcast_* on operands of broadcast shapes (numpy-style, or through explicit
    broadcast_dimensions), the element types each op takes; next_after, polygamma, zeta and
    their broadcast forms; the numpy reference broadcasts the same way."""
    kind = draw(st.sampled_from(["float", "float", "int", "special", "compare", "select",
                                 "complex"]))  # fmt: skip
    out, ls, rs = _broadcast_shapes(draw)
    types = {"float": ("f32", "f64", "f16", "bf16"), "int": ("i8", "i32", "i64", "ui8", "ui32"),
             "special": ("f32", "f64"), "compare": ("f32", "f64", "i32", "ui8", "i1"),
             "complex": ("f32", "f64"), "select": ("f32", "i32", "bf16")}[kind]  # fmt: skip
    t = draw(st.sampled_from(types))
    a, b = (array_of(draw, t, int(np.prod(s))).reshape(s) for s in (ls, rs))
    if kind == "select":  # pred, on_true, on_false all broadcast; XLA cannot legalize it
        p = array_of(draw, "i1", a.size).reshape(ls)
        c = array_of(draw, t, 1).reshape(())
        out = tuple(np.broadcast_shapes(ls, rs))
        ins = [_tensor(ls, "i1"), _tensor(rs, t), _tensor((), t)]
        line = (f"%0 = chlo.broadcast_select %a0, %a1, %a2 : ({', '.join(ins)}) -> "
                f"{_tensor(out, t)}")  # fmt: skip
        text = module(ins, [line], [("%0", _tensor(out, t))])
        return RefCase("chlo", "chlo.broadcast_select", text, [p, b, c], features_of([b, c]),
                       **_CHLO, reference=_ref_check([np.where(p, b, c)]), xla=False)  # fmt: skip
    op = {"float": lambda: draw(st.sampled_from(sorted(BROADCAST_FLOAT))),
          "int": lambda: draw(st.sampled_from(BROADCAST_INT)),
          "special": lambda: draw(st.sampled_from(BROADCAST_SPECIAL)),
          "compare": lambda: draw(st.sampled_from(["EQ", "NE", "LT", "LE", "GT", "GE"])),
          "complex": lambda: "complex"}[kind]()  # fmt: skip
    if op == "polygamma":  # the order: a small non-negative integer (else NaN), or NaN
        orders = st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0, np.nan])
        a = np.array(draw(st.lists(orders, min_size=a.size, max_size=a.size)), a.dtype)
        a = a.reshape(ls)
    attrs, xla, feats = "", True, set()
    a_np = a  # `a` as numpy broadcasts it to the result
    if (
        kind not in ("compare",)
        and len(ls) < len(out)
        and len(ls) <= len(rs)
        and (draw(st.integers(0, 2)) == 0)
    ):
        # explicit broadcast_dimensions for the lower-rank operand: the trailing ones (XLA
        # legalizes that) or another increasing choice (XLA refuses: the reference alone)
        choice = sorted(draw(st.permutations(range(len(out))))[: len(ls)])
        if all(ls[i] in (1, out[d]) for i, d in enumerate(choice)):
            attrs = f" {{broadcast_dimensions = array<i64{': ' if choice else ''}{', '.join(map(str, choice))}>}}"
            xla = choice == list(range(len(out) - len(ls), len(out)))
            a_np = a.reshape([ls[choice.index(d)] if d in choice else 1 for d in range(len(out))])
            feats.add("broadcast-dimensions")
    if kind == "compare":
        ctype = {"f": "FLOAT", "i": "SIGNED"}.get(a.dtype.kind, "UNSIGNED")
        attrs = (f" {{comparison_direction = #chlo<comparison_direction {op}>, "
                 f"compare_type = #chlo<comparison_type {ctype}>}}")  # fmt: skip
        fn = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
              "GT": np.greater, "GE": np.greater_equal}[op]  # fmt: skip
        with np.errstate(invalid="ignore"):
            want = [fn(a, b)]
        name, ot = "broadcast_compare", _tensor(out, "i1")
    else:
        want = _broadcast_ref(kind, op, a_np, b, out)
        same = ls == rs == out and kind == "special"
        name = op if same and draw(st.booleans()) else f"broadcast_{op}"
        ot = _tensor(out, f"complex<{t}>" if kind == "complex" else t)
    lt, rt = _tensor(ls, t), _tensor(rs, t)
    body = [f'%0 = "chlo.{name}"(%a0, %a1){attrs} : ({lt}, {rt}) -> {ot}']
    outs = [("%0", ot)]
    if kind == "complex":
        pt = _tensor(out, t)
        body += [f"%re = stablehlo.real %0 : ({ot}) -> {pt}",
                 f"%im = stablehlo.imag %0 : ({ot}) -> {pt}"]  # fmt: skip
        outs = [("%re", pt), ("%im", pt)]
    if name == "next_after" or name == "broadcast_next_after":
        # next_after is exact: the bits, not a bound (numpy has no bf16 nextafter)
        ref = ulps_of(want, 0)
    else:
        ref = _ref_check(want)
    feats |= features_of([a, b]) | {f"{t}"}
    if "polygamma" in name and ((b <= 0) & (b == np.floor(b))).any():
        feats.add("polygamma-pole")  # x a non-positive integer (or a zero)
    if "zeta" in name and ((a <= 1).any() or (b <= 0).any()):
        feats.add("zeta-pole-region")  # s <= 1 or q <= 0: the series diverges
    return RefCase("chlo", f"chlo.{name}", module([lt, rt], body, outs), [a, b], feats, **_CHLO,
                   reference=ref, xla=xla)  # fmt: skip


@st.composite
def chlo_misc_case(draw: Any) -> Case:
    """mulhi (every integer width), top_k (ties, NaN, signed zeros, k from 0 to the whole
    row), constant / constant_like (edge values), ragged_dot (groups that leave rows out)."""
    op = draw(st.sampled_from(["mulhi", "top_k", "top_k", "constant", "constant_like",
                               "ragged_dot"]))  # fmt: skip
    if op == "mulhi":
        t = draw(st.sampled_from(("i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64")))
        a, b = array_of(draw, t, N), array_of(draw, t, N)
        tt = f"tensor<{N}x{t}>"
        text = module([tt, tt], [f"%0 = chlo.mulhi %a0, %a1 : {tt}, {tt} -> {tt}"], [("%0", tt)])
        want = [_chlo_refs()["mulhi"](a, b)]
        return RefCase("chlo", f"chlo.{op}", text, [a, b], features_of([a, b]), **_CHLO,
                       reference=_ref_check(want))  # fmt: skip
    if op == "top_k":
        t = draw(st.sampled_from(("f32", "f64", "bf16", "i32", "ui8")))
        shape = draw(st.sampled_from([(5,), (2, 4), (2, 1, 6)]))
        x = array_of(draw, t, int(np.prod(shape))).reshape(shape)
        if draw(st.booleans()):  # ties
            x.reshape(-1)[: x.size // 2] = x.reshape(-1)[-1]
        k = draw(st.integers(0, shape[-1]))
        it = "i32"  # chlo.top_k's indices are i32
        xt, vt = _tensor(shape, t), _tensor((*shape[:-1], k), t)
        idx_t = _tensor((*shape[:-1], k), it)
        text = module([xt], [f"%0:2 = chlo.top_k(%a0, k = {k}) : {xt} -> ({vt}, {idx_t})"],
                      [("%0#0", vt), ("%0#1", idx_t)])  # fmt: skip
        values, idx = _chlo_refs()["top_k"](x, k) if k else (x[..., :0], x[..., :0])
        want = [values, idx.astype(ELEMENT_TYPES[it])]
        feats = features_of([x]) | ({"ties"} if len(np.unique(x)) < x.size else set())
        return RefCase("chlo", f"chlo.{op}", text, [x], feats, **_CHLO, reference=ulps_of(want, 0))
    if op in ("constant", "constant_like"):
        t = draw(st.sampled_from(("f32", "f64", "f16", "i32", "ui8", "i1")))
        tt = f"tensor<{N}x{t}>"
        if op == "constant":
            v = array_of(draw, t, N)
            hexed = (v.astype(np.uint8) if t == "i1" else v).tobytes().hex().upper()
            body = [f'%c = chlo.constant dense<"0x{hexed}"> : {tt}']
        else:
            v = np.broadcast_to(array_of(draw, t, 1), (N,)).copy()
            lit = str(bool(v[0])).lower() if t == "i1" else (
                repr(int(v[0])) if v.dtype.kind in "iu" else f"{float(v[0]):.17e}")  # fmt: skip
            if t != "i1" and v.dtype.kind == "f" and not np.isfinite(v[0]):
                v = np.full(N, 2.5, v.dtype)  # an attribute literal has no inf/NaN spelling
                lit = "2.5"
            typed = "" if t == "i1" else f" : {t}"
            body = [f'%c = "chlo.constant_like"(%a0) {{value = {lit}{typed}}} : ({tt}) -> {tt}']
        # use the argument, so @main has one (vmap needs it) and the constant meets data
        combine = "or" if t == "i1" else "add" if v.dtype.kind in "f" else "xor"
        body.append(f"%0 = stablehlo.{combine} %c, %a0 : {tt}")
        x = array_of(draw, t, N)
        with np.errstate(invalid="ignore"):
            want = [{"or": np.logical_or, "xor": np.bitwise_xor, "add": np.add}[combine](
                v, x).astype(v.dtype)]  # fmt: skip
        return RefCase("chlo", f"chlo.{op}", module([tt], body, [("%0", tt)]), [x],
                       features_of([v, x]), **_CHLO, reference=ulps_of(want, 0))  # fmt: skip
    from .differential_structured import exact_floats

    t = draw(st.sampled_from(("f32", "f64")))
    groups = draw(st.integers(1, 3))
    sizes = np.array(draw(st.lists(st.integers(0, 3), min_size=groups, max_size=groups)), np.int64)
    m, k, n = (
        int(sizes.sum()) + draw(st.integers(0, 2)),
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
    )
    lhs = exact_floats(draw, t, (m, k), specials=False)
    rhs = exact_floats(draw, t, (groups, k, n), specials=False)
    want = np.zeros((m, n), lhs.dtype)
    for g, sl in enumerate(_chlo_refs()["groups"](sizes)):
        want[sl] = lhs[sl] @ rhs[g]
    ins = [_tensor(lhs.shape, t), _tensor(rhs.shape, t), f"tensor<{groups}xi64>"]
    dims = ("lhs_batching_dimensions = [], rhs_batching_dimensions = [], "
            "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], "
            "lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]")  # fmt: skip
    ot = _tensor((m, n), t)
    line = (f'%0 = "chlo.ragged_dot"(%a0, %a1, %a2) {{ragged_dot_dimension_numbers = '
            f"#chlo.ragged_dot<{dims}>, precision_config = [#chlo<precision DEFAULT>, "
            f"#chlo<precision DEFAULT>]}} : ({', '.join(ins)}) -> {ot}")  # fmt: skip
    # XLA:CPU has no ragged-dot ("not supported by XLA:CPU ThunkEmitter"): numpy alone; the
    # data are small multiples of 1/2, so the products are exact (rows in no group are zeros,
    # of either sign: lax multiplies them by a zero mask).
    return RefCase("chlo", f"chlo.{op}", module(ins, [line], [("%0", ot)]), [lhs, rhs, sizes],
                   {t, "ragged"}, **_CHLO, reference=_ref_check([want]), xla=False,
                   vmap=False)  # JAX: "ragged_dot vmap over any dim but 0 - NYI" (a typed error)  # fmt: skip


# --- fft --------------------------------------------------------------------------------------

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
#: Bound constant of the fft error bound (see fft_bound).
FFT_C = 8


def fft_bound(x: np.ndarray, kind: str, lengths: Sequence[int], eps: float) -> np.ndarray:
    """The error bound per output element: FFT_C · ε · (1 + log2 n) · √n · ‖x‖₂, with ‖x‖₂
    the 2-norm of the transformed slice (per batch element), n = prod(fft_length), and a
    factor 1/n for the inverse transforms. A floating-point FFT has ‖ŷ − y‖₂ ≤ c·ε·log2(n)·‖y‖₂
    whatever order it sums in (the spec leaves it open), and ‖y‖₂ = √n ‖x‖₂ (Parseval), so
    no element of ŷ − y exceeds it. IRFFT reads a half spectrum: its norm counts twice."""
    axes = tuple(range(-len(lengths), 0))
    n = int(np.prod(lengths))
    norm = np.sqrt(np.sum(np.abs(x.astype(np.complex128)) ** 2, axis=axes, keepdims=True))
    norm = norm * (2 if kind == "IRFFT" else 1) / (n if kind in ("IFFT", "IRFFT") else 1)
    return FFT_C * eps * (1 + np.log2(max(n, 1))) * np.sqrt(n) * norm


def _fft_compare(bound: np.ndarray, what: str) -> Callable[..., str | None]:
    """Result parts within `bound` of the other side's, elementwise; non-finite where it is."""

    def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str | None:
        if len(got) != len(want):
            return f"{len(got)} results vs {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            g, w = np.asarray(g).astype(np.float64), np.asarray(w).astype(np.float64)
            if g.shape != w.shape:
                return f"result {k}: shape {g.shape} vs {w.shape}"
            if (np.isfinite(g) != np.isfinite(w)).any():
                return f"result {k}: non-finite placement {g.tolist()} vs {w.tolist()}"
            fin = np.isfinite(w)
            with np.errstate(invalid="ignore"):
                err = np.where(fin, np.abs(np.where(fin, g - w, 0)), 0)
            b = np.broadcast_to(bound, g.shape)
            if (err > b).any():
                i = int(np.argmax((err - b).reshape(-1)))
                return (f"result {k}: {what} error {err.reshape(-1)[i]:.3g} beyond the bound "
                        f"{b.reshape(-1)[i]:.3g} (elements {g.reshape(-1)[i]} vs {w.reshape(-1)[i]})")  # fmt: skip
        return None

    return compare


@st.composite
def fft_case(draw: Any) -> Case:
    """FFT, IFFT, RFFT, IRFFT over 1-3 trailing dims (lengths 1-6, odd and even), 0-2 batch
    dims, f32/f64; data random at a drawn scale (2^-60 ... 2^60), zeros of either sign, and
    now and then an infinity or NaN. Complex operands are built inside @main from real
    parts and results leave as parts; even so jaxlib's interpreter aborts its process on
    every fft (length 1 included), so XLA and numpy.fft are the oracles."""
    kind = draw(st.sampled_from(FFT_TYPES))
    part = draw(st.sampled_from(("f32", "f64")))
    ndim = draw(st.integers(1, 3))
    lengths = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    in_tail = (*lengths[:-1], lengths[-1] // 2 + 1) if kind == "IRFFT" else lengths
    out_tail = (*lengths[:-1], lengths[-1] // 2 + 1) if kind == "RFFT" else lengths
    shape, out_shape = (*batch, *in_tail), (*batch, *out_tail)
    dt = ELEMENT_TYPES[part]
    scale = 2.0 ** draw(st.sampled_from([0, 0, -60, 60, -20]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    re, im = (rng.standard_normal(shape) * scale for _ in range(2))
    feats = {part, kind, f"fft-{ndim}d"}
    special = draw(st.sampled_from([None, None, None, 0.0, -0.0, np.inf, np.nan]))
    if special is not None:
        flat = re.reshape(-1)
        flat[draw(st.integers(0, flat.size - 1))] = special
        if special == 0.0 and draw(st.booleans()):
            re[...] = special  # all zeros (of that sign)
            im[...] = -0.0
        feats.add("nonfinite" if not np.isfinite(special) else "zeros")
    re, im = re.astype(dt), im.astype(dt)
    ct, pt = f"complex<{part}>", part
    ls = ", ".join(map(str, lengths))
    real_in = kind == "RFFT"
    real_out = kind == "IRFFT"
    it_c, it_p = _tensor(shape, ct), _tensor(shape, pt)
    ot = _tensor(out_shape, pt if real_out else ct)
    op_p = _tensor(out_shape, pt)
    body, ins, args = [], [it_p], [re]
    src = "%a0"
    if not real_in:
        body.append(f"%x = stablehlo.complex %a0, %a1 : {it_c}")
        ins, args, src = [it_p, it_p], [re, im], "%x"
    body.append(f"%0 = stablehlo.fft {src}, type = {kind}, length = [{ls}] : "
                f"({it_p if real_in else it_c}) -> {ot}")  # fmt: skip
    if real_out:
        outs = [("%0", op_p)]
    else:
        body += [f"%re = stablehlo.real %0 : ({ot}) -> {op_p}",
                 f"%im = stablehlo.imag %0 : ({ot}) -> {op_p}"]  # fmt: skip
        outs = [("%re", op_p), ("%im", op_p)]
    x = re.astype(np.float64) if real_in else cplx(re, im)
    from .test_fft import numpy_fft

    with np.errstate(all="ignore"):
        y = numpy_fft(kind, x, lengths)
    eps = float(np.finfo(dt).eps)
    bound = fft_bound(x, kind, lengths, eps)
    with np.errstate(invalid="ignore"):
        want = [y] if real_out else [y.real, y.imag]
    compare = _fft_compare(bound, "fft")
    ref_compare = _fft_compare(bound, "fft vs numpy.fft")
    return RefCase("fft", "fft", module(ins, body, outs), args, feats, interpret=False,
                   reference=lambda got: ref_compare(got, want), compare=compare)  # fmt: skip


# --- batch_norm ---------------------------------------------------------------------------------

BN_OPS = ("batch_norm_training", "batch_norm_inference", "batch_norm_grad")
#: Bound constant of the batch_norm bound (see _bn_bound).
BN_C = 8


def _bn_setup(
    args: Sequence[np.ndarray], fi: int, eps: float
) -> tuple[list[np.ndarray], tuple[int, ...], Callable[[np.ndarray], np.ndarray], float]:
    """The arguments in f64, the reduced axes, a per-feature broadcast and epsilon (an f32
    attribute, converted to the operand's type as the spec says)."""
    w = [a.astype(np.float64) for a in args]
    x = w[0]
    axes = tuple(d for d in range(x.ndim) if d != fi)
    shape = [1] * x.ndim
    shape[fi] = x.shape[fi]
    eps = float(np.array(float(np.float32(eps))).astype(args[0].dtype))
    return w, axes, lambda v: v.reshape(shape), eps


def _bn_reference(op: str, args: Sequence[np.ndarray], fi: int, eps: float) -> list[np.ndarray]:
    """spec.md#batch_norm_*'s defining formulas in f64: mean and biased variance over every
    dimension but `fi`; grad is the spec's closed form."""
    w, axes, b, eps = _bn_setup(args, fi, eps)
    x = w[0]
    with np.errstate(all="ignore"):
        if op == "batch_norm_inference":
            _, scale, offset, mean, var = w
            return [b(scale) * (x - b(mean)) / np.sqrt(b(var) + eps) + b(offset)]
        if op == "batch_norm_training":
            _, scale, offset = w
            mean = x.mean(axis=axes)
            var = ((x - b(mean)) ** 2).mean(axis=axes)
            return [b(scale) * (x - b(mean)) / np.sqrt(b(var) + eps) + b(offset), mean, var]
        _, scale, mean, var, dy = w
        m = x.size / x.shape[fi] if x.shape[fi] else 0
        xc = x - b(mean)
        inv = 1 / np.sqrt(b(var) + eps)
        xhat = xc * inv
        gscale = (dy * xhat).sum(axis=axes)
        goffset = dy.sum(axis=axes)
        gx = b(scale) * inv / m * (m * dy - b(goffset) - xhat * b(gscale))
        return [gx, gscale, goffset]


def _bn_terms(op: str, args: Sequence[np.ndarray], fi: int, eps: float) -> list[np.ndarray]:
    """Per result and feature, the largest magnitude among the terms the spec's formula sums
    or subtracts to make it (in f64, finite ones only), shaped to broadcast against the
    result: a result is a difference of such terms (x − mean with a mean far from 0, the
    closed form of batch_norm_grad), so its rounding error in the operand's type is relative
    to them, not to the result, which can be ~0. Per feature, so a constant feature's large
    1/sqrt(ε) loosens only its own bound."""
    w, axes, b, eps = _bn_setup(args, fi, eps)
    x = w[0]
    m = max(x.size // max(x.shape[fi], 1), 1)

    def top(v: np.ndarray) -> np.ndarray:
        """Per feature, the largest finite |v| (v broadcast to x's shape)."""
        v = np.broadcast_to(v, x.shape)
        return np.where(np.isfinite(v), np.abs(v), 0.0).max(axis=axes, initial=0.0)

    with np.errstate(all="ignore"):
        if op == "batch_norm_training":
            scale, offset = w[1], w[2]
            mean = x.mean(axis=axes)
            # the batch mean is computed, so x − mean cancels: its error is relative to both
            centred = np.abs(x) + np.abs(b(mean))
            var = ((x - b(mean)) ** 2).mean(axis=axes)
        elif op == "batch_norm_inference":
            scale, offset, mean, var = w[1:]
            centred = np.abs(x - b(mean))  # both given: one rounding of the difference
        else:
            scale, mean, var, dy = w[1:]
            centred = np.abs(x - b(mean))
        inv = 1 / np.sqrt(b(var) + eps)
        spread = centred * inv
        if op != "batch_norm_grad":
            out = b(top(np.abs(b(scale)) * spread) + np.abs(offset))
            if op == "batch_norm_inference":
                return [out]
            return [out, top(x), top(centred**2)]
        gscale = (np.abs(dy) * spread).sum(axis=axes)
        goffset = np.abs(dy).sum(axis=axes)
        gx = np.abs(b(scale)) * inv / m * (m * np.abs(dy) + b(goffset) + spread * b(gscale))
        finite = lambda v: np.where(np.isfinite(v), v, 0.0)  # noqa: E731  (sums per feature)
        return [b(top(gx)), finite(gscale), finite(goffset)]


def _bn_bound(terms: Sequence[np.ndarray], m: int, dt: np.dtype) -> list[np.ndarray]:
    """Per result and feature: BN_C · ε · max(m, 1) · (T + 1), T the largest term of its
    formula (`_bn_terms`): the sums over the m elements of a feature round up to m times in
    the operand's type, in an order the spec leaves open (XLA's expander, lax's reductions),
    and the differences of large terms keep only their absolute error."""
    eps = float(ml_dtypes.finfo(dt).eps)
    return [BN_C * eps * max(m, 1) * (t + 1) for t in terms]


def _bound_compare(bounds: Sequence[np.ndarray], what: str) -> Callable[..., str | None]:
    """Results within an absolute bound each, a scalar or per element (NaN where NaN,
    infinities equal)."""

    def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str | None:
        if len(got) != len(want):
            return f"{len(got)} results vs {len(want)}"
        for k, (g, w, b) in enumerate(zip(got, want, bounds)):
            why = within(np.asarray(g), np.asarray(w), np.asarray(b), 0.0, f"{what} result {k}")
            if why:
                return why
        return None

    return compare


def _mean_dominates(args: Sequence[np.ndarray], op: str, fi: int) -> bool:
    """Whether some feature's mean (the batch's, or the one given) exceeds 4 times the
    largest |x - mean| of that feature: a sum of x and -mean terms then cancels."""
    x = np.moveaxis(args[0].astype(np.float64), fi, 0).reshape(args[0].shape[fi], -1)
    with np.errstate(all="ignore"):
        mean = (
            x.mean(axis=1)
            if op == "batch_norm_training"
            else args[2 + (op == "batch_norm_inference")].astype(np.float64)
        )
        spread = np.abs(x - mean[:, None]).max(axis=1, initial=0.0)
        return bool((np.abs(mean) > 4 * spread).any())


@st.composite
def batch_norm_case(draw: Any) -> Case:
    """batch_norm_training / _inference / _grad on f16, bf16, f32, f64 operands of rank 1-4
    with feature_index anywhere, epsilon from 0 to 1; features that are constant (variance
    0), data with a mean far from 0, and now and then an infinity or NaN in one feature."""
    op = draw(st.sampled_from(BN_OPS))
    t = draw(st.sampled_from(("f16", "bf16", "f32", "f64")))
    dt = ELEMENT_TYPES[t]
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    fi = draw(st.integers(0, len(shape) - 1))
    c = shape[fi]
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.1, 1.0, 0.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    centre = draw(st.sampled_from([0.0, 0.0, 3.0, -20.0]))
    x = rng.standard_normal(shape) * draw(st.sampled_from([1.0, 0.01, 10.0])) + centre
    feats = {t, op, f"feature-index-{fi}"}
    if draw(st.booleans()):  # one feature constant: its variance is 0
        idx = [slice(None)] * len(shape)
        idx[fi] = draw(st.integers(0, c - 1))
        x[tuple(idx)] = centre
        feats.add("zero-variance")
    special = draw(st.sampled_from([None, None, None, np.inf, np.nan]))
    if special is not None:
        x.reshape(-1)[draw(st.integers(0, x.size - 1))] = special
        feats.add("nonfinite")
    if eps == 0.0 and "zero-variance" in feats:
        feats.add("zero-variance-eps0")
    eps_t = np.array(np.float32(eps)).astype(dt).astype(np.float64)
    if 0 < eps_t < float(ml_dtypes.finfo(dt).tiny):
        # epsilon is a denormal of the operand's type (1e-5 in f16), which XLA on the CPU
        # flushes to zero in some loops and not others: a batched call may differ from a single
        # one where var + eps is then 0 (f16 batch_norm_grad of one element: NaN vs 0)
        feats.add("denormal")
    vec = lambda lo, hi: rng.uniform(lo, hi, c).astype(dt)  # noqa: E731
    x = x.astype(dt)
    xt, vt = _tensor(shape, t), _tensor((c,), t)
    attrs = f"<{{epsilon = {float(np.float32(eps)):.8e} : f32, feature_index = {fi} : i64}}>"
    if op == "batch_norm_training":
        args = [x, vec(0.5, 2), vec(-1, 1)]
        ins, outs = [xt, vt, vt], [xt, vt, vt]
    elif op == "batch_norm_inference":
        xw = x.astype(np.float64)
        axes = tuple(d for d in range(len(shape)) if d != fi)
        with np.errstate(all="ignore"):  # an inf or NaN in x: the statistics saturate
            mean = np.nan_to_num(xw.mean(axis=axes)) + rng.standard_normal(c) * 0.1
            var = np.nan_to_num(xw.var(axis=axes), posinf=1.0) * rng.uniform(0.5, 2, c)
            args = [x, vec(0.5, 2), vec(-1, 1), mean.astype(dt), var.astype(dt)]
        ins, outs = [xt, vt, vt, vt, vt], [xt]
    else:
        xw = x.astype(np.float64)
        axes = tuple(d for d in range(len(shape)) if d != fi)
        with np.errstate(all="ignore"):
            mean, var = xw.mean(axis=axes), xw.var(axis=axes)
            args = [x, vec(0.5, 2), mean.astype(dt), var.astype(dt)]
        args.append(rng.standard_normal(shape).astype(dt))
        ins, outs = [xt, vt, vt, vt, xt], [xt, vt, vt]
    names = ", ".join(f"%a{k}" for k in range(len(ins)))
    res = ", ".join(f"%0#{k}" for k in range(len(outs)))
    text = (f"module {{\n  func.func @main({', '.join(f'%a{k}: {ty}' for k, ty in enumerate(ins))})"
            f" -> ({', '.join(outs)}) {{\n"
            f'    %0:{len(outs)} = "stablehlo.{op}"({names}) {attrs} : ({", ".join(ins)}) -> '
            f"({', '.join(outs)})\n    return {res} : {', '.join(outs)}\n  }}\n}}")  # fmt: skip
    want = _bn_reference(op, args, fi, eps)
    if _mean_dominates(args, op, fi):
        feats.add("mean-dominates")
    if op != "batch_norm_grad" and np.isinf(want[0]).any():
        feats.add("infinite-output")  # var + eps is 0, or x - mean overflows
    m = int(np.prod(shape)) // max(c, 1)
    bounds = _bn_bound(_bn_terms(op, args, fi, eps), m, dt)
    return RefCase("batch_norm", op, text, args, feats | features_of(args), interpret=False,
                   reference=lambda got: _bound_compare(bounds, "vs the formula")(got, want),
                   compare=_bound_compare(bounds, "vs XLA"))  # fmt: skip


# --- LAPACK custom calls ----------------------------------------------------------------------

#: Bound constant of the linear-algebra bounds: LIN_C · n · ε · scale, n the largest matrix
#: dimension, ε the precision's epsilon, scale the largest |entry| of the result compared
#: (against XLA) or of the input matrix (reconstructions). Backward-stable factorizations
#: have residuals of that form whatever their blocking (which the kernel may choose).
LIN_C = 64
LIN_TYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}
MATRIX_KINDS = ("random", "random", "random", "big", "small", "rank-deficient", "zero",
                "identity")  # fmt: skip


def _matrix(rng: np.random.Generator, shape: Sequence[int], ty: str, kind: str) -> np.ndarray:
    x = rng.standard_normal(tuple(shape))
    if ty.startswith("c"):
        x = x + 1j * rng.standard_normal(tuple(shape))
    if kind == "big":
        x = x * 2.0**40
    elif kind == "small":
        x = x * 2.0**-40
    elif kind == "rank-deficient" and shape[-1] > 1:
        x[..., :, -1] = x[..., :, 0]  # two equal columns
    elif kind == "zero":
        x = x * 0
    elif kind == "identity":
        x = np.broadcast_to(np.eye(shape[-2], shape[-1]), tuple(shape)).copy()
    return x.astype(LIN_TYPES[ty])


def _eps(x: np.ndarray) -> float:
    return float(np.finfo(x.dtype).eps)


def _lin_bound(scale_of: np.ndarray, n: int, eps: float) -> float:
    fin = np.abs(np.asarray(scale_of)[np.isfinite(scale_of)]) if np.size(scale_of) else []
    return LIN_C * max(n, 1) * eps * (float(np.max(fin)) if np.size(fin) else 0.0) + 1e-300


def _residual(what: str, lhs: np.ndarray, rhs: np.ndarray, bound: float) -> str | None:
    return within(lhs, rhs, bound, 0.0, what)


def _phase_fixed(v: np.ndarray, ref: np.ndarray, axis: int) -> np.ndarray:
    """`v` with each column (axis -2: vectors are columns) or row (axis -1) multiplied by the
    unit phase that aligns its largest entry of `ref` (the other side's) with `ref`."""
    vv = np.moveaxis(v, axis, -1)
    rr = np.moveaxis(ref, axis, -1)
    idx = np.argmax(np.abs(rr), axis=-1)[..., None]
    a = np.take_along_axis(vv, idx, -1)
    b = np.take_along_axis(rr, idx, -1)
    with np.errstate(all="ignore"):
        ph = np.where(np.abs(a) > 0, (b / np.abs(b)) / (a / np.abs(a)), 1)
    return np.moveaxis(vv * ph, -1, axis)


def _lin_compare(kinds: Sequence[str], n: int) -> Callable[..., str | None]:
    """lax's results against XLA's, per result: `int` exactly, `close` within the bound
    relative to XLA's result, `cols` / `rows` the same after aligning each vector's phase
    (sign, for real types) with XLA's, `skip` not compared (undefined or not unique)."""

    def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str | None:
        if len(got) != len(want):
            return f"{len(got)} results vs {len(want)}"
        for k, (kind, g, w) in enumerate(zip(kinds, got, want)):
            g, w = np.asarray(g), np.asarray(w)
            if kind == "skip":
                continue
            if kind == "int":
                if not np.array_equal(g, w):
                    return f"result {k}: {g.tolist()} vs {w.tolist()}"
                continue
            if kind in ("cols", "rows"):
                g = _phase_fixed(g, w, -2 if kind == "cols" else -1)
            why = within(g, w, _lin_bound(w, n, _eps(w)), 0.0, f"result {k} ({kind})")
            if why:
                return why
        return None

    return compare


def _herm(a: np.ndarray, lower: bool) -> np.ndarray:
    """The Hermitian matrix a kernel reading one triangle of `a` sees."""
    t = np.tril(a) if lower else np.triu(a)
    d = np.real(np.diagonal(a, axis1=-2, axis2=-1))
    full = t + np.conj(np.swapaxes(t, -1, -2))
    idx = np.arange(a.shape[-1])
    full[..., idx, idx] = d
    return full


def _reflectors(vs: np.ndarray, tau: np.ndarray, m: int, start: int = 0) -> np.ndarray:
    """Q = H_1 ... H_k, H_i = I - tau_i v_i v_i^H, v_i[i + start] = 1, v_i below it from `vs`
    (LAPACK's compact form: geqrf with start 0, gehrd with start 1)."""
    q = np.eye(m, dtype=np.complex128)
    for i in range(tau.shape[-1]):
        v = np.zeros(m, np.complex128)
        if i + start < m:
            v[i + start] = 1
            v[i + start + 1 :] = vs[i + start + 1 :, i]
        q = q @ (np.eye(m) - tau[i] * np.outer(v, np.conj(v)))
    return q


def _per_matrix(check: Callable[..., str | None]) -> Callable[..., str | None]:
    """Apply a per-matrix reference check to every matrix of a batch."""

    def run(*arrays: np.ndarray) -> str | None:
        batch = arrays[0].shape[:-2] if arrays[0].ndim >= 2 else ()
        for i in np.ndindex(*batch):
            why = check(*(a[i] for a in arrays))
            if why:
                return f"matrix {i}: {why}"
        return None

    return run


def lapack_targets() -> set[str]:
    """Every target the custom_call family can draw (form x precision)."""
    names = set()
    for form in LAPACK_FORMS:
        for p, c in zip("sdcz", (False, False, True, True)):
            base = {"orgqr": "ungqr", "ormqr": "unmqr", "syevd": "heevd", "sytrd": "hetrd"}
            names.add(f"lapack_{p}{base.get(form, form) if c else form}_ffi")
    return names


LAPACK_FORMS = ("getrf", "potrf", "geqrf", "orgqr", "ormqr", "syevd", "gesdd", "gesvd", "trsm",
                "gehrd", "sytrd", "gtsv", "geev")  # fmt: skip


@functools.cache
def _lowered(form: str, ty: str, shape: tuple[int, ...], flags: tuple[Any, ...]) -> tuple[str, str]:
    """(target, module text) JAX's CPU lowering gives for `form` on these operand shapes."""
    from .custom_calls import custom_call_modules

    L = jax.lax.linalg
    d = LIN_TYPES[ty]
    a = np.zeros(shape, d)
    m, n = shape[-2:]
    k = min(m, n)
    p = {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}[ty]
    cplx = ty.startswith("c")
    unread: tuple[int, ...] = ()
    if form == "getrf":
        fn, args = L.lu, (a,)
    elif form == "potrf":
        fn, args = (lambda a: L.cholesky(a, symmetrize_input=False)), (a,)
    elif form == "geqrf":
        fn, args = (lambda a: L.qr(a, full_matrices=False)), (a,)
    elif form in ("orgqr", "ormqr"):
        tau = np.zeros((*shape[:-2], k), d)
        if form == "orgqr":
            fn, args = L.householder_product, (a[..., :k], tau)
            form = "ungqr" if cplx else "orgqr"
        else:
            left, tr = flags
            c = np.zeros((*shape[:-2], m, 2) if left else (*shape[:-2], 2, m), d)
            fn = lambda a, t, c: L.ormqr(a, t, c, left=left, transpose=tr)  # noqa: E731
            args = (a[..., :k], tau, c)
            form = "unmqr" if cplx else "ormqr"
    elif form == "syevd":
        (lower,) = flags
        fn, args = (lambda a: L.eigh(a, lower=lower, symmetrize_input=False)), (a,)
        form = "heevd" if cplx else "syevd"
    elif form in ("gesdd", "gesvd"):
        (mode,) = flags
        algo = L.SvdAlgorithm.QR if form == "gesvd" else None
        fn = {"S": lambda a: L.svd(a, full_matrices=False, algorithm=algo),
              "A": lambda a: L.svd(a, full_matrices=True, algorithm=algo),
              "N": lambda a: L.svd(a, compute_uv=False, algorithm=algo)}[mode]  # fmt: skip
        args, unread = (a,), ((0, 2, 3) if mode == "N" else (0,))
    elif form == "trsm":
        left, lower, tr, conj, unit = flags
        b = np.zeros((*shape[:-2], m, 2) if left else (*shape[:-2], 2, m), d)
        fn = lambda a, b: L.triangular_solve(  # noqa: E731
            a, b, left_side=left, lower=lower, transpose_a=tr, conjugate_a=conj, unit_diagonal=unit
        )
        args = (a, b)
    elif form == "gehrd":
        fn, args = L.hessenberg, (a,)
    elif form == "sytrd":
        (lower,) = flags
        fn, args = (lambda a: L.tridiagonal(a, lower=lower)), (a,)
        form = "hetrd" if cplx else "sytrd"
    elif form == "gtsv":
        v = np.zeros((*shape[:-2], m), d)
        fn, args, unread = L.tridiagonal_solve, (v, v, v, np.zeros(shape, d)), (0, 1, 2)
    else:
        fn, args = L.eig, (a,)
    target = f"lapack_{p}{form}_ffi"
    return target, custom_call_modules(fn, *args, unread=unread)[target]


@st.composite
def custom_call_case(draw: Any) -> Case:
    """A LAPACK custom call as JAX's CPU lowering emits it (jax.lax.linalg lowered, the call
    cut out with every attribute), on random, scaled (2^±40), rank-deficient, zero and
    identity matrices, batched or not, in f32/f64/complex64/complex128. lax against the xla
    backend (LAPACK itself) within the LIN_C bound, vectors compared up to their phase; and
    a reconstruction from the results (P A = L U, Q R = A, A V = V diag(w), U S V^H = A ...)."""
    form = draw(st.sampled_from(LAPACK_FORMS))
    ty = draw(st.sampled_from(sorted(LIN_TYPES)))
    if form == "gtsv" and ty in ("c64",):
        ty = "c128"
    batch = draw(st.sampled_from([(), (), (2,)]))
    square = form in ("potrf", "syevd", "trsm", "gehrd", "sytrd", "geev", "gtsv")
    m = draw(st.integers(1, 4))
    n = m if square else draw(st.integers(1, 4))
    if form in ("orgqr", "ormqr"):
        n = min(m, n)  # k reflectors in an m x k array
    if form == "gtsv":
        n = draw(st.integers(1, 3))  # right-hand sides
    kind = draw(st.sampled_from(MATRIX_KINDS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    flags: tuple[Any, ...] = ()
    if form == "ormqr":
        flags = (draw(st.booleans()), draw(st.booleans()))
    elif form in ("syevd", "sytrd"):
        flags = (draw(st.booleans()),)
    elif form in ("gesdd", "gesvd"):
        flags = (draw(st.sampled_from(["S", "A", "N"])),)
    elif form == "trsm":
        tr = draw(st.booleans())
        flags = (draw(st.booleans()), draw(st.booleans()), tr,
                 tr and ty.startswith("c") and draw(st.booleans()), draw(st.booleans()))  # fmt: skip
    target, text = _lowered(form, ty, (*batch, m, n), flags)
    a = _matrix(rng, (*batch, m, n), ty, kind)
    d = LIN_TYPES[ty]
    feats = {ty, form, f"matrix-{kind}", target}
    eps = float(np.finfo(d).eps)
    scale = lambda x: _lin_bound(x, max(m, n), eps)  # noqa: E731
    wide = lambda x: x.astype(np.complex128)  # noqa: E731
    trust = False
    args: list[np.ndarray] = [a]
    if form == "getrf":
        kinds = ["close", "int", "int"]

        def ref1(a: np.ndarray, lu: np.ndarray, piv: np.ndarray) -> str | None:
            k = min(m, n)
            low = np.tril(wide(lu), -1)[:, :k] + np.eye(m, k)
            perm = list(range(m))
            for i, pv in enumerate(piv - 1):
                perm[i], perm[pv] = perm[pv], perm[i]
            return _residual("P A = L U", wide(a)[perm], low @ np.triu(wide(lu))[:k], scale(a))

        ref = lambda got: _per_matrix(ref1)(a, got[0], got[1])  # noqa: E731
    elif form == "potrf":
        lower = True
        herm = wide(a) @ np.conj(np.swapaxes(wide(a), -1, -2)) + m * np.eye(m) * (
            np.abs(wide(a)).max(initial=0) ** 2 + (kind != "zero")
        )
        if kind == "rank-deficient":  # not positive definite: info names the failing minor
            herm[..., -1, -1] = -abs(herm[..., -1, -1])
        junk = np.triu(wide(_matrix(rng, (*batch, m, m), ty, "random")), 1)
        a = (herm + junk).astype(d)
        if not ty.startswith("c"):
            a = a.real.astype(d) if np.iscomplexobj(a) else a
        args = [a]
        pd = kind not in ("rank-deficient", "zero")
        failing = 0 if pd else 1 if kind == "zero" else m  # the first minor not PD
        kinds = ["close", "int"]
        feats |= set() if pd else {"not-positive-definite"}

        def ref1(a: np.ndarray, c: np.ndarray, info: np.ndarray) -> str | None:
            if int(info) != failing:
                return f"info {int(info)}, expected {failing}"
            if (np.triu(c, 1) != np.triu(a, 1)).any():
                return "the upper triangle changed"
            if not pd:
                return None
            low = np.tril(wide(c))
            return _residual("L L^H = A", low @ np.conj(low.T), _herm(wide(a), True), scale(a))

        ref = lambda got: _per_matrix(ref1)(a, got[0], got[1])  # noqa: E731
    elif form == "geqrf":
        kinds = ["close", "close"]

        def ref1(a: np.ndarray, qr: np.ndarray, tau: np.ndarray) -> str | None:
            q = _reflectors(wide(qr), wide(tau), m)
            r = np.triu(wide(qr))
            return _residual("Q R = A", q @ r, wide(a), scale(a))

        ref = lambda got: _per_matrix(ref1)(a, got[0], got[1])  # noqa: E731
    elif form in ("orgqr", "ormqr"):
        import scipy.linalg.lapack as lapack

        geqrf = getattr(lapack, {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}[ty] + "geqrf")
        outs = [geqrf(mat) for mat in a.reshape(-1, m, n)]
        qr = np.stack([o[0] for o in outs]).reshape(a.shape).astype(d)
        tau = np.stack([o[1] for o in outs]).reshape((*batch, n)).astype(d)
        args = [qr, tau]
        if form == "orgqr":
            kinds = ["close"]

            def ref1(qr: np.ndarray, tau: np.ndarray, q: np.ndarray) -> str | None:
                want = _reflectors(wide(qr), wide(tau[0]), m)[:, :n]
                return _residual("Q = H_1 ... H_k", wide(q), want, scale(np.ones(1)))

            ref = lambda got: _per_matrix(ref1)(qr, tau[..., None, :], got[0])  # noqa: E731
        else:
            left, tr = flags
            c = _matrix(rng, (*batch, m, 2) if left else (*batch, 2, m), ty, "random")
            args.append(c)
            kinds = ["close"]
            trust = True  # ormqr is registered by jaxlib, not on jax.export's stable list

            def ref1(qr: np.ndarray, tau: np.ndarray, c: np.ndarray, out: np.ndarray) -> str | None:
                q = _reflectors(wide(qr), wide(tau[0]), m)
                q = np.conj(q.T) if tr else q
                want = q @ wide(c) if left else wide(c) @ q
                return _residual("Q C", wide(out), want, scale(c))

            ref = lambda got: _per_matrix(ref1)(qr, tau[..., None, :], c, got[0])  # noqa: E731
    elif form in ("syevd", "sytrd"):
        (lower,) = flags
        herm = _herm(wide(a), lower)
        w_all = np.linalg.eigvalsh(herm)
        gaps = np.diff(w_all, axis=-1)
        separated = bool(gaps.size == 0 or gaps.min() > 1e-3 * (np.abs(w_all).max() + 1e-300))
        if form == "syevd":
            kinds = ["cols" if separated else "skip", "close", "int"]
            feats.add("separated" if separated else "repeated-eigenvalues")

            def ref1(a: np.ndarray, v: np.ndarray, w: np.ndarray) -> str | None:
                h = _herm(wide(a), lower)
                why = _residual("w = eigvalsh(A)", w[0], np.linalg.eigvalsh(h), scale(a))
                vv = wide(v)
                return why or _residual("A V = V diag(w)", h @ vv, vv * w, scale(a)) or _residual(
                    "V^H V = I", np.conj(vv.T) @ vv, np.eye(m), scale(np.ones(1)))  # fmt: skip

            ref = lambda got: _per_matrix(ref1)(a, got[0], got[1][..., None, :])  # noqa: E731
        else:
            kinds = ["close", "close", "close", "close", "int"]

            def ref1(a: np.ndarray, dd: np.ndarray, e: np.ndarray) -> str | None:
                t = np.diag(dd[0].astype(np.float64)) + np.diag(wide(e[0]), 1)
                t = t + np.conj(np.triu(t, 1).T)
                want = np.linalg.eigvalsh(_herm(wide(a), lower))
                return _residual("eig(T) = eig(A)", np.linalg.eigvalsh(t), want, scale(a))

            ref = lambda got: _per_matrix(ref1)(a, got[1][..., None, :], got[2][..., None, :])  # noqa: E731
    elif form in ("gesdd", "gesvd"):
        (mode,) = flags
        trust = form == "gesvd"  # off jax.export's stable list
        sv = np.linalg.svd(wide(a), compute_uv=False)
        gaps = -np.diff(sv, axis=-1)
        separated = bool(gaps.size == 0 or gaps.min() > 1e-3 * (sv.max() + 1e-300))
        vec = "cols" if separated and mode == "S" else "skip"  # full U / V^H: not unique
        kinds = (
            ["close", "int"] if mode == "N" else ["close", vec, vec.replace("cols", "rows"), "int"]
        )
        feats |= {f"svd-{mode}", "separated" if separated else "repeated-singular-values"}

        def ref1(a: np.ndarray, s: np.ndarray, *uv: np.ndarray) -> str | None:
            why = _residual("s = svd(A)", s[0], np.linalg.svd(wide(a), compute_uv=False), scale(a))
            if why or not uv:
                return why
            u, vt = wide(uv[0]), wide(uv[1])
            k = min(m, n)
            return _residual("U S V^H = A", (u[:, :k] * s[0]) @ vt[:k], wide(a), scale(a))

        def ref(got: Sequence[np.ndarray]) -> str | None:
            return _per_matrix(ref1)(a, got[0][..., None, :], *(got[1:3] if mode != "N" else ()))
    elif form == "trsm":
        left, lower, tr, conj, unit = flags
        a = (np.tril(a) if lower else np.triu(a)) / 4 + 2 * np.eye(m).astype(d)
        a = a.astype(d)
        b = _matrix(rng, (*batch, m, 2) if left else (*batch, 2, m), ty, kind)
        args = [a, b]
        kinds = ["close"]

        def ref1(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> str | None:
            t = np.tril(wide(a)) if lower else np.triu(wide(a))
            if unit:
                t[np.diag_indices(m)] = 1
            op = np.conj(t.T) if conj else t.T if tr else t
            got = op @ wide(x) if left else wide(x) @ op
            # backward error: |op(A) X - B| <= LIN_C n eps (|A| |X| n + |B|)
            size = np.abs(t).max() * np.abs(x).max(initial=0) * m + np.abs(b).max(initial=0)
            return _residual("op(A) X = B", got, wide(b), scale(np.array(size)))

        ref = lambda got: _per_matrix(ref1)(a, b, got[0])  # noqa: E731
    elif form == "gehrd":
        kinds = ["close", "close", "int"]

        def ref1(a: np.ndarray, h: np.ndarray, tau: np.ndarray) -> str | None:
            q = _reflectors(wide(h), wide(tau[0]), m, start=1)
            hh = np.triu(wide(h), -1)
            return _residual("Q H Q^H = A", q @ hh @ np.conj(q.T), wide(a), scale(a))

        ref = lambda got: _per_matrix(ref1)(a, got[0], got[1][..., None, :])  # noqa: E731
    elif form == "gtsv":
        dl, dd, du = (_matrix(rng, (*batch, 1, m), ty, "random")[..., 0, :] for _ in range(3))
        dd = (dd + 4).astype(d)
        if kind == "zero":  # a singular system: info names the zero pivot
            dl, dd, du = dl * 0, dd * 0, du * 0
        b = _matrix(rng, (*batch, m, n), ty, "random")
        args = [dl, dd, du, b]
        kinds = ["close", "int"] if kind != "zero" else ["skip", "int"]

        def ref1(dl: np.ndarray, dd: np.ndarray, du: np.ndarray, b: np.ndarray,
                 x: np.ndarray, info: np.ndarray) -> str | None:  # fmt: skip
            if kind == "zero":
                code = int(np.asarray(info).reshape(-1)[0])
                return None if code == 1 else f"info {code}, expected 1"
            t = np.diag(wide(dd[0])) + np.diag(wide(dl[0, 1:]), -1) + np.diag(wide(du[0, :-1]), 1)
            size = np.abs(t).max() * np.abs(x).max(initial=0) * m + np.abs(b).max(initial=0)
            return _residual("T X = B", t @ wide(x), wide(b), scale(np.array(size)))

        ref = lambda got: _per_matrix(ref1)(  # noqa: E731
            dl[..., None, :], dd[..., None, :], du[..., None, :], b, got[0], got[1][..., None, None]
        )
    else:  # geev: real types give (w_re, w_im, vl, vr, info), complex ones (w, vl, vr, info)
        kinds = ["close", "close", "skip", "skip", "int"] if not ty.startswith("c") else [
            "close", "skip", "skip", "int"]  # fmt: skip

        def ref1(a: np.ndarray, *got: np.ndarray) -> str | None:
            w = wide(got[0][0]) + (1j * got[1][0] if len(got) == 4 else 0)
            vl, vr = wide(got[-2]), wide(got[-1])
            return _residual("A VR = VR diag(w)", wide(a) @ vr, vr * w, scale(a)) or _residual(
                "VL^H A = diag(w) VL^H", np.conj(vl.T) @ wide(a), w[:, None] * np.conj(vl.T),
                scale(a))  # fmt: skip

        def ref(got: Sequence[np.ndarray]) -> str | None:
            values = (g[..., None, :] for g in got[: len(got) - 3])
            return _per_matrix(ref1)(a, *values, got[-3], got[-2])

    # The kernel's work happens in the precision's own type, so bounds use its epsilon.
    return RefCase("custom_call", "custom_call", text, args, feats, interpret=False,
                   reference=ref, compare=_lin_compare(kinds, max(m, n)), trust=trust)  # fmt: skip


#: The numeric families, merged with differential.FAMILIES by the test.
FAMILIES = {
    "complex": complex_case(),
    "chlo_unary": chlo_unary_case(),
    "chlo_broadcast": chlo_broadcast_case(),
    "chlo_misc": chlo_misc_case(),
    "fft": fft_case(),
    "batch_norm": batch_norm_case(),
    "custom_call": custom_call_case(),
}

#: The ops these families draw as the op under test.
GENERATED_OPS = {
    *(f"stablehlo.{op}" for op in COMPLEX_OPS),
    *(f"chlo.{op}" for op in CHLO_OPS),
    "stablehlo.fft",
    *(f"stablehlo.{op}" for op in BN_OPS),
    "stablehlo.custom_call",
}
