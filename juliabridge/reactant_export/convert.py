"""An export directory as a format-3 bundle (docs/bundle-format.md), so every bundle tool
reads it: the npz's ps and st as weights, the mapped results, producer naming Reactant's
exporter. Reactant records no outputs, so the bundle has no examples section and `verify`
says there is nothing to compare against."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._version import __version__
from ..bundle.write.writer import ArgumentSpec, write_bundle
from ..errors import BundleError
from .directory import PRODUCER
from .luxmodel import export_bundle


def convert_export(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    trust: bool = False,
    outputs: Sequence[int] | None = None,
    state_results: Mapping[int, int] | None = None,
    arg_positions: Sequence[int] | None = None,
    batch_axis: int | None = None,
) -> Path:
    """Write the bundle `out` from an ``export_to_enzymejax`` directory.

    Args:
        path: the export directory or its .py.
        out: the bundle directory to write (``NAME.bundle``).
        overwrite: replace an existing bundle at `out`.
        trust: admit ops and custom calls outside the allowlist.
        outputs, state_results, arg_positions, batch_axis: as for `import_lux` on an export.

    Returns:
        `out`.

    Raises:
        BundleError / ManifestError / SignatureMismatchError: as for `import_lux` on the
            export; SaveError: the bundle cannot be written.
    """
    bundle, export = export_bundle(
        path,
        trust=trust,
        outputs=outputs,
        state_results=state_results,
        arg_positions=arg_positions,
        batch_axis=batch_axis,
        keep_text=True,
    )
    m = bundle.manifest
    entries = m.arguments
    values = export.example_inputs()
    # The text read and checked by open_export, never the file read again by name.
    text = export.module_text
    if text is None:
        raise BundleError(f"{export.root}: the module text was not kept")  # open_export keeps it
    return write_bundle(
        out,
        name=m.name,
        mlir_text=text,
        arguments=[ArgumentSpec(a.role, a.path, v, a.batch_axis) for a, v in zip(entries, values)],
        result_paths=[r.paths for r in m.results],
        mode=m.mode,
        batch=vars(m.batch) if m.batch else None,
        result_batch_axes=[r.batch_axis for r in m.results],
        result_echoes=[r.echo_of for r in m.results],
        metadata=m.metadata,
        note=(
            f"Converted by juliabridge {__version__} from {export.script.path.name} (read as "
            "data, never run) and its npz; the results were mapped from @main's structure. "
            "Reactant's exporter records no outputs, so there are no reference outputs."
        ),
        overwrite=overwrite,
        producer={"tool": PRODUCER, "tool_version": "unknown"},
    )


__all__ = ["convert_export"]
