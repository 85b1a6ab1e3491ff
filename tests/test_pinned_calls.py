"""Pinned: calling an imported module — argument checks on every path in, layouts, the x64 guard.

What a caller meets: a wrong shape, dtype or count is a CallArgumentError before anything runs
(eagerly, on the fast eager path, and under jit), 64-bit types with x64 off are an
X64DisabledError, and layout="julia" gives every array, aliased state included, in Julia's
dimension order (the MLIR shape reversed, spec §2).
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
from juliabridge import CallArgumentError, X64DisabledError

from .conftest import require_backend
from .pinned_support import Arg, Res, Spec, lower, write

ALL = ("lax", "xla", "enzyme")

X = np.arange(6, dtype=np.float32).reshape(2, 3)
K = np.array([[1, 2, 3], [4, 5, 6]], np.int32)


def scaled(x: Any, k: Any) -> Any:
    return (x * k.astype(x.dtype),)


MODULE = lower(scaled, X, K)


def _fn(backend: str) -> Any:
    require_backend(backend)
    return juliabridge.load_mlir(MODULE, backend=backend)


@pytest.mark.parametrize("backend", ALL)
def test_right_arguments_compute(backend: str) -> None:
    fn = _fn(backend)
    np.testing.assert_array_equal(fn(X, K)[0], X * K)
    np.testing.assert_array_equal(jax.jit(fn)(X, K)[0], X * K)
    np.testing.assert_array_equal(fn(jnp.asarray(X), jnp.asarray(K))[0], X * K)
    # Python lists take the expected dtype.
    np.testing.assert_array_equal(fn(X.tolist(), K.tolist())[0], X * K)


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("how", ["numpy", "jax", "jit"])
def test_a_wrong_shape_is_refused(backend: str, how: str) -> None:
    fn = _fn(backend)
    bad = np.zeros((3, 2), np.float32)
    call = jax.jit(fn) if how == "jit" else fn
    arg = jnp.asarray(bad) if how == "jax" else bad
    with pytest.raises(CallArgumentError, match=r"3x2") as e:
        call(arg, K)
    assert "reversed" in str(e.value)  # (3, 2) is (2, 3) reversed: the message says so
    with pytest.raises(CallArgumentError):
        call(np.zeros((2, 4), np.float32), K)
    with pytest.raises(CallArgumentError):
        call(np.zeros((2, 3, 1), np.float32), K)


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.float16])
def test_a_wrong_dtype_is_refused_on_the_fast_eager_path(backend: str, dtype: Any) -> None:
    # Concrete arrays of the right shape take the fast eager path; the dtype is still checked.
    fn = _fn(backend)
    with pytest.raises(CallArgumentError, match="astype"):
        fn(X.astype(dtype), K)
    with pytest.raises(CallArgumentError):
        fn(jnp.asarray(X.astype(np.float16)), K)
    with pytest.raises(CallArgumentError):
        fn(X, K.astype(np.int64 if dtype == np.float64 else np.int8))


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_the_mismatch_message_shows_what_was_passed(backend: str) -> None:
    fn = _fn(backend)
    with pytest.raises(CallArgumentError) as e:
        fn(X.astype(np.float64), K)
    assert str(e.value) == (
        "<mlir text>: argument 0 expects tensor<2x3xf32> (Float32), got tensor<2x3xf64>. "
        "Cast it first, e.g. x.astype(np.float32)."
    )
    with pytest.raises(CallArgumentError) as e:
        fn(np.array([["a", "b", "c"], ["d", "e", "f"]]), K)
    assert "got tensor<2x3x<U1>" in str(e.value)


@pytest.mark.parametrize("backend", ALL)
def test_a_wrong_count_is_refused(backend: str) -> None:
    fn = _fn(backend)
    with pytest.raises(CallArgumentError, match="takes 2"):
        fn(X)
    with pytest.raises(CallArgumentError, match="got 3"):
        fn(X, K, K)
    with pytest.raises(CallArgumentError):
        fn(X, "not an array")


# --- x64 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64, np.complex128])
@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_every_64_bit_type_needs_x64(dtype: Any, backend: str) -> None:
    with jax.enable_x64(True):
        a = np.ones(2, dtype)
        text = lower(lambda a: (a * a,), a)
        fn = juliabridge.load_mlir(text, backend=backend)
        np.testing.assert_array_equal(fn(a)[0], a * a)
    with jax.enable_x64(False), pytest.raises(X64DisabledError, match="jax_enable_x64"):
        fn(a)


def test_32_bit_types_do_not_need_x64() -> None:
    with jax.enable_x64(False):
        a = np.ones(2, np.uint32)
        fn = juliabridge.load_mlir(lower(lambda a: (a * a,), a), backend="lax")
        np.testing.assert_array_equal(fn(a)[0], a)


def test_a_bundle_with_ui64_weights_needs_x64(tmp_path: Path) -> None:
    with jax.enable_x64(True):
        x = np.ones(2, np.float32)
        k = np.array([3, 4], np.uint64)
        spec = Spec(
            name="u",
            mlir=lower(lambda x, k: x * k.astype(np.float32), x, k),
            args=[Arg("input", [], x), Arg("parameter", ["k"], k)],
            results=[Res([["output"]], (2,), "f32")],
        )
        root = write(tmp_path / "u.bundle", spec)
        model = juliabridge.import_lux(root)
        np.testing.assert_array_equal(model(x), [3.0, 4.0])
    with jax.enable_x64(False), pytest.raises(X64DisabledError, match="ui64"):
        juliabridge.import_lux(root)


# --- layouts ------------------------------------------------------------------------------------


def _layout_bundle(tmp_path: Path) -> Path:
    """y = x * s + w with x (4, 2, 3) batch axis 0, w (2, 3) a parameter, s (2, 3) state that
    comes back unchanged as an alias, and c (2, 3) state the module returns updated (c + 1)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    s = rng.standard_normal((2, 3)).astype(np.float32)
    c = np.arange(6, dtype=np.float32).reshape(2, 3)

    def fn(x: Any, w: Any, s: Any, c: Any) -> Any:
        b = lax.broadcast_in_dim
        return x * b(s, x.shape, (1, 2)) + b(w, x.shape, (1, 2)), c + np.float32(1)

    spec = Spec(
        name="layout",
        mlir=lower(fn, x, w, s, c),
        args=[
            Arg("input", [], x, batch_axis=0),
            Arg("parameter", ["w"], w),
            Arg("state", ["s"], s),
            Arg("state", ["c"], c),
        ],
        results=[
            Res([["output"]], (4, 2, 3), "f32", batch_axis=0),
            Res([["state", "c"]], (2, 3), "f32"),
        ],
        aliases=[(["state", "s"], 2)],
        batch={"size": 4, "samples_independent": True},
    )
    return write(tmp_path / "l.bundle", spec)


