"""LuxModel: a bundle as a pure JAX function over named params and state."""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import cached_property
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..backends import make_backend
from ..bundle import Bundle, open_bundle
from ..bundle.manifest import ArgumentEntry, Manifest
from ..errors import CallArgumentError, ExecutionError
from ..function import ImportedFunction, all_concrete_arrays
from ..support import dtypes, progress
from ..transforms.sharding import device_conflict
from ..transforms.typed_errors import Compiled
from .batchsize import call_any_batch, check_fixed_shapes
from .options import LoadOptions
from .sharded_load import place_arguments, read_bundle
from .trees import build_tree, lookup
from .x64 import require_x64_weights


class LuxModel:
    """A Lux model imported from a bundle (made by `import_lux`, not usually by hand).

    ``apply(params, state, *inputs) -> (outputs, new_state)`` is pure and jittable; ``params``
    and ``state`` are nested dicts of jax arrays keyed by Lux names (optax-ready pytrees).

    Args:
        bundle: the opened, validated bundle.
        fn: the module's @main as an `ImportedFunction` on the chosen backend.
        params: the parameter tree (assignable, e.g. to put it on a mesh).
        state: the Lux state tree (assignable).
        layout: "mlir" (row-major, Julia's dims reversed) or "julia".
    """

    def __init__(
        self,
        bundle: Bundle,
        fn: ImportedFunction,
        params: Any,
        state: Any,
        *,
        layout: str = "mlir",
    ) -> None:
        self.bundle = bundle
        self.fn = fn
        self.layout = layout
        self.params = params
        self.state = state

    # --- description -----------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """The backend running the module: "lax", "enzyme" or "xla"."""
        return self.fn.backend_name

    @property
    def manifest(self) -> Manifest:
        """The validated manifest."""
        return self.bundle.manifest

    @property
    def metadata(self) -> dict[str, Any]:
        """Producer versions, mode and the manifest's free-form metadata."""
        m = self.manifest
        return {
            "name": m.name,
            "mode": m.mode,
            "producer": vars(m.producer).copy(),
            "format_version": m.format_version,
            "backend": self.fn.backend_name,
            "backend_fallback": self.fn.fallback_reason,
            "checksums_verified": self.bundle.checksums_verified,
            "module_source": self.bundle.module_source,
            "static_state": [vars(leaf).copy() for leaf in m.static_state],
            **({"batch": vars(m.batch).copy()} if m.batch else {}),
            # Shardings Reactant recorded on @main; the caller places arrays (jax.device_put /
            # data_parallel), and a call under Explicit axes warns where they disagree.
            "shardings": {
                m.arguments[i].label: s for i, s in self.bundle.module.arg_shardings.items()
            },
            "num_partitions": self.bundle.module.num_partitions,
            "metadata": m.metadata,
        }

    @property
    def signature(self) -> dict[str, list[dict[str, Any]]]:
        """Every argument and result with name, role, MLIR and Julia shapes and dtype."""
        m = self.manifest
        return {
            "arguments": [
                {
                    "name": a.label,
                    "role": a.role,
                    "shape": a.shape,
                    "julia_shape": a.julia_shape,
                    "dtype": a.dtype,
                }
                for a in m.arguments
            ],
            "results": [
                {
                    "name": ", ".join(".".join(map(str, p)) for p in r.paths),
                    "shape": r.shape,
                    "dtype": r.dtype,
                }
                for r in m.results
            ]
            + [
                {
                    "name": ".".join(map(str, al.path)),
                    "alias_of": m.arguments[al.argument].label,
                    "shape": m.arguments[al.argument].shape,
                    "dtype": m.arguments[al.argument].dtype,
                }
                for al in m.aliases
            ],
        }

    @cached_property
    def _input_entries(self) -> list[ArgumentEntry]:
        return [a for a in self.manifest.arguments if a.role == "input"]

    # --- calling ---------------------------------------------------------------------------

    @cached_property
    def _positional_inputs(self) -> bool:
        # Julia's x was a tuple: its elements are the call's arguments (x[1], x[2], ...).
        paths = [a.path for a in self._input_entries]
        return bool(paths) and all(p and isinstance(p[0], int) for p in paths)

    @cached_property
    def input_form(self) -> str:
        """How this model's inputs are passed, in words (error messages quote it).

        A Julia tuple ``x = (a, b)`` is passed as separate arguments, ``model(a, b)`` and
        ``model.apply(params, state, a, b)``; a Dict or NamedTuple ``x`` as one dict by key;
        a single array as itself.
        """
        entries = self._input_entries
        if self._positional_inputs:
            n = max(int(a.path[0]) for a in entries)
            names = ", ".join(f"x[{i}]" for i in range(1, n + 1))
            return (
                f"{n} arrays, one per element of Julia's tuple x, as separate arguments: "
                f"model({names}) or model.apply(params, state, {names}), not one tuple"
            )
        if entries and entries[0].path:
            keys = list(dict.fromkeys(str(a.path[0]) for a in entries))
            shown = ", ".join(f"{k!r}: ..." for k in keys[:6]) + (", ..." if len(keys) > 6 else "")
            return (
                f"one dict keyed like Julia's x (a Dict or NamedTuple), {{{shown}}}: "
                "model(x) or model.apply(params, state, x)"
            )
        return "one array: model(x) or model.apply(params, state, x)"

    def _input_tree(self, inputs: tuple[Any, ...]) -> Any:
        entries = self._input_entries
        expected = max(int(a.path[0]) for a in entries) if self._positional_inputs else 1
        if len(inputs) != expected:
            hint = ""
            if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)):
                hint = f" (one {type(inputs[0]).__name__}: unpack it, model(*x))"
            raise CallArgumentError(
                f"{self.manifest.name}: the model takes {self.input_form}; got "
                f"{len(inputs)} argument(s){hint}"
            )
        return tuple(inputs) if self._positional_inputs else inputs[0]

    def _to_mlir(self, x: Any) -> Any:
        # Julia order is the MLIR order reversed; a transpose inside the jitted program.
        return jnp.transpose(x) if self.layout == "julia" else x

    def apply(self, params: Any, state: Any, *inputs: Any) -> tuple[Any, Any]:
        """Run the model: ``(outputs, new_state)`` as Lux's ``model(x, ps, st)`` returns.

        Args:
            params: a parameter tree shaped like ``model.params`` (e.g. being trained).
            state: a state tree shaped like ``model.state``.
            *inputs: the model's inputs. Julia's ``x`` as it was: one array; or, for a tuple
                ``x = (a, b)``, its elements as separate arguments, ``apply(p, s, a, b)`` (not
                one tuple); or, for a Dict or NamedTuple, one dict by key. ``model.input_form``
                says which. Any batch size when the manifest says samples are independent,
                else the traced one.

        Returns:
            ``(outputs, new_state)``: the output (an array, or a tree for tuple outputs) and
            the state tree Lux returns.

        Raises:
            CallArgumentError: wrong number, kind, shape or dtype of inputs, a tree missing a
                leaf, or a batch size the model cannot serve.
            TransformError / ExecutionError: a derivative or the module's run fails.
        """
        x = self._input_tree(inputs)
        flat = []
        for a in self.manifest.arguments:
            tree, root = {
                "input": (x, "x"),
                "parameter": (params, "params"),
                "state": (state, "state"),
            }[a.role]
            expected = self.input_form if a.role == "input" else None
            flat.append(self._to_mlir(lookup(tree, a.path, root, expected)))
        if self.manifest.batch is None:
            check_fixed_shapes(self.manifest, flat, self.layout)
        results = call_any_batch(
            self.manifest,
            self.fn,
            flat,
            batched_chunks=self.fn.traceable,
            recorded=self.bundle.module.arg_shardings,
            layout=self.layout,
        )
        results = tuple(self._to_mlir(r) for r in results)  # transpose is its own inverse
        flat = [self._to_mlir(v) for v in flat]
        outs: list[tuple[tuple[Any, ...], Any]] = []
        for r, value in zip(self.manifest.results, results):
            outs += [(p, value) for p in r.paths]
        outs += [(al.path, flat[al.argument]) for al in self.manifest.aliases]
        output = build_tree([(p[1:], v) for p, v in outs if p[0] == "output"])
        new_leaves = {p[1:]: v for p, v in outs if p[0] == "state"}
        # Lux returns the whole state; leaves the module does not touch come back unchanged.
        # (A state result is always at a state argument's path: the manifest checks that.)
        state_args = [a for a in self.manifest.arguments if a.role == "state"]
        new_state = build_tree(
            [(a.path, new_leaves.get(a.path, flat[a.index])) for a in state_args],
            empty=self.manifest.empty.get("state", ()),
        )
        return output, new_state

    def data_parallel(self, mesh: Any, axis: str) -> Any:
        """A jitted apply that splits the batch over mesh axis `axis` (lux/parallel.py).

        Args:
            mesh: a `jax.sharding.Mesh`.
            axis: the name of the mesh axis the batch is split over.

        Returns:
            ``apply(params, state, *inputs) -> (outputs, new_state)``, each device running its
            share of the batch; it raises CallArgumentError for a batch that the axis's
            device count does not divide.

        Raises:
            CallArgumentError: the model's samples are not independent, `mesh` is not a Mesh,
                or it has no `axis`.
        """
        from .parallel import data_parallel_apply

        return data_parallel_apply(self, mesh, axis)

    def _check_inputs(self, inputs: tuple[Any, ...]) -> None:
        # jax.jit would silently cast e.g. float64 numpy inputs to float32; check dtypes first.
        x = self._input_tree(inputs)
        for a in self._input_entries:
            leaf = lookup(x, a.path, "x", self.input_form)
            want = dtypes.to_numpy(a.dtype)
            if not hasattr(leaf, "dtype"):
                raise CallArgumentError(
                    f"{self.manifest.name}: {a.label} expects an array of {a.dtype} "
                    f"({dtypes.MLIR_TO_JULIA[a.dtype]}), got a {type(leaf).__name__}; pass "
                    f"np.asarray(x, dtype=np.{want.name})"
                )
            if np.dtype(leaf.dtype) != want:
                raise CallArgumentError(
                    f"{self.manifest.name}: {a.label} expects {a.dtype} "
                    f"({dtypes.MLIR_TO_JULIA[a.dtype]}), got "
                    f"{dtypes.from_numpy(leaf.dtype) or leaf.dtype} ({leaf.dtype}). Cast it first, "
                    f"e.g. x.astype(np.{want.name})."
                )

    def _checked_output(self, params: Any, state: Any, *inputs: Any) -> Any:
        # Traced by jax.jit once per signature of (params, state, inputs): the input checks
        # (here and fn's, inside apply) run for every new signature, never for a cached one,
        # and the state Lux returns is left out of the compiled program's results.
        self._check_inputs(inputs)
        return self.apply(params, state, *inputs)[0]

    @cached_property
    def _jitted_output(self) -> Any:
        # Compiled: jax.jit whose failures while XLA compiles or runs the whole program (a
        # custom call this platform lacks, admitted with trust=True) are ExecutionErrors.
        return Compiled(self.bundle.module.origin, None, self._checked_output)

    def __call__(self, *inputs: Any) -> Any:
        """Outputs for `inputs` with ``model.params`` and ``model.state`` (jitted once per shape).

        Args:
            *inputs: the model's inputs, as for `apply`: for Julia's tuple ``x = (a, b)``,
                ``model(a, b)`` (``model.input_form`` says the form).

        Returns:
            The outputs (the new state is dropped).

        Raises:
            CallArgumentError: an input is not an array or has the wrong dtype, count or shape,
                or the inputs and ``model.params``/``model.state`` sit on different devices.
            ExecutionError: XLA failed to compile or run the program.
        """
        try:
            return self._call(inputs)
        except ExecutionError as e:
            conflict = device_conflict(
                {"model.params": self.params, "model.state": self.state, "x": inputs}
            )
            if conflict is None:
                raise
            raise CallArgumentError(
                f"{self.manifest.name}: the arrays of this call live on different devices "
                f"({conflict}); put them on one mesh, e.g. model.params = "
                "jax.device_put(model.params, NamedSharding(mesh, P())) for inputs split over "
                "`mesh`, or use model.data_parallel(mesh, axis), which moves them"
            ) from e

    def _call(self, inputs: tuple[Any, ...]) -> Any:
        if all_concrete_arrays(inputs):
            # Straight to jax.jit's C++ dispatch; _checked_output checks the inputs whenever
            # their signature is new.
            try:
                return self._jitted_output(self.params, self.state, *inputs)
            except CallArgumentError:
                pass  # raised again below, from outside the trace, as for any other input
        self._check_inputs(inputs)
        return self._jitted_output(self.params, self.state, *inputs)

    def __repr__(self) -> str:
        m = self.manifest
        n_par = sum(a.role == "parameter" for a in m.arguments)
        backend = self.fn.backend_name
        return f"<LuxModel {m.name!r} mode={m.mode} params={n_par} arrays backend={backend}>"


