"""Driving the Julia side (JuliaBridge.jl) from Python; named ``driver`` so it is not confused
with the Julia package in ``julia/``. Every export runs in a ``julia`` subprocess by default.

**Live objects of a juliacall session** (``session``, ``handoff``): ``juliabridge.export_lux(
jl.model, jl.ps, jl.st, jl.x, out=...)`` serializes the objects in the session (Serialization
stdlib only) and exports them in a ``julia`` subprocess on the session's project, then imports
the directory. Prefer it in notebooks: the model you just trained is exported as is, with no
script. ``in_process=True`` exports inside the session instead (Reactant then loads into this
Python process beside jaxlib: ``session.in_process_risk``).

**A script** (``process``): ``export_script("lenet.jl", "lenet.jlexport")`` or ``juliabridge
export lenet.jl --out lenet.jlexport`` runs a script that defines ``model``, ``ps``, ``st`` and
``x``. Prefer it for the CLI, CI and tests: it needs no juliacall.

Both write a Julia export directory (docs/julia-export.md) and use the Julia environment juliapkg
installs from ``juliabridge/juliapkg.json``. Importing this package starts no Julia; without
Julia or juliacall both raise ``JuliaUnavailable`` saying how to get them.
"""

from __future__ import annotations

from .process import (
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
