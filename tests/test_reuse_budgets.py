"""Cost that grows from reuse: an attribute counted at every use, a blob shared (issue 39).

An alias (``#a = dense<...>``) is written once in the text but printed in full at every use,
parsed again, and made into one XLA literal per constant op; complex constants and
discardable attributes were not counted at all: 8 MB modules reached 2-3.4 GB under a 1 GB
limit. One dense_resource blob used by 400 constants was copied 400 times by the lax backend.
Now budget.AttributeData counts every attribute's data at every use (a blob once), the lax
backend decodes each distinct attribute once, and reading a dense complex attribute anywhere
(a discardable attribute, a function argument's attributes) is a typed error or counted, never
NamedAttribute.attr, which aborted the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import juliabridge
from juliabridge.errors import ResourceLimitError, UnsupportedModuleError
from juliabridge.stablehlo.budget import AttributeData
from juliabridge.support.jaxinternals import ir, make_context

REPO = Path(__file__).resolve().parents[1]


def blob(nbytes: int) -> str:
    return np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32).tobytes().hex()


def alias_module(n: int, uses: int, et: str = "f32", where: str = "constant") -> str:
    """@main(f32) -> f32 with `uses` ops carrying the alias #a of n elements of `et`."""
    item = {"f32": 4, "complex<f32>": 8}[et]
    t = f"tensor<{n}x{et}>"
    lines = [f'#a = dense<"0x{blob(n * item)}"> : {t}', "module {",
             "  func.func @main(%x: tensor<f32>) -> tensor<f32> {"]  # fmt: skip
    acc = "%x"
    for k in range(uses):
        if where == "constant":
            lines.append(f"    %c{k} = stablehlo.constant #a")
            lines.append(f"    %r{k} = stablehlo.slice %c{k} [0:1] : ({t}) -> tensor<1x{et}>")
            part = "real" if et.startswith("complex") else "abs"
            lines.append(f"    %q{k} = stablehlo.{part} %r{k} : (tensor<1x{et}>) -> tensor<1xf32>")
            lines.append(f"    %s{k} = stablehlo.reshape %q{k} : (tensor<1xf32>) -> tensor<f32>")
            lines.append(f"    %a{k} = stablehlo.add {acc}, %s{k} : tensor<f32>")
        else:
            lines.append(f'    %a{k} = "stablehlo.add"({acc}, %x) {{foo.bar = #a}} : '
                         "(tensor<f32>, tensor<f32>) -> tensor<f32>")  # fmt: skip
        acc = f"%a{k}"
    lines += [f"    return {acc} : tensor<f32>", "  }", "}"]
    return "\n".join(lines) + "\n"


