"""Figures and defaults the docs quote are the code's (issue 29: staleness made hard).

Each test reads a claim from README.md, docs/ or benchmarks/README.md and checks it against
what produces it: the backends' behaviour (the backend table of docs/transforms.md), doctor's
tested jax range, pyproject.toml and the CI constraints (the supported versions), the benchmark
scripts' constants and defaults, and the fuzz test's splits.
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


# --- the backend table (docs/transforms.md) -----------------------------------------------------


def _backend_table() -> dict[str, dict[str, str]]:
    """The backends' comparison, in the one place the docs give it (docs/transforms.md)."""
    page = (REPO / "docs" / "transforms.md").read_text(encoding="utf-8")
    lines = [ln for ln in page.splitlines() if ln.startswith("| ")]
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
    from juliabridge.support.jaxversion import TESTED_JAX, release

    lo, hi = TESTED_JAX
    bound = f"0.{release(hi)[1] + 1}"  # the next minor release CI has not seen
    text = _flat(_doc("install.md"))  # the install page says it; README links to it
    assert f"jax/jaxlib {lo} to {hi}, the releases CI tests" in text
    assert (
        f"CPython 3.11 with jax {lo} and enzyme-ad, and CPython 3.13 with the newest jax release "
        "pyproject.toml admits, installed when CI runs" in text
    )
    assert f"fails while that release is newer than {hi}" in text
    # A pins the oldest; B pins neither, so it meets each new release the bound admits.
    a = (REPO / ".ci" / "constraints-a.txt").read_text()
    assert f"jax=={lo}\n" in a and f"jaxlib=={lo}\n" in a
    b = (REPO / ".ci" / "constraints-b.txt").read_text().splitlines()
    assert not [line for line in b if re.match(r"jax(lib)?\b", line)], b
    ci = (REPO / ".ci" / "run").read_text()
    assert "find_python 3.11" in ci and "find_python 3.13" in ci
    assert "v.untested_message(v.installed())" in ci  # B fails on a jax past the range
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    for dist in ("jax", "jaxlib"):
        assert f"{dist}>={lo},<{bound}" in project["dependencies"], project["dependencies"]
    assert f"pyproject.toml asks for jax and jaxlib ≥ {lo} and < {bound}, the next minor" in text
    assert "`import juliabridge` then warns once, in one line (`UntestedJaxWarning`" in text
    lax_doc = (REPO / "docs" / "lax-backend.md").read_text()
    assert f"juliabridge supports ({lo} to {hi}; CI tests {lo} and the newest release below" in (
        _flat(lax_doc)
    )
    for doc in (README, _doc("install.md"), lax_doc):
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


# --- contract numbers read from the code (issue 40: the 16 false or stale claims) -------------

DOCS = REPO / "docs"


def _doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _prose_files() -> list[Path]:
    return [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted(DOCS.glob("**/*.md"))]


def _find(pattern: str, text: str) -> str:
    """The first group of `pattern`'s first match in `text` (the test fails without one)."""
    m = re.search(pattern, text, re.M)
    if m is None:
        pytest.fail(f"{pattern!r} is not found")
    return m[1]


def _int(text: str) -> int:
    return int(text.replace(",", "").replace("_", ""))


_NUMBER_WORDS = [
    *("zero", "one", "two", "three", "four", "five", "six"),
    *("seven", "eight", "nine", "ten", "eleven", "twelve"),
]


def test_reliability_names_every_fuzz_family_and_their_number() -> None:
    shares = _constants(REPO / "tests" / "test_fuzz.py")["SHARES"]
    doc = _doc("reliability.md")
    flat = _flat(doc)
    assert f"one of {_NUMBER_WORDS[len(shares)]} families of mutations" in flat
    for word in _NUMBER_WORDS:  # no other count of the families anywhere
        if word != _NUMBER_WORDS[len(shares)]:
            assert not re.search(rf"\b(?:of|the) {word} families", flat), word
    head = doc.index("| family | what it mutates |")
    table = doc[head : doc.index("\n\n", head)].splitlines()[2:]
    assert [row.split("`")[1] for row in table] == list(shares)
    # Every kind of budget attack in tests/fuzz_attacks.py is in the module_attacks row.
    row = next(r for r in table if r.startswith("| `module_attacks` |"))
    source = (REPO / "tests" / "fuzz_attacks.py").read_text(encoding="utf-8")
    kinds = ast.literal_eval(_find(r"kind = draw\(st\.sampled_from\((\[\"chain\"[^]]*\])", source))
    said = {"chain": "chains of", "doubling": "calls doubling", "value": "values from",
            "live": "alive at once", "case": "`stablehlo.case`"}  # fmt: skip
    assert set(kinds) == set(said), "a new budget attack: name it in the module_attacks row"
    for kind in kinds:
        assert said[kind] in row, kind


