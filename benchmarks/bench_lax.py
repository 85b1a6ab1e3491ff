"""The lax backend: batching, a large conv+BatchNorm network, and lift/compile cost.

    python benchmarks/bench_lax.py [--repeats 21] [--quick]

1. vmap: `jax.vmap` of a LeNet bundle traced for ONE sample over 64 samples, and 64 samples
   through a bundle traced for 4 (split into 16 chunks), each vs the native LeNet at batch 64
   (target <= 1.2), on the lax backend and, for comparison, on xla (a loop there).
2. A conv+BatchNorm network of >= 1,000 StableHLO ops: jitted forward and gradient on lax vs
   native JAX (target <= 1.05).
3. Lift cost: seconds per 1,000 ops to lift modules of growing size, and for a 20,000-op module
   lift + first compile on lax vs construction + first compile on xla (target <= 2x).
Outputs are checked equal to native before anything is timed.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    agreement_tolerance,
    cross_entropy,
    interleaved,
    lenet_case,
    lenet_forward,
    median,
    ms,
    table,
    verdict,
    write_json,
)

import juliabridge
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.examples import luxmodels as lux
from juliabridge.stablehlo import parse_module

VMAP_TARGET = 1.2
PARITY_TARGET = 1.05
LIFT_TARGET = 2.0


# --- 1. batching ------------------------------------------------------------------------


def bench_vmap(work: Path, repeats: int, backends: list[str]) -> list[dict[str, Any]]:
    big = lenet_case(work / "b64", batch=64)
    one = lenet_case(work / "b1", batch=1)
    four = lenet_case(work / "b4", batch=4)
    x = jax.device_put(big.x)
    native = jax.jit(lenet_forward)
    want = np.asarray(native(big.params, x))
    rows = []
    for backend in backends:
        m1 = juliabridge.import_lux(one.bundle, backend=backend)
        m4 = juliabridge.import_lux(four.bundle, backend=backend)
        vmapped = jax.jit(
            lambda p, x, m=m1: jax.vmap(lambda xi: m.apply(p, m.state, xi[None])[0][0])(x)
        )
        chunked = jax.jit(lambda p, x, m=m4: m.apply(p, m.state, x)[0])
        for what, fn, model in (
            ("vmap 64 x bundle(1)", vmapped, m1),
            ("64 through bundle(4)", chunked, m4),
        ):
            tol = agreement_tolerance(1e-4)
            np.testing.assert_allclose(np.asarray(fn(model.params, x)), want, rtol=tol, atol=tol)
            s = interleaved(
                {
                    "imported": lambda f=fn, p=model.params: f(p, x),
                    "native": lambda: native(big.params, x),
                },
                repeats=repeats,
            )
            ti, tn = median(s["imported"]), median(s["native"])
            rows.append(
                {
                    "what": what,
                    "backend": backend,
                    "imported_s": ti,
                    "native_s": tn,
                    "ratio": ti / tn,
                }
            )
    return rows


# --- 2. a conv + BatchNorm network ------------------------------------------------------


def convbn_forward(ps: Any, st: Any, x: jax.Array, blocks: int) -> tuple[jax.Array, Any]:
    """`blocks` x (Conv 3x3 same-padding, BatchNorm test mode, relu), then mean-pool + Dense."""
    h = x
    for i in range(blocks):
        w = ps[f"conv_{i}"]["weight"]
        h = jax.lax.conv_general_dilated(
            h, w[:, :, ::-1, ::-1], (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
        )
        h = h + ps[f"conv_{i}"]["bias"][None, :, None, None]
        h, _ = lux.batchnorm_test(h, ps[f"bn_{i}"], st[f"bn_{i}"])
        h = lux.relu(h)
    h = jnp.mean(h, axis=(2, 3))
    return lux.dense(h, ps["head"]["weight"], ps["head"]["bias"]), st


def convbn_bundle(
    work: Path, *, blocks: int, channels: int, batch: int
) -> tuple[Path, Any, Any, np.ndarray]:
    rng = np.random.default_rng(0)
    ps: dict[str, Any] = {}
    st: dict[str, Any] = {}
    c_in = 3
    for i in range(blocks):
        ps[f"conv_{i}"] = {
            "weight": (rng.standard_normal((channels, c_in, 3, 3)) / np.sqrt(9 * c_in)).astype(
                np.float32
            ),
            "bias": np.zeros(channels, np.float32),
        }
        ps[f"bn_{i}"] = {
            "scale": np.ones(channels, np.float32),
            "bias": np.zeros(channels, np.float32),
        }
        st[f"bn_{i}"] = {
            "running_mean": (0.1 * rng.standard_normal(channels)).astype(np.float32),
            "running_var": (1 + 0.1 * rng.random(channels)).astype(np.float32),
        }
        c_in = channels
    ps["head"] = {
        "weight": (rng.standard_normal((channels, 10)) / np.sqrt(channels)).astype(np.float32),
        "bias": np.zeros(10, np.float32),
    }
    x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
    spec = lux._describe(  # the same flattening and lowering as the shipped examples
        name="convbn",
        lux_source=f"{blocks} x (Conv(3x3, pad=1) + BatchNorm + relu), mean-pool, Dense",
        mode="test",
        forward=lambda x, ps, st: convbn_forward(ps, st, x, blocks),
        x=x,
        ps=ps,
        st=st,
        samples_independent=True,
    )
    path = write_bundle(
        work / "convbn.bundle",
        BundleDescription(
            name=spec.name,
            mlir_text=spec.mlir_text,
            arguments=[ArgumentSpec(a.role, a.path, a.value, a.batch_axis) for a in spec.arguments],
            result_paths=spec.result_paths,
            aliases=spec.aliases,
            mode="test",
            batch={"size": batch, "samples_independent": True},
            example_outputs=spec.run(),
            result_batch_axes=spec.result_batch_axes,
            empty=spec.empty,
        ),
        overwrite=True,
    )
    return path, ps, st, x


def bench_convbn(work: Path, repeats: int, blocks: int) -> list[dict[str, Any]]:
    path, ps, st, x = convbn_bundle(work, blocks=blocks, channels=16, batch=8)
    model = juliabridge.import_lux(path, backend="lax")
    n_ops = sum(1 for line in parse_module(path / "model.mlir").text.splitlines() if " = " in line)
    labels = jnp.arange(8) % 10
    nat_fwd = jax.jit(lambda p, x: convbn_forward(p, st, x, blocks)[0])
    imp_fwd = jax.jit(lambda p, x: model.apply(p, model.state, x)[0])
    nat_grad = jax.jit(
        jax.grad(lambda p, x: cross_entropy(convbn_forward(p, st, x, blocks)[0], labels))
    )
    imp_grad = jax.jit(
        jax.grad(lambda p, x: cross_entropy(model.apply(p, model.state, x)[0], labels))
    )
    tol = agreement_tolerance(1e-4)
    np.testing.assert_allclose(imp_fwd(model.params, x), nat_fwd(ps, x), rtol=tol, atol=tol / 10)
    for a, b in zip(jax.tree.leaves(imp_grad(model.params, x)), jax.tree.leaves(nat_grad(ps, x))):
        np.testing.assert_allclose(a, b, rtol=max(tol, 1e-3), atol=tol / 10)
    rows = []
    for what, imp, nat in (("forward", imp_fwd, nat_fwd), ("grad", imp_grad, nat_grad)):
        s = interleaved(
            {"imported": lambda f=imp: f(model.params, x), "native": lambda f=nat: f(ps, x)},
            repeats=repeats,
        )
        ti, tn = median(s["imported"]), median(s["native"])
        rows.append(
            {"what": what, "ops": n_ops, "imported_s": ti, "native_s": tn, "ratio": ti / tn}
        )
    return rows


# --- 3. lift cost -----------------------------------------------------------------------


T = "tensor<64x64xf32>"


#: Dependent ops per chain: below the 10,000 parse_module admits (XLA recurses along a chain).
LANE_OPS = 8000


def chain_module(n_ops: int) -> str:
    """A module of about `n_ops` ops: chains of dot_general, add, tanh and multiply on 64x64 f32.

    Longer modules are split into independent chains (each starting from a different constant,
    so XLA cannot merge them) summed at the end, since one chain of more than 10,000 dependent
    ops is refused at load (JULIABRIDGE_MAX_CHAIN).
    """
    lanes = -(-n_ops // LANE_OPS)
    lines = [
        "module {",
        f"  func.func @main(%a: {T}, %w: {T}) -> {T} {{",
    ]
    ends = []
    for j in range(lanes):
        lines += [
            f"    %c{j} = stablehlo.constant dense<{j}.0> : {T}",
            f"    %l{j} = stablehlo.add %a, %c{j} : {T}",
        ]
        prev = f"%l{j}"
        for i in range(max(1, (n_ops // lanes - 2) // 4)):
            k = f"{j}_{i}"
            lines += [
                f"    %d{k} = stablehlo.dot_general {prev}, %w, contracting_dims = [1] x [0] : "
                f"({T}, {T}) -> {T}",
                f"    %s{k} = stablehlo.add %d{k}, {prev} : {T}",
                f"    %t{k} = stablehlo.tanh %s{k} : {T}",
                f"    %m{k} = stablehlo.multiply %t{k}, %a : {T}",
            ]
            prev = f"%m{k}"
        ends.append(prev)
    total = ends[0]
    for j, end in enumerate(ends[1:]):
        lines.append(f"    %sum{j} = stablehlo.add {total}, {end} : {T}")
        total = f"%sum{j}"
    lines += [f"    return {total} : {T}", "  }", "}"]
    return "\n".join(lines)


def op_count(text: str) -> int:
    """StableHLO ops in a module text (one per line, `return` excluded)."""
    return sum(1 for line in text.splitlines() if "= stablehlo." in line)


def bench_lift(sizes: list[int], big: int) -> dict[str, Any]:
    from juliabridge.backends import LaxBackend

    per_1000 = []
    for n in sizes:
        text = chain_module(n)
        module = parse_module(text)
        t = time.perf_counter()
        LaxBackend(module)
        ops = op_count(text)
        per_1000.append({"ops": ops, "lift_s_per_1000_ops": (time.perf_counter() - t) / ops * 1000})
    a = np.ones((64, 64), np.float32) * 0.01
    text = chain_module(big)
    t = time.perf_counter()
    fn = juliabridge.load_mlir(text, backend="lax")
    lax_out = jax.block_until_ready(jax.jit(fn)(a, a))
    lax_s = time.perf_counter() - t
    t = time.perf_counter()
    fx = juliabridge.load_mlir(text, backend="xla")
    xla_out = jax.block_until_ready(jax.jit(fx)(a, a))
    xla_s = time.perf_counter() - t
    tol = agreement_tolerance(1e-4)
    np.testing.assert_allclose(
        np.asarray(lax_out[0]), np.asarray(xla_out[0]), rtol=tol, atol=tol / 10
    )
    return {
        "sizes": per_1000,
        "big_ops": op_count(text),
        "lax_s": lax_s,
        "xla_s": xla_s,
        "ratio": lax_s / xla_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="juliabridge-bench-lax-"))
    try:
        vmap_rows = bench_vmap(work, args.repeats, ["lax", "xla"])
        # 42 blocks: ~1,025 ops (about 24 per block), the >= 1,000 the docstring promises.
        conv_rows = bench_convbn(work, args.repeats, blocks=6 if args.quick else 42)
        lift = bench_lift(
            [1000, 4000] if args.quick else [1000, 5000, 20000], 2000 if args.quick else 20000
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        table(
            [
                "batching",
                "backend",
                "imported ms",
                "native ms (batch 64)",
                "ratio",
                f"target <= {VMAP_TARGET}",
            ],
            [
                [
                    r["what"],
                    r["backend"],
                    ms(r["imported_s"]),
                    ms(r["native_s"]),
                    f"{r['ratio']:.3f}",
                    verdict(r["ratio"], VMAP_TARGET, at_most=True),
                ]
                for r in vmap_rows
            ],
            title="Batching: 64 LeNet samples",
        )
    )
    print(
        table(
            [
                "conv+BN network",
                "StableHLO ops",
                "imported ms",
                "native ms",
                "ratio",
                f"target <= {PARITY_TARGET}",
            ],
            [
                [
                    r["what"],
                    r["ops"],
                    ms(r["imported_s"]),
                    ms(r["native_s"]),
                    f"{r['ratio']:.3f}",
                    verdict(r["ratio"], PARITY_TARGET, at_most=True),
                ]
                for r in conv_rows
            ],
            title="A conv+BatchNorm network on the lax backend (jitted)",
        )
    )
    print(
        table(
            ["module ops", "lift s / 1,000 ops"],
            [[r["ops"], f"{r['lift_s_per_1000_ops']:.3f}"] for r in lift["sizes"]],
            title="Lift time",
        )
    )
    print(
        f"\n{lift['big_ops']}-op module, load + first jitted call: lax {lift['lax_s']:.2f} s, "
        f"xla {lift['xla_s']:.2f} s, ratio {lift['ratio']:.2f} "
        f"({verdict(lift['ratio'], LIFT_TARGET, at_most=True)} <= {LIFT_TARGET})"
    )
    path = write_json("lax", {"vmap": vmap_rows, "convbn": conv_rows, "lift": lift}, args.out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