def test_julia_layout_gives_every_array_in_julia_order(tmp_path: Path) -> None:
    root = _layout_bundle(tmp_path)
    mlir = juliabridge.import_lux(root)
    jl = juliabridge.import_lux(root, layout="julia")
    assert jl.params["w"].shape == (3, 2)
    np.testing.assert_array_equal(jl.params["w"], np.asarray(mlir.params["w"]).T)
    np.testing.assert_array_equal(jl.state["s"], np.asarray(mlir.state["s"]).T)
    x = np.random.default_rng(5).standard_normal((4, 2, 3)).astype(np.float32)
    y, st = mlir.apply(mlir.params, mlir.state, x)
    yj, stj = jl.apply(jl.params, jl.state, x.T)
    assert yj.shape == (3, 2, 4)
    np.testing.assert_allclose(yj, np.asarray(y).T, rtol=1e-6)
    # The aliased state comes back in Julia order too, equal to what went in.
    assert stj["s"].shape == (3, 2)
    np.testing.assert_array_equal(stj["s"], jl.state["s"])
    np.testing.assert_array_equal(stj["c"], np.asarray(st["c"]).T)
    np.testing.assert_array_equal(stj["c"], np.arange(6).reshape(2, 3).T + 1)
    # The reference, from the numbers in the file.
    w, s = np.asarray(mlir.params["w"]), np.asarray(mlir.state["s"])
    np.testing.assert_allclose(y, x * s + w, rtol=1e-6)
    np.testing.assert_allclose(jl(x.T), (x * s + w).T, rtol=1e-6)


