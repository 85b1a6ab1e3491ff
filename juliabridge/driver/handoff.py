"""Hand Julia objects of a juliacall session to a ``julia`` subprocess (``export_lux``'s default).

The session only serializes: Julia's Serialization stdlib writes ``(model, ps, st, inputs)`` to
a temporary file, so neither JuliaBridge nor Reactant nor its XLA is loaded into this Python
process (Reactant's PythonCall extension would import jax and tensorflow into it, and two XLAs
in one process have crashed, Reactant issues #438 and #3101). The export then runs in
``julia --project=<the session's project>`` with the session's Julia executable, through
``process.run_export_request``: the script route's progress, timeout and error reporting.

Deserializing needs every type of the objects: the packages of the session's project that the
session has loaded are loaded first in the subprocess; a type defined in the session's ``Main``
(a layer written with ``jl.seval``) does not exist there, which the error then says.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import JuliaExportError
from .process import JuliaInstallation, ProgressDisplay, run_export_request

#: Defined once in a juliacall module of the session. `plain` copies array types that do not
#: serialize as values (juliacall's PyArray over NumPy memory, Reactant arrays) to Arrays, one
#: copy per array so ties survive; Serialization keeps the identity of what it writes twice.
SERIALIZER = """
import Serialization, TOML
function juliabridge_serialize(path, model, ps, st, inputs...)
    seen = IdDict{Any,Any}()
    plain(v) = v isa AbstractArray{<:Number} && !(v isa Array) ? get!(() -> Array(v), seen, v) :
               v isa Union{Tuple,NamedTuple} ? map(plain, v) : v
    objects = (model, plain(ps), plain(st), Any[plain(x) for x in inputs])
    open(io -> Serialization.serialize(io, objects), path, "w")
    project = Base.active_project()
    deps = project === nothing ? Dict() : get(TOML.parsefile(project), "deps", Dict())
    loaded = [n * "=" * u for (n, u) in deps
              if n != "PythonCall" && Base.root_module_exists(Base.PkgId(Base.UUID(u), n))]
    return join(sort(loaded), "\\n")
end
juliabridge_session() =
    join((first(Base.julia_cmd().exec), something(Base.active_project(), ""), VERSION), "\\n")
"""

_HOSTS: dict[int, Any] = {}

MAIN_TYPES_HINT = (
    "; if a type of the model is defined in your session (jl.seval), Julia's subprocess does "
    "not have it: put it in a package or a script (juliabridge export SCRIPT.jl), or pass "
    "in_process=True"
)


def _host(juliacall: ModuleType) -> Any:
    """The juliacall module holding SERIALIZER's functions (defined once per session)."""
    key = id(juliacall)
    if key not in _HOSTS:
        host = juliacall.newmodule("JuliaBridgeHandoff")
        host.seval(SERIALIZER)
        _HOSTS[key] = host
    return _HOSTS[key]


def _session_julia(host: Any) -> tuple[JuliaInstallation, Path]:
    """The session's Julia executable and the directory of its active project."""
    executable, project, version = str(host.juliabridge_session()).split("\n")
    numbers = tuple(int(p) for p in version.split("-")[0].split(".")[:3])
    prepared = os.environ.get("JULIABRIDGE_JULIA_ENV")
    if prepared:
        environment = Path(prepared)
    elif project:
        environment = Path(project).parent
    else:
        raise JuliaExportError(
            "the juliacall session has no active Julia project to run the export in; "
            "set JULIABRIDGE_JULIA_ENV to an environment with JuliaBridge, or pass in_process=True"
        )
    major, minor, patch = (*numbers, 0, 0, 0)[:3]
    julia = JuliaInstallation(executable, (major, minor, patch), "the juliacall session")
    return julia, environment


def export_in_subprocess(
    juliacall: ModuleType,
    out: Path,
    objects: tuple[Any, ...],
    options: dict[str, Any],
    *,
    show: bool,
    verbose: bool = False,
    timeout: float | None = None,
) -> str:
    """Serialize `objects` (model, ps, st, inputs...) in the session and export them in a
    ``julia`` subprocess to `out`; return the directory Julia reports.

    Raises:
        JuliaExportError: the session could not serialize the objects, or the export failed
            (Julia's message, with a hint when a type may be missing in the subprocess).
        JuliaUnavailable: the session's Julia could not be started.
    """
    host = _host(juliacall)
    julia, environment = _session_julia(host)
    with tempfile.TemporaryDirectory(prefix="juliabridge-handoff-") as tmp:
        path = Path(tmp) / "objects.jls"
        try:
            packages = str(host.juliabridge_serialize(str(path), *objects))
        except Exception as exc:  # juliacall.JuliaError
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise JuliaExportError(
                f"the juliacall session could not serialize the model, ps, st and inputs: {first}"
            ) from exc
        request = {
            **options,
            "serialized": str(path),
            "packages": [line.split("=", 1) for line in packages.splitlines() if "=" in line],
            "out": str(out),
        }
        with ProgressDisplay(show) as display:
            display.step(0, 0, "starting julia for the export (Reactant, Lux)")
            try:
                return run_export_request(
                    julia, environment, request, display=display, verbose=verbose, timeout=timeout
                )
            except JuliaExportError as exc:
                if "UndefVarError" in str(exc) or "Main." in str(exc):
                    raise JuliaExportError(str(exc) + MAIN_TYPES_HINT) from exc
                raise
