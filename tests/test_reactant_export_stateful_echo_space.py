"""A StatefulLuxLayer export whose output is its input returned unchanged (issue 38).

``export_to_enzymejax(StatefulLuxLayer(model, ps, st), x)`` returns the leaves of y, then
every traced argument not already among them, in argument order (Reactant.jl
src/TracedUtils.jl:677-753). When y holds x itself (testmode Dropout, an identity branch),
that result is an echo of x and x is not returned again, so the split of the results must
read the echoes. The space: which output leaves are x and where they stand among y's leaves,
and train or test mode (a new running mean or st returned unchanged). The reference is the
layer written in numpy.
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

RNG = np.random.default_rng(38)
X = RNG.standard_normal((5, 4)).astype(np.float32)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)
R = RNG.standard_normal(3).astype(np.float32)


def _reference(x: np.ndarray, outs: tuple[str, ...], train: bool) -> tuple[list[Any], Any]:
    """The layer in numpy: Dense y = x W + b, outputs `outs` ("x" or "y"), and st's running
    mean of y (momentum 0.1) in train mode, st unchanged in test mode."""
    y = x @ W + B
    r = 0.9 * R + 0.1 * y.mean(axis=0) if train else R
    return [x if o == "x" else y for o in outs], r


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("outs", [("x",), ("y", "x"), ("x", "y"), ("x", "y", "y")])
def test_a_stateful_layer_returning_its_input_is_read_with_that_echo(
    tmp_path: Path, outs: tuple[str, ...], train: bool
) -> None:
    def fn(w: Any, b: Any, r: Any, x: Any) -> Any:
        y = x @ w + b
        leaves = [x if o == "x" else y for o in outs]
        rest = [w, b, 0.9 * r + 0.1 * y.mean(axis=0) if train else r]
        return (*leaves, *rest)  # x is among the outputs, so not returned again

    paths: list[list[Any]] = [[1, "ps", 1, 1], [1, "ps", 1, 2], [1, "st", 1, 1], [2]]
    values = [W, B, R, X]
    d = tmp_path / "exp"
    write_export(d, Export("f", lower(fn, *values), [ArgInfo(p, v) for p, v in zip(paths, values)]))
    want_y, want_r = _reference(X, outs, train)
    direct = juliabridge.import_lux(d)
    converted = juliabridge.import_lux(convert_export(d, tmp_path / "m.bundle", LoadOptions()))
    for model in (direct, converted):
        m = model.manifest
        assert [a.role for a in m.arguments] == ["parameter", "parameter", "state", "input"]
        assert m.mode == ("train" if train else "test")
        y, st = model.apply(model.params, model.state, X)
        got = [y] if len(outs) == 1 else list(y)
        assert len(got) == len(outs)
        for g, w in zip(got, want_y):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(st[0][0]), want_r, rtol=1e-5, atol=1e-6)
