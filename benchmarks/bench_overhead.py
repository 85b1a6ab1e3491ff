"""Call overhead: eager calls of an imported small MLP vs a call of the jitted native function.

    python benchmarks/bench_overhead.py [--repeats 31] [--backends lax enzyme xla]

The model is tiny (Lux ``Chain(Dense(4 => 16, relu), Dense(16 => 3))``, batch 5), so the
time per call is almost all Python and dispatch. Timed side by side, each call waiting for its
result:

- ``native jit``: ``f(params, x)`` with ``f = jax.jit(native_forward)`` (the reference);
- ``model(x)``: an eager call of the imported LuxModel with its own weights;
- ``model.apply``: ``model.apply(params, state, x)`` eagerly;
- ``fn(*args)``: the ImportedFunction (``model.fn``, arrays in ``@main`` order) eagerly;
- ``jit(model.apply)``: the imported model under jax.jit, for comparison;
- ``fn.target.jit_primal``: the backend's cached jit of ``@main`` called directly, without
  the argument checks (internal; the floor of ``fn(*args)``).

Target (issue 13): ``model(x)`` and ``fn(*args)`` within 1.1x of the native jitted call.
``--profile`` adds a cProfile summary of the eager calls (where the time goes).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
from common import (
    DEFAULT_BACKENDS,
    dense_chain_case,
    interleaved,
    median,
    spread,
    table,
    us,
    verdict,
    write_json,
)

import juliabridge
from juliabridge.backends.enzyme import enzyme_available

TARGET = 1.1
HEADLINE = ("model(x)", "fn(*args)")


def flat_arguments(model: juliabridge.LuxModel, x: Any) -> list[Any]:
    """Arrays in @main order: the input, then parameter and state leaves (manifest order)."""
    from juliabridge.lux.trees import lookup

    out = []
    for a in model.manifest.arguments:
        tree = {"input": x, "parameter": model.params, "state": model.state}[a.role]
        out.append(lookup(tree, a.path, a.role) if a.role != "input" else x)
    return out


def profile(fn: Any, calls: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        jax.block_until_ready(fn())
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
    return buf.getvalue()


def components(model: juliabridge.LuxModel, flat: list[Any]) -> dict[str, float]:
    """Seconds per call of fn(*args) and of its steps (no device work, no blocking)."""
    from juliabridge.function import check_call_args

    fn = model.fn
    steps = {
        "fn(*args), whole (not waited for)": lambda: fn(*flat),
        "_check_x64": fn._check_x64,
        "fn._eager, the checked jit (not waited for)": lambda: fn._eager(*flat),
        "target.jit_primal, unchecked (not waited for)": lambda: fn.target.jit_primal(*flat),
        "check_call_args (numpy arguments and tracers only)": lambda: check_call_args(
            flat, fn.module.arguments, fn.arg_labels, fn.module.origin
        ),
    }
    out = {}
    for name, step in steps.items():
        jax.block_until_ready(step())
        n = 2000
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                step()
            best = min(best, (time.perf_counter() - t) / n)
        jax.block_until_ready(step())
        out[name] = best
    return out


def measure(case: Any, backend: str, repeats: int, want_profile: bool) -> dict[str, Any]:
    model = juliabridge.import_lux(case.bundle, backend=backend)
    x = jax.device_put(case.x)
    native_params = jax.device_put(case.params)
    native = jax.jit(case.forward)
    flat = flat_arguments(model, x)
    jit_apply = jax.jit(model.apply)
    fns = {
        "native jit": lambda: native(native_params, x),
        "model(x)": lambda: model(x),
        "model.apply": lambda: model.apply(model.params, model.state, x),
        "fn(*args)": lambda: model.fn(*flat),
        "jit(model.apply)": lambda: jit_apply(model.params, model.state, x),
        # What fn(*args) costs without its argument checks and primitive bind: the backend's
        # cached jax.jit of @main, called directly (internal; shows where the overhead sits).
        "fn.target.jit_primal": lambda: model.fn.target.jit_primal(*flat),
    }
    samples = interleaved(fns, repeats=repeats, target_s=0.02)
    base = median(samples["native jit"])
    rows = {
        name: {
            "seconds": median(s),
            "ratio": median(s) / base,
            "iqr": spread(s),
            "samples": s,
        }
        for name, s in samples.items()
    }
    result: dict[str, Any] = {
        "backend": backend,
        "model": case.description,
        "variants": rows,
        "components": components(model, flat),
    }
    if want_profile:
        result["profiles"] = {name: profile(fns[name], 2000) for name in HEADLINE}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=31, help="timing samples per variant")
    parser.add_argument("--backends", nargs="+", default=list(DEFAULT_BACKENDS))
    parser.add_argument("--profile", action="store_true", help="print cProfile summaries")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    backends = [b for b in args.backends if b != "enzyme" or enzyme_available()]
    work = Path(tempfile.mkdtemp(prefix="juliabridge-bench-overhead-"))
    try:
        small = dense_chain_case(work)
        results = [measure(small, b, args.repeats, args.profile) for b in backends]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for r in results:
        for name, v in r["variants"].items():
            rows.append(
                [
                    r["backend"],
                    name,
                    us(v["seconds"]),
                    f"{v['ratio']:.2f}",
                    f"±{v['iqr'] * 50:.1f}%",
                    verdict(v["ratio"], TARGET, at_most=True) if name in HEADLINE else "",
                ]
            )
    print(
        table(
            ["backend", "call", "µs per call", "vs native jit", "noise (IQR/2)", f"<= {TARGET}"],
            rows,
            title=f"Call overhead, {results[0]['model']} (median per call)",
        )
    )
    comp_rows = [
        [r["backend"], name, us(sec)] for r in results for name, sec in r["components"].items()
    ]
    print()
    print(
        table(
            ["backend", "step of fn(*args)", "µs per call (best of 5)"],
            comp_rows,
            title="Where eager fn(*args) time goes",
        )
    )
    if args.profile:
        for r in results:
            for name, text in r.get("profiles", {}).items():
                print(f"\n--- cProfile, backend={r['backend']}, {name}, 2000 calls ---\n{text}")
    path = write_json(
        "overhead",
        {"target_ratio_at_most": TARGET, "repeats": args.repeats, "results": results},
        args.out,
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
