"""Outputs that are an argument returned unchanged, across the batch rules (issue 38).

An output of a Reactant export may be x itself (an identity model), a parameter or a state
leaf returned as it is. It is recorded as an echo of that argument only where the two agree
on the batch axis (docs/reactant-export.md; luxmap.build_manifest): an output gets the batch
axis when its dim `batch_axis` is the batch size, an argument when it is an input. Where they
disagree (a parameter whose leading dim happens to equal the batch), the output is recorded as
a computed result, so a batch of another size is served as the batch rule says: split into
calls of the traced size, the outputs concatenated along the batch axis.

The same rule holds where a Julia export is completed to a bundle (julia_export/complete.py,
docs/julia-export.md). The space: which argument the output returns (x, a parameter, a state
leaf), whether that argument's leading dim equals the batch size, `batch_axis` (none or 0) and
layout ("mlir" or "julia") on the Reactant route, whether samples are declared independent on
the Julia route, and the batch size of the call (the traced one, a multiple, one that needs
padding).
The reference is that rule applied in numpy to the function written here.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import juliabridge
from juliabridge import CallArgumentError

from .conftest import require_backend
from .julia_export_writer import JArg, JExport, flat, write_julia_export
from .pinned_support import lower
from .reactant_export_writer import ArgInfo, Export, write_export

B, F = 4, 3
rng = np.random.default_rng(38)
X = rng.standard_normal((B, F)).astype(np.float32)

CASES = list(
    itertools.product(["x", "w", "s"], [True, False], [None, 0], ["mlir", "julia"])
)  # fmt: skip


def _export(tmp: Path, returned: str, lead_is_batch: bool) -> tuple[Path, np.ndarray, np.ndarray]:
    rows = B if lead_is_batch else B + 1
    w = rng.standard_normal((rows, 2)).astype(np.float32)
    s = rng.standard_normal((rows, 5)).astype(np.float32)
    # Reactant's order: the outputs, st's leaf, then every argument not yet returned.
    order = {"x": lambda x, w, s: (x, s, w), "w": lambda x, w, s: (w, s, x),
             "s": lambda x, w, s: (s, s, x, w)}[returned]  # fmt: skip
    text = lower(order, X, w, s)
    args = [ArgInfo([1], X), ArgInfo([2, 1], w), ArgInfo([3, 1], s)]
    write_export(tmp, Export("f", text, args))
    return tmp, w, s


@pytest.mark.parametrize(("returned", "lead_is_batch", "batch_axis", "layout"), CASES)
def test_an_output_returning_an_argument_follows_the_batch_rule(
    tmp_path: Path, returned: str, lead_is_batch: bool, batch_axis: int | None, layout: str
) -> None:
    d, w, s = _export(tmp_path, returned, lead_is_batch)
    # an output returning ps or st is no reading the module alone gives: told which it is
    kw: dict[str, Any] = {} if returned == "x" else {"outputs": [0], "state_results": {}}
    model = juliabridge.import_lux(d, layout=layout, batch_axis=batch_axis, **kw)
    value = {"x": X, "w": w, "s": s}[returned]
    index = {"x": 0, "w": 1, "s": 2}[returned]
    arg_axis = batch_axis if returned == "x" else None
    out_axis = batch_axis if batch_axis is not None and value.shape[0] == B else None
    r0 = model.manifest.results[0]
    assert r0.batch_axis == out_axis
    assert r0.echo_of == (index if arg_axis == out_axis else None)
    julia = layout == "julia"
    sizes = [B] if batch_axis is None else [B, 2 * B, B + 1, 1]
    for n in sizes:
        x = np.resize(X, (n, F))
        if n != B and out_axis is None:
            with pytest.raises(CallArgumentError, match="no batch_axis"):
                model(x.T if julia else x)
            continue
        # the batch rule: traced-size calls over x padded to whole calls, outputs concatenated
        k = math.ceil(n / B)
        want = x if returned == "x" else np.concatenate([value] * k)[:n] if n != B else value
        y = model(x.T if julia else x)
        np.testing.assert_array_equal(np.asarray(y), want.T if julia else want)


# --- the same rule on the Julia-export route (docs/julia-export.md §4) -------------------------

JULIA_CASES = list(itertools.product(["x", "w", "s"], [True, False], [True, None]))


@pytest.mark.parametrize(("returned", "lead_is_batch", "independent"), JULIA_CASES)
def test_a_julia_export_output_returning_an_argument_follows_the_batch_rule(
    tmp_path: Path, returned: str, lead_is_batch: bool, independent: bool | None
) -> None:
    require_backend("lax")
    rows = B if lead_is_batch else B + 1
    w = rng.standard_normal((rows, 2)).astype(np.float32)
    s = rng.standard_normal((rows, 5)).astype(np.float32)
    args = [JArg("input", [], X), JArg("parameter", ["layer_1", "weight"], w),
            JArg("state", ["layer_1", "s"], s)]  # fmt: skip

    def fn(x: Any, w: Any, s: Any) -> tuple[Any, ...]:
        return {"x": x, "w": w, "s": s}[returned], s  # the output, then st's leaf unchanged

    e = JExport("echo", flat(fn, args), args, [["output"], ["state", "layer_1", "s"]],
                samples_independent=independent)  # fmt: skip
    model = juliabridge.import_lux(write_julia_export(tmp_path / "e", e), backend="lax")
    value = {"x": X, "w": w, "s": s}[returned]
    index = {"x": 0, "w": 1, "s": 2}[returned]
    # batch axis 0 on an input, and on an output, whose axis 0 is the batch size; an echo only
    # where the output's and its argument's batch axes agree
    arg_axis = 0 if returned == "x" else None
    out_axis = 0 if value.shape[0] == B else None
    r0, r1 = model.manifest.results[:2]
    assert (r0.batch_axis, r0.echo_of) == (out_axis, index if arg_axis == out_axis else None)
    assert (r1.batch_axis, r1.echo_of) == (None, 2)
    sizes = [B, 2 * B, B + 1] if independent else [B]
    for n in sizes:
        x = np.resize(X, (n, F))
        if n != B and out_axis is None:
            with pytest.raises(CallArgumentError, match="no batch_axis"):
                model(x)
            continue
        k = math.ceil(n / B)
        want = x if returned == "x" else np.concatenate([value] * k)[:n] if n != B else value
        np.testing.assert_array_equal(np.asarray(model(x)), want)
