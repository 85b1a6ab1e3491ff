"""The x64 check of a model's weights, with what to do about Lux's UInt64 random seeds.

Lux keeps a random layer's RNG in its state (a Dropout's ``st.rng``), and Reactant holds it as
a ``ReactantRNG`` whose seed is a UInt64 array (Lux MLDataDevices ext/ReactantExt.jl:133-141),
so the seed is a ``ui64`` state argument of @main even in test mode, where the layer returns it
unchanged. JAX holds 64-bit integers only with ``jax_enable_x64`` on, and the module's signature
takes the seed as ``ui64``, so the model cannot be loaded without it: not carrying the seed
would change what the model returns as its state (Lux returns it), and carrying its bits in
32-bit halves would need a module of another signature. The error says which leaf is the seed,
whether the model draws from it (train mode) or only hands it back (test mode), and how to turn
x64 on.
"""

from __future__ import annotations

from ..bundle.manifest import ArgumentEntry, Manifest
from ..errors import X64DisabledError
from ..support import dtypes


def _draws_from(m: Manifest, seed: ArgumentEntry) -> bool:
    """Whether the module returns a new value for the seed (it draws random numbers from it:
    train mode) rather than the argument itself (test mode: an alias or an echo)."""
    where = ("state", *seed.path)
    return any(where in r.paths and r.echo_of != seed.index for r in m.results)


def require_x64_weights(m: Manifest, what: str) -> None:
    """Raise X64DisabledError when a parameter or state array of `m` is 64-bit and x64 is off,
    naming Lux's UInt64 random seeds among them and what to do.

    Args:
        m: the model's manifest (a bundle's, or an export directory's in-memory one).
        what: how the model is named in the message (``bundle /path/m.bundle``).

    Raises:
        X64DisabledError: a 64-bit parameter or state array while jax_enable_x64 is off.
    """
    weights = [a for a in m.arguments if a.role != "input"]
    if dtypes.x64_enabled() or not any(a.dtype in dtypes.SIXTY_FOUR_BIT for a in weights):
        return
    seeds = [a for a in weights if a.role == "state" and a.dtype == "ui64"]
    if not seeds:
        dtypes.require_x64({a.label: a.dtype for a in weights}, what)
        return
    named = ", ".join(f"{a.label} (ui64{list(a.shape)})" for a in seeds[:4])
    more = f" and {len(seeds) - 4} more" if len(seeds) > 4 else ""
    drawn = [a for a in seeds if _draws_from(m, a)]
    use = (
        "the model draws random numbers from it and returns a new seed (train mode)"
        if drawn
        else "the model does not draw from it (test mode: it comes back unchanged as Lux's "
        "state), but @main still takes it as a ui64 argument"
    )
    others = [a for a in weights if a.dtype in dtypes.SIXTY_FOUR_BIT and a not in seeds]
    also = (
        "; other 64-bit arrays: " + ", ".join(f"{a.label}: {a.dtype}" for a in others[:4])
        if others
        else ""
    )
    raise X64DisabledError(
        f"{what}: state leaf {named}{more} is a random seed that Lux keeps as UInt64 (a Dropout's "
        f"or another random layer's rng, which Reactant holds as a UInt64 array); {use}{also}. "
        "JAX holds 64-bit integers only with x64 on, so turn it on before import_lux: "
        'jax.config.update("jax_enable_x64", True) at the start of your program, or '
        "JAX_ENABLE_X64=1 in its environment (the juliabridge commands do it themselves). "
        "x64 makes JAX's default dtypes 64-bit (jnp.zeros(3) is then float64): give float32 "
        "where you mean it."
    )


__all__ = ["require_x64_weights"]
