"""Shared test setup: backends to parametrize over, with visible skips."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import jax
import pytest

from juliabridge.backends.enzyme import enzyme_available

BACKENDS = ("lax", "xla", "enzyme")


def require_backend(backend: str) -> None:
    """Skip (with the reason shown) when `backend` cannot run on this machine."""
    if backend == "enzyme" and not enzyme_available():
        pytest.skip("backend='enzyme' needs enzyme-ad (CPython 3.11 wheels only); not importable")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn, skipping enzyme where enzyme-ad is missing."""
    require_backend(request.param)
    return str(request.param)


@pytest.fixture
def x64() -> Iterator[None]:
    """jax_enable_x64 on for one test (f64 arguments and results), restored afterwards."""
    old = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under a mutmut mutant (docs/mutation-testing.md), run the quickest tests first.

    mutmut runs a mutant's tests with `-x` in the order it lists them, which is arbitrary; a
    mutant of a function every test reaches (parse_module, the lax interpreter) then often ran
    minutes of tests before the one that fails. Ordered by the durations mutmut recorded
    (mutants/mutmut-stats.json), a killed mutant stops at its quickest failing test.
    """
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    stats = Path("mutmut-stats.json")
    if not stats.is_file():
        return
    try:
        durations = json.loads(stats.read_text())["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    items.sort(key=lambda item: durations.get(item.nodeid, math.inf))
