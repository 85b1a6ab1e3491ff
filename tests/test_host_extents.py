"""What XLA evaluates on the host while compiling is checked or rewritten first (issue 27, class 1).

Two crashes killed the process: integer division or remainder of constants by zero (or of
INT_MIN by -1) in XLA's constant folder (SIGFPE; jax 0.10.2, xla and enzyme backends, and
`auto` when it fell back to xla), and a `pad` whose low/high paddings are near +-2^63 (valid
StableHLO: their sum with the operand's size is the result's; XLA's extent arithmetic overflowed
and aborted, SIGABRT, on every backend), also through `reduce_window` padding and `dynamic_pad`
operands. Every case runs in a child process, since the failure being guarded against kills it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import require_backend

REPO = Path(__file__).resolve().parents[1]
BIG = (1 << 63) - 2

CHILD = r"""
import json, sys
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
import juliabridge
backend = sys.argv[1]
for case in json.loads(sys.stdin.read()):
    try:
        m = juliabridge.load_mlir(case["text"], backend=backend)
        args = [np.asarray(a, dtype=d) for a, d in case["args"]]
        (out,) = m(*args)
        reply = {"ok": np.asarray(out).tolist()}
    except juliabridge.JuliaBridgeError as e:
        reply = {"error": type(e).__name__, "message": str(e)}
    print(json.dumps(reply), flush=True)
"""


def run_cases(backend: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run `cases` on `backend` in one child; fail naming the case if the child dies."""
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, backend],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(replies) != len(cases):
        name = cases[len(replies)]["name"] if len(replies) < len(cases) else "?"
        pytest.fail(
            f"backend {backend}: the child died (status {done.returncode}) on case {name}:\n"
            f"{done.stderr[-3000:]}"
        )
    return replies


# --- integer division of constants ------------------------------------------------------------


def reference_division(x: int, y: int, dtype: np.dtype, remainder: bool) -> int:
    """XLA's integer division where the spec leaves it open (x / 0 = -1 as all bits set,
    x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0), else truncation toward zero."""
    info = np.iinfo(dtype)
    if y == 0:
        return x if remainder else (-1 if info.min < 0 else int(info.max))
    if info.min < 0 and x == info.min and y == -1:
        return 0 if remainder else x
    q = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
    return x - q * y if remainder else q


def _mlir_type(dtype: np.dtype) -> str:
    return ("ui" if dtype.kind == "u" else "i") + str(dtype.itemsize * 8)


def _division_cases() -> list[dict[str, Any]]:
    cases = []
    for name in ("i8", "i32", "i64", "ui8", "ui32"):
        dtype = np.dtype(("u" if name.startswith("u") else "") + "int" + name.lstrip("ui"))
        info = np.iinfo(dtype)
        xs = (
            [int(info.min), 7, -7, 0, int(info.max)]
            if info.min < 0
            else [0, 7, 200, 1, int(info.max)]
        )
        divisors = {
            "zero": [0] * 5,
            "minus_one": [-1] * 5 if info.min < 0 else [int(info.max)] * 5,
            "mixed": [-1, 0, 3, -1, 1] if info.min < 0 else [0, 0, 3, 7, 1],
        }
        t = f"tensor<5x{_mlir_type(dtype)}>"
        for dname, ys in divisors.items():
            for op in ("divide", "remainder", "chlo_divide"):
                for folded in (False, True):
                    rem = op == "remainder"
                    # `folded`: the divisor is only a constant after XLA folds `d + 0 * d`.
                    div = "%d"
                    extra = ""
                    if folded:
                        extra = (
                            f"  %n = stablehlo.constant dense<0> : {t}\n"
                            f"  %m = stablehlo.multiply %n, %d : {t}\n"
                            f"  %f = stablehlo.add %d, %m : {t}\n"
                        )
                        div = "%f"
                    if op == "chlo_divide":
                        line = f"%q = chlo.broadcast_divide %c, {div} : ({t}, {t}) -> {t}"
                    else:
                        line = f"%q = stablehlo.{op} %c, {div} : {t}"
                    text = (
                        f"func.func public @main(%a: {t}) -> {t} {{\n"
                        f"  %c = stablehlo.constant dense<{xs}> : {t}\n"
                        f"  %d = stablehlo.constant dense<{ys}> : {t}\n{extra}"
                        f"  {line}\n  %r = stablehlo.add %q, %a : {t}\n"
                        f"  return %r : {t}\n}}"
                    )
                    want = [reference_division(x, y, dtype, rem) for x, y in zip(xs, ys)]
                    cases.append(
                        {
                            "name": f"{name} {op} by {dname}{' folded' if folded else ''}",
                            "text": text,
                            "args": [[[0] * 5, dtype.name]],
                            "want": want,
                        }
                    )
    return cases


