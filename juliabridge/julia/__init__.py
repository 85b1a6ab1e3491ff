"""Driving the Julia side (JuliaBridge.jl) from Python, by one of two routes.

**Live objects, in this process** (``session``): ``juliabridge.export_lux(model, ps, st, *inputs,
out=...)`` takes Julia objects of a running juliacall session (``from juliacall import Main as
jl``), runs ``JuliaBridge.export_lux`` on them in that session and returns the imported
``LuxModel``. Prefer it in notebooks and interactive work: the model you just trained in Julia
is exported as is, with no script and no second Julia start (Reactant and Lux are already
compiled in the session).

**A script, in a ``julia`` subprocess** (``driver``): ``export_script("lenet.jl", "lenet.bundle")``
or ``juliabridge export lenet.jl --out lenet.bundle`` runs a script that defines ``model``,
``ps``, ``st`` and ``x``. Prefer it for scripts, the CLI, CI and tests: Julia is isolated from
the Python process (a Reactant/XLA crash, or Reactant's PythonCall extension importing jax and
tensorflow into the host Python, stays out of it), can be timed out, and needs no juliacall.

Both use the Julia environment juliapkg installs from ``juliabridge/juliapkg.json``. Importing
this module starts no Julia; without Julia or juliacall both raise ``JuliaUnavailable`` saying
how to get them.
"""

from __future__ import annotations

from .driver import (
    JULIABRIDGE_UUID,
    JULIAPKG_JSON,
    JuliaInstallation,
    export_script,
    find_julia,
    julia_project_dir,
    julia_version,
)
from .session import export_lux

__all__ = [
    "JULIABRIDGE_UUID",
    "JULIAPKG_JSON",
    "JuliaInstallation",
    "export_lux",
    "export_script",
    "find_julia",
    "julia_project_dir",
    "julia_version",
]
