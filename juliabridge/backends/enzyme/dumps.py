"""enzyme-ad writes a ``/tmp/tmp*.mlir`` file for every failed pass pipeline and logs a line
naming it; `drop_enzyme_dumps()` removes both, unless JULIABRIDGE_DEBUG=1. Only the enzyme
backend imports it."""

from __future__ import annotations

import contextlib
import logging
import os

from ...transforms.typed_errors import debug_enabled


class _DumpFilter(logging.Filter):
    """Drops enzyme-ad's "Enzyme MLIR dumped to FILE" record and deletes FILE."""

    def filter(self, record: logging.LogRecord) -> bool:
        if debug_enabled() or not str(record.msg).startswith("Enzyme MLIR dumped to"):
            return True
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            with contextlib.suppress(OSError, TypeError):
                os.unlink(str(args[0]))
        return False


_FILTER = _DumpFilter()


def drop_enzyme_dumps() -> None:
    """Install the filter where enzyme_ad.jax.primitives logs (absl's logger; root, too)."""
    for logger in (logging.getLogger("absl"), logging.getLogger()):
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
