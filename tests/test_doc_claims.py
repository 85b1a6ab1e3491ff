"""Figures and defaults the docs quote are the code's (issue 29: staleness made hard).

Each test reads a claim from README.md, docs/ or benchmarks/README.md and checks it against
what produces it: the backends' behaviour (the README's backend table), doctor's tested jax
range, pyproject.toml and the CI constraints (the supported versions), the benchmark scripts'
constants and defaults, and the fuzz test's splits.
"""

from __future__ import annotations

import ast
import contextlib
import re
import tomllib
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.errors import JuliaBridgeError
from tests.bundle_factory import dense_bn_arrays, make_dense_bn
from tests.conftest import require_backend

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _constants(path: Path) -> dict[str, Any]:
    """The module-level NAME = literal assignments of a Python file, without running it."""
    out: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and node.value is not None:
                    with contextlib.suppress(ValueError):
                        out[t.id] = ast.literal_eval(node.value)
    return out


# --- the README's backend table ------------------------------------------------------------------


def _backend_table() -> dict[str, dict[str, str]]:
    lines = [ln for ln in README.splitlines() if ln.startswith("| ")]
    head = next(ln for ln in lines if ln.startswith("| backend |"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    rows = {}
    for ln in lines:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) == len(cols) and cells[0].startswith("`") and cells[0] != "backend":
            rows[cells[0].strip("`")] = dict(zip(cols, cells, strict=True))
    return rows


def _works(f: Any) -> bool:
    try:
        jax.block_until_ready(f())
    except JuliaBridgeError:
        return False
    return True


@pytest.mark.parametrize("backend", ["lax", "enzyme", "xla"])
def test_the_backend_table_says_what_each_backend_does(backend: str, tmp_path: Path) -> None:
    row = _backend_table()[backend]
    require_backend(backend)
    model = juliabridge.import_lux(make_dense_bn(tmp_path / "b.bundle"), backend=backend)
    x = dense_bn_arrays()[0]
    bias = model.params["layer_1"]["bias"]

    def loss(b: jax.Array) -> jax.Array:
        p = {**model.params, "layer_1": {**model.params["layer_1"], "bias": b}}
        return jnp.sum(model.apply(p, model.state, x)[0] ** 2)

    facts = {
        "jit": _works(lambda: jax.jit(model)(x)),
        "grad": _works(lambda: jax.grad(loss)(bias)),
        "jvp": _works(lambda: jax.jvp(loss, (bias,), (jnp.ones_like(bias),))),
        "hessian, higher orders": _works(lambda: jax.hessian(loss)(bias)),
        "vmap": _works(lambda: jax.vmap(model)(jnp.stack([x, 2 * x]))),
    }
    for column, works in facts.items():
        assert row[column].startswith("yes" if works else "no"), (backend, column, row[column])
    # A batched vmap is the lifted primitives themselves; a loop is the juliabridge primitive's
    # lax.map rule (function.py).
    assert ("batched" in row["vmap"]) == model.fn.traceable
    assert ("a loop" in row["vmap"]) == (not model.fn.traceable)
    if facts["hessian, higher orders"]:  # the table's "yes" is a right answer, not only one
        np.testing.assert_allclose(
            np.asarray(jax.hessian(loss)(bias)),
            np.asarray(jax.jacfwd(jax.grad(loss))(bias)),
            rtol=1e-4,
            atol=1e-4,
        )


# --- supported versions -------------------------------------------------------------------------


def test_the_supported_versions_are_the_tested_ones() -> None:
    from juliabridge.cli.doctor import TESTED_JAX

    lo, hi = TESTED_JAX
    text = _flat(README)
    assert f"jax/jaxlib {lo} to {hi}, the releases CI tests" in text
    assert f"CPython 3.11 with jax {lo} and enzyme-ad, and CPython 3.13 with jax {hi}" in text
    for name, version in (("a", lo), ("b", hi)):
        constraints = (REPO / ".ci" / f"constraints-{name}.txt").read_text()
        assert f"jax=={version}\n" in constraints and f"jaxlib=={version}\n" in constraints
    ci = (REPO / ".ci" / "run").read_text()
    assert "find_python 3.11" in ci and "find_python 3.13" in ci
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    floor = next(d for d in project["dependencies"] if d.startswith("jax>="))[len("jax>=") :]
    assert floor == lo
    assert f"pyproject.toml asks for jax ≥ {floor} with no upper bound" in text
    for doc in (README, (REPO / "docs" / "lax-backend.md").read_text()):
        assert "any JAX version" not in _flat(doc)
        assert "0.12.x" not in doc


# --- benchmarks ---------------------------------------------------------------------------------


def test_the_benchmarks_readme_quotes_the_scripts_targets_and_defaults() -> None:
    bench = REPO / "benchmarks"
    doc = (bench / "README.md").read_text(encoding="utf-8")
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"^\| `python benchmarks/(\w+)\.py[^`]*` \|[^|]*\| ([^|]*) \|", doc, re.M
        )
    }
    targets = {
        "bench_runtime": f"ratio ≤ {_constants(bench / 'bench_runtime.py')['TARGET']}",
        "bench_overhead": f"ratio ≤ {_constants(bench / 'bench_overhead.py')['TARGET']}",
        "bench_compile": f"ratio ≤ {_constants(bench / 'bench_compile.py')['TARGET']}",
    }
    lax = _constants(bench / "bench_lax.py")
    targets["bench_lax"] = (
        f"vmap ≤ {lax['VMAP_TARGET']}, parity ≤ {lax['PARITY_TARGET']}, "
        f"lift ≤ {lax['LIFT_TARGET']:g}"
    )
    for script, want in targets.items():
        assert rows[script].startswith(want), (script, rows[script], want)
    # The default backends, as the scripts take them.
    default = _constants(bench / "common.py")["DEFAULT_BACKENDS"]
    assert f"`--backends {' '.join(default)}` (the default" in _flat(doc)
    for script in ("bench_runtime.py", "bench_overhead.py", "bench_compile.py"):
        source = (bench / script).read_text()
        assert 'add_argument("--backends", nargs="+", default=list(DEFAULT_BACKENDS))' in source
        assert f"[--backends {' '.join(default)}]" in source  # its usage line
    # docs/benchmarks.md states the vmap target it calls met.
    perf = _flat((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8"))
    assert f"≤ {lax['VMAP_TARGET']}× (`VMAP_TARGET` in `bench_lax.py`)" in perf


# --- the fuzz test's splits ---------------------------------------------------------------------


def test_reliability_states_the_fuzz_splits_of_the_fuzz_test() -> None:
    fuzz = _constants(REPO / "tests" / "test_fuzz.py")
    shares, split = fuzz["SHARES"], fuzz["BACKEND_SPLIT"]
    doc = _flat((REPO / "docs" / "reliability.md").read_text(encoding="utf-8"))
    families = "/".join(f"{round(v * 100)}" for v in shares.values())
    backends = "/".join(f"{round(v * 100)}" for v in split.values())
    assert f"split {families} % over the families above" in doc
    assert f"and {backends} % over {'/'.join(split)};" in doc
    listed = ", ".join(f"`{b}`" for b in split)
    assert listed.replace(", `enzyme`", " and `enzyme`") in doc  # "`lax`, `xla` and `enzyme`"
    for family in shares:
        assert f"| `{family}` |" in (REPO / "docs" / "reliability.md").read_text()
