"""Measure what the backends spend per unit the load-time budgets count (issue 27, class 2).

For each backend (lax, xla) and each counted unit, two module sizes are loaded and called once
in fresh processes; the figures are the differences between the two sizes divided by the
difference in units, so the process's fixed cost (imports, JAX's runtime) drops out:

- **constant element**: a non-splat f32 `stablehlo.constant` of n elements (hex literal);
- **case branch**: a `stablehlo.case` of n one-op branches, each with its own constant;
- **inlined op**: a 1 KB module whose functions call the next level twice, so @main expands
  to n `sine`s once func.call is inlined.

Peak memory is the child's VmHWM (RUSAGE_SELF would report the forking parent's peak), time is
wall-clock from loading to the first result. The last column is how many units fit in
``--memory`` bytes at the measured per-unit cost: the budgets in juliabridge/stablehlo/budget.py
are set at or below it (docs/reliability.md, "Module checks").

`--expansions` prints instead what each CHLO op with a decomposition expands to: the HLO
instructions of JAX's lowering of it once XLA has legalized it (`compiler_ir("hlo")`), the most
over f16, bf16, f32, f64 and complex64, less the parameter: budget.EXPANSION's weights.

`--times` prints the seconds and peak of loading and first calling n of each weighted CHLO op
(`special_module`: chained, and independent), each in its own process: with `--counts
admitted` (the default) n is the most the op budget admits of that op alone, the module the
compile-time bound (budget.COMPILE_TARGET_S) is about; with `--counts 100,300,900` the sizes
budget.COMPILE_SECONDS was derived from (docs/logs/compile-times.md).

Usage: python tools/calibrate_budgets.py [--backends lax,xla] [--quick] [--memory 2G]
       python tools/calibrate_budgets.py --expansions
       python tools/calibrate_budgets.py --times [--ops digamma,zeta] [--counts admitted]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def constant_module(n: int) -> str:
    """@main() -> tensor<nxf32>: one dense constant of n distinct-ish elements."""
    data = (bytes(range(1, 256)) * (4 * n // 255 + 1))[: 4 * n]
    t = f"tensor<{n}xf32>"
    return (
        f"module {{\n  func.func @main() -> {t} {{\n"
        f'    %0 = stablehlo.constant dense<"0x{data.hex().upper()}"> : {t}\n'
        f"    return %0 : {t}\n  }}\n}}\n"
    )


def case_module(n: int) -> str:
    """@main(i32, 4xf32): a case of n branches, branch k adding the constant k."""
    parts = [
        f"{{\n      %c{k} = stablehlo.constant dense<{float(k)}> : tensor<4xf32>\n"
        f"      %a{k} = stablehlo.add %x, %c{k} : tensor<4xf32>\n"
        f"      stablehlo.return %a{k} : tensor<4xf32>\n    }}"
        for k in range(n)
    ]
    return (
        "module {\n  func.func @main(%i: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {\n"
        f'    %r = "stablehlo.case"(%i) ({", ".join(parts)}) : (tensor<i32>) -> tensor<4xf32>\n'
        "    return %r : tensor<4xf32>\n  }\n}\n"
    )


def fanout_module(n: int) -> str:
    """@main(8xf32): levels of functions each calling the next twice (and adding the two
    results), a leaf of 16 chained `sine`s: about n ops once every call is inlined (17/16 n,
    n rounded down to 16 x a power of two)."""
    levels = max(0, (n // 16).bit_length() - 1)
    t = "tensor<8xf32>"
    fns = []
    for i in range(levels):
        fns.append(
            f"  func.func private @d{i}(%a: {t}) -> {t} {{\n"
            f"    %x = func.call @d{i + 1}(%a) : ({t}) -> {t}\n"
            f"    %y = func.call @d{i + 1}(%a) : ({t}) -> {t}\n"
            f"    %r = stablehlo.add %x, %y : {t}\n"
            f"    return %r : {t}\n  }}\n"
        )
    leaf = [f"    %s0 = stablehlo.sine %a : {t}\n"]
    leaf += [f"    %s{k} = stablehlo.sine %s{k - 1} : {t}\n" for k in range(1, 16)]
    fns.append(f"  func.func private @d{levels}(%a: {t}) -> {t} {{\n{''.join(leaf)}")
    fns[-1] += f"    return %s15 : {t}\n  }}\n"
    main = (
        f"  func.func @main(%a: {t}) -> {t} {{\n    %r = func.call @d0(%a) : ({t}) -> {t}\n"
        f"    return %r : {t}\n  }}\n"
    )
    return "module {\n" + "".join(fns) + main + "}\n"


_CHILD = """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, {repo!r})
    sys.setrecursionlimit(100_000)
    import juliabridge
    from tools.calibrate_budgets import {maker}
    text = {maker}({n}{extra})
    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    args = {{"case_module": (np.int32(1), np.zeros(4, np.float32)),
            "fanout_module": (np.zeros(8, np.float32),),
            "special_module": (np.full(8, 0.7, np.float32),)}}.get({maker!r}, ())
    t0 = time.monotonic()
    fn = juliabridge.load_mlir(text, backend={backend!r})
    out = fn(*args)
    np.asarray(out[0])
    print(json.dumps({{"seconds": time.monotonic() - t0, "peak": hwm()}}))