def test_julia_layout_serves_another_batch_size(tmp_path: Path) -> None:
    root = _layout_bundle(tmp_path)
    jl = juliabridge.import_lux(root, layout="julia")
    mlir = juliabridge.import_lux(root)
    x = np.random.default_rng(6).standard_normal((7, 2, 3)).astype(np.float32)
    w, s = np.asarray(mlir.params["w"]), np.asarray(mlir.state["s"])
    np.testing.assert_allclose(jl(x.T), (x * s + w).T, rtol=1e-6)


def test_julia_ordered_input_to_an_mlir_model_is_refused_with_a_hint(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_layout_bundle(tmp_path))
    x = np.zeros((3, 2, 4), np.float32)
    with pytest.raises(CallArgumentError, match="reversed"):
        model(x)
    with pytest.raises(CallArgumentError, match=r"float64|f64"):
        model(np.zeros((4, 2, 3)))


def test_mlir_ordered_input_to_a_julia_model_is_advised_in_julia_terms(tmp_path: Path) -> None:
    # Issue 29 item 6: the message named the module's internal shape and advised
    # layout='julia', the option already in use.
    jl = juliabridge.import_lux(_layout_bundle(tmp_path), layout="julia")
    with pytest.raises(CallArgumentError) as e:
        jl(np.zeros((4, 2, 3), np.float32))
    assert str(e.value) == (
        "layout: x expects an array of shape (3, 2, N) in Julia's order (f32) (any batch size N "
        "on axis 2; traced with N=4), got shape [4, 2, 3]. The dims look like the MLIR "
        "(row-major) order, but this model was imported with layout='julia', which takes "
        "Julia's order: pass x.T, or import with layout='mlir'."
    )
    with pytest.raises(CallArgumentError) as e:
        jl(np.zeros((3, 5, 4), np.float32))
    assert "got shape [3, 5, 4]." in str(e.value) and "layout='mlir'" not in str(e.value)


def test_a_julia_model_without_a_batch_axis_reports_shapes_in_julia_order(tmp_path: Path) -> None:
    x = np.zeros((2, 3), np.float32)
    spec = Spec(
        name="nobatch",
        mlir=lower(lambda x: (x + np.float32(1),), x),
        args=[Arg("input", [], x)],
        results=[Res([["output"]], (2, 3), "f32")],
    )
    jl = juliabridge.import_lux(write(tmp_path / "n.bundle", spec), layout="julia")
    np.testing.assert_array_equal(jl(x.T), (x + 1).T)
    with pytest.raises(CallArgumentError) as e:
        jl(x)
    assert str(e.value) == (
        "nobatch: x expects an array of shape (3, 2) in Julia's order (f32), got shape [2, 3]. "
        "The dims look like the MLIR (row-major) order, but this model was imported with "
        "layout='julia', which takes Julia's order: pass x.T, or import with layout='mlir'."
    )


def test_a_params_tree_missing_a_leaf_names_the_path(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_layout_bundle(tmp_path))
    x = np.zeros((4, 2, 3), np.float32)
    with pytest.raises(CallArgumentError, match=r"params\.w"):
        model.apply({}, model.state, x)
    with pytest.raises(CallArgumentError, match=r"state\.c"):
        model.apply(model.params, {"s": model.state["s"]}, x)


# --- what the objects say about themselves -------------------------------------------------------


