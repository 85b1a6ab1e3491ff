"""Where the module budgets' memory figure comes from (stablehlo/budget.py): the machine's
available memory, cgroup limits, rlimits, an accelerator's free memory or the environment,
each read from stand-in files here so that every source and every parse is observable.
"""

from __future__ import annotations

import resource
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from juliabridge.stablehlo import budget

V2 = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")
V1 = (
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    "/sys/fs/cgroup/memory/memory.usage_in_bytes",
)


def _machine(
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str],
    rlimits: dict[int, int] | None = None,
    sysconf: dict[str, int] | None = None,
) -> None:
    """Replace what host_memory reads: files by path, soft rlimits, sysconf values."""
    monkeypatch.setattr(budget, "_read", files.get)
    limits = rlimits or {}
    monkeypatch.setattr(
        budget.resource,
        "getrlimit",
        lambda rl: (limits.get(rl, resource.RLIM_INFINITY), resource.RLIM_INFINITY),
    )

    def fake_sysconf(name: str) -> int:
        if sysconf is None or name not in sysconf:
            raise ValueError(name)
        return sysconf[name]

    monkeypatch.setattr(budget.os, "sysconf", fake_sysconf)


MEMINFO = "MemTotal:       9999 kB\nMemFree:         500 kB\nMemAvailable:    2000 kB\n"


def test_available_memory_from_meminfo(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, {"/proc/meminfo": MEMINFO})
    assert budget.host_memory() == (2000 << 10, "the machine's available memory")


def test_available_memory_from_sysconf_without_meminfo(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, {}, sysconf={"SC_AVPHYS_PAGES": 3, "SC_PAGE_SIZE": 4096})
    assert budget.host_memory() == (3 * 4096, "the machine's available memory")
    _machine(monkeypatch, {"/proc/meminfo": "MemTotal: 5 kB\n"})  # no figure, no sysconf
    assert budget.host_memory() == (1 << 62, "no limit found")


@pytest.mark.parametrize("files", [V2, V1])
def test_cgroup_limit_less_usage(monkeypatch: pytest.MonkeyPatch, files: tuple[str, str]) -> None:
    limit, usage = files
    _machine(monkeypatch, {"/proc/meminfo": MEMINFO, limit: "1500000\n", usage: "1000000\n"})
    assert budget.host_memory() == (500000, "the cgroup memory limit")
    _machine(monkeypatch, {"/proc/meminfo": MEMINFO, limit: "1000\n", usage: "5000\n"})
    assert budget.host_memory() == (0, "the cgroup memory limit")


@pytest.mark.parametrize(
    ("limit", "usage"),
    [("max\n", "10\n"), (str(1 << 60), "10"), ("100", ""), ("100", "x"), (None, "10")],
)
def test_cgroup_without_a_limit(
    monkeypatch: pytest.MonkeyPatch, limit: str | None, usage: str
) -> None:
    files = {"/proc/meminfo": MEMINFO, V2[1]: usage}
    if limit is not None:
        files[V2[0]] = limit
    _machine(monkeypatch, files)
    assert budget.host_memory() == (2000 << 10, "the machine's available memory")


def test_cgroup_limit_just_below_the_unlimited_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, {V2[0]: str((1 << 60) - 1), V2[1]: "1"})
    assert budget.host_memory() == ((1 << 60) - 2, "the cgroup memory limit")


@pytest.mark.parametrize(
    ("rl", "key", "what"),
    [
        (resource.RLIMIT_AS, "VmSize", "the address-space rlimit (ulimit -v)"),
        (resource.RLIMIT_DATA, "VmData", "the data rlimit (ulimit -d)"),
    ],
)
def test_rlimits_less_what_is_in_use(
    monkeypatch: pytest.MonkeyPatch, rl: int, key: str, what: str
) -> None:
    status = "VmPeak:   999 kB\nVmSize:     100 kB\nVmData:      40 kB\n"
    _machine(
        monkeypatch, {"/proc/meminfo": MEMINFO, "/proc/self/status": status}, rlimits={rl: 1 << 20}
    )
    used = {"VmSize": 100, "VmData": 40}[key] << 10
    assert budget.host_memory() == ((1 << 20) - used, what)
    _machine(monkeypatch, {"/proc/meminfo": MEMINFO}, rlimits={rl: 1 << 20})  # no status
    assert budget.host_memory() == (1 << 20, what)
    _machine(monkeypatch, {"/proc/self/status": status}, rlimits={rl: 1000})
    assert budget.host_memory() == (0, what)


