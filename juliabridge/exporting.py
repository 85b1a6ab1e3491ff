"""export_jax and save_jax: an imported model as a `jax.export.Exported`, serializable.

The exported program is plain StableHLO whatever the backend (lax's primitives, or the module
that xla's and enzyme's calls inline), so it runs wherever the serialized form is read: any
jax that reads its calling convention, with neither Julia nor juliabridge installed. A
symbolic batch dimension serves every batch size from one artifact: the batch is padded to
whole traced-size chunks and the chunks run batched (lux/batchsize.py), which is exact only
when samples are independent, so other models are refused. docs/exporting.md shows how the
artifact is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax

from .bundle.files.atomic import replace_file
from .bundle.manifest import MANIFEST_NAME
from .errors import CallArgumentError, SaveError, TransformError
from .function import ImportedFunction
from .lux.model import LuxModel
from .lux.trees import build_tree
from .support import dtypes

WEIGHTS = ("constants", "arguments")


def _check_options(batch: str | None, weights: str, vjp_order: int) -> None:
    if batch is not None and (not isinstance(batch, str) or not batch.isidentifier()):
        raise CallArgumentError(
            f"batch={batch!r}: expected the name of a symbolic dimension (an identifier such "
            "as 'b'), or None for the traced batch size"
        )
    if weights not in WEIGHTS:
        raise CallArgumentError(f"weights={weights!r}: expected 'constants' or 'arguments'")
    if not isinstance(vjp_order, int) or isinstance(vjp_order, bool) or vjp_order < 0:
        raise CallArgumentError(f"vjp_order={vjp_order!r}: expected an int >= 0")


class _Signature:
    """The flat arguments of the exported program, in Lux (@main) order, and their avals."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.specs: list[jax.ShapeDtypeStruct] = []
        self.batch_axes: list[int | None] = []

    def add(self, name: str, shape: Sequence[Any], dtype: Any, axis: int | None) -> None:
        self.names.append(name)
        self.specs.append(jax.ShapeDtypeStruct(tuple(shape), dtype))
        self.batch_axes.append(axis)


def _model_program(
    model: LuxModel, batch: str | None, weights: str
) -> tuple[Callable[..., Any], _Signature, Any]:
    """The function to export, its arguments and a tree of result names shaped as its results."""
    m = model.manifest
    name = m.name
    if batch is not None:
        if m.batch is None:
            raise CallArgumentError(
                f"{name}: the bundle records no batch size (docs/bundle-format.md §3.6), so it "
                "cannot serve a symbolic batch. A Reactant export declares its batch axis when "
                "imported: import_lux(dir, batch_axis=0) (juliabridge convert DIR --batch-axis "
                "0); or export with batch=None (the traced shapes)"
            )
        if not m.batch.samples_independent:
            raise CallArgumentError(
                f"{name}: its samples are not independent (e.g. BatchNorm in train mode "
                "normalises over the batch), so one program cannot serve every batch size; "
                f"export with batch=None (the traced batch size {m.batch.size}), or export a "
                "test-mode bundle"
            )
    dim = jax.export.symbolic_shape(batch)[0] if batch is not None else None
    julia = model.layout == "julia"
    sig = _Signature()
    entries = [a for a in m.arguments if weights == "arguments" or a.role == "input"]
    for a in entries:
        shape: list[Any] = list(a.shape)
        axis = a.batch_axis if a.role == "input" else None
        if axis is not None and dim is not None:
            shape[axis] = dim
        if julia:
            shape.reverse()
            axis = None if axis is None else len(shape) - 1 - axis
        sig.add(a.label, shape, dtypes.to_numpy(a.dtype), axis if dim is not None else None)
    inputs = [a for a in entries if a.role == "input"]
    positional = bool(inputs) and all(a.path and isinstance(a.path[0], int) for a in inputs)

    def split(flat: Sequence[Any]) -> tuple[tuple[Any, ...], Any, Any]:
        got = dict(zip(((a.role, a.path) for a in entries), flat))
        x = build_tree([(a.path, got["input", a.path]) for a in inputs])
        xs = tuple(x) if positional else (x,)
        if weights == "constants":
            return xs, model.params, model.state
        trees = []
        for role, empty in (("parameter", "params"), ("state", "state")):
            leaves = [(a.path, got[role, a.path]) for a in entries if a.role == role]
            trees.append(build_tree(leaves, empty=m.empty.get(empty, ())))
        return xs, trees[0], trees[1]

    if weights == "constants":

        def program(*flat: Any) -> Any:
            xs, params, state = split(flat)
            return model.apply(params, state, *xs)[0]

        out_names: Any = _result_names(model, "output")
    else:

        def program(*flat: Any) -> Any:
            xs, params, state = split(flat)
            return model.apply(params, state, *xs)

        out_names = (_result_names(model, "output"), _result_names(model, "state"))
    return program, sig, out_names


