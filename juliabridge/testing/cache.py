"""Julia exports cached by the content they depend on, so a test session exports each once."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._version import __version__
from ..driver.process import export_script, find_julia, julia_project_dir
from ..errors import JuliaBridgeError
from ..julia_export import convert_julia_export

#: Bumped when the cache layout or key changes.
CACHE_VERSION = 2


def _julia_sources() -> list[Path]:
    """JuliaBridge.jl's Project.toml and sources: an export depends on them."""
    try:
        project = julia_project_dir()
    except JuliaBridgeError:
        return []
    return [project / "Project.toml", *sorted((project / "src").glob("*.jl"))]


def export_key(
    script: Path, options: Mapping[str, Any], depends: Iterable[Path] = (), julia: str = ""
) -> str:
    """A hex digest of everything the export of `script` depends on.

    The script's bytes, the files it `include`s (`depends`), the export options, JuliaBridge.jl's
    sources, the juliabridge version and the Julia installation (`julia`).
    """
    h = hashlib.sha256(f"juliabridge-export-cache-{CACHE_VERSION}\0{__version__}\0".encode())
    h.update(julia.encode() + b"\0")
    h.update(json.dumps(dict(options), sort_keys=True, default=str).encode())
    files = [script, *sorted(Path(d).resolve() for d in depends)]
    for f in files:
        h.update(b"\0file\0" + str(f.name).encode() + b"\0" + f.read_bytes())
    for f in _julia_sources():
        h.update(b"\0src\0" + f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:32]


class ExportCache:
    """Bundles exported from Julia scripts, kept in `directory` under a content hash.

    An export whose key is already on disk (a previous session) is not run again; one that
    failed in this session is not retried, its error is raised again.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._failed: dict[str, BaseException] = {}

    def export(
        self,
        script: str | os.PathLike[str],
        *,
        depends: Iterable[str | os.PathLike[str]] = (),
        timeout: float | None = 3600.0,
        **options: Any,
    ) -> Path:
        """The bundle of `script` exported with `options` (``export_script``'s keywords): the
        Julia export directory Julia writes, converted to a bundle (``convert_julia_export``).

        Raises ``JuliaUnavailable`` without Julia, ``JuliaExportError`` when the export fails,
        and the reader's errors when the directory does not convert.
        """
        path = Path(script).expanduser().resolve()
        if not path.is_file():
            raise JuliaBridgeError(f"no such Julia script: {path}")
        julia = find_julia()
        key = export_key(
            path,
            options,
            [Path(d) for d in depends],
            f"{julia.executable}\0{'.'.join(map(str, julia.version))}",
        )
        if key in self._failed:
            raise self._failed[key]
        target = self.directory / f"{path.stem}-{key}.bundle"
        if (target / "manifest.json").is_file():
            return target
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            exported = export_script(
                path,
                target.with_suffix(".jlexport"),
                overwrite=True,
                progress=False,
                timeout=timeout,
                **options,
            )
            return convert_julia_export(exported, target, overwrite=True)
        except Exception as exc:
            self._failed[key] = exc
            raise


__all__ = ["CACHE_VERSION", "ExportCache", "export_key"]
