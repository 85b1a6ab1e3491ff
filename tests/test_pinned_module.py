"""parse_module's reading of its source and its messages (stablehlo/module.py), and the
per-value bound of the budgets (stablehlo/budget.py), pinned from the outside with small
modules written here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from juliabridge.errors import (
    MLIRParseError,
    ModuleContractError,
    ResourceLimitError,
    UnsupportedModuleError,
)
from juliabridge.stablehlo import TensorSpec, module, parse_module
from juliabridge.support import dtypes

ADD = (
    "func.func public @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "  %0 = stablehlo.add %a, %a : tensor<2x3xf32>\n"
    "  return %0 : tensor<2x3xf32>\n"
    "}\n"
)


def test_tensor_spec_text_and_size() -> None:
    assert str(TensorSpec((2, 3), "f32")) == "tensor<2x3xf32>"
    assert str(TensorSpec((), "i1")) == "tensor<i1>"
    assert str(TensorSpec((0, 4), "complex<f64>")) == "tensor<0x4xcomplex<f64>>"
    assert TensorSpec((2, 3, 4), "f32").size == 24 and TensorSpec((), "f32").size == 1


def test_sources_text_bytes_and_paths(tmp_path: Path) -> None:
    m = parse_module(ADD)
    assert (m.origin, m.arguments, m.results) == (
        "<mlir text>",
        (TensorSpec((2, 3), "f32"),),
        (TensorSpec((2, 3), "f32"),),
    )
    assert parse_module(ADD.encode()).origin == "<mlir text>"
    p = tmp_path / "m.mlir"
    p.write_text(ADD)
    assert parse_module(p).origin == str(p) == parse_module(str(p)).origin
    assert parse_module(ADD, origin="bundle/model.mlir").origin == "bundle/model.mlir"


def test_text_without_braces_is_still_text() -> None:
    # A newline makes it text even without a brace; neither a newline nor a brace: a path.
    with pytest.raises(MLIRParseError, match=r"^<mlir text>: the MLIR does not parse: "):
        parse_module("not a module\nat all")
    with pytest.raises(MLIRParseError, match=r"^nowhere\.mlir: cannot read the MLIR file \("):
        parse_module("nowhere.mlir")


def test_source_errors_are_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MLIRParseError, match=r"^<mlir bytes>: not UTF-8 text \("):
        parse_module(b"\xff\xfe module")
    with pytest.raises(
        MLIRParseError,
        match=r"expected a path to a \.mlir file or the module text \(str\), got int",
    ):
        parse_module(42)  # type: ignore[arg-type]
    with pytest.raises(
        MLIRParseError,
        match=r"is a directory, not a \.mlir file; for a bundle directory use juliabridge\.import_lux",
    ):
        parse_module(tmp_path)
    with pytest.raises(
        MLIRParseError, match=r"^/dev/null: not a regular file, so not a \.mlir module$"
    ):
        parse_module(Path("/dev/null"))
    p = tmp_path / "w.mlir"
    p.write_bytes(b"\x89HDF\r\n\x1a\n\xff")
    with pytest.raises(
        MLIRParseError,
        match=r"w\.mlir: not UTF-8 text \(.*\), so not an MLIR module; is it the right file \(e\.g\. not the HDF5 weights\)\?",
    ):
        parse_module(p)
    p.write_text(ADD)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(module, "open", refuse, raising=False)
    with pytest.raises(
        MLIRParseError,
        match=r"w\.mlir: cannot read the MLIR file \(Permission denied\); check its permissions",
    ):
        parse_module(p)


def test_text_budget_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "host_memory", lambda: (1 << 62, "test"))
    module._check_text_budget(module.MAX_MODULE_BYTES, "x")  # exactly the limit: accepted
    with pytest.raises(
        MLIRParseError, match=r"^x: 1073741825 bytes is larger than the 1 GiB module limit$"
    ):
        module._check_text_budget(module.MAX_MODULE_BYTES + 1, "x")
    monkeypatch.setattr(module, "host_memory", lambda: (32 * 100, "a test's limit"))
    module._check_text_budget(100, "x")
    with pytest.raises(
        ResourceLimitError,
        match=r"^<mlir text>: parsing 101 B of MLIR text needs about 3\.2 KiB \(32x the text\), more than 3\.1 KiB, a test's limit; free memory",
    ):
        parse_module("{" * 101)


def test_nesting_limit_message() -> None:
    text = "module attributes {x = " + "[" * 300 + "]" * 300 + "} {}\n"
    with pytest.raises(
        MLIRParseError,
        match=r"^<mlir text>: brackets nest 301 levels deep, more than the 256 juliabridge accepts \(MLIR's parser would exhaust its stack\); this is not a module Reactant emits$",
    ):
        parse_module(text)
    with pytest.raises(MLIRParseError, match="not valid Unicode"):
        parse_module("module {}\n\ud800")


def test_parse_errors_name_line_and_column() -> None:
    bad = ADD.replace("stablehlo.add %a, %a", "stablehlo.add %a, %b")
    with pytest.raises(MLIRParseError) as info:
        parse_module(bad)
    msg = str(info.value)
    assert msg.startswith("<mlir text>: the MLIR does not parse: line 2, column 26: ")
    assert msg.endswith("export or download it again")


def test_unknown_dialect_op_is_refused_by_the_policy() -> None:
    bad = ADD.replace(
        "stablehlo.add %a, %a : tensor<2x3xf32>", "mydialect.magic %a : tensor<2x3xf32>"
    )
    with pytest.raises(UnsupportedModuleError, match=r"mydialect\.magic"):
        parse_module(bad)


def test_main_must_be_public_and_present() -> None:
    with pytest.raises(
        UnsupportedModuleError, match=r"^<mlir text>: @main is private, it must be public$"
    ):
        parse_module(ADD.replace("func.func public @main", "func.func private @main"))
    with pytest.raises(
        UnsupportedModuleError,
        match=r"no func\.func @main; Reactant always names the entry point main",
    ):
        parse_module(ADD.replace("@main", "@other"))


@pytest.mark.parametrize(
    ("ty", "what"),
    [
        ("tensor<?x3xf32>", "has dynamic shape tensor<\\?x3xf32>; export with concrete sizes"),
        ("tensor<*xf32>", "has type tensor<\\*xf32>; only ranked tensors cross the boundary"),
    ],
)
def test_main_signature_types_refused(ty: str, what: str) -> None:
    text = f"func.func public @main(%a: {ty}) -> {ty} {{\n  return %a : {ty}\n}}\n"
    with pytest.raises(UnsupportedModuleError, match=rf"^<mlir text>: @main argument 0 {what}"):
        parse_module(text, trust=True)


def test_unknown_element_type_lists_the_supported_ones() -> None:
    text = (
        "func.func public @main(%a: tensor<2xf32>) -> tensor<2xi4> {\n"
        "  %0 = stablehlo.convert %a : (tensor<2xf32>) -> tensor<2xi4>\n"
        "  return %0 : tensor<2xi4>\n"
        "}\n"
    )
    with pytest.raises(UnsupportedModuleError) as info:
        parse_module(text, trust=True)
    msg = str(info.value)
    assert msg.startswith("<mlir text>: @main result 0 has element type i4, which juliabridge")
    assert msg.endswith(f"(supported: {', '.join(dtypes.MLIR_TO_NUMPY)})")


def test_num_partitions_read() -> None:
    text = "module attributes {mhlo.num_partitions = 4 : i32} {\n" + ADD + "}\n"
    assert parse_module(text).num_partitions == 4
    assert parse_module(ADD).num_partitions == 1


def _huge(n: int) -> str:
    return (
        "func.func public @main(%a: tensor<f32>) -> tensor<f32> {\n"
        f"  %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<{n}xf32>\n"
        "  return %a : tensor<f32>\n"
        "}\n"
    )


def test_a_value_over_the_limits_names_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "1T")
    with pytest.raises(
        ResourceLimitError,
        match=r"^<mlir text>, line 2: stablehlo\.broadcast_in_dim produces tensor<100000000000xf32>, 372\.5 GiB, more than 256\.0 GiB \(the 256 GiB juliabridge accepts for one array\); the module is corrupt, forged, or too large",
    ):
        parse_module(_huge(100_000_000_000))
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "1G")
    with pytest.raises(
        ResourceLimitError,
        match=r"produces tensor<300000000xf32>, 1\.1 GiB, more than 1\.0 GiB \(JULIABRIDGE_MEMORY_LIMIT\)",
    ):
        parse_module(_huge(300_000_000))
    assert parse_module(_huge(300_000_000), trust=True).results == (TensorSpec((), "f32"),)


def test_call_graph_messages() -> None:
    decl = "  func.func private @f(%x: tensor<f32>) -> tensor<f32>\n"
    main = (
        "  func.func public @main(%a: tensor<f32>) -> tensor<f32> {\n"
        "    %0 = func.call @f(%a) : (tensor<f32>) -> tensor<f32>\n"
        "    return %0 : tensor<f32>\n"
        "  }\n"
    )
    with pytest.raises(
        ModuleContractError,
        match=r"^<mlir text>, line 2: func\.func @f is a declaration without a body; XLA cannot "
        r"run a function whose code is missing \(its converter crashes\)\. Export the module "
        r"again\.$",
    ):
        parse_module("module {\n" + decl + main + "}\n")


def test_a_structure_the_bindings_cannot_read_is_typed() -> None:
    # mhlo.num_partitions as a string: MLIR parses it, the IntegerAttr cast fails.
    text = 'module attributes {mhlo.num_partitions = "4"} {\n' + ADD + "}\n"
    with pytest.raises(UnsupportedModuleError) as info:
        parse_module(text)
    msg = str(info.value)
    assert msg.startswith(
        "<mlir text>: the module parses but has a structure juliabridge does not expect ("
    )
    assert msg.endswith("); it is not a module Reactant emits")


def test_only_brackets_nest() -> None:
    from juliabridge.stablehlo.nesting import MLIR_SKIP, max_depth

    for n in (10, 5000):  # the token walk and the numpy walk
        assert max_depth(b"X" * n, MLIR_SKIP) == 0
        assert max_depth(b"X" * n + b"([{<>}])", MLIR_SKIP) == 4
