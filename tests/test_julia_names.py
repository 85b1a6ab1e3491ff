"""tools/check_julia_names.py: fatou's name rules on the Julia package, with the accepted list.

The planted-defect tests need fatou (``pip install fatou==0.24.0``; found through
$JULIABRIDGE_FATOU or PATH, which .ci/run sets up) and skip without it; the bookkeeping of
accepted findings is tested everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_julia_names", REPO / "tools" / "check_julia_names.py"
    )
    if spec is None or spec.loader is None:
        raise ImportError("tools/check_julia_names.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()


def _fatou() -> str:
    found = TOOL.find_fatou(None)
    if found is None:
        pytest.skip("fatou is not installed (pip install fatou==0.24.0; .ci/run does)")
    return str(found)


def test_new_and_stale_findings_are_both_reported() -> None:
    a = {"path": "julia/src/x.jl", "rule": "undefined-name", "message": "`v` is not defined"}
    b = {"path": "julia/src/y.jl", "rule": "call-arity", "message": "`f` takes 1 argument"}
    new, stale = TOOL.unaccepted([a], [dict(b, reason="why")])
    assert new == [a] and [s["path"] for s in stale] == ["julia/src/y.jl"]
    assert TOOL.unaccepted([a], [dict(a, reason="why")]) == ([], [])


def test_every_accepted_finding_has_a_reason() -> None:
    accepted = json.loads((REPO / "tools" / "fatou_accepted.json").read_text())
    assert all(a.get("reason") for a in accepted)


def test_the_julia_package_is_clean() -> None:
    fatou = _fatou()
    assert TOOL.main(["--fatou", fatou]) == 0


def test_a_misspelled_name_and_a_wrong_arity_call_are_found(tmp_path: Path) -> None:
    fatou = _fatou()
    root = tmp_path / "repo"
    shutil.copytree(REPO / "julia", root / "julia", ignore=shutil.ignore_patterns("Manifest.toml"))
    planted = root / "julia" / "src" / "trees.jl"
    planted.write_text(
        planted.read_text()
        + "\nplanted_misspelled(p) = path_lable(p)\n"
        + "planted_arity(p) = flatten!(p)\n"
    )
    found = TOOL.findings(fatou, root=root)
    rules = {(f["rule"], f["path"]) for f in found}
    assert ("undefined-name", "julia/src/trees.jl") in rules
    assert ("call-arity", "julia/src/trees.jl") in rules
    assert any("path_lable" in f["message"] for f in found)
