"""Every error path typed, with a message that cannot itself fail (issue 39): values from files
quoted through juliabridge.shown, one reader of mhlo.sharding strings that refuses a malformed
tiling at load, no ExecutionError blaming XLA for juliabridge's own failure, and the quantized
and boolean-bitcast refusals naming their real reason."""

from __future__ import annotations

import numpy as np
import pytest

import juliabridge
from juliabridge import ExecutionError, MLIRParseError, ModuleContractError, UnsupportedModuleError
from juliabridge.stablehlo.hlosharding import read_sharding
from juliabridge.support.shown import clipped, shown
from juliabridge.transforms.sharding import recorded_tiling
from juliabridge.transforms.typed_errors import typed

HUGE = int("f" * 5000, 16)  # str() of it raises ValueError (more than 4,300 digits)


# --- shown: bounded, never raising ----------------------------------------------------------


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_shown_is_bounded_and_never_raises() -> None:
    with pytest.raises(ValueError):
        str(HUGE)
    assert shown(HUGE) == "0x" + "f" * 16 + "... (an integer of 20000 bits)"
    assert shown(-HUGE).startswith("-0xffff") and "20000 bits" in shown(-HUGE)
    assert shown(12345) == "12345" and shown(True) == "True" and shown(None) == "None"
    assert shown("x" * 10_000) == "'" + "x" * 79 + "... (10000 characters)"
    assert shown("ab") == "'ab'"
    assert shown([HUGE, 1]) == "[0x" + "f" * 16 + "... (an integer of 20000 bits), 1]"
    many = shown(list(range(1000)))
    assert many.startswith("[0, 1, 2") and "(1000 items)" in many and len(many) < 200
    assert shown((7,)) == "(7,)"
    assert shown(_BadRepr()) == "<a _BadRepr that cannot be printed>"
    nested: list[object] = []
    for _ in range(100):
        nested = [nested]
    assert len(shown(nested)) < 200
    assert clipped("{replicated}") == "{replicated}"
    assert clipped("y" * 500, 100) == "y" * 100 + "... (500 characters)"


# --- mhlo.sharding: one reader, refusals typed at load ---------------------------------------


def _sharded_module(sharding: str) -> str:
    return (
        "module {\n"
        f'  func.func @main(%a: tensor<2x4xf32> {{mhlo.sharding = "{sharding}"}}) '
        "-> tensor<2x4xf32> {\n"
        "    return %a : tensor<2x4xf32>\n  }\n}\n"
    )


@pytest.mark.parametrize(
    ("sharding", "why"),
    [
        ("{devices=[1,,1]0}", "tile dimension '' is not a device count"),
        ("{devices=[]0}", "tile dimension '' is not a device count"),
        ("{devices=[0,1]0}", "tile dimension '0' is not a device count"),
        ("{devices=[2,x]0,1}", "tile dimension 'x' is not a device count"),
        ("{devices=[99999999999]0}", "tile dimension '99999999999' is not a device count"),
        ("{devices=[" + "1" * 5000 + "]0}", "(5000 characters) is not a device count"),
        ("{devices=[" + "1," * 70 + "1]0}", "71 tile dimensions, more than 65"),
    ],
)
def test_a_malformed_tiling_is_refused_at_load(sharding: str, why: str) -> None:
    with pytest.raises(MLIRParseError) as e:
        juliabridge.load_mlir(_sharded_module(sharding), backend="lax")
    msg = str(e.value)
    assert msg.startswith("<mlir text>: @main argument 0: mhlo.sharding '{devices=[")
    assert why in msg and "not XLA's sharding syntax" in msg and len(msg) < 800, msg


@pytest.mark.parametrize(
    ("sharding", "pieces"),
    [
        ("{devices=[2,1]0,1}", (2, 1)),
        ("{devices=[1,2,2]<=[4] last_tile_dim_replicate}", (1, 2)),
        ("{devices=[2,2]<=[2,2]T(1,0)}", (2, 2)),
        ("{replicated}", None),
        ("{maximal device=0}", None),
        ("{manual}", None),
        ("{{replicated}, {devices=[2]0,1}}", None),
    ],
)
def test_well_formed_shardings_load_and_read(sharding: str, pieces: tuple[int, ...] | None) -> None:
    fn = juliabridge.load_mlir(_sharded_module(sharding), backend="lax")
    assert fn.module.arg_shardings[0].strip('"') == sharding
    tiling = read_sharding(sharding, "x")
    assert (tiling.pieces if tiling else None) == pieces
    want = (1, 1) if sharding == "{replicated}" else pieces
    assert recorded_tiling(f'"{sharding}"', 2) == want