@pytest.mark.parametrize("backend", ["xla", "lax", "enzyme", "auto"])
def test_constant_integer_division_by_zero_or_minus_one_on_every_backend(backend: str) -> None:
    require_backend(backend)
    cases = _division_cases()
    if backend == "auto":
        # One unused replica_id does not lift, so `auto` falls back to xla.
        for c in cases:
            c["text"] = c["text"].replace(
                "  return", "  %rid = stablehlo.replica_id : tensor<ui32>\n  return", 1
            )
    for case, reply in zip(cases, run_cases(backend, cases), strict=True):
        assert reply.get("ok") == case["want"], (case["name"], reply)


# --- extents XLA computes in int64 ------------------------------------------------------------

_RW = (
    '%r = "stablehlo.reduce_window"(%a, %z) ({{\n'
    "  ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
    "    %m = stablehlo.add %x, %y : tensor<f32>\n"
    "    stablehlo.return %m : tensor<f32>\n"
    "  }}) {{{attrs}}} : (tensor<4xf32>, tensor<f32>) -> tensor<{n}xf32>"
)


def _extent_module(body: str, out: int) -> str:
    return (
        f"func.func public @main(%a: tensor<4xf32>) -> tensor<{out}xf32> {{\n"
        "  %z = stablehlo.constant dense<0.0> : tensor<f32>\n"
        f"  {body}\n  return %r : tensor<{out}xf32>\n}}"
    )


def _pad(low: int, high: int, interior: int, out: int) -> str:
    return _extent_module(
        f"%r = stablehlo.pad %a, %z, low = [{low}], high = [{high}], interior = [{interior}]"
        f" : (tensor<4xf32>, tensor<f32>) -> tensor<{out}xf32>",
        out,
    )


def _dynamic_pad(low: int, high: int, interior: int, out: int) -> str:
    return _extent_module(
        f"%lo = stablehlo.constant dense<[{low}]> : tensor<1xi64>\n"
        f"  %hi = stablehlo.constant dense<[{high}]> : tensor<1xi64>\n"
        f"  %in = stablehlo.constant dense<[{interior}]> : tensor<1xi64>\n"
        "  %r = stablehlo.dynamic_pad %a, %z, %lo, %hi, %in : (tensor<4xf32>, tensor<f32>, "
        f"tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<{out}xf32>",
        out,
    )


def _reduce_window(padding: tuple[int, int], base: int, out: int) -> str:
    attrs = (
        f"window_dimensions = array<i64: 1>, base_dilations = array<i64: {base}>, "
        f"padding = dense<[[{padding[0]}, {padding[1]}]]> : tensor<1x2xi64>"
    )
    return _extent_module(_RW.format(attrs=attrs, n=out), out)


def _pad_reference(low: int, high: int, interior: int) -> list[float]:
    x = np.arange(1, 5, dtype=np.float32)
    spread = np.zeros(4 + 3 * interior, np.float32)
    spread[:: interior + 1] = x
    full = np.concatenate([np.zeros(max(low, 0)), spread, np.zeros(max(high, 0))])
    return full[max(-low, 0) : len(full) - max(-high, 0)].tolist()