def test_reprs_name_the_signature_and_backend(tmp_path: Path) -> None:
    fn = juliabridge.load_mlir(MODULE, backend="lax")
    assert repr(fn) == (
        "<ImportedFunction <mlir text> (tensor<2x3xf32>, tensor<2x3xi32>) -> (tensor<2x3xf32>) [lax]>"
    )
    five = np.ones(2, np.float32)
    wide = juliabridge.load_mlir(
        lower(lambda a, b, c, d, e: (a + b + c + d + e, a), *[five] * 5), backend="xla"
    )
    assert repr(wide) == (
        "<ImportedFunction <mlir text> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, "
        "tensor<2xf32>, ...) -> (tensor<2xf32>, tensor<2xf32>) [xla]>"
    )
    four = juliabridge.load_mlir(
        lower(lambda a, b, c, d: (a, b, c, d, a + d), *[five] * 4), backend="xla"
    )
    t = "tensor<2xf32>"
    assert repr(four) == (
        f"<ImportedFunction <mlir text> ({t}, {t}, {t}, {t}) -> ({t}, {t}, {t}, {t}) [xla]>"
    )
    model = juliabridge.import_lux(_layout_bundle(tmp_path), backend="xla")
    assert repr(model) == "<LuxModel 'layout' mode=test params=1 arrays backend=xla>"
    assert model.backend == "xla" and fn.backend_name == "lax"
    assert fn.in_specs[1].shape == (2, 3) and fn.out_specs[0].dtype == "f32"


def _named_input_bundle(tmp_path: Path) -> Path:
    """A model whose input is a NamedTuple (x.img, x.mask): input paths ["img"], ["mask"]."""
    img = np.ones((2, 3), np.float32)
    mask = np.zeros((2, 3), np.float32)
    spec = Spec(
        name="named",
        mlir=lower(lambda a, b: a * b, img, mask),
        args=[Arg("input", ["img"], img), Arg("input", ["mask"], mask)],
        results=[Res([["output"]], (2, 3), "f32")],
    )
    return write(tmp_path / "n.bundle", spec)


def test_named_inputs_are_looked_up_by_name(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_named_input_bundle(tmp_path))
    img = np.full((2, 3), 3.0, np.float32)
    mask = np.eye(2, 3, dtype=np.float32)
    np.testing.assert_array_equal(model({"img": img, "mask": mask}), img * mask)
    with pytest.raises(CallArgumentError) as e:
        model({"img": img})
    assert str(e.value) == (
        "x.mask: missing from the x you passed (no x.mask); pass one dict keyed like Julia's x "
        "(a Dict or NamedTuple), {'img': ..., 'mask': ...}: model(x) or "
        "model.apply(params, state, x)"
    )


def test_model_call_messages(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_layout_bundle(tmp_path))
    with pytest.raises(CallArgumentError) as e:
        model(np.zeros((4, 2, 3)))
    assert str(e.value) == (
        "layout: x expects f32 (Float32), got f64 (float64). Cast it first, e.g. "
        "x.astype(np.float32)."
    )
    with pytest.raises(CallArgumentError) as e:
        model([[[0.0] * 3] * 2] * 4)
    assert str(e.value) == (
        "layout: x expects an array of f32 (Float32), got a list; pass "
        "np.asarray(x, dtype=np.float32)"
    )
    with pytest.raises(CallArgumentError) as e:
        model(np.zeros((4, 2, 3), np.float32), np.zeros(1, np.float32))
    assert str(e.value) == (
        "layout: the model takes one array: model(x) or model.apply(params, state, x); got 2 "
        "argument(s)"
    )


# --- messages of load_mlir's argument checks (what a caller reads) ------------------------------


def _module(args: str, result: str, ret: str = "%a0") -> str:
    return f"module {{\n  func.func @main({args}) -> {result} {{\n    return {ret} : {result}\n  }}\n}}"


def test_a_wrong_count_lists_up_to_eight_labels_without_an_ellipsis() -> None:
    t = "tensor<2xf32>"
    fn = juliabridge.load_mlir(_module(", ".join(f"%a{i}: {t}" for i in range(8)), t))
    x = np.ones(2, np.float32)
    with pytest.raises(CallArgumentError) as e:
        fn(*[x] * 7)
    labels = ", ".join(f"argument {i}" for i in range(8))
    assert str(e.value) == f"<mlir text> takes 8 array(s) ({labels}) but got 7"
    with pytest.raises(CallArgumentError) as e:
        fn(object(), *[x] * 7)
    assert str(e.value).startswith(
        "<mlir text>: argument 0 expects tensor<2xf32>, got a object that is not convertible "
        "to an array ("
    )