"""


def measure(backend: str, maker: str, n: int, env: dict[str, str], *extra: str) -> dict[str, float]:
    """Peak bytes and seconds of loading and first calling `maker(n, *extra)` on `backend`."""
    more = "".join(f", {e!r}" for e in extra)
    code = textwrap.dedent(
        _CHILD.format(repo=str(REPO), maker=maker, n=n, extra=more, backend=backend)
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=REPO,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"rc {proc.returncode}"]
        raise SystemExit(f"{backend} {maker}({n}) failed: {tail[0]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


UNITS: dict[str, tuple[str, Callable[[bool], tuple[int, int]]]] = {
    "constant element": ("constant_module", lambda q: (1 << 20, 1 << 22 if q else 1 << 23)),
    "case branch": ("case_module", lambda q: (100, 300 if q else 600)),
    "inlined op": ("fanout_module", lambda q: (1 << 12, 1 << 14 if q else 1 << 15)),
}


def expansions() -> dict[str, int]:
    """CHLO op -> HLO instructions its lowering expands to (the most over the float types)."""
    import jax

    x64 = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", True)  # restored: the tests share the process
    try:
        return _expansions()
    finally:
        jax.config.update("jax_enable_x64", x64)


def _expansions() -> dict[str, int]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    fns: dict[str, Callable[..., object]] = {
        "acos": lax.acos, "acosh": lax.acosh, "asin": lax.asin, "asinh": lax.asinh,
        "atan": lax.atan, "atanh": lax.atanh, "bessel_i1e": lax.bessel_i1e, "cosh": lax.cosh,
        "digamma": lax.digamma, "erf_inv": lax.erf_inv, "erfc": lax.erfc, "lgamma": lax.lgamma,
        "next_after": lambda x: lax.nextafter(x, x), "polygamma": lambda x: lax.polygamma(x, x),
        "sinh": lax.sinh, "zeta": lambda x: lax.zeta(x, x),
    }  # fmt: skip
    out: dict[str, int] = {}
    for name, fn in fns.items():
        most = 0
        for dtype in (np.float16, jnp.bfloat16, np.float32, np.float64, np.complex64):
            try:
                hlo = jax.jit(fn).lower(jnp.ones((8,), dtype)).compiler_ir("hlo").as_hlo_text()
            except (TypeError, ValueError):  # not defined on this type (complex)
                continue
            n = sum(1 for line in hlo.splitlines() if " = " in line and "parameter(" not in line)
            most = max(most, n)
        out[f"chlo.{name}"] = most
    return out


#: The binary special functions: (operand order, the constant operand) -- polygamma's order n
#: is the constant 1 (its x the chain), zeta's q the constant 2 (its x the chain).
_BINARY = {"polygamma": "n", "zeta": "q", "next_after": "y"}


def special_module(n: int, op: str = "digamma", shape: str = "chain") -> str:
    """@main(8xf32): n `op`s (a CHLO function, or any unary stablehlo op), either a chain (each
    applied to the last's result) or independent (each applied to the argument plus its own
    constant, the results summed)."""
    t = "tensor<8xf32>"
    if op == "sort":
        return sort_module(n)
    dialect = "stablehlo" if op in ("sine", "exponential", "log") else "chlo"

    def apply(dst: str, src: str) -> str:
        if dialect == "stablehlo":
            return f"    {dst} = stablehlo.{op} {src} : {t}\n"
        if op not in _BINARY:
            return f"    {dst} = chlo.{op} {src} : {t} -> {t}\n"
        a, b = ("%k", src) if _BINARY[op] == "n" else (src, "%k")
        return f"    {dst} = chlo.{op} {a}, {b} : {t}, {t} -> {t}\n"

    k = 1.0 if _BINARY.get(op) == "n" else 2.0
    lines = [f"    %k = stablehlo.constant dense<{k}> : {t}\n"]
    if shape == "chain":
        lines += [apply(f"%v{i + 1}", f"%v{i}") for i in range(n)]
        result = f"%v{n}"
    else:
        result = "%v0"
        for i in range(n):
            lines.append(f"    %c{i} = stablehlo.constant dense<{i}.5> : {t}\n")
            lines.append(f"    %a{i} = stablehlo.add %v0, %c{i} : {t}\n")
            lines.append(apply(f"%d{i}", f"%a{i}"))
            lines.append(f"    %s{i} = stablehlo.add {result}, %d{i} : {t}\n")
            result = f"%s{i}"
    return f"func.func @main(%v0: {t}) -> {t} {{\n{''.join(lines)}    return {result} : {t}\n}}\n"


#: The ops --times measures: every weighted CHLO function (the broadcast_ forms lower to the
#: same), stablehlo.sine, an op of weight 1, for comparison, and a sort of n operands (n x
#: budget.PER_OPERAND).
_TIMED = (
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i1e", "cosh", "digamma",
    "erf_inv", "erfc", "lgamma", "next_after", "polygamma", "sinh", "zeta", "sine", "sort",
)  # fmt: skip


def times(backends: list[str], ops: list[str], counts: str, shapes: list[str]) -> None:
    """Print seconds and peak of loading and first calling n of each op, each size in its own
    process; with counts 'admitted', n is the most the op budget admits (MAX_OPS // weight):
    the figure the budget's time bound (docs/reliability.md) is about."""
    sys.path.insert(0, str(REPO))
    from juliabridge.stablehlo.budget import EXPANSION, MAX_CHAIN, MAX_OPS, PER_OPERAND

    env = dict(os.environ, JAX_PLATFORMS="cpu", JULIABRIDGE_MAX_OPS=str(1 << 40))
    print(
        f"{'backend':8} {'op':12} {'shape':12} {'n':>6} {'weighted':>9} {'seconds':>8} {'peak':>8}"
    )
    for op in ops:
        weight = EXPANSION.get(f"chlo.{op}", PER_OPERAND["stablehlo.sort"] if op == "sort" else 1)
        # A sort is one op, not a chain; a chain of ops of weight 1 stops at MAX_CHAIN.
        admitted = MAX_OPS // weight if op == "sort" else min(MAX_OPS // weight, MAX_CHAIN)
        sizes = [admitted] if counts == "admitted" else [int(c) for c in counts.split(",")]
        for shape in shapes:
            for n in sizes:
                for backend in backends:
                    got = measure(backend, "special_module", n, env, op, shape)
                    print(
                        f"{backend:8} {op:12} {shape:12} {n:6} {n * weight:9,} "
                        f"{got['seconds']:8.1f} {int(got['peak']) >> 20:6} MB",
                        flush=True,
                    )


def sort_module(n: int) -> str:
    """@main(8xf32): one stablehlo.sort of the argument passed n times, ordered by the first
    (one op in the text, n operands and results, 2n comparator arguments)."""
    t, s = "tensor<8xf32>", "tensor<f32>"
    types = ", ".join([t] * n)
    args = ", ".join(f"%p{i}: {s}, %q{i}: {s}" for i in range(n))
    return (
        f"func.func @main(%v0: {t}) -> {t} {{\n"
        f'  %r:{n} = "stablehlo.sort"({", ".join(["%v0"] * n)}) '
        "<{dimension = 0 : i64, is_stable = true}> ({\n"
        f"  ^bb0({args}):\n"
        f"    %lt = stablehlo.compare LT, %p0, %q0 : ({s}, {s}) -> tensor<i1>\n"
        "    stablehlo.return %lt : tensor<i1>\n"
        f"  }}) : ({types}) -> ({types})\n"
        f"  return %r#{n - 1} : {t}\n}}\n"
    )


def _bytes(text: str) -> int:
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    unit = text[-1] if text[-1:] in mult and text[-1:] else ""
    return int(float(text[: len(text) - len(unit)]) * mult[unit])


def main() -> None:
    """Print the table: backend, unit, the two sizes, bytes and seconds per unit, units in
    --memory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="lax,xla")
    parser.add_argument("--quick", action="store_true", help="smaller second sizes")
    parser.add_argument("--memory", default="2G", help="the peak memory the budgets keep under")
    parser.add_argument("--expansions", action="store_true", help="CHLO expansion weights")
    parser.add_argument(
        "--times",
        action="store_true",
        help="seconds to load and first call n special functions (chained and independent)",
    )
    parser.add_argument("--ops", default=",".join(_TIMED), help="for --times")
    parser.add_argument(
        "--counts", default="admitted", help="for --times: n, comma-separated, or 'admitted'"
    )
    parser.add_argument("--shapes", default="chain,independent", help="for --times")
    opts = parser.parse_args()
    if opts.expansions:
        for name, n in expansions().items():
            print(f"{name:20} {n:6}")
        return
    if opts.times:
        times(opts.backends.split(","), opts.ops.split(","), opts.counts, opts.shapes.split(","))
        return
    memory = _bytes(opts.memory)
    # Budgets off in the children: they measure past the limits being calibrated.
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        JULIABRIDGE_MAX_OPS=str(1 << 40),
        JULIABRIDGE_MAX_CASE_BRANCHES=str(1 << 40),
    )
    print(
        f"{'backend':8} {'unit':17} {'sizes':>17} {'bytes/unit':>11} {'s/unit':>10} "
        f"{'units in ' + opts.memory:>12}"
    )
    for backend in opts.backends.split(","):
        for unit, (maker, sizes) in UNITS.items():
            small, large = sizes(opts.quick)
            a = measure(backend, maker, small, env)
            b = measure(backend, maker, large, env)
            per_byte = max(b["peak"] - a["peak"], 1) / (large - small)
            per_second = max(b["seconds"] - a["seconds"], 0.0) / (large - small)
            fits = int(max(memory - b["peak"] + per_byte * large, 0) / per_byte)
            print(
                f"{backend:8} {unit:17} {f'{small:,}->{large:,}':>17} {per_byte:11.1f} "
                f"{per_second:10.2e} {fits:12,}",
                flush=True,
            )


if __name__ == "__main__":
    main()
