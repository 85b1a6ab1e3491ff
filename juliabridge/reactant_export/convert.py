"""An export directory as a format-3 bundle (docs/bundle-format.md), so every bundle tool
reads it: the npz's ps and st as weights, the mapped results, producer naming Reactant's
exporter. Reactant records no outputs, so the bundle has no examples section and `verify`
says there is nothing to compare against."""

from __future__ import annotations

import os
from pathlib import Path

from .._version import __version__
from ..bundle.write.description import ArgumentSpec, BundleDescription
from ..bundle.write.writer import write_bundle
from ..errors import BundleError
from ..lux.options import DEFAULT_OPTIONS, LoadOptions
from .directory import PRODUCER
from .luxmodel import export_bundle


def convert_export(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: LoadOptions = DEFAULT_OPTIONS,
    *,
    overwrite: bool = False,
) -> Path:
    """Write the bundle `out` from an ``export_to_enzymejax`` directory.

    Args:
        path: the export directory or its .py.
        out: the bundle directory to write (``NAME.bundle``).
        options: the load's options; trust and the export overrides (outputs, state_results,
            positions, batch_axis) apply, as for `import_lux` on an export.
        overwrite: replace an existing bundle at `out`.

    Returns:
        `out`.

    Raises:
        BundleError / ManifestError / SignatureMismatchError: as for `import_lux` on the
            export; SaveError: the bundle cannot be written.
    """
    bundle, export = export_bundle(path, options, keep_text=True)
    m = bundle.manifest
    entries = m.arguments
    values = export.example_inputs()
    # The text read and checked by open_export, never the file read again by name.
    text = export.module_text
    if text is None:
        raise BundleError(f"{export.root}: the module text was not kept")  # open_export keeps it
    return write_bundle(
        out,
        BundleDescription(
            name=m.name,
            mlir_text=text,
            arguments=[
                ArgumentSpec(a.role, a.path, v, a.batch_axis) for a, v in zip(entries, values)
            ],
            result_paths=[r.paths for r in m.results],
            mode=m.mode,
            batch=vars(m.batch) if m.batch else None,
            result_batch_axes=[r.batch_axis for r in m.results],
            result_echoes=[r.echo_of for r in m.results],
            metadata=m.metadata,
            note=f"Converted by juliabridge {__version__} from {export.script.path.name} (read as "
            "data, never run) and its npz; the results were mapped from @main's structure. "
            "Reactant's exporter records no outputs, so there are no reference outputs.",
            producer={"tool": PRODUCER, "tool_version": "unknown"},
        ),
        overwrite=overwrite,
        trust=options.trust,
    )


__all__ = ["convert_export"]