def resource_module(n: int, uses: int) -> str:
    """@main(f32) -> f32 adding element 0 of one dense_resource blob, read by `uses` constants."""
    t = f"tensor<{n}xf32>"
    lines = ["module {", "  func.func @main(%x: tensor<f32>) -> tensor<f32> {"]
    acc = "%x"
    for k in range(uses):
        lines.append(f"    %c{k} = stablehlo.constant dense_resource<b> : {t}")
        lines.append(f"    %r{k} = stablehlo.slice %c{k} [0:1] : ({t}) -> tensor<1xf32>")
        lines.append(f"    %s{k} = stablehlo.reshape %r{k} : (tensor<1xf32>) -> tensor<f32>")
        lines.append(f"    %a{k} = stablehlo.add {acc}, %s{k} : tensor<f32>")
        acc = f"%a{k}"
    data = np.full(n, 0.5, np.float32)
    data[1::2] = 1.5  # not a splat
    lines += [f"    return {acc} : tensor<f32>", "  }", "}", "{-#", "  dialect_resources: {",
              "    builtin: {", f'      b: "0x04000000{data.tobytes().hex()}"', "    }", "  }",
              "#-}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def test_attribute_data_counts_every_use_a_splat_as_one_element_and_a_blob_once() -> None:
    text = """
    #a = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    module {
      func.func @main(%x: tensor<f32>) -> tensor<f32> {
        %c = stablehlo.constant #a
        %d = stablehlo.constant #a
        %s = stablehlo.constant dense<1.0> : tensor<1000xf32>
        %r = stablehlo.constant dense_resource<b> : tensor<2xf32>
        %q = stablehlo.constant dense_resource<b> : tensor<2xf32>
        %y = "stablehlo.add"(%x, %x) {k.a = [#a, "abcdef", {z = #a}], k.b = array<i64: 1, 2>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
        return %y : tensor<f32>
      }
    }
    {-#
      dialect_resources: { builtin: { b: "0x040000000000803F00000040" } }
    #-}
    """  # fmt: skip
    with make_context(allow_unregistered=True):
        module = ir.Module.parse(text)
        data = AttributeData()
        ops = list(module.body.operations[0].regions[0].blocks[0].operations)
        sizes = [data.of(op.operation) for op in ops]
    # value attributes: 16 bytes per use of #a, one f32 for the splat, the blob's 8 bytes once;
    # the add: #a twice (16 + 16), the string (6) and the i64 array (16).
    assert sizes == [16, 16, 4, 8, 0, 16 + 6 + 16 + 16, 0], sizes


_MEASURE = """
    import json, sys
    sys.path.insert(0, {repo!r})
    import numpy as np
    import juliabridge
    from tests.test_reuse_budgets import alias_module, resource_module
    def hwm():
        return int([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1])
    out = {{}}
    for name, text, backend in {cases}:
        before = hwm()
        try:
            (r,) = juliabridge.load_mlir(text, backend=backend)(np.float32(0.0))
            outcome = ["ok", float(r)]
        except juliabridge.JuliaBridgeError as e:
            outcome = [type(e).__name__, str(e)[:300]]
        out[name + "/" + backend] = [outcome, hwm() - before]
    print(json.dumps(out))
"""


def _measure(cases: str, limit: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", JULIABRIDGE_MEMORY_LIMIT=limit)
    code = textwrap.dedent(_MEASURE.format(repo=str(REPO), cases=cases))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
        cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_aliases_used_many_times_are_refused_before_they_are_expanded() -> None:
    # 2 MiB of data (4 MiB for complex) used 60 times: 120-240 MiB counted x 14 > 256 MiB.
    # Before, each was printed and parsed at every use (and complex constants and discardable
    # attributes were not counted): ~4-5 bytes per counted byte, 0.5-1 GB here.
    cases = [
        (f"{kind}-{et}", f"alias_module(1 << 19, 60, {et!r}, {kind!r})", backend)
        for kind, et in (("constant", "f32"), ("constant", "complex<f32>"), ("attr", "f32"))
        for backend in ("lax", "xla")
    ]
    out = _measure("[" + ", ".join(f"({n!r}, {t}, {b!r})" for n, t, b in cases) + "]", "256M")
    for key, ((outcome, message), growth_kib) in out.items():
        assert outcome == "ResourceLimitError", (key, message)
        assert "counted at every op" in message, (key, message)
        assert growth_kib < 100_000, (key, growth_kib)


def test_one_blob_read_by_many_constants_is_one_array_on_lax() -> None:
    # A 4 MiB blob read by 40 constants: 40 copies (160 MiB) before, one now.
    out = _measure("[('blob', resource_module(1 << 20, 40), 'lax')]", "1G")
    (outcome, value), growth_kib = out["blob/lax"]
    assert outcome == "ok" and value == 20.0, out
    assert growth_kib < 100_000, out


def test_dense_complex_attributes_anywhere_do_not_abort() -> None:
    # NamedAttribute.attr aborted the process (SIGABRT) on dense complex data in any
    # attribute: the extent check read every attribute so.
    text = """
    #a = dense<[(1.0,2.0),(3.0,4.0)]> : tensor<2xcomplex<f32>>
    module {
      func.func @main(%x: tensor<f32>) -> tensor<2xcomplex<f32>> {
        %c = stablehlo.constant #a
        %d = "stablehlo.add"(%x, %x) {foo.bar = #a, foo.baz = [1, #a, {k = #a}]} : (tensor<f32>, tensor<f32>) -> tensor<f32>
        return %c : tensor<2xcomplex<f32>>
      }
    }"""  # fmt: skip
    code = textwrap.dedent(f"""
        import numpy as np, juliabridge
        for backend in ("lax", "xla"):
            (r,) = juliabridge.load_mlir({text!r}, backend=backend)(np.float32(1))
            print(np.asarray(r).tolist())
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-2:] == ["[(1+2j), (3+4j)]"] * 2


def test_an_alias_within_the_budget_still_loads() -> None:
    text = alias_module(1 << 10, 5)
    with pytest.raises(ResourceLimitError):
        os.environ["JULIABRIDGE_MEMORY_LIMIT"] = "64K"
        try:
            juliabridge.load_mlir(text, backend="lax")
        finally:
            del os.environ["JULIABRIDGE_MEMORY_LIMIT"]
    (r,) = juliabridge.load_mlir(text, backend="lax")(np.float32(0))
    a = np.frombuffer(bytes.fromhex(blob(4 << 10)), np.float32)
    assert float(r) == pytest.approx(5 * abs(float(a[0])), rel=1e-6)


def test_a_blob_is_refused_at_load_on_xla() -> None:
    # XLA's converter reads no dense_resource: an ExecutionError at the first call before.
    with pytest.raises(UnsupportedModuleError, match=r"dense_resource .* backend='lax'"):
        juliabridge.load_mlir(resource_module(4, 2), backend="xla")
    assert (
        float(juliabridge.load_mlir(resource_module(4, 2), backend="lax")(np.float32(0))[0]) == 1.0
    )