def _weight_bytes(m: Manifest) -> int:
    """Bytes of every parameter and state array, for the loading bar."""
    return sum(
        int(np.prod(a.shape, dtype=np.int64)) * dtypes.to_numpy(a.dtype).itemsize
        for a in m.arguments
        if a.dataset is not None  # every parameter and state has one, no input does
    )


def import_bundle_lux(path: str | os.PathLike[str], options: LoadOptions) -> LuxModel:
    """Load a bundle directory as a LuxModel (the bundle route of juliabridge.import_lux,
    whose docstring describes the options; Reactant's export directories are read by
    reactant_export/luxmodel.py).

    Raises:
        BundleError: the directory is not a readable bundle (and its subclasses).
        SignatureMismatchError: manifest, module and weights disagree.
        UnsupportedModuleError / MLIRParseError: the module is refused or does not parse.
        X64DisabledError: 64-bit weights while jax_enable_x64 is off.
        BackendUnavailableError: backend="enzyme" without enzyme-ad.
        UnsupportedOpError: backend="lax" and an op of the module does not lift.
    """
    # Weights are verified while they are read below (hashed as loaded), not in a pass of their
    # own; the modules are verified and parsed here, from the bytes read once.
    bundle = open_bundle(
        path, verify_checksums=options.verify_checksums, trust=options.trust, defer_weights=True
    )
    if options.shardings is not None:  # each process reads only its shards (lazily)
        sharded = read_bundle(bundle, options.shardings, options.layout)
        return bundle_model(bundle, sharded, options)
    return bundle_model(bundle, bundle.read_weights(), options)


