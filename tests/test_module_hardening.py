"""What parse_module checks before XLA sees a module: one test (or family) per class of attack.

References are independent of the code under test: JAX's own lowerings of each linear-algebra
op (the contracts must accept exactly what JAX emits, on CPU and, via cross-platform export,
CUDA and ROCm), numpy for numbers, a character-by-character lexer for the nesting scan, and
hand-computed costs for the budgets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import (
    MLIRParseError,
    ModuleContractError,
    ResourceLimitError,
    UnsupportedModuleError,
)
from juliabridge.stablehlo import nesting, parse_module
from juliabridge.stablehlo.contracts import CONTRACTS
from juliabridge.stablehlo.policy import allowed_custom_calls, carries_code
from juliabridge.support.jaxinternals import custom_call_allowlist, ir, make_context
from tests.conftest import require_backend
from tests.mlir_snippets import ADMITTED, DTYPES, L, custom_calls, lowerings, mutations, standalone

REPO = Path(__file__).resolve().parents[1]

# --- custom-call contracts against JAX's own lowerings -------------------------------------------


@pytest.fixture(scope="module")
def cpu_lowerings() -> list[tuple[str, str]]:
    return lowerings("cpu", DTYPES)


@pytest.fixture(scope="module")
def gpu_lowerings() -> list[tuple[str, str]]:
    return lowerings("cuda", [np.float32, np.complex128]) + lowerings("rocm", [np.float64])


def test_contracts_accept_every_cpu_lowering_of_jax(cpu_lowerings: list[tuple[str, str]]) -> None:
    seen = set()
    with jax.enable_x64(True):
        for _, text in cpu_lowerings:
            seen |= set(parse_module(text).custom_calls)
    lapack = {t for t in ADMITTED if t.startswith("lapack_")}
    assert seen == lapack, f"never exercised: {sorted(lapack - seen)}"


def test_contracts_accept_every_gpu_lowering_of_jax(gpu_lowerings: list[tuple[str, str]]) -> None:
    seen = set()
    with jax.enable_x64(True):
        for _, text in gpu_lowerings:
            seen |= set(parse_module(text).custom_calls)
    assert {"cusolver_getrf_ffi", "cusolver_gesvdj_ffi", "hipsolver_syevd_ffi"} <= seen
    assert "cu_lu_pivots_to_permutation" in seen


def _one_call_per_target(lowerings: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One call per target and operand rank (batched or not)."""
    calls: dict[tuple[str, int], dict[str, Any]] = {}
    for _, text in lowerings:
        for c in custom_calls(text):
            calls.setdefault((c["target"], c["ins"][0].count("x")), c)
    return list(calls.values())


def test_every_result_type_other_than_the_kernels_is_refused(
    cpu_lowerings: list[tuple[str, str]], gpu_lowerings: list[tuple[str, str]]
) -> None:
    """The heap-overflow class: a declared result of another size or type than the kernel
    writes (e.g. smaller than its operand) is a ModuleContractError, for every admitted
    LAPACK/cuSOLVER/hipSOLVER target and every result."""
    checked = 0
    with jax.enable_x64(True):
        for call in _one_call_per_target(cpu_lowerings + gpu_lowerings):
            base = dict(call, attrs=dict(call["attrs"]))
            parse_module(standalone(base))  # the unmutated call is fine
            # Aliases and layouts are dropped so the MLIR verifier cannot catch it first.
            for key in ("output_operand_aliases", "operand_layouts", "result_layouts"):
                base["attrs"].pop(key, None)
            for i, t in enumerate(call["outs"]):
                for other in mutations(t):
                    if call["target"].endswith("pivots_to_permutation") and "x" in other[7:]:
                        continue  # a longer permutation is allowed (linalg_kernels.cc)
                    outs = list(call["outs"])
                    outs[i] = other
                    with pytest.raises(ModuleContractError, match=call["target"]):
                        parse_module(standalone(dict(base, outs=outs)))
                    checked += 1
    assert checked > 300


