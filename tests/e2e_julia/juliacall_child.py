"""Export a model script's objects through juliacall, in a child Python (run by the e2e tests).

    python juliacall_child.py MODEL.jl OUT_DIR MODE in_process|subprocess

The script runs in the juliacall session's Main, then ``juliabridge.export_lux(jl.model,
jl.ps, jl.st, x..., out=OUT_DIR)`` exports the live objects: by default in a ``julia``
subprocess, or in this process with ``in_process=True``. A child, because juliacall starts Julia
inside the Python that imports it (and, in process, Reactant's XLA beside jaxlib's).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    script, out, mode, where = argv
    from juliacall import Main as jl

    import juliabridge

    jl.seval(f'include(raw"{script}")')
    n = int(jl.seval("x isa Tuple ? length(x) : 1"))
    inputs = [jl.seval(f"x isa Tuple ? x[{i + 1}] : x") for i in range(n)]
    model = juliabridge.export_lux(
        jl.model, jl.ps, jl.st, *inputs, out=out, mode=mode, in_process=where == "in_process"
    )
    print("exported", model.manifest.name, "to", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