def test_the_smallest_source_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"/proc/meminfo": MEMINFO, V2[0]: "5000000", V2[1]: "0", V1[0]: "700", V1[1]: "100"}
    _machine(monkeypatch, files, rlimits={resource.RLIMIT_DATA: 10 << 20})
    assert budget.host_memory() == (600, "the cgroup memory limit")


def test_read_returns_none_for_missing_files(tmp_path: Any) -> None:
    p = tmp_path / "f"
    p.write_text("x" * 70000)
    assert budget._read(str(p)) == "x" * (1 << 16)
    assert budget._read(str(tmp_path / "missing")) is None


class _Dev(SimpleNamespace):
    def memory_stats(self) -> Any:
        if isinstance(self.stats, Exception):
            raise self.stats
        return self.stats


def test_device_memory_of_an_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax

    monkeypatch.setattr(budget, "host_memory", lambda: (77, "host"))
    gpu = _Dev(platform="gpu", id=3, stats={"bytes_limit": 1000, "bytes_in_use": 100})
    monkeypatch.setattr(jax, "devices", lambda: [gpu])
    assert budget.device_memory() == (900, "the free memory of gpu device 3")
    gpu.stats = {"bytes_limit": 1000}
    assert budget.device_memory() == (1000, "the free memory of gpu device 3")
    for stats in (None, {}, {"bytes_limit": 0}, RuntimeError("no stats")):
        gpu.stats = stats
        assert budget.device_memory() == (77, "host")
    cpu = _Dev(platform="cpu", id=0, stats={"bytes_limit": 10})
    monkeypatch.setattr(jax, "devices", lambda: [cpu])
    assert budget.device_memory() == (77, "host")


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("", 5),
        ("123", 123),
        (" 2k ", 2 << 10),
        ("3M", 3 << 20),
        ("1GiB", 1 << 30),
        ("2gb", 2 << 30),
        ("4T", 4 << 40),
        ("12Q", 5),
        ("-1", 5),
        ("1.5G", 5),
    ],
)
def test_env_int(monkeypatch: pytest.MonkeyPatch, raw: str, want: int) -> None:
    monkeypatch.setenv("JB_TEST_SIZE", raw)
    assert budget._env_int("JB_TEST_SIZE", 5) == want


def test_env_int_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JB_TEST_SIZE", raising=False)
    assert budget._env_int("JB_TEST_SIZE", 7) == 7


def test_limits_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "device_memory", lambda: (1 << 40, "device"))
    for name in ("MEMORY_LIMIT", "MAX_OPS", "MAX_CHAIN", "MAX_CASE_BRANCHES"):
        monkeypatch.delenv("JULIABRIDGE_" + name, raising=False)
    assert budget.Limits.current() == budget.Limits(
        100_000, 10_000, 1 << 38, 1 << 40, "device", 1_000
    )
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "2G")
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", "11")
    monkeypatch.setenv("JULIABRIDGE_MAX_CHAIN", "12")
    monkeypatch.setenv("JULIABRIDGE_MAX_CASE_BRANCHES", "13")
    assert budget.Limits.current() == budget.Limits(
        11, 12, 2 << 30, 2 << 30, "JULIABRIDGE_MEMORY_LIMIT", 13
    )


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        ((1 << 20) - 1, "1024.0 KiB"),
        (1 << 20, "1.0 MiB"),
        (3 << 29, "1.5 GiB"),
        (1 << 40, "1.0 TiB"),
        (5 << 40, "5.0 TiB"),
    ],
)
def test_human(n: int, text: str) -> None:
    assert budget.human(n) == text


