"""The bracket-nesting measure on text of every shape, both walks, any block size (issue 38).

stablehlo/nesting.py documents its rule: brackets count outside string literals (which end at
their line's end; a backslash escapes the character after it) and `//` comments, the MLIR arrow
`->` closes nothing, and the walk is clamped at zero (a stray closer cannot hide the depth of
what follows). It has two walks (token by token below `SMALL` bytes, vectorized in blocks of
`BLOCK` bytes above) that must agree. The reference is a character-by-character walker of that
rule; texts are drawn from the lexemes that matter, stray closers included, and the vectorized
walk runs with small blocks so that strings, comments, escapes and arrows straddle block
boundaries.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge.stablehlo import nesting

LEXEMES = ["(", ")", "[", "]", "{", "}", "<", ">", "->", '"', '\\"', "//", "\n", "a", " ", "-"]


def reference_depth(text: str, comments: bool = True, arrow: bool = True) -> int:
    depth = best = 0
    in_string = in_comment = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            in_string = in_comment = False
        elif in_comment:
            pass
        elif ch == "\\":
            i += 1  # escapes the next character (a quote here)
        elif ch == '"':
            in_string = not in_string
        elif in_string:
            pass
        elif comments and text.startswith("//", i):
            in_comment = True
        elif arrow and text.startswith("->", i):
            i += 1
        elif ch in "([{<":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        i += 1
    return best


texts = st.lists(st.sampled_from(LEXEMES), max_size=160).map("".join)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(text=texts, block=st.sampled_from([7, 16, 61, 1 << 20]))
def test_both_walks_follow_the_rule_whatever_the_block_size(monkeypatch, text, block) -> None:
    want = reference_depth(text)
    data = text.encode()
    assert nesting.max_depth(data, nesting.MLIR_SKIP) == want, text  # token walk (short text)
    monkeypatch.setattr(nesting, "SMALL", -1)
    monkeypatch.setattr(nesting, "BLOCK", block)
    assert nesting.max_depth(data, nesting.MLIR_SKIP) == want, (text, block)


@pytest.mark.parametrize("walk", ["tokens", "blocks"])
def test_stray_closers_do_not_hide_the_depth_that_follows(monkeypatch, walk: str) -> None:
    if walk == "blocks":
        monkeypatch.setattr(nesting, "SMALL", -1)
    text = b")))]]]}}}" * 50 + b"[[[[(" + b"x" * 10 + b")]]]]"
    assert nesting.max_depth(text, nesting.MLIR_SKIP) == 5
    long = b"]" * 5000 + b"{" * 7 + b"}" * 7  # longer than SMALL: the vectorized walk
    assert nesting.max_depth(long, nesting.MLIR_SKIP) == 7
