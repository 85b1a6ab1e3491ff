"""An export whose arguments come back unchanged, with the batch on each axis (issue 38).

Reactant's exporter returns the outputs, then the state leaves, then every argument not already
returned, in argument order (Reactant.jl src/TracedUtils.jl:677-753), so x and the parameters
come back as results equal to themselves. With ``batch_axis=`` an echoed argument keeps its
own batch axis: x's echo is split and concatenated along the batch like x, a parameter's echo
is not batched. The space: the traced positions (a field-less ``f(x, w)`` at 1, 2 or a Lux
layer's ``apply(model, x, ps, st)`` at 2, 3, 4), the batch axis of x (0 or 1) and the batch
size of the call (the traced one, a multiple, one that needs padding). The reference is the
layer in numpy; the export and the bundle `convert` writes from it must both follow it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import juliabridge
from juliabridge.lux.options import LoadOptions
from juliabridge.reactant_export.convert import convert_export
from tests.pinned_support import lower
from tests.reactant_export_writer import ArgInfo, Export, write_export

RNG = np.random.default_rng(381)
W = RNG.standard_normal((4, 3)).astype(np.float32)
R = RNG.standard_normal(3).astype(np.float32)
TRACED = 5


def _y(x: Any, w: Any, axis: int) -> Any:
    """The layer: Dense without bias, samples along `axis` (x is (batch, 4) or (4, batch))."""
    return x @ w if axis == 0 else w.T @ x


@pytest.mark.parametrize("batch", [TRACED, 2 * TRACED, 7])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("layer", [False, True])
def test_an_echoed_argument_keeps_its_own_batch_axis(
    tmp_path: Path, layer: bool, axis: int, batch: int
) -> None:
    x0 = RNG.standard_normal((TRACED, 4) if axis == 0 else (4, TRACED)).astype(np.float32)
    if layer:  # apply(model, x, ps, st): y, st's leaf unchanged, then x and ps echoed

        def fn(x: Any, w: Any, r: Any) -> Any:
            return _y(x, w, axis), r, x, w

        args = [([2], x0), ([3, 1], W), ([4, 1], R)]
    else:  # f(x, w): y, then x and w echoed

        def fn(x: Any, w: Any) -> Any:
            return _y(x, w, axis), x, w

        args = [([1], x0), ([2], W)]
    d = tmp_path / "exp"
    write_export(d, Export("f", lower(fn, *(v for _, v in args)), [ArgInfo(p, v) for p, v in args]))
    xs = RNG.standard_normal((batch, 4) if axis == 0 else (4, batch)).astype(np.float32)
    direct = juliabridge.import_lux(d, batch_axis=axis)
    out = convert_export(d, tmp_path / "m.bundle", LoadOptions(batch_axis=axis))
    for model in (direct, juliabridge.import_lux(out)):
        np.testing.assert_allclose(np.asarray(model(xs)), _y(xs, W, axis), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(model.params[0]), W)
