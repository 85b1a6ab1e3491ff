"""Where the sources a model can come from meet: `import_lux` reads a bundle directory
(lux/model.py), a directory written by JuliaBridge.jl (julia_export/) or one written by
Reactant's ``export_to_enzymejax`` (reactant_export/), and `load_mlir` a bare StableHLO
module (function.py; `import_lux` of a file refuses it with that advice, bundle/bundle.py).
`import_lux` makes one LoadOptions of its keywords (lux/options.py) and hands it to the route.
Everything here sits above lux/, julia_export/ and reactant_export/; only verification, the
adapters, julia/, testing/ and cli/ import it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .function import load_mlir
from .julia_export import complete, import_julia_export, is_julia_export
from .lux import params_io as lux_params_io
from .lux import restore
from .lux.model import LuxModel, import_bundle_lux
from .lux.options import LoadOptions
from .lux.trees import build_tree
from .reactant_export.directory import is_export_dir, load_reactant_export
from .reactant_export.luxmodel import import_export_lux, read_export_params

T = TypeVar("T")

if TYPE_CHECKING:
    from .lux.sharded_load import ShardingSpec


def import_lux(
    path: str | os.PathLike[str],
    *,
    backend: str = "auto",
    layout: str = "mlir",
    verify_checksums: bool = True,
    trust: bool = False,
    outputs: Sequence[int] | None = None,
    state_results: Mapping[int, int] | None = None,
    positions: Sequence[int] | None = None,
    batch_axis: int | None = None,
    shardings: ShardingSpec | None = None,
) -> LuxModel:
    """Load a bundle directory as a LuxModel (checksums verified unless told otherwise).

    A directory written by JuliaBridge.jl's ``export_lux`` (holding ``juliabridge-export.json``)
    is completed to a bundle in memory (docs/julia-export.md; nothing in it has digests to
    verify, so `verify_checksums` does not apply). A directory written by Reactant's
    ``Serialization.export_to_enzymejax`` (or its .py) is read too, without running anything
    in it (docs/reactant-export.md), when it holds the exporter's files together (``{fn}.py``
    beside ``{fn}_{id}.mlir``); the last four arguments apply to such directories only.

    Args:
        path: the bundle directory (``NAME.bundle``, docs/bundle-format.md).
        backend: "auto" (default: "lax" when every op lifts, else "enzyme" where enzyme-ad
            imports, else "xla"; ``model.metadata["backend_fallback"]`` says why), "lax",
            "enzyme" or "xla". docs/transforms.md compares what each can do.
        layout: "mlir" (default) uses the module's row-major shapes, Julia's dims reversed;
            "julia" presents params, state, inputs and outputs in Julia's dimension order.
        verify_checksums: check the digests the manifest records (default): BLAKE3 per
            dataset in format 3 (sha256 in formats 1-2) and sha256 per module file; False
            skips them and the model records ``checksums_verified=False``.
        trust: admit ops and custom calls outside the allowlist (only for bundles you made).
        outputs: (export directories) the @main results that are the outputs, in order, when
            the module does not determine it.
        state_results: (export directories) result index -> index of the st argument whose
            new value it is.
        positions: (export directories) the traced positions of (x, ps, st); default (2, 3, 4)
            for a Lux layer, (1, 2, 3) for a field-less ``f(x, ps, st)``.
        batch_axis: (export directories) the inputs' batch axis when samples are independent
            along it, so that any batch size is served.
        shardings: where each parameter and state array goes, each process reading only its
            own shards from the weights file (docs/multihost.md): a function ``(lux_path,
            shape, dtype) -> Sharding | None``, a pair ``(params_shardings, state_shardings)``
            of trees, or one Sharding. Not for Reactant export directories.

    Returns:
        A LuxModel: ``model.apply(params, state, *inputs) -> (outputs, new_state)``,
        ``model(x)``, ``model.params``/``model.state`` as nested dicts by Lux name for a
        bundle. An export directory records positions, not names (except Dict keys and
        symbols Reactant's tracer records): its trees are tuples by position
        (``model.params[0][0]`` is the first leaf of the first layer), dicts where the path
        has names.

    Raises:
        BundleError: the directory is not a readable bundle; ManifestError,
            ChecksumError, BundleVersionError and UnsafeBundleError are its subclasses.
        SignatureMismatchError: manifest, module and weights disagree.
        UnsupportedModuleError / MLIRParseError: the module is refused or does not parse.
        X64DisabledError: 64-bit weights while jax_enable_x64 is off.
        BackendUnavailableError: backend="enzyme" without enzyme-ad.
        UnsupportedOpError: backend="lax" and an op of the module does not lift.
        CallArgumentError: `shardings` gives no Sharding fitting some array, or is given for
            a Reactant export directory.
    """
    options = LoadOptions(
        backend=backend,
        layout=layout,
        verify_checksums=verify_checksums,
        trust=trust,
        outputs=outputs,
        state_results=state_results,
        positions=positions,
        batch_axis=batch_axis,
        shardings=shardings,
    )
    if is_julia_export(path):
        return import_julia_export(path, options)
    if is_export_dir(path):
        return import_export_lux(path, options)
    return import_bundle_lux(path, options)


def load_params(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """Read (params, state) as nested dicts/tuples of numpy arrays (MLIR layout).

    `path` is a file written by `save_params` (or JuliaBridge), a bundle directory (its
    weights, digests verified), a JuliaBridge.jl export directory (its weights, checked against
    its description), or a directory written by Reactant's ``export_to_enzymejax``
    (or its .py): the ps and st arrays saved in its npz, as tuples by position where the
    paths have positions, shaped like ``import_lux(path).params``/``.state``. The rules and
    checks of each are `juliabridge.lux.params_io.load_params`'s and
    `reactant_export.luxmodel.read_export_params`'s.

    Args:
        path: a weights file, a bundle directory or a Reactant export directory.

    Returns:
        ``(params, state)`` shaped like ``model.params``/``model.state``.

    Raises:
        BundleError: the file or directory is missing, unreadable or not weights (a Reactant
            export written with ``export_data_as_npz=false`` has no values); ChecksumError,
            UnsafeBundleError and ManifestError as `juliabridge.lux.params_io.load_params`.
    """
    if is_julia_export(path):
        return _julia_export_params(path)
    if is_export_dir(path):
        return read_export_params(path)
    return lux_params_io.load_params(path)


def _julia_export_params(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """A JuliaBridge.jl export directory's (params, state), read and checked as `import_lux`
    reads them (julia_export.complete), in the trees its model has."""
    c = complete(path)
    m = c.bundle.manifest
    trees = []
    for role, group in (("parameter", "params"), ("state", "state")):
        leaves = [(a.path, c.weights[a.index]) for a in m.arguments if a.role == role]
        trees.append(build_tree(leaves, empty=m.empty.get(group, ())))
    return trees[0], trees[1]


def load_into(target: T, path: str | os.PathLike[str]) -> T:
    """Load the params and state saved at `path` into `target`, checked against its trees.

    Args:
        target: a `LuxModel`, or the Flax or Equinox ``LuxModule`` wrapping one.
        path: a file written by `juliabridge.save_params` (or JuliaBridge), a bundle
            directory, a JuliaBridge.jl export directory, or a Reactant
            ``export_to_enzymejax`` directory (its npz's values), as `load_params` reads.

    Returns:
        For a `LuxModel` a copy holding the loaded trees; for an Equinox module a new module;
        for a Flax NNX module the same module, its variables set (`lux.restore.load_into`).

    Raises:
        CallArgumentError: `target` is neither a model nor a wrapper.
        SignatureMismatchError: the trees at `path` differ from the target's, named.
        BundleError: `path` cannot be read (as `load_params`).
    """
    return restore.load_into(target, path, read=load_params)


__all__ = ["import_lux", "load_into", "load_mlir", "load_params", "load_reactant_export"]
