"""Where the example bundles shipped inside the package live."""

from __future__ import annotations

from pathlib import Path

from ..errors import BundleError

_HERE = Path(__file__).resolve().parent


def example_names() -> list[str]:
    """The names of the example bundles shipped with juliabridge.

    Returns:
        The sorted names (e.g. ``["lenet"]``), each a valid ``name`` for `example_bundle_path`.

    Raises:
        Nothing: an installation without examples gives an empty list.
    """
    return sorted(p.name.removesuffix(".bundle") for p in _HERE.glob("*.bundle"))


def example_bundle_path(name: str = "lenet") -> Path:
    """The path of the example bundle `name` shipped inside the installed package.

    Args:
        name: the example's name, one of `example_names()` (default ``"lenet"``).

    Returns:
        The bundle directory, ready for ``juliabridge.import_lux`` or ``juliabridge.verify``.

    Raises:
        BundleError: no example of that name is installed (the message lists those that are).
    """
    path = _HERE / f"{name}.bundle"
    if not (path / "manifest.json").is_file():
        shipped = example_names()
        raise BundleError(
            f"no example bundle {name!r} in {_HERE} (shipped: {', '.join(shipped) or 'none'}); "
            "reinstall juliabridge or run tools/make_example_bundles.py"
        )
    return path


def lenet_bundle() -> Path:
    """The path of the shipped LeNet-5 example bundle (no Julia needed to use it).

    A Lux ``Chain`` of two convolutions with max-pooling and three Dense layers, traced with a
    batch of 4 inputs of Julia size ``(28, 28, 1, 4)`` (MLIR shape ``(4, 1, 28, 28)``), made in
    Python by ``tools/make_example_bundles.py`` (its manifest says ``made_with_julia = false``),
    with example inputs and reference outputs for ``juliabridge.verify``.

    Returns:
        The bundle directory inside the installed package.

    Raises:
        BundleError: the bundle is missing from this installation.
    """
    return example_bundle_path("lenet")