def test_enum_attributes_outside_the_kernels_values_are_refused(
    cpu_lowerings: list[tuple[str, str]],
) -> None:
    """jaxlib decodes its char enums by a plain cast, so 'X' would reach LAPACK."""
    tried = 0
    with jax.enable_x64(True):
        for call in _one_call_per_target(cpu_lowerings):
            cfg = call["attrs"].get("mhlo.backend_config", "{}")
            for m in re.finditer(r"(\w+) = (\d+) : ui8", cfg):
                bad = cfg.replace(m.group(0), f"{m.group(1)} = 88 : ui8")
                mutated = dict(call, attrs=dict(call["attrs"], **{"mhlo.backend_config": bad}))
                with pytest.raises(ModuleContractError, match=m.group(1)):
                    parse_module(standalone(mutated))
                tried += 1
            extra = cfg.replace("{", "{junk = 1 : i32, ", 1) if cfg != "{}" else "{junk = 1 : i32}"
            mutated = dict(call, attrs=dict(call["attrs"], **{"mhlo.backend_config": extra}))
            with pytest.raises(ModuleContractError, match="junk"):
                parse_module(standalone(mutated))
    assert tried > 20


HEAP_OVERFLOW = """module {
  func.func public @main(%arg0: tensor<64x64xf32>) -> (tensor<2x2xf32>, tensor<64xi32>) {
    %0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%arg0) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<64x64xf32>) -> (tensor<2x2xf32>, tensor<64xi32>, tensor<i32>)
    return %0#0, %0#1 : tensor<2x2xf32>, tensor<64xi32>
  }
}"""


def test_the_heap_overflow_reproducer_is_refused_before_xla() -> None:
    """Before: free(): invalid next size (SIGABRT) on the xla backend."""
    with pytest.raises(ModuleContractError) as info:
        juliabridge.load_mlir(HEAP_OVERFLOW, backend="xla")
    msg = str(info.value)
    assert "line 3" in msg and "@lapack_sgetrf_ffi" in msg
    assert "tensor<2x2xf32>" in msg and "tensor<64x64xf32>" in msg


@pytest.mark.parametrize("where", ["contract_targets", "lifted_targets"])
def test_a_target_carrying_code_is_refused_even_with_a_contract_or_a_lift(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Kernels shipped inside the module never run for an untrusted bundle, whatever else
    juliabridge knows about their target (today none of them has a contract or a lift)."""
    from juliabridge.stablehlo import policy

    target = "tpu_custom_call"
    assert carries_code(target)
    real = getattr(policy, where)
    monkeypatch.setattr(policy, where, lambda: real() | {target})
    admitted = sorted(policy.allowed_custom_calls())[:3]
    policy.check_custom_calls(admitted, trust=False, where="m")  # the others: unaffected
    with pytest.raises(UnsupportedModuleError, match="carried inside the module"):
        policy.check_custom_calls([target], trust=False, where="m")


def test_only_targets_with_a_contract_are_admitted() -> None:
    stable = custom_call_allowlist()
    assert allowed_custom_calls() == {t for t in stable if t in CONTRACTS and not carries_code(t)}
    for target in sorted(stable - allowed_custom_calls()):
        text = f"""module {{
  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {{
    %0 = stablehlo.custom_call @{target}(%arg0) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }}
}}"""
        # Refused at load, or (a target the lax backend lifts) by the backend calling kernels.
        with pytest.raises(UnsupportedModuleError, match=re.escape(target)):
            juliabridge.load_mlir(text, backend="xla")


LU_CHECK = """
import sys, numpy as np
import juliabridge
a = np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32)
fn = juliabridge.load_mlir(sys.argv[1], backend=sys.argv[2])
lu, piv = (np.asarray(o) for o in fn(a))
l = np.tril(lu, -1) + np.eye(6, dtype=np.float32); u = np.triu(lu)
perm = np.arange(6)
for i, p in enumerate(piv):
    perm[i], perm[p] = perm[p], perm[i]
