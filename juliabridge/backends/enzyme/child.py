"""The Enzyme derivation child's loop (started by sandbox.py through childproc): JSON lines in,
JSON lines out. It may import what the enzyme backend imports; nothing imports it but the
child's own entry point, ``juliabridge.backends.enzyme.child:serve``."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def serve() -> None:
    """The child's loop: derive what each request asks, reply with the text or the error."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    import jax

    jax.config.update("jax_platforms", "cpu")
    from ...stablehlo import parse_module
    from .backend import EnzymeBackend

    for line in sys.stdin:
        req = json.loads(line)
        try:
            module = parse_module(req["text"], trust=True)
            text = EnzymeBackend(module, trust=True).derivative_text(req["mode"])
            reply: dict[str, Any] = {"ok": True, "text": text}
        except Exception as e:  # every failure is reported to the parent, which types it
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = "; ".join(lines[:3])[:600] or type(e).__name__
            reply = {"ok": False, "error": f"{type(e).__name__}: {detail}"}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
