"""The benchmark scripts that time in their own process run at a tiny size (see
tests/benchmark_runs.py); and every benchmarks/bench_*.py has a tiny-size run listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmark_runs import BENCHMARKS, FRESH_PROCESSES, IN_PROCESS, RUNS, run_script


@pytest.mark.parametrize("script", IN_PROCESS)
def test_the_benchmark_script_runs_at_a_tiny_size(script: str, tmp_path: Path) -> None:
    run_script(script, tmp_path)


def test_every_benchmark_script_has_a_tiny_size_run() -> None:
    scripts = sorted(p.name for p in BENCHMARKS.glob("bench_*.py"))
    halves = [*IN_PROCESS, *FRESH_PROCESSES]
    assert len(halves) == len(set(halves)), f"a script listed in both halves: {halves}"
    assert sorted(halves) == sorted(RUNS), (
        "tests/benchmark_runs.py: IN_PROCESS + FRESH_PROCESSES must list exactly RUNS' scripts",
        sorted(halves),
        sorted(RUNS),
    )
    assert sorted(RUNS) == scripts, (
        "every benchmarks/bench_*.py needs a tiny-size run in tests/benchmark_runs.py RUNS "
        "(and a listed script must exist)",
        f"scripts: {scripts}",
        f"listed: {sorted(RUNS)}",
    )
