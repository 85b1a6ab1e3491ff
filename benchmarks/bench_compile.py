"""Import + first compile vs jax.jit compile of the native model.

    python benchmarks/bench_compile.py [--repeats 5] [--backends lax enzyme xla]

For LeNet-5 and an MLP, each sample runs in a fresh Python process (so no cache of an
earlier compile can help) that first imports the libraries and compiles an unrelated small
function (starting XLA is the same one-time cost for both sides) and places the example
inputs with ``jax.device_put`` (the first device_put of a process imports a JAX module), then
times one of:

- ``native``: ``jax.jit(native_forward)(params, x)`` until the result is ready (trace,
  lower, XLA compile, run); params are already JAX arrays;
- ``imported``: ``juliabridge.import_lux(bundle, backend=...)`` followed by the same first
  jitted call of ``model.apply`` (bundle checks, MLIR parse, weights read, backend set-up,
  trace, lower, XLA compile, run).

The xla backend's first call goes through ``jax.export``'s call lowering, which initialises
every backend's custom-call targets once per process, importing ``scipy.linalg`` (LAPACK) on
CPU; the row ``imported, scipy.linalg pre-imported [xla]`` shows the cost without that
one-time import (as in a process that already used ``jax.scipy`` or ``jnp.linalg``).

juliabridge reads a bundle's HDF5 metadata with its own pure-Python reader and the data with
``preadv``, in the importing process; the row ``imported, libhdf5 reader process`` sets
``JULIABRIDGE_HDF5_FASTPATH=0``, the route every bundle took before (libhdf5 in a sandboxed
process started for the load), to show what that route cost.

The rows ``compilation cache warm`` enable JAX's persistent compilation cache (opt-in, see
docs/benchmarks.md) in a directory one untimed run of the same variant filled: what a second
process start costs once the compiled programs are on disk, for the native model and the
imported one alike.

The ``grad`` rows do the same for the first call of ``jax.jit(jax.grad(loss))``; for the
imported model that includes deriving the gradient (Enzyme, or the xla backend's VJP module).
Target (issue 13): imported <= 1.3x native, forward and grad, on each backend (the verdict
column; the other rows explain). Reported: median over fresh processes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 1.3


# ----------------------------------------------------------------------------------------
# Child process


def child(spec: dict[str, Any]) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    if spec.get("cache_dir"):
        jax.config.update("jax_compilation_cache_dir", spec["cache_dir"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    from common import cross_entropy, lenet_forward, mlp_forward

    import juliabridge
    from juliabridge.backends.enzyme import enzyme_available

    enzyme_available()  # library import (enzyme_ad), not part of either measurement
    if spec.get("preimport_scipy"):
        import scipy.linalg  # noqa: F401  (what jax.export's first call imports, see below)
    jax.block_until_ready(jax.jit(lambda a: jnp.sin(a) @ a)(jnp.ones((8, 8))))  # start XLA
    forward = {"lenet": lenet_forward, "mlp": mlp_forward}[spec["kind"]]
    data = np.load(spec["data"])
    # Both variants place their inputs with device_put before the timer: JAX's first
    # device_put in a process imports jax.experimental.multihost_utils (~1 ms), which the
    # native variant's device_put of its params below would otherwise pay outside the timer
    # and the imported one (placing the weights it loads) inside it.
    x, labels = jax.device_put(data["x"]), jax.device_put(data["labels"])
    grad = spec["what"] == "grad"
    phases: dict[str, float] = {}
    if spec["variant"] == "native":
        from juliabridge import load_params

        params, _ = load_params(spec["bundle"])
        params = jax.device_put(params)
        jax.block_until_ready(params)
        t = time.perf_counter()
        if grad:
            f = jax.jit(jax.grad(lambda p, x, y: cross_entropy(forward(p, x), y)))
            jax.block_until_ready(f(params, x, labels))
        else:
            jax.block_until_ready(jax.jit(forward)(params, x))
        seconds = time.perf_counter() - t
    else:
        t = time.perf_counter()
        model = juliabridge.import_lux(spec["bundle"], backend=spec["backend"])
        imported = time.perf_counter()
        state = model.state
        if grad:
            f = jax.jit(jax.grad(lambda p, x, y: cross_entropy(model.apply(p, state, x)[0], y)))
            jax.block_until_ready(f(model.params, x, labels))
        else:
            jax.block_until_ready(jax.jit(model.apply)(model.params, state, x))
        seconds = time.perf_counter() - t
        phases = {"import_lux": imported - t, "first call": seconds - (imported - t)}
    print(json.dumps({"seconds": seconds, "phases": phases}))


# ----------------------------------------------------------------------------------------
# Parent


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    from common import run_json_child

    # libhdf5 in a reader process, as before
    env = {"JULIABRIDGE_HDF5_FASTPATH": "0"} if spec.get("libhdf5") else {}
    return run_json_child(__file__, ["--child", json.dumps(spec)], str(spec), env)


def _spec(
    kind: str,
    case: Any,
    data: Path,
    what: str,
    variant: str,
    backend: str | None,
    caches: dict[tuple[str, str | None], str],
) -> dict[str, Any]:
    return {
        "kind": kind,
        "bundle": str(case.bundle),
        "data": str(data),
        "what": what,
        "variant": "native" if variant.startswith("native") else "imported",
        "backend": backend,
        "preimport_scipy": "scipy" in variant,
        "libhdf5": "libhdf5" in variant,
        "cache_dir": caches.get((variant, backend)),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
        return
    import numpy as np
    from common import DEFAULT_BACKENDS, lenet_case, median, mlp_case, table, verdict, write_json

    from juliabridge.backends.enzyme import enzyme_available

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per variant")
    parser.add_argument("--backends", nargs="+", default=list(DEFAULT_BACKENDS))
    parser.add_argument("--quick", action="store_true", help="small models, for a smoke test")
    parser.add_argument(
        "--models", nargs="+", default=["lenet", "mlp"], choices=["lenet", "mlp"], help="models"
    )
    parser.add_argument(
        "--what", nargs="+", default=["forward", "grad"], choices=["forward", "grad"]
    )
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    backends = [b for b in args.backends if b != "enzyme" or enzyme_available()]
    work = Path(tempfile.mkdtemp(prefix="juliabridge-bench-compile-"))
    results = []
    try:
        makers = {
            "lenet": lambda: lenet_case(work, batch=8 if args.quick else 64),
            "mlp": lambda: mlp_case(
                work,
                widths=[64, 128, 10] if args.quick else [784, 1024, 1024, 10],
                batch=16 if args.quick else 128,
            ),
        }
        cases = [(kind, make()) for kind, make in makers.items() if kind in args.models]
        for kind, case in cases:
            data = work / f"{kind}_data.npz"
            np.savez(data, x=case.x, labels=case.labels)
            for what in args.what:
                variants: list[tuple[str, str | None]] = [("native", None)]
                variants += [("imported", b) for b in backends]
                if "xla" in backends:
                    variants.append(("imported, scipy.linalg pre-imported", "xla"))
                variants.append(("imported, libhdf5 reader process", backends[0]))
                variants.append(("native, compilation cache warm", None))
                variants += [("imported, compilation cache warm", b) for b in backends]
                times: dict[str, list[dict[str, Any]]] = {}
                caches = {}
                for variant, backend in variants:
                    if "cache" in variant:
                        key = f"{kind}-{what}-{variant}-{backend}"
                        caches[(variant, backend)] = str(work / "cache" / key.replace(" ", "_"))
                        run_child(_spec(kind, case, data, what, variant, backend, caches))
                for r in range(args.repeats):
                    order = variants[r % len(variants) :] + variants[: r % len(variants)]
                    for variant, backend in order:
                        spec = _spec(kind, case, data, what, variant, backend, caches)
                        key = variant if backend is None else f"{variant} [{backend}]"
                        times.setdefault(key, []).append(run_child(spec))
                native = median([s["seconds"] for s in times["native"]])
                for key, runs in times.items():
                    sec = median([s["seconds"] for s in runs])
                    phase_names = list(runs[0]["phases"])
                    results.append(
                        {
                            "model": case.description,
                            "what": what,
                            "variant": key,
                            "seconds": sec,
                            "ratio": sec / native,
                            "phases": {
                                n: median([s["phases"][n] for s in runs]) for n in phase_names
                            },
                            "runs": runs,
                        }
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        [
            r["model"],
            r["what"],
            r["variant"],
            f"{r['seconds']:.3f}",
            " + ".join(f"{v:.3f}" for v in r["phases"].values()) or "",
            f"{r['ratio']:.2f}",
            verdict(r["ratio"], TARGET, at_most=True)
            if r["variant"].startswith("imported [")
            else "",
        ]
        for r in results
    ]
    print(
        table(
            [
                "model",
                "first call",
                "variant",
                "seconds",
                "= import_lux + first call",
                "vs native",
                f"<= {TARGET}",
            ],
            rows,
            title=f"Import + first compile vs jax.jit of the native model (median of "
            f"{args.repeats} fresh processes)",
        )
    )
    path = write_json(
        "compile",
        {"target_ratio_at_most": TARGET, "repeats": args.repeats, "results": results},
        args.out,
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
