"""Lux.jl layers re-implemented in JAX on MLIR-layout arrays, for bundles made without Julia.

No Julia is needed to produce a bundle here: each builder defines a small Lux model as a
pure-JAX ``forward(x, ps, st) -> (y, st_new)`` working on arrays in *MLIR layout* (the Julia
dims reversed, docs/bundle-format.md §2), flattens it the way Reactant does (inputs, then
parameter leaves, then state leaves, depth-first in Lux field order), and lowers that flat
function with ``jax.jit(...).lower(...)`` to StableHLO text with the same ``@main`` signature
Reactant would print. Results follow Reactant's rule: the distinct array leaves of the returned
``(y, st_new)``, depth-first, except leaves that are an argument returned unchanged, which
become aliases.

Semantics implemented (Lux 1.31.4, LuxLib at LuxDL/Lux.jl@6f4b96cc):

- ``Dense(in => out, act)``: Julia ``act.(W * x .+ b)`` with ``W`` of Julia size (out, in); in
  MLIR layout ``act(x @ W + b)`` with ``x`` (B, in) and ``W`` (in, out).
- ``Conv(k, cin => cout, act)``: a *true* convolution (Lux's default
  ``cross_correlation=false``, src/layers/conv.jl), i.e. a cross-correlation with the kernel
  flipped along every spatial dim; stride 1, no padding. MLIR layout: x (B, C, H, W), weight
  (Cout, Cin, kH, kW).
- ``MaxPool(k)``: window ``k``, stride ``k``, no padding.
- ``FlattenLayer()``: Julia ``reshape(x, :, B)`` of (W, H, C, B) is column-major, so its
  flattened index is ``w + W*h + W*H*c``; that is exactly the row-major flatten of the MLIR
  (C, H, W) block, i.e. ``x.reshape(B, -1)`` with no transpose.
- ``BatchNorm(C)``, epsilon 1f-5, momentum 0.1f0, feature axis Julia dim N-1 = MLIR axis 1:
  * test mode: ``scale * (x - running_mean) / sqrt(running_var + eps) + bias``; the running
    statistics come back unchanged (aliases, no ``@main`` results), as in LuxLib's Reactant
    extension (lib/LuxLib/ext/ReactantExt/batchnorm.jl, ``batch_norm_inference``).
  * train mode: normalise with the batch mean and the *biased* batch variance
    (``batch_norm_training``), then ``running_mean' = 0.9*running_mean + 0.1*mean`` and
    ``running_var' = 0.9*running_var + (0.1*m/(m-1))*var_biased`` (= 0.1 * the unbiased
    variance), where ``m`` is the number of reduced elements per channel; the factors are
    formed in Float32 as LuxLib does (``update_running_statistics`` in
    lib/LuxLib/src/impl/normalization.jl with ``momentum * m / (m - one(m))``).

Initialisation mimics Lux's defaults (``kaiming_uniform`` with Lux's ``calculate_gain``, bias
uniform in ±1/sqrt(fan_in)) but draws from numpy's PCG64, so values differ from Julia's.
BatchNorm gets non-default "trained-looking" scale/bias/statistics so that a swapped or ignored
leaf changes the output.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

PathStep = str | int
Tree = Mapping[str, Any]
Forward = Callable[[jax.Array, Tree, Tree], tuple[jax.Array, Tree]]

BN_EPSILON = np.float32(1e-5)
BN_MOMENTUM = np.float32(0.1)

# ----------------------------------------------------------------------------------------
# Layers (MLIR layout)


def relu(x: jax.Array) -> jax.Array:
    return jnp.maximum(x, jnp.zeros((), x.dtype))


def dense(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array,
    act: Callable[[jax.Array], jax.Array] | None = None,
) -> jax.Array:
    y = jnp.matmul(x, weight) + bias
    return y if act is None else act(y)


def conv2d(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array,
    act: Callable[[jax.Array], jax.Array] | None = None,
) -> jax.Array:
    """Lux ``Conv`` (true convolution, stride 1, no padding) on x (B,C,H,W), w (O,I,kH,kW)."""
    flipped = weight[:, :, ::-1, ::-1]
    y = lax.conv_general_dilated(
        x,
        flipped,
        window_strides=(1, 1),
        padding="VALID",
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )
    y = y + bias[None, :, None, None]
    return y if act is None else act(y)


def maxpool2d(x: jax.Array, julia_window: tuple[int, int]) -> jax.Array:
    """Lux ``MaxPool(julia_window)``; the window is given in Julia order (kW, kH)."""
    kh, kw = julia_window[1], julia_window[0]
    return lax.reduce_window(
        x,
        -jnp.inf,
        lax.max,
        window_dimensions=(1, 1, kh, kw),
        window_strides=(1, 1, kh, kw),
        padding="VALID",
    )


def flatten(x: jax.Array) -> jax.Array:
    """Lux ``FlattenLayer()``: Julia's column-major flatten == row-major flatten in MLIR."""
    return jnp.reshape(x, (x.shape[0], -1))


