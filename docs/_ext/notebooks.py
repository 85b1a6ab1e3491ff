"""The tutorials (``tutorials/*.ipynb``) as pages of the site, executed at every build.

The notebooks stay where the tests and tools/run_tutorial.py read them; each build copies them
into ``docs/tutorials/`` and tags every cell tagged ``needs-julia`` (tools/run_tutorial.py's tag)
``skip-execution`` as well, so myst-nb shows those cells without running them, as
``run_tutorial.py --without-julia`` does: no machine that builds the site has Julia.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NEEDS_JULIA = "needs-julia"
SKIP = "skip-execution"


def tagged(notebook: dict) -> dict:
    """The notebook with ``skip-execution`` added to every cell tagged ``needs-julia``.

    Args:
        notebook: a notebook's JSON (nbformat 4), not modified.

    Returns:
        A copy with the tags added.
    """
    out = json.loads(json.dumps(notebook))
    for cell in out["cells"]:
        tags = cell.setdefault("metadata", {}).get("tags", [])
        if NEEDS_JULIA in tags and SKIP not in tags:
            cell["metadata"]["tags"] = [*tags, SKIP]
    return out


def copy_all(docs: Path) -> list[Path]:
    """Copy every tutorial into ``docs/tutorials/`` with its cells tagged (see `tagged`).

    Args:
        docs: the site's source directory.

    Returns:
        The copies, in name order.
    """
    target = docs / "tutorials"
    target.mkdir(exist_ok=True)
    written = []
    for source in sorted((REPO / "tutorials").glob("*.ipynb")):
        text = json.dumps(tagged(json.loads(source.read_text(encoding="utf-8"))), indent=1)
        path = target / source.name
        if not path.exists() or path.read_text(encoding="utf-8") != text + "\n":
            path.write_text(text + "\n", encoding="utf-8")
        written.append(path)
    return written
