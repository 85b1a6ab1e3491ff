"""Build the documentation site: ``python tools/build_docs.py`` (needs the ``[docs]`` extra).

Runs Sphinx on docs/ with warnings as errors (``-W --keep-going``: every warning is listed
before the build fails), which includes every internal link and heading anchor (MyST reports a
link to a missing page or heading as a warning), the generated reference pages
(docs/_ext/reference.py) and the tutorials, executed from a clean kernel. The site is written
to ``docs/_build/html`` (``--out`` to change); ``--no-execute`` skips the tutorials' execution
for a quicker check of the rest. Exit status: Sphinx's (0 when the build is clean).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def command(out: Path, *, execute: bool = True, builder: str = "html") -> list[str]:
    """The sphinx-build command line.

    Args:
        out: the output directory.
        execute: run the tutorials (myst-nb's ``force``) or not (``off``).
        builder: Sphinx's builder (``html``).

    Returns:
        The argument list, starting with this Python.
    """
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder]
    cmd += ["-D", f"nb_execution_mode={'force' if execute else 'off'}"]
    return [*cmd, str(REPO / "docs"), str(out)]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "_build" / "html")
    parser.add_argument("--no-execute", action="store_true", help="do not execute the tutorials")
    args = parser.parse_args(argv)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(REPO))
    return subprocess.call(command(args.out, execute=not args.no_execute), cwd=REPO, env=env)


if __name__ == "__main__":
    sys.exit(main())