print(float(np.max(np.abs(a[perm] - l @ u))))
"""


@pytest.mark.parametrize("backend", ["xla", "enzyme"])
def test_a_valid_lapack_call_runs_in_a_fresh_process(backend: str, tmp_path: Path) -> None:
    """Before: SIGSEGV on enzyme (jaxlib's LAPACK pointers were never set in that process)."""
    require_backend(backend)
    src = tmp_path / "lu.mlir"
    spec = jax.ShapeDtypeStruct((6, 6), np.float32)
    src.write_text(str(jax.jit(lambda a: L.lu(a)[:2]).lower(spec).as_text()))
    proc = subprocess.run(
        [sys.executable, "-c", LU_CHECK, str(src), backend],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.strip().splitlines()[-1]) < 1e-4


def test_a_module_lowered_for_another_platform_is_refused_at_load() -> None:
    """Before: a raw JaxRuntimeError at the first call (no cusolver kernel on the CPU)."""
    text = str(
        jax.export.export(jax.jit(L.lu), platforms=["cuda"])(
            jax.ShapeDtypeStruct((3, 3), np.float32)
        ).mlir_module()
    )
    if jax.default_backend() != "cpu":
        pytest.skip("needs a CPU-only JAX")
    with pytest.raises(UnsupportedModuleError, match=r"cusolver_getrf_ffi.*cuda"):
        juliabridge.load_mlir(text, backend="xla")


# --- fft ----------------------------------------------------------------------------------------

FFTS: dict[
    str, tuple[Callable[[jax.Array], jax.Array], Callable[[np.ndarray], np.ndarray], Any]
] = {
    "fft": (jnp.fft.fft, np.fft.fft, np.complex64),
    "ifft": (jnp.fft.ifft, np.fft.ifft, np.complex64),
    "rfft": (jnp.fft.rfft, np.fft.rfft, np.float32),
    "irfft": (lambda x: jnp.fft.irfft(x, n=8), lambda x: np.fft.irfft(x, n=8), np.complex64),
    "fft2": (jnp.fft.fft2, np.fft.fft2, np.complex64),
    "rfftn": (jnp.fft.rfftn, np.fft.rfftn, np.float32),
}


@pytest.mark.parametrize("name", sorted(FFTS))
def test_ffts_as_jax_lowers_them_load_and_match_numpy(name: str) -> None:
    f, ref, dtype = FFTS[name]
    shape = (3, 5)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32).astype(dtype)
    if np.iscomplexobj(x):
        x = x + 1j * np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        x = x.astype(dtype)
    fn = juliabridge.load_mlir(jax.jit(f).lower(x).as_text(), backend="xla")
    np.testing.assert_allclose(np.asarray(fn(x)[0]), ref(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("kind", "operand", "length", "result"),
    [
        ("FFT", "tensor<8xcomplex<f32>>", 64, "tensor<8xcomplex<f32>>"),  # aborted in ducc
        ("IFFT", "tensor<4x8xcomplex<f32>>", "8, 4", "tensor<4x8xcomplex<f32>>"),
        ("FFT", "tensor<3x8xcomplex<f32>>", "3, 4", "tensor<3x8xcomplex<f32>>"),
    ],
)
def test_fft_length_other_than_the_operand_is_refused(
    kind: str, operand: str, length: int | str, result: str
) -> None:
    text = f"""module {{
  func.func @main(%arg0: {operand}) -> {result} {{
    %0 = stablehlo.fft %arg0, type = {kind}, length = [{length}] : ({operand}) -> {result}
    return %0 : {result}
  }}
}}"""
    try:
        parse_module(text)
    except MLIRParseError:
        pytest.skip("MLIR's verifier already refuses this one")
    except ModuleContractError as e:
        assert "stablehlo.fft" in str(e) and "fft_length" in str(e)
    else:
        pytest.fail("accepted")


# --- call graph and top level ------------------------------------------------------------------

F8 = "tensor<8xf32>"


def _module(*functions: str, top: str = "") -> str:
    return "module {\n" + top + "\n".join(functions) + "\n}"


def _fn(name: str, body: str, public: bool = False) -> str:
    vis = "public " if public else "private "
    return f"  func.func {vis}@{name}(%arg0: {F8}) -> {F8} {{\n{body}\n  }}"


def _call(callee: str, arg: str = "%arg0", out: str = "%0") -> str:
    return f"    {out} = func.call @{callee}({arg}) : ({F8}) -> {F8}"


RET = f"    return %0 : {F8}"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (_module(_fn("main", _call("main") + "\n" + RET, True)), "recursive calls"),
        (
            _module(
                _fn("main", _call("f") + "\n" + RET, True),
                _fn("f", _call("g") + "\n" + RET),
                _fn("g", _call("f") + "\n" + RET),
            ),
            r"recursive calls \(@f -> @g -> @f\)",
        ),
        (
            _module(
                _fn("main", _call("f") + "\n" + RET, True),
                f"  func.func private @f(%arg0: {F8}) -> {F8}",
            ),
            "without a body",
        ),
        (
            _module(
                _fn("main", f"    %0 = stablehlo.add %arg0, %arg0 : {F8}\n" + RET, True),
                top=f"  %c = stablehlo.constant dense<1.0> : {F8}\n",
            ),
            "top-level stablehlo.constant",
        ),
        (
            _module(
                _fn(
                    "main",
                    f'    %0 = stablehlo.composite "x.f" %arg0 {{decomposition = @f}} : ({F8}) -> {F8}\n'
                    + RET,
                    True,
                ),
                _fn(
                    "f",
                    f'    %0 = stablehlo.composite "x.f" %arg0 {{decomposition = @f}} : ({F8}) -> {F8}\n'
                    + RET,
                ),
            ),
            "recursive calls",
        ),
    ],
    ids=["self", "mutual", "no-body", "top-level-op", "composite"],
)
def test_call_graph_defects_are_refused(text: str, match: str, backend: str) -> None:
    """Before: SIGSEGV (recursion, missing body) or AttributeError on enzyme (top-level op)."""
    with pytest.raises(ModuleContractError, match=match):
        juliabridge.load_mlir(text, backend=backend)


