"""Child process of backends/deadline.py: compiles one module as the parent's backend would,
so a compile that runs past the deadline is killed here, not in the user's process.

stdin: JSON ``{"text": module text, "backend": name, "x64": bool}``. The module is loaded
trusted (the parent has checked it) on JAX's CPU platform, lowered for its @main argument
shapes and compiled; nothing runs. Exit status 0 when compiled; stdout then says ``compiled``.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    """Compile the module on stdin (see the module docstring)."""
    req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", bool(req["x64"]))
    from ..stablehlo import parse_module
    from ..support import dtypes
    from .select import make_backend

    module = parse_module(req["text"], trust=True, origin="compile deadline child")
    backend = make_backend(module, req["backend"], trust=True)
    specs = [jax.ShapeDtypeStruct(a.shape, dtypes.to_numpy(a.dtype)) for a in module.arguments]
    jax.jit(backend.call).lower(*specs).compile()
    sys.stdout.write("compiled\n")


if __name__ == "__main__":
    main()
