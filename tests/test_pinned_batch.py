"""Pinned: serving N samples with a module traced for batch B (spec §3.6), on every backend.

The module is y = log(x) * w with a (B, 2) weight, so output row n is log(x[n]) * w[n mod B]
when the N samples are cut into traced-size chunks: outputs and gradients below are written
from that formula in numpy. log makes padding visible: a zero-padded row would give
log(0) = -inf, and its zero cotangent times -inf a NaN in the weight's gradient; repeating a
real sample keeps everything finite (batchsize.py's promise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import juliabridge
from juliabridge import CallArgumentError

from .conftest import require_backend
from .pinned_support import Arg, Res, Spec, edit, lower, write

ALL = ("lax", "xla", "enzyme")
B = 4
RNG = np.random.default_rng(21)
W = RNG.uniform(0.5, 2.0, (B, 2)).astype(np.float32)
C = np.array([1.0, 2.0], np.float32)


def logmul(x: Any, w: Any, c: Any) -> Any:
    return lax.log(x) * w, c + c


def _bundle(tmp_path: Path, *, axis: int = 0, **batch: Any) -> Path:
    x = np.ones((B, 2), np.float32)
    w = W
    if axis == 1:
        x, w = x.T.copy(), W.T.copy()
    spec = Spec(
        name="logmul",
        mlir=lower(logmul, x, w, C),
        args=[
            Arg("input", [], x, batch_axis=axis),
            Arg("parameter", ["w"], w),
            Arg("state", ["c"], C),
        ],
        results=[
            Res([["output"]], x.shape, "f32", batch_axis=axis),
            Res([["state", "c"]], (2,), "f32"),
        ],
        batch={"size": B, "samples_independent": True, **batch},
    )
    return write(tmp_path / "b.bundle", spec)


def _model(tmp_path: Path, backend: str, **kw: Any) -> Any:
    require_backend(backend)
    return juliabridge.import_lux(_bundle(tmp_path, **kw), backend=backend)


def reference(x: np.ndarray) -> np.ndarray:
    rows = np.arange(x.shape[0]) % B
    return np.log(x.astype(np.float64)) * W[rows]


def samples(n: int) -> np.ndarray:
    return np.random.default_rng(n).uniform(0.5, 3.0, (n, 2)).astype(np.float32)


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 11])
def test_any_batch_size_gives_the_per_sample_outputs(tmp_path: Path, backend: str, n: int) -> None:
    model = _model(tmp_path, backend)
    x = samples(n)
    y, st = model.apply(model.params, model.state, x)
    assert y.shape == (n, 2)
    np.testing.assert_allclose(y, reference(x), rtol=1e-5)
    # A state result without a batch axis is the same for every chunk.
    np.testing.assert_array_equal(st["c"], 2 * C)
    np.testing.assert_allclose(jax.jit(model.apply)(model.params, model.state, x)[0], y, rtol=1e-6)


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("n", [3, 5])
def test_padding_repeats_samples_so_gradients_stay_finite(
    tmp_path: Path, backend: str, n: int
) -> None:
    model = _model(tmp_path, backend)
    x = samples(n)
    ct = np.random.default_rng(99).standard_normal((n, 2)).astype(np.float32)

    def loss(w: Any) -> Any:
        y, _ = model.apply({"w": w}, model.state, x)
        return jnp.sum(y * ct)

    g = np.asarray(jax.grad(loss)(model.params["w"]))
    want = np.zeros((B, 2))
    for i in range(n):
        want[i % B] += ct[i] * np.log(x[i].astype(np.float64))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    gx = np.asarray(
        jax.grad(lambda x: jnp.sum(model.apply(model.params, model.state, x)[0] * ct))(x)
    )
    np.testing.assert_allclose(gx, ct * W[np.arange(n) % B] / x, rtol=1e-5)


@pytest.mark.parametrize("backend", ALL)
def test_the_recorded_batch_axis_is_the_one_split(tmp_path: Path, backend: str) -> None:
    model = _model(tmp_path, backend, axis=1)
    x = samples(7)
    y, _ = model.apply(model.params, model.state, x.T)
    assert y.shape == (2, 7)
    np.testing.assert_allclose(y, reference(x).T, rtol=1e-5)


def _two_inputs(tmp_path: Path) -> Path:
    x = np.ones((B, 2), np.float32)
    spec = Spec(
        name="two",
        mlir=lower(lambda a, b: a * b, x, x),
        args=[Arg("input", [1], x, batch_axis=0), Arg("input", [2], x, batch_axis=0)],
        results=[Res([["output"]], (B, 2), "f32", batch_axis=0)],
        batch={"size": B, "samples_independent": True},
    )
    return write(tmp_path / "two.bundle", spec)


def test_two_inputs_with_another_batch_size_are_split_together(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_two_inputs(tmp_path))
    a, b = samples(6), samples(6)[::-1].copy()
    np.testing.assert_allclose(model(a, b), a * b, rtol=1e-6)


def test_inputs_that_disagree_on_the_batch_size_are_refused(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_two_inputs(tmp_path))
    with pytest.raises(CallArgumentError, match="disagree"):
        model(samples(5), samples(6))
    with pytest.raises(CallArgumentError, match="disagree"):
        model(samples(4), samples(5))


def test_dependent_samples_refuse_another_batch_size(tmp_path: Path) -> None:
    model = _model(tmp_path, "xla", samples_independent=False)
    y, _ = model.apply(model.params, model.state, samples(B))  # the traced size still works
    np.testing.assert_allclose(y, reference(samples(B)), rtol=1e-5)
    with pytest.raises(CallArgumentError, match="not independent"):
        model.apply(model.params, model.state, samples(5))


def test_no_batch_section_refuses_another_batch_size(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    edit(root, lambda m: m.pop("batch"))
    model = juliabridge.import_lux(root)
    with pytest.raises(CallArgumentError):
        model.apply(model.params, model.state, samples(5))


def test_an_output_without_a_batch_axis_refuses_another_batch_size(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    edit(root, lambda m: m["results"][0].pop("batch_axis"))
    model = juliabridge.import_lux(root)
    np.testing.assert_allclose(model(samples(B)), reference(samples(B)), rtol=1e-5)
    with pytest.raises(CallArgumentError, match="batch_axis"):
        model(samples(5))


def test_other_dims_must_match_whatever_the_batch_size(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    with pytest.raises(CallArgumentError, match="any batch size"):
        model(np.ones((5, 3), np.float32))
    with pytest.raises(CallArgumentError, match="rank"):
        model(np.ones((5, 2, 1), np.float32))
    with pytest.raises(CallArgumentError, match="reversed"):
        model(np.ones((2, 4), np.float32))  # Julia order at the traced batch size


def test_julia_ordered_input_of_another_batch_size_gets_the_hint(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    with pytest.raises(CallArgumentError, match="reversed"):
        model(np.ones((2, 5), np.float32))


def test_messages_when_another_batch_size_is_refused(tmp_path: Path) -> None:
    dependent = juliabridge.import_lux(_bundle(tmp_path / "d", samples_independent=False))
    with pytest.raises(CallArgumentError) as e:
        dependent.apply(dependent.params, dependent.state, samples(5))
    assert str(e.value).endswith(
        "so it cannot serve 5 samples by splitting or padding; call it with exactly 4 samples or "
        "re-export it with the batch size you need"
    )


def test_inconsistent_result_batch_axes_are_reported_after_a_state_result(tmp_path: Path) -> None:
    # The state result (no batch axis) comes first; the output's batch axis has size 2, not B.
    x = np.ones((B, 2), np.float32)
    spec = Spec(
        name="odd",
        mlir=lower(lambda x, c: (c + c, x * x), x, C),
        args=[Arg("input", [], x, batch_axis=0), Arg("state", ["c"], C)],
        results=[
            Res([["state", "c"]], (2,), "f32"),
            Res([["output"]], (B, 2), "f32", batch_axis=1),
        ],
        batch={"size": B, "samples_independent": True},
    )
    model = juliabridge.import_lux(write(tmp_path / "odd.bundle", spec))
    with pytest.raises(CallArgumentError) as e:
        model.apply(model.params, model.state, samples(5))
    assert str(e.value) == (
        "output: batch axis 1 has size 2, not the traced batch size 4; the manifest's batch axes "
        "are inconsistent"
    )


#: An input the same for every sample (e.g. a temperature) beside the batched one.
T = np.array([2.0, -1.0], np.float32)


def _temperature_model(tmp_path: Path, *, unbatched_first: bool = False) -> Any:
    """``x * t`` with x batched on axis 0 and t (2,) unbatched; inputs (x, t) or (t, x)."""

    def scaled(x: Any, t: Any) -> Any:
        return x * lax.broadcast_in_dim(t, x.shape, (1,))

    x = np.ones((B, 2), np.float32)
    args = [Arg("input", [1], x, batch_axis=0), Arg("input", [2], T)]
    if unbatched_first:
        args = [Arg("input", [1], T), Arg("input", [2], x, batch_axis=0)]
    spec = Spec(
        name="temp",
        mlir=lower(
            (lambda t, x: scaled(x, t)) if unbatched_first else scaled, *(a.value for a in args)
        ),
        args=args,
        results=[Res([["output"]], (B, 2), "f32", batch_axis=0)],
        batch={"size": B, "samples_independent": True},
    )
    return juliabridge.import_lux(write(tmp_path / f"t{int(unbatched_first)}.bundle", spec))


def test_an_input_without_a_batch_axis_is_passed_whole_to_every_chunk(tmp_path: Path) -> None:
    t = T
    model = _temperature_model(tmp_path)
    xs = samples(7)
    np.testing.assert_allclose(model(xs, t), xs * t, rtol=1e-6)


def test_a_state_result_without_batch_axis_comes_from_the_first_chunk(tmp_path: Path) -> None:
    # Documented in batchsize.py: such a result is taken from the first traced-size chunk.
    x = np.ones((B, 2), np.float32)
    spec = Spec(
        name="first",
        mlir=lower(lambda x, c: (x + x, c * x[0]), x, C),
        args=[Arg("input", [], x, batch_axis=0), Arg("state", ["c"], C)],
        results=[
            Res([["output"]], (B, 2), "f32", batch_axis=0),
            Res([["state", "c"]], (2,), "f32"),
        ],
        batch={"size": B, "samples_independent": True},
    )
    model = juliabridge.import_lux(write(tmp_path / "f.bundle", spec))
    xs = samples(8)
    y, st = model.apply(model.params, model.state, xs)
    np.testing.assert_allclose(y, 2 * xs, rtol=1e-6)
    np.testing.assert_allclose(st["c"], C * xs[0], rtol=1e-6)  # not xs[4], the second chunk's


def test_the_other_dims_message_spells_the_accepted_type(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    with pytest.raises(CallArgumentError) as e:
        model(np.ones((5, 3), np.float32))
    assert str(e.value) == (
        "logmul: x expects tensor<Nx2xf32> (any batch size N on axis 0; traced with N=4), "
        "got shape [5, 3]."
    )
    with pytest.raises(CallArgumentError) as e:
        model(np.ones((2, 4), np.float32))
    assert str(e.value).endswith(
        "got shape [2, 4]. The dims look reversed: inputs use the MLIR (row-major) order, "
        "Julia's dims reversed; pass x.T or import with layout='julia'."
    )


def test_every_batched_input_is_checked_not_only_the_first(tmp_path: Path) -> None:
    # The first input is fine at N=6; the second has a wrong non-batch dim. Both are batched.
    model = juliabridge.import_lux(_two_inputs(tmp_path))
    with pytest.raises(CallArgumentError, match=r"expects tensor<Nx2xf32>.*got shape \[6, 3\]"):
        model(samples(6), np.ones((6, 3), np.float32))


@pytest.mark.parametrize("n", [8, 12])
def test_an_exact_multiple_of_the_traced_size_needs_no_padding(tmp_path: Path, n: int) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    xs = samples(n)
    np.testing.assert_allclose(model(xs), reference(xs), rtol=1e-5)


def test_an_input_after_a_parameter_is_checked_too(tmp_path: Path) -> None:
    x = np.ones((B, 2), np.float32)
    w = np.full(2, 3.0, np.float32)
    spec = Spec(
        name="pw",
        mlir=lower(lambda w, x: x * lax.broadcast_in_dim(w, x.shape, (1,)), w, x),
        args=[Arg("parameter", ["w"], w), Arg("input", [], x, batch_axis=0)],
        results=[Res([["output"]], (B, 2), "f32", batch_axis=0)],
        batch={"size": B, "samples_independent": True},
    )
    model = juliabridge.import_lux(write(tmp_path / "pw.bundle", spec))
    np.testing.assert_allclose(model(samples(6)), samples(6) * 3.0, rtol=1e-6)
    with pytest.raises(CallArgumentError, match=r"pw: x expects tensor<Nx2xf32>"):
        model(np.ones((6, 3), np.float32))


def test_an_unbatched_input_of_the_wrong_shape_is_not_reported_as_a_batch_problem(
    tmp_path: Path,
) -> None:
    model = _temperature_model(tmp_path)
    with pytest.raises(CallArgumentError) as e:
        model(samples(7), np.ones(3, np.float32))
    assert str(e.value).endswith("x[2] expects tensor<2xf32> (Float32), got tensor<3xf32>.")


def test_no_batch_section_messages_in_each_layout(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    edit(root, lambda m: m.pop("batch"))
    model = juliabridge.import_lux(root)
    with pytest.raises(CallArgumentError) as e:
        model.apply(model.params, model.state, samples(5))
    assert str(e.value) == (
        "logmul: x expects exactly [4, 2] (f32), got shape [5, 2]: the bundle records no batch "
        "size (docs/bundle-format.md §3.6), so it runs only at the shapes it was traced with. "
        "Export again with the batch size you need"
    )
    jl = juliabridge.import_lux(root, layout="julia")
    with pytest.raises(CallArgumentError) as e:
        jl.apply(jl.params, jl.state, samples(5).T)
    assert str(e.value).startswith(
        "logmul: x expects exactly [2, 4] (f32 in Julia's order), got shape [2, 5]: "
    )
    train = _bundle(tmp_path / "t")
    edit(train, lambda m: (m.pop("batch"), m.update(mode="train")))
    tm = juliabridge.import_lux(train)
    with pytest.raises(CallArgumentError, match="a train-mode bundle's samples are not indep"):
        tm.apply(tm.params, tm.state, samples(5))


def test_julia_layout_rank_and_shape_messages(tmp_path: Path) -> None:
    jl = juliabridge.import_lux(_bundle(tmp_path), layout="julia")
    with pytest.raises(CallArgumentError) as e:
        jl(np.ones((1, 2, 5), np.float32))
    assert str(e.value) == (
        "x: expects a rank-2 array of shape (2, N) in Julia's order (layout='julia'): any "
        "batch size N on axis 1 (traced with N=4), got shape [1, 2, 5]"
    )
    with pytest.raises(CallArgumentError) as e:
        jl(np.ones((3, 5), np.float32))  # neither order: no hint
    assert str(e.value).endswith("traced with N=4), got shape [3, 5].")


def test_explicit_mesh_keeps_batch_and_state_sharded_in_process(tmp_path: Path) -> None:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,))
    model = _model(tmp_path, "lax")
    x = samples(6)
    xs = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    cs = jax.device_put(C, NamedSharding(mesh, P("data")))
    with jax.set_mesh(mesh):
        y, st = model.apply(model.params, {"c": cs}, xs)
    np.testing.assert_allclose(np.asarray(y), reference(x), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(st["c"]), C + C)
    assert y.sharding.spec == P("data", None)
    assert st["c"].sharding.spec == P("data")


def test_an_unbatched_input_before_the_batched_one_keeps_the_batch_sharded(
    tmp_path: Path,
) -> None:
    # The results' mesh axis comes from the first input that has a batch axis, wherever
    # the inputs without one stand.
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    t = T
    model = _temperature_model(tmp_path, unbatched_first=True)
    mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,))
    xs = jax.device_put(samples(6), NamedSharding(mesh, P("data", None)))
    with jax.set_mesh(mesh):
        y = model(t, xs)
    np.testing.assert_allclose(np.asarray(y), samples(6) * t, rtol=1e-6)
    assert y.sharding.spec == P("data", None)


def test_mlir_layout_rank_message_keeps_the_module_order(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path))
    with pytest.raises(CallArgumentError) as e:
        model(np.ones((5, 2, 1), np.float32))
    assert str(e.value) == (
        "x: expects a rank-2 array of shape (N, 2): any batch size N on axis 0 (traced with "
        "N=4), got shape [5, 2, 1]"
    )
