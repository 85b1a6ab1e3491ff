"""Memory and time of the checks that run before a module reaches XLA, per byte of text.

Two measurements, each variant in a fresh process (peak RSS = VmHWM minus the RSS before the
measured call, so imports do not count):

1. ``parse_module`` of op-dense modules (a chain of adds, the densest text Reactant prints per
   op) and of constant-heavy ones (one large dense<"0x..."> literal): peak memory / text bytes.
   juliabridge.stablehlo.module.PARSE_BYTES_PER_TEXT_BYTE must stay above the worst ratio.
2. The bracket-nesting pre-scan on adversarial text (one long string literal, many empty
   strings, all brackets), new (numpy event scan) against the regex version it replaced,
   measured in the same run: peak bytes per text byte and MB/s.

    python benchmarks/bench_parse_memory.py [--mb 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, machine, table, write_json

CHILD = textwrap.dedent(
    """
    import json, re, sys, time
    sys.path.insert(0, {repo!r})
    def rss():
        s = open("/proc/self/status").read()
        get = lambda k: int(re.search(k + r":\\s+(\\d+)", s).group(1)) << 10
        return {{k: get(k) for k in ("VmRSS", "VmHWM")}}
    kind, mb, impl = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    n = int(mb * 1e6)
    if kind == "chain":
        ops = n // 56
        lines = ["module {{", "  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {{",
                 "    %v0 = stablehlo.add %arg0, %arg0 : tensor<8xf32>"]
        for i in range(1, ops):
            lines.append(f"    %v{{i}} = stablehlo.add %v{{i-1}}, %arg0 : tensor<8xf32>")
        lines += [f"    return %v{{ops-1}} : tensor<8xf32>", "  }}", "}}"]
        data = "\\n".join(lines)
    elif kind == "constant":
        k = n // 8
        t = f"tensor<{{k}}xf32>"
        data = ("module {{\\n  func.func public @main(%arg0: tensor<f32>) -> " + t + " {{\\n"
                "    %c = stablehlo.constant dense<\\"0x" + "0000803F" * k + "\\"> : " + t + "\\n"
                "    return %c : " + t + "\\n  }}\\n}}\\n")
    elif kind == "long_string":
        data = b'"' + b"x" * n + b'"'
    elif kind == "empty_strings":
        data = b'""' * (n // 2)
    else:
        data = b"(" * n
    import jax  # noqa: F401 - imported before the baseline like every variant
    import numpy as np  # noqa: F401
    if kind in ("chain", "constant"):
        import os
        # The default 8 MB chain holds about 143,000 ops, above the op budget (MAX_OPS): this
        # measures the parse and the checks, so both budgets are raised.
        os.environ["JULIABRIDGE_MAX_CHAIN"] = str(10**9)
        os.environ["JULIABRIDGE_MAX_OPS"] = str(10**9)
        from juliabridge.stablehlo import parse_module
        open("/proc/self/clear_refs", "w").write("5")
        before = rss()["VmRSS"]
        t = time.perf_counter()
        parse_module(data)
        dt = time.perf_counter() - t
        size = len(data.encode())
    else:
        if impl == "regex":
            import numpy as np
            skip = re.compile(rb'"(?:[^"\\\\\\n]|\\\\.)*"|//[^\\n]*')
            def run(d):
                d = skip.sub(b" ", d)
                return int(np.frombuffer(d, np.uint8).size)
        else:
            from juliabridge.stablehlo.nesting import MLIR_SKIP, max_depth
            def run(d):
                return max_depth(d, MLIR_SKIP)
        open("/proc/self/clear_refs", "w").write("5")
        before = rss()["VmRSS"]
        t = time.perf_counter()
        run(data)
        dt = time.perf_counter() - t
        size = len(data)
    peak = rss()["VmHWM"] - before
    print(json.dumps({{"bytes": size, "peak": peak, "seconds": dt}}))
    """
)


def run(kind: str, mb: float, impl: str = "new") -> dict[str, float]:
    """One fresh process: peak extra RSS and seconds for `kind` text of about `mb` MB."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(repo=str(REPO)), kind, str(mb), impl],
        capture_output=True,
        text=True,
        check=True,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Run both measurements and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=8.0, help="text size per variant (MB)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows, data = [], {}
    for kind in ("chain", "constant"):
        r = run(kind, args.mb)
        data[kind] = r
        rows.append(
            [
                kind,
                f"{r['bytes'] / 1e6:.1f}",
                f"{r['peak'] / r['bytes']:.1f}",
                f"{r['seconds']:.2f}",
            ]
        )
    print(table(["module", "text MB", "peak bytes / text byte", "s"], rows, "parse_module"))
    rows = []
    for kind in ("long_string", "empty_strings", "brackets"):
        for impl in ("regex", "new"):
            if impl == "regex" and kind == "brackets":
                continue
            r = run(kind, args.mb, impl)
            data[f"{kind}:{impl}"] = r
            rows.append(
                [
                    kind,
                    impl,
                    f"{r['peak'] / r['bytes']:.1f}",
                    f"{r['bytes'] / 1e6 / r['seconds']:.0f}",
                ]
            )
    print(table(["text", "scan", "peak bytes / text byte", "MB/s"], rows, "nesting pre-scan"))
    write_json("parse_memory", {"machine": machine(), "mb": args.mb, "results": data}, args.out)


if __name__ == "__main__":
    main()
