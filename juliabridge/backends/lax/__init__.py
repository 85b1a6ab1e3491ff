"""The `lax` backend: the StableHLO module re-expressed as JAX primitives.

At load time the module is *lifted*: every op becomes a Python implementation built from
`jax.lax` (program.py, ops/); at call time the lifted program is evaluated on JAX values
(evaluate.py), so JAX itself traces, differentiates, batches, shards and lowers it — every
transformation, every order, on every platform JAX runs on, with no foreign call in between.

Every lift rule is registered in one place: ``ops/__init__.py`` imports each op-family file,
whose ``@lifts`` decorators fill ``registry.RULES``; ``backend.py``
imports ``ops`` before anything is lifted, so the table is complete whatever was imported first.
"""

from __future__ import annotations

from .backend import LaxBackend, lift
from .registry import RULES

__all__ = ["RULES", "LaxBackend", "lift"]
