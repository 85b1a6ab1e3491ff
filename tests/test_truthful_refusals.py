"""Refusals that tell the truth (issue 50), each on a small module of its kind: elided weights
on every backend, every non-StableHLO op with its line, trust=True offered only where it
changes the outcome, and the platform a custom-call kernel is for."""

from __future__ import annotations

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.errors import UnsupportedModuleError
from juliabridge.support.jaxinternals import current_platform

W = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
X = np.linspace(0, 1, 16, dtype=np.float32).reshape(2, 8)
T = "tensor<3xf32>"
BACKENDS = ["lax", "xla", "enzyme", "auto"]


def _printed(limit: int | None) -> str:
    """``tanh(x @ W) + 1`` lowered by JAX, printed by MLIR with `large_elements_limit`."""
    lowered = jax.jit(lambda x: jnp.tanh(x @ W) + 1.0).lower(X)
    out = io.StringIO()
    kw = {} if limit is None else {"large_elements_limit": limit}
    lowered.compiler_ir().operation.print(file=out, **kw)
    return out.getvalue()


def _needs(backend: str) -> None:
    if backend == "enzyme":
        pytest.importorskip("enzyme_ad", reason="backend='enzyme' needs enzyme-ad")


@pytest.mark.parametrize("trust", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_elided_weights_are_refused_at_load_on_every_backend(backend: str, trust: bool) -> None:
    _needs(backend)
    text = _printed(16)
    line = next(n for n, s in enumerate(text.splitlines(), 1) if "__elided__" in s)
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(text, backend=backend, trust=trust)
    msg = str(e.value)
    assert f"line {line} holds dense_resource<__elided__> (1 elided constant in all)" in msg
    assert "holds no weights" in msg
    assert "without eliding constants" in msg and "String(@code_hlo f(x))" in msg
    assert "backend='xla'" not in msg and "trust=True" not in msg


def test_the_same_module_printed_whole_loads_and_computes_numpys_value() -> None:
    fn = juliabridge.load_mlir(_printed(None), backend="xla")
    np.testing.assert_allclose(np.asarray(fn(X)[0]), np.tanh(X @ W) + 1, rtol=1e-5, atol=1e-6)


def test_older_mlirs_elided_form_is_refused_too() -> None:
    text = _printed(16).replace(
        "dense_resource<__elided__>", 'opaque<"elided_large_const", "0xDEADBEEF">'
    )
    with pytest.raises(UnsupportedModuleError, match="holds no weights"):
        juliabridge.load_mlir(text, backend="xla")


def _module(body: str) -> str:
    return (
        "module @m {\n  func.func private @f(%a: TT) -> TT {\n    return %a : TT\n  }\n"
        f"  func.func public @main(%x: TT) -> TT {{\n{body}\n    return %1 : TT\n  }}\n}}\n"
    ).replace("TT", T)


ENZYME_GENERIC = _module(
    '    %0 = "enzyme.batch"(%x) {fn = @f} : (TT) -> TT\n'
    '    %1 = "enzyme.autodiff"(%0) {fn = @f} : (TT) -> TT'
)
ENZYME_CUSTOM = _module(
    "    %0 = enzyme.batch @f(%x) {batch_shape = array<i64: 2>} : (TT) -> TT\n"
    "    %1 = enzyme.autodiff @f(%0) {activity = []} : (TT) -> TT"
)


@pytest.mark.parametrize("text", [ENZYME_GENERIC, ENZYME_CUSTOM], ids=["generic", "custom"])
def test_every_enzyme_op_is_named_with_its_line_and_no_trust_is_offered(text: str) -> None:
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(text, backend="xla")
    msg = str(e.value)
    assert "op(s) enzyme.batch (line 6), enzyme.autodiff (line 7) are not StableHLO" in msg
    assert "Reactant's full optimization pipeline" in msg
    assert "trust=True" not in msg


def test_trust_does_not_load_enzyme_ops_in_their_own_syntax() -> None:
    # Why trust=True is not offered: the parser cannot read them, trusted or not.
    with pytest.raises(UnsupportedModuleError, match=r"enzyme\.batch \(line 6\)"):
        juliabridge.load_mlir(ENZYME_CUSTOM, backend="xla", trust=True)


def test_mhlo_ops_are_offered_trust_and_trust_runs_them() -> None:
    text = _module(
        '    %0 = "mhlo.add"(%x, %x) : (TT, TT) -> TT\n'
        '    %1 = "mhlo.multiply"(%0, %x) : (TT, TT) -> TT'
    )
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(text, backend="xla")
    msg = str(e.value)
    assert "mhlo.add (line 6), mhlo.multiply (line 7)" in msg
    assert "backend='xla' with trust=True runs the module" in msg
    x = np.array([1.0, -2.0, 3.0], np.float32)
    got = juliabridge.load_mlir(text, backend="xla", trust=True)(x)[0]
    np.testing.assert_array_equal(np.asarray(got), (x + x) * x)


def _custom_call(target: str) -> str:
    return (
        f"module @m {{\n  func.func public @main(%x: {T}) -> {T} {{\n"
        f"    %0 = stablehlo.custom_call @{target}(%x) : ({T}) -> {T}\n"
        f"    return %0 : {T}\n  }}\n}}\n"
    )


@pytest.mark.parametrize(
    ("target", "platform"),
    [
        ("metal_gelu_kernel", "Apple Metal (mps)"),
        ("mps_matmul", "Apple Metal (mps)"),
        ("cublas_gemm_v2", "CUDA (NVIDIA GPUs)"),
        ("cu_lu_pivots", "CUDA (NVIDIA GPUs)"),
        ("hipsolver_getrf", "ROCm (AMD GPUs)"),
        ("rocblas_gemm", "ROCm (AMD GPUs)"),
        ("tpu_custom_call", "TPU"),
    ],
)
def test_a_platform_kernel_is_named_for_its_platform(target: str, platform: str) -> None:
    here = current_platform()
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(_custom_call(target), backend="xla")
    msg = str(e.value)
    assert f"{target} (line 3) is a kernel for {platform}" in msg
    assert "no re-export pass removes it" in msg
    assert f"JAX's platform here is {here}" in msg
    assert "Reactant's full optimization pipeline" not in msg
    # trust=True is offered only where the kernel could run: on its own platform.
    assert ("trust=True" in msg) == (here in ("cuda", "rocm") and "GPU" in platform)


def test_an_unknown_target_keeps_the_reexport_and_trust_advice() -> None:
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(_custom_call("my_thing"), backend="xla")
    msg = str(e.value)
    assert "is a kernel for" not in msg
    assert "Reactant's full optimization pipeline" in msg and "Pass trust=True" in msg
