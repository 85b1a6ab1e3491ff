#!/usr/bin/env python3
"""The module -> tests map, derived from what the tests execute (issue 52).

Which test files guard a module is not written by hand: each test file runs alone under
coverage.py (``python -m coverage run --source=juliabridge -m pytest FILE``) and every
juliabridge module it executes a line of records that file. The result is checked in as
tools/test_map.json:

* ``tests``: per measured test file, the modules it executes (and when it was measured);
* ``modules``: per module of juliabridge/ (every ``.py`` file, by path), the test files that
  execute it, derived from ``tests``; an empty list where no measured file does.

A refresh may be partial: ``--refresh FILE...`` re-measures those test files only and keeps
the others' entries, so a developer re-measures the tests they touched and a full refresh
(every tests/test_*.py: a whole-suite run under coverage, an hour or more on two cores) is
needed only now and then. ``--sync`` measures nothing: it adds entries for new modules
(empty), drops those of deleted modules and test files, and derives ``modules`` again.
tests/test_test_map.py checks, in CI, that the map fits the code: every module has an entry
and no entry names a missing module or test file.

What it measures: code run in the test process (the HDF5 reader runs in process here,
JULIABRIDGE_HDF5_WORKER=0, as under mutmut); a test that runs the CLI or a reader in a child
process executes that code unmeasured. A test file that fails still records what it ran.

tools/mutation_smoke.py and tools/realistic_mutants.py take a module's tests from here
(`tests_for_module`).

Usage:
    python tools/test_map.py --refresh tests/test_params_contract.py tests/test_tree_slots.py
    python tools/test_map.py --refresh            # every tests/test_*.py (slow)
    python tools/test_map.py --sync               # new/deleted modules and tests, no runs
    python tools/test_map.py --check              # exit 1 if the map does not fit the code
    python tools/test_map.py --module juliabridge/lux/params_io.py   # its test files
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "tools" / "test_map.json"
PACKAGE = "juliabridge"
#: Seconds one test file may run under coverage before its measurement is abandoned.
TIMEOUT = 1800.0


def modules(root: Path = ROOT) -> list[str]:
    """Every module of juliabridge/ as a repository path (``juliabridge/lux/trees.py``)."""
    return sorted(p.relative_to(root).as_posix() for p in (root / PACKAGE).rglob("*.py"))


def test_files(root: Path = ROOT) -> list[str]:
    """Every test file pytest collects by name: tests/test_*.py."""
    return sorted(p.relative_to(root).as_posix() for p in (root / "tests").glob("test_*.py"))


def load(path: Path = MAP) -> dict[str, Any]:
    """The map, or an empty one when the file does not exist yet."""
    if not path.exists():
        return {"tests": {}, "modules": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data.get("tests"), dict) or not isinstance(data.get("modules"), dict):
        raise ValueError(f"{path}: expected an object with 'tests' and 'modules' objects")
    return data


def derive(tests: dict[str, Any], known: list[str]) -> dict[str, list[str]]:
    """``modules`` from ``tests``: every module of `known`, with the test files executing it."""
    out: dict[str, list[str]] = {m: [] for m in known}
    for test, entry in sorted(tests.items()):
        for m in entry["modules"]:
            if m in out:
                out[m].append(test)
    return out


def problems(data: dict[str, Any], root: Path = ROOT) -> list[str]:
    """What in the map does not fit the code (empty when it fits)."""
    known = set(modules(root))
    out = [
        f"module {m} has no entry (run tools/test_map.py --sync or --refresh)"
        for m in sorted(known - set(data["modules"]))
    ]
    out += [
        f"entry for {m}, which is not a module of {PACKAGE}/"
        for m in sorted(set(data["modules"]) - known)
    ]
    for m, tests in sorted(data["modules"].items()):
        out += [f"{m}: names {t}, which does not exist" for t in tests if not (root / t).is_file()]
    for t, entry in sorted(data["tests"].items()):
        if not (root / t).is_file():
            out.append(f"measured test file {t} does not exist")
        out += [
            f"{t}: names {m}, which is not a module" for m in entry["modules"] if m not in known
        ]
    if not out and derive(data["tests"], sorted(known)) != data["modules"]:
        out.append("'modules' is not derived from 'tests' (run tools/test_map.py --sync)")
    return out


def tests_for_module(path: str, data: dict[str, Any] | None = None) -> list[str]:
    """The test files the map says execute the module at `path` (empty when none measured)."""
    data = load() if data is None else data
    return list(data["modules"].get(path, []))


def _covered(args: list[str], root: Path, timeout: float) -> dict[str, set[int]]:
    """Lines of juliabridge/'s modules (by repository path) that pytest `args` execute."""
    with tempfile.TemporaryDirectory(prefix="test-map-") as tmp:
        data_file = Path(tmp) / ".coverage"
        env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "JULIABRIDGE_HDF5_WORKER": "0",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        }
        cmd = [
            sys.executable,
            "-m",
            "coverage",
            "run",
            f"--data-file={data_file}",
            f"--source={PACKAGE}",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *args,
        ]
        try:
            subprocess.run(
                cmd,
                cwd=root,
                env=env,
                timeout=timeout,
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            print(f"{args[-1]}: over {timeout:.0f} s, recorded what it ran so far", file=sys.stderr)
        if not data_file.exists():
            return {}
        import coverage

        cov = coverage.Coverage(data_file=str(data_file))
        cov.load()
        cd = cov.get_data()
        out: dict[str, set[int]] = {}
        for f in cd.measured_files():
            try:
                rel = Path(f).resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                continue
            if rel.startswith(f"{PACKAGE}/"):
                out[rel] = set(cd.lines(f) or ())
        return out


#: The test the baseline runs: every module imported, nothing called.
_BASELINE = """
import importlib

MODULES = {modules!r}


def test_import_everything():
    for m in MODULES:
        try:
            importlib.import_module(m)
        except Exception:
            pass
"""


def baseline(root: Path = ROOT, timeout: float = TIMEOUT) -> dict[str, set[int]]:
    """Lines every test runs whatever it tests: importing every module of the package, under
    tests/conftest.py's fixtures (its autouse ones run for each test) and the plugin."""
    names = [m[: -len(".py")].replace("/", ".").removesuffix(".__init__") for m in modules(root)]
    with tempfile.TemporaryDirectory(prefix="test-map-base-") as tmp:
        test = Path(tmp) / "test_baseline.py"
        test.write_text(_BASELINE.format(modules=names), encoding="utf-8")
        return _covered(["-p", "tests.conftest", f"--rootdir={root}", str(test)], root, timeout)


def measure(
    test: str, base: dict[str, set[int]], root: Path = ROOT, timeout: float = TIMEOUT
) -> list[str]:
    """The modules of juliabridge/ whose function bodies running the test file `test` alone
    executes, beyond what the `base`line (`baseline`) executes."""
    out = []
    for rel, lines in _covered([test], root, timeout).items():
        if (lines - base.get(rel, set())) & body_lines(root / rel):
            out.append(rel)
    return sorted(out)


def body_lines(path: Path) -> set[int]:
    """The lines of `path` inside function bodies: a test executes the module when it runs one
    of them. Lines run at import (definitions, registrations) do not count: every test that
    imports the package runs those, and a bug there is no function's (mutmut maps a mutant
    likewise, to the tests that called its function)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            body = node.body if isinstance(node.body, list) else [node.body]
            for stmt in body:
                out.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return out


def refresh(tests: list[str], jobs: int = 1, path: Path = MAP, root: Path = ROOT) -> dict[str, Any]:
    """Re-measure `tests` and write the map (the other test files' entries kept)."""
    data = load(path)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")
    base = baseline(root)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for test, mods in zip(tests, pool.map(lambda t: measure(t, base, root), tests)):
            data["tests"][test] = {"modules": mods, "measured": when}
            print(f"{test}: {len(mods)} modules", file=sys.stderr)
    return sync(data, path, root)


def sync(data: dict[str, Any], path: Path = MAP, root: Path = ROOT) -> dict[str, Any]:
    """Drop deleted test files, derive ``modules`` for the modules there are, write."""
    data["tests"] = {t: e for t, e in sorted(data["tests"].items()) if (root / t).is_file()}
    data["modules"] = derive(data["tests"], modules(root))
    unmeasured = [t for t in test_files(root) if t not in data["tests"]]
    out = {
        "about": "module -> test files executing it; written by tools/test_map.py, not by hand",
        "unmeasured": unmeasured,
        "tests": data["tests"],
        "modules": data["modules"],
    }
    path.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--refresh", nargs="*", metavar="TEST", help="measure these (default: all)")
    ap.add_argument("--sync", action="store_true", help="fit the entries to the code, no runs")
    ap.add_argument("--check", action="store_true", help="exit 1 if the map does not fit")
    ap.add_argument("--module", action="append", default=[], help="print this module's tests")
    ap.add_argument("--jobs", type=int, default=1, help="test files measured at once")
    args = ap.parse_args(argv)
    if args.refresh is not None:
        refresh(args.refresh or test_files(), args.jobs)
    elif args.sync:
        sync(load())
    data = load()
    for m in args.module:
        print("\n".join(tests_for_module(m, data)) or f"{m}: no measured test executes it")
    if args.check:
        found = problems(data)
        for p in found:
            print(p, file=sys.stderr)
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
