"""The mutation smoke's own rules (tools/mutation_smoke.py, docs/mutation-testing.md): what
mutmut's fork server preloads, how the fixed sample is drawn and which tests it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import mutation_smoke as smoke  # noqa: E402


def _preloaded() -> list[str]:
    lines = (ROOT / "tools" / "mutmut_preload.txt").read_text().splitlines()
    return [n.strip() for n in lines if n.strip() and not n.startswith("#")]


def test_the_fork_servers_preload_starts_no_jax_backend_and_no_thread() -> None:
    # mutmut forks every mutant's worker from a server that imported these: a JAX backend (its
    # thread pools) started there would deadlock the forked children.
    names = _preloaded()
    assert "juliabridge" in names and "jax" in names
    code = f"""
import importlib, json, os, threading
count = lambda: (len(os.listdir("/proc/self/task")), threading.active_count())
import jax, numpy
before = count()  # numpy's BLAS may hold a thread of its own
for name in {names!r}:
    importlib.import_module(name)
from jax._src import xla_bridge
print(json.dumps([sorted(xla_bridge._backends), before, count()]))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    backends, before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert backends == [], f"importing the preload started JAX backends {backends}"
    assert after == before, f"threads (OS, Python) before and after the preload: {before} {after}"


def test_every_core_module_is_sampled_with_tests_that_exist() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    core = list(config["only_mutate"])
    chosen = smoke.smoke_tests()
    assert set(chosen) <= set(core), sorted(set(chosen) - set(core))
    for path in core:
        tests = chosen.get(path) or smoke.tests_of(path, [])
        assert tests, path
        for test in tests:
            file, _, name = test.partition("::")
            assert (ROOT / file).is_file(), (path, test)
            if name:
                func = name.split("::")[-1].split("[")[0]
                assert f"def {func}(" in (ROOT / file).read_text(), (path, test)


def test_the_sample_is_spread_over_the_measured_stride() -> None:
    names = [f"m.x_f__mutmut_{k}" for k in range(1, 101)]  # stride 16: 1, 17, ..., 97
    assert smoke.spread(names, 16, 3) == [
        "m.x_f__mutmut_17",
        "m.x_f__mutmut_49",
        "m.x_f__mutmut_81",
    ]
    assert smoke.spread(names[:20], 16, 3) == ["m.x_f__mutmut_1", "m.x_f__mutmut_17"]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("juliabridge/lux/trees.py", "juliabridge.lux.trees"),
        ("juliabridge/bundle/weights/__init__.py", "juliabridge.bundle.weights"),
    ],
)
def test_module_names_are_mutmuts(path: str, name: str) -> None:
    assert smoke.module_name(path) == name


def test_a_node_id_is_not_run_twice_when_its_file_is_selected() -> None:
    chosen = {"a.py": ["tests/t.py::test_x", "tests/u.py"], "b.py": ["tests/t.py"]}
    assert smoke.tests_for(["a.py", "b.py"], [], chosen) == ["tests/u.py", "tests/t.py"]


def test_a_timeout_counts_only_once_run_again_with_time_left() -> None:
    sampled: dict[str, int | None] = {"a": 1, "b": -24, "c": 0, "d": 36}
    assert smoke.timeouts_to_recheck(dict(sampled), out_of_time=False) == ["b", "d"]
    assert smoke.timeouts_to_recheck(sampled, out_of_time=True) == []
    # the budget ran out: the timeouts were never rechecked, so they are not run, not killed
    assert sampled == {"a": 1, "b": None, "c": 0, "d": None}


def test_a_crash_of_the_test_process_under_a_mutant_is_a_kill() -> None:
    # the clean run passed, so a segfault or an abort is the mutant's doing
    assert {-11, -6} <= smoke.KILLED
    assert not smoke.KILLED & smoke.SURVIVED
    # SIGKILL ends a runaway process: a kill only if it happens again with longer limits
    assert -9 in smoke.TIMEOUTS and smoke.TIMEOUTS <= smoke.KILLED


def test_the_sample_runs_round_robin_over_the_modules_in_a_fixed_order() -> None:
    sample = {"a.py": ["a1", "a2", "a3"], "b.py": ["b1"], "c.py": ["c1", "c2"]}
    assert smoke.ordered(sample) == ["a1", "b1", "c1", "a2", "c2", "a3"]
    assert smoke.ordered({}) == []
    assert smoke.stride_sample([f"m.x_f__mutmut_{k}" for k in range(1, 20)], 8) == [
        "m.x_f__mutmut_1",
        "m.x_f__mutmut_9",
        "m.x_f__mutmut_17",
    ]


def test_mutmut_starts_the_mutants_in_the_order_the_smoke_gives() -> None:
    # the launcher replaces mutmut's estimate of a mutant's test time, by which `mutmut run`
    # orders the mutants it starts, with the mutant's place in the smoke's order
    main = pytest.importorskip("mutmut.__main__", reason="mutmut: the [mutation] extra")
    import inspect

    assert "estimated_worst_case_time(" in inspect.getsource(main._run)
    assert "m.estimated_worst_case_time = " in smoke._RUN_IN_ORDER
    assert callable(main.cli)


def test_the_verdict_scores_what_ran_and_names_what_the_budget_left_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    budget = {"budget": 480.0}
    # a budget that ran out: what ran is scored, what did not is named in order
    assert (
        smoke.verdict(0.95, 0.9, run=40, sampled=80, not_run=["b", "a"], out_of_time=True, **budget)
        == 0
    )
    assert (
        "2 sampled mutants not run, in the order they would have run: b, a"
        in capsys.readouterr().out
    )
    assert (
        smoke.verdict(0.85, 0.9, run=40, sampled=80, not_run=["b"], out_of_time=True, **budget) == 1
    )
    # too few run to say anything
    assert (
        smoke.verdict(
            1.0, 0.9, run=smoke.MIN_RUN - 1, sampled=80, not_run=["b"], out_of_time=True, **budget
        )
        == 1
    )
    assert smoke.verdict(1.0, 0.9, run=5, sampled=5, not_run=[], out_of_time=False, **budget) == 0
    # a mutant not run while there was time is a failure of the run, not a budget
    assert (
        smoke.verdict(1.0, 0.9, run=40, sampled=41, not_run=["a"], out_of_time=False, **budget) == 1
    )


def test_a_run_samples_a_window_of_the_core_rotated_by_the_tree() -> None:
    core = [f"m{i}.py" for i in range(10)]
    assert smoke.window(core, 3, 8) == ["m8.py", "m9.py", "m0.py"]
    assert smoke.window(core, 0, 4) == core  # --modules 0: every module
    assert smoke.window(core, 12, 4) == core
    # four windows of a quarter, at successive offsets, cover the core
    k = -(-len(core) // 4)
    assert set().union(*(smoke.window(core, k, i * k) for i in range(4))) == set(core)
    assert smoke.tree_offset() == smoke.tree_offset()  # the same tree, the same window
