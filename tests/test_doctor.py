"""juliabridge.cli.doctor: the facts it reports match what the installation can really do."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.backends.enzyme import enzyme_available
from juliabridge.cli import doctor
from juliabridge.support import jaxversion

REPO = Path(__file__).resolve().parents[1]


def test_report_matches_the_installation() -> None:
    r = doctor.report()
    assert r.jax == jax.__version__
    by_name = {c.name: c for c in r.backends}
    assert set(by_name) == {"lax", "enzyme", "xla"}
    assert by_name["lax"].ok
    assert by_name["enzyme"].ok == enzyme_available()
    if not enzyme_available():
        assert "CPython 3.11" in by_name["enzyme"].detail
    from jaxlib.mlir.dialects import stablehlo

    assert r.stablehlo["writes_and_reads_up_to"] == str(stablehlo.get_current_version())
    assert r.as_dict()["backends"][0]["name"] == "lax"


def test_the_tested_range_is_ci_s_oldest_and_newest_jax() -> None:
    # A pins 0.10.2; B installs the newest release pyproject.toml admits, 0.12.1 when last run.
    assert jaxversion.TESTED_JAX == ("0.10.2", "0.12.1")


@pytest.mark.parametrize(
    ("version", "tested"),
    [
        ("0.10.2", True),
        ("0.11.1", True),
        ("0.12.0.1", True),
        ("0.12.1", True),
        ("0.12.1.dev20270101", True),
        ("0.10.1", False),
        ("0.10.1.9", False),
        ("0.12.2", False),
        ("0.12.10", False),  # numerically, not as text
        ("0.13.0rc1", False),
        ("0.13.0", False),
        ("1.0", False),
        ("", False),
    ],
)
def test_tested_range(version: str, tested: bool) -> None:
    assert jaxversion.in_tested_range(version) is tested


@pytest.fixture
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if juliabridge had not warned yet in this process."""
    monkeypatch.setattr(jaxversion, "_warned", False)


