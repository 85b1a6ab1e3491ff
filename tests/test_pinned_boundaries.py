"""Pinned: boundary rules at the edges of what a bundle or module may say (spec §3, §2).

File names in the manifest are plain names inside the bundle directory, whatever separator or
special name a platform knows; a batch axis indexes one of the value's axes (so rank - 1 is
the last one allowed, and a rank-0 value has none); @main's arguments and results have static
shapes, with or without `trust`. Each rule is met one past its edge and exactly at it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import juliabridge
from juliabridge import ManifestError, UnsafeBundleError, UnsupportedModuleError
from juliabridge.errors import ModuleContractError
from juliabridge.stablehlo import parse_module

from .pinned_support import Arg, Res, Spec, dense_spec, edit, lower, write

# --- file names (spec §3.1) --------------------------------------------------------------------

BAD_NAMES = {
    "backslash": "sub\\model.mlir",
    "nul": "model\x00.mlir",
    "dot-dot": "..",
    "dot": ".",
    "slash": "sub/model.mlir",
    "absolute": "/etc/passwd",
    "up-and-back": "../b.bundle/model.mlir",
    "home": "~model.mlir",
    "newline": "model\n.mlir",
    "escape": "model\x1b.mlir",
    "empty": "",
    "256-bytes": "m" * 256,
}


@pytest.mark.parametrize("key", ["module", "weights"])
@pytest.mark.parametrize("case", list(BAD_NAMES))
def test_a_file_name_that_is_not_a_plain_name_is_refused_naming_it(
    tmp_path: Path, key: str, case: str
) -> None:
    spec, _ = dense_spec()
    root = write(tmp_path / "b.bundle", spec)
    name = BAD_NAMES[case]
    expected = (
        f"{root / 'manifest.json'}: {key}.file: file name {name!r} is not a plain name inside the "
        "bundle directory (no paths, no '..'); a bundle may only refer to its own files. The "
        "manifest does not follow docs/bundle-format.md: fix the entry named above, or have the "
        "tool that wrote it ('pinned-tests') follow the spec."
    )
    edit(root, lambda m: m[key].update(file=name), seal=False)
    with pytest.raises(UnsafeBundleError) as e:
        juliabridge.import_lux(root)
    assert (type(e.value), str(e.value)) == (UnsafeBundleError, expected)


@pytest.mark.parametrize("name", ["m" * 255, "model..mlir", "a~b", "model name.mlir", "ünï.mlir"])
def test_a_plain_name_at_the_edges_is_read(tmp_path: Path, name: str) -> None:
    spec, _ = dense_spec()
    root = write(tmp_path / "b.bundle", spec)
    (root / "model.mlir").rename(root / name)
    edit(root, lambda m: m["module"].update(file=name))
    x = np.ones((4, 2), np.float32)
    w, b = (a.value for a in spec.args[1:])
    np.testing.assert_allclose(juliabridge.import_lux(root)(x), x @ w + b, rtol=1e-6)


# --- batch axes (spec §3.4): 0 <= batch_axis < rank -------------------------------------------


def _scalar_input_bundle(tmp_path: Path) -> Path:
    x, w = np.float32(2.0), np.ones(3, np.float32)
    spec = Spec(
        name="scalar",
        mlir=lower(lambda x, w: x * w, x, w),
        args=[Arg("input", [], np.asarray(x)), Arg("parameter", ["w"], w)],
        results=[Res([["output"]], (3,), "f32")],
    )
    return write(tmp_path / "s.bundle", spec)


@pytest.mark.parametrize("where", ["arguments", "results"])
def test_a_batch_axis_equal_to_the_rank_is_refused_naming_both(tmp_path: Path, where: str) -> None:
    spec, _ = dense_spec()
    root = write(tmp_path / "b.bundle", spec)

    def change(m: dict[str, Any]) -> None:
        m[where][0]["batch_axis"] = 2  # of a rank-2 value

    edit(root, change)
    with pytest.raises(ManifestError) as e:
        juliabridge.import_lux(root)
    assert f"{where}[0].batch_axis: axis 2 out of range for rank 2" in str(e.value)


def test_a_rank_0_value_has_no_batch_axis(tmp_path: Path) -> None:
    # Axis 0 of a scalar is the rank itself: refused when the manifest is read (it used to load
    # and fail inside XLA's call with an IndexError reported as an ExecutionError).
    root = _scalar_input_bundle(tmp_path)
    np.testing.assert_allclose(juliabridge.import_lux(root)(np.float32(3.0)), [3.0, 3.0, 3.0])

    def change(m: dict[str, Any]) -> None:
        m["arguments"][0]["batch_axis"] = 0
        m["batch"] = {"size": 1, "samples_independent": True}

    edit(root, change)
    with pytest.raises(ManifestError) as e:
        juliabridge.import_lux(root)
    assert "arguments[0].batch_axis: axis 0 out of range for rank 0" in str(e.value)


# --- static shapes at @main (spec §2) ----------------------------------------------------------

ARG_DYNAMIC = """module {
  func.func @main(%x: tensor<?xf32>) -> tensor<2xf32> {
    %0 = stablehlo.slice %x [0:2] : (tensor<?xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""
RESULT_DYNAMIC = """module {
  func.func @main(%x: tensor<2xf32>) -> tensor<?xf32> {
    %0 = stablehlo.convert %x : (tensor<2xf32>) -> tensor<?xf32>
    return %0 : tensor<?xf32>
  }
}"""
INSIDE_DYNAMIC = """module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.convert %x : (tensor<2xf32>) -> tensor<?xf32>
    %1 = stablehlo.convert %0 : (tensor<?xf32>) -> tensor<2xf32>
    return %1 : tensor<2xf32>
  }
}"""


@pytest.mark.parametrize(
    ("text", "what"),
    [(ARG_DYNAMIC, "argument 0"), (RESULT_DYNAMIC, "result 0")],
    ids=["argument", "result"],
)
def test_a_dynamic_shape_at_main_is_refused_even_when_trusted(text: str, what: str) -> None:
    # trust=True skips the resource budgets (which refuse every dynamic shape), so @main's own
    # static-shape rule is the one that holds there: neither check stands in for the other.
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(text, trust=True, origin="m.mlir")
    assert type(e.value) is UnsupportedModuleError
    assert str(e.value) == (
        f"m.mlir: @main {what} has dynamic shape tensor<?xf32>; export with concrete sizes "
        "(Reactant arrays have static shapes)"
    )
    with pytest.raises(ModuleContractError, match=r"has a dynamic shape \(tensor<\?xf32>\)"):
        parse_module(text, origin="m.mlir")


def test_a_dynamic_shape_inside_is_refused_by_the_budget_unless_trusted() -> None:
    with pytest.raises(ModuleContractError) as e:
        parse_module(INSIDE_DYNAMIC, origin="m.mlir")
    assert str(e.value).startswith(
        "m.mlir, line 3: stablehlo.convert has a dynamic shape (tensor<?xf32>); Reactant exports "
        "static shapes"
    )
    m = parse_module(INSIDE_DYNAMIC, trust=True, origin="m.mlir")
    assert [a.shape for a in m.arguments] == [(2,)] and [r.shape for r in m.results] == [(2,)]