def test_julia_ordered_arguments_get_the_reversed_dims_hint() -> None:
    t = "tensor<2x3xf32>"
    fn = juliabridge.load_mlir(_module(f"%a0: {t}", t))
    with pytest.raises(CallArgumentError) as e:
        fn(np.ones((3, 2), np.float32))
    assert str(e.value) == (
        "<mlir text>: argument 0 expects tensor<2x3xf32> (Float32), got tensor<3x2xf32>. The "
        "dims look reversed: arguments use the MLIR (row-major) order, i.e. Julia's dims "
        "reversed; pass x.T or use layout='julia' where offered."
    )


def test_the_x64_message_names_the_64_bit_boundary_values() -> None:
    t = "tensor<2xf64>"
    with jax.enable_x64(True):
        fn = juliabridge.load_mlir(_module(f"%a0: {t}", t))
    with jax.enable_x64(False), pytest.raises(X64DisabledError) as e:
        fn(np.ones(2))
    assert str(e.value) == (
        "<mlir text> uses 64-bit element types (argument 0: f64, result 0: f64) but "
        "jax_enable_x64 is off, so JAX would silently truncate them to 32 bits. Enable it "
        'before calling: jax.config.update("jax_enable_x64", True) or JAX_ENABLE_X64=1.'
    )


# --- import_lux and LuxModel.apply: the trees and choices a bundle's manifest describes ---------


def _pair_bundle(tmp_path: Path, *, x64: bool = False) -> Path:
    """Two positional inputs (x[1], x[2]) and a tuple output (output[1], output[2])."""
    dt, tag = (np.float64, "f64") if x64 else (np.float32, "f32")
    with jax.enable_x64(x64):
        a, b = np.ones(3, dt), np.full(3, 2.0, dt)
        spec = Spec(
            name="pair",
            mlir=lower(lambda a, b: (a + b, a * b), a, b),
            args=[Arg("input", [1], a), Arg("input", [2], b)],
            results=[Res([["output", 1]], (3,), tag), Res([["output", 2]], (3,), tag)],
            empty={"params": [["layer_3"]], "state": [["layer_3"]]},
        )
        return write(tmp_path / "pair.bundle", spec)


def test_a_tuple_input_counts_its_parts_by_name(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_pair_bundle(tmp_path))
    a = np.ones(3, np.float32)
    with pytest.raises(CallArgumentError) as e:
        model(a)
    # Julia's tuple x = (a, b) is called with its elements as separate arguments.
    assert str(e.value) == (
        "pair: the model takes 2 arrays, one per element of Julia's tuple x, as separate "
        "arguments: model(x[1], x[2]) or model.apply(params, state, x[1], x[2]), not one "
        "tuple; got 1 argument(s)"
    )
    with pytest.raises(CallArgumentError, match=r"got 1 argument\(s\) \(one tuple: unpack it"):
        model((a, 3 * a))
    y1, y2 = model(a, 3 * a)
    np.testing.assert_array_equal(y1, 4 * a)
    np.testing.assert_array_equal(y2, 3 * a)


def test_empty_containers_of_the_manifest_are_kept_in_params_and_state(tmp_path: Path) -> None:
    # spec §3.10: ps.layer_3 == NamedTuple() (e.g. a pooling layer) is an empty dict there
    model = juliabridge.import_lux(_pair_bundle(tmp_path))
    assert model.params == {"layer_3": {}}
    assert model.state == {"layer_3": {}}
    _, new_state = model.apply(
        model.params, model.state, np.ones(3, np.float32), np.ones(3, np.float32)
    )
    assert new_state == {"layer_3": {}}