def _result_names(model: LuxModel, root: str) -> Any:
    """A tree shaped like apply's `root` result ("output" or "state"), each leaf its label."""
    m = model.manifest
    pairs: list[tuple[Any, str]] = []
    if root == "state":
        pairs = [(a.path, a.label) for a in m.arguments if a.role == "state"]
        return build_tree(pairs, empty=m.empty.get("state", ()))
    for r in m.results:
        pairs += [(p[1:], ".".join(map(str, p))) for p in r.paths if p[0] == "output"]
    for al in m.aliases:
        if al.path[0] == "output":
            pairs.append((al.path[1:], ".".join(map(str, al.path))))
    return build_tree(pairs)


def _function_program(
    fn: ImportedFunction, batch: str | None, batch_args: Sequence[int] | None
) -> tuple[Callable[..., Any], _Signature, Any]:
    """A load_mlir function: its arguments as traced, or the `batch_args` stacked on a new
    leading axis (independent calls, vmapped; the others shared by every call)."""
    n = len(fn.in_specs)
    if batch_args is not None and isinstance(batch_args, (str, bytes, int)):
        raise CallArgumentError(
            f"batch_args={batch_args!r}: expected a sequence of argument indices in [0, {n}), "
            "e.g. batch_args=[0]"
        )
    given = list(range(n) if batch_args is None else batch_args)
    # Checked as given, not as a set: {1, True} is {1}, which would drop the bool unseen.
    bad = [i for i in given if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n]
    if bad:
        raise CallArgumentError(
            f"batch_args={sorted(map(str, bad))}: expected argument indices in [0, {n})"
        )
    mapped = set(given)
    sig = _Signature()
    dim = jax.export.symbolic_shape(batch)[0] if batch is not None else None
    for i, (label, spec) in enumerate(zip(fn.arg_labels, fn.in_specs)):
        stacked = dim is not None and i in mapped
        shape = (dim, *spec.shape) if stacked else spec.shape
        sig.add(label, shape, dtypes.to_numpy(spec.dtype), 0 if stacked else None)
    if dim is None:
        return fn, sig, tuple(fn.result_labels)
    axes = [0 if i in mapped else None for i in range(n)]
    return jax.vmap(fn, in_axes=axes), sig, tuple(fn.result_labels)


def _program(
    model: LuxModel | ImportedFunction,
    batch: str | None,
    weights: str,
    batch_args: Sequence[int] | None = None,
) -> tuple[Callable[..., Any], _Signature, Any, str]:
    if isinstance(model, LuxModel):
        if batch_args is not None:
            raise CallArgumentError(
                "batch_args applies to a load_mlir function; a LuxModel's inputs carry the "
                "batch axes its bundle declares"
            )
        return (*_model_program(model, batch, weights), model.manifest.name)
    if isinstance(model, ImportedFunction):
        if weights != "constants":
            raise CallArgumentError(
                "weights='arguments' applies to a LuxModel; a load_mlir function takes every "
                "array as an argument already"
            )
        return (*_function_program(model, batch, batch_args), model.module.origin)
    raise CallArgumentError(
        f"export_jax takes a LuxModel (import_lux) or an ImportedFunction (load_mlir), got a "
        f"{type(model).__name__}"
    )


