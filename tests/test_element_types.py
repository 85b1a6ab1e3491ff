"""Element types and op meanings that XLA gets wrong or dies on (issue 39): every element type a
module may use either computes what the StableHLO spec says or is refused at load, on every
backend, and never takes the process down.

The cases run in one child process per backend, so an abort (XLA's SIGABRT building an f6
literal, before stablehlo/elementtypes.py refused those types) ends the child and fails the test
with the signal and the last case it started. References are ml_dtypes' arithmetic (round to
nearest even, the spec's float conversion) and numpy written from the spec's definitions.
Set JULIABRIDGE_PROBE_REFUSED=1 to check, in children, that the refused types still abort
plain JAX (the reason they are in the table).
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

from juliabridge.backends.lax.valtypes import ELEMENT_TYPES
from juliabridge.stablehlo.elementtypes import REFUSED
from juliabridge.support.dtypes import MLIR_TO_NUMPY
from tests.conftest import BACKENDS

REPO = Path(__file__).resolve().parents[1]

#: Every element type a module may use beyond the boundary's 15 (all the lax backend can
#: hold, from ml_dtypes), and bf16, with its numpy dtype.
NARROW = {et: dt for et, dt in ELEMENT_TYPES.items() if et not in MLIR_TO_NUMPY or et == "bf16"}
X = [1.0, 2.0, 0.5, 1.5]  # finite in every float type above
X_INT = [1, 0, 1, 1]


def _main(body: list[str], ins: str, out: str, ret: str = "%e") -> str:
    lines = "".join(f"    {ln}\n" for ln in body)
    return (
        f"module {{\n  func.func @main(%a: {ins}) -> {out} {{\n{lines}"
        f"    return {ret} : {out}\n  }}\n}}\n"
    )


def element_cases() -> list[dict[str, object]]:
    """A constant of each type, a convert to it and back, and an add of it, with references
    (the f6 types aborted the process on constants and adds, issue 39)."""
    cases: list[dict[str, object]] = []
    for et, dt in NARROW.items():
        is_int = et[0] in "iu"
        vals = X_INT if is_int else X
        x = np.array(vals, np.float32)
        lit = ", ".join(str(int(v)) if is_int else repr(v) for v in vals)
        t = f"tensor<4x{et}>"
        c = x.astype(dt)
        # One case per type covers a constant of it, a convert to it and back, and an add.
        body = [
            f"%c = stablehlo.convert %a : (tensor<4xf32>) -> {t}",
            f"%k = stablehlo.constant dense<[{lit}]> : {t}",
            f"%s = stablehlo.add %c, %k : {t}",
            f"%e = stablehlo.convert %s : ({t}) -> tensor<4xf32>",
        ]
        bodies = {"constant, convert and add of": (body, (c + c).astype(np.float32))}
        for kind, (body, want) in bodies.items():
            cases.append(
                {
                    "what": f"{kind} {et}",
                    "text": _main(body, "tensor<4xf32>", "tensor<4xf32>"),
                    "args": [x.tolist()],
                    "dtype": "float32",
                    "want": None if et in REFUSED else np.asarray(want).tolist(),
                    "refused": et if et in REFUSED else None,
                }
            )
    return cases


def boolean_cases() -> list[dict[str, object]]:
    """add / multiply of i1 are logical or / and (spec.md#add, #multiply), also when XLA folds
    them (operands constant) and inside a reduce body."""
    p, q = [True, True, False, False], [True, False, True, False]
    cases: list[dict[str, object]] = []
    for op, fn in (("add", np.logical_or), ("multiply", np.logical_and)):
        folded = [
            "%x = stablehlo.constant dense<[true, true, false, false]> : tensor<4xi1>",
            "%y = stablehlo.constant dense<[true, false, true, false]> : tensor<4xi1>",
            f"%e = stablehlo.{op} %x, %y : tensor<4xi1>",
        ]
        cases.append(
            {
                "what": f"{op} of i1 constants",
                "text": _main(folded, "tensor<4xi1>", "tensor<4xi1>"),
                "args": [p],
                "dtype": "bool",
                "want": fn(p, q).tolist(),
                "refused": None,
            }
        )
        reduce = [
            "%x = stablehlo.constant dense<[true, true, false, true]> : tensor<4xi1>",
            f"%i = stablehlo.constant dense<{'false' if op == 'add' else 'true'}> : tensor<i1>",
            f"%e = stablehlo.reduce(%x init: %i) applies stablehlo.{op} across dimensions = [0]"
            " : (tensor<4xi1>, tensor<i1>) -> tensor<i1>",
        ]
        want = bool(fn.reduce([True, True, False, True]))
        cases.append(
            {
                "what": f"reduce {op} of i1 constants",
                "text": _main(reduce, "tensor<4xi1>", "tensor<i1>"),
                "args": [p],
                "dtype": "bool",
                "want": want,
                "refused": None,
            }
        )
    return cases


def complex_cases() -> list[dict[str, object]]:
    """cbrt of complex numbers: the principal cube root (spec.md#cbrt), exp(log(z) / 3)."""
    z = np.array([8 + 1j, -27, 1j, 0.5 - 2j], np.complex64)
    want = np.exp(np.log(z.astype(np.complex128)) / 3)
    text = _main(
        ["%e = stablehlo.cbrt %a : tensor<4xcomplex<f32>>"],
        "tensor<4xcomplex<f32>>",
        "tensor<4xcomplex<f32>>",
    )
    return [
        {
            "what": "cbrt complex<f32>",
            "text": text,
            "args": [[[v.real, v.imag] for v in z.tolist()]],
            "dtype": "complex64",
            "want": [[v.real, v.imag] for v in want.tolist()],
            "refused": None,
            "close": True,
        }
    ]


_CHILD = """
    import json, sys
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    import juliabridge
    out = []
    for case in json.load(open(sys.argv[1])):
        print(case["what"], file=sys.stderr, flush=True)  # the last one names a crash
        args = []
        for a in case["args"]:
            v = np.asarray(a)
            if case["dtype"] == "complex64":
                v = (v[..., 0] + 1j * v[..., 1]).astype(np.complex64)
            args.append(v.astype(case["dtype"]))
        try:
            got = np.asarray(juliabridge.load_mlir(case["text"], backend=sys.argv[2])(*args)[0])
        except juliabridge.JuliaBridgeError as e:
            out.append({"error": type(e).__name__, "message": str(e)})
            continue
        if np.iscomplexobj(got):
            got = np.stack([got.real, got.imag], -1)
        out.append({"value": got.tolist(), "shape": list(got.shape)})
    print(json.dumps(out))
"""


def run_child(script: str, cases: list[dict[str, object]], backend: str, tmp: Path) -> object:
    """`script` on the cases and `backend` in a child (an abort ends only the child); its last
    line of output, parsed as JSON."""
    path = tmp / f"{backend}.json"
    path.write_text(json.dumps(cases))
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(path), backend],
        env=env, capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    last = (proc.stderr.strip().splitlines() or ["(nothing)"])[-1]
    assert proc.returncode == 0, (proc.returncode, f"last case started: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_element_type_computes_or_is_refused_at_load(backend: str, tmp_path: Path) -> None:
    if backend == "enzyme":
        pytest.importorskip("enzyme_ad")
    assert set(REFUSED) <= set(NARROW)  # every refused type is drawn here
    cases = element_cases() + boolean_cases() + complex_cases()
    got = run_child(_CHILD, cases, backend, tmp_path)
    assert isinstance(got, list)
    for case, result in zip(cases, got, strict=True):
        if case["refused"] is not None:
            assert result.get("error") == "UnsupportedModuleError", (case["what"], result)
            message = result["message"]
            assert f"element type {case['refused']}" in message, message
            assert "XLA aborts the process" in message and "line " in message, message
            continue
        assert "error" not in result, (case["what"], result)
        want = np.asarray(case["want"])
        assert result["shape"] == list(want.shape), (case["what"], result)
        if case.get("close"):
            np.testing.assert_allclose(result["value"], want, rtol=2e-6, atol=2e-6)
        else:
            assert result["value"] == want.tolist(), (case["what"], result, want.tolist())


_ABORTS = """
    import sys
    import jax, jax.numpy as jnp, ml_dtypes, numpy as np
    x = jnp.asarray(np.array([1.5, 2.0], getattr(ml_dtypes, sys.argv[1])))
    print(np.asarray(jax.jit(lambda v: v + v)(x)))
"""


@pytest.mark.skipif(
    os.environ.get("JULIABRIDGE_PROBE_REFUSED", "") in ("", "0"),
    reason="probes XLA itself (aborting children); set JULIABRIDGE_PROBE_REFUSED=1",
)
@pytest.mark.parametrize("et", sorted(REFUSED))
def test_refused_types_still_abort_plain_jax(et: str) -> None:
    # Why REFUSED holds them: plain JAX dies on an add of the type. When this starts to pass
    # with a newer jaxlib, the type can leave the table (for that jaxlib and later).
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_ABORTS), NARROW[et].name],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode < 0, (et, proc.returncode, proc.stdout[-500:])
