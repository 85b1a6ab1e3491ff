"""stablehlo.fft (spec.md#fft) as `lax.fft`, which lowers to the same op.

The operand, result and `fft_length` are checked against each other at load time: XLA hands a
mismatch straight to the FFT library, which aborts the process instead of raising.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax import lax

from ..registry import Impl, OpView, lifts

_TYPES = {"FFT": lax.FftType.FFT, "IFFT": lax.FftType.IFFT, "RFFT": lax.FftType.RFFT}
_TYPES["IRFFT"] = lax.FftType.IRFFT
#: real element type -> the complex type of the same precision
_COMPLEX = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}


def _half(n: int) -> int:
    """The last dimension of a real-to-complex transform of length n (spec (C5))."""
    return n // 2 + 1 if n else 0


def _expected(kind: str, operand: tuple[int, ...], lengths: tuple[int, ...]) -> tuple[int, ...]:
    """The operand's trailing dims `fft_length` requires (the real side must match it)."""
    if kind == "IRFFT":
        return (*lengths[:-1], _half(lengths[-1]))
    return lengths


@lifts("stablehlo.fft")
def fft(view: OpView) -> Impl:
    """spec.md#fft: FFT/IFFT (complex), RFFT (real -> complex), IRFFT (complex -> real) over
    the trailing `len(fft_length)` dimensions."""
    kind = view.get_enum("fft_type")
    if kind not in _TYPES:
        raise view.error(f"unknown fft_type {kind}")
    lengths = tuple(view.get_ints("fft_length"))
    x, r = view.operand, view.result
    if not 1 <= len(lengths) <= min(3, x.rank):
        raise view.error(f"fft_length {list(lengths)} must have 1 to min(3, rank {x.rank}) entries")
    real = x.dtype if kind == "RFFT" else r.dtype
    cplx = r.dtype if kind == "RFFT" else x.dtype
    if kind in ("FFT", "IFFT"):
        ok = x.dtype == r.dtype and x.dtype in _COMPLEX.values()
    else:
        ok = _COMPLEX.get(real) == cplx
    if not ok:
        raise view.error(
            f"{kind} from {x} to {r}: the element types must be complex64/complex128 (and "
            "float32/float64 on the real side, of the same precision)"
        )
    want = _expected(kind, x.shape, lengths)
    if x.shape[-len(lengths) :] != want:
        raise view.error(
            f"fft_length {list(lengths)} does not match the operand {x} (its trailing "
            f"dimensions must be {list(want)}); XLA's FFT library would abort on it"
        )
    out_tail = (*lengths[:-1], _half(lengths[-1])) if kind == "RFFT" else lengths
    if r.shape != (*x.shape[: -len(lengths)], *out_tail):
        raise view.error(f"the result {r} does not fit {kind} of {x} with length {list(lengths)}")
    if 0 in r.shape or 0 in x.shape:
        # Nothing to transform (and jax mis-types a zero-length RFFT).
        zero = np.zeros((), r.dtype)
        return lambda _x: [lax.full(r.shape, zero, r.dtype)]
    fft_type = _TYPES[kind]

    def impl(operand: Any) -> list[Any]:
        return [lax.fft(operand, fft_type, lengths)]

    return impl
