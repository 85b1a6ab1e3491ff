"""Every public function and class says what it takes, returns and raises (help() is enough)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

PUBLIC = ("juliabridge", "juliabridge.flax", "juliabridge.equinox", "juliabridge.examples")


def _public() -> Iterator[tuple[str, Any]]:
    for name in PUBLIC:
        mod = importlib.import_module(name)
        for attr in mod.__all__:
            obj = getattr(mod, attr)
            if callable(obj):
                yield f"{name}.{attr}", obj


def _own_methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Methods the class defines itself (inherited ones are documented where they live)."""
    for key, member in vars(cls).items():
        if (key == "__call__" or not key.startswith("_")) and inspect.isfunction(member):
            yield key, member


def _params(fn: Callable[..., Any]) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]


def _missing(doc: str, fn: Callable[..., Any]) -> list[str]:
    return [p for p in _params(fn) if p not in doc]


CASES = sorted(_public(), key=lambda c: c[0])


@pytest.mark.parametrize(("name", "obj"), CASES, ids=[c[0] for c in CASES])
def test_public_callable_documents_its_parameters(name: str, obj: Any) -> None:
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{name} has no docstring"
    if not inspect.isclass(obj):
        assert not _missing(doc, obj), f"{name}'s docstring does not mention {_missing(doc, obj)}"
        if _params(obj):
            assert "Args:" in doc, f"{name}: no Args section"
        assert "Returns:" in doc, f"{name}: no Returns section"
        assert "Raises:" in doc, f"{name}: no Raises section"
        return
    if issubclass(obj, BaseException) and "__init__" not in vars(obj):
        return  # an exception class takes the message; its docstring says when it is raised
    init = vars(obj).get("__init__")
    if inspect.isfunction(init):
        init_doc = doc + "\n" + (inspect.getdoc(init) or "")
        assert not _missing(init_doc, init), (
            f"{name}() does not document {_missing(init_doc, init)}"
        )
    for key, method in _own_methods(obj):
        if key == "__init__":
            continue
        mdoc = inspect.getdoc(method) or ""
        assert mdoc.strip(), f"{name}.{key} has no docstring"
        assert not _missing(mdoc, method), (
            f"{name}.{key} does not document {_missing(mdoc, method)}"
        )
        if _params(method):
            assert "Returns:" in mdoc, f"{name}.{key}: no Returns section"


def test_the_examples_are_public() -> None:
    import juliabridge.examples

    assert {"lenet_bundle", "example_bundle_path", "example_names"} <= set(
        dir(juliabridge.examples)
    )
    assert juliabridge.examples.lenet_bundle() == juliabridge.examples.example_bundle_path()
    assert "lenet" in juliabridge.examples.example_names()
    with pytest.raises(juliabridge.BundleError, match=r"no example bundle 'nope' .*shipped: lenet"):
        juliabridge.examples.example_bundle_path("nope")
