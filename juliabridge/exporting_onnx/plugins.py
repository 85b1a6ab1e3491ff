"""Importing jax2onnx: a typed error where it is absent or broken, its example plugins quiet,
and only the rules of JAX's own primitives loaded (all a jaxpr of primitives needs)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
from collections.abc import Iterator
from typing import Any

import jax

from ..errors import BackendUnavailableError

EXTRA_HINT = "pip install 'juliabridge[onnx]' (jax2onnx and onnxruntime)"


def jax2onnx_module() -> Any:
    """The imported jax2onnx.

    Raises:
        BackendUnavailableError: jax2onnx is not installed, or does not import with this jax.
    """
    try:
        with quiet():
            import jax2onnx
    except ImportError as e:
        raise BackendUnavailableError(
            f"ONNX export needs jax2onnx, which is not installed ({e}); {EXTRA_HINT}"
        ) from e
    except Exception as e:  # a jax2onnx built for another jax fails at import in many ways
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise BackendUnavailableError(
            f"jax2onnx is installed but does not import with this jax {jax.__version__} "
            f"({type(e).__name__}: {first}); install a jax2onnx made for it: {EXTRA_HINT}"
        ) from e
    return jax2onnx


def onnxruntime_module() -> Any:
    """The imported onnxruntime, which checks every converted graph.

    Raises:
        BackendUnavailableError: onnxruntime is not installed.
    """
    try:
        import onnxruntime
    except ImportError as e:
        raise BackendUnavailableError(
            f"export_onnx runs the converted graph in onnxruntime to check it, and onnxruntime "
            f"is not installed ({e}); {EXTRA_HINT}, or pass check=False"
        ) from e
    return onnxruntime


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """jax2onnx logs a traceback for each of its example plugins whose optional package
    (dm-pix, ...) is absent, none of them used here; onnx_ir warns of each shape value it
    leaves untyped (a symbolic batch makes several), which onnxruntime infers."""
    loggers = [logging.getLogger(name) for name in ("jax2onnx", "onnx_ir")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def primitive_rules_only() -> Iterator[None]:
    """jax2onnx imports all of its ~600 plugins (Flax, Equinox, examples) before converting,
    ~10x the time of the primitive rules, which are all a jaxpr of primitives needs. Within:
    only those are imported, and jax2onnx is told its plugins are in (its own flag, restored
    after, so a later jax2onnx.to_onnx of the user's imports the rest). A jax2onnx without
    that flag imports everything, as it would anyway."""
    try:
        system = importlib.import_module("jax2onnx.plugins.plugin_system")
    except ImportError:
        system = None
    flag = "_already_imported_plugins"
    if system is None or not hasattr(system, flag):
        yield
        return
    # The rules of JAX's own primitives: lax and core, and random's (random_bits,
    # random_wrap, ...), which a jaxpr can hold too. Not nn: its plugins need flax.nnx.
    packages = ("lax", "core", "random")
    for package in (f"jax2onnx.plugins.jax.{name}" for name in packages):
        try:
            paths = importlib.import_module(package).__path__
        except ImportError:
            continue
        for info in pkgutil.iter_modules(paths, package + "."):
            with contextlib.suppress(Exception):  # as jax2onnx does: a broken plugin is skipped
                importlib.import_module(info.name)
    before = getattr(system, flag)
    setattr(system, flag, True)
    try:
        yield
    finally:
        setattr(system, flag, before)
