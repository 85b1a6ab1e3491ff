"""Independent numpy reference of the Lux layers used by the example bundles, in JULIA layout.

Written from Lux's and NNlib's definitions, not from juliabridge.examples.luxmodels (which
works in MLIR layout with jax.lax), so a layout or flip mistake cannot hide in both sides.
Every public function takes and returns arrays in MLIR layout (what a bundle and
``LuxModel.apply`` use), converts them to Julia layout with ``np.transpose`` (which reverses
the dims, exactly the MLIR <-> Julia relation of docs/bundle-format.md §2), and computes in
float64 with the Julia shapes: x is (features..., batch), Dense weight (out, in), Conv weight
(kW, kH, Cin, Cout), images WHCN. Outputs are cast back to float32. Nothing here imports jax.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

Tree = Mapping[str, Any]

EPSILON = 1e-5
MOMENTUM = 0.1


def to_julia(a: np.ndarray) -> np.ndarray:
    return np.transpose(np.asarray(a, dtype=np.float64))


def to_mlir(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(a)).astype(np.float32)


# --- Julia-layout layers (float64) ------------------------------------------------------


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def dense_jl(weight: np.ndarray, bias: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Lux Dense: ``W * x .+ b`` with W (out, in), x (in, B)."""
    assert weight.shape[1] == x.shape[0], (weight.shape, x.shape)
    return weight @ x + bias[:, None]


def conv_jl(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Lux Conv with its defaults (stride 1, no padding, a TRUE convolution), WHCN.

    NNlib's convolution flips the kernel: y[i,j,o,n] = b[o] +
    sum_{p,q,c} w[p,q,c,o] * x[i + kW-1-p, j + kH-1-q, c, n] (0-based).
    """
    w_in, h_in, c_in, _ = x.shape
    kw, kh, wc, c_out = weight.shape
    assert wc == c_in, (weight.shape, x.shape)
    ow, oh = w_in - kw + 1, h_in - kh + 1
    y = np.zeros((ow, oh, c_out, x.shape[3]))
    for p in range(kw):
        for q in range(kh):
            xs = x[kw - 1 - p : kw - 1 - p + ow, kh - 1 - q : kh - 1 - q + oh]
            y += np.einsum("ijcn,co->ijon", xs, weight[p, q])
    return y + bias[None, None, :, None]


def maxpool_jl(x: np.ndarray, window: tuple[int, int]) -> np.ndarray:
    """Lux MaxPool(window) with stride = window, WHCN; trailing rows that do not fit drop."""
    kw, kh = window
    w, h, c, n = x.shape
    x = x[: w // kw * kw, : h // kh * kh]
    return x.reshape(w // kw, kw, h // kh, kh, c, n).max(axis=(1, 3))


def flatten_jl(x: np.ndarray) -> np.ndarray:
    """Lux FlattenLayer(): Julia ``reshape(x, :, size(x, N))``, column-major."""
    return x.reshape(-1, x.shape[-1], order="F")


def batchnorm_jl(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    running_mean: np.ndarray,
    running_var: np.ndarray,
    *,
    training: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lux BatchNorm on (..., C, B): channels are the second-to-last Julia dim.

    Test mode uses the running statistics and returns them unchanged. Train mode normalises
    with the batch mean and biased variance and updates the running statistics with momentum
    0.1 using the unbiased variance (LuxLib's ``momentum * m / (m - 1)`` factor).
    """
    c_axis = x.ndim - 2
    axes = tuple(a for a in range(x.ndim) if a != c_axis)
    shape = [1] * x.ndim
    shape[c_axis] = x.shape[c_axis]
    if training:
        mean = x.mean(axis=axes)
        var = x.var(axis=axes)
        unbiased = x.var(axis=axes, ddof=1)
        new_mean = (1 - MOMENTUM) * running_mean + MOMENTUM * mean
        new_var = (1 - MOMENTUM) * running_var + MOMENTUM * unbiased
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean, running_var
    xhat = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + EPSILON)
    return xhat * scale.reshape(shape) + bias.reshape(shape), new_mean, new_var


# --- Whole models: MLIR-layout trees in, MLIR-layout (y, st_new) out ----------------------


def _jl(tree: Tree, *keys: str) -> np.ndarray:
    for k in keys:
        tree = tree[k]
    return to_julia(tree)  # type: ignore[arg-type]


def dense_chain(x: np.ndarray, ps: Tree, st: Tree) -> tuple[np.ndarray, Tree]:
    """``Chain(Dense(4 => 16, relu), Dense(16 => 3))``."""
    h = relu(dense_jl(_jl(ps, "layer_1", "weight"), _jl(ps, "layer_1", "bias"), to_julia(x)))
    y = dense_jl(_jl(ps, "layer_2", "weight"), _jl(ps, "layer_2", "bias"), h)
    return to_mlir(y), st


def lenet(x: np.ndarray, ps: Tree, st: Tree) -> tuple[np.ndarray, Tree]:
    """Conv-relu, MaxPool, Conv-relu, MaxPool, FlattenLayer, Dense-relu, Dense."""
    h = to_julia(x)
    assert h.shape[:3] == (28, 28, 1), h.shape
    h = relu(conv_jl(h, _jl(ps, "layer_1", "weight"), _jl(ps, "layer_1", "bias")))
    h = maxpool_jl(h, (2, 2))
    h = relu(conv_jl(h, _jl(ps, "layer_3", "weight"), _jl(ps, "layer_3", "bias")))
    h = flatten_jl(maxpool_jl(h, (2, 2)))
    assert h.shape[0] == 256, h.shape
    h = relu(dense_jl(_jl(ps, "layer_6", "weight"), _jl(ps, "layer_6", "bias"), h))
    y = dense_jl(_jl(ps, "layer_7", "weight"), _jl(ps, "layer_7", "bias"), h)
    return to_mlir(y), st


def batchnorm_chain(
    x: np.ndarray, ps: Tree, st: Tree, *, training: bool
) -> tuple[np.ndarray, Tree]:
    """``Chain(Dense(3 => 5), BatchNorm(5))``; returns the new state tree."""
    h = dense_jl(_jl(ps, "layer_1", "weight"), _jl(ps, "layer_1", "bias"), to_julia(x))
    y, mean, var = batchnorm_jl(
        h,
        _jl(ps, "layer_2", "scale"),
        _jl(ps, "layer_2", "bias"),
        _jl(st, "layer_2", "running_mean"),
        _jl(st, "layer_2", "running_var"),
        training=training,
    )
    new_bn = {"running_mean": to_mlir(mean), "running_var": to_mlir(var)}
    return to_mlir(y), {**st, "layer_2": new_bn}
