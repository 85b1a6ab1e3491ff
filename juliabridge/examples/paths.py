"""Where the example bundles shipped inside the package live."""

from __future__ import annotations

from pathlib import Path

from ..errors import BundleError

_HERE = Path(__file__).resolve().parent


def example_bundle_path(name: str = "lenet") -> Path:
    """Path of the example bundle `name` (e.g. "lenet") shipped with juliabridge."""
    path = _HERE / f"{name}.bundle"
    if not (path / "manifest.json").is_file():
        shipped = sorted(p.stem for p in _HERE.glob("*.bundle"))
        raise BundleError(
            f"no example bundle {name!r} in {_HERE} (shipped: {', '.join(shipped) or 'none'}); "
            "reinstall juliabridge or run tools/make_example_bundles.py"
        )
    return path
