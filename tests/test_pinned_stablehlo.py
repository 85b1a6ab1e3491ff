"""Pinned: what a loaded module may contain (docs/reliability.md "Module checks", spec §2) and
what sanitizing Reactant's text removes, as a user or an attacker meets it.

The modules are written by hand; the expectations come from the spec's allowlist (stablehlo,
chlo, func.func/call/return; jax.export's stable custom-call targets that carry no code and
have a contract) and from Reactant's printed form, not from the code under test.
"""

from __future__ import annotations

import jax
import pytest

import juliabridge
from juliabridge import UnsupportedModuleError
from juliabridge.stablehlo import parse_module

#: LAPACK kernels run, and another platform's are refused, only where JAX runs on the CPU.
CPU_ONLY = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="needs JAX on the CPU (LAPACK custom calls)"
)

T = "tensor<2xf32>"


def module(body: str, *, head: str = "module", args: str = f"%x: {T}", attrs: str = "") -> str:
    return f"""{head} {{
  func.func @main({args}) -> {T}{attrs} {{
{body}
  }}
}}"""


def test_a_plain_module_loads_with_nothing_dropped() -> None:
    m = parse_module(module(f"    %0 = stablehlo.add %x, %x : {T}\n    return %0 : {T}"))
    assert m.name is None and m.dropped_attributes == frozenset()
    assert {"func.func", "stablehlo.add", "func.return"} <= m.ops
    assert m.aliasing == {} and m.arg_shardings == {}


@pytest.mark.parametrize(
    ("op", "line"),
    [
        ("mhlo.add", '%0 = "mhlo.add"(%x, %x) : (T, T) -> T'),
        ("arith.addf", "%0 = arith.addf %x, %x : T"),
        (
            "func.constant",
            '%f = "func.constant"() {value = @main} : () -> ((T) -> T)\n'
            "    %0 = stablehlo.add %x, %x : T",
        ),
    ],
)
def test_ops_outside_stablehlo_chlo_and_func_are_refused(op: str, line: str) -> None:
    text = module(f"    {line.replace('T', T)}\n    return %0 : {T}")
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(text, backend="xla")
    msg = str(e.value)
    assert f"op(s) {op} (line 3) are not StableHLO/CHLO ops" in msg
    # Issue 50: trust=True is offered only where it changes the outcome (jaxlib's serializer
    # converts mhlo ops; arith and func.constant fail with trust=True as well).
    assert ("trust=True" in msg) == (op == "mhlo.add")
    assert "Reactant's full optimization pipeline" not in msg  # it lowers Enzyme ops only


def test_the_refusal_names_every_offender_with_its_line_in_line_order() -> None:
    # Issue 50: every op with the line of its first use (up to 32), not the first eight names.
    lines = [f'    %v{i} = "zz{9 - i}.op"(%x) : ({T}) -> {T}' for i in range(10)]
    text = module("\n".join(lines) + f"\n    return %x : {T}")
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(text)
    named = str(e.value).split("op(s) ", 1)[1].split(" are not", 1)[0]
    assert named == ", ".join(f"zz{9 - i}.op (line {3 + i})" for i in range(10))


def test_trust_admits_foreign_ops() -> None:
    text = module(f'    %0 = "mhlo.add"(%x, %x) : ({T}, {T}) -> {T}\n    return %0 : {T}')
    assert "mhlo.add" in parse_module(text, trust=True).ops


def _custom_call(target: str) -> str:
    return module(
        f"    %0 = stablehlo.custom_call @{target}(%x) : ({T}) -> {T}\n    return %0 : {T}"
    )


@pytest.mark.parametrize(
    "target", ["tpu_custom_call", "mosaic_gpu", "my_triton_kernel", "pallas_x"]
)
def test_code_carrying_custom_calls_are_refused_saying_why(target: str) -> None:
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(_custom_call(target))
    msg = str(e.value)
    assert f"target(s) {target} (the first, {target}, at line 3) are not in the allowlist" in msg
    assert "run code carried inside the module" in msg
    # Issue 50: a kernel named for a platform (tpu, gpu) is not removed by Reactant's
    # pipeline, so that advice is given only for targets that name no platform.
    platform = target in ("tpu_custom_call", "mosaic_gpu")
    assert ("Re-export the model with Reactant's full optimization pipeline" in msg) != platform
    assert ("is a kernel for" in msg) == platform


def test_an_unknown_custom_call_is_refused_without_the_code_hint() -> None:
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(_custom_call("my_kernel"))
    msg = str(e.value)
    assert "target(s) my_kernel (the first, my_kernel, at line 3) are not in the allowlist" in msg
    assert "carried inside the module" not in msg and "enzymexla" not in msg
    assert "Pass trust=True to load anyway" in msg


# ids without "enzyme": mutmut deselects tests named so (they need enzyme-ad), and these do not
@pytest.mark.parametrize(
    "target",
    [
        pytest.param("enzymexla_compile_cpu", id="xla-compile"),
        pytest.param("xla_throw", id="throw"),
    ],
)
def test_reactant_runtime_targets_get_the_reactant_hint(target: str) -> None:
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(_custom_call(target))
    assert (
        "; enzymexla_* targets exist only inside Reactant/Enzyme-JAX runtimes, so they cannot "
        "run in stock jaxlib. Pass trust=True" in str(e.value)
    )


def test_every_refused_target_is_named_sorted_with_the_first_ones_call_site() -> None:
    from juliabridge.stablehlo.policy import check_custom_calls

    with pytest.raises(UnsupportedModuleError) as e:
        check_custom_calls(
            ["zz_kernel", "aa_kernel", "mm_kernel"],
            trust=False,
            where="m.mlir",
            sites={"aa_kernel": "line 7", "zz_kernel": "line 3"},
        )
    assert str(e.value).startswith(
        "m.mlir: stablehlo.custom_call target(s) aa_kernel, mm_kernel, zz_kernel (the first, "
        "aa_kernel, at line 7) are not in the allowlist of targets stock jaxlib registers. "
    )


