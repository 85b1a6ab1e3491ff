"""The tutorials: 02 (JAX only) executes from a clean kernel; 01 (Julia cells) is checked statically.

Tutorial 01 needs Julia (through juliacall), which CI machines lack, so its JSON is validated,
its Python cells are compiled after IPython's magic transforms, and its ``%%julia`` cells are
parsed with the Julia grammar (tools/check_julia_syntax.py, tree-sitter-julia).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIALS = REPO / "tutorials"
EXPORT_NB = TUTORIALS / "01_export_from_julia.ipynb"
JAX_NB = TUTORIALS / "02_lux_in_jax.ipynb"

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat")


def _cells(nb: object, kind: str) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == kind]  # type: ignore[attr-defined]


def _check_julia_syntax() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_julia_syntax", REPO / "tools" / "check_julia_syntax.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_tutorials_are_valid_notebooks() -> None:
    for path in (EXPORT_NB, JAX_NB):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata["kernelspec"]["name"] == "python3", path
        # Committed without outputs: CI executes them, and stale outputs would mislead.
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path


def test_export_tutorial_python_cells_compile() -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    nb = nbformat.read(EXPORT_NB, as_version=4)
    transform = TransformerManager().transform_cell
    python_cells = [s for s in _cells(nb, "code") if not s.lstrip().startswith("%%julia")]
    assert any("%load_ext juliacall" in s for s in python_cells)
    for source in python_cells:
        compile(transform(source), str(EXPORT_NB), "exec")


def test_export_tutorial_julia_cells_parse() -> None:
    pytest.importorskip("tree_sitter", reason="Julia parsing needs tree-sitter")
    pytest.importorskip("tree_sitter_julia", reason="Julia parsing needs tree-sitter-julia")
    tool = _check_julia_syntax()
    cells = list(tool.julia_cells(EXPORT_NB))
    sources = "\n".join(src for _, src in cells)
    # The tutorial's story: Lux model and training in Julia cells the tool sees; the export
    # runs from Python through juliacall (tests/test_julia_tutorial.py runs the Python part).
    for needle in ("Lux.setup", "Training.single_train_step!"):
        assert needle in sources, needle
    assert any(
        "juliabridge.export_lux(" in s
        for s in _cells(nbformat.read(EXPORT_NB, as_version=4), "code")
    )
    problems = tool.check_file(EXPORT_NB, tool._parser(), REPO)
    assert problems == [], "\n".join(map(str, problems))


@pytest.mark.slow
def test_jax_tutorial_executes_from_a_clean_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("nbclient", reason="executing notebooks needs nbclient")
    pytest.importorskip("ipykernel", reason="executing notebooks needs ipykernel")
    pytest.importorskip("matplotlib", reason="the tutorial plots with matplotlib")
    pytest.importorskip("optax", reason="the tutorial fine-tunes with optax")
    from ipykernel.kernelspec import write_kernel_spec
    from nbclient import NotebookClient

    # A kernel spec for this very interpreter, found before any user-wide "python3" spec.
    jupyter_dir = tmp_path / "jupyter"
    write_kernel_spec(jupyter_dir / "kernels" / "juliabridge-tests")
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_dir))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # no display; figures are drawn, not shown
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the checkout, also when not pip-installed

    nb = nbformat.read(JAX_NB, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="juliabridge-tests",
        timeout=300,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error

    text = "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "stream" and out.name == "stdout"
    )
    assert "verified: True" in text
    assert "round trip exact: True" in text
    accuracy = re.search(r"test accuracy after \d+ steps: ([0-9.]+)", text)
    assert accuracy is not None, text[-2000:]
    assert float(accuracy.group(1)) >= 0.8, text[-2000:]
