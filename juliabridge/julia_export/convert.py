"""A Julia export directory as a bundle on disk (``juliabridge convert DIR --out NAME.bundle``)
or as a LuxModel in memory (``juliabridge.import_lux(DIR)``), both from `complete`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..bundle.manifest import default_tolerances
from ..bundle.write.description import ArgumentSpec, BundleDescription
from ..bundle.write.writer import write_bundle
from ..lux.model import LuxModel, bundle_model
from ..lux.options import DEFAULT_OPTIONS, LoadOptions
from ..support import dtypes
from .complete import complete


def convert_julia_export(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: LoadOptions = DEFAULT_OPTIONS,
    *,
    overwrite: bool = False,
) -> Path:
    """Write the format-3 bundle `out` from a Julia export directory (docs/julia-export.md).

    The bundle is written by the bundle writer (weights under the conventional dataset names,
    a portable artifact of the module) and checked by the reader's rules before it is renamed
    into place; `juliabridge.import_lux(out)` reads it like any bundle.

    Args:
        path: the export directory.
        out: the bundle directory to write (``NAME.bundle``).
        options: the load's options; only `trust` applies (admit ops and custom calls outside
            the allowlist).
        overwrite: replace an existing bundle at `out`.

    Returns:
        `out`.

    Raises:
        BundleError / ManifestError / SignatureMismatchError: as for `complete`;
            SaveError: the bundle cannot be written.
    """
    c = complete(path, trust=options.trust, keep_examples=True)
    m = c.bundle.manifest
    inputs = c.example_inputs or {}
    arguments = []
    for a in m.arguments:
        value = c.weights.get(a.index, inputs.get(a.index))
        if value is None:  # an input without an example: a zero-cost stand-in, never written
            value = np.broadcast_to(np.zeros((), dtypes.to_numpy(a.dtype)), a.shape)
        arguments.append(ArgumentSpec(a.role, a.path, value, a.batch_axis, a.tied_paths))
    outputs = c.example_outputs
    rtol = atol = None
    if outputs is not None:
        rtol, atol = default_tolerances([m.results[k].dtype for k in outputs])
    return write_bundle(
        out,
        BundleDescription(
            name=m.name,
            mlir_text=c.text,
            arguments=arguments,
            result_paths=[r.paths for r in m.results],
            mode=m.mode,
            batch=vars(m.batch).copy() if m.batch else None,
            example_outputs=outputs,
            result_batch_axes=[r.batch_axis for r in m.results],
            metadata=m.metadata,
            note=m.producer.note or "",
            rtol=rtol,
            atol=atol,
            empty=m.empty or None,
            result_echoes=[r.echo_of for r in m.results],
            static_state=[(s.path, s.value, s.julia_type) for s in m.static_state],
            producer={
                k: v
                for k, v in vars(m.producer).items()
                if k != "note" and not (k == "created" and v is None)
            },
        ),
        overwrite=overwrite,
        trust=options.trust,
    )


def import_julia_export(
    path: str | os.PathLike[str], options: LoadOptions = DEFAULT_OPTIONS
) -> LuxModel:
    """A Julia export directory as a LuxModel (the route of `juliabridge.import_lux`).

    The weights are read once: checked, digested for the completed manifest, and loaded.

    Args:
        path: the export directory.
        options: backend, layout and trust apply, as for `juliabridge.import_lux` (the
            directory records no digests to verify).

    Returns:
        The LuxModel; ``model.manifest`` is the completed format-3 manifest.

    Raises:
        As `complete`, and as `import_lux` for the backend and x64.
    """
    c = complete(path, trust=options.trust)
    args = c.bundle.manifest.arguments
    weights = [(args[i], arr) for i, arr in sorted(c.weights.items())]
    return bundle_model(c.bundle, weights, options)


__all__ = ["convert_julia_export", "import_julia_export"]
