"""Cost of the compile deadline (backends/deadline.py) on a first call: an untrusted module
that could compile for long is compiled first in a child process under the deadline, then
again in this one; a trusted module (trust=True) skips the child.

Each variant runs in a fresh process (so the first compile is a real one): load plus first
call of a chain of N complex sqrt (complex element types send a module to the child), with
trust=True and without. Reported: the medians and their ratio, untrusted over trusted.

    python benchmarks/bench_compile_deadline.py [--ops 4] [--repeats 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, median, table, write_json

CHILD = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {repo!r})
    import numpy as np
    import juliabridge
    n, trust = int(sys.argv[1]), sys.argv[2] == "1"
    T = "tensor<4xcomplex<f32>>"
    body = "\\n".join(f"    %v{{i + 1}} = stablehlo.sqrt %v{{i}} : {{T}}" for i in range(n))
    text = (f"module @m {{{{\\n  func.func public @main(%v0: {{T}}) -> {{T}} {{{{\\n{{body}}\\n"
            f"    return %v{{n}} : {{T}}\\n  }}}}\\n}}}}\\n")
    t0 = time.perf_counter()
    fn = juliabridge.load_mlir(text, backend="xla", trust=trust)
    t1 = time.perf_counter()
    np.asarray(fn(np.ones(4, np.complex64))[0])
    t2 = time.perf_counter()
    print(json.dumps({{"load_s": t1 - t0, "first_call_s": t2 - t1, "total_s": t2 - t0}}))
    """
)


def one(ops: int, trust: bool) -> dict[str, float]:
    """Load plus first call in a fresh process."""
    code = CHILD.format(repo=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", code, str(ops), "1" if trust else "0"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Measure and write compile_deadline.json."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=4, help="chained complex sqrt (default 4)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    samples: dict[str, list[dict[str, float]]] = {"trusted": [], "untrusted": []}
    for _ in range(args.repeats):  # interleaved, so drift hits both alike
        for name in samples:
            samples[name].append(one(args.ops, trust=name == "trusted"))
    medians = {n: median([s["total_s"] for s in v]) for n, v in samples.items()}
    ratio = medians["untrusted"] / medians["trusted"]
    print(
        table(
            ["variant", "load + first call (median s)"],
            [[n, f"{m:.2f}"] for n, m in medians.items()],
            f"compile deadline, {args.ops} chained complex sqrt, {args.repeats} fresh processes",
        )
    )
    print(f"untrusted / trusted: {ratio:.2f}")
    write_json(
        "compile_deadline",
        {
            "ops": args.ops,
            "repeats": args.repeats,
            "medians_s": medians,
            "ratio_untrusted_over_trusted": ratio,
            "samples": samples,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
