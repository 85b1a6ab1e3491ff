"""Driving the Julia side (JuliaBridge.jl) from Python: exports run in a `julia` subprocess.

    from juliabridge.julia import export_lux
    export_lux("lenet.jl", "lenet.bundle")   # the script defines model, ps, st and x

Importing this module never starts Julia; `find_julia()` raises `JuliaUnavailable` quickly
when there is none. See `driver` for how Julia, JuliaBridge.jl and the environment are found.
"""

from __future__ import annotations

from .driver import (
    JULIABRIDGE_UUID,
    JuliaInstallation,
    export_lux,
    find_julia,
    julia_project_dir,
    julia_version,
)

__all__ = [
    "JULIABRIDGE_UUID",
    "JuliaInstallation",
    "export_lux",
    "find_julia",
    "julia_project_dir",
    "julia_version",
]