def bundle_model(
    bundle: Bundle,
    weights: Iterable[tuple[ArgumentEntry, np.ndarray | jax.Array]],
    options: LoadOptions,
) -> LuxModel:
    """The LuxModel of an opened bundle and its parameter and state arrays.

    Args:
        bundle: the opened, validated bundle (its module parsed).
        weights: (argument entry, host array in MLIR shape) for every parameter and state, in
            any order (as `Bundle.read_weights` yields them, verified while read); with
            ``options.shardings``, also arrays already placed (sharded_load.read_bundle).
        options: the load's options; backend, layout and trust apply here (trust goes to the
            backend and the VJP module).

    Returns:
        The LuxModel.

    Raises:
        X64DisabledError: 64-bit weights while jax_enable_x64 is off.
        BackendUnavailableError / UnsupportedOpError: as for `import_bundle_lux`.
    """
    m = bundle.manifest
    backend, layout, trust = options.backend, options.layout, options.trust
    fn = ImportedFunction(
        bundle.module,
        # Parsed only if the xla backend needs gradients (lax differentiates by itself).
        make_backend(
            bundle.module, backend, trust=trust, vjp_source=lambda: bundle.vjp_module(trust=trust)
        ),
        arg_labels=[a.label for a in m.arguments],
        result_labels=[r.label for r in m.results],
    )
    # Checked before jnp.asarray, which would silently truncate 64-bit weights.
    require_x64_weights(m, f"bundle {bundle.root}")
    leaves: dict[str, list[tuple[int, Any, Any]]] = {"parameter": [], "state": []}
    # Arrays arrive as they are read (in parallel) and verified. On CPU, device_put adopts the
    # aligned host buffer (no copy); elsewhere each host copy is dropped once transferred, so
    # host memory stays near one dataset in flight instead of a second copy of the weights.
    adopt = jax.default_backend() == "cpu"
    weights = progress.track_bytes(
        iter(weights),
        _weight_bytes(m),
        f"loading {bundle.root.name}",
        size=lambda item: item[1].nbytes,
    )
    if options.shardings is not None:
        for a, arr in place_arguments(weights, options.shardings, layout):
            leaves[a.role].append((a.index, a.path, arr))
    elif adopt and layout == "mlir":
        # The host arrays become the device arrays, so nothing is gained by streaming; one
        # device_put for all of them saves its per-call overhead. (Julia's layout is a
        # transposed view, which XLA copies: that route streams, one host array at a time.)
        read = list(weights)
        placed = jax.device_put([host for _, host in read])
        for i, (a, _) in enumerate(read):
            leaves[a.role].append((a.index, a.path, placed[i]))
        del read
    else:
        for a, host in weights:
            dev = jax.device_put(host.T if layout == "julia" else host)
            if not adopt:
                dev = jax.block_until_ready(dev)
            leaves[a.role].append((a.index, a.path, dev))
            del host
    # Arrays complete in any order; the trees are built in @main order (Lux's), every time.
    for role in leaves.values():
        role.sort(key=lambda leaf: leaf[0])
    params = build_tree([leaf[1:] for leaf in leaves["parameter"]], empty=m.empty.get("params", ()))
    state = build_tree([leaf[1:] for leaf in leaves["state"]], empty=m.empty.get("state", ()))
    return LuxModel(bundle, fn, params, state, layout=layout)


__all__ = ["LuxModel", "bundle_model", "import_bundle_lux"]
