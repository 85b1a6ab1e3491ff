"""The `enzyme` backend: enzyme_ad.jax.hlo_call, made to work eagerly and on every dtype.

hlo_call inlines @main into the caller's XLA program (so XLA fuses across the boundary) and
differentiates it with Enzyme. Three of its limits are handled here, at load time:
- it refuses eager calls ("must be JIT'ed"), so eager calls go through a cached jax.jit
  (the juliabridge primitive's impl, transforms/primitives.py);
- its type table lacks f16, i16, ui8, ui16 and rejects i1, so @main is wrapped in a new @main
  that widens those at the boundary (exactly: every value of the narrow type is representable);
- its VJP indexes argument activities by result number and fails when @main has more results
  than arguments, so the wrapper pads @main with unused scalar arguments.

Derivatives of a module loaded without trust=True are derived by Enzyme in a separate process
(sandbox.py, whose child runs child.py: its passes crash on some valid modules) and run as
checked StableHLO through the xla backend; with trust=True they are derived in this process,
inlined by hlo_call. dumps.py removes the files enzyme-ad leaves behind.

Modules: backend.py (EnzymeBackend, derive_vjp_text), boundary.py (the wrapper above),
availability.py (whether enzyme-ad imports), sandbox.py and child.py (the derivation child),
dumps.py.

This package is the whole Enzyme route: nothing below backends/ imports it, and the xla
backend reaches it only through the VJP fallback `backends/select.py` registers
(`derive_vjp_text`). It may import transforms/, stablehlo/, backends.lax and backends.xla.
"""

from __future__ import annotations

from .availability import enzyme_available
from .backend import EnzymeBackend, derive_vjp_text
from .boundary import BOUNDARY_TYPES

__all__ = ["BOUNDARY_TYPES", "EnzymeBackend", "derive_vjp_text", "enzyme_available"]