# --- no ExecutionError blaming XLA for juliabridge's own failure ------------------------------


def test_juliabridges_own_failure_is_not_blamed_on_xla() -> None:
    from juliabridge.support import dtypes

    run = typed("m.bundle", None, dtypes.to_numpy, capture=False)
    with pytest.raises(ExecutionError) as e:
        run("no-such-type")  # a KeyError raised in juliabridge/support/dtypes.py
    msg = str(e.value)
    assert msg.startswith("m.bundle: juliabridge itself failed while preparing or running")
    assert (
        "KeyError" in msg and "juliabridge/support/dtypes.py:" in msg and "XLA could not" not in msg
    )


# --- refusals that name the real reason -------------------------------------------------------


def test_quantized_types_say_the_quant_dialect_is_missing() -> None:
    q = "tensor<2x!quant.uniform<i8:f32, 1.0:0>>"
    text = (
        "module {\n  func.func @main(%a: tensor<2xf32>) -> " + q + " {\n"
        f"    %c = stablehlo.uniform_quantize %a : (tensor<2xf32>) -> {q}\n"
        f"    return %c : {q}\n  }}\n}}\n"
    )
    for backend in ("lax", "xla"):
        with pytest.raises(UnsupportedModuleError) as e:
            juliabridge.load_mlir(text, backend=backend)
        msg = str(e.value)
        assert not isinstance(e.value, MLIRParseError)
        assert msg.startswith("<mlir text>: line 2 uses a quantized element type (!quant.uniform")
        assert "jaxlib's MLIR context has no quant dialect" in msg and "damaged" not in msg


_BITCAST = """module {
  func.func @main(%a: tensor<f64>) -> tensor<64xi1> {
    %c = stablehlo.bitcast_convert %a : (tensor<f64>) -> tensor<64xi1>
    return %c : tensor<64xi1>
  }
}
"""


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_a_boolean_bitcast_is_refused_at_load(backend: str) -> None:
    # XLA returned 8 elements under the declared shape (64,); lax has no layout for it.
    with pytest.raises(ModuleContractError) as e:
        juliabridge.load_mlir(_BITCAST, backend=backend)
    msg = str(e.value)
    assert msg.startswith("<mlir text>, line 3: stablehlo.bitcast_convert from tensor<f64> to ")
    assert "tensor<64xi1>" in msg and "no backend computes it" in msg


def test_lax_refusing_a_boolean_bitcast_does_not_send_users_to_xla() -> None:
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(_BITCAST, backend="lax", trust=True)
    msg = str(e.value)
    assert "bitcast_convert from float64 to bool has no defined layout" in msg
    assert "backend='xla'" not in msg and "No backend computes it" in msg


def test_complex_cbrt_is_the_principal_cube_root_on_lax_and_xla() -> None:
    text = """module {
  func.func @main(%a: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
    %c = stablehlo.cbrt %a : tensor<3xcomplex<f32>>
    return %c : tensor<3xcomplex<f32>>
  }
}
"""
    z = np.array([8 + 1j, -27, 0.5 - 2j], np.complex64)
    want = np.exp(np.log(z.astype(np.complex128)) / 3)
    for backend in ("lax", "xla"):
        got = np.asarray(juliabridge.load_mlir(text, backend=backend)(z)[0])
        # spec.md#cbrt: the principal root, exp(log(z) / 3); (-27)^(1/3) = 3 e^(i pi / 3)
        np.testing.assert_allclose(got, want, rtol=2e-6)
        np.testing.assert_allclose(got[1], 3 * np.exp(1j * np.pi / 3), rtol=2e-6)


def test_placing_on_a_mesh_numpy_cannot_shape_is_a_call_argument_error() -> None:
    # read_script refuses such a mesh (test_pinned_reactant_script); a script made otherwise
    # must still end in a typed error, not numpy's ValueError from the device grid's reshape.
    from pathlib import Path
    from types import SimpleNamespace

    from juliabridge import CallArgumentError
    from juliabridge.reactant_export.pyscript import ExportScript, Mesh
    from juliabridge.reactant_export.sharding import place

    names = tuple(f"x{i}" for i in range(70))
    script = ExportScript(
        Path("f.py"), "f", "f_0.mlir", None, (), meshes={"mesh0": Mesh("mesh0", (1,) * 70, names)}
    )
    with pytest.raises(CallArgumentError) as e:
        place(SimpleNamespace(script=script), [])
    msg = str(e.value)
    assert msg.startswith("f.py: mesh0 (70 axes) cannot be built from 1 devices (ValueError: ")
