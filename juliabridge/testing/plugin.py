"""The juliabridge pytest plugin (loaded through the ``pytest11`` entry point).

- ``@pytest.mark.julia``: the test needs Julia; where none is found it is skipped, with the
  reason (what was looked at and how to install Julia).
- ``julia_export`` (session fixture): ``julia_export("model.jl", mode="test", depends=[...])``
  exports a Julia script (``juliabridge export``'s convention: it defines ``model``, ``ps``,
  ``st``, ``x``) in a ``julia`` subprocess and returns the bundle path. Exports are cached by a
  hash of the script, the files in `depends`, the options, JuliaBridge.jl and the Julia used:
  once per session, and across sessions in pytest's cache directory (``pytest --cache-clear``
  forgets them).
- ``julia_bundle``: the bundle of the script named by the test's
  ``@pytest.mark.julia_script("model.jl", **options)`` (relative to the test file).
- ``juliabridge.testing.assert_matches_julia(candidate, bundle)`` compares a JAX function or a
  LuxModel with the reference outputs Julia stored in a bundle.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..errors import JuliaUnavailable
from .cache import ExportCache

MARKERS = (
    "julia: needs a Julia installation (skipped, with the reason, where none is found)",
    "julia_script(path, **options): the Julia script (and export options) the julia_bundle "
    "fixture exports",
)

_REASON = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers (once, even if the project's configuration lists them too)."""
    known = {str(line).split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    for line in MARKERS:
        if line.split(":")[0].split("(")[0].strip() not in known:
            config.addinivalue_line("markers", line)


def julia_skip_reason(config: pytest.Config) -> str:
    """Why Julia tests cannot run here ("" when they can), found once per session, fast."""
    if _REASON not in config.stash:
        from ..driver.process import find_julia

        try:
            find_julia()
            config.stash[_REASON] = ""
        except JuliaUnavailable as exc:
            config.stash[_REASON] = f"needs Julia: {exc}"
    return config.stash[_REASON]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip `julia`-marked tests, and tests of `julia_script` bundles, where Julia is absent."""
    if item.get_closest_marker("julia") or item.get_closest_marker("julia_script"):
        reason = julia_skip_reason(item.config)
        if reason:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def julia_export(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., Path]:
    """``export(script, *, depends=(), timeout=3600, **options) -> Path``, cached by content."""
    config = request.config
    store = getattr(config, "cache", None)
    directory = (
        store.mkdir("juliabridge-exports")
        if store is not None
        else tmp_path_factory.mktemp("juliabridge-exports")
    )
    cache = ExportCache(directory)

    def export(script: str | Path, **options: Any) -> Path:
        reason = julia_skip_reason(config)
        if reason:
            pytest.skip(reason)
        return cache.export(script, **options)

    return export


@pytest.fixture
def julia_bundle(request: pytest.FixtureRequest, julia_export: Callable[..., Path]) -> Path:
    """The bundle of the script the test's ``@pytest.mark.julia_script(path, **options)`` names."""
    marker = request.node.get_closest_marker("julia_script")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            f"{request.node.nodeid}: the julia_bundle fixture needs "
            '@pytest.mark.julia_script("path/to/model.jl", **export_options)'
        )
    script = Path(marker.args[0])
    if not script.is_absolute():
        script = Path(request.node.path).parent / script
    return julia_export(script, **marker.kwargs)
