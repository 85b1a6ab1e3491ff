"""The helper launcher's protections under every combination of its options (issue 38).

childproc's contract (its module docstring): isolated mode, a scrubbed environment, a neutral
working directory, and data-segment and CPU caps the child cannot raise, where the cap is the
smaller of the one asked for and a finite hard limit the caller already has. The helper here
reports what it got; each case compares that with the contract.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from juliabridge.support import childproc

ROOT = Path(__file__).resolve().parents[1]

REPORT = textwrap.dedent(
    """
    import json, os, resource, sys
    data = resource.getrlimit(resource.RLIMIT_DATA)
    cpu = resource.getrlimit(resource.RLIMIT_CPU)
    try:  # a capped child must not be able to lift its own cap
        resource.setrlimit(resource.RLIMIT_DATA, (data[1] + 4096, data[1] + 4096))
        raised = True
    except (ValueError, OSError):
        raised = False
    fds = sorted(int(f) for f in os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else []
    print(json.dumps({"data": data, "cpu": cpu, "raised": raised, "isolated": sys.flags.isolated,
                      "cwd": os.getcwd(), "env": sorted(os.environ), "fds": fds}))
    """
)

INF = resource.RLIM_INFINITY


def _report(tmp_path: Path, **kw) -> dict:
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    done = childproc.run(str(script), input=b"", timeout=60, **kw)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


@pytest.mark.parametrize("cpu", [None, 7])
@pytest.mark.parametrize("cwd_given", [False, True])
@pytest.mark.parametrize("extra", [None, {"OMP_NUM_THREADS": "1"}])
def test_every_option_combination_keeps_the_four_protections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu, cwd_given, extra
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/nowhere")
    monkeypatch.setenv("JULIABRIDGE_SECRET_TEST", "x")
    monkeypatch.setenv("LD_PRELOAD", "")
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    r, w = os.pipe()
    os.set_inheritable(r, True)  # inheritable, so only close_fds keeps them from the helper
    os.set_inheritable(w, True)
    try:
        proc = childproc.start(
            str(script),
            memory=1 << 33,
            cpu_seconds=cpu,
            cwd=str(tmp_path) if cwd_given else None,
            extra_env=extra,
        )
        out, err = proc.communicate(b"", timeout=60)
    finally:
        os.close(r)
        os.close(w)
    assert proc.returncode == 0, err.decode()
    got = json.loads(out)
    assert got["isolated"] == 1
    assert got["cwd"] == (str(tmp_path) if cwd_given else os.path.abspath(os.sep))
    allowed = set(childproc.KEEP_ENV) | {"PYTHONDONTWRITEBYTECODE"} | set(extra or {})
    assert set(got["env"]) <= allowed, set(got["env"]) - allowed
    assert "PYTHONPATH" not in got["env"] and "JULIABRIDGE_SECRET_TEST" not in got["env"]
    assert got["data"] == [1 << 33, 1 << 33] or resource.getrlimit(resource.RLIMIT_DATA)[1] != INF
    assert got["raised"] is False
    assert got["cpu"] == ([cpu, cpu] if cpu is not None else got["cpu"])
    # the caller's inheritable pipe is not passed on (only what pass_fds names would be)
    assert r not in got["fds"] and w not in got["fds"]


def test_run_caps_cpu_at_the_timeout_when_no_cap_is_given(tmp_path: Path) -> None:
    got = _report(tmp_path, memory=1 << 33)
    assert got["cpu"] == [61, 61]
    got = _report(tmp_path, memory=1 << 33, cpu_seconds=5)
    assert got["cpu"] == [5, 5]


DRIVER = textwrap.dedent(
    """
    import json, resource, sys
    hard = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
    sys.path.insert(0, sys.argv[2])
    import importlib.util
    spec = importlib.util.spec_from_file_location("cp", sys.argv[2] + "/juliabridge/support/childproc.py")
    cp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cp)
    out = {}
    for memory in json.loads(sys.argv[3]):
        done = cp.run(sys.argv[4], input=b"", timeout=60, memory=memory)
        out[str(memory)] = json.loads(done.stdout) if done.returncode == 0 else done.stderr.decode()
    print(json.dumps(out))
    """
)


def test_the_cap_under_a_finite_hard_limit_is_the_smaller_one(tmp_path: Path) -> None:
    # The caller runs with a finite hard RLIMIT_DATA; each helper's cap is min(asked, hard),
    # for soft and hard alike, whichever is smaller.
    hard = 6 << 30
    asked = [1 << 30, hard, 12 << 30]
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    done = subprocess.run(
        [sys.executable, str(driver), str(hard), str(ROOT), json.dumps(asked), str(script)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    got = json.loads(done.stdout)
    for memory in asked:
        child = got[str(memory)]
        assert isinstance(child, dict), child
        cap = min(memory, hard)
        assert child["data"] == [cap, cap], (memory, child)
        assert child["raised"] is False


@pytest.mark.parametrize("cwd", [None, "tmp"])
def test_a_module_entry_runs_this_juliabridge_s_code(tmp_path: Path, cwd: str | None) -> None:
    # "package.module:function" is imported from the directory holding this juliabridge
    # package, not whatever juliabridge the interpreter would find (an installed copy, or none:
    # isolated mode ignores PYTHONPATH), from any working directory.
    import juliabridge

    done = childproc.run(
        "juliabridge.support.childproc:physical_memory",
        input=b"",
        timeout=120,
        memory=1 << 34,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    argv = childproc.helper_argv("juliabridge.support.childproc:physical_memory", memory=1 << 34)
    argv[3] += "\nimport juliabridge; print(juliabridge.__file__)"
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env=childproc.helper_env(),
        cwd=tmp_path if cwd else os.path.abspath(os.sep),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()).resolve() == Path(juliabridge.__file__).resolve()


ENV_REPORT = "import json, os; print(json.dumps(dict(os.environ)))"


@pytest.mark.parametrize("overridden", [(), ("TMPDIR",), ("LANG", "LC_ALL"), "all"])
@pytest.mark.parametrize("new", [False, True])
def test_the_environment_is_the_kept_host_values_then_the_caller_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overridden, new: bool
) -> None:
    # helper_env's contract: KEEP_ENV's variables from this process, then `extra_env` over
    # them (a kept name the caller sets is the caller's value); nothing else from the host.
    kept = [k for k in childproc.KEEP_ENV if k != "PATH"]
    host = {k: f"host-{k}" for k in kept}
    for k in kept:
        # the loader's search paths keep this host's own entries (an interpreter built as a
        # shared library finds libpython through them), with a marker the child must show
        if "LIBRARY_PATH" in k and os.environ.get(k):
            host[k] = f"{os.environ[k]}{os.pathsep}/nonexistent-host-{k}"
        monkeypatch.setenv(k, host[k])
    monkeypatch.setenv("JULIABRIDGE_SECRET_TEST", "x")
    names = kept if overridden == "all" else list(overridden)
    extra = {k: f"extra-{k}" for k in names}
    if new:
        extra |= {"OMP_NUM_THREADS": "1", "JULIABRIDGE_CHILD_ONLY": "y"}
    script = tmp_path / "env.py"
    script.write_text(ENV_REPORT)
    done = childproc.run(str(script), input=b"", timeout=60, memory=1 << 33, extra_env=extra)
    assert done.returncode == 0, done.stderr.decode()
    got = json.loads(done.stdout)
    want = host | {"PYTHONDONTWRITEBYTECODE": "1"} | extra
    if "PATH" in os.environ:
        want["PATH"] = os.environ["PATH"]
    # the interpreter may add its own (e.g. LC_CTYPE coercion); none of the host's others
    assert {k: got.get(k) for k in want} == want
    assert "JULIABRIDGE_SECRET_TEST" not in got
