"""The test session's shared JAX compilation cache: wall time of test files with and without it.

    python benchmarks/bench_test_cache.py [--tests FILE ...] [--repeats 1] [--out DIR]

tests/conftest.py gives every pytest session a persistent JAX compilation cache of its own (a
temporary folder; `JULIABRIDGE_TEST_JAX_CACHE=off` runs without it). This runs the same test
files in a fresh `python -m pytest` process each way, alternating, and reports the median wall
time of each and their ratio (with / without; below 1 is a saving). Both runs start from an
empty cache, as a CI run does, so the saving is only from programs compiled more than once in
one session.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, table, write_json

#: Two files of fixture transformations and convolutions: many tests compile the same programs.
DEFAULT_TESTS = ("tests/lax/test_fixture_transforms.py", "tests/lax/test_conv.py")
#: Seconds one pytest run may take.
TIMEOUT_S = 1800


def run_pytest(tests: list[str], cache: bool) -> float:
    """Seconds one fresh pytest process takes on `tests`, with or without the cache.

    Raises:
        SystemExit: pytest failed or ran past TIMEOUT_S (its output's end is printed).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.pop("JULIABRIDGE_TEST_JAX_CACHE", None)  # a fresh, empty cache of the run's own
    if not cache:
        env["JULIABRIDGE_TEST_JAX_CACHE"] = "off"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    began = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired as e:
        raise SystemExit(f"{' '.join(cmd)}: ran past {TIMEOUT_S} s") from e
    took = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", nargs="+", default=list(DEFAULT_TESTS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(args.repeats):
        samples["without"].append(run_pytest(args.tests, cache=False))
        samples["with"].append(run_pytest(args.tests, cache=True))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    ratio = medians["with"] / medians["without"]
    rows = [[k, f"{medians[k]:.1f}", str(len(samples[k]))] for k in ("without", "with")]
    title = f"pytest {' '.join(args.tests)}: wall seconds, fresh process each"
    print(table(["compilation cache", "median s", "runs"], rows, title))
    print(f"\nwith / without: {ratio:.2f}")
    payload = {
        "tests": args.tests,
        "repeats": args.repeats,
        "medians_s": medians,
        "ratio_with_over_without": ratio,
        "samples_s": samples,
    }
    print(f"wrote {write_json('test_cache', payload, args.out)}")


if __name__ == "__main__":
    main()