def export_jax(
    model: LuxModel | ImportedFunction,
    *,
    batch: str | None = "b",
    weights: str = "constants",
    vjp_order: int = 1,
    platforms: Sequence[str] | None = None,
    batch_args: Sequence[int] | None = None,
) -> jax.export.Exported:
    """The model as a `jax.export.Exported`: one program for every batch size, no Julia needed.

    The arguments are flat arrays in Lux's (@main) order, shaped as the model takes them (its
    layout); ``exported.call(*arrays)`` runs it, and ``exported.serialize(vjp_order=...)``
    gives bytes that ``jax.export.deserialize`` reads where juliabridge is not installed.

    Every backend exports: lax as plain JAX primitives, xla and enzyme through the calls they
    lower to (the module inlined, plain StableHLO too), with their own first-order VJP.

    Args:
        model: a LuxModel (``import_lux``) or a ``load_mlir`` function. On the enzyme and xla
            backends only ``vjp_order`` <= 1 exports (no second-order derivatives there).
        batch: the name of the symbolic batch dimension put on every input's batch axis (the
            bundle's); None exports the traced shapes. For a load_mlir function, which
            declares no batch axis, it is a new leading axis on the `batch_args` (independent
            calls, vmapped).
        weights: "constants" (default): params and state are baked into the program, which
            takes the inputs and returns the outputs; "arguments": it takes every @main
            argument (inputs, params, state) and returns ``(outputs, new_state)``.
        vjp_order: derivative orders checked to export now (``Exported.vjp``), so that
            ``serialize(vjp_order=...)`` up to this order cannot fail later.
        platforms: lowering platforms (e.g. ``("cpu", "cuda", "tpu")``); default the
            current one.
        batch_args: (load_mlir functions) the indices of the arguments that get the new
            leading batch axis; default all. Leave weights out: a convolution vmapped over
            its kernel needs a static batch.

    Returns:
        The `jax.export.Exported`.

    Raises:
        CallArgumentError: a bad option, or a symbolic batch for a model whose samples are
            not independent (train-mode BatchNorm) or that records no batch size.
        TransformError: jax.export failed to export the program or its VJPs (vjp_order >= 2
            on the enzyme or xla backend: the message names the lax backend).
    """
    _check_options(batch, weights, vjp_order)
    program, sig, _, what = _program(model, batch, weights, batch_args)
    return _export(program, sig, what, vjp_order, platforms)


def _export(
    program: Callable[..., Any],
    sig: _Signature,
    what: str,
    vjp_order: int,
    platforms: Sequence[str] | None,
) -> jax.export.Exported:
    exporter = jax.export.export(
        jax.jit(program), platforms=tuple(platforms) if platforms is not None else None
    )
    try:
        exported = exporter(*sig.specs)
        derived = exported
        for _ in range(vjp_order):
            derived = derived.vjp()
    except (ValueError, TypeError, NotImplementedError) as e:
        if isinstance(e, CallArgumentError):
            raise
        raise TransformError(f"{what}: jax.export failed: {type(e).__name__}: {e}") from e
    return exported


def _json_dim(d: Any) -> int | str:
    return str(d) if jax.export.is_symbolic_dim(d) else int(d)


def describe(exported: jax.export.Exported, names: Sequence[str], out_names: Any) -> dict[str, Any]:
    """The JSON description of an exported program: arguments and results with names, shapes
    (a symbolic dimension by its name) and dtypes, in the program's flat order."""
    flat_out, _ = jax.tree.flatten(out_names)
    return {
        "arguments": [
            {"name": n, "shape": [_json_dim(d) for d in a.shape], "dtype": str(a.dtype)}
            for n, a in zip(names, exported.in_avals)
        ],
        "results": [
            {"name": n, "shape": [_json_dim(d) for d in a.shape], "dtype": str(a.dtype)}
            for n, a in zip(flat_out, exported.out_avals)
        ],
        "platforms": list(exported.platforms),
        "calling_convention_version": exported.calling_convention_version,
    }