REFUSED = [
    ("pad low=2^63-2 high=-(2^63-2)", _pad(BIG, -BIG, 0, 4)),
    ("pad low=-(2^63-2) high=2^63-2", _pad(-BIG, BIG, 0, 4)),
    ("pad interior=2^62", _pad(-(3 << 62) // 2, 0, 1 << 61, 4)),
    ("dynamic_pad low=2^63-2", _dynamic_pad(BIG, -BIG, 0, 4)),
    ("reduce_window padding=2^63-2", _reduce_window((BIG, -BIG), 1, 4)),
    ("reduce_window base_dilation=2^62", _reduce_window((-(1 << 62), 3 - (1 << 63)), 1 << 62, 4)),
]
#: (name, module, the numbers numpy gives for @main(arange(1, 5))).
ACCEPTED = [
    ("pad 2,1 interior 1", _pad(2, 1, 1, 10), _pad_reference(2, 1, 1)),
    ("pad -1,-2", _pad(-1, -2, 0, 1), _pad_reference(-1, -2, 0)),
    ("dynamic_pad 1,0 interior 2", _dynamic_pad(1, 0, 2, 11), _pad_reference(1, 0, 2)),
    ("reduce_window padding 1,2", _reduce_window((1, 2), 1, 7), _pad_reference(1, 2, 0)),
]


@pytest.mark.parametrize("backend", ["xla", "lax", "enzyme", "auto"])
def test_extents_past_int64_are_refused_and_real_ones_run(backend: str) -> None:
    require_backend(backend)
    arg = [[1.0, 2.0, 3.0, 4.0], "float32"]
    cases = [{"name": n, "text": t, "args": [arg]} for n, t in REFUSED]
    cases += [{"name": n, "text": t, "args": [arg]} for n, t, _ in ACCEPTED]
    replies = run_cases(backend, cases)
    for (name, _), reply in zip(REFUSED, replies, strict=False):
        assert reply.get("error") == "ModuleContractError", (name, reply)
        assert "int64 extent arithmetic" in reply["message"], (name, reply)
        assert re.match(r"<mlir text>, line \d+: stablehlo\.", reply["message"]), reply
    for (name, _, want), reply in zip(ACCEPTED, replies[len(REFUSED) :], strict=True):
        assert reply.get("ok") == want, (name, reply)


def test_only_divisions_that_may_trap_are_rewritten() -> None:
    from juliabridge.backends.lax.rewrite import misread_by_xla
    from juliabridge.stablehlo import parse_module
    from juliabridge.stablehlo.sanitize import walk

    def picked(divisor: str, t: str = "tensor<3xi32>") -> bool:
        text = (
            f"func.func public @main(%a: {t}) -> {t} {{\n"
            f"  %d = {divisor}\n  %q = stablehlo.divide %a, %d : {t}\n  return %q : {t}\n}}"
        )
        module = parse_module(text)
        assert module.parsed is not None
        with module.parsed.context:
            return any(
                misread_by_xla(op) for op in walk(module.parsed.operation) if "divide" in op.name
            )

    assert not picked("stablehlo.constant dense<3> : tensor<3xi32>")
    assert not picked("stablehlo.constant dense<4294967295> : tensor<3xui32>", "tensor<3xui32>")
    assert picked("stablehlo.constant dense<0> : tensor<3xi32>")
    assert picked("stablehlo.constant dense<-1> : tensor<3xi32>")
    assert picked("stablehlo.constant dense<[1, 0, 2]> : tensor<3xi32>")
    assert picked("stablehlo.add %a, %a : tensor<3xi32>")  # may fold to a constant
    assert not picked("stablehlo.constant dense<0.0> : tensor<3xf32>", "tensor<3xf32>")


# --- reduce_window of size-1 windows that only cuts --------------------------------------------


def _window_reference(low: int, high: int, base: int, stride: int, init: float) -> list[float]:
    """A size-1 window over arange(1, 5) with an add body, as XLA (and the lax backend,
    docs/lax-backend.md) reads reduce_window: padding and base-dilation holes take no part, the
    init enters once per window; the result is every `stride`-th element of the padded operand
    (0 in the holes) plus `init`."""
    kept = np.asarray(_pad_reference(low, high, base - 1), np.float32)
    return (kept[::stride] + np.float32(init)).tolist()


def _size_one_window(attrs: str, out: int, init: float) -> str:
    return (
        f"func.func public @main(%a: tensor<4xf32>) -> tensor<{out}xf32> {{\n"
        f"  %z = stablehlo.constant dense<{init}> : tensor<f32>\n"
        f"  {_RW.format(attrs=attrs, n=out)}\n  return %r : tensor<{out}xf32>\n}}"
    )


def _size_one_window_cases() -> list[tuple[str, str, list[float], bool]]:
    """(name, module, the spec's numbers, whether the window only cuts) for every size-1 window
    over 4 elements with strides, base and window dilations in {1, 2}, paddings in {-1, 0, 1}
    and an init value that is the body's identity (0) or not (1)."""
    cases = []
    for stride, base, wdil, low, high, init in itertools.product(
        (1, 2), (1, 2), (1, 2), (-1, 0, 1), (-1, 0, 1), (0.0, 1.0)
    ):
        want = _window_reference(low, high, base, stride, init)
        attrs = (
            f"window_dimensions = array<i64: 1>, window_strides = array<i64: {stride}>, "
            f"base_dilations = array<i64: {base}>, window_dilations = array<i64: {wdil}>, "
            f"padding = dense<[[{low}, {high}]]> : tensor<1x2xi64>"
        )
        # what XLA's simplifier aborted on: size-1 windows, no stride or dilation, padding
        # nowhere positive and somewhere negative
        cuts = (stride, base, wdil) == (1, 1, 1) and max(low, high) <= 0 > min(low, high)
        name = f"stride {stride} base {base} wdil {wdil} pad {low},{high} init {init}"
        cases.append((name, _size_one_window(attrs, len(want), init), want, cuts))
    return cases


@pytest.mark.parametrize("backend", ["xla", "lax", "enzyme"])
def test_every_size_one_window_runs_with_the_spec_s_numbers_even_one_that_only_cuts(
    backend: str,
) -> None:
    # A window that only cuts aborted the process on xla and enzyme (XLA's simplifier took
    # the op for an elementwise one of the operand's shape); it now reaches XLA as a slice.
    require_backend(backend)
    cases = _size_one_window_cases()
    assert sum(cuts for *_, cuts in cases) == 6  # pad -1,0 / 0,-1 / -1,-1, init 0 and 1
    arg = [[1.0, 2.0, 3.0, 4.0], "float32"]
    replies = run_cases(backend, [{"name": n, "text": t, "args": [arg]} for n, t, _, _ in cases])
    for (name, _, want, _), reply in zip(cases, replies, strict=True):
        assert reply.get("ok") == want, (name, reply)


def _window_2d(padding: list[list[int]], out: tuple[int, int], body: str = "add") -> str:
    t_out = f"tensor<{out[0]}x{out[1]}xf32>"
    return (
        f"func.func public @main(%a: tensor<4x3xf32>) -> {t_out} {{\n"
        "  %z = stablehlo.constant dense<-1.0> : tensor<f32>\n"
        '  %r = "stablehlo.reduce_window"(%a, %z) ({\n'
        "  ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
        f"    %m = stablehlo.{body} %x, %y : tensor<f32>\n"
        "    stablehlo.return %m : tensor<f32>\n"
        f"  }}) {{window_dimensions = array<i64: 1, 1>, padding = dense<{padding}> : "
        f"tensor<2x2xi64>}} : (tensor<4x3xf32>, tensor<f32>) -> {t_out}\n"
        f"  return %r : {t_out}\n}}"
    )


@pytest.mark.parametrize("backend", ["xla", "lax", "enzyme"])
def test_a_window_that_cuts_any_dimension_keeps_the_right_elements(backend: str) -> None:
    require_backend(backend)
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    arg = [x.tolist(), "float32"]
    # (padding, result shape, body, numpy's result: init -1 with each kept element; a padded
    # element takes no part, as XLA reads reduce_window, so it gives the init alone)
    cases = [
        ([[-1, 0], [0, 0]], (3, 3), "add", x[1:] - 1),
        ([[0, 0], [0, -2]], (4, 1), "maximum", np.maximum(x[:, :1], -1)),
        ([[-1, -1], [-1, -1]], (2, 1), "multiply", -x[1:3, 1:2]),
        (
            [[-1, 1], [0, -1]],
            (4, 2),
            "add",
            np.pad(x, [(0, 1), (0, 0)])[1:, :-1] - 1,
        ),
    ]
    replies = run_cases(
        backend,
        [
            {"name": str(p), "text": _window_2d(p, shape, body), "args": [arg]}
            for p, shape, body, _ in cases
        ],
    )
    for (padding, _, body, want), reply in zip(cases, replies, strict=True):
        assert reply.get("ok") == want.tolist(), (padding, body, reply)


def test_only_a_one_operand_window_that_cuts_is_rewritten() -> None:
    from juliabridge.backends.lax.rewrite import cutting_window
    from juliabridge.stablehlo import parse_module
    from juliabridge.stablehlo.sanitize import walk

    def picked(text: str) -> bool:
        module = parse_module(text)
        assert module.parsed is not None
        with module.parsed.context:
            return any(cutting_window(op) for op in walk(module.parsed.operation))

    assert picked(_window_2d([[-1, 0], [0, 0]], (3, 3)))
    assert picked(_window_2d([[-1, -1], [-1, -1]], (2, 1)))  # a splat
    assert not picked(_window_2d([[-1, 1], [0, -1]], (4, 2)))  # one pad grows
    assert not picked(_window_2d([[0, 0], [0, 0]], (4, 3)))
