"""The benchmark scripts that time in their own process run at a tiny size (see
tests/benchmark_runs.py); and every benchmarks/bench_*.py has a tiny-size run listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmark_runs import (
    BENCHMARKS,
    FRESH_PROCESSES,
    IN_PROCESS,
    RUNS,
    SHARE_OF,
    SmokeRun,
    run_script,
)
from tests.ci_share import skip_unless_mine


@pytest.mark.parametrize("script", IN_PROCESS)
def test_the_benchmark_script_runs_at_a_tiny_size(script: str, tmp_path: Path) -> None:
    skip_unless_mine(SHARE_OF[script], f"benchmarks/{script}'s tiny run")
    run_script(script, tmp_path)


def test_every_benchmark_script_has_a_tiny_size_run() -> None:
    scripts = sorted(p.name for p in BENCHMARKS.glob("bench_*.py"))
    halves = [*IN_PROCESS, *FRESH_PROCESSES]
    assert len(halves) == len(set(halves)), f"a script listed in both halves: {halves}"
    assert sorted(SHARE_OF) == sorted(RUNS), "SHARE_OF must give every script of RUNS a share"
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


# --- planted scripts: the check fails, naming the script and showing why -----------------

PLANTED = {
    "crashes": (
        "import sys\nprint('a table', flush=True)\nsys.stderr.write('Traceback: boom\\n')\n"
        "sys.exit(3)\n",
        ["bench_planted.py --quick exited 3", "Traceback: boom"],
    ),
    "writes no results": ("print('wrote nothing')\n", ["exited 0 but wrote no planted.json"]),
    "lacks a key": (
        "import json, sys, pathlib\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1])\n"
        "(out / 'planted.json').write_text(json.dumps({'benchmark': 'planted', 'command': '',"
        " 'time_utc': '', 'machine': {}}))\n",
        ["planted.json lacks ['results']"],
    ),
    "hangs": (
        "import subprocess, sys, time\nsys.stderr.write('started\\n')\nsys.stderr.flush()\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n",
        ["bench_planted.py ran over 3 s", "started"],
    ),
}


@pytest.mark.parametrize("case", PLANTED)
def test_a_failing_script_fails_the_check_with_its_name_and_stderr(
    case: str, tmp_path: Path
) -> None:
    source, wanted = PLANTED[case]
    (tmp_path / "bench_planted.py").write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    run = SmokeRun(("--quick",), "planted", ("results",))
    with pytest.raises(AssertionError) as failed:
        run_script("bench_planted.py", out, run=run, folder=tmp_path, timeout_s=3)
    for text in wanted:
        assert text in str(failed.value), (text, str(failed.value))
