"""Run a tutorial notebook from a clean kernel, the way the tests do, with what `[test]` installs.

    python tools/run_tutorial.py tutorials/02_lux_in_jax.ipynb
    python tools/run_tutorial.py tutorials/01_export_from_julia.ipynb --without-julia

Needs nbclient and ipykernel (both in the `[test]` extra; `jupyter nbconvert` is not). Cells
tagged ``needs-julia`` are skipped where no Julia is found (or with ``--without-julia``): the
rest of tutorial 01 then uses the example bundle shipped with juliabridge. The executed notebook
is written to ``--out`` when given; every cell's printed output goes to stdout. Exit status: 0,
or 1 with the failing cell and its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

TAG = "needs-julia"


def _julia_found() -> bool:
    from juliabridge.driver.process import find_julia
    from juliabridge.errors import JuliaUnavailable

    try:
        find_julia()
    except JuliaUnavailable:
        return False
    return True


def run(path: Path, *, without_julia: bool | None = None, out: Path | None = None) -> str:
    """Execute the notebook at `path`; return the text its cells printed.

    Args:
        path: the notebook.
        without_julia: skip the cells tagged ``needs-julia`` (default: when no Julia is found).
        out: where to write the executed notebook (default: nowhere).

    Returns:
        Everything the cells wrote to stdout, in order.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (the message holds its source
            and traceback).
    """
    import nbformat
    from ipykernel.kernelspec import write_kernel_spec
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if without_julia is None:
        without_julia = not _julia_found()
    if without_julia:
        nb.cells = [c for c in nb.cells if TAG not in c.get("metadata", {}).get("tags", [])]
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "MPLBACKEND")}
    with tempfile.TemporaryDirectory() as tmp:
        # A kernel for this very interpreter, found before any user-wide "python3" kernel.
        write_kernel_spec(Path(tmp) / "kernels" / "juliabridge-tutorial")
        os.environ["JUPYTER_PATH"] = tmp
        os.environ.setdefault("MPLBACKEND", "Agg")  # figures are drawn, not shown
        try:
            client = NotebookClient(
                nb,
                kernel_name="juliabridge-tutorial",
                timeout=600,
                resources={"metadata": {"path": str(path.resolve().parent)}},
            )
            client.execute()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if out is not None:
        nbformat.write(nb, out)
    return "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stdout"
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--without-julia", action="store_true", help=f"skip the cells tagged {TAG}")
    parser.add_argument("--out", type=Path, help="write the executed notebook here")
    args = parser.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    try:
        text = run(args.notebook, without_julia=True if args.without_julia else None, out=args.out)
    except CellExecutionError as e:
        print(e, file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