def test_a_diamond_of_calls_is_fine_and_correct(backend: str) -> None:
    text = _module(
        _fn(
            "main",
            _call("f", out="%a") + "\n" + _call("g", out="%b") + "\n"
            f"    %0 = stablehlo.add %a, %b : {F8}\n" + RET,
            True,
        ),
        _fn("f", _call("h") + "\n" + RET),
        _fn("g", _call("h") + "\n" + RET),
        _fn("h", f"    %0 = stablehlo.sine %arg0 : {F8}\n" + RET),
    )
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    y = juliabridge.load_mlir(text, backend=backend)(x)[0]
    np.testing.assert_allclose(np.asarray(y), 2 * np.sin(x), rtol=1e-6)


def test_function_values_are_refused() -> None:
    text = _module(
        _fn(
            "main",
            f"    %f = func.constant @h : ({F8}) -> {F8}\n"
            f"    %0 = func.call_indirect %f(%arg0) : ({F8}) -> {F8}\n" + RET,
            True,
        ),
        _fn("h", f"    %0 = stablehlo.sine %arg0 : {F8}\n" + RET),
    )
    with pytest.raises(UnsupportedModuleError, match=r"func\.c"):
        parse_module(text)


# --- host I/O and collectives -----------------------------------------------------------------

IO_BODIES = {
    "infeed": '%t = stablehlo.create_token : !stablehlo.token\n    %i:2 = "stablehlo.infeed"(%t) {infeed_config = "", layout = [[0]]} : (!stablehlo.token) -> (tensor<8xf32>, !stablehlo.token)\n    %0 = stablehlo.add %arg0, %i#0 : tensor<8xf32>',
    "outfeed": '%t = stablehlo.create_token : !stablehlo.token\n    %o = "stablehlo.outfeed"(%arg0, %t) {outfeed_config = ""} : (tensor<8xf32>, !stablehlo.token) -> !stablehlo.token\n    %0 = stablehlo.add %arg0, %arg0 : tensor<8xf32>',
    "send": '%t = stablehlo.create_token : !stablehlo.token\n    %o = "stablehlo.send"(%arg0, %t) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 2>, is_host_transfer = true} : (tensor<8xf32>, !stablehlo.token) -> !stablehlo.token\n    %0 = stablehlo.add %arg0, %arg0 : tensor<8xf32>',
    "recv": '%t = stablehlo.create_token : !stablehlo.token\n    %r:2 = "stablehlo.recv"(%t) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 3>, is_host_transfer = true} : (!stablehlo.token) -> (tensor<8xf32>, !stablehlo.token)\n    %0 = stablehlo.add %arg0, %r#0 : tensor<8xf32>',
}


