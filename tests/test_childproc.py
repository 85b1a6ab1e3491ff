"""Every helper process starts through juliabridge.support.childproc (docs/reliability.md §1).

Issue 27's escape: the portable-artifact reader ran ``python -P`` with the caller's environment
and working directory, so with ``''`` in ``PYTHONPATH`` and the working directory at the bundle
a planted ``sitecustomize.py`` ran. The rule that closes the class is structural: one function
starts every helper (isolated, scrubbed, neutral directory, bounded memory and time), and
`test_every_process_start_in_the_package_goes_through_childproc` fails on any call that
bypasses it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.weights import _worker
from juliabridge.stablehlo import artifact
from juliabridge.support import childproc

PACKAGE = Path(juliabridge.__file__).resolve().parent

#: Calls that start a process, by the module they come from.
STARTERS = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv",
           "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
           "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe"},
    "multiprocessing": None,  # any use
    "concurrent.futures": {"ProcessPoolExecutor"},
    "pty": {"spawn", "fork"},
}  # fmt: skip
#: Where a direct start is allowed, and why.
ALLOWED = {
    # The one function every helper goes through.
    "support/childproc.py": "the helper starter itself",
    # Runs `julia` on the user's own script or model, with the user's environment on purpose
    # (JULIA_DEPOT_PATH, JULIA_PROJECT, proxies, ...): nothing from an untrusted bundle is read.
    "driver/process.py": "the user's own julia, deliberately with the user's environment",
}


def _process_starts(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every call or reference that can start a process."""
    aliases: dict[str, str] = {}  # local name -> module or module.attr
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            parts = []
            cur: ast.AST = node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if not isinstance(cur, ast.Name) or cur.id not in aliases:
                continue
            dotted = ".".join([aliases[cur.id], *reversed(parts)])
            for mod, names in STARTERS.items():
                if dotted == mod or not dotted.startswith(mod + "."):
                    if names is None and dotted == mod:
                        found.append((node.lineno, dotted))
                    continue
                attr = dotted[len(mod) + 1 :].split(".")[0]
                if names is None or attr in names:
                    found.append((node.lineno, dotted))
    return sorted(set(found))


def test_the_scan_finds_every_spelling() -> None:
    src = """
import subprocess, os
import subprocess as sp
from subprocess import Popen as P, run
from multiprocessing import Process
from concurrent.futures import ProcessPoolExecutor
subprocess.Popen(["x"]); sp.check_output(["x"]); P(["x"]); run(["x"]); os.system("x")
os.posix_spawn("x", [], {}); Process(); ProcessPoolExecutor()
subprocess.PIPE; os.path.join("a")
"""
    names = {name for _, name in _process_starts(ast.parse(src))}
    assert names == {
        "subprocess.Popen",
        "subprocess.check_output",
        "subprocess.run",
        "os.system",
        "os.posix_spawn",
        "multiprocessing.Process",
        "concurrent.futures.ProcessPoolExecutor",
    }, names


def test_every_process_start_in_the_package_goes_through_childproc() -> None:
    bypasses = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ALLOWED:
            continue
        for line, name in _process_starts(ast.parse(path.read_text(), str(path))):
            bypasses.append(f"juliabridge/{rel}:{line}: {name}")
    assert not bypasses, "start helper processes with juliabridge.support.childproc:\n" + "\n".join(
        bypasses
    )
    # And the three helpers do use it (the scan above would pass on code that starts nothing).
    for rel in ("stablehlo/artifact.py", "bundle/weights/_worker.py", "backends/enzyme/sandbox.py"):
        text = (PACKAGE / rel).read_text()
        assert "childproc.start(" in text or "childproc.run(" in text, rel