def test_the_budgets_quoted_are_the_code_s() -> None:
    from juliabridge.stablehlo import budget

    source = (REPO / "juliabridge" / "stablehlo" / "budget.py").read_text(encoding="utf-8")
    defaults = {
        env: getattr(budget, name)
        for env, name in re.findall(r'_env_int\("(JULIABRIDGE_\w+)", (MAX_\w+)\)', source)
    }
    assert {"JULIABRIDGE_MAX_OPS", "JULIABRIDGE_MAX_CHAIN"} <= set(defaults)
    seen = 0
    for path in _prose_files():
        text = path.read_text(encoding="utf-8")
        for number, env in re.findall(r"([\d,]+) \(`(JULIABRIDGE_\w+)`", text):
            if env in defaults:
                assert _int(number) == defaults[env], (path.name, env, number)
                seen += 1
        for name, number in re.findall(r"\(`(MAX_\w+)`, ([\d,]+)\)", text):
            assert _int(number) == getattr(budget, name), (path.name, name, number)
            seen += 1
    assert seen >= 3


def test_the_per_op_cost_quoted_is_the_calibration_table_s() -> None:
    doc = _doc("reliability.md")
    cost = {
        m[1]: int(m[2].replace(",", ""))
        for m in re.finditer(
            r"^\s*\| (lax|xla) \| inlined op[^|]*\| [^|]*\| ([\d,]+) \|", doc, re.M
        )
    }
    assert set(cost) == {"lax", "xla"}
    kb = {b: f"{cost[b] / 1000:.1f} KB" for b in cost}
    quote = f"about {kb['lax']} on lax and {kb['xla']} on xla"
    assert quote in _flat(doc)
    budget_py = (REPO / "juliabridge" / "stablehlo" / "budget.py").read_text(encoding="utf-8")
    assert f"about {kb['lax']} per inlined op on the lax" in budget_py
    assert f"backend and {kb['xla']} on xla" in budget_py


def test_bench_parse_memory_defaults_stay_within_or_raise_the_op_budget() -> None:
    from juliabridge.stablehlo.budget import MAX_OPS

    path = REPO / "benchmarks" / "bench_parse_memory.py"
    source = path.read_text(encoding="utf-8")
    default_mb = float(_find(r'"--mb", type=float, default=([\d.]+)', source))
    ops = int(default_mb * 1e6) // int(_find(r"ops = n // (\d+)", source))
    if ops > MAX_OPS:  # the 8 MB chain: the child must raise the budget it measures past
        assert 'os.environ["JULIABRIDGE_MAX_OPS"] = str(10**9)' in source


def test_exit_codes_quoted_in_prose_are_the_table_s() -> None:
    from juliabridge import errors
    from juliabridge.support.exitcodes import EXIT_CODES, USAGE, exit_code

    codes = {row.code for row in EXIT_CODES}
    by_class = {
        name: exit_code(cls.__new__(cls))
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, Exception)
    }
    seen = 0
    for path in _prose_files():
        text = _flat(path.read_text(encoding="utf-8"))
        for n in re.findall(r"\bexit(?: code| status)? (\d+)\b", text):
            assert int(n) in codes, (path.name, n)
            seen += 1
        # "`SaveError`s (code 20)", "`UnsupportedOpError` (exit code 22)"
        for name, n in re.findall(r"`(\w+Error)`s? \((?:CLI )?(?:exit )?code (\d+)\)", text):
            assert by_class[name] == int(n), (path.name, name, n)
            seen += 1
        for name, n in re.findall(r"`(\w+Error)`, CLI exit code (\d+)", text):
            assert by_class[name] == int(n), (path.name, name, n)
        assert "a missing script is\n" not in text
        if "missing script is" in text:
            assert f"usage error, exit {USAGE}" in text, path.name
    assert seen >= 5


def test_the_preload_list_is_the_one_the_docs_describe() -> None:
    lines = (REPO / "tools" / "mutmut_preload.txt").read_text(encoding="utf-8").splitlines()
    names = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    doc = _flat(_doc("mutation-testing.md"))
    start = doc.index("server therefore only imports the modules in `tools/mutmut_preload.txt`")
    said = doc[start : doc.index("- `pytest_add_cli_args_test_selection`", start)]
    for name in names:
        top, _, rest = name.partition(".")
        if top == "juliabridge":
            assert (rest or "juliabridge") in said, name
        elif top != "jax" or not rest:
            assert top in said, name
    if "juliabridge" in names:
        assert "juliabridge itself is not preloaded" not in doc
        assert "The fork server preloads juliabridge" in doc


