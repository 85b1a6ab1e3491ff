"""Sphinx configuration of juliabridge's documentation site (build: python tools/build_docs.py).

Sphinx with MyST and myst-nb, as JAX, Flax and Optax build theirs: the pages stay Markdown that
reads on its own in a checkout, autodoc fills the API reference from the docstrings, and myst-nb
executes the tutorials at every build. The generated reference pages (docs/_ext/reference.py)
and the tutorials' copies (docs/_ext/notebooks.py) are written before Sphinx reads anything.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # the checkout's juliabridge, installed or not

import notebooks  # noqa: E402
import reference  # noqa: E402

import juliabridge  # noqa: E402

reference.write_all(HERE)
notebooks.copy_all(HERE)

project = "juliabridge"
author = "the juliabridge developers"
copyright = "the juliabridge developers"
release = version = juliabridge.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxcontrib.mermaid",
]

# Only the site's pages: the dated logs are pages too (linked from the contract pages).
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}

# Links between pages are checked: a link to a missing page or heading is a warning, and the
# build turns warnings into errors (-W). Headings get GitHub's anchors, so the same links work
# on the repository's pages.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
myst_fence_as_directive = ["mermaid"]  # architecture.md's diagram, drawn in the browser

# The tutorials run at every build, from a clean kernel; the cells tagged needs-julia are tagged
# skip-execution by docs/_ext/notebooks.py (no machine that builds the site has Julia).
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "sphinx_book_theme"
html_title = f"juliabridge {release}"
html_theme_options = {"show_toc_level": 2}
