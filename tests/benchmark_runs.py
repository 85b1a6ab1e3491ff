"""Every benchmarks/bench_*.py at a tiny size, so none rots (the smoke runs of CI).

A script runs in its own process (``sys.executable``, from the repository root, results to a
temporary ``--out``) under a timeout; the check is that it exits 0 and writes its results JSON
with the keys its figures live under. The figures themselves are never checked: performance
claims are ratios the scripts report, not test assertions. The two test files
``tests/test_benchmark_scripts.py`` and ``tests/test_benchmark_scripts_processes.py`` split the
scripts between them so that pytest-xdist (``--dist loadfile``) gives each half to its own
worker; the first also checks that every ``benchmarks/bench_*.py`` is listed here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"

#: Keys common.write_json puts in every results file.
COMMON_KEYS = ("benchmark", "command", "time_utc", "machine")

#: Seconds one script may take before the test fails (far above a tiny run on 2 loaded cores).
TIMEOUT_S = 420


@dataclass(frozen=True)
class SmokeRun:
    """How one benchmark script runs at a tiny size, and what its results file must hold."""

    args: tuple[str, ...]
    results: str  # NAME of the NAME.json it writes into --out
    keys: tuple[str, ...]  # top-level keys besides COMMON_KEYS


#: Tiny-size arguments per script (each also gets `--out DIR`). Backends are left at the
#: scripts' default (lax, enzyme, xla; the scripts skip enzyme where enzyme-ad does not import),
#: except compile's: xla alone still runs every kind of row (its scipy.linalg row is xla's) in 9
#: fresh processes instead of 14.
RUNS: dict[str, SmokeRun] = {
    "bench_runtime.py": SmokeRun(
        ("--quick", "--repeats", "3"),
        "runtime",
        ("target_ratio_at_most", "repeats", "results"),
    ),
    "bench_overhead.py": SmokeRun(
        ("--repeats", "3"),
        "overhead",
        ("target_ratio_at_most", "repeats", "results"),
    ),
    "bench_lax.py": SmokeRun(("--quick", "--repeats", "3"), "lax", ("vmap", "convbn", "lift")),
    "bench_compile.py": SmokeRun(
        ("--quick", "--repeats", "1", "--models", "mlp", "--what", "forward", "--backends", "xla"),
        "compile",
        ("target_ratio_at_most", "repeats", "results"),
    ),
    "bench_loading.py": SmokeRun(
        ("--mb", "1", "--repeats", "1", "--no-npz", "--quick"),
        "loading",
        ("weight_bytes", "file_bytes", "repeats", "targets", "checks", "results", "profile"),
    ),
    "bench_import_ab.py": SmokeRun(
        ("--base", "HEAD", "--quick", "--repeats", "1"),
        "import_ab",
        ("base", "model", "repeats", "medians", "ratio_working_tree_over_base", "samples"),
    ),
    "bench_parse_memory.py": SmokeRun(("--mb", "0.05"), "parse_memory", ("mb", "results")),
    # Not a timing (errors per matmul precision); already small: the shipped LeNet bundle.
    "bench_precision.py": SmokeRun((), "precision", ("platform", "results")),
    # Three loads in fresh processes (one, then two jax.distributed ones twice).
    "bench_sharded_load.py": SmokeRun(
        ("--mb", "0.25", "--width", "128"),
        "sharded_load",
        ("weight_bytes", "target_ratio_at_most", "results"),
    ),
    # Two fresh pytest processes on one quick file of lax custom calls.
    "bench_test_cache.py": SmokeRun(
        ("--tests", "tests/lax/test_custom_call.py", "--repeats", "1"),
        "test_cache",
        ("tests", "repeats", "medians_s", "ratio_with_over_without", "samples_s"),
    ),
    # Two fresh processes: a 2-op complex chain, trusted and not (the child compile's cost).
    "bench_compile_deadline.py": SmokeRun(
        ("--ops", "2", "--repeats", "1"),
        "compile_deadline",
        ("ops", "repeats", "medians_s", "ratio_untrusted_over_trusted", "samples"),
    ),
}


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_script(
    script: str,
    out: Path,
    *,
    run: SmokeRun | None = None,
    folder: Path = BENCHMARKS,
    timeout_s: float = TIMEOUT_S,
) -> dict[str, object]:
    """Run `script` (in `folder`) at its tiny size (`run`, by default its RUNS entry) with
    results in `out`; its results JSON, or an AssertionError naming the script, with its exit
    status and the tail of its stderr."""
    run = RUNS[script] if run is None else run
    command = [sys.executable, str(folder / script), *run.args, "--out", str(out)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    # A session of its own, so a timeout ends the script's child processes too.
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(
            f"benchmarks/{script} ran over {timeout_s} s at its tiny size "
            f"({' '.join(run.args)}); stderr tail:\n{_tail(stderr)}"
        ) from None
    shown = f"benchmarks/{script} {' '.join(run.args)}"
    if proc.returncode != 0:
        raise AssertionError(
            f"{shown} exited {proc.returncode}; stderr tail:\n{_tail(stderr)}\n"
            f"stdout tail:\n{_tail(stdout, 10)}"
        )
    path = out / f"{run.results}.json"
    if not path.is_file():
        raise AssertionError(
            f"{shown} exited 0 but wrote no {path.name} into --out; stdout tail:\n"
            f"{_tail(stdout, 10)}"
        )
    data: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in (*COMMON_KEYS, *run.keys) if k not in data]
    if missing:
        raise AssertionError(f"{shown}: {path.name} lacks {missing}; it has {sorted(data)}")
    if data["benchmark"] != run.results:
        raise AssertionError(f"{shown}: {path.name} says benchmark={data['benchmark']!r}")
    return data


#: Which share of a split test run (tests/ci_share.py, JULIABRIDGE_TEST_SHARE) runs each
#: script's tiny run: the scripts that compare the enzyme backend in share 1 (CI's environment
#: A, the only one with enzyme-ad), the rest in share 2 (environment B, whose suite is shorter).
SHARE_OF = {
    "bench_runtime.py": 1,
    "bench_overhead.py": 1,
    "bench_precision.py": 1,
    "bench_compile.py": 2,  # its tiny run is --backends xla
    "bench_loading.py": 2,
    "bench_import_ab.py": 2,
    "bench_lax.py": 2,
    "bench_parse_memory.py": 2,
    "bench_test_cache.py": 2,
    "bench_sharded_load.py": 2,
    "bench_compile_deadline.py": 2,
}

#: The two halves, one per test file (about equal wall time at the tiny sizes): the scripts
#: that time in their own process, and those that start a fresh process per sample.
IN_PROCESS = (
    "bench_runtime.py",
    "bench_overhead.py",
    "bench_lax.py",
    "bench_parse_memory.py",
    "bench_precision.py",
)
FRESH_PROCESSES = (
    "bench_compile.py",
    "bench_loading.py",
    "bench_import_ab.py",
    "bench_test_cache.py",
    "bench_sharded_load.py",
    "bench_compile_deadline.py",
)
