"""Bundles of Lux-style models made in Python, imported and checked against numpy references.

The bundles come from juliabridge.examples.luxmodels (pure JAX in MLIR layout, lowered to
StableHLO with Reactant's conventions); the expected values come from
tests/reference/lux_numpy.py, an independent float64 implementation in Julia layout. A layout,
kernel-flip, flatten-order or argument-order bug on either side shows up as a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.examples import luxmodels
from tests.reference import lux_numpy

BACKENDS = ("xla", "enzyme")
MODES = ("eager", "jit")
SHIPPED_LENET = Path(luxmodels.__file__).resolve().parent / "lenet.bundle"

# f32 tolerances. The references compute in float64, so the difference is the module's own
# f32 rounding, which grows with the magnitude of the summands (LeNet sums 150 conv and 256
# dense products of values up to ~10), not with the size of each output element; so atol is
# relative to the output's scale. Measured over 20 seeds: max|diff| <= 1e-6 * max|ref| (LeNet),
# a few ulp elsewhere, i.e. these bounds leave a 10x margin yet catch any semantic slip
# (a wrong flip, flatten order or momentum is off by >= 1e-2).
RTOL = 1e-5
ATOL_PER_UNIT_SCALE = 1e-5


def _require_backend(backend: str) -> None:
    if backend == "enzyme":
        pytest.importorskip(
            "enzyme_ad.jax", reason="backend='enzyme' needs enzyme-ad, which is not importable"
        )


def _assert_close(got: Any, want: np.ndarray, label: str) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape, f"{label}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == np.float32, f"{label}: dtype {got.dtype}, expected float32"
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(
        got, want, rtol=RTOL, atol=ATOL_PER_UNIT_SCALE * scale, err_msg=label
    )


def _tree(spec: luxmodels.LuxModelSpec, role: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in spec.arguments:
        if a.role == role:
            node = out
            for step in a.path[:-1]:
                node = node.setdefault(step, {})
            node[a.path[-1]] = a.value
    return out


def _leaves(tree: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, (*prefix, k))
    else:
        yield prefix, tree


Reference = Callable[[np.ndarray, Any, Any], tuple[np.ndarray, Any]]


@dataclass(frozen=True)
class Case:
    kind: str
    batch: int
    reference: Reference


CASES = {
    "dense_chain": Case("dense_chain", 5, lux_numpy.dense_chain),
    "lenet": Case("lenet", 3, lux_numpy.lenet),
    "batchnorm_test": Case(
        "batchnorm_test", 6, lambda x, p, s: lux_numpy.batchnorm_chain(x, p, s, training=False)
    ),
    "batchnorm_train": Case(
        "batchnorm_train", 6, lambda x, p, s: lux_numpy.batchnorm_chain(x, p, s, training=True)
    ),
}
SEED = 3


@dataclass(frozen=True)
class Built:
    case: Case
    spec: luxmodels.LuxModelSpec
    path: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    # One bundle per kind for the whole module: building lowers and writes HDF5.
    root = tmp_path_factory.mktemp("bundles")
    out = {}
    for kind, case in CASES.items():
        spec = luxmodels.BUILDERS[kind](batch=case.batch, seed=SEED)
        path = luxmodels.build_bundle(kind, root / f"{kind}.bundle", batch=case.batch, seed=SEED)
        out[kind] = Built(case, spec, path)
    return out


def _fresh_inputs(
    spec: luxmodels.LuxModelSpec, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, Any], dict[str, Any]]:
    # New values (not the bundled ones) so a model that ignored its arguments and returned
    # stored results would fail; state stays positive where it is a variance.
    x = rng.standard_normal(spec.arguments[0].value.shape).astype(np.float32)
    ps = {
        k: {n: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for n, v in d.items()}
        for k, d in _tree(spec, "parameter").items()
    }
    st = {
        k: {n: (v * rng.uniform(0.8, 1.2, v.shape)).astype(np.float32) for n, v in d.items()}
        for k, d in _tree(spec, "state").items()
    }
    return x, ps, st


# --- the layer conventions themselves, on tiny cases ----------------------------------------


def test_true_convolution_flips_the_kernel() -> None:
    # A one-hot Julia kernel at (p, q) = (0, 0): a true convolution reads x[i+kW-1, j+kH-1],
    # a cross-correlation would read x[i, j]. Anchors both implementations to Lux's Conv.
    kw, kh = 3, 2
    x_jl = np.arange(5 * 4, dtype=np.float64).reshape(5, 4, 1, 1, order="F")
    w_jl = np.zeros((kw, kh, 1, 1))
    w_jl[0, 0, 0, 0] = 1.0
    want_jl = x_jl[kw - 1 :, kh - 1 :]
    np.testing.assert_array_equal(lux_numpy.conv_jl(x_jl, w_jl, np.zeros(1)), want_jl)
    got = luxmodels.conv2d(
        jnp.asarray(lux_numpy.to_mlir(x_jl)),
        jnp.asarray(lux_numpy.to_mlir(w_jl)),
        jnp.zeros(1, jnp.float32),
    )
    np.testing.assert_array_equal(np.asarray(got), lux_numpy.to_mlir(want_jl))


def test_conv_pool_flatten_agree_with_julia_layout_reference() -> None:
    # Non-square everything (kernel 3x2, image 7x6, window 2x3, 2 => 3 channels) so that a
    # swapped H/W or a transposed kernel cannot pass by symmetry.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 6, 7)).astype(np.float32)  # MLIR (B, C, H, W)
    w = rng.standard_normal((3, 2, 2, 3)).astype(np.float32)  # MLIR (Cout, Cin, kH, kW)
    b = rng.standard_normal(3).astype(np.float32)
    got = luxmodels.flatten(
        luxmodels.maxpool2d(
            luxmodels.conv2d(jnp.asarray(x), jnp.asarray(w), jnp.asarray(b)), (2, 3)
        )
    )
    ref = lux_numpy.flatten_jl(
        lux_numpy.maxpool_jl(
            lux_numpy.conv_jl(lux_numpy.to_julia(x), lux_numpy.to_julia(w), b.astype(np.float64)),
            (2, 3),
        )
    )
    _assert_close(got, lux_numpy.to_mlir(ref), "conv -> maxpool -> flatten")


def test_flatten_is_julia_column_major() -> None:
    # Julia: x = reshape(0:23, 2, 3, 4, 1) (W, H, C, B); vec(x[:, :, :, 1]) == 0:23.
    x_jl = np.arange(24, dtype=np.float32).reshape(2, 3, 4, 1, order="F")
    flat_jl = lux_numpy.flatten_jl(x_jl)
    np.testing.assert_array_equal(flat_jl[:, 0], np.arange(24))
    got = np.asarray(luxmodels.flatten(jnp.asarray(lux_numpy.to_mlir(x_jl))))
    np.testing.assert_array_equal(got, lux_numpy.to_mlir(flat_jl))


def test_batchnorm_train_uses_unbiased_variance_for_running_var() -> None:
    # Batch [0, 2]: mean 1, biased var 1, unbiased var 2, so with momentum 0.1 the running
    # stats (0, 1) become (0.1, 0.9*1 + 0.1*2 = 1.1); normalised outputs are -+1/sqrt(1+eps).
    x = np.array([[0.0], [2.0]], dtype=np.float32)  # MLIR (B=2, C=1)
    ps = {"scale": np.ones(1, np.float32), "bias": np.zeros(1, np.float32)}
    st = {"running_mean": np.zeros(1, np.float32), "running_var": np.ones(1, np.float32)}
    y, new = luxmodels.batchnorm_train(jnp.asarray(x), ps, st)
    y_ref, mean_ref, var_ref = lux_numpy.batchnorm_jl(
        lux_numpy.to_julia(x),
        *(lux_numpy.to_julia(v) for v in (*ps.values(), *st.values())),
        training=True,
    )
    np.testing.assert_allclose(mean_ref, [0.1], rtol=1e-12)
    np.testing.assert_allclose(var_ref, [1.1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(new["running_mean"]), [0.1], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new["running_var"]), [1.1], rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(y)[:, 0], [-1 / np.sqrt(1 + 1e-5), 1 / np.sqrt(1 + 1e-5)], rtol=1e-6
    )
    np.testing.assert_allclose(y_ref.T, np.asarray(y), rtol=1e-6)


# --- descriptions: Reactant's argument/result order ---------------------------------------


def test_argument_and_result_order_follow_reactant() -> None:
    spec = luxmodels.batchnorm_model(mode="test", batch=4, seed=0)
    assert [(a.role, a.path) for a in spec.arguments] == [
        ("input", []),
        ("parameter", ["layer_1", "weight"]),
        ("parameter", ["layer_1", "bias"]),
        ("parameter", ["layer_2", "scale"]),
        ("parameter", ["layer_2", "bias"]),
        ("state", ["layer_2", "running_mean"]),
        ("state", ["layer_2", "running_var"]),
    ]
    assert spec.result_paths == [[["output"]]]
    assert spec.aliases == [
        (["state", "layer_2", "running_mean"], 5),
        (["state", "layer_2", "running_var"], 6),
    ]
    train = luxmodels.batchnorm_model(mode="train", batch=4, seed=0)
    assert train.result_paths == [
        [["output"]],
        [["state", "layer_2", "running_mean"]],
        [["state", "layer_2", "running_var"]],
    ]
    assert train.aliases == []
    assert "func.func public @main(%arg0: tensor<4x3xf32>, %arg1: tensor<3x5xf32>" in (
        train.mlir_text
    )


def test_lenet_parameter_shapes_are_mlir_layout() -> None:
    spec = luxmodels.lenet(batch=2, seed=0)
    shapes = {tuple(a.path): a.value.shape for a in spec.arguments}
    assert shapes == {
        (): (2, 1, 28, 28),
        ("layer_1", "weight"): (6, 1, 5, 5),  # Julia (5, 5, 1, 6)
        ("layer_1", "bias"): (6,),
        ("layer_3", "weight"): (16, 6, 5, 5),
        ("layer_3", "bias"): (16,),
        ("layer_6", "weight"): (256, 128),  # Julia (128, 256)
        ("layer_6", "bias"): (128,),
        ("layer_7", "weight"): (128, 10),
        ("layer_7", "bias"): (10,),
    }


# --- bundles through import_lux ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_apply_matches_reference(
    built: dict[str, Built], kind: str, backend: str, mode: str
) -> None:
    _require_backend(backend)
    b = built[kind]
    model = juliabridge.import_lux(b.path, backend=backend)
    x, ps, st = _fresh_inputs(b.spec, np.random.default_rng(7))
    apply = jax.jit(model.apply) if mode == "jit" else model.apply
    y, new_state = apply(ps, st, x)
    y_ref, st_ref = b.case.reference(x, ps, st)
    _assert_close(y, y_ref, f"{kind}/{backend}/{mode}: output")
    got_state = dict(_leaves(new_state))
    want_state = dict(_leaves(st_ref))
    assert got_state.keys() == want_state.keys(), f"{kind}: state paths differ"
    for path, want in want_state.items():
        _assert_close(got_state[path], want, f"{kind}/{backend}/{mode}: state {path}")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_params_and_state_have_lux_names(built: dict[str, Built], kind: str) -> None:
    b = built[kind]
    model = juliabridge.import_lux(b.path, backend="xla")
    for role, tree in (("parameter", model.params), ("state", model.state)):
        got = {p: np.asarray(v) for p, v in _leaves(tree)}
        want = {tuple(a.path): a.value for a in b.spec.arguments if a.role == role}
        assert got.keys() == want.keys(), f"{kind} {role}: {sorted(got)} != {sorted(want)}"
        for path, value in want.items():
            np.testing.assert_array_equal(got[path], value, err_msg=f"{kind} {role} {path}")
    first = "layer_1"
    assert model.params[first]["weight"].shape == b.spec.arguments[1].value.shape


def test_dense_weight_is_in_out_and_lenet_conv_is_oihw(built: dict[str, Built]) -> None:
    dense = juliabridge.import_lux(built["dense_chain"].path, backend="xla")
    assert dense.params["layer_1"]["weight"].shape == (4, 16)  # Julia Dense(4 => 16): (16, 4)
    lenet = juliabridge.import_lux(built["lenet"].path, backend="xla")
    assert lenet.params["layer_1"]["weight"].shape == (6, 1, 5, 5)
    assert lenet.params["layer_6"]["weight"].shape == (256, 128)


@pytest.mark.parametrize("backend", BACKENDS)
def test_test_mode_state_comes_back_unchanged(built: dict[str, Built], backend: str) -> None:
    _require_backend(backend)
    b = built["batchnorm_test"]
    model = juliabridge.import_lux(b.path, backend=backend)
    manifest = model.manifest
    assert manifest.mode == "test"
    assert len(manifest.results) == 1
    assert [(list(a.path), a.argument) for a in manifest.aliases] == [
        (["state", "layer_2", "running_mean"], 5),
        (["state", "layer_2", "running_var"], 6),
    ]
    # The caller's state (not the bundled one) must come back, bit for bit.
    x, ps, st = _fresh_inputs(b.spec, np.random.default_rng(1))
    for apply in (model.apply, jax.jit(model.apply)):
        _, new_state = apply(ps, st, x)
        for name in ("running_mean", "running_var"):
            np.testing.assert_array_equal(
                np.asarray(new_state["layer_2"][name]), st["layer_2"][name]
            )


def test_train_mode_updates_state_and_says_samples_dependent(built: dict[str, Built]) -> None:
    b = built["batchnorm_train"]
    model = juliabridge.import_lux(b.path, backend="xla")
    m = model.manifest
    assert m.mode == "train"
    assert list(m.aliases) == []
    assert [list(map(list, r.paths)) for r in m.results] == [
        [["output"]],
        [["state", "layer_2", "running_mean"]],
        [["state", "layer_2", "running_var"]],
    ]
    assert m.batch is not None and m.batch.samples_independent is False
    _, new_state = model.apply(model.params, model.state, b.spec.arguments[0].value)
    assert not np.allclose(
        np.asarray(new_state["layer_2"]["running_var"]),
        np.asarray(model.state["layer_2"]["running_var"]),
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_verify_ok(built: dict[str, Built], kind: str, backend: str) -> None:
    _require_backend(backend)
    report = juliabridge.verify(built[kind].path, backend=backend)
    assert report.ok, f"{kind}/{backend}: max abs {report.max_abs}, max rel {report.max_rel}"


@pytest.mark.parametrize("kind", sorted(CASES))
def test_bundle_says_it_was_made_without_julia(built: dict[str, Built], kind: str) -> None:
    producer = juliabridge.import_lux(built[kind].path, backend="xla").manifest.producer
    assert producer.tool == "juliabridge-python"
    assert producer.made_with_julia is False
    assert producer.julia is None and producer.lux is None and producer.reactant is None


# --- the shipped example ----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_shipped_lenet_example_loads_and_verifies(backend: str) -> None:
    _require_backend(backend)
    assert SHIPPED_LENET.is_dir(), (
        f"{SHIPPED_LENET} is missing; regenerate it with tools/make_example_bundles.py"
    )
    report = juliabridge.verify(SHIPPED_LENET, backend=backend)
    assert report.ok, f"max abs {report.max_abs}, max rel {report.max_rel}"
    model = juliabridge.import_lux(SHIPPED_LENET, backend=backend)
    producer = model.manifest.producer
    assert producer.tool == "juliabridge-python" and producer.made_with_julia is False
    x = np.random.default_rng(5).standard_normal((4, 1, 28, 28)).astype(np.float32)
    params = jax.tree.map(np.asarray, model.params)
    y_ref, _ = lux_numpy.lenet(x, params, {})
    _assert_close(model(x), y_ref, f"shipped lenet/{backend}")


def test_shipped_lenet_matches_its_generator() -> None:
    # The committed bundle must be what tools/make_example_bundles.py produces today.
    spec = luxmodels.lenet(batch=4, seed=0)
    assert (SHIPPED_LENET / "model.mlir").read_text(encoding="utf-8") == spec.mlir_text
    model = juliabridge.import_lux(SHIPPED_LENET, backend="xla")
    for a in spec.arguments[1:]:
        layer, name = a.path
        np.testing.assert_array_equal(np.asarray(model.params[layer][name]), a.value)


def test_the_writer_records_the_tolerances_given_and_when_it_wrote(tmp_path: Path) -> None:
    import datetime as dt
    import json

    from .bundle_factory import make_dense_bn

    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    root = make_dense_bn(tmp_path / "b.bundle", rtol=0.25, atol=0.5)
    after = dt.datetime.now(dt.UTC)
    m = json.loads((root / "manifest.json").read_text())
    assert (m["examples"]["rtol"], m["examples"]["atol"]) == (0.25, 0.5)
    created = dt.datetime.strptime(m["producer"]["created"], "%Y-%m-%dT%H:%M:%SZ")
    assert before <= created.replace(tzinfo=dt.UTC) <= after


def test_a_value_that_does_not_match_main_is_refused_naming_the_argument(tmp_path: Path) -> None:
    from juliabridge import SignatureMismatchError
    from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
    from juliabridge.bundle.write.writer import write_bundle

    text = (
        jax.jit(lambda x, w: x @ w)
        .lower(np.zeros((1, 2), np.float32), np.zeros((2, 3), np.float32))
        .as_text()
    )
    with pytest.raises(SignatureMismatchError) as e:
        write_bundle(
            tmp_path / "b.bundle",
            BundleDescription(
                name="m",
                mlir_text=text,
                arguments=[
                    ArgumentSpec("input", [], np.zeros((1, 2), np.float32)),
                    ArgumentSpec("parameter", ["layer", "w"], np.zeros((3, 2), np.float32)),
                ],
                result_paths=[[["output"]]],
            ),
        )
    assert str(e.value).startswith("argument 1 ['layer', 'w']: value is ")
    assert not (tmp_path / "b.bundle").exists()
