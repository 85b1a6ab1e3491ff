"""The jax releases juliabridge is tested with, and the one-line warning outside them.

pyproject.toml bounds jax and jaxlib below the next minor release CI has not seen; within that
bound a newer patch release installs, so `import juliabridge` warns once (UntestedJaxWarning)
when the installed jax or jaxlib is outside TESTED_JAX, and `juliabridge doctor` reports it.
"""

from __future__ import annotations

import importlib.metadata
import re
import warnings

from ..errors import UntestedJaxWarning

#: The oldest and newest jax/jaxlib releases CI tests (.ci/run: environment A pins the oldest,
#: environment B installs the newest release at run time and fails while it is newer than this).
TESTED_JAX = ("0.10.2", "0.12.1")

_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_warned = False


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "0.12.0.1" -> (0, 12, 0, 1), "0.13.0rc1" ->
    (0, 13, 0); () when it does not start with a number."""
    m = _RELEASE.match(version.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def in_tested_range(version: str) -> bool:
    """Whether `version` (of jax or jaxlib) lies within TESTED_JAX, both ends included."""
    lo, hi = (release(v) for v in TESTED_JAX)
    return lo <= release(version) <= hi


def installed() -> dict[str, str]:
    """The installed versions of jax and jaxlib ("unknown" where the metadata is missing)."""
    out = {}
    for dist in ("jax", "jaxlib"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def untested_message(versions: dict[str, str]) -> str | None:
    """The warning's one line for these versions, or None when every known one is tested."""
    outside = [
        f"{dist} {v}" for dist, v in versions.items() if v != "unknown" and not in_tested_range(v)
    ]
    if not outside:
        return None
    lo, hi = TESTED_JAX
    return (
        f"juliabridge is untested with {' and '.join(outside)}: CI tests jax and jaxlib {lo} to "
        f"{hi} (pip install 'jax>={lo},<={hi}' 'jaxlib>={lo},<={hi}' for a tested pair; "
        "`juliabridge doctor` says more)"
    )


def warn_if_untested(versions: dict[str, str] | None = None) -> bool:
    """Warn once per process (UntestedJaxWarning) if jax or jaxlib is outside TESTED_JAX.

    Args:
        versions: {"jax": ..., "jaxlib": ...}; the installed ones when None.

    Returns:
        Whether this call warned.
    """
    global _warned
    if _warned:
        return False
    message = untested_message(installed() if versions is None else versions)
    if message is None:
        return False
    _warned = True
    warnings.warn(message, UntestedJaxWarning, stacklevel=2)
    return True
