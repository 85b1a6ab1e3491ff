"""Whether the end-to-end Julia tests run here: skipped with one reason, or failed loudly.

They run only when asked (``JULIABRIDGE_JULIA_TESTS``): they install Reactant and compile
models, which takes tens of minutes. Asked and a ``julia`` is on PATH, that executable must be
a Julia >= 1.10: anything else is an error, never a skip, so a broken PATH on a CI runner cannot
pass as "nothing to test". ``JULIABRIDGE_JULIA_TESTS=require`` (the hosted workflow's value)
makes a missing ``julia`` an error too.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from juliabridge.driver.process import INSTALL_HINT, MIN_JULIA, julia_version

#: The switch; "1" (or yes/true/on) runs the tests where julia is on PATH, "require" also
#: fails where it is not.
VARIABLE = "JULIABRIDGE_JULIA_TESTS"
OFF = ("", "0", "no", "false", "off")
ON = ("1", "yes", "true", "on")
REQUIRE = "require"


@dataclass(frozen=True)
class Gate:
    """The decision: run with `julia` (and its version), skip saying why, or fail saying why."""

    julia: str | None = None
    version: tuple[int, int, int] | None = None
    skip: str = ""
    error: str = ""


def decide(
    environ: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
    version_of: Callable[[str], tuple[int, int, int] | None] = julia_version,
) -> Gate:
    """The gate for the environment `environ` (``which``/``version_of`` for tests).

    Returns:
        A Gate with `julia` set (run), or `skip` (the one reason), or `error` (fail).
    """
    value = environ.get(VARIABLE, "").strip().lower()
    if value in OFF:
        return Gate(
            skip=f"end-to-end Julia tests are off: set {VARIABLE}=1 and put julia >= 1.10 on "
            "PATH to run them (docs/developing.md: What runs where)"
        )
    if value not in (*ON, REQUIRE):
        return Gate(error=f"{VARIABLE}={value!r} is not one of 1, yes, true, on, require or 0")
    exe = which("julia")
    if exe is None:
        why = f"{VARIABLE}={value} but there is no `julia` on PATH; {INSTALL_HINT}"
        return Gate(error=why) if value == REQUIRE else Gate(skip=f"needs Julia: {why}")
    version = version_of(exe)
    if version is None:
        return Gate(
            error=f"`{exe} --version` does not print a Julia version: the `julia` on PATH is "
            f"not Julia. Fix PATH, or unset {VARIABLE} to skip the end-to-end tests"
        )
    if version < MIN_JULIA:
        shown = ".".join(map(str, version))
        return Gate(error=f"{exe} is Julia {shown}; JuliaBridge needs >= 1.10; {INSTALL_HINT}")
    return Gate(julia=exe, version=version)