def save_jax(
    model: LuxModel | ImportedFunction,
    path: str | os.PathLike[str],
    *,
    batch: str | None = "b",
    weights: str = "constants",
    vjp_order: int = 1,
    platforms: Sequence[str] | None = None,
    batch_args: Sequence[int] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``export_jax(model, ...)`` serialized to `path`, and its description to
    ``path + ".json"`` (argument and result names, shapes, dtypes, the source's digest).

    Args:
        model, batch, weights, vjp_order, platforms, batch_args: as for `export_jax`.
        path: the file to write (e.g. ``lenet.jaxexport``).
        overwrite: replace existing files (default: refuse).

    Returns:
        The description written to the JSON file.

    Raises:
        SaveError: a file exists (without overwrite) or cannot be written.
        CallArgumentError / TransformError: as for `export_jax`.
    """
    _check_options(batch, weights, vjp_order)
    program, sig, out_names, what = _program(model, batch, weights, batch_args)
    exported = _export(program, sig, what, vjp_order, platforms)
    try:
        data = exported.serialize(vjp_order=vjp_order)
    except ImportError as e:  # jax serializes with flatbuffers, a dependency of juliabridge
        raise SaveError(f"jax cannot serialize here ({e}); pip install flatbuffers") from e
    info = describe(exported, sig.names, out_names)
    info = {
        "format": "juliabridge-jax-export",
        "format_version": 1,
        "source": what,
        **_source_digest(model),
        "batch": batch,
        "weights": weights,
        "vjp_order": vjp_order,
        "jax_version": jax.__version__,
        **info,
    }
    target = Path(path)
    meta = target.with_name(target.name + ".json")
    text = json.dumps(info, indent=2) + "\n"
    for file, content in ((target, bytes(data)), (meta, text.encode())):
        _write_atomic(file, content, overwrite)
    return info


def _source_digest(model: LuxModel | ImportedFunction) -> dict[str, Any]:
    """sha256 of the bundle's manifest.json (which records every other file's digest), or of
    the module text for a load_mlir function.

    The manifest's digest is the one `load_manifest` took of the very bytes it parsed when the
    model was imported: no file is opened again (it may have changed, or been replaced by a
    link, since). A model whose manifest was made in memory (a Julia or Reactant export
    directory) has none.
    """
    if isinstance(model, LuxModel):
        digest = model.manifest.source_sha256
        if digest is None:
            return {"source_digest": None}
        return {"source_digest": {"algorithm": "sha256", "of": MANIFEST_NAME, "hex": digest}}
    digest = hashlib.sha256(model.module.text.encode()).hexdigest()
    return {"source_digest": {"algorithm": "sha256", "of": "module text", "hex": digest}}


def arguments_of(model: LuxModel, *inputs: Any) -> list[Any]:
    """The arrays a ``weights="arguments"`` artifact of `model` takes, in its order (Lux's
    @main order, the ``arguments`` of its JSON description): the inputs' leaves, and the
    leaves of ``model.params`` and ``model.state`` at the manifest's paths.

    Args:
        model: the LuxModel the artifact was exported from.
        inputs: the model's inputs, as ``model(*inputs)`` takes them.

    Returns:
        The flat list for ``exported.call(*arrays)``.

    Raises:
        CallArgumentError: not a LuxModel, or a tree lacks a path the manifest records.
    """
    if not isinstance(model, LuxModel):
        raise CallArgumentError(
            f"arguments_of takes a LuxModel (import_lux), got a {type(model).__name__}"
        )
    m = model.manifest
    entries = [a for a in m.arguments if a.role == "input"]
    positional = bool(entries) and all(a.path and isinstance(a.path[0], int) for a in entries)
    roots = {"input": inputs if positional else (inputs[0] if inputs else None),
             "parameter": model.params, "state": model.state}  # fmt: skip
    out = []
    for a in m.arguments:
        tree = roots[a.role]
        try:
            for key in a.path:
                tree = tree[key]
        except (KeyError, IndexError, TypeError) as e:
            raise CallArgumentError(
                f"{m.name}: no value at {a.label} ({a.role} path {list(a.path)}): {e!r}"
            ) from e
        out.append(tree)
    return out


def _check_target(target: Path, overwrite: bool) -> None:
    """Refuse a directory, or an existing file without `overwrite` (SaveError)."""
    if target.is_dir():
        raise SaveError(f"{target}: is a directory; pass a file path")
    if target.exists() and not overwrite:
        raise SaveError(f"{target}: already exists; pass overwrite=True (--overwrite) to replace")


def _write_atomic(target: Path, content: bytes, overwrite: bool) -> None:
    _check_target(target, overwrite)
    try:
        replace_file(target, content)
    except OSError as e:
        raise SaveError(f"{target}: cannot write ({e.strerror or e})") from e


__all__ = ["WEIGHTS", "arguments_of", "describe", "export_jax", "save_jax"]
