"""juliabridge.cli.doctor: the facts it reports match what the installation can really do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

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


# -- juliabridge doctor --julia, with fake `julia` executables (shell scripts on a temp PATH) ----

FAKE_HEAD = """#!/bin/sh
case "$1" in --version) echo "julia version {version}"; exit 0;; esac
for last; do :; done
case "$*" in
  *Pkg.dependencies*)
{packages}
    ;;
  *run_request*)
{export}
    ;;
esac
"""
VERSIONS = """\
    echo "[juliabridge:package] JuliaBridge 0.2.0"
    echo "[juliabridge:package] Reactant 0.2.280"
    echo "[juliabridge:package] Lux 1.31.4"
"""
# The driver's request is one line of JSON: pick "out" and "result_file" out of it.
WRITES_EXPORT = """\
    out=$(sed -n 's/.*"out": "\\([^"]*\\)".*/\\1/p' "$last")
    result=$(sed -n 's/.*"result_file": "\\([^"]*\\)".*/\\1/p' "$last")
    echo "[juliabridge:progress] 1/4 tracing"
    cp -R "$FAKE_EXPORT" "$out"
    printf '{"ok": true, "path": "%s"}' "$out" > "$result"
"""


@pytest.fixture
def julia_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A PATH with only a bin folder for a fake julia (and the tools a shell script needs),
    a fresh HOME and depots, and a prepared environment in JULIABRIDGE_JULIA_ENV."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JULIAUP_DEPOT_PATH", str(tmp_path / "juliaup-depot"))
    monkeypatch.setenv("JULIA_DEPOT_PATH", str(tmp_path / "depot"))
    monkeypatch.setenv("PYTHON_JULIAPKG_PROJECT", str(tmp_path / "julia_env"))
    monkeypatch.delenv("PYTHON_JULIAPKG_EXE", raising=False)
    env = tmp_path / "env"
    env.mkdir()
    (env / "Project.toml").write_text("[deps]\n")
    (env / "Manifest.toml").write_text("")
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(env))
    return bin_dir


def fake_julia(bin_dir: Path, *, version: str = "1.11.5", packages: str = VERSIONS,
               export: str = WRITES_EXPORT) -> Path:  # fmt: skip
    exe = bin_dir / "julia"
    exe.write_text(FAKE_HEAD.format(version=version, packages=packages, export=export))
    exe.chmod(0o755)
    return exe


def two_layer_export(root: Path, monkeypatch: pytest.MonkeyPatch, *, wrong: bool = False) -> Path:
    """What JuliaBridge writes for doctor's two-layer chain (from the spec, tests/
    julia_export_writer.py); `wrong`: Julia's stored outputs are off by one."""
    import jax.numpy as jnp

    from tests.julia_export_writer import JArg, JExport, flat, write_julia_export

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 2)).astype(np.float32)
    w1, b1 = rng.standard_normal((2, 3)).astype(np.float32), np.zeros(3, np.float32)
    w2, b2 = rng.standard_normal((3, 1)).astype(np.float32), np.ones(1, np.float32)
    args = [
        JArg("input", [], x),
        JArg("parameter", ["layer_1", "weight"], w1),
        JArg("parameter", ["layer_1", "bias"], b1),
        JArg("parameter", ["layer_2", "weight"], w2),
        JArg("parameter", ["layer_2", "bias"], b2),
    ]
    y = np.tanh(x @ w1 + b1) @ w2 + b2
    text = flat(lambda x, w1, b1, w2, b2: (jnp.tanh(x @ w1 + b1) @ w2 + b2,), args)
    e = JExport("doctor", text, args, [["output"]], example_outputs={0: y + (1 if wrong else 0)})
    path = write_julia_export(root / "prepared.jlexport", e)
    monkeypatch.setenv("FAKE_EXPORT", str(path))
    return path


def by_name(report: Any) -> dict[str, Any]:
    return {p.name: p for p in report.probes}


posix_only = pytest.mark.skipif(os.name == "nt", reason="fake executables are shell scripts")


def test_julia_report_without_julia_says_how_to_install(julia_home: Path) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    r = julia_report()
    julia = by_name(r)["julia"]
    assert (julia.status, julia.error, julia.exit_code) == ("failed", "JuliaUnavailable", 3)
    assert "juliaup" in julia.detail and "PYTHON_JULIAPKG_EXE" in julia.detail
    assert [(p.name, p.status, p.detail) for p in r.probes[1:]] == [
        (n, "skipped", "no usable Julia") for n in ("environment", "packages", "export")
    ]
    assert r.exit_code == 3
    assert r.lines()[0].startswith("julia: FAILED (JuliaUnavailable, exit 3): no Julia found")


