"""Small helpers for running imported modules on sharded (multi-device) arrays."""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def unshard_leading_axis(x: Any) -> Any:
    """Reshard `x` so its axis 0 is not split over an Explicit mesh axis.

    lax.map loops over axis 0, which JAX refuses when that axis is explicitly sharded; the
    loop is over chunks or vmapped copies, so gathering that axis keeps results exact.
    """
    try:
        sharding = jax.typeof(x).sharding
        spec = sharding.spec
    except AttributeError:
        return x
    if not spec or spec[0] is None:
        return x
    return jax.sharding.reshard(x, NamedSharding(sharding.mesh, P(None, *spec[1:])))