def test_the_smoke_s_sample_size_and_budget_are_the_script_s() -> None:
    smoke = _constants(REPO / "tools" / "mutation_smoke.py")
    only = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    doc = _flat(_doc("mutation-testing.md"))
    for name, value in re.findall(r"`([A-Z_]+)` = ([\d,.]+)", doc):
        assert name in smoke, name
        assert float(value.replace(",", "").rstrip(".")) == smoke[name], (name, value)
    assert f"`MODULES_PER_RUN` = {smoke['MODULES_PER_RUN']} of the {len(only)} modules" in doc
    assert f"{smoke['MODULES_PER_RUN'] * smoke['PER_MODULE']} mutants in all" in doc
    assert f"({smoke['MODULES_PER_RUN']} modules, {smoke['BUDGET']:g} s budget)" in doc


def test_the_mutant_totals_are_the_sums_of_their_table() -> None:
    doc = _doc("mutation-testing.md")
    only = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    head = doc.index("| module | mutants | s16 now |")
    end = doc.index("Totals over the", head)
    rows = [ln for ln in doc[head:end].splitlines()[2:] if ln.startswith("| ")]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    total = sum(_int(_find(r"^([\d,]+)", c[1])) for c in cells)
    s16 = sum(_int(c[2]) for c in cells)
    flat = _flat(doc)
    assert re.search(
        rf"Totals over the {len(rows)} rows \(\d+ of the {len(only)} modules\): {total:,} "
        rf"mutants generated; {s16:,} in the current stride-16 sample",
        flat,
    )
    for quoted in re.findall(r"([\d,]{5,}) mutants", flat):  # every count of all of them
        assert _int(quoted) == total or _int(quoted) < 10_000, quoted
    assert (
        f"{len(only)} files (the table under Scores has {len(rows)} rows, {total:,} mutants" in flat
    )
    # The tool-choice row's sum, from the 2026-12-01 table it names (in the runs' log).
    log = _doc("logs/mutation-runs.md")
    earlier = log[log.index("## Earlier figures") :]
    count = {
        m[1]: int(m[2])
        for m in re.finditer(r"^\| lux/(trees|batchsize)\.py \| (\d+) \|", earlier, re.M)
    }
    n = count["trees"] + count["batchsize"]
    assert (
        f"{n} mutants of trees.py + batchsize.py ({count['trees']} + {count['batchsize']}," in doc
    )


def test_architecture_names_the_public_surface() -> None:
    doc = _doc("architecture.md")
    start = doc.index("public surface (`__all__`):")
    said = " ".join(doc[start : doc.index("the errors;", start)].split())
    words = set(re.findall(r"\w+", said.split(":", 1)[1]))
    errors = {n for n in juliabridge.__all__ if n.endswith(("Error", "Unavailable"))}
    assert words == set(juliabridge.__all__) - errors


def test_architecture_quotes_verify_s_mismatch_line() -> None:
    source = (REPO / "juliabridge" / "cli" / "commands.py").read_text(encoding="utf-8")
    assert 'Text(f": outputs differ from {whose}")' in source
    quoted = re.findall(r"^MISMATCH: outputs differ from (.+)$", _doc("architecture.md"), re.M)
    assert quoted
    for whose in quoted:
        assert f'"{whose}"' in source, whose


def test_the_test_files_the_readme_names_exist() -> None:
    named = set(re.findall(r"\btests/[\w/]+\.py\b", _flat(README)))
    assert "tests/test_readme.py" in named
    for path in named:
        assert (REPO / path).is_file(), path


def test_the_docs_say_what_lenet_jl_writes() -> None:
    script = (REPO / "julia" / "examples" / "lenet.jl").read_text(encoding="utf-8")
    default = _find(r'ARGS\), 1, "([^"]+)"\)', script)
    text = _flat(_doc("from-julia.md"))
    assert "JuliaBridge.export_lux(" in script  # a Julia export directory (docs/julia-export.md)
    assert f"as a Julia export directory (`{default}`, [the format](julia-export.md))" in text
    assert "never writes the shipped bundle" in text
    assert "lenet.jl` regenerates" not in text + _flat(README)


# --- issue 53's audit: claims that had gone stale --------------------------------------------


