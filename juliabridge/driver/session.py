"""Export Julia objects that live in this process's juliacall session.

    from juliacall import Main as jl
    jl.seval("using Lux, Random; model = Chain(Dense(4 => 8, tanh), Dense(8 => 2))")
    jl.seval("ps, st = Lux.setup(Random.Xoshiro(0), model); x = randn(Float32, 4, 16)")
    model = juliabridge.export_lux(jl.model, jl.ps, jl.st, jl.x, out="mlp.jlexport")

By default the session only serializes the objects, and ``JuliaBridge.export_lux`` runs in a
``julia`` subprocess on the session's project (``handoff``): Reactant and its XLA never load into
this Python process. ``in_process=True`` runs it in the session itself (no second Julia start,
types defined in the session's ``Main`` work), at the risk ``in_process_risk`` describes: Reactant
loaded beside jaxlib, its PythonCall extension importing jax and tensorflow here. The Julia
packages come from the same ``juliabridge/juliapkg.json`` juliapkg installs for juliacall.
Importing this module never imports juliacall: a session must already be running.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CallArgumentError, JuliaExportError, JuliaUnavailable
from ..support.progress import enabled as progress_enabled
from .handoff import export_in_subprocess
from .process import JULIAPKG_JSON, ProgressDisplay, check_options

if TYPE_CHECKING:
    from ..lux.model import LuxModel

#: NumPy element types juliacall hands to Julia as a PyArray of the same Julia type.
_NUMPY_KINDS = "biufc"

_BRIDGE: dict[int, Any] = {}


def _juliacall() -> ModuleType:
    """The running juliacall, or ``JuliaUnavailable`` saying how to get one."""
    module = sys.modules.get("juliacall")
    if module is not None and getattr(module, "CONFIG", {}).get("inited", True):
        return module
    if importlib.util.find_spec("juliacall") is None:
        raise JuliaUnavailable(
            "juliabridge.export_lux exports Julia objects from a juliacall session, and "
            "juliacall is not installed: pip install 'juliabridge[julia]' (juliacall needs "
            "Julia >= 1.10: install it with juliaup, https://julialang.org/downloads, or let "
            "juliapkg download one). To export a Julia script without juliacall, use "
            "juliabridge.driver.export_script or `juliabridge export SCRIPT.jl --out DIR`"
        )
    raise JuliaUnavailable(
        "juliabridge.export_lux exports Julia objects from a running juliacall session, and "
        "none is running in this process: build the model in Julia first, e.g. "
        '`from juliacall import Main as jl; jl.seval("using Lux; model = Dense(2 => 3)")`, '
        "and pass jl.model, jl.ps, jl.st and the inputs. To export a Julia script instead, use "
        "juliabridge.driver.export_script or `juliabridge export SCRIPT.jl --out DIR`"
    )


#: Set to "1" to export in-process where `in_process_risk` names a known crash.
IN_PROCESS_ENV = "JULIABRIDGE_IN_PROCESS_EXPORT"


def in_process_risk(
    system: str | None = None, machine: str | None = None, installer: str | None = None
) -> str | None:
    """Why exporting in this process is known to risk a crash, or None where it is not known.

    Reactant's PythonCall extension imports jax into the Python that juliacall runs in
    (Reactant ext/ReactantPythonCallExt/ReactantPythonCallExt.jl:19-36), so Reactant's XLA and
    jaxlib's XLA share one process and each initializes LLVM. Reactant issue #438 is the known
    failure: on aarch64 Linux with conda-forge's jaxlib, LLVM aborted ("64-bit code requested on
    a subtarget that doesn't support it!"); pip's jaxlib did not (Reactant PR #450).

    Args:
        system, machine, installer: platform.system(), platform.machine() and the installer of
            the jaxlib distribution (its INSTALLER file), for tests; read from this process when
            None.

    Returns:
        A sentence naming the risk, or None.
    """
    system = system if system is not None else platform.system()
    machine = machine if machine is not None else platform.machine()
    if installer is None:
        try:
            installer = (
                importlib.metadata.distribution("jaxlib").read_text("INSTALLER") or ""
            ).strip()
        except importlib.metadata.PackageNotFoundError:
            installer = ""
    if system == "Linux" and machine in ("aarch64", "arm64") and installer == "conda":
        return (
            "on aarch64 Linux with conda's jaxlib, Reactant's XLA and jaxlib's XLA in one process "
            "crashed LLVM (Reactant issue #438)"
        )
    return None


def _bridge(juliacall: ModuleType) -> Any:
    """``JuliaBridge`` loaded into the session (once), or ``JuliaUnavailable``."""
    key = id(juliacall)
    if key not in _BRIDGE:
        try:
            host = juliacall.newmodule("JuliaBridgeExport")
            host.seval("import JuliaBridge")
            _BRIDGE[key] = host.JuliaBridge
        except Exception as exc:  # juliacall.JuliaError: the package is not in the project
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            project = JULIAPKG_JSON.parent / "jl_package"
            raise JuliaUnavailable(
                f"JuliaBridge.jl could not be loaded into this juliacall session ({first}). "
                f"juliabridge declares it in {JULIAPKG_JSON}, which juliapkg installs when "
                "juliacall first starts Julia in this Python environment; run "
                "`python -c 'import juliapkg; juliapkg.resolve(force=True)'` and restart Python. "
                "If juliacall uses a Julia project of your own (PYTHON_JULIACALL_PROJECT), add "
                f'it there: `import Pkg; Pkg.develop(path="{project}")`'
            ) from exc
    return _BRIDGE[key]


def _julia_tree(value: Any, what: str, juliacall: ModuleType) -> Any:
    """`value` as juliacall will pass it: a Julia value, or a tuple of them (a Julia Tuple)."""
    if isinstance(value, juliacall.ValueBase):
        return value
    if isinstance(value, tuple):
        return tuple(_julia_tree(v, f"{what}[{i}]", juliacall) for i, v in enumerate(value))
    raise CallArgumentError(
        f"{what} is a {type(value).__name__}, not a Julia object; pass the value your Julia "
        "session holds (e.g. jl.ps for `ps, st = Lux.setup(rng, model)`)"
    )


def _julia_input(value: Any, what: str, juliacall: ModuleType) -> Any:
    """An example input: a Julia value, a tuple of inputs, or an array in MLIR layout."""
    if isinstance(value, juliacall.ValueBase):
        return value
    if isinstance(value, tuple):
        return tuple(_julia_input(v, f"{what}[{i}]", juliacall) for i, v in enumerate(value))
    if hasattr(value, "__array__"):
        array = np.asarray(value)
        if array.dtype.kind not in _NUMPY_KINDS or array.dtype.itemsize == 0:
            raise CallArgumentError(
                f"{what} has dtype {array.dtype}, which juliacall cannot hand to Julia as an "
                "array; build it in Julia or pass a float/int/bool/complex array"
            )
        # The MLIR layout juliabridge uses is the Julia dims reversed: the transposed view is
        # the Julia array (juliacall wraps it as a PyArray; JuliaBridge copies it to an Array).
        return array.T
    raise CallArgumentError(
        f"{what} is a {type(value).__name__}; pass a Julia array (e.g. jl.x), a NumPy/JAX "
        "array in juliabridge's layout (batch first), or a tuple of those"
    )


def export_lux(
    model: Any,
    ps: Any,
    st: Any,
    *inputs: Any,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    name: str | None = None,
    mode: str = "test",
    reference: bool = True,
    metadata: dict[str, Any] | None = None,
    samples_independent: bool | None = None,
    progress: bool | None = None,
    backend: str = "auto",
    in_process: bool = False,
    timeout: float | None = None,
    verbose: bool = False,
) -> LuxModel:
    """Export a Lux model living in this process's juliacall session and import it.

    By default the objects are serialized in the session and exported by a ``julia``
    subprocess on the session's project, so Reactant never loads into this process; their types
    must then come from packages (not from ``jl.seval`` in the session's ``Main``).

    Args:
        model, ps, st: Julia objects of the session (``jl.model``, ``jl.ps``, ``jl.st``).
        inputs: the example input(s): Julia arrays (Julia layout, batch last), or NumPy/JAX
            arrays in juliabridge's layout (batch first: the Julia dims reversed). Several
            inputs make ``x`` a tuple, as in ``JuliaBridge.export_lux``.
        out: the directory to write (a Julia export directory, docs/julia-export.md). Julia's
            spelling, the directory first (``export_lux(out, model, ps, st, x)``, as
            ``JuliaBridge.export_lux`` takes it), is accepted too.
        overwrite, name, mode, reference, metadata, samples_independent: the keywords of
            ``JuliaBridge.export_lux``. (The VJP and the check of the module's ops are made at
            import, in Python.)
        progress: show a progress bar on stderr (default: when stderr is a terminal).
        backend: passed to ``juliabridge.import_lux``.
        in_process: run the export in this session instead of a subprocess (loads Reactant
            and its XLA into this Python process beside jaxlib's; see ``in_process_risk``).
        timeout, verbose: for the subprocess: stop Julia after `timeout` seconds; show its
            output.

    Returns:
        The exported directory imported as a ``LuxModel`` (``juliabridge.import_lux(out)``).

    Raises:
        JuliaUnavailable: juliacall is not installed or not running, or JuliaBridge.jl is not
            in its Julia project.
        CallArgumentError: an argument is not a Julia object (or array, for inputs), or the
            bundle directory is missing or given twice.
        ValueError: bad options (mode, name, metadata, train mode with samples_independent).
        JuliaExportError: the export failed in Julia (the message is Julia's), or, in process,
            this process is one where running Reactant beside jaxlib is known to crash
            (`in_process_risk`; set JULIABRIDGE_IN_PROCESS_EXPORT=1 to override).
    """
    out, model, ps, st, inputs = _call_in_python_spelling(model, ps, st, inputs, out)
    out_path = Path(out).expanduser().resolve()
    check_options(
        out_path,
        overwrite=overwrite,
        mode=mode,
        name=name,
        metadata=metadata,
        samples_independent=samples_independent,
    )
    if in_process:
        _refuse_risky_in_process()
    juliacall = _juliacall()
    objects = _julia_objects(juliacall, model, ps, st, inputs)
    options = {
        "name": name,
        "mode": mode,
        "overwrite": overwrite,
        "reference": reference,
        "metadata": dict(metadata) if metadata else None,
        "samples_independent": samples_independent,
    }
    show = progress_enabled(progress)
    from ..importers import import_lux

    if not in_process:
        path = export_in_subprocess(
            juliacall, out_path, objects, options, show=show, verbose=verbose, timeout=timeout
        )
        return import_lux(path, backend=backend)
    return import_lux(
        _export_in_session(juliacall, out_path, objects, options, show), backend=backend
    )


def _call_in_python_spelling(
    model: Any, ps: Any, st: Any, inputs: tuple[Any, ...], out: Any
) -> tuple[str | os.PathLike[str], Any, Any, Any, tuple[Any, ...]]:
    """``(out, model, ps, st, inputs)`` from either spelling of the call: Python's
    (``export_lux(model, ps, st, x, out=dir)``) or Julia's (``export_lux(dir, model, ps, st,
    x)``); refuses a directory given twice or missing, and a call without an input."""
    if isinstance(model, (str, os.PathLike)):
        if out is not None:
            raise CallArgumentError(
                f"export_lux got the bundle directory twice: {os.fspath(model)!r} first (Julia's "
                f"spelling) and out={os.fspath(out)!r}; give it once"
            )
        # JuliaBridge.export_lux(dir, model, ps, st, x...): the same call spelled as in Julia.
        out, model, ps, st, inputs = model, ps, st, inputs[0] if inputs else None, inputs[1:]
        if st is None:
            raise CallArgumentError(
                "export_lux(dir, model, ps, st, x...) needs model, ps, st and an example input "
                "after the bundle directory"
            )
    if out is None:
        raise CallArgumentError(
            "export_lux needs the bundle directory: export_lux(model, ps, st, x, out=dir), or "
            "export_lux(dir, model, ps, st, x) as in Julia"
        )
    if not inputs:
        raise CallArgumentError("export_lux needs at least one example input after model, ps, st")
    return out, model, ps, st, inputs


def _refuse_risky_in_process() -> None:
    """Raise when this process is one where Reactant beside jaxlib is known to crash
    (`in_process_risk`), unless IN_PROCESS_ENV=1 overrides it."""
    risk = in_process_risk()
    if risk is not None and os.environ.get(IN_PROCESS_ENV) != "1":
        raise JuliaExportError(
            f"export_lux(in_process=True) runs Reactant inside this Python process, and {risk}. "
            "Leave in_process unset to export in a separate julia process, or set "
            f"{IN_PROCESS_ENV}=1 to try it here anyway"
        )


def _julia_objects(
    juliacall: ModuleType, model: Any, ps: Any, st: Any, inputs: tuple[Any, ...]
) -> tuple[Any, ...]:
    """``(model, ps, st, x...)`` as the Julia objects ``JuliaBridge`` takes; refuses a model
    that is not a Julia object and arguments juliacall cannot hand over."""
    if not isinstance(model, juliacall.ValueBase):
        raise CallArgumentError(
            f"model is a {type(model).__name__}, not a Julia object; pass the Lux layer your "
            "Julia session holds (e.g. jl.model)"
        )
    args = [
        _julia_tree(ps, "ps", juliacall),
        _julia_tree(st, "st", juliacall),
    ]
    xs = [_julia_input(x, f"inputs[{i}]", juliacall) for i, x in enumerate(inputs)]
    return (model, *args, *xs)


def _export_in_session(
    juliacall: ModuleType,
    out_path: Path,
    objects: tuple[Any, ...],
    options: dict[str, Any],
    show: bool,
) -> str:
    """Run ``JuliaBridge.export_from_python`` in this session; the directory it wrote."""
    model, ps, st, *xs = objects
    bridge = _bridge(juliacall)
    with ProgressDisplay(show) as display:
        display.step(0, 0, "tracing with Reactant in this Julia session")
        kwargs = {"progress": display.step} if show else {}
        try:
            text = bridge.export_from_python(
                str(out_path), model, ps, st, json.dumps(options), *xs, **kwargs
            )
        except Exception as exc:  # a juliacall.JuliaError JuliaBridge did not turn into an answer
            raise JuliaExportError(f"the export failed in Julia: {exc}") from exc
    return str(_read_answer(str(text))["path"])


def _read_answer(text: str) -> dict[str, Any]:
    """The answer object ``JuliaBridge.export_from_python`` returned; raises on a failure."""
    try:
        answer = json.loads(text)
    except ValueError as exc:
        raise JuliaExportError(
            f"JuliaBridge answered with something that is not JSON: {text[:200]!r}"
        ) from exc
    if not isinstance(answer, dict):
        raise JuliaExportError(f"JuliaBridge answered with {type(answer).__name__}, not an object")
    if not answer.get("ok"):
        raise JuliaExportError(
            f"{answer.get('error_type', 'error')} in Julia: {answer.get('message', '')}"
        )
    if not isinstance(answer.get("path"), str):
        raise JuliaExportError("JuliaBridge reported success without a bundle path")
    return answer


__all__ = ["export_lux"]
