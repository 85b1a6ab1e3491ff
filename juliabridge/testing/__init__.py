"""Cross-language checks: compare JAX code with the outputs Julia computed, in pytest or not.

    from juliabridge.testing import assert_matches_julia
    assert_matches_julia(my_jax_fn, "lenet.bundle")        # raises ReferenceMismatch on a diff

The pytest plugin (``juliabridge.testing.plugin``, registered as a ``pytest11`` entry point)
adds the ``julia`` marker and the ``julia_export`` / ``julia_bundle`` fixtures.
"""

from __future__ import annotations

from .cache import ExportCache, export_key
from .compare import (
    DEFAULT_TOLERANCES,
    MatchReport,
    OutputDiff,
    ReferenceMismatch,
    assert_matches_julia,
    compare_arrays,
    compare_with_julia,
)

__all__ = [
    "DEFAULT_TOLERANCES",
    "ExportCache",
    "MatchReport",
    "OutputDiff",
    "ReferenceMismatch",
    "assert_matches_julia",
    "compare_arrays",
    "compare_with_julia",
    "export_key",
]
