"""`import_lux` for export directories: the in-memory manifest (luxmap) around a LuxModel."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..backends import make_backend
from ..bundle.bundle import Bundle
from ..errors import BundleError, CallArgumentError
from ..function import ImportedFunction
from ..lux.model import LuxModel
from ..lux.options import DEFAULT_OPTIONS, LoadOptions
from ..lux.trees import build_tree
from ..lux.x64 import require_x64_weights
from .directory import ReactantExport, open_export
from .luxmap import argument_entries, build_manifest, map_results, positions


def export_bundle(
    path: str | os.PathLike[str],
    options: LoadOptions = DEFAULT_OPTIONS,
    *,
    keep_text: bool = False,
    require_inputs: bool = True,
) -> tuple[Bundle, ReactantExport]:
    """The export as an in-memory Bundle (manifest from luxmap) and the export itself.

    Args:
        path: the directory or its .py.
        options: the load's options; trust and the export overrides (outputs, state_results,
            positions, batch_axis) apply, as for `import_export_lux`.
        keep_text: keep the .mlir's text as read (`convert` writes exactly what was checked).
        require_inputs: refuse an export without the npz (it has no parameter values);
            `inspect` passes False to describe one anyway.

    Returns:
        (bundle, export); the bundle's weights are the npz's, read by the caller.

    Raises:
        BundleError / ManifestError / SignatureMismatchError: as for `import_export_lux`.
    """
    export = open_export(path, trust=options.trust, keep_text=keep_text)
    if require_inputs and not export.has_inputs:
        raise BundleError(
            f"{export.script.path}: exported with export_data_as_npz=false, so there are no "
            "parameter values; re-export with the npz, or use juliabridge.load_reactant_export "
            "and pass ps and st yourself"
        )
    layout = positions(export, options.positions)
    entries = argument_entries(export, layout, options.batch_axis)
    rmap = map_results(export, entries, options.outputs, options.state_results, layout)
    manifest = build_manifest(export, entries, rmap, options.batch_axis)
    bundle = Bundle(
        export.root,
        manifest,
        export.module,
        checksums_verified=False,
        module_source="text",
        module_source_note=f"{export.script.mlir_file}, named by {export.script.path.name}",
    )
    return bundle, export


def import_export_lux(
    path: str | os.PathLike[str], options: LoadOptions = DEFAULT_OPTIONS
) -> LuxModel:
    """An ``export_to_enzymejax`` directory as a LuxModel (see `juliabridge.import_lux`).

    Args:
        path: the directory or its .py.
        options: the load's options: backend, layout and trust as for `import_lux`; outputs
            and state_results say which @main results are outputs and which new st leaves,
            when the module does not determine it (luxmap.map_results); positions, the traced
            positions of (x, ps, st) when not the manual's; batch_axis, the inputs' batch axis
            if samples are independent along it (then any batch size is served, as for a
            bundle with ``samples_independent``). verify_checksums does not apply.

    Returns:
        The LuxModel; params and state come from the npz: integer path steps become tuples
        (``params[0]`` is position 1), named steps (Dict keys, symbols) dicts.

    Raises:
        BundleError / ManifestError / SignatureMismatchError: as for `load_reactant_export`,
            or the arguments or results do not map onto (x, ps, st) -> (y, st).
        CallArgumentError: `shardings` given (its weights come from an npz, read whole).
    """
    if options.shardings is not None:
        raise CallArgumentError(
            f"{path}: shardings= applies to bundles and JuliaBridge.jl's export directories; "
            "convert this Reactant export first (juliabridge convert) and import the bundle"
        )
    bundle, export = export_bundle(path, options)
    manifest = bundle.manifest
    fn = ImportedFunction(
        export.module,
        make_backend(export.module, options.backend, trust=options.trust),
        arg_labels=[a.label for a in manifest.arguments],
        result_labels=[r.label for r in manifest.results],
    )
    require_x64_weights(manifest, f"export {export.root}")
    # Placed leaf by leaf before the trees are built: a tree map would sort the Dict keys.
    params, state = export_trees(
        bundle, export, lambda h: jax.device_put(h.T if options.layout == "julia" else h)
    )
    return LuxModel(bundle, fn, params, state, layout=options.layout)


def export_trees(
    bundle: Bundle, export: ReactantExport, place: Callable[[np.ndarray], Any] = lambda h: h
) -> tuple[Any, Any]:
    """(params, state) of an export from its npz: integer path steps as tuples (an empty
    container None), named steps as dicts in the .py's order, as `import_export_lux`
    presents them.

    Args:
        bundle, export: as `export_bundle` returns them.
        place: applied to each host array (MLIR layout) before it enters a tree.

    Raises:
        BundleError: no npz, or it is unreadable or disagrees with @main.
    """
    values = export.example_inputs()
    leaves: dict[str, list[tuple[tuple[int | str, ...], Any]]] = {"parameter": [], "state": []}
    for a, host in zip(bundle.manifest.arguments, values):
        if a.role != "input":
            leaves[a.role].append((a.path, place(host)))
    return build_tree(leaves["parameter"]), build_tree(leaves["state"])


def read_export_params(
    path: str | os.PathLike[str], options: LoadOptions = DEFAULT_OPTIONS
) -> tuple[Any, Any]:
    """(params, state) saved in an ``export_to_enzymejax`` directory's npz, as numpy trees in
    MLIR layout shaped like the `import_export_lux` model's (what `juliabridge.load_params`
    gives for such a directory).

    Args:
        path: the directory or its .py.
        options: the overrides the model was imported with (positions=, outputs=, ...), when
            the directory needs them to be read as a Lux model.

    Raises:
        BundleError / ManifestError / SignatureMismatchError: as for `import_export_lux`.
    """
    bundle, export = export_bundle(path, options)
    return export_trees(bundle, export)


__all__ = ["export_bundle", "export_trees", "import_export_lux", "read_export_params"]