def test_the_smoke_s_window_odds_are_the_script_s() -> None:
    """The smoke's window holds MODULES_PER_RUN of the core; where it starts comes from the
    tree's hash, so how often a module is sampled is a probability, not a schedule."""
    smoke = _constants(REPO / "tools" / "mutation_smoke.py")
    only = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    k, n = smoke["MODULES_PER_RUN"], len(only)
    p = k / n
    doc = _flat(_doc("mutation-testing.md"))
    assert (
        f"`MODULES_PER_RUN` = {k} of the {n} modules of `only_mutate` ({round(100 * p)} %)" in doc
    )
    assert f"with probability {k}/{n}" in doc
    for runs, said in re.findall(r"(?:once )?in (\d+) runs(?: with probability)? (\d+) %", doc):
        assert int(said) == round(100 * (1 - (1 - p) ** int(runs))), (runs, said)
    assert re.search(r"in \d+ runs with probability", doc)
    for stale in ("a quarter", "once in four runs", "every module is sampled once"):
        assert stale not in doc, stale


def _row_modules(cell: str) -> set[str]:
    """The modules one row of the scores table stands for (``a/{b,c}.py`` is a/b.py, a/c.py)."""
    name = cell.replace("‡", "").replace("†", "").strip()
    m = re.fullmatch(r"(.*)\{([\w,]+)\}(\.py)", name)
    if m is None:
        return {name}
    return {f"{m[1]}{part}{m[3]}" for part in m[2].split(",")}


def test_the_scores_table_says_which_core_modules_it_covers() -> None:
    doc = _doc("mutation-testing.md")
    only = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    core = {m.removeprefix("juliabridge/") for m in only}
    head = doc.index("| module | mutants | s16 now |")
    rows = [ln for ln in doc[head : doc.index("Totals over the", head)].splitlines()[2:]]
    rows = [r for r in rows if r.startswith("| ")]
    covered: set[str] = set()
    for row in rows:
        covered |= _row_modules(row.strip("|").split("|")[0])
    assert covered <= core, f"rows for modules outside only_mutate: {covered - core}"
    flat = _flat(doc)
    assert f"Totals over the {len(rows)} rows ({len(covered)} of the {len(core)} modules)" in flat
    for module in sorted(core - covered):  # each module without a row is named as such
        assert f"{module} has no row" in flat, module


def test_lax_backend_lists_as_handled_only_types_that_load() -> None:
    """lax-backend.md's element types: the narrow types it lists load on lax; the types every
    backend refuses at load (stablehlo/elementtypes.py) are said to be refused."""
    from juliabridge.backends.lax.valtypes import ELEMENT_TYPES  # the lift's own table
    from juliabridge.stablehlo.elementtypes import REFUSED

    section = _doc("lax-backend.md").split("## Element types", 1)[1].split("\n## ", 1)[0]
    handled, refused = _flat(section).split("A module naming", 1)
    listed = set(re.findall(r"`([a-z]+\d\w*|complex<f\d+>)`", handled))
    assert listed & set(REFUSED) == set(), "a type every backend refuses is listed as handled"
    assert set(ELEMENT_TYPES) - set(REFUSED) <= listed, "a type the lift handles is missing"
    for name in REFUSED:
        assert f"`{name}`" in refused.split("never reaches the lift")[0], name
    assert "refused at load on every backend" in _flat(section)


def test_the_source_paths_the_docs_name_exist() -> None:
    """A path into the checkout that a doc names (`juliabridge/...py`, `tests/...`, or a path
    inside the package such as `stablehlo/budget.py`) is a file there: code that moved takes
    its mentions along (reliability.md named driver/driver.py and juliabridge/shown.py)."""
    package_dirs = {p.name for p in (REPO / "juliabridge").iterdir() if p.is_dir()}
    roots = {"juliabridge", "tests", "tools", "benchmarks", "julia", "docs", "tutorials"}
    missing = []
    for path in _prose_files():
        if "logs" in path.parts:  # dated records keep the paths of their day
            continue
        for name in re.findall(
            r"`([\w.-]+(?:/[\w.-]+)+\.(?:py|jl|md|toml|ipynb))`", path.read_text()
        ):
            first = name.split("/")[0]
            if first == "juliabridge" or first in roots:
                candidates = [REPO / name]
            elif first in package_dirs:
                candidates = [REPO / "juliabridge" / name]
            else:
                continue  # another project's path (jax/_src/..., Reactant's src/...)
            if not any(c.exists() for c in candidates):
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert missing == []
