"""Bracket nesting depth of text, measured without recursion before a recursive parser sees it.

MLIR's parser recurses once per nested bracket and overflows the C stack (a segfault) at a few
thousand levels, e.g. ``attributes {x = [[[[...]]]]}`` 10,000 deep. Python's json module
recurses too. So module and manifest text is measured first and refused above a limit that no
real export comes near.
"""

from __future__ import annotations

import re

import numpy as np

#: MLIR string literals (no raw newlines) and // comments, matched left to right like the lexer.
MLIR_SKIP = re.compile(rb'"(?:[^"\\\n]|\\.)*"|//[^\n]*')
#: JSON strings.
JSON_SKIP = re.compile(rb'"(?:[^"\\]|\\.)*"')

_BLOCK = 1 << 24


def max_depth(
    data: bytes,
    skip: re.Pattern[bytes],
    opens: bytes = b"([{<",
    closes: bytes = b")]}>",
    drop: tuple[bytes, ...] = (b"->",),
) -> int:
    """Deepest bracket nesting in `data` outside what `skip` matches.

    A closer at depth 0 counts as nothing (the walk is clamped at zero), so stray closers
    cannot hide the depth of what follows them.
    """
    data = skip.sub(b" ", data)
    for token in drop:
        data = data.replace(token, b" " * len(token))
    step = np.zeros(256, np.int8)
    step[list(opens)] = 1
    step[list(closes)] = -1
    raw = np.frombuffer(data, np.uint8)
    depth = 0
    best = 0
    for i in range(0, raw.size, _BLOCK):
        s = step[raw[i : i + _BLOCK]]
        moves = s[s != 0].astype(np.int64)
        if moves.size == 0:
            continue
        walk = depth + np.cumsum(moves)
        clamped = walk - np.minimum.accumulate(np.minimum(walk, 0))
        best = max(best, int(clamped.max()))
        depth = int(clamped[-1])
    return best
