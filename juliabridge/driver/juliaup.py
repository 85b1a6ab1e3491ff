"""juliaup's record of installed Julia versions (``juliaup.json`` in its depot), read as data
the user's machine holds, not as data juliabridge wrote: any shape, any size, any file type.

The file is opened without blocking (a FIFO cannot hang the search), read only when it is a
regular file of at most MAX_JULIAUP_JSON bytes, and its structure is checked before use: a
malformed file is a JuliaUnavailable naming it, what was found and what to do, never an
AttributeError or TypeError from inside the search (issue 50).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..errors import JuliaUnavailable

#: juliaup.json lists a few versions in a few KB; a larger file is not juliaup's.
MAX_JULIAUP_JSON = 4 << 20
_SHAPE = (
    'a JSON object {"InstalledVersions": {"<version>": {"Path": "<directory>"}, ...}} '
    '(or "BinaryPath": "<executable>" per version)'
)


def juliaup_json() -> Path:
    """Where juliaup keeps its record: $JULIAUP_DEPOT_PATH/juliaup, else ~/.julia/juliaup."""
    depot = os.environ.get("JULIAUP_DEPOT_PATH") or str(Path.home() / ".julia")
    return Path(depot) / "juliaup" / "juliaup.json"


def _malformed(meta: Path, found: str) -> JuliaUnavailable:
    return JuliaUnavailable(
        f"{meta}: juliaup's record of installed Julia versions is malformed ({found}); "
        f"expected {_SHAPE}. Repair juliaup (`juliaup self update`, or reinstall it), remove "
        "the file if juliaup is no longer used, or set PYTHON_JULIAPKG_EXE to a Julia "
        "executable"
    )


def _read(meta: Path) -> bytes | None:
    """The file's bytes; None when there is no file (juliaup is not installed)."""
    try:
        fd = os.open(meta, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _malformed(meta, f"cannot be opened: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _malformed(meta, "not a regular file")
        if st.st_size > MAX_JULIAUP_JSON:
            raise _malformed(meta, f"{st.st_size} bytes, more than {MAX_JULIAUP_JSON}")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(MAX_JULIAUP_JSON + 1)[:MAX_JULIAUP_JSON]
    except OSError as e:
        raise _malformed(meta, f"cannot be read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _entry(meta: Path, version: str, info: Any, exe: str) -> str:
    """The executable one InstalledVersions entry names."""
    if not isinstance(info, dict):
        raise _malformed(meta, f"version {version[:80]!r} is a {type(info).__name__}")
    for key, tail in (("BinaryPath", ()), ("Path", ("bin", exe))):
        if key in info:
            value = info[key]
            if not isinstance(value, str) or not value or "\x00" in value:
                raise _malformed(meta, f"{version[:80]}.{key} is {str(value)[:80]!r}")
            return str(meta.parent.joinpath(value, *tail))
    raise _malformed(meta, f"version {version[:80]!r} has neither Path nor BinaryPath")


def juliaup_executables() -> list[str]:
    """Executables of the Julia versions juliaup installed, newest first ([] without juliaup).

    Raises:
        JuliaUnavailable: juliaup.json exists but cannot be read, is larger than
            MAX_JULIAUP_JSON, is not a regular file, not JSON, or not of juliaup's shape.
    """
    meta = juliaup_json()
    data = _read(meta)
    if data is None:
        return []
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise _malformed(meta, f"not JSON: {type(e).__name__}") from None
    if not isinstance(doc, dict):
        raise _malformed(meta, f"the top level is a {type(doc).__name__}")
    installed = doc.get("InstalledVersions", {})
    if not isinstance(installed, dict):
        raise _malformed(meta, f"InstalledVersions is a {type(installed).__name__}")
    exe = "julia.exe" if os.name == "nt" else "julia"
    found = []
    for version, info in installed.items():
        nums = tuple(int(n) for n in re.findall(r"\d{1,9}", version)[:3])
        found.append((nums, _entry(meta, version, info, exe)))
    return [path for _, path in sorted(found, reverse=True)]


__all__ = ["MAX_JULIAUP_JSON", "juliaup_executables", "juliaup_json"]
