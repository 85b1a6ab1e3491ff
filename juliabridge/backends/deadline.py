"""The first compile of an untrusted module, under a deadline.

XLA's compile time is not predicted by any op count: a chain of complex elementwise ops
compiles in quadratic time (20 chained complex sqrt: 40 s; f32: 0.1 s), and a compile cannot be
interrupted inside the process that runs it. So an untrusted module that could compile for
long (more than COMPLEX_PROBE_LINES lines with complex types, or more than
COMPILE_PROBE_LINES lines) is first compiled in a
child process (support/childproc.py: isolated, scrubbed, memory-capped) on JAX's CPU platform,
killed at the deadline. Past it, loading fails with a ResourceLimitError naming the module
and the limit, and this process never started the compile; within it, this process compiles
as usual at the first call (the child's work is not reused: one extra compile plus the child's
start, about 2 s, measured by benchmarks/bench_compile_deadline.py). Trusted modules
(``trust=True``, a bundle you made) never take this path.

The one knob: JULIABRIDGE_COMPILE_LIMIT (seconds; 0 turns the deadline off), or the
`compile_limit` keyword of `make_backend`, which wins over it.
"""

from __future__ import annotations

import json
import os
import subprocess

from ..errors import JuliaBridgeError, ResourceLimitError
from ..stablehlo import StableHLOModule
from ..support import childproc, dtypes

#: Default seconds a first compile (and the child's start) may take.
DEFAULT_COMPILE_LIMIT = 300.0
#: Modules shorter than this without complex element types compile within seconds (the op
#: budget's calibration: 10,000 chained sines, the longest chain it admits, take 23.5 s), so
#: they skip the child and its start-up cost.
COMPILE_PROBE_LINES = 2_000
#: Lines holding a complex type past which a module goes to the child: complex chains compile
#: in about 0.1 s x n^2 (20 sqrt: 40 s), so 8 take a few seconds at most.
COMPLEX_PROBE_LINES = 8
ENV = "JULIABRIDGE_COMPILE_LIMIT"


def compile_limit(keyword: float | None = None) -> float:
    """The deadline in seconds: `keyword`, else $JULIABRIDGE_COMPILE_LIMIT, else the default;
    0 turns it off.

    Raises:
        JuliaBridgeError: a value that is not a number of seconds >= 0.
    """
    raw: object = keyword if keyword is not None else os.environ.get(ENV)
    if raw is None or raw == "":
        return DEFAULT_COMPILE_LIMIT
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise JuliaBridgeError(
            f"compile limit {raw!r} (from {'compile_limit' if keyword is not None else ENV}) "
            "is not a number of seconds >= 0; use e.g. 300, or 0 to turn the deadline off"
        )
    return value


def needs_probe(module: StableHLOModule) -> bool:
    """Whether the module could compile for long: more than COMPLEX_PROBE_LINES lines with a
    complex type, or more than COMPILE_PROBE_LINES lines."""
    text = module.text
    if text.count("\n") > COMPILE_PROBE_LINES:
        return True
    return text.count("complex<") > COMPLEX_PROBE_LINES and (
        sum("complex<" in line for line in text.splitlines()) > COMPLEX_PROBE_LINES
    )


def check_compile_time(module: StableHLOModule, backend: str, limit: float) -> None:
    """Compile `module` as `backend` would in a child; refuse it when that passes `limit`.

    Args:
        module: the checked (untrusted) module.
        backend: the backend that will run it ("lax", "xla" or "enzyme"; enzyme compiles
            through XLA as xla does).
        limit: seconds; 0 skips the check.

    Raises:
        ResourceLimitError: the compile did not finish within `limit` seconds.
    """
    if limit <= 0 or not needs_probe(module):
        return
    request = {
        "text": module.text,
        "backend": "lax" if backend == "lax" else "xla",
        "x64": dtypes.x64_enabled(),
    }
    try:
        done = childproc.run(
            "juliabridge.backends._compile_child:main",
            input=json.dumps(request).encode("utf-8"),
            timeout=limit,
            memory=childproc.physical_memory(),
            # XLA compiles on several threads: CPU seconds may pass wall seconds.
            cpu_seconds=int(limit * max(1, os.cpu_count() or 1)) + 2,
            extra_env={"JAX_PLATFORMS": "cpu"},
        )
    except subprocess.TimeoutExpired:
        raise ResourceLimitError(
            f"{module.origin}: compiling the module did not finish within the "
            f"{limit:g} s compile limit (in a separate process, which was stopped; this one "
            "never started the compile). XLA's compile time grows faster than the op count "
            "for some modules (e.g. chains of complex elementwise ops). Raise the limit with "
            f"{ENV}=SECONDS (or compile_limit=), or load the module with trust=True if you "
            "made it"
        ) from None
    except OSError:
        return  # no child here: the first call compiles as it always did
    del done  # a failed compile fails again, with XLA's message, at the first call


__all__ = [
    "COMPILE_PROBE_LINES",
    "COMPLEX_PROBE_LINES",
    "DEFAULT_COMPILE_LIMIT",
    "ENV",
    "check_compile_time",
    "compile_limit",
    "needs_probe",
]
