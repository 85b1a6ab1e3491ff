"""Pinned: what a loaded module may contain (docs/reliability.md "Module checks", spec §2) and
what sanitizing Reactant's text removes, as a user or an attacker meets it.

The modules are written by hand; the expectations come from the spec's allowlist (stablehlo,
chlo, func.func/call/return; jax.export's stable custom-call targets that carry no code and
have a contract) and from Reactant's printed form, not from the code under test.
"""

from __future__ import annotations

import pytest

import juliabridge
from juliabridge import UnsupportedModuleError
from juliabridge.stablehlo import parse_module

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
    assert f"op(s) {op} are not StableHLO/CHLO ops" in msg
    assert "Re-export the model with Reactant's full optimization pipeline" in msg
    assert "Pass trust=True only if" in msg


def test_the_refusal_names_the_offenders_sorted_and_at_most_eight() -> None:
    lines = [f'    %v{i} = "zz{i}.op"(%x) : ({T}) -> {T}' for i in range(10)]
    text = module("\n".join(lines) + f"\n    return %x : {T}")
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(text)
    named = str(e.value).split("op(s) ", 1)[1].split(" are not", 1)[0]
    assert named == ", ".join(sorted(f"zz{i}.op" for i in range(10))[:8])


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
    assert "Re-export the model with Reactant's full optimization pipeline" in msg  # kept too


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
    with pytest.raises(UnsupportedModuleError, match="exist only inside Reactant/Enzyme-JAX"):
        parse_module(_custom_call(target))


def test_a_stable_target_without_a_contract_is_refused_naming_the_contract_table() -> None:
    from juliabridge.jaxinternals import custom_call_allowlist
    from juliabridge.stablehlo.contracts import contract_targets
    from juliabridge.stablehlo.policy import carries_code

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
