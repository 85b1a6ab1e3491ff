"""What lies near a path that is not what the caller meant: names like a mistyped one, and the
bundles and export directories inside a folder given in their place.

Only names are read (directory listings, bounded), never a file's contents, and nothing is
followed: these feed error messages, so they must not fail or take long themselves.
"""

from __future__ import annotations

import difflib
import itertools
import os
from pathlib import Path

#: The file naming a bundle (bundle.manifest.MANIFEST_NAME) and a JuliaBridge.jl export
#: directory (julia_export.DESCRIPTION_NAME); tests/test_first_hour_51.py checks both agree.
BUNDLE_FILE = "manifest.json"
JULIA_EXPORT_FILE = "juliabridge-export.json"

#: At most this many entries of a folder are looked at, and this many named in a message.
MAX_ENTRIES = 1000
MAX_NAMED = 6


def _entries(folder: Path) -> list[Path]:
    try:
        return list(itertools.islice(folder.iterdir(), MAX_ENTRIES))
    except (OSError, ValueError):
        return []


def is_reactant_script(script: Path, names: list[str] | None = None) -> bool:
    """Whether ``{fn}_{id}.mlir`` sits beside the ``{fn}.py`` `script` (Reactant's
    export_to_enzymejax names its files so, EnzymeJAX.jl:128-132, 175).

    Args:
        script: the .py.
        names: the names in its folder, when already listed.
    """
    stem = script.stem
    if names is None:
        names = [p.name for p in _entries(script.parent)]
    return any(
        name.startswith(stem + "_")
        and name.endswith(".mlir")
        and name[len(stem) + 1 : -len(".mlir")].isdigit()
        for name in names
    )


def kind_of_folder(folder: Path) -> str | None:
    """ "bundle", "JuliaBridge.jl export", "Reactant export" or None, by file names alone."""
    try:
        if os.path.lexists(folder / BUNDLE_FILE):
            return "bundle"
        if os.path.lexists(folder / JULIA_EXPORT_FILE):
            return "JuliaBridge.jl export"
    except (OSError, ValueError):
        return None
    entries = _entries(folder)
    names = [p.name for p in entries]
    if any(p.suffix == ".py" and is_reactant_script(p, names) for p in entries):
        return "Reactant export"
    return None


def found_inside(folder: Path) -> str:
    """A clause naming the bundles and export directories directly inside `folder`:
    ``"; did you mean /d/m.bundle? (a bundle inside it)"`` for one, ``"; it holds 2 models:
    /d/a.bundle (bundle), /d/exp (Reactant export); pass one of them"`` for several, "" for
    none."""
    found = []
    for p in sorted(_entries(folder)):
        try:
            if p.is_symlink() or not p.is_dir():
                continue
        except OSError:
            continue
        kind = kind_of_folder(p)
        if kind is not None:
            found.append((p, kind))
    if not found:
        return ""
    if len(found) == 1:
        ((p, kind),) = found
        return f"; did you mean {p}? (a {kind} inside it)"
    listed = ", ".join(f"{p} ({kind})" for p, kind in found[:MAX_NAMED]) + (
        f" and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else ""
    )
    return f"; it holds {len(found)} models: {listed}; pass one of them"


def did_you_mean(path: Path) -> str:
    """``"; did you mean /d/lenet.bundle?"`` naming up to three names in `path`'s folder like
    its last one (difflib), or "" when there is none or the folder cannot be listed."""
    folder = path.parent
    names = [p.name for p in _entries(folder)]
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(str(folder / n) for n in close) + "?"


__all__ = [
    "BUNDLE_FILE",
    "JULIA_EXPORT_FILE",
    "did_you_mean",
    "found_inside",
    "is_reactant_script",
    "kind_of_folder",
]