def _constants(values: str, n: int) -> str:
    return (
        f"func.func public @main(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n"
        f"  %c = stablehlo.constant dense<{values}> : tensor<{n}xf32>\n"
        f"  %0 = stablehlo.add %a, %c : tensor<{n}xf32>\n"
        f"  return %0 : tensor<{n}xf32>\n"
        "}\n"
    )


def test_constant_data_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 distinct f32 values: 256 bytes of literal data, spent 14 times over (3,584 bytes);
    # a splat of the same size is built from one element and not counted.
    from juliabridge.errors import ResourceLimitError
    from juliabridge.stablehlo import parse_module

    text = _constants("[" + ", ".join(f"{k}.5" for k in range(64)) + "]", 64)
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", str(256 * 14))
    assert parse_module(text).arguments[0].shape == (64,)
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", str(256 * 14 - 1))
    with pytest.raises(
        ResourceLimitError,
        match=r"^<mlir text>, line 2: the module's constants hold 256 B of data by here \(every "
        r"attribute counted at every op that carries it: the printed module and XLA's literals "
        r"hold a copy per use\), which loading and compiling spend about 14 times over \(3\.5 KiB\), more than 3\.5 KiB, "
        r"JULIABRIDGE_MEMORY_LIMIT\. Pass large arrays as arguments",
    ):
        parse_module(text)
    assert parse_module(_constants("1.5", 64)).arguments[0].shape == (64,)


# --- the limits at their boundaries, calls inlined -------------------------------------------

F = "tensor<f32>"
SINE_F = (
    f"  func.func private @f(%x: {F}) -> {F} {{\n"
    f"    %0 = stablehlo.sine %x : {F}\n"
    f"    return %0 : {F}\n"
    "  }\n"
)


def _limit_is_exact(
    monkeypatch: pytest.MonkeyPatch, text: str, name: str, n: int, match: str
) -> None:
    """`text` loads with JULIABRIDGE_<name>=n and is refused, matching `match`, with n - 1."""
    from juliabridge.errors import ResourceLimitError
    from juliabridge.stablehlo import parse_module

    monkeypatch.setenv(f"JULIABRIDGE_{name}", str(n))
    parse_module(text)
    monkeypatch.setenv(f"JULIABRIDGE_{name}", str(n - 1))
    with pytest.raises(ResourceLimitError, match=match):
        parse_module(text)


def _main(*lines: str, callee: str = SINE_F, first: bool = False) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    main = f"  func.func public @main(%a: {F}, %i: tensor<i32>) -> {F} {{\n{body}  }}\n"
    return "module {\n" + (main + callee if first else callee + main) + "}\n"


@pytest.mark.parametrize("first", [True, False])
def test_ops_limit_counts_inlined_calls(monkeypatch: pytest.MonkeyPatch, first: bool) -> None:
    # @f: sine, return (2 ops). @main: two calls (1 + 2 each), return: 7 ops once inlined.
    text = _main(
        f"%0 = func.call @f(%a) : ({F}) -> {F}",
        f"%1 = func.call @f(%0) : ({F}) -> {F}",
        f"return %1 : {F}",
        first=first,
    )
    line = 2 if first else 6
    _limit_is_exact(
        monkeypatch,
        text,
        "MAX_OPS",
        7,
        rf"^<mlir text>, line {line}: @main expands to 7 ops once its calls are inlined, "
        r"more than the 6 juliabridge compiles \(JULIABRIDGE_MAX_OPS raises the limit\); XLA "
        "would run out of time or memory compiling it$",
    )


def test_chain_limit_counts_through_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # sine, call @f (one sine), sine: a chain of 3 dependent ops; return adds none.
    text = _main(
        f"%0 = stablehlo.sine %a : {F}",
        f"%1 = func.call @f(%0) : ({F}) -> {F}",
        f"%2 = stablehlo.sine %1 : {F}",
        f"return %2 : {F}",
    )
    _limit_is_exact(
        monkeypatch,
        text,
        "MAX_CHAIN",
        3,
        r"^<mlir text>, line 9: a chain of 3 dependent ops \(calls inlined\), more than the 2 "
        r"juliabridge compiles \(JULIABRIDGE_MAX_CHAIN raises the limit\); XLA's compiler "
        "recurses along such chains and overflows its stack$",
    )