@pytest.fixture
def hostile_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The caller's working directory is a bundle with planted start-up files, and ``''``
    (the working directory) and a planted directory are on PYTHONPATH."""
    marker = tmp_path / "pwned"
    payload = f"import sys; open({str(marker)!r}, 'a').write(repr(sys.argv) + '\\n')\n"
    bundle = tmp_path / "bundle"
    planted = tmp_path / "planted"
    for where in (bundle, planted):
        where.mkdir()
        for name in ("sitecustomize.py", "usercustomize.py", "h5py.py", "numpy.py", "jaxlib.py"):
            (where / name).write_text(payload)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", str(planted)]))
    monkeypatch.setenv("PYTHONSTARTUP", str(planted / "sitecustomize.py"))
    monkeypatch.setenv("PYTHONINSPECT", "1")
    monkeypatch.setenv("SECRET_TOKEN", "x")
    monkeypatch.chdir(bundle)
    return marker


def test_the_artifact_reader_runs_nothing_planted(hostile_cwd: Path) -> None:
    good = artifact.serialize(
        "func.func public @main(%a: tensor<f32>) -> tensor<f32> {\n return %a : tensor<f32>\n}"
    ).data
    (text,) = artifact.deserialize([good], ["module.mlirbc"])
    assert isinstance(text, str) and "func.func" in text, text
    assert not hostile_cwd.exists(), hostile_cwd.read_text()


def test_the_hdf5_reader_runs_nothing_planted(
    hostile_cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", "0")  # the libhdf5 reader process
    path = hostile_cwd.parent / "w.h5"
    with h5py.File(path, "w") as f:
        f["params/w"] = np.arange(3, dtype=np.float32)
        f["params/w"].attrs["dtype"] = "f32"
    params, _ = juliabridge.load_params(path)
    assert params["w"].tolist() == [0, 1, 2]
    assert not hostile_cwd.exists(), hostile_cwd.read_text()


PROBE = """
import json, os, resource, sys
print(json.dumps({"path": sys.path, "flags": sys.flags.isolated, "cwd": os.getcwd(),
                  "env": sorted(os.environ), "argv": sys.argv,
                  "data": resource.getrlimit(resource.RLIMIT_DATA),
                  "cpu": resource.getrlimit(resource.RLIMIT_CPU)}))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits")
def test_a_helper_is_isolated_scrubbed_neutral_and_bounded(
    hostile_cwd: Path, tmp_path: Path
) -> None:
    import json

    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    done = childproc.run(
        str(probe), ["a1"], input=b"", timeout=60, memory=3 << 30, extra_env={"ONE": "1"}
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["flags"] == 1 and seen["cwd"] == os.path.abspath(os.sep)
    assert "" not in seen["path"] and str(hostile_cwd.parent / "planted") not in seen["path"]
    assert str(tmp_path) not in seen["path"]  # not the script's directory either
    assert set(seen["env"]) <= set(childproc.KEEP_ENV) | {"ONE", "PYTHONDONTWRITEBYTECODE"}
    assert seen["argv"] == [str(probe), "a1"]
    assert seen["data"] == [3 << 30, 3 << 30]
    assert seen["cpu"] == [61, 61]
    assert not hostile_cwd.exists(), hostile_cwd.read_text()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits")
def test_the_memory_cap_stops_a_helper_that_allocates_past_it(tmp_path: Path) -> None:
    hog = tmp_path / "hog.py"
    hog.write_text("b = bytearray(1 << 31)\nprint('allocated')\n")
    done = childproc.run(str(hog), input=b"", timeout=60, memory=1 << 30)
    assert done.returncode != 0 and b"MemoryError" in done.stderr, done
    assert b"allocated" not in done.stdout


def test_the_timeout_kills_a_helper(tmp_path: Path) -> None:
    sleeper = tmp_path / "sleep.py"
    sleeper.write_text("import time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        childproc.run(str(sleeper), input=b"", timeout=1, memory=1 << 30)
    assert time.monotonic() - t0 < 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID")
def test_the_enzyme_derivation_child_starts_isolated(hostile_cwd: Path) -> None:
    from juliabridge.backends.enzyme import sandbox

    child = sandbox._Child()
    try:
        pid = child.proc.pid
        deadline = time.monotonic() + 10
        while True:  # between fork and exec the command line is still empty
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if len(cmdline) > 2 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert cmdline[1] == b"-I", cmdline
        assert os.readlink(f"/proc/{pid}/cwd") == child.tmp
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if e}
        assert names <= set(childproc.KEEP_ENV) | {
            "PYTHONDONTWRITEBYTECODE",
            "JAX_PLATFORMS",
            "JAX_ENABLE_X64",
        }, names
    finally:
        child.close()


def test_the_hdf5_reader_environment_is_childprocs() -> None:
    env = _worker.child_env()
    assert set(env) <= set(childproc.KEEP_ENV) | {
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "HDF5_PLUGIN_PATH",
        "PYTHONDONTWRITEBYTECODE",
    }
