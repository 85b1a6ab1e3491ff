"""The benchmark scripts that start a fresh process per sample run at a tiny size (see
tests/benchmark_runs.py; a file of their own so that a second xdist worker takes them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.benchmark_runs import FRESH_PROCESSES, REPO, SHARE_OF, run_script
from tests.ci_share import skip_unless_mine


def _git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    head = ["git", "-C", str(REPO), "rev-parse", "--verify", "HEAD"]
    return subprocess.run(head, capture_output=True, check=False).returncode == 0


@pytest.mark.parametrize("script", FRESH_PROCESSES)
def test_the_benchmark_script_runs_at_a_tiny_size(script: str, tmp_path: Path) -> None:
    skip_unless_mine(SHARE_OF[script], f"benchmarks/{script}'s tiny run")
    if script == "bench_import_ab.py" and not _git_checkout():
        pytest.skip("bench_import_ab.py checks out --base HEAD: needs git and a git checkout")
    run_script(script, tmp_path)