def test_the_admitted_kernel_targets_are_the_stable_ones_with_a_contract() -> None:
    from juliabridge.stablehlo.contracts import contract_targets
    from juliabridge.stablehlo.policy import (
        allowed_custom_calls,
        carries_code,
        check_custom_calls,
    )
    from juliabridge.support.jaxinternals import custom_call_allowlist

    admitted = allowed_custom_calls()
    assert admitted, "jaxlib's stable list shares no target with contracts.py"
    assert admitted == {
        t for t in custom_call_allowlist() & contract_targets() if not carries_code(t)
    }
    # each passes the check of a backend that calls kernels
    check_custom_calls(sorted(admitted), trust=False, where="m", lifted=False)


def test_a_stable_target_without_a_contract_is_refused_naming_the_contract_table() -> None:
    from juliabridge.stablehlo.contracts import contract_targets
    from juliabridge.stablehlo.policy import carries_code
    from juliabridge.support.jaxinternals import custom_call_allowlist

    stable = sorted(
        t for t in custom_call_allowlist() if t not in contract_targets() and not carries_code(t)
    )
    if not stable:
        pytest.skip("every stable custom-call target of this jaxlib has a contract")
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(_custom_call(stable[0]))
    msg = str(e.value)
    assert (
        f"; {stable[0]} is on jax.export's stable list, but juliabridge has no operand/result "
        "contract for it (juliabridge/stablehlo/contracts.py), and an unchecked kernel call can "
        "corrupt memory. Pass trust=True" in msg
    )


def test_a_refusal_without_a_line_number_names_no_site() -> None:
    # a call site printed without a file:line location (loc(unknown)) has no line to name
    text = module(
        f"    %0 = stablehlo.custom_call @my_kernel(%x) : ({T}) -> {T} loc(unknown)\n"
        f"    return %0 : {T}"
    )
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(text)
    assert "custom_call target(s) my_kernel are not in the allowlist of targets stock" in str(
        e.value
    )


# TPU's QR kernel: not on jax.export's list with a contract, but the lax backend lifts it.
_QR = """module {
  func.func @main(%a: tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xf32>) {
    %r:2 = "stablehlo.custom_call"(%a) {backend_config = "", call_target_name = "Qr"} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xf32>)
    return %r#0, %r#1 : tensor<3x3xf32>, tensor<3xf32>
  }
}"""


def test_a_target_the_lax_backend_lifts_loads_but_no_backend_calls_its_kernel() -> None:
    import numpy as np

    assert parse_module(_QR).custom_calls == ("Qr",)  # admitted by the load-time policy
    a = np.array([[4.0, 1.0, 2.0], [1.0, 3.0, 0.0], [2.0, 0.0, 5.0]], np.float32)
    packed, _taus = juliabridge.load_mlir(_QR, backend="lax")(a)
    r = np.linalg.qr(a.astype(np.float64), mode="r")  # R of the Householder QR, up to signs
    np.testing.assert_allclose(np.abs(np.triu(packed)), np.abs(r), rtol=1e-5, atol=1e-5)
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(_QR, backend="xla")  # would call the kernel: refused
    msg = str(e.value)
    assert "custom_call target(s) Qr (the first, Qr, at line 3) are not in the allowlist" in msg
    assert (
        "; the lax backend lifts Qr into JAX primitives, so backend='lax' (or 'auto') runs the "
        "module without calling the kernel. Pass trust=True" in msg
    )


def test_trust_admits_unknown_custom_calls() -> None:
    assert parse_module(_custom_call("my_kernel"), trust=True).custom_calls == ("my_kernel",)


# --- sanitize ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ('module @"reactant_#3\\22abc"', "reactant_#3\\22abc"),
        ("module @reactant_loss", "reactant_loss"),
        ('module @"reactant_loss"', "reactant_loss"),
    ],
)
def test_reactant_module_names_are_removed_and_reported(header: str, name: str) -> None:
    m = parse_module(module(f"    return %x : {T}", head=header))
    assert m.name == name
    assert "module @" not in m.text and "reactant" not in m.text


def test_reactant_analysis_attributes_are_dropped_everywhere_and_reported() -> None:
    text = f"""module attributes {{enzymexla.foo = 1 : i64, mhlo.num_partitions = 1 : i64}} {{
  func.func @main(%x: {T} {{enzymexla.memory_effects = [], mhlo.sharding = "{{replicated}}",
      tf.aliasing_output = 0 : i32, jax.buffer_donor = true}})
      -> ({T} {{enzyme.res = 1 : i64}}) attributes {{enzymexla.fn = 2 : i64}} {{
    %0 = stablehlo.add %x, %x {{enzymexla.op = 3 : i64}} : {T}
    return %0 : {T}
  }}
}}"""
    m = parse_module(text)
    assert m.dropped_attributes == {
        "enzymexla.foo",
        "enzymexla.memory_effects",
        "mhlo.sharding",
        "tf.aliasing_output",
        "jax.buffer_donor",
        "enzyme.res",
        "enzymexla.fn",
        "enzymexla.op",
    }
    assert m.aliasing == {0: 0} and m.arg_shardings == {0: '"{replicated}"'}
    assert "enzyme" not in m.text and "aliasing" not in m.text
    assert "mhlo.num_partitions" in m.text  # valid StableHLO: kept


def test_aliasing_and_shardings_are_recorded_by_argument_index_of_main_only() -> None:
    text = f"""module {{
  func.func private @f(%a: {T} {{tf.aliasing_output = 0 : i32}}) -> {T} {{
    return %a : {T}
  }}
  func.func @main(%x: {T}, %y: {T} {{tf.aliasing_output = 1 : i32, mhlo.sharding = "{{maximal device=0}}"}})
      -> ({T}, {T}) {{
    %0 = func.call @f(%x) : ({T}) -> {T}
    return %0, %y : {T}, {T}
  }}
}}"""
    m = parse_module(text)
    assert m.aliasing == {1: 1}
    assert m.arg_shardings == {1: '"{maximal device=0}"'}
    assert "tf.aliasing_output" in m.dropped_attributes


def test_argument_attributes_that_are_not_reactant_only_are_kept_with_their_values() -> None:
    text = f"""module {{
  func.func @main(%x: {T} {{mhlo.custom = 7 : i64, enzymexla.x = 1 : i64}}) -> {T} {{
    return %x : {T}
  }}
}}"""
    m = parse_module(text, trust=True)
    assert "mhlo.custom = 7 : i64" in m.text and "enzymexla" not in m.text
    assert m.dropped_attributes == {"enzymexla.x"}