def test_the_x64_message_names_results_by_their_output_paths(tmp_path: Path) -> None:
    # The same path notation as the arguments' labels (format_path): integer steps in brackets.
    root = _pair_bundle(tmp_path, x64=True)
    with jax.enable_x64(True):
        model = juliabridge.import_lux(root)
    with jax.enable_x64(False), pytest.raises(X64DisabledError) as e:
        model.fn(np.ones(3), np.ones(3))
    assert "(x[1]: f64, x[2]: f64, output[1]: f64, output[2]: f64)" in str(e.value)


@pytest.mark.parametrize(("backend", "loops"), [("lax", False), ("xla", True)])
def test_another_batch_size_runs_batched_on_lax_and_chunk_by_chunk_otherwise(
    tmp_path: Path, backend: str, loops: bool
) -> None:
    # lax's module is made of JAX primitives, so its chunks run under vmap; a foreign call
    # (xla) has no batching rule of its own and its chunks run one after another (lax.map).
    from .pinned_support import dense_spec

    spec, reference = dense_spec(batch=4)
    model = juliabridge.import_lux(write(tmp_path / "d.bundle", spec), backend=backend)
    x = np.arange(12, dtype=np.float32).reshape(6, 2)  # 6 samples: two chunks of the traced 4
    jaxpr = str(jax.make_jaxpr(model.apply)(model.params, model.state, x))
    assert ("scan" in jaxpr or "while" in jaxpr) is loops
    y, _ = model.apply(model.params, model.state, x)
    w, b = (model.params["layer_1"][k] for k in ("weight", "bias"))
    np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-5, atol=1e-6)


def test_a_trusted_bundle_reaches_the_backend_with_its_trust(tmp_path: Path) -> None:
    # A custom call outside the allowlist: refused at load, unless trust=True, which must also
    # reach the backend (xla checks the kernels it will call again, and would refuse it there).
    from juliabridge import ExecutionError, UnsupportedModuleError

    x = np.ones(2, np.float32)
    spec = Spec(
        name="kernel",
        mlir="""module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.custom_call @jb_no_such_target(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}""",
        args=[Arg("input", [], x)],
        results=[Res([["output"]], (2,), "f32")],
    )
    root = write(tmp_path / "k.bundle", spec)
    with pytest.raises(UnsupportedModuleError, match="jb_no_such_target"):
        juliabridge.import_lux(root, backend="xla")
    model = juliabridge.import_lux(root, backend="xla", trust=True)
    for _ in range(2):  # the call that compiles, and a later one: typed, naming the module
        with pytest.raises(ExecutionError) as e:
            model(x)
        assert str(e.value).startswith(
            f"{root / 'model.mlir'}: XLA could not compile or run the module ("
        )
        assert "jb_no_such_target" in str(e.value)


def test_load_mlir_passes_its_trust_to_the_backend() -> None:
    # As import_lux does: xla checks the kernels it will call again, so a module trusted at load
    # must be trusted there too, or the load refuses what trust=True admitted.
    from juliabridge import ExecutionError, UnsupportedModuleError

    text = """module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.custom_call @jb_no_such_target(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    with pytest.raises(UnsupportedModuleError, match="jb_no_such_target"):
        juliabridge.load_mlir(text, backend="xla")
    fn = juliabridge.load_mlir(text, backend="xla", trust=True)
    with pytest.raises(ExecutionError, match="jb_no_such_target"):
        fn(np.ones(2, np.float32))


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_eager_jax_arrays_are_checked_once_per_signature(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # docs/benchmarks.md, "Call overhead": jax arrays go to the jit whose trace checks them, so
    # a signature seen before is not checked in Python again; numpy arrays always are.
    from juliabridge import function

    text = """module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.add %x, %x : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
    fn = juliabridge.load_mlir(text, backend=backend)
    calls = []
    real = function.check_call_args
    monkeypatch.setattr(
        function, "check_call_args", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    x = jnp.arange(2, dtype=jnp.float32)
    for _ in range(3):
        np.testing.assert_array_equal(fn(x)[0], [0.0, 2.0])
    assert len(calls) == 1  # the trace of the first call only
    fn(np.arange(2, dtype=np.float32))
    assert len(calls) == 2  # numpy: checked (and converted) in Python every time
