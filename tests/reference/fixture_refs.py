"""Numpy references for the real Reactant.jl modules in ``shared/fixtures/reactant``.

Each reference is written from the StableHLO op semantics of its module
(https://openxla.org/stablehlo/spec), not by running the module, so that a loader bug
cannot hide in both sides of a comparison. Nothing here imports jax.

``make_inputs`` returns arrays with exactly the ``@main`` argument shapes and dtypes;
``reference`` returns every ``@main`` result, in order, with the result's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Inputs = list[np.ndarray]
MakeInputs = Callable[[np.random.Generator], Inputs]
Reference = Callable[..., tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class FixtureRef:
    make_inputs: MakeInputs
    reference: Reference
    rtol: float
    atol: float
    # True when an argument or result has a 64-bit element type, so jax_enable_x64 must
    # be on. 64-bit types used only inside the module (e.g. i64 loop counters) do not
    # count.
    needs_x64: bool
    # Further input generators for control flow that one random draw cannot cover.
    extra_inputs: Sequence[MakeInputs] = ()


def _dyadic(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # Multiples of 1/4 in [-2, 2]: every product and partial sum these fixtures form is
    # exact in f32 (and in TF32 / bf16-pass GPU dots), so the dot- and conv-based
    # results do not depend on summation order or matmul precision.
    return (rng.integers(-8, 9, size=shape) / 4).astype(np.float32)


# --- nnlib_grouped_conv2d.mlir --------------------------------------------------------
# NNlib.conv with groups=4: x is NCHW (1,4,4,4), the weight OIHW (8,1,3,3). The module
# transposes the weight, reverses both spatial dims and runs stablehlo.convolution (a
# cross-correlation), i.e. a true convolution; feature_group_count=4 gives each input
# channel its own 2 output channels.


def _conv_inputs(rng: np.random.Generator) -> Inputs:
    return [_dyadic(rng, (1, 4, 4, 4)), _dyadic(rng, (8, 1, 3, 3))]


def _grouped_true_conv2d(x: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    n, c_in, _, _ = x.shape
    c_out, c_per_group, kh, kw = w.shape
    assert c_in == groups * c_per_group
    assert c_out % groups == 0
    flipped = w[:, :, ::-1, ::-1].astype(np.float64)
    patches = sliding_window_view(x.astype(np.float64), (kh, kw), axis=(2, 3))
    oh, ow = patches.shape[2:4]
    patches = patches.reshape(n, groups, c_per_group, oh, ow, kh, kw)
    kernels = flipped.reshape(groups, c_out // groups, c_per_group, kh, kw)
    out = np.einsum("ngcijpq,gocpq->ngoij", patches, kernels)
    return out.reshape(n, c_out, oh, ow)


def _conv_ref(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_grouped_true_conv2d(x, w, groups=4).astype(np.float32),)


# --- dense_matvec_slices.mlir ---------------------------------------------------------
# For each of the 6 rows r of arg0 (6,2) it forms arg1.T @ arg0[r] (a Dense matvec,
# 4-vector) and adds the six in order; arg0 and arg1 come back unchanged as results 2
# and 3.


def _dense_inputs(rng: np.random.Generator) -> Inputs:
    return [_dyadic(rng, (6, 2)), _dyadic(rng, (2, 4))]


def _dense_ref(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    matvecs = a.astype(np.float64) @ b.astype(np.float64)  # row r = (b.T @ a[r]).T
    return matvecs.sum(axis=0).astype(np.float32), a.copy(), b.copy()


# --- gradient_dot_gather_iota.mlir ----------------------------------------------------
# ones(1024,1024) @ arg1 has every row equal to arg1's column sums; the gather at iota
# indices [i, i] takes its diagonal, so result 1 is the column sums. Result 2 broadcasts
# arg0 along rows (dims = [1]), result 3 is the ones constant. arg2 is unused.


def _gradient_inputs(rng: np.random.Generator) -> Inputs:
    return [
        rng.standard_normal(1024).astype(np.float32),
        _dyadic(rng, (1024, 1024)),
        rng.standard_normal((1024, 1024)).astype(np.float32),
    ]


def _gradient_ref(v: np.ndarray, m: np.ndarray, _unused: np.ndarray) -> tuple[np.ndarray, ...]:
    column_sums = m.astype(np.float64).sum(axis=0).astype(np.float32)
    rows = np.broadcast_to(v, (1024, 1024)).copy()
    return column_sums, rows, np.ones((1024, 1024), np.float32)


# --- cumsum_reduce_window.mlir --------------------------------------------------------
# Julia cumsum(x; dims=1) of a (5,7) Julia matrix, i.e. of each row of the MLIR-order
# arg0 (5,7) transposed: every reduce_window (window 5, padding [[4, 0]], add) is the
# running sum of one length-5 vector. Result 1 is those sums laid out (7,5), result 2 is
# arg0 unchanged.


def _cumsum_inputs(rng: np.random.Generator) -> Inputs:
    return [rng.standard_normal((5, 7)).astype(np.float32)]


def _window_sums(v: np.ndarray, window: int, pad_low: int) -> np.ndarray:
    padded = np.concatenate([np.zeros((*v.shape[:-1], pad_low), v.dtype), v], axis=-1)
    return sliding_window_view(padded, window, axis=-1).sum(axis=-1)


def _cumsum_ref(x: np.ndarray) -> tuple[np.ndarray, ...]:
    rows = x.T.astype(np.float64)  # %0: the 7 vectors the module slices out
    sums = _window_sums(rows, window=5, pad_low=4)
    return sums.astype(np.float32), x.copy()


# --- sine_loop_while.mlir -------------------------------------------------------------
# A Julia `for i in 1:10` loop over a 10-vector. Simulated literally: the i64
# arithmetic, the clamp and the compare that picks sine over cosine (never true: the
# clamp caps at 21 < 31), the clamped dynamic_slice start, and C-style `remainder` (sign
# of the dividend, like np.fmod).


def _sine_inputs(rng: np.random.Generator) -> Inputs:
    return [rng.uniform(-4.0, 4.0, 10).astype(np.float32)]


def _clamp_start(start: int, size: int, length: int) -> int:
    return min(max(start, 0), length - size)


def _sine_ref(x: np.ndarray) -> tuple[np.ndarray, ...]:
    state = x.astype(np.float32).copy()
    i = 0
    while i < 10:
        k = 10 - i
        use_sine = min(max(-1, abs(4 + k - 5) * 2), 21) > 31
        elem = np.float64(state[_clamp_start(k - 1, 1, state.size)])
        new = np.sin(elem) if use_sine else np.cos(elem)
        # Julia's mod1-style index: remainder, +1 to 1-based, -1 back to 0-based.
        write = int(np.fmod(k - 1, 10)) + 1 - 1
        state[_clamp_start(write, 1, state.size)] = np.float32(new)
        i += 1
    return (state,)


# --- conditional_if_f64.mlir ----------------------------------------------------------
# y = x' + 1 (x' = arg0 transposed); `if sum(y) > 0` returns (y, y, y, y - 1, y), else
# (y, y, -y, y, y + 1). The module returns branch results 3, 4 and 5 transposed back,
# then arg0. Results keep the module's float order of operations ((x + 1) - 1 is not x
# in f64).


def _if_inputs_true(rng: np.random.Generator) -> Inputs:
    # x + 1 in [0, 2): the sum is positive, so the then-branch runs.
    return [rng.uniform(-1.0, 1.0, (10, 2))]


def _if_inputs_false(rng: np.random.Generator) -> Inputs:
    # x + 1 in [-2, -0.5): the sum is negative, so the else-branch runs.
    return [rng.uniform(-3.0, -1.5, (10, 2))]


def _if_ref(x: np.ndarray) -> tuple[np.ndarray, ...]:
    y = x.T + 1.0
    branch = (y, y - 1.0, y) if y.sum() > 0.0 else (-y, y, y + 1.0)
    return (*(r.T.copy() for r in branch), x.copy())


# --- complex_scatter_fft_dot_symattr.mlir ---------------------------------------------
# Julia `A = fill(5im, 128, 128); A[idx] .= vec(w) .* z` with 1-based linear
# (column-major) indices idx, then B = fft(transpose(A)) and y = P * vec(B). In MLIR
# order the scatter writes row (idx-1) % 128, column (idx-1) / 128 of a row-major
# 128x128, and the 2-D FFT runs over the last two dims. Results: (y, B). arg0..arg2 are
# unused (arg0, arg1 are only donated).

_N = 128


def _trunc_div(a: np.ndarray, b: int) -> np.ndarray:
    return np.sign(a) * np.sign(b) * (np.abs(a) // abs(b))


def _complex_inputs(rng: np.random.Generator) -> Inputs:
    def cnormal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)

    # Distinct indices: scatter with duplicate indices has an unspecified update order.
    idx = rng.choice(_N * _N, size=4096, replace=False).astype(np.int64) + 1
    return [
        cnormal(274),
        cnormal(_N, _N),
        cnormal(64, 64),
        idx,
        cnormal(4096),
        cnormal(274, _N * _N),
        rng.standard_normal((64, 64)),
    ]


def _complex_ref(
    _a0: np.ndarray,
    _a1: np.ndarray,
    _a2: np.ndarray,
    idx: np.ndarray,
    z: np.ndarray,
    p: np.ndarray,
    w: np.ndarray,
) -> tuple[np.ndarray, ...]:
    updates = w.astype(np.complex128).reshape(-1) * z
    zero_based = idx - 1
    # stablehlo divide/remainder on integers truncate toward zero (C semantics).
    row = np.fmod(zero_based, _N)
    col = np.fmod(_trunc_div(zero_based, _N), _N)
    a = np.full((_N, _N), 5j, np.complex128)
    a[row, col] = updates
    b = np.fft.fft2(a.T)
    y = p @ b.reshape(-1)
    return y, b


FIXTURES: dict[str, FixtureRef] = {
    "nnlib_grouped_conv2d.mlir": FixtureRef(
        _conv_inputs, _conv_ref, rtol=1e-5, atol=1e-6, needs_x64=False
    ),
    "dense_matvec_slices.mlir": FixtureRef(
        _dense_inputs, _dense_ref, rtol=1e-5, atol=1e-6, needs_x64=False
    ),
    "gradient_dot_gather_iota.mlir": FixtureRef(
        _gradient_inputs, _gradient_ref, rtol=1e-5, atol=1e-6, needs_x64=False
    ),
    # 5-term f32 sums of O(1) values: reassociation can move a result that cancels to
    # near zero by a few ulp of the operands (~1e-6), which a pure rtol would reject.
    "cumsum_reduce_window.mlir": FixtureRef(
        _cumsum_inputs, _cumsum_ref, rtol=1e-5, atol=1e-5, needs_x64=False
    ),
    # f32 cos may be a few ulp off numpy's; atol covers results near cos's zeros.
    "sine_loop_while.mlir": FixtureRef(
        _sine_inputs, _sine_ref, rtol=1e-5, atol=1e-6, needs_x64=False
    ),
    "conditional_if_f64.mlir": FixtureRef(
        _if_inputs_true,
        _if_ref,
        rtol=1e-12,
        atol=1e-12,
        needs_x64=True,
        extra_inputs=(_if_inputs_false,),
    ),
    # The FFT's DC term is ~6e4 while other entries of B are as small as ~2: an FFT
    # rounds each output to ~1e-16 of the whole spectrum's scale (~1e-11 absolute), so
    # B's small entries need an atol; 1e-8 is still ~1e-13 of that scale. The dot
    # outputs (|y| >= ~4e3) are held by rtol.
    "complex_scatter_fft_dot_symattr.mlir": FixtureRef(
        _complex_inputs, _complex_ref, rtol=1e-12, atol=1e-8, needs_x64=True
    ),
}