# --- op contracts (stablehlo/contracts.py) ------------------------------------------------------
#
# Result types below are written from LAPACK's and cuSOLVER's documented outputs (getrf: LU and
# min(m, n) pivots and an info; geqrf: QR and min(m, n) reflectors; ...), not from the contracts.

F, D = "f32", "f64"
C, Z = "complex<f32>", "complex<f64>"


def ty(dims: str, et: str) -> str:
    return f"tensor<{dims + 'x' if dims else ''}{et}>"


def call_module(
    target: str,
    ins: list[str],
    outs: list[str],
    cfg: str | None = "{}",
    extra: str = "",
) -> str:
    """@main: one custom call of `target` on its arguments, its results returned (line 3)."""
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(ins))
    res = "%r" if len(outs) == 1 else f"%r:{len(outs)}"
    refs = ["%r"] if len(outs) == 1 else [f"%r#{i}" for i in range(len(outs))]
    attrs = ", ".join(a for a in (f"mhlo.backend_config = {cfg}" if cfg else "", extra) if a)
    operands = ", ".join(f"%a{i}" for i in range(len(ins)))
    sig = f"({', '.join(ins)}) -> ({', '.join(outs)})"
    return (
        f"module {{\n  func.func @main({args}) -> ({', '.join(outs)}) {{\n"
        f"    {res} = stablehlo.custom_call @{target}({operands}) {{{attrs}}} : {sig}\n"
        f"    return {', '.join(refs)} : {', '.join(outs)}\n  }}\n}}\n"
    )


def _ui8(**chars: str) -> str:
    return "{" + ", ".join(f"{k} = {ord(v)} : ui8" for k, v in sorted(chars.items())) + "}"


I32 = ty("", "i32")
G = [ty("4x3", F), ty("3", "i32"), I32]  # getrf's results for a 4x3 f32 operand
TRSM = _ui8(diag="N", side="R", trans_x="N", uplo="L")
ALIAS_1 = (
    "output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], "
    "operand_index = 1, operand_tuple_indices = []>]"
)
GESVD = "{compute_uv = true, full_matrices = false, transposed = TR}"

