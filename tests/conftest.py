"""Shared test setup: backends to parametrize over, with visible skips."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import tempfile
import time
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


#: The test session's JAX compilation cache: a folder the first pytest process makes and
#: removes at its end; xdist workers and child pytests (tests/test_multidevice.py) inherit it
#: through this variable. "off" runs without one.
JAX_CACHE_VARIABLE = "JULIABRIDGE_TEST_JAX_CACHE"
#: Cache folders older than this (a session killed before its cleanup) are removed by the next.
_STALE_CACHE_SECONDS = 86400.0


def pytest_configure(config: pytest.Config) -> None:
    """Share one persistent JAX compilation cache among the session's processes.

    Many tests compile the same programs (the fixtures under each backend and transformation);
    XLA's compile is most of their time, and a cache hit returns the executable XLA would build
    from the same HLO and options, so nothing a test checks changes (docs/benchmarks.md gives
    the saving). Each xdist worker writes a subfolder of its own: JAX writes an entry
    without a lock, so a process reading one another is still writing would see it torn (JAX
    then warns and compiles again, and a test that turns warnings into errors would fail).
    Only pytest processes use it: the scripts and helper processes the tests start compile as a
    user's would, and a cache the user configured is left alone.
    """
    path = os.environ.get(JAX_CACHE_VARIABLE, "")
    if path == "off" or getattr(jax.config, "jax_compilation_cache_dir", None):
        return
    if not path or not os.path.isdir(path):
        _remove_stale_caches()
        path = tempfile.mkdtemp(prefix="juliabridge-test-jax-cache-")
        os.environ[JAX_CACHE_VARIABLE] = path
        config.add_cleanup(functools.partial(shutil.rmtree, path, ignore_errors=True))
    mine = os.path.join(path, os.environ.get("PYTEST_XDIST_WORKER", "main"))
    jax.config.update("jax_compilation_cache_dir", mine)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _remove_stale_caches() -> None:
    """Remove the cache folders of earlier sessions that ended without their cleanup."""
    now = time.time()
    for old in Path(tempfile.gettempdir()).glob("juliabridge-test-jax-cache-*"):
        with contextlib.suppress(OSError):
            if now - old.stat().st_mtime > _STALE_CACHE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)


#: Fake CPU devices tests/test_multidevice.py gives the tests marked `multidevice`.
MULTIDEVICE_COUNT = 4


def _devices_needed(item: pytest.Item) -> int:
    """The device count a `multidevice` test needs (`@pytest.mark.multidevice(devices=2)`;
    1 for one that runs anywhere and checks more where there are several); 0 when unmarked."""
    mark = item.get_closest_marker("multidevice")
    if mark is None:
        return 0
    need = int(mark.kwargs.get("devices", mark.args[0] if mark.args else 1))
    if not 1 <= need <= MULTIDEVICE_COUNT:
        raise pytest.UsageError(
            f"{item.nodeid}: multidevice(devices={need}); tests/test_multidevice.py gives "
            f"{MULTIDEVICE_COUNT} devices, so ask for 1 to {MULTIDEVICE_COUNT}"
        )
    return need


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `multidevice` tests that need more devices than JAX has (tests/test_multidevice.py
    runs them all again with MULTIDEVICE_COUNT fake CPU devices, where none may skip); under a
    mutmut mutant, order the tests (below)."""
    needs = {item.nodeid: _devices_needed(item) for item in items}
    if any(n > 1 for n in needs.values()):
        have = jax.device_count()
        for item in items:
            if needs[item.nodeid] > have:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"needs {needs[item.nodeid]} devices, JAX has {have}: "
                        f"tests/test_multidevice.py runs it with {MULTIDEVICE_COUNT} fake CPU devices"
                    )
                )
    _quickest_first_under_mutmut(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test that skips for want of devices must be marked `multidevice`, so that
    tests/test_multidevice.py runs it where it has them: unmarked, its skip is a failure."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or hasattr(report, "wasxfail") or _devices_needed(item):
        return
    reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
    if re.search(r"\bdevices?\b|device.count", reason, re.I):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} skipped for want of devices ({reason}) without the `multidevice` "
            "mark: mark it @pytest.mark.multidevice(devices=N) (tests/conftest.py skips it where "
            "JAX has fewer) so that tests/test_multidevice.py runs it with several devices"
        )


def _quickest_first_under_mutmut(items: list[pytest.Item]) -> None:
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
