"""stablehlo.custom_call on the lax backend: dispatch by target, the single-device sharding
annotations, and refusal (typed, naming the target and line) of targets it does not know and
of calls that break a known target's contract (shapes, element types, layouts, attributes)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge import UnsupportedModuleError, UnsupportedOpError
from juliabridge.stablehlo.policy import allowed_custom_calls

from .custom_calls import custom_call_modules
from .oracles import check_module

# f64 arguments and results need x64 outside the module too (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")


def lift(text: str) -> object:
    # trust=True: the load policy's allowlist is not what these tests are about.
    return juliabridge.load_mlir(text, backend="lax", trust=True)


ANNOTATIONS = """module {
  func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{replicated}"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %2 = stablehlo.sine %1 : tensor<2x3xf32>
    %3 = "stablehlo.custom_call"(%2) {call_target_name = "SPMDShardToFullShape", mhlo.sharding = "{replicated}"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    return %3 : tensor<2x3xf32>
  }
}"""


def test_single_device_sharding_annotations_are_identities() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # The interpreter has no custom calls: XLA and numpy.
    check_module(ANNOTATIONS, [x], interpreter=False, expected=[np.sin(x)])
    fn = juliabridge.load_mlir(ANNOTATIONS, backend="lax")
    g = jax.grad(lambda x: jnp.sum(fn(x)[0]))(x)
    np.testing.assert_allclose(g, np.cos(x), rtol=1e-6)
    assert juliabridge.load_mlir(ANNOTATIONS).backend_name == "lax"


def test_sharding_that_changes_the_shape_is_refused() -> None:
    text = """module {
  func.func @main(%x: tensor<4x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.custom_call @SPMDFullToShardShape(%x) {mhlo.sharding = "{devices=[2,1]0,1}"} : (tensor<4x3xf32>) -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}"""
    with pytest.raises(UnsupportedOpError, match=r"line 3.*'SPMDFullToShardShape'.*multi-device"):
        lift(text)


def test_unknown_target_names_target_and_line() -> None:
    text = """module {
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.sine %x : tensor<3xf32>
    %1 = stablehlo.custom_call @my_kernel(%0) {backend_config = "x"} : (tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}"""
    with pytest.raises(UnsupportedOpError) as e:
        lift(text)
    assert e.value.op == "stablehlo.custom_call" and e.value.where == "line 4"
    assert "'my_kernel'" in str(e.value) and "backend='xla'" in str(e.value)


X44 = np.random.default_rng(0).standard_normal((4, 4))


def getrf_module(ty: str = "f64") -> str:
    x = X44.astype(np.float32 if ty == "f32" else np.float64)
    return custom_call_modules(jax.lax.linalg.lu, x)[
        f"lapack_{'s' if ty == 'f32' else 'd'}getrf_ffi"
    ]


def test_getrf_module_lifts_and_auto_picks_lax() -> None:
    fn = juliabridge.load_mlir(getrf_module())
    assert fn.backend_name == "lax"


def test_row_major_layout_is_refused() -> None:
    text = getrf_module().replace(
        "operand_layouts = [dense<[0, 1]> : tensor<2xindex>]",
        "operand_layouts = [dense<[1, 0]> : tensor<2xindex>]",
    )
    with pytest.raises(UnsupportedOpError, match=r"operand_layouts\[0\] is \[1, 0\].*\[0, 1\]"):
        lift(text)


def _drop_attr(text: str, name: str) -> str:
    """Remove one `name = [...]` attribute from a generic-syntax op."""
    start = text.index(name + " = [")
    depth, i = 0, text.index("[", start)
    while True:
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            break
        i += 1
    end = i + 1 + (2 if text[i + 1 : i + 3] == ", " else 0)
    return text[:start] + text[end:]


def test_missing_layouts_mean_row_major_and_are_refused() -> None:
    text = _drop_attr(_drop_attr(getrf_module(), "operand_layouts"), "result_layouts")
    with pytest.raises(UnsupportedOpError, match=r"operand_layouts\[0\] is \[1, 0\]"):
        lift(text)


def getrf_declaring(lu: str, pivots: str) -> str:
    """lapack_dgetrf_ffi on a 4x4 f64 matrix, declaring the given result types."""
    results = f"{lu}, {pivots}, tensor<i32>"
    return f"""module {{
  func.func @main(%a: tensor<4x4xf64>) -> ({results}) {{
    %r:3 = "stablehlo.custom_call"(%a) {{call_target_name = "lapack_dgetrf_ffi", mhlo.backend_config = {{}}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]}} : (tensor<4x4xf64>) -> ({results})
    return %r#0, %r#1, %r#2 : {results}
  }}
}}"""


def test_declared_result_smaller_than_the_kernel_writes_is_refused() -> None:
    lift(getrf_declaring("tensor<4x4xf64>", "tensor<4xi32>"))  # the contract itself lifts
    with pytest.raises(UnsupportedOpError, match=r"result 1 is declared tensor<3xi32>.*4xi32"):
        lift(getrf_declaring("tensor<4x4xf64>", "tensor<3xi32>"))
    with pytest.raises(UnsupportedOpError, match=r"result 0 is declared tensor<4x3xf64>"):
        lift(getrf_declaring("tensor<4x3xf64>", "tensor<4xi32>"))


def test_element_type_of_another_lapack_prefix_is_refused() -> None:
    text = getrf_module().replace("lapack_dgetrf_ffi", "lapack_sgetrf_ffi")
    with pytest.raises(
        UnsupportedOpError,
        match=r"'lapack_sgetrf_ffi': operand 0 is tensor<4x4xf64>; the target computes on f32",
    ) as e:
        lift(text)
    # A broken contract has no target-specific remedy: the message gives the general one.
    assert str(e.value).endswith("Load it with backend='xla' (or 'auto', which falls back to "
                                 "it), or report the op so the lax backend learns it.")  # fmt: skip


@pytest.mark.parametrize("target", ["lapack_hgetrf_ffi", "lapack_Xgetrf_ffi", "lapack_dgetrf"])
def test_a_name_shaped_like_a_lifted_lapack_target_is_unknown(target: str) -> None:
    # Only the s/d/c/z variants of a LAPACK kernel (with the _ffi suffix) are lifted; any
    # other name is an unknown target: refused by the load policy, and by lax when trusted.
    text = getrf_module().replace("lapack_dgetrf_ffi", target)
    with pytest.raises(UnsupportedModuleError, match=f"{target} \\(the first"):
        juliabridge.load_mlir(text, backend="lax")
    with pytest.raises(UnsupportedOpError, match=f"'{target}' is not one the lax backend knows"):
        lift(text)


def test_reading_lapack_workspace_is_refused() -> None:
    text = custom_call_modules(lambda a: jax.lax.linalg.svd(a, full_matrices=False), X44)[
        "lapack_dgesdd_ffi"
    ]
    with pytest.raises(UnsupportedOpError, match=r"result 0 is read, but the kernel destroys"):
        lift(text)
    vals = custom_call_modules(lambda a: jax.lax.linalg.svd(a, compute_uv=False), X44, unread=(0,))[
        "lapack_dgesdd_ffi"
    ]
    with pytest.raises(UnsupportedOpError, match=r"result 2 is read, but mode N"):
        lift(vals)


def test_unknown_backend_config_value_is_refused() -> None:
    a = X44 @ X44.T + 4 * np.eye(4)
    text = custom_call_modules(lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=False), a)[
        "lapack_dpotrf_ffi"
    ].replace("uplo = 76 : ui8", "uplo = 88 : ui8")
    with pytest.raises(UnsupportedOpError, match=r"backend_config uplo = 88"):
        lift(text)


def test_tpu_eigh_without_sorted_eigenvalues_is_refused() -> None:
    text = custom_call_modules(
        lambda a: jax.lax.linalg.eigh(a, symmetrize_input=False), X44, platform="tpu"
    )["Eigh"]
    assert 'backend_config = "1,1,100,1e-6"' in text
    lift(text)
    with pytest.raises(UnsupportedOpError, match=r"'Eigh': backend_config '1,0,100,1e-6'"):
        lift(text.replace('"1,1,100,1e-6"', '"1,0,100,1e-6"'))


def test_tuple_result_is_refused() -> None:
    text = """module {
  func.func @main(%x: tensor<4x4xf64>) -> tensor<4x4xf64> {
    %0 = "stablehlo.custom_call"(%x) {call_target_name = "lapack_dgetrf_ffi"} : (tensor<4x4xf64>) -> tuple<tensor<4x4xf64>, tensor<4xi32>, tensor<i32>>
    %1 = stablehlo.get_tuple_element %0[0] : (tuple<tensor<4x4xf64>, tensor<4xi32>, tensor<i32>>) -> tensor<4x4xf64>
    return %1 : tensor<4x4xf64>
  }
}"""
    with pytest.raises(UnsupportedOpError, match=r"result 0 is tuple<.*tensors only"):
        lift(text)


def test_called_computations_are_refused() -> None:
    text = """module {
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.custom_call @Sharding(%x) {called_computations = [@helper]} : (tensor<3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
  func.func private @helper(%x: tensor<3xf32>) -> tensor<3xf32> {
    return %x : tensor<3xf32>
  }
}"""
    with pytest.raises(UnsupportedOpError, match="called_computations"):
        lift(text)


# --- the load policy: targets lax lifts need no trust; unknown ones stay refused ----------------


def gesvd_module() -> str:
    """lapack_dgesvd_ffi as JAX emits it: jaxlib registers it, jax.export does not list it."""
    fn = lambda a: jax.lax.linalg.svd(  # noqa: E731
        a, full_matrices=False, algorithm=jax.lax.linalg.SvdAlgorithm.QR
    )
    return custom_call_modules(fn, X44, unread=(0,))["lapack_dgesvd_ffi"]


def test_targets_lax_lifts_load_without_trust_and_only_on_lax() -> None:
    text = gesvd_module()
    assert "lapack_dgesvd_ffi" not in allowed_custom_calls()  # not admitted as a kernel call
    s = np.linalg.svd(X44, compute_uv=False)
    for backend in ("lax", "auto"):
        fn = juliabridge.load_mlir(text, backend=backend)
        assert fn.backend_name == "lax"
        np.testing.assert_allclose(np.asarray(jax.jit(fn)(X44)[0]), s, rtol=1e-12)
    # The backend that would call the kernel itself still refuses it (the load policy's
    # error, exit code 17), naming target and line.
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(text, backend="xla")
    assert type(e.value) is UnsupportedModuleError
    assert "lapack_dgesvd_ffi (the first, lapack_dgesvd_ffi, at line 3)" in str(e.value)
    assert "backend='lax'" in str(e.value)


def test_lifted_targets_keep_their_contract_checked_without_trust() -> None:
    broken = gesvd_module().replace("tensor<4xf64>", "tensor<3xf64>")  # s declared too short
    with pytest.raises(UnsupportedOpError) as e:
        juliabridge.load_mlir(broken, backend="lax")
    assert e.value.op == "stablehlo.custom_call" and e.value.where == "line 3"
    assert "'lapack_dgesvd_ffi'" in str(e.value) and "result 1 is declared" in str(e.value)


UNKNOWN_TARGET = """module {
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.sine %x : tensor<3xf32>
    %1 = stablehlo.custom_call @my_kernel(%0) {backend_config = "x"} : (tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}"""


def test_unknown_target_without_trust_is_refused_at_load_naming_target_and_line() -> None:
    # The load policy refuses it for every backend (nothing to lift, no kernel contract).
    for backend in ("lax", "auto", "xla"):
        with pytest.raises(UnsupportedModuleError) as e:
            juliabridge.load_mlir(UNKNOWN_TARGET, backend=backend)
        assert "my_kernel (the first, my_kernel, at line 4)" in str(e.value)
    # Trusted, it reaches the lax backend, which refuses it as an op it does not lift.
    with pytest.raises(UnsupportedOpError) as op:
        juliabridge.load_mlir(UNKNOWN_TARGET, backend="lax", trust=True)
    assert op.value.op == "stablehlo.custom_call" and op.value.where == "line 4"
    assert "'my_kernel'" in str(op.value)


def test_a_target_on_the_allowlist_that_lax_does_not_lift_is_an_op_error() -> None:
    # lapack_sgees_ffi (Schur) has a kernel contract but no lift: lax names target and line,
    # and auto runs it on the backend that calls the kernel.
    x = X44.astype(np.float32)
    text = custom_call_modules(jax.lax.linalg.schur, x)["lapack_sgees_ffi"]
    with pytest.raises(UnsupportedOpError) as e:
        juliabridge.load_mlir(text, backend="lax")
    assert e.value.op == "stablehlo.custom_call" and e.value.where == "line 3"
    assert "'lapack_sgees_ffi' is not one the lax backend knows" in str(e.value)
    assert juliabridge.load_mlir(text).backend_name in ("xla", "enzyme")


def test_auto_names_both_reasons_when_lax_cannot_take_a_lifted_target_module() -> None:
    # replica_id does not lift, so auto falls back to xla, which cannot call gesvd's kernel.
    text = gesvd_module().replace(
        "    return", "    %id = stablehlo.replica_id : tensor<ui32>\n    return", 1
    )
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(text)
    msg = str(e.value)
    assert "lapack_dgesvd_ffi (the first, lapack_dgesvd_ffi, at line 3)" in msg
    assert "tried the lax backend first" in msg and "stablehlo.replica_id" in msg