CASE_F = (
    f"  func.func private @f(%x: {F}, %i: tensor<i32>) -> {F} {{\n"
    f'    %r = "stablehlo.case"(%i) ({{\n'
    f"      stablehlo.return %x : {F}\n"
    "    }, {\n"
    f"      %s = stablehlo.sine %x : {F}\n"
    f"      stablehlo.return %s : {F}\n"
    f"    }}) : (tensor<i32>) -> {F}\n"
    f"    return %r : {F}\n"
    "  }\n"
)


def test_case_branches_counted_through_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    call = f"func.call @f(%a, %i) : ({F}, tensor<i32>) -> {F}"
    text = _main(f"%0 = {call}", f"%1 = {call}", f"return %1 : {F}", callee=CASE_F)
    _limit_is_exact(
        monkeypatch,
        text,
        "MAX_CASE_BRANCHES",
        4,
        r"^<mlir text>, line 11: @main holds 4 stablehlo\.case branches once its calls are "
        r"inlined, more than the 3 juliabridge compiles \(JULIABRIDGE_MAX_CASE_BRANCHES raises "
        r"the limit\); XLA's compiler spends more than linear time and memory per branch",
    )


def test_element_bytes_are_numpys_itemsize() -> None:
    # Every element type juliabridge passes to JAX, and the narrow and wide ones it does not.
    from juliabridge.support import dtypes
    from juliabridge.support.jaxinternals import ir, make_context

    with make_context():
        for name, np_dtype in dtypes.MLIR_TO_NUMPY.items():
            assert budget._element_bytes(ir.Type.parse(name)) == np.dtype(np_dtype).itemsize, name
        assert budget._element_bytes(ir.Type.parse("i4")) == 1
        assert budget._element_bytes(ir.Type.parse("f8E4M3FN")) == 1
        assert budget._element_bytes(ir.Type.parse("i128")) == 16
        assert budget._element_bytes(ir.Type.parse("complex<f16>")) == 4
        assert budget._element_bytes(ir.Type.parse("index")) == 8


def test_a_tuple_value_counts_all_its_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two 4,000-byte tensors in one tuple: 8,000 bytes for one value.
    from juliabridge.errors import ResourceLimitError
    from juliabridge.stablehlo import parse_module

    t = "tensor<1000xf32>"
    text = (
        f"func.func public @main(%a: {t}) -> {t} {{\n"
        f"  %t = stablehlo.tuple %a, %a : tuple<{t}, {t}>\n"
        f"  %0 = stablehlo.get_tuple_element %t[1] : (tuple<{t}, {t}>) -> {t}\n"
        f"  return %0 : {t}\n"
        "}\n"
    )
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "24000")
    assert parse_module(text).results[0].shape == (1000,)
    monkeypatch.setenv("JULIABRIDGE_MEMORY_LIMIT", "7999")
    with pytest.raises(
        ResourceLimitError,
        match=rf"^<mlir text>, line 2: stablehlo\.tuple produces tuple<{t}, {t}>, 7\.8 KiB, more "
        r"than 7\.8 KiB \(JULIABRIDGE_MEMORY_LIMIT\)",
    ):
        parse_module(text)


def test_a_dynamic_shape_inside_is_refused_unless_trusted() -> None:
    from juliabridge.errors import ModuleContractError
    from juliabridge.stablehlo import parse_module

    text = (
        "func.func public @main(%a: tensor<2xf32>, %n: tensor<1xi32>) -> tensor<2xf32> {\n"
        "  %0 = stablehlo.dynamic_broadcast_in_dim %a, %n, dims = [0] : "
        "(tensor<2xf32>, tensor<1xi32>) -> tensor<?xf32>\n"
        "  return %a : tensor<2xf32>\n"
        "}\n"
    )
    with pytest.raises(
        ModuleContractError,
        match=r"^<mlir text>, line 2: stablehlo\.dynamic_broadcast_in_dim has a dynamic shape "
        r"\(tensor<\?xf32>\); Reactant exports static shapes",
    ):
        parse_module(text)
    assert parse_module(text, trust=True).results[0].shape == (2,)


