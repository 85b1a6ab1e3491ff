"""tools/test_map.json, the module -> tests map measured by tools/test_map.py (issue 52), fits
the code: every module of juliabridge/ has an entry, no entry names a missing module or test
file, and ``modules`` is the inversion of the measured ``tests``. The tool itself is checked on
a small package of its own: a module counts for a test file only when the test runs one of its
function bodies beyond what importing it runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_map_tool", ROOT / "tools" / "test_map.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()


def test_the_checked_in_map_fits_the_code() -> None:
    data = TOOL.load()
    assert TOOL.problems(data) == []
    assert set(data["modules"]) == set(TOOL.modules())
    measured = set(data["tests"])
    assert measured, "the map records no measured test file"
    assert set(data["unmeasured"]) == set(TOOL.test_files()) - measured


def test_the_mutation_tools_take_their_tests_from_the_map() -> None:
    data = TOOL.load()
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mutation_smoke
        import realistic_mutants
    finally:
        sys.path.pop(0)
    for module, tests in data["modules"].items():
        if tests:
            assert mutation_smoke.tests_of(module, []) == tests
            assert realistic_mutants.map_tests(module) == tests


def _package(root: Path) -> None:
    pkg = root / "juliabridge"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "used.py").write_text(
        "TABLE = {}\n\n\ndef register(k):\n    TABLE[k] = 1\n\n\nregister('a')\n\n\n"
        "def double(x):\n    return 2 * x\n"
    )
    (pkg / "imported_only.py").write_text(
        "from . import used\n\n\ndef never(x):\n    return x\n\n\nused.register('b')\n"
    )
    tests = root / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text("")
    (tests / "test_double.py").write_text(
        "import juliabridge.imported_only\nfrom juliabridge.used import double\n\n\n"
        "def test_double():\n    assert double(2) == 4\n"
    )
    (tests / "test_nothing.py").write_text(
        "import juliabridge.imported_only\n\n\ndef test_nothing():\n    pass\n"
    )


def test_a_module_counts_when_a_test_runs_its_functions(tmp_path: Path) -> None:
    # One measured refresh (the baseline and two test files under coverage, in processes of
    # their own): the only part of this file that runs pytest again.
    _package(tmp_path)
    path = tmp_path / "map.json"
    data = TOOL.refresh(["tests/test_double.py", "tests/test_nothing.py"], 1, path, tmp_path)
    assert data["tests"]["tests/test_double.py"]["modules"] == ["juliabridge/used.py"]
    assert data["tests"]["tests/test_nothing.py"]["modules"] == []
    assert data["modules"] == {
        "juliabridge/__init__.py": [],
        "juliabridge/imported_only.py": [],
        "juliabridge/used.py": ["tests/test_double.py"],
    }
    assert data["unmeasured"] == []
    assert TOOL.problems(data, tmp_path) == []


def test_a_partial_refresh_keeps_the_other_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(tmp_path)
    path = tmp_path / "map.json"
    monkeypatch.setattr(TOOL, "baseline", lambda root: {})
    monkeypatch.setattr(TOOL, "measure", lambda test, base, root: ["juliabridge/used.py"])
    TOOL.sync(
        {
            "tests": {"tests/test_nothing.py": {"modules": ["juliabridge/imported_only.py"]}},
            "modules": {},
        },
        path,
        tmp_path,
    )
    data = TOOL.refresh(["tests/test_double.py"], 1, path, tmp_path)
    assert data["modules"]["juliabridge/used.py"] == ["tests/test_double.py"]
    assert data["modules"]["juliabridge/imported_only.py"] == ["tests/test_nothing.py"]
    assert TOOL.load(path) == data


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (
            lambda d: d["modules"].pop("juliabridge/used.py"),
            "module juliabridge/used.py has no entry",
        ),
        (
            lambda d: d["modules"].update({"juliabridge/gone.py": []}),
            "juliabridge/gone.py, which is not",
        ),
        (
            lambda d: d["modules"]["juliabridge/used.py"].append("tests/test_gone.py"),
            "names tests/test_gone.py, which does not exist",
        ),
        (
            lambda d: d["tests"].update({"tests/test_gone.py": {"modules": []}}),
            "measured test file tests/test_gone.py does not exist",
        ),
        (
            lambda d: d["tests"]["tests/test_double.py"]["modules"].append("juliabridge/x.py"),
            "names juliabridge/x.py, which is not a module",
        ),
        (
            lambda d: d["modules"]["juliabridge/used.py"].clear(),
            "'modules' is not derived from 'tests'",
        ),
    ],
)
def test_a_map_that_does_not_fit_is_reported(tmp_path: Path, change, found: str) -> None:  # type: ignore[no-untyped-def]
    _package(tmp_path)
    data = TOOL.sync(
        {"tests": {"tests/test_double.py": {"modules": ["juliabridge/used.py"]}}, "modules": {}},
        tmp_path / "map.json",
        tmp_path,
    )
    assert TOOL.problems(data, tmp_path) == []
    change(data)
    assert any(found in p for p in TOOL.problems(data, tmp_path)), TOOL.problems(data, tmp_path)


def test_body_lines_are_the_functions_not_the_module_level(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("X = 1\n\n\ndef f(a):\n    b = a\n    return b\n\n\ng = lambda: 3\n")
    assert TOOL.body_lines(f) == {5, 6, 9}