def _channel_shape(x: jax.Array) -> tuple[int, ...]:
    # Channels sit on Julia dim N-1, which is MLIR axis 1 for every rank >= 2.
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def batchnorm_test(
    x: jax.Array, ps: Tree, st: Tree, eps: np.float32 = BN_EPSILON
) -> tuple[jax.Array, Tree]:
    """Lux ``BatchNorm`` in test mode; returns the *same* state leaves (they alias)."""
    shape = _channel_shape(x)
    mean = jnp.reshape(st["running_mean"], shape)
    var = jnp.reshape(st["running_var"], shape)
    y = (x - mean) / jnp.sqrt(var + eps) * jnp.reshape(ps["scale"], shape)
    y = y + jnp.reshape(ps["bias"], shape)
    return y, {"running_mean": st["running_mean"], "running_var": st["running_var"]}


def batchnorm_train(
    x: jax.Array,
    ps: Tree,
    st: Tree,
    eps: np.float32 = BN_EPSILON,
    momentum: np.float32 = BN_MOMENTUM,
) -> tuple[jax.Array, Tree]:
    """Lux ``BatchNorm`` in train mode: batch statistics and updated running statistics."""
    axes = tuple(a for a in range(x.ndim) if a != 1)
    shape = _channel_shape(x)
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean(jnp.square(x - jnp.reshape(mean, shape)), axis=axes)
    y = (x - jnp.reshape(mean, shape)) / jnp.sqrt(jnp.reshape(var, shape) + eps)
    y = y * jnp.reshape(ps["scale"], shape) + jnp.reshape(ps["bias"], shape)
    m = np.float32(math.prod(x.shape[a] for a in axes))
    # Float32 arithmetic, in LuxLib's order: m2 = momentum * m / (m - 1), m3 = 1 - momentum.
    m2 = np.float32(np.float32(momentum * m) / np.float32(m - np.float32(1)))
    m3 = np.float32(np.float32(1) - momentum)
    new_mean = m3 * st["running_mean"] + momentum * mean
    new_var = m3 * st["running_var"] + m2 * var
    return y, {"running_mean": new_mean, "running_var": new_var}


# ----------------------------------------------------------------------------------------
# Model description and Reactant-style flattening


@dataclass(frozen=True)
class Argument:
    """One ``@main`` argument: role, path in x/ps/st, value (MLIR shape), batch axis."""

    role: str
    path: list[PathStep]
    value: np.ndarray
    batch_axis: int | None = None


@dataclass(frozen=True)
class LuxModelSpec:
    """Everything needed to write a bundle for one traced Lux model."""

    name: str
    lux_source: str
    mode: str
    arguments: list[Argument]
    result_paths: list[list[list[PathStep]]]
    result_batch_axes: list[int | None]
    aliases: list[tuple[list[PathStep], int]]
    samples_independent: bool
    main: Callable[..., tuple[jax.Array, ...]]
    mlir_text: str
    empty: dict[str, list[list[PathStep]]]

    @property
    def batch_size(self) -> int:
        return int(self.arguments[0].value.shape[0])

    def run(self, *values: np.ndarray) -> list[np.ndarray]:
        """The ``@main`` results for these argument values (default: the stored ones).

        Runs on the CPU: on GPUs XLA may use TF32 for f32 dots and convolutions, and the
        reference outputs a bundle ships should not depend on the machine that wrote it.
        """
        args = values or tuple(a.value for a in self.arguments)
        with jax.default_device(jax.devices("cpu")[0]):
            results = jax.jit(self.main, keep_unused=True)(*args)
        return [np.asarray(r) for r in results]