def test_tokens_hold_no_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # @main's 8-byte argument and an 8-byte sum live together with a token: 16 bytes at most.
    text = (
        "func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %t = stablehlo.create_token : !stablehlo.token\n"
        "  %0 = stablehlo.add %a, %a : tensor<2xf32>\n"
        "  %u = stablehlo.after_all %t : !stablehlo.token\n"
        "  return %0 : tensor<2xf32>\n"
        "}\n"
    )
    _limit_is_exact(
        monkeypatch,
        text,
        "MEMORY_LIMIT",
        16,
        r"^<mlir text>: running @main needs about 16 B of live values \(arguments, results and "
        r"intermediates in program order\), more than 15 B, JULIABRIDGE_MEMORY_LIMIT\. ",
    )


def test_a_callees_argument_dies_at_its_last_use(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hand count, 8-byte values: in @f, x dies at its one use, so at most two values live (16
    # bytes; f adds 8 beyond its argument). @main: %a (live throughout) + %r + what the call
    # adds = 24. Were x kept to the end, f would add 16 and @main need 32.
    t = "tensor<2xf32>"
    f = (
        f"  func.func private @f(%x: {t}) -> {t} {{\n"
        f"    %0 = stablehlo.negate %x : {t}\n"
        f"    %1 = stablehlo.negate %0 : {t}\n"
        f"    %2 = stablehlo.negate %1 : {t}\n"
        f"    return %2 : {t}\n"
        "  }\n"
    )
    main = (
        f"  func.func public @main(%a: {t}) -> {t} {{\n"
        f"    %r = func.call @f(%a) : ({t}) -> {t}\n"
        f"    return %r : {t}\n"
        "  }\n"
    )
    _limit_is_exact(
        monkeypatch,
        "module {\n" + f + main + "}\n",
        "MEMORY_LIMIT",
        24,
        r"^<mlir text>: running @main needs about 24 B of live values",
    )


def _doubling(levels: int) -> tuple[str, int]:
    """@main calls @f<levels>, each @f<i> calls @f<i-1> twice; @f0 is one sine. Returns the text
    and @f<levels>'s op count once its calls are inlined (hand recurrence: call + callee per
    site, and the return)."""
    fns = [
        f"  func.func private @f0(%x: {F}) -> {F} {{\n    %0 = stablehlo.sine %x : {F}\n    return %0 : {F}\n  }}\n"
    ]
    ops = 2  # sine, return
    for i in range(1, levels + 1):
        fns.append(
            f"  func.func private @f{i}(%x: {F}) -> {F} {{\n"
            f"    %0 = func.call @f{i - 1}(%x) : ({F}) -> {F}\n"
            f"    %1 = func.call @f{i - 1}(%0) : ({F}) -> {F}\n"
            f"    return %1 : {F}\n  }}\n"
        )
        ops = 2 * (1 + ops) + 1
    main = (
        f"  func.func public @main(%a: {F}) -> {F} {{\n"
        f"    %0 = func.call @f{levels}(%a) : ({F}) -> {F}\n    return %0 : {F}\n  }}\n"
    )
    return "module {\n" + "".join(fns) + main + "}\n", ops


def test_even_a_trusted_module_is_capped_at_2_pow_62_ops() -> None:
    from juliabridge.errors import ResourceLimitError
    from juliabridge.stablehlo import parse_module

    text, ops = _doubling(60)
    assert 1 << 62 < ops <= 1 << 63
    with pytest.raises(ResourceLimitError, match=f"@f60 expands to {ops:,} ops"):
        parse_module(text, trust=True)
    text, ops = _doubling(58)
    assert ops < 1 << 62
    assert parse_module(text, trust=True).arguments[0].shape == ()
