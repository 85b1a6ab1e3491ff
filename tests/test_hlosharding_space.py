"""The mhlo.sharding reader over the space of XLA's sharding text (issue 38).

XLA prints an HloSharding as ``{replicated}``, ``{maximal device=N}``, ``{manual}``, a tuple
``{{...}, {...}}`` or a tiling ``{devices=[d0,d1,...]<device list>}``, the device list either
explicit (``0,1,2,3``) or an iota (``<=[4]`` or ``<=[2,2]T(1,0)``), optionally followed by
``last_tile_dim_replicate`` (the last tile dimension counts replicas, not pieces of the
tensor). A tile dimension is a device count, at least 1. stablehlo/hlosharding.py documents
what juliabridge does with it: a tiling of 1 to 65 dimensions each from 1 to 2**31 is read
as its pieces per tensor dimension (the replica dimension dropped), any other tiling is refused
at load, every other form reads as no tiling.

The space: 1 to 4 tile dimensions (and 66 to 70) drawn with the edges 0, 1, 2**31 and 2**31 + 1,
both device-list forms, with and without the replicate suffix, quoted or not, with spaces
around; and the non-tiled forms. The reference is that grammar, written here.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import MLIRParseError
from juliabridge.stablehlo.hlosharding import read_sharding
from juliabridge.transforms.sharding import recorded_tiling

EDGE = [0, 1, 2, 3, 4, 1 << 31, (1 << 31) + 1]


@st.composite
def tilings(draw: st.DrawFn) -> tuple[str, tuple[int, ...] | None, str | None]:
    """(text, pieces the grammar gives or None, the refusal's reason or None)."""
    many = draw(st.booleans()) and draw(st.booleans())  # now and then past 65 dimensions
    n = draw(st.integers(66, 70)) if many else draw(st.integers(1, 4))
    dims = draw(st.lists(st.sampled_from(EDGE) | st.integers(1, 9), min_size=n, max_size=n))
    replicate = draw(st.booleans())
    total = 1
    for d in dims[:6]:
        total *= max(d, 1)
    devices = (
        f"<=[{min(total, 64)}]"
        if draw(st.booleans()) or total > 64
        else ",".join(map(str, range(total)))
    )
    text = "{devices=[" + ",".join(map(str, dims)) + "]" + devices
    text += " last_tile_dim_replicate}" if replicate else "}"
    if draw(st.booleans()):
        text = f'"{text}"'
    text = draw(st.sampled_from(["", " "])) + text + draw(st.sampled_from(["", " "]))
    bad = next((d for d in dims if not 1 <= d <= 1 << 31), None)
    if bad is not None:
        return text, None, f"tile dimension '{bad}' is not a device count"
    if n > 65:
        return text, None, f"{n} tile dimensions, more than 65"
    return text, tuple(dims[:-1] if replicate else dims), None


def _module(sharding: str) -> str:
    quoted = sharding.strip().strip('"').strip()
    return (
        f'func.func @main(%a: tensor<2x4xf32> {{mhlo.sharding = "{quoted}"}}) -> tensor<2x4xf32> '
        "{\n  return %a : tensor<2x4xf32>\n}\n"
    )


@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=tilings())
def test_a_tiling_reads_as_its_pieces_or_is_refused_by_the_grammar(
    case: tuple[str, tuple[int, ...] | None, str | None],
) -> None:
    text, pieces, why = case
    if why is not None:
        with pytest.raises(MLIRParseError) as info:
            read_sharding(text, "x")
        assert why in str(info.value) and "not XLA's sharding syntax" in str(info.value)
        with pytest.raises(MLIRParseError, match=r"@main argument 0: mhlo\.sharding"):
            juliabridge.load_mlir(_module(text), backend="lax")
        return
    tiling = read_sharding(text, "x")
    assert tiling is not None and tiling.pieces == pieces
    # compared with the caller's placement only at the value's rank
    assert recorded_tiling(text, len(pieces)) == pieces
    assert recorded_tiling(text, len(pieces) + 1) is None


@pytest.mark.parametrize(
    "text",
    ["{replicated}", '"{replicated}"', "{maximal device=0}", "{maximal device=3}", "{manual}",
     "{{replicated}, {devices=[2]0,1}}", "{{devices=[0]0}, {manual}}", "{unknown}"],
)  # fmt: skip
def test_forms_without_a_tiling_read_as_none(text: str) -> None:
    assert read_sharding(text, "x") is None
    juliabridge.load_mlir(_module(text), backend="lax")
    # {replicated} is one piece per dimension; the others have no per-dimension tiling
    want = (1, 1) if text.strip('"') == "{replicated}" else None
    assert recorded_tiling(text, 2) == want