def _array_leaves(tree: Any, path: list[PathStep]) -> Iterator[tuple[list[PathStep], Any]]:
    # Depth-first in insertion order, which the builders keep equal to Lux's field order.
    if isinstance(tree, Mapping):
        for key, child in tree.items():
            yield from _array_leaves(child, [*path, key])
    elif isinstance(tree, tuple):
        for i, child in enumerate(tree, start=1):
            yield from _array_leaves(child, [*path, i])
    else:
        yield path, tree


def _rebuild(tree: Any, leaves: Iterator[Any]) -> Any:
    if isinstance(tree, Mapping):
        return {k: _rebuild(v, leaves) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_rebuild(v, leaves) for v in tree)
    return next(leaves)


@dataclass
class _ResultLayout:
    result_paths: list[list[list[PathStep]]]
    aliases: list[tuple[list[PathStep], int]]


def _make_main(
    forward: Forward, ps: Tree, st: Tree, layout: _ResultLayout
) -> Callable[..., tuple[jax.Array, ...]]:
    """The flat ``@main``: arguments in Reactant order, results minus unchanged arguments."""
    n_x = 1
    n_ps = sum(1 for _ in _array_leaves(ps, []))

    def main(*args: jax.Array) -> tuple[jax.Array, ...]:
        # Which leaves are results is only known while tracing (by identity with the argument
        # tracers), so each trace records the layout as a side effect.
        ps_t = _rebuild(ps, iter(args[n_x : n_x + n_ps]))
        st_t = _rebuild(st, iter(args[n_x + n_ps :]))
        y, st_new = forward(args[0], ps_t, st_t)
        results: list[jax.Array] = []
        layout.result_paths.clear()
        layout.aliases.clear()
        out = [(["output", *p], v) for p, v in _array_leaves(y, [])]
        out += [(["state", *p], v) for p, v in _array_leaves(st_new, [])]
        for path, leaf in out:
            # Identity, as in Reactant: a traced argument returned as is is not a result.
            arg_index = next((i for i, a in enumerate(args) if a is leaf), None)
            if arg_index is not None:
                layout.aliases.append((path, arg_index))
                continue
            seen = next((k for k, r in enumerate(results) if r is leaf), None)
            if seen is not None:
                layout.result_paths[seen].append(path)
                continue
            results.append(leaf)
            layout.result_paths.append([path])
        return tuple(results)

    return main


_RESULT_INFO = re.compile(r"\s*\{jax\.result_info = \"[^\"]*\"\}")
_MODULE_NAME = re.compile(r"^module @\S+", re.MULTILINE)


def _lower(main: Callable[..., Any], values: list[np.ndarray], name: str) -> str:
    avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in values]
    # keep_unused: Reactant keeps every argument, even one the body never reads.
    text = jax.jit(main, keep_unused=True).lower(*avals).as_text()
    # jax.result_info is jax bookkeeping Reactant never prints; the module name is cosmetic.
    text = _RESULT_INFO.sub("", text)
    return _MODULE_NAME.sub(f"module @{name}", text, count=1)


def _describe(
    *,
    name: str,
    lux_source: str,
    mode: str,
    forward: Forward,
    x: np.ndarray,
    ps: Tree,
    st: Tree,
    samples_independent: bool,
) -> LuxModelSpec:
    arguments = [Argument("input", [], x, batch_axis=0)]
    arguments += [Argument("parameter", p, v) for p, v in _array_leaves(ps, [])]
    arguments += [Argument("state", p, v) for p, v in _array_leaves(st, [])]
    layout = _ResultLayout([], [])
    main = _make_main(forward, ps, st, layout)
    text = _lower(main, [a.value for a in arguments], name)  # fills `layout`
    batch_axes: list[int | None] = [
        0 if paths[0][0] == "output" else None for paths in layout.result_paths
    ]
    return LuxModelSpec(
        name=name,
        lux_source=lux_source,
        mode=mode,
        arguments=arguments,
        result_paths=[[list(p) for p in paths] for paths in layout.result_paths],
        result_batch_axes=batch_axes,
        aliases=[(list(p), i) for p, i in layout.aliases],
        samples_independent=samples_independent,
        main=main,
        mlir_text=text,
        empty={"params": _empty_paths(ps, []), "state": _empty_paths(st, [])},
    )