@pytest.mark.parametrize("op", sorted(IO_BODIES))
def test_host_io_is_refused(op: str, backend: str) -> None:
    """Before: the first call blocked forever (infeed waits for a host that never sends)."""
    text = _module(_fn("main", "    " + IO_BODIES[op] + "\n" + RET, True))
    with pytest.raises(ModuleContractError, match=r"token|host"):
        juliabridge.load_mlir(text, backend=backend)


def test_tokens_without_host_io_load_and_run(backend: str) -> None:
    """A token holds no data; only the I/O it orders can hang, and that is refused above."""
    body = (
        "    %t = stablehlo.create_token : !stablehlo.token\n"
        "    %u = stablehlo.after_all %t, %t : !stablehlo.token\n"
        "    %0 = stablehlo.add %arg0, %arg0 : tensor<8xf32>\n"
    )
    fn = juliabridge.load_mlir(_module(_fn("main", body + RET, True)), backend=backend)
    x = np.arange(8, dtype=np.float32)
    (out,) = jax.jit(fn)(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * x)


ALL_REDUCE = """module {
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<GROUPS> : tensor<1xNxi64>} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}"""


def test_collectives_naming_other_devices_are_refused_and_one_device_works() -> None:
    bad = ALL_REDUCE.replace("GROUPS", "[[0, 1]]").replace("1xN", "1x2")
    with pytest.raises(ModuleContractError, match="other devices"):
        parse_module(bad)
    good = ALL_REDUCE.replace("GROUPS", "[[0]]").replace("1xN", "1x1")
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(juliabridge.load_mlir(good, backend="xla")(x)[0]), x)


# --- resource budgets --------------------------------------------------------------------------


def doubling(levels: int) -> str:
    """@f_i calls @f_{i+1} twice on the same input and adds the results: 3 * 2^levels ops once
    inlined, in a text of about 200 bytes per level, with a chain only ~2 ops per level."""
    fns = [_fn("main", _call("f0") + "\n" + RET, True)]
    for i in range(levels):
        fns.append(
            _fn(
                f"f{i}",
                _call(f"f{i + 1}", out="%a")
                + "\n"
                + _call(f"f{i + 1}", out="%b")
                + f"\n    %0 = stablehlo.add %a, %b : {F8}\n"
                + RET,
            )
        )
    fns.append(_fn(f"f{levels}", f"    %0 = stablehlo.sine %arg0 : {F8}\n" + RET))
    return _module(*fns)


def test_a_small_module_that_expands_to_2_pow_40_ops_is_refused() -> None:
    """Before: XLA inlined the calls until the process ran out of memory (minutes)."""
    text = doubling(40)
    assert len(text) < 12_000
    with pytest.raises(
        ResourceLimitError, match=r"expands to [\d,]+ ops once its calls are inlined"
    ):
        parse_module(text)
    parse_module(doubling(8))  # 768 ops: fine


def chain(n: int, op: str = "sine") -> str:
    lines = [f"    %v0 = stablehlo.{op} %arg0 : {F8}"]
    lines += [f"    %v{i} = stablehlo.{op} %v{i - 1} : {F8}" for i in range(1, n)]
    return _module(_fn("main", "\n".join(lines) + f"\n    return %v{n - 1} : {F8}", True))


def test_a_chain_that_overflows_xlas_stack_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 30,000 or more chained ops crashed XLA's compiler (SIGSEGV)."""
    with pytest.raises(ResourceLimitError, match="chain of 50,000 dependent ops"):
        parse_module(chain(50_000))
    parse_module(chain(200))
    monkeypatch.setenv("JULIABRIDGE_MAX_CHAIN", "100")
    with pytest.raises(ResourceLimitError, match="more than the 100"):
        parse_module(chain(200))


def _values(*steps: str) -> str:
    body = "\n".join(f"    {s}" for s in steps)
    return f"""module {{
  func.func @main(%arg0: tensor<f32>) -> tensor<f32> {{
{body}
  }}
}}"""


