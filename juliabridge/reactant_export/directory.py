"""An ``export_to_enzymejax`` directory: its .py (as data), its .mlir and its inputs npz.

`open_export` finds and checks the three files (the .py's arguments against @main);
`load_reactant_export` makes an `ImportedFunction` whose arguments carry Reactant's paths.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..backends import make_backend, resolve_backend_name
from ..bundle.files import nearby
from ..bundle.manifest import REACTANT_EXPORTER
from ..bundle.manifest.schema import safe_file_name
from ..errors import BundleError, SignatureMismatchError, UnsafeBundleError
from ..function import ImportedFunction
from ..stablehlo import StableHLOModule, TensorSpec, parse_module
from ..stablehlo.module import MAX_MODULE_BYTES
from . import npz
from .files import read_bytes
from .pyscript import ExportScript, read_script

#: Reactant's exporter, as recorded in metadata and in converted bundles' producer.
PRODUCER = REACTANT_EXPORTER


@dataclass(frozen=True)
class ReactantExport:
    """A checked export directory: the .py's record and the parsed @main it describes."""

    root: Path
    script: ExportScript
    module: StableHLOModule
    #: The .mlir's text exactly as read and checked (kept only when asked: `convert` copies it).
    module_text: str | None = None

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        """The argument shapes and dtypes (row-major, as @main and the npz hold them)."""
        return self.module.arguments

    @property
    def labels(self) -> list[str]:
        """Each argument's Reactant path, e.g. ``arg.3.1.1``."""
        return [a.label for a in self.script.arguments]

    @property
    def has_inputs(self) -> bool:
        """Whether the directory has the npz of example inputs (``export_data_as_npz=true``)."""
        return self.script.npz_file is not None

    def example_inputs(self) -> tuple[np.ndarray, ...]:
        """The arrays Reactant saved, in @main order, read without pickle and within bounds.

        Returns:
            One array per @main argument, of its shape and dtype.

        Raises:
            BundleError: no npz (exported with ``export_data_as_npz=false``), or it is
                unreadable or disagrees with @main (UnsafeBundleError for an object dtype).
        """
        if self.script.npz_file is None:
            raise BundleError(
                f"{self.script.path}: this export has no inputs npz (written with "
                "export_data_as_npz=false); pass your own arrays"
            )
        keys = [f"arr_{i + 1}" for i in range(len(self.specs))]
        return tuple(npz.read_inputs(self.root / self.script.npz_file, keys, self.specs))

    @property
    def metadata(self) -> dict[str, Any]:
        """What the directory records: files, argument paths and the shardings of the .py."""
        s = self.script
        return {
            "producer": PRODUCER,
            "function_name": s.function_name,
            "script": s.path.name,
            "module": s.mlir_file,
            "inputs": s.npz_file,
            "arguments": [
                {"path": a.label, "shape": list(a.shape), "dtype": a.dtype} for a in s.arguments
            ],
            "meshes": {
                m.name: {"axis_sizes": list(m.axis_sizes), "axis_names": list(m.axis_names)}
                for m in s.meshes.values()
            },
            "shardings": {
                s.arguments[k].label: {
                    "type": p.kind,
                    **({"mesh": p.mesh, "spec": list(p.spec)} if p.mesh is not None else {}),
                }
                for k, p in sorted(s.placements.items())
                if s.meshes or p.kind != "NoSharding"
            },
        }


def _module_names(script: Path) -> bool:
    """Whether ``{fn}_{id}.mlir`` sits beside ``{fn}.py`` (EnzymeJAX.jl:128-132, 175)."""
    return nearby.is_reactant_script(script)


def _find_script(path: Path) -> Path:
    if path.suffix == ".py":
        return path
    if not path.is_dir():
        what = "no such file or directory" if not os.path.lexists(path) else "not a directory"
        raise BundleError(
            f"{path}: not a directory written by {PRODUCER} (nor its .py): {what}; pass the "
            f"directory{nearby.did_you_mean(path)}"
        )
    scripts = sorted(p for p in path.iterdir() if p.suffix == ".py" and not p.name.startswith("."))
    if len(scripts) > 1:
        # Other Python files beside an export (a train.py): the exporter's .py is the one with
        # its {fn}_{id}.mlir beside it.
        paired = [p for p in scripts if _module_names(p)]
        scripts = paired if len(paired) == 1 else scripts
    if len(scripts) != 1:
        found = ", ".join(p.name for p in scripts[:6]) or "none"
        advice = (
            nearby.found_inside(path) or "; pass the export directory"
            if not scripts
            else "; pass the path of the .py you mean"
        )
        raise BundleError(
            f"{path}: expected the one .py that {PRODUCER} writes, found {len(scripts)} "
            f"({found}){advice}"
        )
    return scripts[0]


def read_export_script(path: str | os.PathLike[str]) -> ExportScript:
    """The .py of the export at `path` (the directory or the .py), read as data: what it
    declares, without reading the module or the npz.

    Raises:
        BundleError / ManifestError: as for `open_export`.
    """
    return read_script(_find_script(Path(path)))


def _inside(root: Path, name: str, what: str) -> Path:
    try:
        safe_file_name(name, what)
    except BundleError as e:
        raise UnsafeBundleError(
            f"{root}: the .py names {what} {name!r}, which is not a plain file name inside "
            "its directory (Reactant writes bare names, EnzymeJAX.jl:241-242); refused, "
            "nothing outside the directory is read"
        ) from e
    return root / name