#: (target, operand types, result types, FFI attributes, other attributes): what each kernel
#: writes for these operands, as its documentation says.
VALID_CALLS = {
    "getrf": ("lapack_sgetrf_ffi", [ty("4x3", F)], [ty("4x3", F), ty("3", "i32"), I32], "{}", ""),
    "getrf-batch": (
        "lapack_dgetrf_ffi",
        [ty("2x3x4", D)],
        [ty("2x3x4", D), ty("2x3", "i32"), ty("2", "i32")],
        "{}",
        "",
    ),
    "geqrf": ("lapack_cgeqrf_ffi", [ty("4x3", C)], [ty("4x3", C), ty("3", C)], "{}", ""),
    "getrf-one-row": (
        "lapack_sgetrf_ffi",
        [ty("1x3", F)],
        [ty("1x3", F), ty("1", "i32"), I32],
        "{}",
        "",
    ),
    "orgqr-no-reflectors": (
        "lapack_sorgqr_ffi",
        [ty("4x3", F), ty("0", F)],
        [ty("4x3", F)],
        "{}",
        "",
    ),
    "gehrd-low-is-high": (
        "lapack_sgehrd_ffi",
        [ty("3x3", F)],
        [ty("3x3", F), ty("2", F), I32],
        "{high = 2 : i32, low = 2 : i32}",
        "",
    ),
    "orgqr": ("lapack_sorgqr_ffi", [ty("4x3", F), ty("2", F)], [ty("4x3", F)], "{}", ""),
    "ungqr": ("lapack_zungqr_ffi", [ty("3x3", Z), ty("3", Z)], [ty("3x3", Z)], "{}", ""),
    "potrf": ("lapack_zpotrf_ffi", [ty("3x3", Z)], [ty("3x3", Z), I32], _ui8(uplo="U"), ""),
    "gesdd-A": (
        "lapack_sgesdd_ffi",
        [ty("4x3", F)],
        [ty("4x3", F), ty("3", F), ty("4x4", F), ty("3x3", F), I32],
        _ui8(mode="A"),
        "",
    ),
    "gesdd-S": (
        "lapack_cgesdd_ffi",
        [ty("4x3", C)],
        [ty("4x3", C), ty("3", F), ty("4x3", C), ty("3x3", C), I32],
        _ui8(mode="S"),
        "",
    ),
    "gesdd-N": (
        "lapack_dgesdd_ffi",
        [ty("3x4", D)],
        [ty("3x4", D), ty("3", D), ty("3x3", D), ty("3x4", D), I32],
        _ui8(mode="N"),
        "",
    ),
    "heevd": (
        "lapack_cheevd_ffi",
        [ty("3x3", C)],
        [ty("3x3", C), ty("3", F), I32],
        _ui8(mode="V", uplo="L"),
        "",
    ),
    "geev-real": (
        "lapack_sgeev_ffi",
        [ty("3x3", F)],
        [ty("3", F), ty("3", F), ty("3x3", C), ty("3x3", C), I32],
        _ui8(compute_left="N", compute_right="V"),
        "",
    ),
    "geev-complex": (
        "lapack_zgeev_ffi",
        [ty("3x3", Z)],
        [ty("3", Z), ty("3x3", Z), ty("3x3", Z), I32],
        _ui8(compute_left="V", compute_right="N"),
        "",
    ),
    "gees-real": (
        "lapack_dgees_ffi",
        [ty("3x3", D)],
        [ty("3x3", D), ty("3x3", D), ty("3", D), ty("3", D), I32, I32],
        _ui8(mode="V", sort="N"),
        "",
    ),
    "gees-complex": (
        "lapack_cgees_ffi",
        [ty("3x3", C)],
        [ty("3x3", C), ty("3x3", C), ty("3", C), I32, I32],
        _ui8(mode="N", sort="N"),
        "",
    ),
    "gehrd": (
        "lapack_sgehrd_ffi",
        [ty("3x3", F)],
        [ty("3x3", F), ty("2", F), I32],
        "{high = 3 : i32, low = 1 : i32}",
        "",
    ),
    "hetrd": (
        "lapack_chetrd_ffi",
        [ty("3x3", C)],
        [ty("3x3", C), ty("3", F), ty("2", F), ty("2", C), I32],
        _ui8(uplo="L"),
        "",
    ),
    "trsm-right": (
        "lapack_strsm_ffi",
        [ty("3x3", F), ty("2x3", F)],
        [ty("2x3", F)],
        TRSM,
        ALIAS_1,
    ),
    "trsm-left": (
        "lapack_dtrsm_ffi",
        [ty("2x2", D), ty("2x3", D)],
        [ty("2x3", D)],
        _ui8(diag="U", side="L", trans_x="C", uplo="U"),
        "",
    ),
    "gtsv": (
        "lapack_sgtsv_ffi",
        [ty("3", F), ty("3", F), ty("3", F), ty("3x2", F)],
        [ty("3", F), ty("3", F), ty("3", F), ty("3x2", F), I32],
        "{}",
        'backend_config = ""',
    ),
    "cusolver-getrf": (
        "cusolver_getrf_ffi",
        [ty("3x3", F)],
        [ty("3x3", F), ty("3", "i32"), I32],
        "{}",
        "",
    ),
    "cusolver-potrf": (
        "cusolver_potrf_ffi",
        [ty("3x3", F)],
        [ty("3x3", F), I32],
        "{lower = true}",
        "",
    ),
    "hipsolver-syevd": (
        "hipsolver_syevd_ffi",
        [ty("3x3", D)],
        [ty("3x3", D), ty("3", D), I32],
        "{algorithm = 2 : ui8, lower = false}",
        "",
    ),
    "gesvd-gpu": (
        "cusolver_gesvd_ffi",
        [ty("4x3", F)],
        [ty("4x3", F), ty("3", F), ty("4x3", F), ty("3x3", F), I32],
        GESVD.replace("TR", "false"),
        "",
    ),
    "gesvd-gpu-transposed": (
        "cusolver_gesvd_ffi",
        [ty("3x4", F)],
        [ty("3x4", F), ty("3", F), ty("3x4", F), ty("3x3", F), I32],
        GESVD.replace("TR", "true"),
        "",
    ),
    "gesvd-gpu-full": (
        "cusolver_gesvd_ffi",
        [ty("4x3", F)],
        [ty("4x3", F), ty("3", F), ty("4x4", F), ty("3x3", F), I32],
        "{compute_uv = true, full_matrices = true, transposed = false}",
        "",
    ),
    "gesvd-gpu-values": (
        "cusolver_gesvd_ffi",
        [ty("4x3", F)],
        [ty("4x3", F), ty("3", F), ty("", F), ty("", F), I32],
        "{compute_uv = false, full_matrices = false, transposed = false}",
        "",
    ),
    "gesvdj-gpu": (
        "cusolver_gesvdj_ffi",
        [ty("4x3", C)],
        [ty("4x3", C), ty("3", F), ty("4x3", C), ty("3x3", C), I32],
        "{compute_uv = true, full_matrices = false}",
        "",
    ),
    "gesvdj-gpu-full": (
        "hipsolver_gesvdj_ffi",
        [ty("4x3", F)],
        [ty("4x3", F), ty("3", F), ty("4x4", F), ty("3x3", F), I32],
        "{compute_uv = true, full_matrices = true}",
        "",
    ),
    "pivots-same-length": (
        "cu_lu_pivots_to_permutation",
        [ty("2x3", "i32")],
        [ty("2x3", "i32")],
        "{}",
        "",
    ),
    "pivots-longer": ("hip_lu_pivots_to_permutation", [ty("3", "i32")], [ty("5", "i32")], "{}", ""),
    "threefry": (
        "cu_threefry2x32_ffi",
        [ty("5", "ui32")] * 4,
        [ty("5", "ui32")] * 2,
        "{}",
        "",
    ),
    "gtsv2": (
        "cusparse_gtsv2_ffi",
        [ty("3", F), ty("3", F), ty("3", F), ty("3x2", F)],
        [ty("3x2", F)],
        "{}",
        "",
    ),
    "sharding": (
        "Sharding",
        [ty("2x3", F)],
        [ty("2x3", F)],
        None,
        'mhlo.sharding = "{replicated}"',
    ),
    "sharding-api2-empty-config": (
        "Sharding",
        [ty("2", F)],
        [ty("2", F)],
        '""',
        "api_version = 2 : i32",
    ),
    "sharding-empty-dict": ("Sharding", [ty("2", F)], [ty("2", F)], "{}", 'backend_config = "x"'),
    "getrf-api1-layouts": (
        "lapack_sgetrf_ffi",
        [ty("4x3", F)],
        G,
        "{}",
        "api_version = 1 : i32, operand_layouts = [dense<[1, 0]> : tensor<2xindex>], "
        "result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, "
        "dense<> : tensor<0xindex>], called_computations = []",
    ),
    "getrf-api4-plain-dict": (
        "lapack_sgetrf_ffi",
        [ty("4x3", F)],
        G,
        '""',
        "api_version = 4 : i32, backend_config = {}",
    ),
}


@pytest.mark.parametrize("name", sorted(VALID_CALLS))
def test_custom_calls_declaring_what_the_kernel_writes_are_admitted(name: str) -> None:
    target, ins, outs, cfg, extra = VALID_CALLS[name]
    assert parse_module(call_module(target, ins, outs, cfg, extra)).custom_calls == (target,)


def refusal(text: str, **kw: object) -> str:
    """The message of the ModuleContractError that loading `text` raises."""
    from juliabridge.errors import ModuleContractError

    with pytest.raises(ModuleContractError) as e:
        juliabridge.load_mlir(text, backend="xla", **kw)  # type: ignore[arg-type]
    return str(e.value)


