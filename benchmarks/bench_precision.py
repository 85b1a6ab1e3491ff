"""Agreement with Julia's outputs under each matmul precision, on the device JAX picks.

    python benchmarks/bench_precision.py [--backends lax xla] [--out DIR]

For the shipped LeNet bundle (its reference outputs are f32 values computed on a CPU), it runs
`juliabridge.verify` under each `jax.default_matmul_precision` setting and reports the largest
absolute and relative error per backend. On a CPU every setting gives the same f32 products; on
a TPU the platform default is one bf16 pass per f32 product. The lax backend defers a module's
DEFAULT precision to the setting (docs/lax-backend.md); xla and enzyme run the precision written
in the module, so the setting changes nothing there. Not a timing: the figures are errors.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
from common import table, write_json

import juliabridge
from juliabridge.backends.enzyme import enzyme_available
from juliabridge.examples import lenet_bundle

#: None is the platform's default; the others are names jax.default_matmul_precision takes.
SETTINGS = ("highest", None, "float32", "bfloat16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ["lax", "xla"] + (["enzyme"] if enzyme_available() else [])
    parser.add_argument("--backends", nargs="+", default=default)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    rows, results = [], []
    for setting in SETTINGS:
        for backend in args.backends:
            report = juliabridge.verify(lenet_bundle(), backend=backend, matmul_precision=setting)
            worst = max(report.checks, key=lambda c: c.max_rel)
            results.append(
                {
                    "matmul_precision": setting,
                    "backend": report.backend,
                    "max_abs": worst.max_abs,
                    "max_rel": worst.max_rel,
                    "ok": report.ok,
                }
            )
            verdict = "within the bundle's tolerance" if report.ok else "MISMATCH"
            rows.append(
                [
                    str(setting),
                    report.backend,
                    f"{worst.max_abs:.3g}",
                    f"{worst.max_rel:.3g}",
                    verdict,
                ]
            )
    platform = jax.devices()[0].platform
    headers = ["matmul_precision", "backend", "max abs err", "max rel err", "verify"]
    print(table(headers, rows, f"LeNet bundle vs Julia's f32 outputs on {platform}"))
    path = write_json("precision", {"platform": platform, "results": results}, args.out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
