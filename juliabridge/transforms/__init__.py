"""JAX transformation support (grad, jvp, vmap) for imported modules."""

from .primitives import call_p, jvp_p, vjp_p
from .target import CallTarget

__all__ = ["CallTarget", "call_p", "jvp_p", "vjp_p"]
