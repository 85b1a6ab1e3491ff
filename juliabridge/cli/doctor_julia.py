"""`juliabridge doctor --julia`: whether the Julia half works on this machine, as a report.

Four probes, in order, each bounded in time; one that cannot run because an earlier one failed
is skipped, saying why:

1. **julia**: the Julia exports would use (the driver's own search, ``find_julia``) and its
   version;
2. **environment**: the Julia environment they would run in: ``JULIABRIDGE_JULIA_ENV``, else
   juliapkg's project (installed by the first export);
3. **packages**: the versions of JuliaBridge, Reactant and Lux in that environment's manifest
   (``Pkg.dependencies`` in a child ``julia``, nothing loaded or fetched);
4. **export**: a two-layer Dense chain exported by the driver in a child ``julia`` with a time
   limit (the route ``juliabridge export`` takes), imported and run on the lax backend, and
   compared with the outputs Julia stored.

Every failure is one line naming the error class, its exit code (juliabridge/support/
exitcodes.py) and what to do; ``JuliaReport.exit_code`` is the first failure's code.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import JuliaBridgeError, JuliaExportError, JuliaUnavailable
from ..support.exitcodes import MISMATCH, OK, exit_code

#: The packages whose versions the report names.
PACKAGES = ("JuliaBridge", "Reactant", "Lux")
#: Default time limits (seconds): listing the packages, and the export (Reactant loads and
#: compiles; the first run after an install also precompiles).
PACKAGES_TIMEOUT = 120.0
EXPORT_TIMEOUT = 900.0

#: The model of the export probe, in the script convention (docs/julia-export.md).
TWO_LAYERS = """\
using Lux, Random
model = Chain(Dense(2 => 3, tanh), Dense(3 => 1))
ps, st = Lux.setup(Random.Xoshiro(0), model)
x = randn(Random.Xoshiro(1), Float32, 2, 4)
"""

NOT_INSTALLED = (
    "juliapkg has not installed the Julia packages in {path} yet: the first export does "
    "(several minutes), or run `python -c 'import juliapkg; juliapkg.resolve()'`, or set "
    "JULIABRIDGE_JULIA_ENV to a prepared environment (e.g. julia/ after Pkg.instantiate())"
)


@dataclass
class Probe:
    """One probe's outcome: ``ok``, ``failed`` (with the error class and exit code) or
    ``skipped`` (the detail says why)."""

    name: str
    status: str
    detail: str
    error: str = ""
    exit_code: int = OK

    def line(self) -> str:
        """The probe as one line of the report."""
        if self.status == "failed":
            return f"{self.name}: FAILED ({self.error}, exit {self.exit_code}): {self.detail}"
        return f"{self.name}: {self.status}: {self.detail}"


@dataclass
class JuliaReport:
    """Every probe, and what they found (None where a probe did not get that far)."""

    probes: list[Probe] = field(default_factory=list)
    julia: str | None = None
    julia_version: str | None = None
    environment: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """The exit code of the first failed probe, 0 when none failed."""
        return next((p.exit_code for p in self.probes if p.status == "failed"), OK)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able data (``exit_code`` included)."""
        return {**asdict(self), "exit_code": self.exit_code}

    def lines(self) -> list[str]:
        """The report as lines to paste into a bug report."""
        return [p.line() for p in self.probes]


def _failed(name: str, exc: BaseException) -> Probe:
    text = (str(exc).strip() or type(exc).__name__).replace("\n", " | ")
    return Probe(name, "failed", text, type(exc).__name__, exit_code(exc))


def _skip_rest(report: JuliaReport, names: tuple[str, ...], why: str) -> JuliaReport:
    report.probes += [Probe(n, "skipped", why) for n in names]
    return report


def _environment() -> tuple[Path, str]:
    """The environment exports would use, and where that choice comes from."""
    from ..driver.process import _juliapkg_project

    prepared = os.environ.get("JULIABRIDGE_JULIA_ENV")
    if prepared:
        return Path(prepared), "JULIABRIDGE_JULIA_ENV"
    return _juliapkg_project(), "juliapkg's project"