def _empty_paths(tree: Any, path: list[PathStep]) -> list[list[PathStep]]:
    """Paths of empty containers (Lux's ``NamedTuple()``), recorded in the manifest's `empty`."""
    if not isinstance(tree, Mapping):
        return []
    if not tree:
        return [path] if path else []
    return [p for k, v in tree.items() for p in _empty_paths(v, [*path, k])]


# ----------------------------------------------------------------------------------------
# Deterministic, Lux-like initialisation (values differ from Julia's RNG)

_GAIN = {"identity": 1.0, "relu": 2.0}  # Lux's calculate_gain (src/utils.jl)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], bound: float) -> np.ndarray:
    return ((rng.random(shape, dtype=np.float32) - 0.5) * 2 * bound).astype(np.float32)


def _dense_params(rng: np.random.Generator, n_in: int, n_out: int, act: str) -> dict:
    bound = math.sqrt(3) * _GAIN[act] / math.sqrt(n_in)
    return {
        "weight": _uniform(rng, (n_in, n_out), bound),  # Julia (out, in)
        "bias": _uniform(rng, (n_out,), 1 / math.sqrt(n_in)),
    }


def _conv_params(
    rng: np.random.Generator, k: tuple[int, int], cin: int, cout: int, act: str
) -> dict:
    fan_in = k[0] * k[1] * cin
    bound = math.sqrt(3) * _GAIN[act] / math.sqrt(fan_in)
    return {
        "weight": _uniform(rng, (cout, cin, k[1], k[0]), bound),  # Julia (kW, kH, cin, cout)
        "bias": _uniform(rng, (cout,), 1 / math.sqrt(fan_in)),
    }


def _bn_params_state(rng: np.random.Generator, c: int) -> tuple[dict, dict]:
    ps = {
        "scale": (1 + 0.2 * rng.standard_normal(c)).astype(np.float32),
        "bias": (0.2 * rng.standard_normal(c)).astype(np.float32),
    }
    st = {
        "running_mean": (0.5 * rng.standard_normal(c)).astype(np.float32),
        "running_var": rng.uniform(0.5, 1.5, c).astype(np.float32),
    }
    return ps, st


def _input(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------------------
# Models


def dense_chain(*, batch: int = 5, seed: int = 0) -> LuxModelSpec:
    """``Chain(Dense(4 => 16, relu), Dense(16 => 3))``, x of Julia size (4, batch)."""
    rng = np.random.default_rng(seed)
    ps = {
        "layer_1": _dense_params(rng, 4, 16, "relu"),
        "layer_2": _dense_params(rng, 16, 3, "identity"),
    }
    st: dict = {"layer_1": {}, "layer_2": {}}

    def forward(x: jax.Array, ps: Tree, st: Tree) -> tuple[jax.Array, Tree]:
        h = dense(x, ps["layer_1"]["weight"], ps["layer_1"]["bias"], relu)
        return dense(h, ps["layer_2"]["weight"], ps["layer_2"]["bias"]), st

    return _describe(
        name="dense_chain",
        lux_source="Chain(Dense(4 => 16, relu), Dense(16 => 3))",
        mode="test",
        forward=forward,
        x=_input(rng, (batch, 4)),
        ps=ps,
        st=st,
        samples_independent=True,
    )


LENET_SOURCE = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), "
    "MaxPool((2, 2)), FlattenLayer(3), Dense(256 => 128, relu), Dense(128 => 10))"
)


def lenet(*, batch: int = 4, seed: int = 0) -> LuxModelSpec:
    """LeNet-5 as in Lux's tutorials, x of Julia size (28, 28, 1, batch)."""
    rng = np.random.default_rng(seed)
    ps = {
        "layer_1": _conv_params(rng, (5, 5), 1, 6, "relu"),
        "layer_2": {},
        "layer_3": _conv_params(rng, (5, 5), 6, 16, "relu"),
        "layer_4": {},
        "layer_5": {},
        "layer_6": _dense_params(rng, 256, 128, "relu"),
        "layer_7": _dense_params(rng, 128, 10, "identity"),
    }
    st: dict = {f"layer_{i}": {} for i in range(1, 8)}

    def forward(x: jax.Array, ps: Tree, st: Tree) -> tuple[jax.Array, Tree]:
        h = conv2d(x, ps["layer_1"]["weight"], ps["layer_1"]["bias"], relu)
        h = maxpool2d(h, (2, 2))
        h = conv2d(h, ps["layer_3"]["weight"], ps["layer_3"]["bias"], relu)
        h = flatten(maxpool2d(h, (2, 2)))
        h = dense(h, ps["layer_6"]["weight"], ps["layer_6"]["bias"], relu)
        return dense(h, ps["layer_7"]["weight"], ps["layer_7"]["bias"]), st

    return _describe(
        name="lenet",
        lux_source=LENET_SOURCE,
        mode="test",
        forward=forward,
        x=_input(rng, (batch, 1, 28, 28)),
        ps=ps,
        st=st,
        samples_independent=True,
    )


