"""Every test marked `multidevice` runs with 4 fake CPU devices, and none of them skips there.

A plain run has one CPU device, where tests/conftest.py skips the marked tests that need more
(and a test that skips for want of devices without the mark fails, so none is left out). The
device count is fixed when XLA starts, so they run again here, in a child pytest with
XLA_FLAGS=--xla_force_host_platform_device_count=4.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from juliabridge.backends.enzyme import enzyme_available
from tests.conftest import MULTIDEVICE_COUNT

ROOT = Path(__file__).resolve().parents[1]
_MARK = re.compile(r"\bmark\.multidevice\b")
#: The one skip allowed in the child: the enzyme backend's, where enzyme-ad is not installed.
_NO_ENZYME = "needs enzyme-ad"


def marked_files() -> list[Path]:
    """The test files that mark a test (or themselves) `multidevice`."""
    return sorted(
        p
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and _MARK.search(p.read_text(encoding="utf-8"))
    )


def test_the_known_multidevice_files_are_marked() -> None:
    names = {p.name for p in marked_files()}
    assert {
        "test_pinned_parallel.py",
        "test_pinned_sharding.py",
        "test_pinned_reactant_export.py",
    } <= names, names


def test_every_multidevice_test_runs_on_4_devices_and_none_skips(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={MULTIDEVICE_COUNT}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    files = [str(p.relative_to(ROOT)) for p in marked_files()]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "-m", "multidevice", f"--junitxml={report}", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    cases = list(ET.parse(report).getroot().iter("testcase"))
    ran = {f"{c.get('classname')}::{c.get('name')}" for c in cases}
    for name in (
        "test_pinned_parallel::test_data_parallel_places_inputs_that_live_elsewhere",
        "test_pinned_sharding::test_device_conflict_names_each_device_set",
        "test_pinned_reactant_export::test_place_inputs_spec_that_does_not_divide",
    ):
        assert any(r.endswith(name) for r in ran), (name, sorted(ran))
    skipped = {
        f"{c.get('classname')}::{c.get('name')}": s.get("message", "")
        for c in cases
        for s in c.iter("skipped")
    }
    allowed = {n: why for n, why in skipped.items() if _NO_ENZYME in why}
    if enzyme_available():
        allowed = {}
    assert skipped == allowed, f"skipped with {MULTIDEVICE_COUNT} devices: {skipped}"
