"""The docs' way of running the tutorials (docs/from-julia.md) works with what `[test]` installs (issue 29 item 11:
`jupyter nbconvert` is not installed, and tutorial 01's "Run All" stopped at its first Julia
cell with no word on skipping them)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Where the docs say how to run the tutorials and test against Julia.
README = " ".join((REPO / "docs" / "from-julia.md").read_text(encoding="utf-8").split())


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "run_tutorial", REPO / "tools" / "run_tutorial.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_readme_says_how_to_run_the_tutorials() -> None:
    assert "python tools/run_tutorial.py tutorials/02_lux_in_jax.ipynb" in README
    assert (
        "python tools/run_tutorial.py tutorials/01_export_from_julia.ipynb --without-julia"
        in README
    )
    assert "`needs-julia`" in README
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(REPO / "tutorials" / "01_export_from_julia.ipynb", as_version=4)
    tagged = [c for c in nb.cells if "needs-julia" in c.get("metadata", {}).get("tags", [])]
    assert tagged and all(
        "juliapkg" not in c.source and "%%julia" not in c.source
        for c in nb.cells
        if c not in tagged and c.cell_type == "code"
    )


def test_readme_names_the_pytest_plugin_as_it_is() -> None:
    from juliabridge.testing import plugin

    for marker in plugin.MARKERS:
        name = marker.split(":")[0].split("(")[0]
        assert f"@pytest.mark.{name}" in README, name
    for fixture in ("julia_export", "julia_bundle"):
        assert callable(getattr(plugin, fixture)) and f"`{fixture}`" in README
    assert "juliabridge.testing.assert_matches_julia" in README
    assert re.search(r"with_state=True", README)


@pytest.mark.slow
def test_the_export_tutorial_runs_without_julia() -> None:
    pytest.importorskip("nbclient", reason="executing notebooks needs nbclient")
    pytest.importorskip("ipykernel", reason="executing notebooks needs ipykernel")
    text = _tool().run(REPO / "tutorials" / "01_export_from_julia.ipynb", without_julia=True)
    assert "No Julia in this kernel: using the example bundle" in text
    assert "verified: True" in text