def batchnorm_model(*, mode: str = "test", batch: int = 6, seed: int = 0) -> LuxModelSpec:
    """``Chain(Dense(3 => 5), BatchNorm(5))`` in Lux test or train mode, x Julia (3, batch)."""
    if mode not in ("test", "train"):
        raise ValueError(f"mode must be 'test' or 'train', not {mode!r}")
    if mode == "train" and batch < 2:
        raise ValueError("Lux refuses BatchNorm training with batch size 1")
    rng = np.random.default_rng(seed)
    bn_ps, bn_st = _bn_params_state(rng, 5)
    ps = {"layer_1": _dense_params(rng, 3, 5, "identity"), "layer_2": bn_ps}
    st = {"layer_1": {}, "layer_2": bn_st}
    norm = batchnorm_test if mode == "test" else batchnorm_train

    def forward(x: jax.Array, ps: Tree, st: Tree) -> tuple[jax.Array, Tree]:
        h = dense(x, ps["layer_1"]["weight"], ps["layer_1"]["bias"])
        y, bn_new = norm(h, ps["layer_2"], st["layer_2"])
        return y, {"layer_1": st["layer_1"], "layer_2": bn_new}

    return _describe(
        name=f"batchnorm_{mode}",
        lux_source="Chain(Dense(3 => 5), BatchNorm(5))",
        mode=mode,
        forward=forward,
        x=_input(rng, (batch, 3)),
        ps=ps,
        st=st,
        samples_independent=mode == "test",
    )


BUILDERS: dict[str, Callable[..., LuxModelSpec]] = {
    "dense_chain": dense_chain,
    "lenet": lenet,
    "batchnorm_test": lambda *, batch, seed: batchnorm_model(mode="test", batch=batch, seed=seed),
    "batchnorm_train": lambda *, batch, seed: batchnorm_model(mode="train", batch=batch, seed=seed),
}

_NOTE = (
    "Made in Python without Julia by juliabridge.examples.luxmodels: a pure-JAX "
    "re-implementation of the Lux layers in MLIR layout, lowered with jax.jit(...).lower() to "
    "StableHLO with Reactant's argument/result conventions. Example outputs come from that "
    "JAX function on CPU, not from Julia."
)


def build_bundle(
    kind: str, path: str | Path, *, batch: int, seed: int, overwrite: bool = False
) -> Path:
    """Write the bundle of model `kind` (a key of ``BUILDERS``) with example inputs/outputs."""
    from ..bundle.write.description import ArgumentSpec, BundleDescription
    from ..bundle.write.writer import write_bundle

    if kind not in BUILDERS:
        raise ValueError(f"unknown model kind {kind!r}; choose one of {sorted(BUILDERS)}")
    spec = BUILDERS[kind](batch=batch, seed=seed)
    return write_bundle(
        path,
        BundleDescription(
            name=spec.name,
            mlir_text=spec.mlir_text,
            arguments=[
                ArgumentSpec(role=a.role, path=a.path, value=a.value, batch_axis=a.batch_axis)
                for a in spec.arguments
            ],
            result_paths=spec.result_paths,
            aliases=spec.aliases,
            mode=spec.mode,
            batch={"size": spec.batch_size, "samples_independent": spec.samples_independent},
            example_outputs=spec.run(),
            result_batch_axes=spec.result_batch_axes,
            metadata={"lux_model": spec.lux_source, "seed": seed, "kind": kind},
            empty=spec.empty,
            note=_NOTE,
        ),
        overwrite=overwrite,
    )