def test_a_result_smaller_than_the_kernel_writes_is_refused_naming_both() -> None:
    # the heap overflow: getrf writes a 64x64 LU into a buffer declared 2x2
    text = call_module("lapack_sgetrf_ffi", [ty("64x64", F)], [ty("2x2", F), ty("64", "i32"), I32])
    msg = refusal(text)
    assert msg.startswith("<mlir text>, line 3: stablehlo.custom_call @lapack_sgetrf_ffi ")
    assert (
        "declares results (tensor<2x2xf32>, tensor<64xi32>, tensor<i32>); for these operands "
        "the kernel writes (tensor<64x64xf32>, tensor<64xi32>, tensor<i32>); running it could "
        "corrupt memory or crash the process, so the module is refused. Export it again from "
        "JAX/Reactant, or pass trust=True if you wrote it yourself." in msg
    )


def test_a_refused_call_without_a_line_names_its_location() -> None:
    text = call_module("lapack_sgetrf_ffi", [ty("3x3", F)], [ty("2x2", F), ty("3", "i32"), I32])
    text = text.replace(
        ") -> (tensor<2x2xf32>, tensor<3xi32>, tensor<i32>)\n",
        ") -> (tensor<2x2xf32>, tensor<3xi32>, tensor<i32>) loc(unknown)\n",
        1,
    )
    assert refusal(text).startswith("<mlir text> (loc(unknown)): stablehlo.custom_call @lapack_")