def _check_environment(path: Path, source: str) -> None:
    """Raise when `path` is no environment an export can run in."""
    if source == "JULIABRIDGE_JULIA_ENV" and not path.is_dir():
        raise JuliaExportError(f"JULIABRIDGE_JULIA_ENV={path} is not a directory")
    if not (path / "Project.toml").is_file() or not (path / "Manifest.toml").is_file():
        if source == "JULIABRIDGE_JULIA_ENV":
            raise JuliaExportError(
                f"JULIABRIDGE_JULIA_ENV={path} has no Project.toml and Manifest.toml: run "
                f"`julia --project={path} -e 'using Pkg; Pkg.instantiate()'` there"
            )
        raise JuliaUnavailable(NOT_INSTALLED.format(path=path))


def _export_probe(julia: Any, environment: Path, timeout: float) -> str:
    """Export TWO_LAYERS through the driver, import it and compare; a sentence saying how."""
    from ..driver.process import ProgressDisplay, run_export_request
    from ..importers import import_lux
    from ..testing.compare import compare_with_julia

    with tempfile.TemporaryDirectory(prefix="juliabridge-doctor-") as tmp:
        script = Path(tmp) / "two_layers.jl"
        script.write_text(TWO_LAYERS, encoding="utf-8")
        out = Path(tmp) / "two_layers.jlexport"
        request = {"script": str(script), "out": str(out), "name": "doctor", "mode": "test"}
        started = time.monotonic()
        with ProgressDisplay(False) as display:
            path = run_export_request(julia, environment, request, display=display, timeout=timeout)
        seconds = time.monotonic() - started
        model = import_lux(path, backend="lax")
        match = compare_with_julia(model)
        if not match.diffs or not match.ok:
            raise _Mismatch(str(match))
    return (
        f"a two-layer Dense chain exported in {seconds:.0f} s; imported on lax, its "
        f"{len(match.diffs)} output(s) match Julia's"
    )


class _Mismatch(JuliaBridgeError):
    """The export imported, but its outputs differ from Julia's (exit code 1, as verify)."""


def julia_report(
    *,
    export: bool = True,
    packages_timeout: float = PACKAGES_TIMEOUT,
    export_timeout: float = EXPORT_TIMEOUT,
) -> JuliaReport:
    """Run the probes (see the module docstring); never raises for what it finds.

    Args:
        export: run the export probe (False: skipped, saying so).
        packages_timeout, export_timeout: time limits in seconds for the two Julia children.

    Returns:
        The report; ``report.exit_code`` is 0 when nothing failed.
    """
    from ..driver.process import find_julia, package_versions

    report = JuliaReport()
    try:
        julia = find_julia()
    except JuliaBridgeError as exc:
        report.probes.append(_failed("julia", exc))
        return _skip_rest(report, ("environment", "packages", "export"), "no usable Julia")
    shown = ".".join(map(str, julia.version))
    report.julia, report.julia_version = julia.executable, shown
    report.probes.append(
        Probe("julia", "ok", f"{julia.executable}, Julia {shown} ({julia.source})")
    )

    path, source = _environment()
    report.environment = str(path)
    try:
        _check_environment(path, source)
    except JuliaBridgeError as exc:
        report.probes.append(_failed("environment", exc))
        return _skip_rest(report, ("packages", "export"), "no environment to run in")
    report.probes.append(Probe("environment", "ok", f"{path} ({source})"))

    try:
        report.packages = package_versions(julia, path, PACKAGES, timeout=packages_timeout)
        absent = [n for n, v in report.packages.items() if v is None]
        if absent:
            raise JuliaExportError(
                f"{', '.join(absent)} not in {path}'s manifest: reinstall the environment "
                "(`python -c 'import juliapkg; juliapkg.resolve(force=True)'`, or "
                "Pkg.instantiate() in JULIABRIDGE_JULIA_ENV)"
            )
    except JuliaBridgeError as exc:
        report.probes.append(_failed("packages", exc))
        return _skip_rest(report, ("export",), "the packages do not resolve")
    listed = ", ".join(f"{n} {v}" for n, v in report.packages.items())
    report.probes.append(Probe("packages", "ok", listed))

    if not export:
        return _skip_rest(report, ("export",), "not asked for (--no-export)")
    try:
        report.probes.append(Probe("export", "ok", _export_probe(julia, path, export_timeout)))
    except _Mismatch as exc:
        report.probes.append(Probe("export", "failed", str(exc), "ReferenceMismatch", MISMATCH))
    except JuliaBridgeError as exc:
        report.probes.append(_failed("export", exc))
    return report
