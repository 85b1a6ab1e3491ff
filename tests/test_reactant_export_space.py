"""The Reactant-export reader across its options and result layouts (issue 38).

The space: `layout` ("mlir" or "julia") with parameters of rank 2 that are not square (so a
missing transpose shows), `batch_axis` (none or 0) through `import_lux` and `convert_export`,
batch sizes other than the traced one, outputs whose leading dim is not the batch, an output
that is the input returned unchanged next to parameter and state echoes, and mesh placement of
the .py's shardings on meshes whose axes differ in size (4 fake devices). The directories are
written as Reactant's exporter writes them (tests/reactant_export_writer.py); values are
checked against numpy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge import CallArgumentError
from juliabridge.lux.options import LoadOptions
from juliabridge.reactant_export.convert import convert_export

from .pinned_support import lower
from .reactant_export_writer import ArgInfo, Export, write_export

B, F, H = 4, 3, 2
rng = np.random.default_rng(3)
X = rng.standard_normal((B, F)).astype(np.float32)
W = rng.standard_normal((F, H)).astype(np.float32)  # not square: a transpose shows
S = rng.standard_normal((H, F)).astype(np.float32)


def _dense(x: Any, w: Any, s: Any) -> tuple[Any, ...]:
    # f(x, ps, st) -> (y, st): the output, then st's leaf returned unchanged, then the arguments
    # not yet returned (x, w), as Reactant's exporter returns them.
    return x @ w, s, x, w


def _identity(x: Any, w: Any, s: Any) -> tuple[Any, ...]:
    # An identity model (a test-mode Dropout): its output is x itself, then st, then w.
    return x, s, w


def _export(tmp: Path, fn: Any) -> Path:
    text = lower(fn, X, W, S)
    args = [ArgInfo([1], X), ArgInfo([2, 1], W), ArgInfo([3, 1], S)]
    write_export(tmp, Export("f", text, args))
    return tmp


@pytest.mark.parametrize("layout", ["mlir", "julia"])
@pytest.mark.parametrize("batch_axis", [None, 0])
def test_import_lux_in_either_layout_with_or_without_a_batch_axis(
    tmp_path: Path, layout: str, batch_axis: int | None
) -> None:
    model = juliabridge.import_lux(_export(tmp_path, _dense), layout=layout, batch_axis=batch_axis)
    julia = layout == "julia"
    np.testing.assert_array_equal(np.asarray(model.params[0]), W.T if julia else W)
    np.testing.assert_array_equal(np.asarray(model.state[0]), S.T if julia else S)
    r = model.manifest.results
    # the output, then echoes of st's leaf (argument 2), x (0) and w (1): x's keeps its batch axis
    assert [(x.paths, x.batch_axis, x.echo_of) for x in r] == [
        ((("output",),), batch_axis, None),
        ((), None, 2),
        ((), batch_axis, 0),
        ((), None, 1),
    ]
    for n in [B] if batch_axis is None else [B, 6, 1]:
        x = np.tile(X, (2, 1))[:n]
        y = model(x.T if julia else x)
        np.testing.assert_allclose(np.asarray(y), (x @ W).T if julia else x @ W, rtol=1e-5)
    y, st = model.apply(model.params, model.state, X.T if julia else X)
    np.testing.assert_array_equal(np.asarray(st[0]), S.T if julia else S)


@pytest.mark.parametrize("form", ["per-model row", "batch last"])
def test_an_output_whose_leading_dim_is_not_the_batch(tmp_path: Path, form: str) -> None:
    def per_model(x: Any, w: Any, s: Any) -> tuple[Any, ...]:
        return x @ w, w.sum(axis=0) + x.sum(), s, x, w  # output 2: one row for the whole batch

    def batch_last(x: Any, w: Any, s: Any) -> tuple[Any, ...]:
        return x @ w, (x @ w).T, s, x, w  # output 2: (H, B), the batch on its last dim

    fn = per_model if form == "per-model row" else batch_last
    model = juliabridge.import_lux(_export(tmp_path, fn), batch_axis=0)
    # batch_axis=0 is recorded only where dim 0 is the batch: not on output 2
    assert [r.batch_axis for r in model.manifest.results[:2]] == [0, None]
    y, z = model(X)
    np.testing.assert_allclose(np.asarray(y), X @ W, rtol=1e-5)
    want = W.sum(axis=0) + X.sum() if form == "per-model row" else (X @ W).T
    np.testing.assert_allclose(np.asarray(z), want, rtol=1e-5)
    # so another batch size cannot be split into traced-size calls: refused, naming it
    with pytest.raises(CallArgumentError, match=r"output output\[2\] has no batch_axis"):
        model(np.tile(X, (2, 1)))


@pytest.mark.parametrize("batch_axis", [None, 0])
def test_an_identity_output_next_to_parameter_and_state_echoes(
    tmp_path: Path, batch_axis: int | None
) -> None:
    model = juliabridge.import_lux(_export(tmp_path, _identity), batch_axis=batch_axis)
    m = model.manifest
    # result 0 is the output (x returned unchanged), 1 the unchanged state leaf, 2 w's echo
    assert [(r.paths, r.batch_axis, r.echo_of) for r in m.results] == [
        ((("output",),), batch_axis, 0),
        ((), None, 2),
        ((), None, 1),
    ]
    for n in [B] if batch_axis is None else [B, 7]:
        x = np.tile(X, (2, 1))[:n]
        y, st = model.apply(model.params, model.state, x)
        np.testing.assert_array_equal(np.asarray(y), x)
        np.testing.assert_array_equal(np.asarray(st[0]), S)


@pytest.mark.parametrize("batch_axis", [None, 0])
def test_convert_keeps_the_batch_axis_and_serves_other_batch_sizes(
    tmp_path: Path, batch_axis: int | None
) -> None:
    out = convert_export(_export(tmp_path / "e", _dense), tmp_path / "c.bundle",
                         LoadOptions(batch_axis=batch_axis))  # fmt: skip
    model = juliabridge.import_lux(out, backend="lax")
    m = model.manifest
    # only the input carries the batch: ps and st are one per model
    assert [a.batch_axis for a in m.arguments] == [batch_axis, None, None]
    assert [r.batch_axis for r in m.results] == [batch_axis, None, batch_axis, None]
    assert (m.batch is not None) == (batch_axis is not None)
    x = np.tile(X, (2, 1))[: 6 if batch_axis is not None else B]
    y = model(x)
    np.testing.assert_allclose(np.asarray(y), x @ W, rtol=1e-5)
    assert tuple(a.julia_shape for a in m.arguments) == ((F, B), (H, F), (F, H))


MESHES = [((4,), ("a",), ("a", None)), ((2, 2), ("a", "b"), ("a", "b")),
          ((4, 1), ("a", "b"), ("b", "a")), ((1, 4), ("a", "b"), ("a", None)),
          ((2, 2), ("a", "b"), (None, "b"))]  # fmt: skip


@pytest.mark.multidevice(devices=4)
@pytest.mark.parametrize(("sizes", "names", "spec"), MESHES)
def test_place_inputs_on_meshes_whose_axes_differ_in_size(
    tmp_path: Path, sizes: tuple[int, ...], names: tuple[str, ...], spec: tuple[Any, ...]
) -> None:
    # Reactant records the mesh and spec in Julia order; the .py holds them reversed.
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    text = lower(lambda x: (x * 2,), x)
    julia_spec = tuple(reversed(spec))
    arg = ArgInfo([1], x, sharding=("m", tuple(reversed(sizes)), tuple(reversed(names)),
                                    julia_spec))  # fmt: skip
    write_export(tmp_path, Export("g", text, [arg]))
    fn = juliabridge.load_reactant_export(tmp_path)
    (placed,) = fn.place_inputs()
    np.testing.assert_array_equal(np.asarray(placed), x)
    mesh = placed.sharding.mesh
    assert dict(mesh.shape) == dict(zip(names, sizes))
    devices = np.array(jax.devices()[: int(np.prod(sizes))]).reshape(sizes)
    assert (
        np.vectorize(lambda d: d.id)(mesh.devices) == np.vectorize(lambda d: d.id)(devices)
    ).all()
    assert tuple(placed.sharding.spec) == spec
    # each device holds the block the spec gives it
    for shard in placed.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), x[shard.index])


def test_a_state_place_returning_another_argument_is_not_that_leaf_unchanged(
    tmp_path: Path,
) -> None:
    # (y, w, x, s): the place of st's leaf returns the parameter w (same shape), which is no
    # reading of the exporter's layout (outputs, st leaves, then the other arguments in order).
    s2 = np.full_like(W, 5.0)
    text = lower(lambda x, w, s: (x @ w, w, x, s), X, W, s2)
    write_export(tmp_path, Export("f", text, [ArgInfo([1], X), ArgInfo([2, 1], W),
                                              ArgInfo([3, 1], s2)]))  # fmt: skip
    with pytest.raises(juliabridge.ManifestError, match="in 0 ways, not exactly one"):
        juliabridge.import_lux(tmp_path)
    # told which result is which, it loads: result 1 is a new value of the st leaf
    model = juliabridge.import_lux(tmp_path, outputs=[0], state_results={1: 2})
    y, st = model.apply(model.params, model.state, X)
    np.testing.assert_allclose(np.asarray(y), X @ W, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(st[0]), W)