@pytest.mark.parametrize(
    ("target", "ins", "outs", "cfg", "extra", "expected"),
    [
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", F)],
            [ty("?x3", F), *G[1:]],
            "{}",
            "",
            "expected a statically shaped tensor, found tensor<?x3xf32>",
        ),
        (
            "lapack_sgetrf_ffi",
            ["!stablehlo.token"],
            G,
            "{}",
            "",
            "expected a statically shaped tensor, found !stablehlo.token",
        ),
        ("lapack_sgetrf_ffi", [ty("4x3", F)] * 2, G, "{}", "", "takes 1 operand(s), found 2"),
        (
            "lapack_sgetrf_ffi",
            [ty("4", F)],
            G,
            "{}",
            "",
            "operand 0 must be a (batch of) matrices, found rank 1",
        ),
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", D)],
            G,
            "{}",
            "",
            "operand 0 has element type f64; this target takes f32",
        ),
        (
            "cusolver_getrf_ffi",
            [ty("4x3", "i32")],
            G,
            "{}",
            "",
            "operand 0 has element type i32; expected f32, f64 or complex",
        ),
        ("lapack_sgetrf_ffi", [ty("0x3", F)], G, "{}", "", "operand 0 is an empty matrix (0x3)"),
        ("lapack_sgetrf_ffi", [ty("3x0", F)], G, "{}", "", "operand 0 is an empty matrix (3x0)"),
        (
            "lapack_spotrf_ffi",
            [ty("4x3", F)],
            [ty("4x3", F), I32],
            _ui8(uplo="L"),
            "",
            "operand 0 must be square, found 4x3",
        ),
        (
            "lapack_sorgqr_ffi",
            [ty("4x3", F), ty("2", D)],
            [ty("4x3", F)],
            "{}",
            "",
            "tau must be f32 of shape batch + [k], found (2,) f64",
        ),
        (
            "lapack_sorgqr_ffi",
            [ty("4x3", F), ty("2x2", F)],
            [ty("4x3", F)],
            "{}",
            "",
            "tau must be f32 of shape batch + [k], found (2, 2) f32",
        ),
        (
            "lapack_sorgqr_ffi",
            [ty("2x4x3", F), ty("3x2", F)],
            [ty("2x4x3", F)],
            "{}",
            "",
            "tau must be f32 of shape batch + [k], found (3, 2) f32",
        ),
        (
            "lapack_sorgqr_ffi",
            [ty("4x3", F), ty("4", F)],
            [ty("4x3", F)],
            "{}",
            "",
            "needs rows >= cols >= len(tau), found 4 x 3 with 4",
        ),
        (
            "lapack_sorgqr_ffi",
            [ty("3x4", F), ty("2", F)],
            [ty("3x4", F)],
            "{}",
            "",
            "needs rows >= cols >= len(tau), found 3 x 4 with 2",
        ),
        (
            "lapack_sgehrd_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), ty("2", F), I32],
            "{high = 3 : i32, low = 0 : i32}",
            "",
            "needs 1 <= low <= high <= 3, found low=0, high=3",
        ),
        (
            "lapack_sgehrd_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), ty("2", F), I32],
            "{high = 1 : i32, low = 2 : i32}",
            "",
            "needs 1 <= low <= high <= 3, found low=2, high=1",
        ),
        (
            "lapack_sgehrd_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), ty("2", F), I32],
            "{high = 4 : i32, low = 1 : i32}",
            "",
            "needs 1 <= low <= high <= 3, found low=1, high=4",
        ),
        (
            "lapack_sgehrd_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), ty("2", F), I32],
            "{high = 3 : i32, low = 1 : i64}",
            "",
            "attribute low must be an i32, found i64",
        ),
        (
            "lapack_spotrf_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), I32],
            "{uplo = 88 : ui8}",
            "",
            "attribute uplo = 88 (ui8); allowed: ['L', 'U']",
        ),
        (
            "lapack_spotrf_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), I32],
            "{uplo = 76 : i32}",
            "",
            "attribute uplo = 76 (i32); allowed: ['L', 'U']",
        ),
        (
            "cusolver_syevd_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), ty("3", F), I32],
            "{algorithm = 3 : ui8, lower = true}",
            "",
            "attribute algorithm = 3 (ui8); allowed: [0, 1, 2]",
        ),
        (
            "cusolver_potrf_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), I32],
            '{lower = "yes"}',
            "",
            "attribute lower = 'yes' (str); allowed: [False, True]",
        ),
        (
            "cusolver_potrf_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), I32],
            "{lower = 1.0 : f32}",
            "",
            "attribute lower = 1.0 (float); allowed: [False, True]",
        ),
        (
            "cusolver_potrf_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), I32],
            "{lower = [1]}",
            "",
            "attribute lower = '[1]' (other); allowed: [False, True]",
        ),
        (
            "lapack_spotrf_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), I32],
            "{junk = 1 : i32, uplo = 76 : ui8}",
            "",
            "FFI attributes ['junk', 'uplo']; the kernel binds exactly ['uplo']",
        ),
        (
            "lapack_spotrf_ffi",
            [ty("3x3", F)],
            [ty("3x3", F), I32],
            "{}",
            "",
            "FFI attributes []; the kernel binds exactly ['uplo']",
        ),
        (
            "lapack_strsm_ffi",
            [ty("3x3", D), ty("2x3", F)],
            [ty("2x3", D)],
            TRSM,
            "",
            "the triangular operand must be f32 of shape [3, 3]",
        ),
        (
            "lapack_strsm_ffi",
            [ty("2x2", F), ty("2x3", F)],
            [ty("2x3", F)],
            TRSM,
            "",
            "the triangular operand must be f32 of shape [3, 3]",
        ),
        (
            "lapack_strsm_ffi",
            [ty("3x3", F), ty("2x3", F)],
            [ty("2x3", F)],
            TRSM.replace("82", "76"),
            "",
            "the triangular operand must be f32 of shape [2, 2]",
        ),
        (
            "lapack_sgtsv_ffi",
            [ty("2", F), ty("3", F), ty("3", F), ty("3x2", F)],
            [ty("3", F), ty("3", F), ty("3", F), ty("3x2", F), I32],
            "{}",
            "",
            "operand 0 (a diagonal) must be f32 of shape [3]",
        ),
        (
            "lapack_sgtsv_ffi",
            [ty("3", F), ty("3", F), ty("3", D), ty("3x2", F)],
            [ty("3", F), ty("3", F), ty("3", F), ty("3x2", F), I32],
            "{}",
            "",
            "operand 2 (a diagonal) must be f32 of shape [3]",
        ),
        (
            "cusparse_gtsv2_ffi",
            [ty("3", F), ty("4", F), ty("3", F), ty("3x2", F)],
            [ty("3x2", F)],
            "{}",
            "",
            "operand 1 (a diagonal) must be f32 of shape [3]",
        ),
        (
            "cusolver_gesvd_ffi",
            [ty("3x4", F)],
            [ty("3x4", F), ty("3", F), ty("3x3", F), ty("4x4", F), I32],
            GESVD.replace("TR", "false"),
            "",
            "needs rows >= cols (after `transposed`)",
        ),
        (
            "cu_lu_pivots_to_permutation",
            [ty("2x3", "i32")],
            [ty("2x2", "i32")],
            "{}",
            "",
            "the permutation must be i32 of shape [2] + [p], p >= 3",
        ),
        (
            "cu_lu_pivots_to_permutation",
            [ty("2x3", "i32")],
            [ty("3x3", "i32")],
            "{}",
            "",
            "the permutation must be i32 of shape [2] + [p], p >= 3",
        ),
        (
            "cu_lu_pivots_to_permutation",
            [ty("3", "i32")],
            [ty("3", "i64")],
            "{}",
            "",
            "the permutation must be i32 of shape [] + [p], p >= 3",
        ),
        (
            "cu_lu_pivots_to_permutation",
            [ty("2x3", "i32")],
            [ty("6", "i32")],
            "{}",
            "",
            "the permutation must be i32 of shape [2] + [p], p >= 3",
        ),
        (
            "cu_lu_pivots_to_permutation",
            [ty("3", F)],
            [ty("3", "i32")],
            "{}",
            "",
            "pivots must be i32 of shape batch + [k]",
        ),
        (
            "cu_lu_pivots_to_permutation",
            [I32],
            [ty("3", "i32")],
            "{}",
            "",
            "pivots must be i32 of shape batch + [k]",
        ),
        (
            "cu_threefry2x32_ffi",
            [ty("5", "ui32")] * 3 + [ty("4", "ui32")],
            [ty("5", "ui32")] * 2,
            "{}",
            "",
            "all four operands must be ui32 of one shape (JAX broadcasts them)",
        ),
        (
            "cu_threefry2x32_ffi",
            [ty("5", "i32")] * 4,
            [ty("5", "i32")] * 2,
            "{}",
            "",
            "all four operands must be ui32 of one shape (JAX broadcasts them)",
        ),
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", F)],
            G,
            "{}",
            "api_version = 2 : i32",
            "api_version 2; this FFI target needs 4 (or the dictionary form)",
        ),
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", F)],
            G,
            "{}",
            'backend_config = "x"',
            "needs exactly one dictionary of FFI attributes (mhlo.backend_config)",
        ),
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", F)],
            G,
            None,
            "",
            "needs exactly one dictionary of FFI attributes (mhlo.backend_config)",
        ),
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", F)],
            G,
            '"x"',
            "",
            "needs exactly one dictionary of FFI attributes (mhlo.backend_config)",
        ),
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", F)],
            G,
            "{}",
            "api_version = 4 : i32, backend_config = {}",
            "needs exactly one dictionary of FFI attributes (mhlo.backend_config)",
        ),
        (
            "lapack_sgetrf_ffi",
            [ty("4x3", F)],
            G,
            "{}",
            "api_version = 3 : i32",
            "api_version 3; this FFI target needs 4 (or the dictionary form)",
        ),
        (
            "Sharding",
            [ty("2", F)],
            [ty("2", F)],
            None,
            "api_version = 3 : i32",
            "takes no backend configuration",
        ),
        ("Sharding", [ty("2", F)], [ty("2", F)], '"x"', "", "takes no backend configuration"),
        ("Sharding", [ty("2", F)] * 2, [ty("2", F)], None, "", "takes 1 operand(s), found 2"),
        (
            "Sharding",
            [ty("2", F)],
            [ty("2", F)],
            "{a = 1 : i32}",
            "",
            "takes no backend configuration",
        ),
        (
            "Sharding",
            [ty("2", F)],
            [ty("2", F)],
            None,
            "api_version = 4 : i32",
            "takes no backend configuration",
        ),
        (
            "Sharding",
            [ty("2", F)],
            [ty("3", F)],
            None,
            "",
            "declares results (tensor<3xf32>); for "
            "these operands the kernel writes (tensor<2xf32>)",
        ),
        (
            "lapack_sgesdd_ffi",
            [ty("4x3", F)],
            [ty("4x3", F), ty("3", F), ty("4x4", F), ty("3x3", F), I32],
            _ui8(mode="S"),
            "",
            "declares results (tensor<4x3xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<3x3xf32>, "
            "tensor<i32>); for these operands the kernel writes (tensor<4x3xf32>, tensor<3xf32>, "
            "tensor<4x3xf32>, tensor<3x3xf32>, tensor<i32>)",
        ),
    ],
)
def test_a_call_breaking_its_kernels_contract_is_refused_saying_what_it_expects(
    target: str, ins: list[str], outs: list[str], cfg: str | None, extra: str, expected: str
) -> None:
    msg = refusal(call_module(target, ins, outs, cfg, extra))
    assert msg.startswith(f"<mlir text>, line 3: stablehlo.custom_call @{target} {expected}; ")
    assert "running it could corrupt memory or crash the process" in msg