@pytest.mark.usefixtures("fresh_warning")
def test_an_untested_jax_warns_once_in_one_line_naming_it_and_the_range() -> None:
    versions = {"jax": "0.12.2", "jaxlib": "0.12.2"}
    with pytest.warns(juliabridge.UntestedJaxWarning) as caught:
        assert jaxversion.warn_if_untested(versions)
    (w,) = caught
    message = str(w.message)
    assert message == (
        "juliabridge is untested with jax 0.12.2 and jaxlib 0.12.2: CI tests jax and jaxlib "
        "0.10.2 to 0.12.1 (pip install 'jax>=0.10.2,<=0.12.1' 'jaxlib>=0.10.2,<=0.12.1' for a "
        "tested pair; `juliabridge doctor` says more)"
    )
    assert "\n" not in message
    assert issubclass(juliabridge.UntestedJaxWarning, juliabridge.JuliaBridgeWarning)
    assert issubclass(juliabridge.JuliaBridgeWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise
        assert not jaxversion.warn_if_untested(versions)


@pytest.mark.usefixtures("fresh_warning")
@pytest.mark.parametrize(
    ("versions", "named"),
    [
        ({"jax": "0.12.1", "jaxlib": "0.12.1"}, None),
        ({"jax": "0.10.2", "jaxlib": "0.10.2"}, None),
        ({"jax": "0.12.1", "jaxlib": "unknown"}, None),
        ({"jax": "0.12.1", "jaxlib": "0.12.2"}, "jaxlib 0.12.2"),
        ({"jax": "0.10.1", "jaxlib": "0.10.2"}, "jax 0.10.1"),
    ],
)
def test_only_a_version_outside_the_range_is_named(
    versions: dict[str, str], named: str | None
) -> None:
    message = jaxversion.untested_message(versions)
    if named is None:
        assert message is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not jaxversion.warn_if_untested(versions)
    else:
        assert message is not None
        assert message.startswith(f"juliabridge is untested with {named}: CI tests")


def test_importing_juliabridge_warns_only_outside_the_range() -> None:
    # A fresh interpreter, as a user's: the installed jax here (tested) gives no warning, and
    # one reporting an untested version gives exactly one line naming it.
    probe = (
        "import importlib.metadata as m, sys, warnings\n"
        "real = m.version\n"
        "m.version = lambda d: sys.argv[1] if d in ('jax', 'jaxlib') else real(d)\n"
        "warnings.simplefilter('default')\n"
        "import juliabridge\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    here = jax.__version__
    for version, warned in ((here, not jaxversion.in_tested_range(here)), ("0.12.2", True)):
        proc = subprocess.run(
            [sys.executable, "-c", probe, version],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        lines = [line for line in proc.stderr.splitlines() if "UntestedJaxWarning" in line]
        assert len(lines) == int(warned), proc.stderr
        if warned:
            assert f"untested with jax {version} and jaxlib {version}: CI tests" in lines[0]


def test_doctor_reports_the_range_the_warning_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert doctor.report().jax_tested is jaxversion.in_tested_range(jax.__version__)
    monkeypatch.setattr(jax, "__version__", "0.12.2")
    assert doctor.report().jax_tested is False


def test_julia_absence_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from juliabridge.errors import JuliaUnavailable

    def missing(**_: object) -> None:
        raise JuliaUnavailable("no Julia found; install Julia >= 1.10 with juliaup")

    monkeypatch.setattr("juliabridge.driver.process.find_julia", missing)
    julia = {c.name: c for c in doctor.report().julia}["julia"]
    assert not julia.ok and "juliaup" in julia.detail


def test_report_names_this_interpreter_platform_and_devices() -> None:
    import importlib.metadata
    import platform
    import sys

    import juliabridge

    r = doctor.report()
    assert r.juliabridge == juliabridge.__version__
    assert r.python == f"{platform.python_version()} ({platform.python_implementation()})"
    assert r.python.startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert r.platform == f"{platform.system()} {platform.machine()}"
    assert r.jaxlib == importlib.metadata.version("jaxlib")
    kinds = {f"{d.platform}:{d.device_kind}" for d in jax.devices()}
    assert r.devices == ", ".join(sorted(kinds))
    for c in r.extras:
        assert c.detail == (
            importlib.metadata.version(c.name) if c.ok else f"pip install 'juliabridge[{c.name}]'"
        )


def test_missing_distributions_say_how_to_install_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_version", lambda dist: None)
    r = doctor.report()
    assert r.jaxlib == "unknown"
    julia = {c.name: c for c in r.julia}
    assert not julia["juliacall"].ok and not julia["juliapkg"].ok
    assert julia["juliacall"].detail == (
        "not installed (pip install 'juliabridge[julia]'; export from live Julia objects)"
    )
    assert julia["juliapkg"].detail == "not installed (pip install 'juliabridge[julia]')"
    assert [(c.name, c.ok, c.detail) for c in r.extras] == [
        ("flax", False, "pip install 'juliabridge[flax]'"),
        ("equinox", False, "pip install 'juliabridge[equinox]'"),
    ]


def test_a_version_of_a_distribution_that_is_not_installed_is_none() -> None:
    assert doctor._version("juliabridge-no-such-distribution") is None
    assert doctor._version("numpy") == np.__version__


def test_a_failed_probe_reports_the_first_line_of_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from juliabridge.errors import JuliaUnavailable

    def missing(**_: object) -> None:
        raise JuliaUnavailable("  no Julia found\nsecond line " + "x" * 400)

    def broken() -> None:
        raise RuntimeError("x" * 400 + "\nmore")

    monkeypatch.setattr("juliabridge.driver.process.find_julia", missing)
    monkeypatch.setattr("juliabridge.support.jaxinternals._export_module", broken)
    r = doctor.report()
    julia = {c.name: c for c in r.julia}["julia"]
    assert (julia.ok, julia.detail) == (False, "JuliaUnavailable: no Julia found")
    xla = {c.name: c for c in r.backends}["xla"]
    assert (xla.ok, xla.detail) == (False, "RuntimeError: " + "x" * 300)

    def empty() -> None:
        raise ValueError()

    monkeypatch.setattr("juliabridge.driver.process.find_julia", empty)
    assert {c.name: c for c in doctor.report().julia}["julia"].detail == "ValueError: "


def test_a_found_julia_is_named_with_where_it_was_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from juliabridge.driver.process import JuliaInstallation

    found = JuliaInstallation("/opt/julia/bin/julia", (1, 11, 5), "PATH")
    monkeypatch.setattr("juliabridge.driver.process.find_julia", lambda: found)
    julia = {c.name: c for c in doctor.report().julia}["julia"]
    assert (julia.ok, julia.detail) == (True, "/opt/julia/bin/julia (PATH)")


def test_without_the_fallback_package_it_says_why_and_where_it_installs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
    monkeypatch.setitem(sys.modules, "enzyme_ad", None)  # its import fails, as without it
    enzyme = {c.name: c for c in doctor.report().backends}["enzyme"]
    assert not enzyme.ok
    assert enzyme.detail.startswith("ModuleNotFoundError: ") and "enzyme_ad" in enzyme.detail
    assert enzyme.detail.endswith(
        ". enzyme-ad publishes wheels for CPython 3.11 only (pip install 'juliabridge[enzyme]' "
        "there); the lax backend needs nothing extra"
    )


def test_a_jaxlib_without_stablehlo_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import jaxlib.mlir.dialects

    monkeypatch.delattr(jaxlib.mlir.dialects, "stablehlo", raising=False)
    monkeypatch.setitem(sys.modules, "jaxlib.mlir.dialects.stablehlo", None)
    versions = doctor.report().stablehlo
    assert list(versions) == ["error"]
    assert versions["error"].startswith("ModuleNotFoundError: ")
