"""The command line turns on ``jax_enable_x64`` for a bundle whose arrays are 64-bit.

In Python, `import_lux` of a bundle with f64/i64/ui64 arrays raises X64DisabledError unless
the caller enabled x64: switching it silently would change the dtypes of every other JAX
computation in their program. A `juliabridge` command runs one bundle in a process of its
own, so nothing else depends on the setting: the commands that run a bundle read what it
declares (its manifest, a Julia export's description or a Reactant export's .py, nothing
else), turn x64 on before JAX computes anything when a declared type is 64-bit, and say so
on stderr. The setting is restored when the command returns (it may run inside a test).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from ..support import dtypes
from ..support.exitcodes import safe


def declared_types(path: str | os.PathLike[str]) -> dict[str, str]:
    """Label -> MLIR element type of every argument (and, for a bundle, result) `path`
    declares: a bundle's manifest, a JuliaBridge.jl export's description or a Reactant
    export's .py. Empty when it cannot tell; the command itself then reports what is wrong.

    Nothing is followed outside the directory: a symlinked manifest is not read.
    """
    from ..bundle.manifest import MANIFEST_NAME, load_manifest
    from ..errors import JuliaBridgeError
    from ..julia_export import is_julia_export
    from ..julia_export.description import read_description
    from ..reactant_export.directory import is_export_dir, read_export_script

    try:
        root = Path(path)
        if is_julia_export(root):
            d = read_description(root if root.is_dir() else root.parent, None)
            return {a.label: a.dtype for a in d.arguments}
        if is_export_dir(root):
            return {a.label: a.dtype for a in read_export_script(root).arguments}
        manifest = root if root.name == MANIFEST_NAME else root / MANIFEST_NAME
        if not stat.S_ISREG(os.lstat(manifest).st_mode):
            return {}
        m = load_manifest(manifest)
        types = {a.label: a.dtype for a in m.arguments}
        return types | {f"result {r.index}": r.dtype for r in m.results}
    except (JuliaBridgeError, OSError, ValueError):
        return {}


@contextlib.contextmanager
def x64_where_needed(command: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """Run the body with ``jax_enable_x64`` on when `path` declares a 64-bit type and it is
    off, saying so on stderr; the previous setting is restored afterwards."""
    import jax

    wide = {k: t for k, t in declared_types(path).items() if t in dtypes.SIXTY_FOUR_BIT}
    if not wide or dtypes.x64_enabled():
        yield
        return
    listed = ", ".join(f"{k}: {t}" for k, t in list(wide.items())[:4])
    more = "" if len(wide) <= 4 else f" and {len(wide) - 4} more"
    sys.stderr.write(
        safe(
            f"juliabridge {command}: note: {path} holds 64-bit types ({listed}{more}), so "
            "jax_enable_x64 is turned on for this command (in Python, call "
            'jax.config.update("jax_enable_x64", True) before import_lux)'
        )
        + "\n"
    )
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", False)


__all__ = ["declared_types", "x64_where_needed"]
