"""Runtime parity: an imported model vs the same model written natively in JAX, under jax.jit.

    python benchmarks/bench_runtime.py [--repeats 31] [--backends lax enzyme xla]

For LeNet-5 and an MLP, each with the same weights on both sides, it times the jitted forward
pass and the jitted gradient of a cross-entropy loss with respect to the parameters, on every
backend, interleaving imported and native calls, and reports the median time per call and the
ratio imported / native (target <= 1.05). Each call waits for its result. "same XLA ops"
compares the opcode counts of the two programs XLA compiled: "all" when every count matches,
"heavy" when fusions, dots, convolutions, reduce-windows, loops... match and only elementwise
ops differ (e.g. Enzyme's relu derivative needs fewer selects than JAX's), "no" otherwise.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import jax
import numpy as np
from common import (
    DEFAULT_BACKENDS,
    Case,
    cross_entropy,
    interleaved,
    lenet_case,
    median,
    mlp_case,
    ms,
    spread,
    table,
    verdict,
    write_json,
)

import juliabridge
from juliabridge.backends.enzyme import enzyme_available

TARGET = 1.05


def cases(directory: Path, quick: bool) -> list[Case]:
    if quick:
        return [
            lenet_case(directory, batch=8),
            mlp_case(directory, widths=[64, 128, 10], batch=16),
        ]
    return [
        lenet_case(directory, batch=64),
        mlp_case(directory, widths=[784, 1024, 1024, 10], batch=128),
    ]


_OPCODE = re.compile(r"=\s*[^\s=]+\s+([a-z][a-z0-9-]*)\(")


#: The ops that carry the arithmetic; elementwise ops differ (e.g. Enzyme's relu derivative
#: needs fewer selects than JAX's) without mattering for time.
HEAVY_OPS = (
    "convolution",
    "dot",
    "reduce-window",
    "select-and-scatter",
    "scatter",
    "gather",
    "sort",
    "while",
    "custom-call",
    "fusion",
)


def heavy(ops: dict[str, int]) -> dict[str, int]:
    return {k: ops.get(k, 0) for k in HEAVY_OPS}


def op_histogram(fn: Any, *args: Any) -> dict[str, int]:
    """Opcode counts of the XLA-optimised program, names and layouts ignored."""
    text = fn.lower(*args).compile().as_text()
    return dict(sorted(Counter(_OPCODE.findall(text)).items()))


def measure(case: Case, backend: str, repeats: int) -> list[dict[str, Any]]:
    model = juliabridge.import_lux(case.bundle, backend=backend)
    x = jax.device_put(case.x)
    labels = jax.device_put(case.labels)
    native_params = jax.device_put(case.params)
    state = model.state

    def imported_forward(p: Any, x: jax.Array) -> jax.Array:
        return model.apply(p, state, x)[0]

    def imported_loss(p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        return cross_entropy(imported_forward(p, x), y)

    def native_loss(p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        return cross_entropy(case.forward(p, x), y)

    imp_fwd = jax.jit(imported_forward)
    nat_fwd = jax.jit(case.forward)
    imp_grad = jax.jit(jax.grad(imported_loss))
    nat_grad = jax.jit(jax.grad(native_loss))

    # Same weights, same function: the outputs and gradients must agree before timing.
    np.testing.assert_allclose(
        imp_fwd(model.params, x), nat_fwd(native_params, x), rtol=1e-5, atol=1e-5
    )
    gi, gn = imp_grad(model.params, x, labels), nat_grad(native_params, x, labels)
    for a, b in zip(jax.tree.leaves(gi), jax.tree.leaves(gn)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

    rows = []
    for what, imp, nat, args_i, args_n in (
        ("forward", imp_fwd, nat_fwd, (model.params, x), (native_params, x)),
        ("grad", imp_grad, nat_grad, (model.params, x, labels), (native_params, x, labels)),
    ):
        ops_i, ops_n = op_histogram(imp, *args_i), op_histogram(nat, *args_n)
        samples = interleaved(
            {"imported": lambda f=imp, a=args_i: f(*a), "native": lambda f=nat, a=args_n: f(*a)},
            repeats=repeats,
        )
        ti, tn = median(samples["imported"]), median(samples["native"])
        rows.append(
            {
                "model": case.description,
                "backend": backend,
                "what": what,
                "imported_s": ti,
                "native_s": tn,
                "ratio": ti / tn,
                "same_compiled_ops": ops_i == ops_n,
                "same_heavy_ops": heavy(ops_i) == heavy(ops_n),
                "ops_imported": ops_i,
                "ops_native": ops_n,
                "iqr_imported": spread(samples["imported"]),
                "iqr_native": spread(samples["native"]),
                "samples_imported": samples["imported"],
                "samples_native": samples["native"],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=31, help="timing samples per variant")
    parser.add_argument("--backends", nargs="+", default=list(DEFAULT_BACKENDS))
    parser.add_argument("--quick", action="store_true", help="small models, for a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    backends = [b for b in args.backends if b != "enzyme" or enzyme_available()]
    work = Path(tempfile.mkdtemp(prefix="juliabridge-bench-runtime-"))
    try:
        results = []
        for case in cases(work, args.quick):
            for backend in backends:
                results += measure(case, backend, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        [
            r["model"],
            r["backend"],
            r["what"],
            ms(r["imported_s"]),
            ms(r["native_s"]),
            f"{r['ratio']:.3f}",
            f"±{max(r['iqr_imported'], r['iqr_native']) * 50:.1f}%",
            "all" if r["same_compiled_ops"] else "heavy" if r["same_heavy_ops"] else "no",
            verdict(r["ratio"], TARGET, at_most=True),
        ]
        for r in results
    ]
    print(
        table(
            [
                "model",
                "backend",
                "jitted",
                "imported ms",
                "native ms",
                "ratio",
                "noise (IQR/2)",
                "same XLA ops",  # all opcodes / only fusions, dots, convolutions...
                f"target <= {TARGET}",
            ],
            rows,
            title="Runtime parity: imported vs native JAX (median per call)",
        )
    )
    path = write_json(
        "runtime",
        {"target_ratio_at_most": TARGET, "repeats": args.repeats, "results": results},
        args.out,
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
