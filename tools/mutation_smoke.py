#!/usr/bin/env python3
"""Mutation smoke for CI: a fixed sample of mutmut's mutants of core files must stay killed.

Runs mutmut (configured in pyproject.toml, see docs/mutation-testing.md) in a scratch copy of
the working tree, on a smaller scope that fits CI's budget:

* the files in SMOKE_FILES, plus those of pyproject's `only_mutate` list that changed since the
  merge base with the main branch (so a change to a mutated module is sampled too), and the
  functions named in SMOKE_FUNCTIONS of larger core modules (left out when --files is given);
* the tests in SMOKE_TESTS, plus TESTS_FOR's tests of each changed module (each mutant runs
  only those that reach its function);
* of the mutants mutmut generates there, a fixed sample: every function's mutants numbered
  1, 1 + stride, 1 + 2 * stride, ... (mutmut numbers a function's mutants in source order, so
  the sample is the same from run to run while the code is).

The score is killed (timeouts count as killed) / sampled, without the mutants listed in
EQUIVALENT. Exit status 1 when it is below --threshold or when mutmut cannot run the clean
tests; the survivors are printed with their diffs.

Usage: python tools/mutation_smoke.py [--threshold 0.9] [--stride 8] [--base main]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Core modules sampled on every run: small, and quick to test.
SMOKE_FILES = [
    "juliabridge/lux/trees.py",
    "juliabridge/lux/batchsize.py",
    "juliabridge/function.py",
    "juliabridge/dtypes.py",
    "juliabridge/backends/lax/evaluate.py",
    "juliabridge/backends/lax/valtypes.py",
]
#: Core modules too large to sample whole on every run: only these functions' mutants (the
#: refusals and rules a refactor is likeliest to break), so bundle/, stablehlo/ and
#: transforms/ have mutants in every run too.
SMOKE_FUNCTIONS = {
    "juliabridge/stablehlo/sanitize.py": ["_filter_arg_attrs"],
    "juliabridge/transforms/primitives.py": ["_jvp_transpose"],
}
#: Tests that kill the sampled mutants (a subset of pyproject's selection).
SMOKE_TESTS = [
    "tests/test_pinned_batch.py",
    "tests/test_pinned_calls.py",
    "tests/test_pinned_params.py",
    "tests/test_pinned_lax.py",
    "tests/test_pinned_sanitize_report.py",
    "tests/test_pinned_higher_order.py",
]
#: The tests that reach a changed module's mutants, by path prefix (first match wins); a changed
#: module matching none gets pyproject's whole test selection.
TESTS_FOR = {
    "juliabridge/bundle/": ["tests/test_pinned_security.py", "tests/test_bundle_hardening.py"],
    "juliabridge/stablehlo/": ["tests/test_pinned_security.py", "tests/test_module_hardening.py"],
    # not tests/test_transforms.py: its `juliabridge vjp` test runs Enzyme's derivation child,
    # which dies under mutmut (docs/mutation-testing.md), so the clean run would fail
    "juliabridge/transforms/": ["tests/test_pinned_transforms.py"],
    "juliabridge/verification.py": ["tests/test_pinned_verify.py"],
    "juliabridge/lux/params_io.py": ["tests/test_pinned_params.py"],
    "juliabridge/lux/parallel.py": ["tests/test_pinned_parallel.py"],
    "juliabridge/lux/model.py": ["tests/test_pinned_calls.py", "tests/test_pinned_batch.py"],
    "juliabridge/backends/lax/": ["tests/test_pinned_lax.py", "tests/lax/test_framework.py"],
}
#: Mutants no test can kill because they do not change behaviour: one TOML file per module in
#: tools/mutation_equivalents/ (a table per mutant name: `line`, which `mutmut show` of it must
#: still contain, and `why`; docs/mutation-testing.md lists them). They leave the denominator
#: only while their mutated line is still the one named.
EQUIVALENTS_DIR = ROOT / "tools" / "mutation_equivalents"


def load_equivalents(folder: Path = EQUIVALENTS_DIR) -> dict[str, str]:
    """Mutant name -> the mutated line it must still show, from every file in `folder`."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.toml")):
        for name, entry in tomllib.loads(path.read_text()).items():
            if not name.startswith(path.stem + "."):
                raise SystemExit(f"mutation_smoke: {path.name} lists {name}, of another module")
            if not entry.get("line") or len(entry.get("why", "")) < 20:
                raise SystemExit(f"mutation_smoke: {path.name}: {name} needs `line` and `why`")
            out[name] = entry["line"]
    return out


EQUIVALENT = load_equivalents()

KILLED = {1, 3, 24, -24, 36, 152, 255}  # mutmut: test failure, pytest error, timeouts
SURVIVED = {0, 5, 33, 35}  # survived, no tests, no tests, suspicious


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def changed_files(base: str, mutated: list[str]) -> list[str]:
    """Files of `mutated` that differ (committed or not) from the merge base with `base`."""
    merge_base = _git("merge-base", "HEAD", base)
    if not merge_base:
        return []
    names = set(_git("diff", "--name-only", merge_base).splitlines())
    return [f for f in mutated if f in names]


