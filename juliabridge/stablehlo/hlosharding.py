"""The one reader of ``mhlo.sharding`` strings (XLA's HloSharding text), with typed refusals.

A module records how each @main argument was split as XLA's sharding text: ``{replicated}``,
``{maximal device=0}``, ``{manual}``, a tuple ``{{...}, {...}}``, or a tiling
``{devices=[a,b,...]<device list>[ last_tile_dim_replicate][ last_tile_dims={...}]}``.
juliabridge drops the attribute before compiling (the caller's placement is what runs) and
reads only a tiling's pieces per dimension, to warn when the call splits an argument otherwise.
A tiling whose dimension list is not a list of device counts is refused when the module loads,
so no later call can fail on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import MLIRParseError
from ..support.shown import shown

#: Most tile dimensions a tiling may list: a tensor's rank (at most 64 here, like numpy's
#: array rank) plus the replication dimension.
MAX_TILE_DIMS = 65
#: Largest number of pieces one dimension may be split into (a device count).
MAX_PIECES = 1 << 31
_TILED = re.compile(r"\{devices=\[([^\]]*)\]")
_COUNT = re.compile(r"[0-9]{1,10}", re.ASCII)


@dataclass(frozen=True)
class Tiling:
    """A tiled sharding's pieces per tensor dimension (the replication dimension removed)."""

    pieces: tuple[int, ...]


def read_sharding(text: str, where: str) -> Tiling | None:
    """The tiling an ``mhlo.sharding`` string records, or None where it records none.

    Args:
        text: the attribute as printed (quotes around it are allowed).
        where: the argument and module, for the error message.

    Returns:
        The pieces per dimension of a ``{devices=[...]...}`` tiling (its last entry dropped
        with ``last_tile_dim_replicate``); None for ``{replicated}``-like forms, maximal,
        manual and tuple shardings.

    Raises:
        MLIRParseError: a tiling whose dimension list is not 1 to 65 comma-separated device
            counts between 1 and 2**31.
    """
    t = text.strip().strip('"').strip()
    m = _TILED.match(t)
    if m is None:
        return None
    parts = m.group(1).split(",")
    bad = next((p for p in parts if not _COUNT.fullmatch(p) or not 1 <= int(p) <= MAX_PIECES), None)
    if bad is not None or len(parts) > MAX_TILE_DIMS:
        why = (
            f"{len(parts)} tile dimensions, more than {MAX_TILE_DIMS}"
            if bad is None
            else f"tile dimension {shown(bad)} is not a device count from 1 to {MAX_PIECES}"
        )
        raise MLIRParseError(
            f"{where}: mhlo.sharding {shown(t, 120)} is not XLA's sharding syntax ({why}; "
            "expected e.g. {devices=[2,1]0,1}). The module was written by a tool that does not "
            "follow it: re-export it, or remove the attribute (juliabridge only reads it to "
            "compare with the call's placement)"
        )
    pieces = tuple(int(p) for p in parts)
    if "last_tile_dim_replicate" in t[m.end() :]:
        pieces = pieces[:-1]
    return Tiling(pieces)


__all__ = ["MAX_PIECES", "MAX_TILE_DIMS", "Tiling", "read_sharding"]