def _check_arguments(script: ExportScript, module: StableHLOModule) -> None:
    got, want = script.arguments, module.arguments
    if len(got) != len(want):
        raise SignatureMismatchError(
            f"{script.path}: the .py lists {len(got)} arguments but @main of {script.mlir_file} "
            f"has {len(want)}; the .py does not belong to this module. Export again"
        )
    for a, spec in zip(got, want):
        mine = TensorSpec(a.shape, a.dtype)
        if mine != spec:
            raise SignatureMismatchError(
                f"{script.path}:{a.line}: {a.name} ({a.label}) is {mine} in the .py but {spec} in "
                f"@main of {script.mlir_file}; the .py does not belong to this module. Export again"
            )


def open_export(
    path: str | os.PathLike[str], *, trust: bool = False, keep_text: bool = False
) -> ReactantExport:
    """Read and check an ``export_to_enzymejax`` directory (or its .py); nothing is executed.

    Each file is opened once, without following symlinks and without blocking on a FIFO,
    and read through that descriptor (files.py).

    Args:
        path: the directory, or the generated .py in it.
        trust: admit ops and custom calls outside the allowlist (only for modules you made).
        keep_text: keep the .mlir's text as read (``module_text``), for `convert`.

    Returns:
        The checked export.

    Raises:
        BundleError: no such directory or .py; ManifestError: the .py is not the template
            (naming the line); UnsafeBundleError: a file outside the directory, a symlink, or
            not a regular file.
        SignatureMismatchError: the .py's arguments disagree with @main.
        MLIRParseError / UnsupportedModuleError: the module does not parse or is refused.
    """
    script_path = _find_script(Path(path))
    script = read_script(script_path)
    root = script_path.parent
    mlir = _inside(root, script.mlir_file, "the module")
    if script.npz_file is not None:
        _inside(root, script.npz_file, "the inputs npz")
    try:
        data = read_bytes(mlir, "the module", MAX_MODULE_BYTES)
    except UnsafeBundleError:
        raise
    except BundleError as e:
        raise BundleError(f"{e}; the .py {script_path.name} reads it") from e
    module = parse_module(data, trust=trust, origin=str(mlir))
    text = data.decode("utf-8") if keep_text else None
    del data
    _check_arguments(script, module)
    return ReactantExport(root, script, module, text)


class ReactantFunction(ImportedFunction):
    """An `ImportedFunction` from an export directory: Reactant's paths as argument labels,
    the saved inputs as `example_inputs()`, the .py's shardings in `metadata`."""

    def __init__(self, export: ReactantExport, backend: Any) -> None:
        super().__init__(export.module, backend, arg_labels=export.labels)
        self.export = export

    def example_inputs(self) -> tuple[np.ndarray, ...]:
        """The inputs Reactant saved in the npz, in @main order (see ReactantExport)."""
        return self.export.example_inputs()

    @property
    def metadata(self) -> dict[str, Any]:
        """The directory's record (ReactantExport.metadata) and the backend."""
        return {**self.export.metadata, "backend": self.backend_name}

    def place_inputs(
        self, inputs: Sequence[Any] | None = None, devices: Sequence[Any] | None = None
    ) -> tuple[Any, ...]:
        """Put the inputs on meshes of `devices` with the .py's PartitionSpecs (sharding.py).

        Args:
            inputs: one array per argument (default: `example_inputs()`).
            devices: the devices to build each mesh from (default: ``jax.devices()``).

        Returns:
            The placed arrays, in @main order.

        Raises:
            CallArgumentError: too few devices for a mesh, or a spec that does not fit.
        """
        from .sharding import place

        return place(self.export, self.example_inputs() if inputs is None else inputs, devices)


def load_reactant_export(
    path: str | os.PathLike[str], *, backend: str = "auto", trust: bool = False
) -> ReactantFunction:
    """Load an ``export_to_enzymejax`` directory as a callable: ``fn(*arrays) -> tuple``.

    The .py is read as data (never run) and its arguments checked against @main; arguments
    are labelled with Reactant's paths (``arg.2``, ``arg.3.1.1``...).

    Args:
        path: the directory, or its .py.
        backend: "auto", "lax", "enzyme" or "xla", as for `juliabridge.load_mlir`.
        trust: admit ops and custom calls outside the allowlist (only for modules you made).

    Returns:
        A ReactantFunction (an ImportedFunction) with ``example_inputs()``, ``metadata`` and
        ``place_inputs()``.

    Raises:
        BundleError: unreadable directory or npz (ManifestError: the .py is not the template;
            UnsafeBundleError: files outside the directory, symlinks, pickles).
        SignatureMismatchError: the .py and @main disagree.
        MLIRParseError / UnsupportedModuleError / BackendUnavailableError: as for load_mlir.
    """
    backend = resolve_backend_name(backend)
    export = open_export(path, trust=trust)
    return ReactantFunction(export, make_backend(export.module, backend, trust=trust))


def is_export_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is an export: the exporter's files together, ``{fn}.py`` beside
    ``{fn}_{id}.mlir`` (the directory, without a manifest.json, or that .py).

    False for anything else (a bundle with a stray train.py, a path that cannot be examined):
    the bundle reader then gives its own message for it.
    """
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path)
    try:
        if p.suffix == ".py":
            return p.exists() and _module_names(p)
        return (
            p.is_dir()
            and not (p / "manifest.json").exists()
            and any(q.suffix == ".py" and _module_names(q) for q in p.iterdir())
        )
    except (OSError, ValueError):
        return False


__all__ = [
    "PRODUCER",
    "ReactantExport",
    "ReactantFunction",
    "is_export_dir",
    "load_reactant_export",
    "open_export",
    "read_export_script",
]
