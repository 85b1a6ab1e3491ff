"""Running Julia for the end-to-end tests: Pkg.test, the test environment, the model scripts.

Every run has a time limit and, when it fails, raises ``JuliaRunFailed`` (an AssertionError, so
pytest reports a failure) with the command and the end of Julia's output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
JULIA_PACKAGE = REPO / "julia"
MODELS = HERE / "models"
ENV_TEMPLATE = HERE / "env" / "Project.toml"
FLAGS = ("--startup-file=no", "--history-file=no", "--color=no")
TAIL = 6000


class JuliaRunFailed(AssertionError):
    """A Julia run ended with a non-zero status or ran past its time limit."""


def run_julia(
    julia: str,
    args: Sequence[str],
    *,
    project: Path,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run ``julia --project=PROJECT ARGS...``; return its output (stdout and stderr).

    Raises:
        JuliaRunFailed: it failed or ran past `timeout` seconds (the end of its output says why).
    """
    cmd = [julia, f"--project={project}", *FLAGS, *args]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        raise JuliaRunFailed(
            f"{' '.join(cmd)} ran past {timeout:g} s and was stopped; its output:\n{out[-TAIL:]}"
        ) from exc
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise JuliaRunFailed(
            f"{' '.join(cmd)} exited with status {proc.returncode}; its output:\n{out[-TAIL:]}"
        )
    return out


def pkg_test(julia: str, *, timeout: float = 3600) -> str:
    """JuliaBridge's own tests: ``Pkg.instantiate(); Pkg.test()`` in julia/."""
    return run_julia(
        julia,
        ["-e", "using Pkg; Pkg.instantiate(); Pkg.test()"],
        project=JULIA_PACKAGE,
        timeout=timeout,
    )


def prepare_environment(julia: str, target: Path, *, timeout: float = 3600) -> Path:
    """The test environment in `target`: env/Project.toml with JuliaBridge developed from
    julia/, resolved, instantiated and precompiled (done once: kept where it is complete)."""
    done = target / ".juliabridge-e2e-ready"
    if done.is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ENV_TEMPLATE, target / "Project.toml")
    (target / "Manifest.toml").unlink(missing_ok=True)
    code = f'using Pkg; Pkg.develop(path=raw"{JULIA_PACKAGE}"); Pkg.instantiate(); Pkg.precompile()'
    run_julia(julia, ["-e", code], project=target, timeout=timeout)
    done.write_text("ok\n")
    return target


def model_script(name: str) -> Path:
    """The model script `name` (``lenet`` -> models/lenet.jl)."""
    path = MODELS / f"{name}.jl"
    if not path.is_file():
        raise FileNotFoundError(f"no model script {path}")
    return path


def export_juliabridge(
    julia: str, env: Path, model: str, out: Path, *, timeout: float = 1800
) -> Path:
    """`model` exported by ``JuliaBridge.export_lux`` called in Julia (models/export_juliabridge.jl)."""
    run_julia(
        julia,
        [str(MODELS / "export_juliabridge.jl"), str(model_script(model)), str(out)],
        project=env,
        timeout=timeout,
    )
    return out


def export_reactant(
    julia: str, env: Path, model: str, out: Path, lux: Path, *, timeout: float = 1800
) -> Path:
    """`model` exported by Reactant's ``export_to_enzymejax`` to `out` (models/
    export_reactant.jl), Lux's CPU outputs written to `lux`."""
    run_julia(
        julia,
        [str(MODELS / "export_reactant.jl"), str(model_script(model)), str(out), str(lux)],
        project=env,
        timeout=timeout,
    )
    return out


def load_params_back(
    julia: str, env: Path, model: str, weights: Path, out: Path, *, timeout: float = 1800
) -> Path:
    """Julia's outputs with the weights `weights` (a save_params file) read by load_params."""
    run_julia(
        julia,
        [str(MODELS / "load_params_back.jl"), str(model_script(model)), str(weights), str(out)],
        project=env,
        timeout=timeout,
    )
    return out
