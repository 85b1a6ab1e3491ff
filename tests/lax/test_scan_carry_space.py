"""Counted loops lifted as lax.scan, over the space of what they carry (issue 38): which
`stablehlo.while` loops the lax backend counts, and that the `lax.scan` running them carries
every value, whatever the induction variable's position among the carried values, the step's
form, the compare's side and type, and what the condition returns.

The references: the loop's values come from a Python simulation of the spec's while
(spec.md#while: run the condition on the carried values, then the body, until the condition
is false; integers wrap as their type does). Whether a loop is counted comes from the rule the
lax backend documents (docs/lax-backend.md, backends/lax/ops/_control_util.py's docstring): the
condition is exactly ``compare DIR, iv, constant`` (either side) returned as is, with a
compare_type (if any) of the iv's signedness, the iv starts at a constant and the body returns
``iv + 1``, ``1 + iv`` or ``iv - 1`` for it. A counted loop reverse-differentiates (a scan);
any other is refused by name under jax.grad (a while loop), and runs the same values.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge import JuliaBridgeError

pytestmark = pytest.mark.usefixtures("x64")
SPACE = settings(max_examples=40, deadline=None, derandomize=True)
TYPES = {"i8": np.int8, "ui8": np.uint8, "i32": np.int32, "ui32": np.uint32}
_CMP = {
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
    "NE": lambda a, b: a != b,
}
#: the same compare with its operands swapped
_MIRROR = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE"}
LIMIT = 300


def _wrap(v: int, dtype: np.dtype) -> int:
    bits = 8 * dtype.itemsize
    v %= 1 << bits
    return v - (1 << bits) if dtype.kind == "i" and v >= 1 << (bits - 1) else v


@st.composite
def loops(draw: st.DrawFn) -> dict[str, Any]:
    ty = draw(st.sampled_from(sorted(TYPES)))
    dtype = np.dtype(TYPES[ty])
    info = np.iinfo(dtype)
    start = draw(st.integers(max(int(info.min), -5), 5))
    if dtype.kind == "u" and draw(st.booleans()):
        start = int(info.max) - draw(st.integers(0, 3))
    slots = draw(st.permutations(["iv", *draw(st.lists(st.sampled_from(["acc", "other"]),
                                                         min_size=0, max_size=3))]))  # fmt: skip
    flag = draw(st.integers(0, 4)) == 0  # the condition returns a carried flag
    if flag:
        slots = [*slots, "flag"]
    step = draw(st.sampled_from(["iv + 1", "1 + iv", "iv - 1", "other + 1", "iv + 2"]))
    if step == "other + 1" and "other" not in slots:
        step = "iv + 1"
    return {
        "ty": ty,
        "dtype": dtype,
        "start": start,
        "bound": _wrap(start + draw(st.integers(-6, 6)), dtype),
        "other": draw(st.integers(-3, 3)) if dtype.kind == "i" else draw(st.integers(0, 3)),
        "direction": draw(st.sampled_from(sorted(_CMP))),
        "iv_first": draw(st.booleans()),
        "compare_type": draw(st.sampled_from(["", "", "own"])),
        "slots": slots,
        "step": step,
        "flag": flag,
    }


def _text(c: dict[str, Any]) -> str:
    ty, slots = c["ty"], c["slots"]
    it = f"tensor<{ty}>"
    types = {"iv": it, "other": it, "acc": "tensor<f64>", "flag": "tensor<i1>"}
    init = {"iv": "%cs", "other": "%co", "acc": "%x", "flag": "%ct"}
    names = [f"%v{k}" for k in range(len(slots))]
    at = {s: names[k] for k, s in enumerate(slots) if s != "acc"}
    iv, other = at["iv"], at.get("other", "")
    ctype = ""
    if c["compare_type"]:
        ctype = ", SIGNED" if c["dtype"].kind == "i" else ", UNSIGNED"
    direction = c["direction"] if c["iv_first"] else _MIRROR[c["direction"]]
    lhs, rhs = (iv, "%cb") if c["iv_first"] else ("%cb", iv)
    cond = [f"%k = stablehlo.compare {direction}, {lhs}, {rhs}{ctype} : ({it}, {it}) -> tensor<i1>",
            f"stablehlo.return {at['flag'] if c['flag'] else '%k'} : tensor<i1>"]  # fmt: skip
    step = {"iv + 1": f"stablehlo.add {iv}, %c1", "1 + iv": f"stablehlo.add %c1, {iv}",
            "iv - 1": f"stablehlo.subtract {iv}, %c1", "other + 1": f"stablehlo.add {other}, %c1",
            "iv + 2": f"stablehlo.add {iv}, %c2"}[c["step"]]  # fmt: skip
    body = [f"%ni = {step} : {it}", f"%fi = stablehlo.convert {iv} : ({it}) -> tensor<f64>"]
    out = []
    for k, s in enumerate(slots):
        v = names[k]
        if s == "iv":
            out.append("%ni")
        elif s == "other":
            body.append(f"%n{k} = stablehlo.add {v}, %c1 : {it}")
            out.append(f"%n{k}")
        elif s == "acc":
            body += [f"%m{k} = stablehlo.multiply {v}, %x : tensor<f64>",
                     f"%n{k} = stablehlo.add %m{k}, %fi : tensor<f64>"]  # fmt: skip
            out.append(f"%n{k}")
        else:  # the flag: whether the next iv passes the compare
            nl, nr = ("%ni", "%cb") if c["iv_first"] else ("%cb", "%ni")
            body.append(f"%n{k} = stablehlo.compare {direction}, {nl}, {nr}{ctype} : "
                        f"({it}, {it}) -> tensor<i1>")  # fmt: skip
            out.append(f"%n{k}")
    tys = [types[s] for s in slots]
    carried = ", ".join(f"{n} = {init[s]}" for n, s in zip(names, slots))
    results = ", ".join(f"%w#{k}" for k in range(len(slots)))
    lines = [
        f"%cs = stablehlo.constant dense<{c['start']}> : {it}",
        f"%cb = stablehlo.constant dense<{c['bound']}> : {it}",
        f"%co = stablehlo.constant dense<{c['other']}> : {it}",
        f"%c1 = stablehlo.constant dense<1> : {it}",
        f"%c2 = stablehlo.constant dense<2> : {it}",
        "%ct = stablehlo.constant dense<true> : tensor<i1>",
        f"%w:{len(slots)} = stablehlo.while({carried}) : {', '.join(tys)}",
        "cond {",
        *cond,
        "} do {",
        *body,
        f"stablehlo.return {', '.join(out)} : {', '.join(tys)}",
        "}",
    ]
    return (
        f"module {{\n  func.func @main(%x: tensor<f64>) -> ({', '.join(tys)}) {{\n    "
        + "\n    ".join(lines)
        + f"\n    return {results} : {', '.join(tys)}\n  }}\n}}\n"
    )


def _simulate(c: dict[str, Any], x: float) -> list[Any] | None:
    """The loop's results by the spec's while, None past LIMIT trips."""
    dtype = c["dtype"]
    values: list[Any] = []
    for s in c["slots"]:
        values.append({"iv": c["start"], "other": c["other"], "acc": x, "flag": True}[s])
    where = {s: k for k, s in enumerate(c["slots"])}
    cmp = _CMP[c["direction"]]
    trips = 0
    while values[where["flag"]] if c["flag"] else cmp(values[where["iv"]], c["bound"]):
        iv = values[where["iv"]]
        other = values[where["other"]] if "other" in where else 0
        nxt = {"iv + 1": iv + 1, "1 + iv": iv + 1, "iv - 1": iv - 1, "other + 1": other + 1,
               "iv + 2": iv + 2}[c["step"]]  # fmt: skip
        nxt = _wrap(nxt, dtype)
        new = []
        for k, s in enumerate(c["slots"]):
            v = values[k]
            new.append({"iv": nxt, "other": _wrap(v + 1, dtype) if s == "other" else 0,
                        "acc": v * x + iv if s == "acc" else 0,
                        "flag": cmp(nxt, c["bound"])}[s])  # fmt: skip
        values = new
        trips += 1
        if trips > LIMIT:
            return None
    return values


def _counted(c: dict[str, Any]) -> bool:
    """The documented rule: compare of the iv with a constant returned as is, a step of one
    on the iv itself."""
    return not c["flag"] and c["step"] in ("iv + 1", "1 + iv", "iv - 1")


@SPACE
@given(case=loops())
def test_counted_loops_carry_every_value_and_only_they_reverse_differentiate(
    case: dict[str, Any],
) -> None:
    x = 0.5
    want = _simulate(case, x)
    assume(want is not None)
    text = _text(case)
    fn = juliabridge.load_mlir(text, backend="lax")
    got = [np.asarray(v) for v in fn(np.float64(x))]
    for k, s in enumerate(case["slots"]):
        if s == "acc":
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12, err_msg=text)
        else:
            assert got[k].item() == want[k], (k, s, got, want, text)
    acc = [k for k, s in enumerate(case["slots"]) if s == "acc"]
    if not acc:
        return

    def first_acc(v: Any) -> Any:
        return fn(v)[acc[0]]

    if _counted(case):
        # d/dx of the accumulator, by central differences of the simulation (a polynomial in x)
        h = 1e-6
        up, down = _simulate(case, x + h), _simulate(case, x - h)
        assert up is not None and down is not None
        slope = (up[acc[0]] - down[acc[0]]) / (2 * h)
        np.testing.assert_allclose(jax.grad(first_acc)(np.float64(x)), slope, rtol=1e-5, atol=1e-6)
    else:
        with pytest.raises(JuliaBridgeError, match="reverse-mode differentiation"):
            jax.grad(first_acc)(np.float64(x))


@pytest.mark.parametrize(("ty", "written"), [("i32", "UNSIGNED"), ("ui32", "SIGNED")])
def test_a_compare_type_of_the_other_signedness_is_refused_as_for_any_compare(
    ty: str, written: str
) -> None:
    # spec.md#compare C3: the compare_type must fit the element type; a loop's condition is no
    # exception, counted or not.
    it = f"tensor<{ty}>"
    text = f"""module {{
  func.func @main(%x: tensor<f64>) -> ({it}, tensor<f64>) {{
    %cs = stablehlo.constant dense<0> : {it}
    %cb = stablehlo.constant dense<5> : {it}
    %c1 = stablehlo.constant dense<1> : {it}
    %w:2 = stablehlo.while(%i = %cs, %a = %x) : {it}, tensor<f64>
    cond {{
      %k = stablehlo.compare LT, %i, %cb, {written} : ({it}, {it}) -> tensor<i1>
      stablehlo.return %k : tensor<i1>
    }} do {{
      %n = stablehlo.add %i, %c1 : {it}
      %m = stablehlo.multiply %a, %x : tensor<f64>
      stablehlo.return %n, %m : {it}, tensor<f64>
    }}
    return %w#0, %w#1 : {it}, tensor<f64>
  }}
}}"""
    with pytest.raises(JuliaBridgeError, match=f"compare_type {written} does not apply"):
        fn = juliabridge.load_mlir(text, backend="lax")
        fn(np.float64(2.0))