def test_a_custom_call_that_calls_a_computation_is_refused() -> None:
    text = call_module("lapack_sgetrf_ffi", [ty("4x3", F)], G, "{}", "called_computations = [@h]")
    helper = "  func.func private @h(%h: tensor<f32>) -> tensor<f32> {\n    return %h : tensor<f32>\n  }\n"
    text = text[: text.rindex("}")] + helper + "}\n"
    msg = refusal(text)
    assert msg.startswith("<mlir text>, line 3: stablehlo.custom_call @lapack_sgetrf_ffi calls no ")


@CPU_ONLY
def test_a_valid_lapack_call_runs_and_matches_numpy() -> None:
    import jax
    import numpy as np

    text = call_module("lapack_dpotrf_ffi", [ty("3x3", D)], [ty("3x3", D), I32], _ui8(uplo="L"))
    a = np.array([[4.0, 2.0, 0.4], [2.0, 5.0, 1.0], [0.4, 1.0, 3.0]])
    with jax.enable_x64(True):
        factor, info = juliabridge.load_mlir(text, backend="xla")(a)
    # no layouts given: row-major buffers, so LAPACK's column-major lower factor lands in the
    # upper triangle, transposed, and the strict lower triangle keeps the input
    f = np.asarray(factor)
    np.testing.assert_allclose(np.triu(f).T, np.linalg.cholesky(a), rtol=1e-12)
    np.testing.assert_array_equal(np.tril(f, -1), np.tril(a, -1))
    assert int(info) == 0


@CPU_ONLY
def test_a_kernel_of_another_platform_is_refused_at_load_naming_it() -> None:
    text = call_module("cusolver_getrf_ffi", [ty("3x3", F)], [ty("3x3", F), ty("3", "i32"), I32])
    with pytest.raises(UnsupportedModuleError) as e:
        juliabridge.load_mlir(text, backend="xla")
    assert str(e.value) == (
        "<mlir text>: custom call(s) cusolver_getrf_ffi run only on cuda, and JAX's default "
        "platform here is cpu; the module was lowered for another platform. Load it where that "
        "platform is available (e.g. JAX_PLATFORMS=cuda), or export the model again for this "
        "platform."
    )


def test_platforms_of_the_contract_targets() -> None:
    from juliabridge.stablehlo.contracts import contract_targets, target_platforms

    assert target_platforms("lapack_zgesdd_ffi") == {"cpu"}
    assert target_platforms("lapack_cungqr_ffi") == {"cpu"}
    assert target_platforms("hipsolver_getrf_ffi") == {"rocm"}
    assert target_platforms("cusparse_gtsv2_ffi") == {"cuda"}
    assert target_platforms("Sharding") == {"cpu", "cuda", "rocm", "tpu"}
    assert target_platforms("my_kernel") == frozenset()
    # four LAPACK precisions of each CPU family (s, d, c, z), the orthogonal ones by their
    # complex names for c and z
    targets = contract_targets()
    for fam in ("getrf", "geqrf", "potrf", "gesdd", "geev", "gees", "gehrd", "trsm", "gtsv"):
        assert {f"lapack_{p}{fam}_ffi" for p in "sdcz"} <= targets
    assert {"lapack_sorgqr_ffi", "lapack_dorgqr_ffi", "lapack_cungqr_ffi"} <= targets
    assert {"lapack_ssyevd_ffi", "lapack_zheevd_ffi", "lapack_dsytrd_ffi"} <= targets
    assert "lapack_corgqr_ffi" not in targets and "lapack_sheevd_ffi" not in targets


# --- fft, collectives, host I/O -------------------------------------------------------------------


def fft_module(kind: str, operand: str, length: str, result: str) -> str:
    return f"""module {{
  func.func @main(%x: {operand}) -> {result} {{
    %0 = stablehlo.fft %x, type = {kind}, length = [{length}] : ({operand}) -> {result}
    return %0 : {result}
  }}
}}"""


@pytest.mark.parametrize(
    ("kind", "operand", "length", "result", "ref"),
    [
        ("FFT", "tensor<2x4xcomplex<f32>>", "4", "tensor<2x4xcomplex<f32>>", "fft"),
        ("IFFT", "tensor<2x4xcomplex<f32>>", "2, 4", "tensor<2x4xcomplex<f32>>", "ifft2"),
        ("RFFT", "tensor<3x8xf32>", "8", "tensor<3x5xcomplex<f32>>", "rfft"),
        ("IRFFT", "tensor<3x5xcomplex<f32>>", "8", "tensor<3x8xf32>", "irfft"),
    ],
)
def test_ffts_of_the_declared_length_run_and_match_numpy(
    kind: str, operand: str, length: str, result: str, ref: str
) -> None:
    import numpy as np

    shape = tuple(int(d) for d in operand[len("tensor<") :].split("x")[:2])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    if "complex" in operand:
        x = (x + 1j * rng.standard_normal(shape)).astype(np.complex64)
    fn = juliabridge.load_mlir(fft_module(kind, operand, length, result), backend="xla")
    want = {
        "fft": lambda: np.fft.fft(x),
        "ifft2": lambda: np.fft.ifft2(x),
        "rfft": lambda: np.fft.rfft(x),
        "irfft": lambda: np.fft.irfft(x, n=8),
    }[ref]()
    np.testing.assert_allclose(np.asarray(fn(x)[0]), want, rtol=1e-4, atol=1e-4)


