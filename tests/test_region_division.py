"""Integer division by constants inside region bodies (map, reduce, while) on every backend
(issue 27, class 1): XLA's constant folder divided with the host's trapping instruction, and a
7 / 0 in a `stablehlo.map` body killed the process with SIGFPE (xla, enzyme; jax 0.10.2).

Every generated case runs in a child process per backend, so a trap ends that child (and fails
the test with the signal) instead of the test run; values are checked against XLA's semantics
written out in numpy (tests/fuzz_attacks._xla_division).
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import BACKENDS
from tests.fuzz_attacks import _DIVISIONS, region_division

REPO = Path(__file__).resolve().parents[1]


def standalone(body: list[str], t: str) -> str:
    lines = "".join(f"    {ln}\n" for ln in body)
    return f"module {{\n  func.func @main() -> {t} {{\n{lines}    return %gr : {t}\n  }}\n}}\n"


@st.composite
def cases(draw: st.DrawFn) -> dict[str, object]:
    name = draw(st.sampled_from(["i8", "i16", "i32", "i64", "ui8", "ui32"]))
    dtype = np.dtype(("u" if name[0] == "u" else "") + "int" + name.lstrip("ui"))
    info = np.iinfo(dtype)
    pool = [int(info.min), int(info.max), 0, 1, 5]
    if info.min < 0:
        pool += [-1, -5]
    xs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    y = draw(st.sampled_from([0, -1, 2] if info.min < 0 else [0, 2]))
    region = draw(st.sampled_from(["map", "reduce", "while"]))
    op = draw(st.sampled_from(sorted(_DIVISIONS)))
    body, want = region_division(region, op, name, dtype, xs, y)
    return {
        "text": standalone(body, f"tensor<{len(xs)}x{name}>"),
        "want": want,
        "what": f"{op} {name} {xs} by {y} in {region}",
    }


_CHILD = """
    import json, sys
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    import juliabridge
    out = []
    for case in json.load(open(sys.argv[1])):
        try:
            got = juliabridge.load_mlir(case["text"], backend=sys.argv[2])()[0]
            out.append([int(v) for v in np.asarray(got).ravel()])
        except juliabridge.JuliaBridgeError as e:
            out.append(f"{type(e).__name__}: {e}")
    print(json.dumps(out))
"""


def run_child(script: str, path: Path, backend: str) -> object:
    """Run `script` on `path` and `backend` in a child (a trap ends only the child); its last
    line of output, parsed as JSON."""
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(path), backend],
        env=env, capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cases(backend: str, batch: list[dict[str, object]], tmp: Path) -> list[object]:
    path = tmp / f"{backend}.json"
    path.write_text(json.dumps(batch))
    got = run_child(_CHILD, path, backend)
    assert isinstance(got, list), got
    return got


@pytest.mark.parametrize("backend", BACKENDS)
def test_division_in_region_bodies_never_traps(backend: str, tmp_path: Path) -> None:
    if backend == "enzyme":
        pytest.importorskip("enzyme_ad")
    batch: list[dict[str, object]] = []

    @settings(max_examples=40, database=None, suppress_health_check=list(HealthCheck))
    @given(cases())
    def collect(case: dict[str, object]) -> None:
        batch.append(case)

    collect()
    # The case that killed the process before (7 / 0 in a map body) is always in the batch.
    body, want = region_division("map", "stablehlo.divide", "i32", np.dtype(np.int32), [7], 0)
    batch.append({"text": standalone(body, "tensor<1xi32>"), "want": want, "what": "7 / 0"})
    got = run_cases(backend, batch, tmp_path)
    for case, value in zip(batch, got, strict=True):
        assert value == case["want"], (case["what"], value, case["want"])


_GRAD_CHILD = """
    import json, sys
    import jax, jax.numpy as jnp
    import juliabridge
    f = juliabridge.load_mlir(open(sys.argv[1]).read(), backend=sys.argv[2])
    g = jax.grad(lambda x: f(x)[0].sum())(jnp.arange(3.0))
    print(json.dumps([float(v) for v in g]))
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["chlo.broadcast_divide", "stablehlo.remainder"])
def test_gradient_through_a_reduce_body_that_divides_constants(
    backend: str, op: str, tmp_path: Path
) -> None:
    """The VJP module derived for xla holds the division's guard with constant operands; a
    call of the lifted formula in that reduce body made XLA abort (rc -6, no message) where
    the fuzz suite's module_attacks drew INT_MIN / 0 in a reduce body with gradients on."""
    if backend == "enzyme":
        pytest.importorskip("enzyme_ad")
    body = [
        "%gx = stablehlo.constant dense<[-128]> : tensor<1xi8>",
        "%g2 = stablehlo.reshape %gx : (tensor<1xi8>) -> tensor<1x1xi8>",
        "%g0 = stablehlo.constant dense<0> : tensor<i8>",
        '%gr = "stablehlo.reduce"(%g2, %g0) ({',
        "^bb0(%a: tensor<i8>, %b: tensor<i8>):",
        "  %c = stablehlo.constant dense<-128> : tensor<i8>",
        "  %d = stablehlo.constant dense<0> : tensor<i8>",
        f"  %q = {op} %c, %d : (tensor<i8>, tensor<i8>) -> tensor<i8>",
        "  %z = stablehlo.constant dense<0> : tensor<i8>",
        "  %m = stablehlo.multiply %q, %z : tensor<i8>",
        "  %ab = stablehlo.add %a, %b : tensor<i8>",
        "  %r = stablehlo.add %ab, %m : tensor<i8>",
        "  stablehlo.return %r : tensor<i8>",
        "}) {dimensions = array<i64: 1>} : (tensor<1x1xi8>, tensor<i8>) -> tensor<1xi8>",
        "%hc = stablehlo.convert %gr : (tensor<1xi8>) -> tensor<1xf32>",
        "%hb = stablehlo.broadcast_in_dim %hc, dims = [0] : (tensor<1xf32>) -> tensor<3xf32>",
        "%ho = stablehlo.multiply %x, %x : tensor<3xf32>",
        "%hr = stablehlo.add %ho, %hb : tensor<3xf32>",
    ]
    lines = "".join(f"    {ln}\n" for ln in body)
    text = (
        "module {\n  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {\n"
        f"{lines}    return %hr : tensor<3xf32>\n  }}\n}}\n"
    )
    path = tmp_path / "m.mlir"
    path.write_text(text)
    # d/dx sum(x*x + c) = 2x: the reduce's constant contributes nothing.
    assert run_child(_GRAD_CHILD, path, backend) == [0.0, 2.0, 4.0]