@posix_only
def test_julia_report_all_ok_with_a_julia_that_exports(
    julia_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    exe = fake_julia(julia_home)
    two_layer_export(tmp_path, monkeypatch)
    r = julia_report(export_timeout=60)
    assert [p.status for p in r.probes] == ["ok"] * 4, r.lines()
    assert (r.julia, r.julia_version) == (str(exe), "1.11.5")
    assert r.packages == {"JuliaBridge": "0.2.0", "Reactant": "0.2.280", "Lux": "1.31.4"}
    assert by_name(r)["packages"].detail == "JuliaBridge 0.2.0, Reactant 0.2.280, Lux 1.31.4"
    assert by_name(r)["environment"].detail == f"{tmp_path / 'env'} (JULIABRIDGE_JULIA_ENV)"
    assert by_name(r)["export"].detail.endswith("imported on lax, its 1 output(s) match Julia's")
    assert r.exit_code == 0 and r.as_dict()["exit_code"] == 0


@posix_only
def test_julia_report_an_export_whose_outputs_differ_is_a_mismatch(
    julia_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    fake_julia(julia_home)
    two_layer_export(tmp_path, monkeypatch, wrong=True)
    export = by_name(julia_report(export_timeout=60))["export"]
    assert (export.status, export.error, export.exit_code) == ("failed", "ReferenceMismatch", 1)
    assert "differ" in export.detail


@posix_only
def test_julia_report_a_hanging_export_is_stopped_at_its_time_limit(julia_home: Path) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    fake_julia(julia_home, export="    exec sleep 60")
    start = time.monotonic()
    r = julia_report(export_timeout=1)
    assert time.monotonic() - start < 30
    export = by_name(r)["export"]
    assert (export.status, export.error, export.exit_code) == ("failed", "JuliaExportError", 4)
    assert export.detail == "the export did not finish within 1 s and Julia was stopped"
    assert r.exit_code == 4


@posix_only
def test_julia_report_a_hanging_package_listing_is_stopped(julia_home: Path) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    fake_julia(julia_home, packages="    exec sleep 60")
    start = time.monotonic()
    r = julia_report(packages_timeout=1)
    assert time.monotonic() - start < 30
    packages = by_name(r)["packages"]
    assert (packages.status, packages.error) == ("failed", "JuliaExportError")
    assert "within 1 s and was stopped" in packages.detail
    assert by_name(r)["export"].detail == "the packages do not resolve"
    # A julia that started something still holding the output pipe: stopped all the same.
    fake_julia(julia_home, packages="    sleep 60 &\n    wait")
    start = time.monotonic()
    assert by_name(julia_report(packages_timeout=1))["packages"].status == "failed"
    assert time.monotonic() - start < 30


@posix_only
def test_julia_report_a_failing_export_shows_julias_last_output(julia_home: Path) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    fake_julia(julia_home, export='    echo "ERROR: LoadError: Package Reactant not found"; exit 1')
    export = by_name(julia_report(export_timeout=60))["export"]
    assert (export.status, export.error, export.exit_code) == ("failed", "JuliaExportError", 4)
    assert "Package Reactant not found" in export.detail
    assert "\n" not in export.line()  # one line, to paste


@posix_only
def test_julia_report_a_package_missing_from_the_environment(julia_home: Path) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    missing = VERSIONS.replace("Reactant 0.2.280", "Reactant missing")
    fake_julia(julia_home, packages=missing)
    r = julia_report(export=False)
    packages = by_name(r)["packages"]
    assert (packages.status, packages.exit_code) == ("failed", 4)
    assert packages.detail.startswith("Reactant not in ")
    assert r.packages["Reactant"] is None and r.packages["Lux"] == "1.31.4"


@posix_only
def test_julia_report_environments_that_cannot_run_an_export(
    julia_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    fake_julia(julia_home)
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(tmp_path / "nowhere"))
    env = by_name(julia_report())["environment"]
    assert (env.status, env.error, env.exit_code) == ("failed", "JuliaExportError", 4)
    assert env.detail == f"JULIABRIDGE_JULIA_ENV={tmp_path / 'nowhere'} is not a directory"
    monkeypatch.delenv("JULIABRIDGE_JULIA_ENV")  # juliapkg's project, not installed yet
    r = julia_report()
    env = by_name(r)["environment"]
    assert (env.status, env.error, env.exit_code) == ("failed", "JuliaUnavailable", 3)
    assert env.detail.startswith(f"juliapkg has not installed the Julia packages in {tmp_path}")
    assert by_name(r)["export"].detail == "no environment to run in"


@posix_only
def test_julia_report_without_export_says_it_was_not_asked_for(julia_home: Path) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    fake_julia(julia_home)
    r = julia_report(export=False)
    assert by_name(r)["export"].line() == "export: skipped: not asked for (--no-export)"
    assert r.exit_code == 0


@posix_only
def test_cli_doctor_julia_prints_the_report_and_exits_with_the_failure_code(
    julia_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from juliabridge.cli import main

    fake_julia(julia_home, export="    exec sleep 60")
    assert main(["doctor", "--julia", "--timeout", "1"]) == 4
    out = capsys.readouterr().out
    assert "Julia, end to end (juliabridge doctor --julia):" in out
    assert "export: FAILED (JuliaExportError, exit 4): the export did not finish within 1 s" in out
    assert main(["doctor", "--julia", "--no-export", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["julia_end_to_end"]["packages"]["Lux"] == "1.31.4"
    assert [p["status"] for p in data["julia_end_to_end"]["probes"]] == [
        "ok",
        "ok",
        "ok",
        "skipped",
    ]
    assert main(["doctor"]) == 0 and "end to end" not in capsys.readouterr().out
    for bad in ("0", "-1", "inf", "soon"):
        assert main(["doctor", "--julia", "--timeout", bad]) == 2


@posix_only
def test_julia_report_a_julia_that_cannot_list_the_packages(julia_home: Path) -> None:
    from juliabridge.cli.doctor_julia import julia_report

    fake_julia(julia_home, packages='    echo "ERROR: expected a Manifest.toml"; exit 1')
    packages = by_name(julia_report())["packages"]
    assert (packages.status, packages.error, packages.exit_code) == (
        "failed",
        "JuliaExportError",
        4,
    )
    assert "(status 1)" in packages.detail and "expected a Manifest.toml" in packages.detail
    # Exit 0 but only part of the answer: refused too, not taken as "the rest is missing".
    fake_julia(julia_home, packages='    echo "[juliabridge:package] Lux 1.31.4"')
    assert by_name(julia_report())["packages"].detail.startswith("Julia could not list")
    # The whole answer, then a failure (a crash on exit): not trusted either.
    fake_julia(julia_home, packages=VERSIONS + "    exit 1")
    assert "(status 1)" in by_name(julia_report())["packages"].detail
