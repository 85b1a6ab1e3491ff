"""Tutorial 01 without Julia: its Python-only cells execute from a clean kernel.

The cells that need Julia (juliapkg setup, juliacall, `%%julia` cells, the juliacall export) are
tagged ``needs-julia``. The rest must run anywhere, on the example bundle the package ships,
and show what the tutorial says they show: the inspection, the verification, and the
readable failure of ``assert_matches_julia`` on a perturbed model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "tutorials" / "01_export_from_julia.ipynb"
TAG = "needs-julia"

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat")


def needs_julia(cell: object) -> bool:
    return TAG in cell.get("metadata", {}).get("tags", [])  # type: ignore[attr-defined]


def test_every_julia_cell_is_tagged() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = cell.source
        uses_julia = source.lstrip().startswith("%%julia") or any(
            word in source for word in ("juliacall", "juliapkg.add", "jl.")
        )
        assert uses_julia == needs_julia(cell), source[:80]


@pytest.mark.slow
def test_python_cells_execute_without_julia(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("nbclient", reason="executing notebooks needs nbclient")
    pytest.importorskip("ipykernel", reason="executing notebooks needs ipykernel")
    from ipykernel.kernelspec import write_kernel_spec
    from nbclient import NotebookClient

    jupyter_dir = tmp_path / "jupyter"
    write_kernel_spec(jupyter_dir / "kernels" / "juliabridge-tests")
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_dir))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("COLUMNS", "120")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = [c for c in nb.cells if not needs_julia(c)]
    ran = [c for c in nb.cells if c.cell_type == "code"]
    assert len(ran) >= 4
    client = NotebookClient(
        nb,
        kernel_name="juliabridge-tests",
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error

    text = "".join(
        out.get("text", "")
        for cell in ran
        for out in cell.outputs
        if out.output_type == "stream" and out.name == "stdout"
    )
    assert "No Julia in this kernel: using the example bundle" in text
    assert "verified: True" in text
    assert "all 1 outputs match" in text
    assert "1 of 1 outputs differ" in text and "elements outside rtol=" in text
    assert "juliacall" not in "".join(c.source for c in ran)
