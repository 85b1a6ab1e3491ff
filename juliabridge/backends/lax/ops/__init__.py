"""Lift functions, one module per op family; importing this package registers them all."""

from . import (  # noqa: F401
    calls,
    chlo,
    control,
    conv,
    custom_call,
    dot,
    elementwise,
    fft,
    indexing,
    linalg,
    normalization,
    random,
    reduction,
    shape,
    sort,
)
