"""What this installation can do: Python, JAX, each backend, Julia, StableHLO versions.

`report()` gathers the facts (each probe catches its own failure and says why); the CLI's
`juliabridge doctor` prints them. Nothing here is needed to load a bundle.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

from .._version import __version__
from ..support.jaxversion import untested_message

#: What each backend gives, as docs/transforms.md compares them.
TRANSFORMATIONS = {
    "lax": "jit, grad/vjp/jacrev, jvp/jacfwd, hessian and every higher order, vmap (batched), "
    "sharding propagation, any platform JAX runs on",
    "enzyme": "jit, grad/vjp (Enzyme), jvp (not through every op), vmap (a loop); no second order",
    "xla": "jit, grad/vjp (through a VJP module: shipped, or derived via lax or Enzyme), "
    "vmap (a loop); no forward mode, no second order",
}


@dataclass
class Check:
    """One fact: a name, whether it is available, and a detail or the reason it is not."""

    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    """Everything `juliabridge doctor` prints."""

    juliabridge: str
    python: str
    platform: str
    jax: str
    jaxlib: str
    jax_tested: bool
    devices: str
    stablehlo: dict[str, str] = field(default_factory=dict)
    backends: list[Check] = field(default_factory=list)
    julia: list[Check] = field(default_factory=list)
    extras: list[Check] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able data."""
        out = dict(vars(self))
        for key in ("backends", "julia", "extras"):
            out[key] = [vars(c) for c in out[key]]
        return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


def _stablehlo_versions() -> dict[str, str]:
    try:
        from jaxlib.mlir.dialects import stablehlo
    except ImportError as e:
        return {"error": _first_line(e)}
    out = {
        "reads_from": str(stablehlo.get_minimum_version()),
        "writes_and_reads_up_to": str(stablehlo.get_current_version()),
    }
    try:
        week12 = stablehlo.StablehloCompatibilityRequirement.WEEK_12
        out["12_week_target"] = str(stablehlo.get_version_from_compatibility_requirement(week12))
    except (AttributeError, TypeError, ValueError):
        pass
    return out


def _backend_checks() -> list[Check]:
    from ..backends.enzyme import availability

    checks = [Check("lax", True, TRANSFORMATIONS["lax"])]
    if availability.enzyme_available():
        checks.append(Check("enzyme", True, TRANSFORMATIONS["enzyme"]))
    else:
        why = "enzyme-ad is not installed"
        try:
            import enzyme_ad.jax  # noqa: F401
        except Exception as e:  # ImportError or a jaxlib ABI failure inside enzyme_ad
            why = _first_line(e)
        checks.append(
            Check(
                "enzyme",
                False,
                f"{why}. enzyme-ad publishes wheels for CPython 3.11 only "
                "(pip install 'juliabridge[enzyme]' there); the lax backend needs nothing extra",
            )
        )
    try:
        from ..support.jaxinternals import _export_module

        _export_module()
        checks.append(Check("xla", True, TRANSFORMATIONS["xla"]))
    except Exception as e:
        checks.append(Check("xla", False, _first_line(e)))
    return checks


def _julia_checks() -> list[Check]:
    from ..driver.process import find_julia

    checks = []
    try:
        julia = find_julia()
        checks.append(Check("julia", True, f"{julia.executable} ({julia.source})"))
    except Exception as e:
        checks.append(Check("julia", False, _first_line(e)))
    for dist, purpose in (("juliacall", "export from live Julia objects"), ("juliapkg", "")):
        v = _version(dist)
        hint = "pip install 'juliabridge[julia]'"
        checks.append(
            Check(
                dist,
                v is not None,
                v or f"not installed ({hint}{'; ' + purpose if purpose else ''})",
            )
        )
    return checks


def report() -> Report:
    """Probe this installation (imports jax; starts no Julia, compiles nothing)."""
    import jax

    try:
        devices = ", ".join(sorted({f"{d.platform}:{d.device_kind}" for d in jax.devices()}))
    except RuntimeError as e:
        devices = _first_line(e)
    jax_version = jax.__version__
    jaxlib = _version("jaxlib") or "unknown"
    extras = [
        Check(
            name, _version(name) is not None, _version(name) or f"pip install 'juliabridge[{name}]'"
        )
        for name in ("flax", "equinox")
    ]
    return Report(
        juliabridge=__version__,
        python=sys.version.split()[0] + f" ({platform.python_implementation()})",
        platform=f"{platform.system()} {platform.machine()}",
        jax=jax_version,
        jaxlib=jaxlib,
        jax_tested=untested_message({"jax": jax_version, "jaxlib": jaxlib}) is None,
        devices=devices,
        stablehlo=_stablehlo_versions(),
        backends=_backend_checks(),
        julia=_julia_checks(),
        extras=extras,
    )