BIG = "tensor<150000000xf32>"  # 600 MB
SEQUENTIAL = _values(
    f"%a = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> {BIG}",
    f"%s = stablehlo.reduce(%a init: %arg0) applies stablehlo.add across dimensions = [0] : ({BIG}, tensor<f32>) -> tensor<f32>",
    f"%b = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> {BIG}",
    f"%t = stablehlo.reduce(%b init: %arg0) applies stablehlo.add across dimensions = [0] : ({BIG}, tensor<f32>) -> tensor<f32>",
    "return %t : tensor<f32>",
)
TOGETHER = _values(
    f"%a = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> {BIG}",
    f"%b = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> {BIG}",
    f"%c = stablehlo.add %a, %b : {BIG}",
    f"%t = stablehlo.reduce(%c init: %arg0) applies stablehlo.add across dimensions = [0] : ({BIG}, tensor<f32>) -> tensor<f32>",
    "return %t : tensor<f32>",
)


def test_memory_budget_counts_values_live_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """600 MB values one after the other fit 1 GB; three of them alive together (a + b = c)
    do not; a single 2 GB value does not either."""
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "1G")
    parse_module(SEQUENTIAL)
    with pytest.raises(
        ResourceLimitError, match=r"about 1\.7 GiB of live values.*JULIABRIDGE_MEMORY_LIMIT"
    ):
        parse_module(TOGETHER)
    huge = SEQUENTIAL.replace("150000000", "500000000")
    with pytest.raises(ResourceLimitError, match=r"1\.9 GiB, more than 1\.0 GiB"):
        parse_module(huge)


