"""The one way a test reaches outside the checkout: the real Reactant modules in ../shared.

Those modules are third-party data (their provenance is ../shared/fixtures/reactant/SOURCES.md)
kept beside the repository, not in it, so a clone has nothing there. A test that reads one asks
this module for it, and skips, naming what is missing and where it was looked for, where it is
absent; tests/test_standalone.py checks that no other test builds a path leaving the checkout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: The checkout's root (this file is tests/outside.py).
REPO = Path(__file__).resolve().parents[1]
#: Where the modules are looked for, in order: ../shared beside the checkout, then one and two
#: levels further up (a git worktree kept in a folder of worktrees, wt/NAME, next to ../shared).
CANDIDATES = tuple(p / "shared" / "fixtures" / "reactant" for p in REPO.parents[:3])


def reactant_fixture_dir() -> Path | None:
    """The folder of real Reactant modules beside the checkout, or None where there is none.

    Returns:
        The first of `CANDIDATES` that is a folder holding at least one `.mlir` file.
    """
    return next((d for d in CANDIDATES if d.is_dir() and any(d.glob("*.mlir"))), None)


def _absent(what: str) -> str:
    looked = ", ".join(str(d) for d in CANDIDATES)
    return (
        f"{what} not found: the real Reactant modules live in ../shared/fixtures/reactant beside "
        f"the checkout, outside the repository (looked in {looked})"
    )


def reactant_fixture_names() -> list[str]:
    """The `.mlir` file names of the real Reactant modules, sorted; [] where they are absent.

    For parametrizing at collection time: a test given a name from here still calls
    `reactant_fixture` (or `skip_without_reactant_fixtures`) to skip with the reason.
    """
    folder = reactant_fixture_dir()
    return sorted(p.name for p in folder.glob("*.mlir")) if folder is not None else []


def skip_without_reactant_fixtures() -> Path:
    """The folder of real Reactant modules, or skip the calling test saying it is absent.

    Returns:
        The folder (see `reactant_fixture_dir`).

    Raises:
        pytest.skip.Exception: where no candidate folder holds a module.
    """
    folder = reactant_fixture_dir()
    if folder is None:
        pytest.skip(_absent("real Reactant fixtures"))
    return folder


def reactant_fixture(name: str) -> Path:
    """The path of one real Reactant module, or skip the calling test saying it is absent.

    Args:
        name: the module's file name, e.g. "sine_loop_while.mlir".

    Returns:
        The path of an existing file.

    Raises:
        pytest.skip.Exception: where the folder or the file is absent.
    """
    folder = reactant_fixture_dir()
    path = folder / name if folder is not None else None
    if path is None or not path.is_file():
        pytest.skip(_absent(f"real Reactant fixture {name}"))
    return path


def reactant_fixture_text(name: str) -> str:
    """The text of one real Reactant module, or skip the calling test (see `reactant_fixture`)."""
    return reactant_fixture(name).read_text(encoding="utf-8")
