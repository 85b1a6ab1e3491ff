"""`import_lux` of one bundle under two juliabridge revisions, alternating fresh processes.

    python benchmarks/bench_import_ab.py --base REV [--repeats 24] [--model mlp|lenet] [--quick]
        [--out DIR]

What a change to the loading code buys is a few milliseconds of a load that varies by more
than that from one process to the next on a shared machine (and from one minute to the next),
so two runs at different times cannot show it. This script checks out `--base` into a
temporary git worktree and times, in alternating fresh processes (base, working tree, then
working tree, base, ...), `import_lux(bundle, backend="lax")` and then the first jitted
forward call, after the same warm-up in both (imports, one unrelated jitted function, one
`device_put`). Both import
the same bundle, written once by the working tree's writer (so `--base` must read its format).

Reported: the median, first quartile and spread of each phase per revision, the process CPU
time of `import_lux`, and the ratio working tree / base of the medians; every sample goes to
`benchmarks/results/import_ab.json` (`--out DIR` elsewhere). `--quick` uses a small model, for
a smoke test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def child(src: str, bundle: str, data: str) -> None:
    if src:
        # An editable install puts a finder for the working tree ahead of sys.path; drop it so
        # that `src` (the base revision's checkout) is the juliabridge imported.
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        sys.path.insert(0, src)
    import jax
    import jax.numpy as jnp
    import numpy as np

    import juliabridge

    jax.block_until_ready(jax.jit(lambda a: jnp.sin(a) @ a)(jnp.ones((8, 8))))
    x = jax.device_put(np.load(data)["x"])
    t0, c0 = time.perf_counter(), time.process_time()
    model = juliabridge.import_lux(bundle, backend="lax")
    t1, c1 = time.perf_counter(), time.process_time()
    jax.block_until_ready(jax.jit(model.apply)(model.params, model.state, x))
    t2 = time.perf_counter()
    print(
        json.dumps(
            {
                "file": juliabridge.__file__,
                "import": t1 - t0,
                "import_cpu": c1 - c0,
                "first_call": t2 - t1,
            }
        )
    )


def run(src: str, bundle: Path, data: Path) -> dict[str, Any]:
    from common import run_json_child

    args = ["--child", src, str(bundle), str(data)]
    return run_json_child(__file__, args, f"({src or 'working tree'})")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    import numpy as np
    from common import lenet_case, mlp_case, table, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git revision to compare against")
    parser.add_argument("--repeats", type=int, default=24, help="fresh processes per side")
    parser.add_argument("--model", choices=["mlp", "lenet"], default="mlp")
    parser.add_argument("--quick", action="store_true", help="a small model, for a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="juliabridge-bench-ab-"))
    base = work / "base"
    try:
        added = subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base],
            capture_output=True,
            text=True,
            check=False,
        )
        if added.returncode != 0:
            raise SystemExit(f"cannot check out {args.base!r}: {added.stderr.strip()}")
        case = (
            mlp_case(
                work,
                widths=[64, 128, 10] if args.quick else [784, 1024, 1024, 10],
                batch=16 if args.quick else 128,
            )
            if args.model == "mlp"
            else lenet_case(work, batch=8 if args.quick else 64)
        )
        data = work / "data.npz"
        np.savez(data, x=case.x)
        sides = {"base": str(base), "working tree": ""}
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
        run(sides["base"], case.bundle, data)  # warm-up: page cache, .pyc files
        run(sides["working tree"], case.bundle, data)
        for r in range(args.repeats):
            order = list(sides.items())
            for name, src in order[r % 2 :] + order[: r % 2]:  # who goes first alternates too
                got = run(src, case.bundle, data)
                expect = str(base) if src else str(REPO)
                if not got["file"].startswith(expect):
                    raise RuntimeError(f"{name} imported {got['file']}, not from {expect}")
                samples[name].append(got)
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(work, ignore_errors=True)

    def ms(values: list[float]) -> str:
        v = sorted(1e3 * x for x in values)
        return f"{statistics.median(v):.2f} (q1 {v[len(v) // 4]:.2f}, {v[0]:.1f}–{v[-1]:.1f})"

    rows = []
    medians: dict[str, dict[str, float]] = {}
    for name, runs in samples.items():
        medians[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "file"}
        rows.append(
            [name]
            + [ms([r[k] for r in runs]) for k in ("import", "import_cpu", "first_call")]
            + [f"{1e3 * statistics.median(r['import'] + r['first_call'] for r in runs):.2f}"]
        )
    ratios = {
        k: medians["working tree"][k] / medians["base"][k]
        for k in ("import", "import_cpu", "first_call")
    }
    rows.append(["working tree / base", *(f"{v:.3f}" for v in ratios.values()), ""])
    print(
        table(
            ["revision", "import_lux ms", "import_lux CPU ms", "first call ms", "sum ms"],
            rows,
            title=f"{case.description}: base {args.base} vs the working tree, median of "
            f"{args.repeats} alternating fresh processes each",
        )
    )
    path = write_json(
        "import_ab",
        {
            "base": args.base,
            "model": case.description,
            "repeats": args.repeats,
            "medians": medians,
            "ratio_working_tree_over_base": ratios,
            "samples": samples,
        },
        args.out,
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