_FFT_ABORT = "; the FFT library would abort the process. Export the module again."


@pytest.mark.parametrize(
    ("kind", "operand", "length", "result", "expected"),
    [
        (
            "FFT",
            "tensor<4xcomplex<f32>>",
            "3",
            "tensor<4xcomplex<f32>>",
            "FFT with fft_length [3] takes [3] and gives [3], found [4] complex<f32> -> [4] "
            "complex<f32>",
        ),
        (
            "IFFT",
            "tensor<2x4xcomplex<f32>>",
            "4, 4",
            "tensor<2x4xcomplex<f32>>",
            "IFFT with fft_length [4, 4] takes [4, 4] and gives [4, 4], found [2, 4] complex<f32> "
            "-> [2, 4] complex<f32>",
        ),
    ],
)
def test_an_fft_whose_length_is_not_the_operands_is_refused(
    kind: str, operand: str, length: str, result: str, expected: str
) -> None:
    from juliabridge.errors import MLIRParseError

    try:
        msg = refusal(fft_module(kind, operand, length, result))
    except MLIRParseError:
        pytest.fail("expected the contract, not MLIR's verifier, to refuse this one")
    assert msg == f"<mlir text>, line 3: stablehlo.fft {expected}{_FFT_ABORT}"


_ALL_REDUCE = """module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<GROUPS> : tensor<SHAPExi64>} : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""
_PERMUTE = """module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<PAIRS> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""


def test_collectives_on_the_one_device_run_and_others_are_refused_naming_the_ids() -> None:
    import numpy as np

    x = np.arange(4, dtype=np.float32)
    one = _ALL_REDUCE.replace("GROUPS", "[[0]]").replace("SHAPE", "1x1")
    np.testing.assert_array_equal(np.asarray(juliabridge.load_mlir(one, backend="xla")(x)[0]), x)
    padded = _ALL_REDUCE.replace("GROUPS", "[[0, -1]]").replace("SHAPE", "1x2")
    assert parse_module(padded).ops >= {"stablehlo.all_reduce"}
    for text, ids in [
        (_ALL_REDUCE.replace("GROUPS", "[[1, 0]]").replace("SHAPE", "1x2"), "[0, 1]"),
        (_PERMUTE.replace("PAIRS", "[[0, 1]]"), "[0, 1]"),
    ]:
        name = "all_reduce" if "all_reduce" in text else "collective_permute"
        msg = refusal(text)
        assert msg == (
            f"<mlir text>, line 3: stablehlo.{name} exchanges data with other devices (ids "
            f"{ids}), but juliabridge runs a module as one single-device program; it would fail "
            "or wait forever. Export the model without explicit collectives (shardings are fine)."
        )
    assert parse_module(_PERMUTE.replace("PAIRS", "[[0, 0]]")).ops >= {
        "stablehlo.collective_permute"
    }


def test_host_io_is_refused_naming_the_op() -> None:
    text = """module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %t = stablehlo.create_token : !stablehlo.token
    %i:2 = "stablehlo.infeed"(%t) {infeed_config = "", layout = [[0]]} : (!stablehlo.token) -> (tensor<4xf32>, !stablehlo.token)
    return %i#0 : tensor<4xf32>
  }
}"""
    assert refusal(text) == (
        "<mlir text>, line 4: stablehlo.infeed waits for data from the host or another program, "
        "which never comes when juliabridge runs the module (the call would hang); export the "
        "model without host I/O"
    )


def test_the_contract_table_builders_give_each_precision_a_cpu_contract() -> None:
    # CONTRACTS is built at import, which mutmut attributes to no test of its own: the builders
    # are called here again, as the table calls them
    from juliabridge.stablehlo import contracts

    def rule(call: object, outs: object) -> None:
        return None

    four = contracts._lapack("getrf", 1, {}, rule)
    assert sorted(four) == [f"lapack_{p}getrf_ffi" for p in "cdsz"]
    assert {c.platforms for c in four.values()} == {frozenset({"cpu"})}
    assert {(c.n_operands, c.rule, c.typed_ffi) for c in four.values()} == {(1, rule, True)}
    named = contracts._lapack_named({"s": "syevd", "z": "heevd"}, 2, {"uplo": int}, rule)
    assert sorted(named) == ["lapack_ssyevd_ffi", "lapack_zheevd_ffi"]
    assert {c.platforms for c in named.values()} == {frozenset({"cpu"})}
    assert {(c.n_operands, c.rule) for c in named.values()} == {(2, rule)}
    assert contracts._char("L", "U") == {("ui8", 76), ("ui8", 85)}

    # exact(): the rule admits exactly the one list of result types its function gives
    def _writes(call: contracts.Call) -> list[tuple[tuple[int, ...], str]]:
        return [(call.operands[0][0], "f32"), ((), "i32")]

    exact = contracts.exact(_writes)
    assert exact.__name__ == "_writes"
    call = contracts.Call((((2, 3), "f32"),), {}, None)
    exact(call, [((2, 3), "f32"), ((), "i32")])
    with pytest.raises(contracts.Broken) as e:
        exact(call, [((2, 2), "f32"), ((), "i32")])
    assert str(e.value) == (
        "declares results (tensor<2x2xf32>, tensor<i32>); for these operands the kernel writes "
        "(tensor<2x3xf32>, tensor<i32>)"
    )


def test_a_target_a_backend_registers_as_lifted_is_admitted_by_the_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from juliabridge.stablehlo import lifted_custom_calls as lifted
    from juliabridge.stablehlo import policy

    # the lax backend registered its LAPACK targets when juliabridge was imported
    assert "lapack_dgetrf_ffi" in lifted.lifted_targets()
    monkeypatch.setattr(lifted, "_LIFTED", set(lifted.lifted_targets()))
    assert "jb_example_lifted_target" not in policy.admitted_lifted_targets()
    lifted.register_lifted_targets(iter(["jb_example_lifted_target"]))
    assert "jb_example_lifted_target" in lifted.lifted_targets()
    assert "jb_example_lifted_target" in policy.admitted_lifted_targets()