def test_the_budget_follows_the_processs_real_limit(tmp_path: Path) -> None:
    """A data rlimit (ulimit -d) set after start-up lowers the memory budget."""
    code = textwrap.dedent(
        f"""
        import resource, re, juliabridge
        from juliabridge.stablehlo import parse_module
        data = int(re.search(r"VmData:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) << 10
        resource.setrlimit(resource.RLIMIT_DATA, (data + (512 << 20), resource.RLIM_INFINITY))
        try:
            parse_module({SEQUENTIAL!r})
        except juliabridge.ResourceLimitError as e:
            print("refused:", e)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert "refused:" in proc.stdout and "data rlimit" in proc.stdout, proc.stdout + proc.stderr


def test_cost_figures_match_a_hand_computation() -> None:
    """chain: 4 ops in a row; live bytes: x (32 B) + at most two 32-byte values at once."""
    from juliabridge.stablehlo.budget import Limits, check_budget
    from juliabridge.stablehlo.callgraph import callees_first, functions

    text = chain(4)
    with make_context(allow_unregistered=True):
        module = ir.Module.parse(text)
        funcs = functions(module, "t")
        cost = check_budget(
            funcs,
            callees_first(funcs, "t"),
            "t",
            check_contracts=True,
            limits=Limits(10**9, 10**9, 10**9, 10**9, "test"),
        )
    assert cost is not None
    assert (cost.ops, cost.chain, cost.args) == (5, 4, 32)  # 4 sines and the return op
    assert cost.peak == 32 + 32 + 32  # the argument, %v(i-1) and %v(i)


def test_text_is_bounded_by_memory_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "juliabridge.stablehlo.module.host_memory", lambda: (1 << 20, "a test's limit")
    )
    with pytest.raises(ResourceLimitError, match="a test's limit"):
        parse_module("module { this would not parse " + "x" * 100_000 + "}")


# --- the nesting pre-scan ----------------------------------------------------------------------


def reference_depth(data: bytes, comments: bool) -> tuple[int, bool]:
    """(depth, stopped): byte by byte like MLIR's lexer; a stray backslash ends the walk."""
    depth = best = i = 0
    state = "code"
    while i < len(data):
        c = data[i : i + 1]
        if state == "code":
            if c == b'"':
                state = "string"
            elif comments and data[i : i + 2] == b"//":
                state, i = "comment", i + 1
            elif c == b"\\":
                return best, True
            elif comments and data[i : i + 2] == b"->":
                i += 1
            elif c in b"([{<":
                depth += 1
                best = max(best, depth)
            elif c in b")]}>":
                depth = max(0, depth - 1)
        elif state == "string":
            if c == b"\\":
                i += 1
            elif c in b'"\n':
                state = "code"
        elif c == b"\n":
            state = "code"
        i += 1
    return best, False


lexemes = st.lists(
    st.sampled_from(
        [
            b"(",
            b")",
            b"[",
            b"]",
            b"{",
            b"}",
            b"<",
            b">",
            b"->",
            b"\n",
            b" ",
            b"a",
            b"/",
            b"-",
            b'"',
            b'"x\\"y"',
            b'"(\\\\"',
            b'"[[["',
            b"// c[[\n",
            b'// "\n',
            b'"//"',
            b'"a\n',
        ]
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(
    parts=lexemes,
    block=st.sampled_from([1, 2, 3, 5, 64]),
    mlir=st.booleans(),
    small=st.booleans(),
)
def test_nesting_scan_agrees_with_a_byte_by_byte_lexer(
    parts: list[bytes], block: int, mlir: bool, small: bool
) -> None:
    data = b"".join(parts)
    old = nesting.BLOCK, nesting.SMALL
    nesting.BLOCK = block  # block boundaries everywhere: the carried state must be right
    nesting.SMALL = old[1] if small else -1  # the token walk for short text, or numpy's
    try:
        lex = nesting.MLIR_SKIP if mlir else nesting.JSON_SKIP
        got = nesting.max_depth(data, lex, drop=(b"->",) if mlir else ())
    finally:
        nesting.BLOCK, nesting.SMALL = old
    want, stopped = reference_depth(data, mlir)
    # After a stray backslash MLIR stops; before it, the two must agree exactly.
    assert got == want or (stopped and got >= want)


@settings(max_examples=600, deadline=None)
@given(
    data=st.lists(st.sampled_from(list(b'()[]{}<>-/\\"\na ')), max_size=80).map(bytes),
    mlir=st.booleans(),
)
def test_the_short_text_walk_equals_the_numpy_walk(data: bytes, mlir: bool) -> None:
    """Every byte the lexicon reacts to, in any order (stray backslashes included): the token
    walk used up to nesting.SMALL bytes must give exactly what the block walk gives."""
    lex = nesting.MLIR_SKIP if mlir else nesting.JSON_SKIP
    kw = {"drop": (b"->",)} if mlir else {"opens": b"[{", "closes": b"]}", "drop": ()}
    assert len(data) <= nesting.SMALL
    old = nesting.SMALL
    nesting.SMALL = -1
    try:
        want = nesting.max_depth(data, lex, **kw)  # type: ignore[arg-type]
    finally:
        nesting.SMALL = old
    assert nesting.max_depth(data, lex, **kw) == want  # type: ignore[arg-type]


def test_nesting_scan_memory_does_not_grow_with_a_long_string() -> None:
    """Before: ~120 bytes per byte of one string literal (regex backtracking state)."""
    data = b'x = "' + b"a" * (32 << 20) + b'" [[[['
    tracemalloc.start()
    try:
        depth = nesting.max_depth(data, nesting.MLIR_SKIP)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert depth == 4
    assert peak < 64 << 20, peak


def test_the_module_text_budget_uses_the_measured_parse_factor() -> None:
    from juliabridge.stablehlo.module import PARSE_BYTES_PER_TEXT_BYTE

    results = REPO / "benchmarks" / "results" / "parse_memory.json"
    if not results.exists():
        pytest.skip("run benchmarks/bench_parse_memory.py to compare with a measurement")
    data = json.loads(results.read_text())
    if data["mb"] < 8:  # below that, MLIR's and JAX's fixed ~20 MB dominate the ratio
        pytest.skip("the last benchmark run used text under 8 MB")
    measured = data["results"]["chain"]
    assert measured["peak"] / measured["bytes"] <= PARSE_BYTES_PER_TEXT_BYTE


def test_a_huge_quoted_module_name_is_handled_in_linear_memory() -> None:
    """The header regex's quoted-name repetition is bounded (it was ~120 bytes per byte)."""
    from juliabridge.stablehlo.sanitize import fix_module_header

    text = 'module @"' + "x" * (16 << 20) + '" {\n}\n'
    tracemalloc.start()
    try:
        fixed, name = fix_module_header(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fixed == "module {\n}\n" and name is not None and len(name) == 16 << 20
    assert peak < 4 * len(text), peak
