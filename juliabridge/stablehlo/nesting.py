"""Bracket nesting depth of text, measured without recursion before a recursive parser sees it.

MLIR's parser recurses once per nested bracket and overflows the C stack (a segfault) at a few
thousand levels, e.g. ``attributes {x = [[[[...]]]]}`` 10,000 deep. Python's json module
recurses too. So module and manifest text is measured first and refused above a limit that no
real export comes near.

The measure must cost memory and time linear in the text with a small constant, whatever the
text holds: it runs *before* any other bound on the content. A regular expression over string
literals does not qualify (Python's engine keeps per-character backtracking state, about 120
bytes per byte of one long string), so the lexing here is vectorized with numpy over fixed-size
blocks, with a little state carried from block to block. It relies on one fact shared by MLIR
and strict JSON: a string literal never spans a newline, so "inside a string" is the parity of
unescaped quotes since the start of the line.

Text of at most `SMALL` bytes (a small manifest or module) is walked token by token in Python
instead, with a pattern of fixed one- and two-byte lexemes (no repetition, so no backtracking
state); the tests check that both walks agree.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Lexicon:
    """What the depth walk skips: string literals always, `//` line comments if `comments`."""

    name: str
    comments: bool


#: MLIR: string literals (no raw newlines, backslash escapes) and // comments.
MLIR_SKIP = Lexicon("mlir", comments=True)
#: Strict JSON: string literals only.
JSON_SKIP = Lexicon("json", comments=False)

#: Bytes per block; the walk's temporaries are at most ~30 bytes per block byte (~30 MiB).
BLOCK = 1 << 20
#: Up to this many bytes the text is walked token by token in Python instead: the numpy walk
#: costs ~40 array operations per block whatever its size, each a few microseconds and more on
#: their first use in a process, which is more than walking a small manifest's or module's
#: tokens (above ~2-4 KiB the numpy walk wins once warm, and its worst case stays flat).
SMALL = 1 << 12

_Q, _BS, _NL, _SL, _GT, _DASH = (ord(c) for c in '"\\\n/>-')


@dataclass
class _Carry:
    """Lexer state at a block boundary."""

    backslash_odd: bool = False  # the block before ended in an odd run of backslashes
    in_string: bool = False  # inside a string literal at the boundary
    in_comment: bool = False  # inside a // comment at the boundary
    last: int = 0  # the byte before the boundary (0: none)
    depth: int = 0  # bracket depth at the boundary


_EMPTY = np.zeros(0, np.int64)


def _unescaped(raw: np.ndarray, q: np.ndarray, carry_odd: bool) -> np.ndarray:
    """The positions in `q` not preceded by an odd run of backslashes."""
    plain = np.flatnonzero(raw != _BS)
    j = np.searchsorted(plain, q) - 1  # the last non-backslash before each quote
    last = np.where(j >= 0, plain[np.maximum(j, 0)], -1)
    odd = ((q - 1 - last) & 1).astype(bool)
    if carry_odd:  # a run reaching back to the block start continues the previous one
        odd ^= j < 0
    return q[~odd]


def _rank_in_run(sorted_ids: np.ndarray) -> np.ndarray:
    """Position of each element within its run of equal values (input sorted)."""
    n = sorted_ids.size
    idx = np.arange(n, dtype=np.int64)
    run_start = np.ones(n, bool)
    run_start[1:] = sorted_ids[1:] != sorted_ids[:-1]
    return idx - np.maximum.accumulate(np.where(run_start, idx, 0))


def _masked_intervals(
    raw: np.ndarray, lex: Lexicon, carry: _Carry
) -> tuple[list[tuple[np.ndarray, np.ndarray]], _Carry]:
    """Sets of inclusive [start, end] byte ranges (each sorted, none overlapping another) of
    string literals and comments, and the new carry.

    Works on event positions (quotes, newlines, comment starts), so a block costs a few dense
    byte comparisons plus work proportional to its events.
    """
    n = raw.size
    nl = np.flatnonzero(raw == _NL)
    line_end = np.append(nl, n)  # exclusive end of each line segment of the block
    line_start = np.concatenate(([0], nl + 1))
    q = np.flatnonzero(raw == _Q)
    if q.size and (carry.backslash_odd or bool((raw == _BS).any())):
        q = _unescaped(raw, q, carry.backslash_odd)
    if carry.in_comment:  # the first segment continues a comment: its quotes mean nothing
        q = q[q >= line_end[0]]
    lq = np.searchsorted(nl, q)
    rank = _rank_in_run(lq)
    open0 = carry.in_string and not carry.in_comment
    if open0:
        rank = rank + (lq == 0)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    end_in_comment = False
    if lex.comments:
        s = np.flatnonzero((raw[1:] == _SL) & (raw[:-1] == _SL)) + 1
        if n and raw[0] == _SL and carry.last == _SL and not (carry.in_string or carry.in_comment):
            s = np.concatenate(([0], s))
        if s.size:
            ls = np.searchsorted(nl, s)
            before = np.searchsorted(q, s - 1) - np.searchsorted(q, line_start[ls])
            before = before + (open0 & (ls == 0))
            valid = (before & 1) == 0
            if carry.in_comment:
                valid &= ls > 0
            lv, sv = ls[valid], s[valid]
            first = np.ones(lv.size, bool)
            first[1:] = lv[1:] != lv[:-1]
            lines, cs = lv[first], sv[first] - 1  # cs: the first '/' of the pair
            cs_of_line = np.full(nl.size + 1, n + 1, np.int64)
            cs_of_line[lines] = cs
            keep = q < cs_of_line[lq]
            q, lq, rank = q[keep], lq[keep], rank[keep]
            starts.append(np.maximum(cs, 0))
            ends.append(line_end[lines] - 1)
            end_in_comment = bool(lines.size and lines[-1] == nl.size)
    if carry.in_comment:
        starts.append(np.zeros(1, np.int64))
        ends.append(np.array([line_end[0] - 1]))
        end_in_comment = end_in_comment or nl.size == 0
    # String literals: each opening quote (even rank) to the next quote of its line, or to the
    # end of the line when unterminated (the parser stops there anyway).
    nxt_same = np.zeros(q.size, bool)
    if q.size > 1:
        nxt_same[:-1] = lq[1:] == lq[:-1]
    opener = (rank & 1) == 0
    closer_pos = np.where(nxt_same, np.append(q[1:], 0), line_end[lq] - 1)
    starts.append(q[opener])
    ends.append(closer_pos[opener])
    if open0:
        first_q = q[lq == 0]
        starts.append(np.zeros(1, np.int64))
        ends.append(first_q[:1] if first_q.size else np.array([line_end[0] - 1]))
    last_line = nl.size
    in_last = lq == last_line
    quotes_last = int(np.count_nonzero(in_last)) + (int(open0) if last_line == 0 else 0)
    end_in_string = not end_in_comment and bool(quotes_last & 1)
    if n and raw[-1] == _BS:
        plain = np.flatnonzero(raw != _BS)
        run = n if plain.size == 0 else n - 1 - int(plain[-1])
        odd = bool(run & 1) ^ (carry.backslash_odd and plain.size == 0)
    else:
        odd = False
    new = _Carry(odd, end_in_string, end_in_comment, int(raw[-1]) if n else carry.last)
    return list(zip(starts, ends)), new


def max_depth(
    data: bytes,
    skip: Lexicon,
    opens: bytes = b"([{<",
    closes: bytes = b")]}>",
    drop: tuple[bytes, ...] = (b"->",),
) -> int:
    """Deepest bracket nesting in `data` outside string literals (and comments, for MLIR).

    A closer at depth 0 counts as nothing (the walk is clamped at zero), so stray closers
    cannot hide the depth of what follows them. `drop` may hold ``b"->"``: MLIR's arrow is not
    a closing angle bracket. Memory is O(BLOCK), time O(len(data)).
    """
    if drop not in ((), (b"->",)):
        raise ValueError("drop supports only the MLIR arrow")
    if len(data) <= SMALL:
        return _small_depth(data, skip.comments, opens, closes, bool(drop))
    step = np.zeros(256, np.int8)
    step[list(opens)] = 1
    step[list(closes)] = -1
    whole = np.frombuffer(data, np.uint8)
    carry = _Carry()
    best = 0
    for i in range(0, whole.size, BLOCK):
        raw = whole[i : i + BLOCK]
        ranges, new = _masked_intervals(raw, skip, carry)
        sv = step[raw]
        mask = sv != 0
        if drop and raw.size:
            mask[1:] &= ~((raw[1:] == _GT) & (raw[:-1] == _DASH))
            mask[0] &= not (raw[0] == _GT and carry.last == _DASH)
        b = np.flatnonzero(mask)
        for starts, ends in ranges:
            if starts.size and b.size:
                k = np.searchsorted(starts, b, side="right") - 1
                b = b[(k < 0) | (b > ends[np.maximum(k, 0)])]
        new.depth = carry.depth
        if b.size:
            walk = carry.depth + np.cumsum(sv[b], dtype=np.int64)
            clamped = walk - np.minimum.accumulate(np.minimum(walk, 0))
            best = max(best, int(np.max(clamped)))
            new.depth = int(clamped[-1])
        carry = new
    return best


@functools.lru_cache(maxsize=8)
def _tokens(comments: bool, brackets: bytes, arrow: bool) -> re.Pattern[bytes]:
    """The lexemes the walk reacts to. Backslashes pair up from the left, so a quote after an
    odd run of them is matched as the escaped pair (as `_unescaped` decides by parity)."""
    alts = [rb"\\\\", rb'\\"', rb"\\", b'"', b"\n"]
    if comments:
        alts.append(b"//")
    if arrow:
        alts.append(b"->")  # before the brackets: the arrow's '>' closes nothing
    alts.append(b"[" + re.escape(brackets) + b"]")
    return re.compile(b"|".join(alts))


# Compiled with the module, like every other pattern: the manifest's and the MLIR lexicon's.
_tokens(False, b"[{]}", False)
_tokens(True, b"([{<)]}>", True)


def _small_depth(data: bytes, comments: bool, opens: bytes, closes: bytes, arrow: bool) -> int:
    """`max_depth` of short text, token by token; the same lexicon and the same clamp at zero.

    Memory is that of one match object at a time; time is linear in the tokens.
    """
    step = dict.fromkeys(opens, 1) | dict.fromkeys(closes, -1)
    depth = best = 0
    in_string = in_comment = False
    for m in _tokens(comments, opens + closes, arrow).finditer(data):
        tok = m.group()
        if tok == b"\n":  # strings and comments end with their line
            in_string = in_comment = False
        elif in_comment:
            continue
        elif tok == b'"':
            in_string = not in_string
        elif in_string or tok[0] == 0x5C or tok == b"->":  # escapes and arrows: no brackets
            continue
        elif tok == b"//":
            in_comment = True
        else:
            depth = max(0, depth + step[tok[0]])
            best = max(best, depth)
    return best