def tests_for(changed: list[str], selection: list[str]) -> list[str]:
    """SMOKE_TESTS plus the tests that reach the mutants of the `changed` modules."""
    tests = list(SMOKE_TESTS)
    for f in changed:
        extra = next((t for prefix, t in TESTS_FOR.items() if f.startswith(prefix)), selection)
        tests += [t for t in extra if t not in tests]
    return tests


def scratch_copy(dest: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, as they are now."""
    listing = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for rel in filter(None, listing.split("\0")):
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def smoke_config(pyproject: Path, files: list[str], tests: list[str]) -> None:
    """Rewrite [tool.mutmut]'s scope in the scratch copy's pyproject.toml."""
    text = pyproject.read_text()
    for key, values in (("only_mutate", files), ("pytest_add_cli_args_test_selection", tests)):
        block = re.compile(rf"^{key} = \[.*?^\]", re.S | re.M)
        new = f"{key} = {json.dumps(values)}"
        text, n = block.subn(new, text)
        if n != 1:
            raise SystemExit(f"mutation_smoke: no multi-line {key} list in [tool.mutmut]")
    pyproject.write_text(text)


def module_name(path: str) -> str:
    """``juliabridge/lux/trees.py`` -> ``juliabridge.lux.trees`` (mutmut's prefix)."""
    return path.removesuffix(".py").replace("/", ".")


def patterns(files: list[str], functions: dict[str, list[str]], stride: int) -> list[str]:
    """mutmut name patterns: every function's sampled mutants in `files`, and in each module
    of `functions` (not also in `files`) those of the functions named."""
    numbers = range(1, 400, stride)
    out = [f"{module_name(f)}.*__mutmut_{k}" for f in files for k in numbers]
    for f, names in functions.items():
        if f not in files:
            out += [f"{module_name(f)}.x_{n}__mutmut_{k}" for n in names for k in numbers]
    return out


def mutmut(work: Path, children: int, *names: str) -> int:
    env = dict(os.environ)
    env.setdefault("JULIABRIDGE_HDF5_WORKER", "0")  # bundle/ is not mutated; skip the subprocess
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)]
    proc = subprocess.run([*cmd, *names], cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
    return proc.returncode


def results(work: Path) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for meta in (work / "mutants").rglob("*.py.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def show(work: Path, name: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", name],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--stride", type=int, default=8)
    parser.add_argument("--base", default="main")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument("--files", nargs="*", help="mutate these files instead of SMOKE_FILES")
    parser.add_argument("--tests", nargs="*", help="run these tests instead of SMOKE_TESTS")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    start = time.monotonic()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    changed = changed_files(args.base, list(config["only_mutate"]))
    files = sorted(set(args.files or SMOKE_FILES) | set(changed))
    functions = {} if args.files else SMOKE_FUNCTIONS
    tests = args.tests or tests_for(changed, list(config["pytest_add_cli_args_test_selection"]))
    work = Path(tempfile.mkdtemp(prefix="jb-mutation-smoke-"))
    try:
        scratch_copy(work)
        smoke_config(work / "pyproject.toml", sorted(set(files) | set(functions)), tests)
        wanted = patterns(files, functions, args.stride)
        if mutmut(work, args.children, *wanted) != 0:
            print("mutation smoke: mutmut could not run (the clean tests must pass)")
            return 1
        sampled = {
            n: c for n, c in results(work).items() if any(fnmatch.fnmatchcase(n, p) for p in wanted)
        }
        equivalent = set()
        for name, line in EQUIVALENT.items():
            if name in sampled and line in show(work, name):
                equivalent.add(name)
        counted = {n: c for n, c in sampled.items() if n not in equivalent}
        killed = [n for n, c in counted.items() if c in KILLED]
        unchecked = [n for n, c in counted.items() if c is None]
        survivors = sorted(n for n in counted if n not in killed and n not in unchecked)
        total = len(killed) + len(survivors)
        score = len(killed) / total if total else 1.0
        by_file: dict[str, list[int]] = {}
        for n, c in counted.items():
            if c is None:
                continue
            mod = n.rsplit(".", 1)[0]
            by_file.setdefault(mod, [0, 0])
            by_file[mod][0] += c in KILLED
            by_file[mod][1] += 1
        for mod, (k, t) in sorted(by_file.items()):
            print(f"  {mod:45s} {k:4d}/{t:<4d} killed")
        for n in survivors:
            print(show(work, n).rstrip() or n)
        if args.keep:
            (work / "smoke-results.json").write_text(json.dumps(counted, indent=1))
        print(
            f"mutation smoke: {len(killed)}/{total} sampled mutants killed ({score:.1%}; "
            f"threshold {args.threshold:.0%}; {len(equivalent)} equivalent left out; files: "
            f"{', '.join(files + [f for f in functions if f not in files])}) in "
            f"{time.monotonic() - start:.0f} s"
        )
        if unchecked:
            print(f"mutation smoke: {len(unchecked)} sampled mutants were not run")
            return 1
        return 0 if score >= args.threshold else 1
    finally:
        if args.keep:
            print(f"scratch copy kept at {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
