"""Shared test setup: backends to parametrize over, with visible skips."""

from __future__ import annotations

from collections.abc import Iterator

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
