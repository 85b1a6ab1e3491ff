"""JAX transformation support (grad, jvp, vmap) for imported modules, backend-neutral.

transforms/ owns the juliabridge_call primitive and its rules (primitives, target), sharding,
typed failures and the native-stderr capture (guard) and derivatives of a traceable primal
(derive). It may import stablehlo/, dtypes, jaxinternals and errors; it never imports a
backend (the Enzyme route is backends/enzyme/).
"""

from .call_target import CallTarget
from .primitives import call_p, jvp_p, vjp_p

__all__ = ["CallTarget", "call_p", "jvp_p", "vjp_p"]
