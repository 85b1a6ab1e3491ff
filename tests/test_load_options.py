"""An option of a load is added in two places (issue 42): its field of LoadOptions
(juliabridge/lux/options.py) and the code that uses it.

`import_lux` keeps its keywords (the public API); these tests fail when a keyword and a field
disagree (name, order, default, annotation), when `import_lux` forgets to put a keyword into
the LoadOptions it hands down, or when a layer between the entry and the use grows a keyword of
its own for an option instead of taking the LoadOptions whole.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import juliabridge
from juliabridge import importers
from juliabridge.errors import JuliaBridgeError
from juliabridge.julia_export.convert import convert_julia_export, import_julia_export
from juliabridge.lux.model import bundle_model, import_bundle_lux
from juliabridge.lux.options import DEFAULT_OPTIONS, LoadOptions
from juliabridge.reactant_export.convert import convert_export
from juliabridge.reactant_export.luxmodel import export_bundle, import_export_lux

FIELDS = dataclasses.fields(LoadOptions)
NAMES = [f.name for f in FIELDS]

#: A value other than the default for every field (a new field must get one here).
OTHER: dict[str, Any] = {
    "backend": "xla",
    "layout": "julia",
    "verify_checksums": False,
    "trust": True,
    "outputs": (1, 0),
    "state_results": {1: 2},
    "positions": (1, 2, 3),
    "batch_axis": 0,
}

#: The layers below the public entry: each takes the LoadOptions whole.
ROUTES: list[Callable[..., Any]] = [
    import_bundle_lux,
    bundle_model,
    import_julia_export,
    convert_julia_export,
    import_export_lux,
    export_bundle,
    convert_export,
]


def _keywords(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]


def test_import_lux_keywords_are_the_fields_in_order_with_their_defaults() -> None:
    kws = _keywords(juliabridge.import_lux)
    assert [p.name for p in kws] == NAMES
    for p, f in zip(kws, FIELDS):
        assert p.default == f.default, f.name
        # Both modules use postponed annotations, so these are the source texts.
        assert p.annotation == f.type, f.name


@pytest.mark.parametrize(
    "entry",
    [juliabridge.load_mlir, juliabridge.load_reactant_export, juliabridge.verify],
    ids=lambda f: f.__name__,
)
def test_other_public_entries_spell_their_load_options_as_the_fields(
    entry: Callable[..., Any],
) -> None:
    fields = {f.name: f for f in FIELDS}
    shared = [p for p in _keywords(entry) if p.name in fields]
    assert shared, f"{entry.__name__} takes no load option"
    for p in shared:
        assert p.default == fields[p.name].default, p.name
        assert p.annotation == fields[p.name].type, p.name


@pytest.mark.parametrize("route", ROUTES, ids=lambda f: f.__name__)
def test_the_layers_below_take_the_options_whole(route: Callable[..., Any]) -> None:
    params = inspect.signature(route).parameters
    assert "options" in params
    assert params["options"].annotation == "LoadOptions"
    assert not set(params) & set(NAMES), f"{route.__name__} takes an option by itself"


def test_every_field_has_a_value_other_than_its_default() -> None:
    assert list(OTHER) == NAMES
    for f in FIELDS:
        assert OTHER[f.name] != f.default, f.name


@pytest.mark.parametrize(
    ("julia", "export", "route"),
    [
        (True, False, "import_julia_export"),
        (False, True, "import_export_lux"),
        (False, False, "import_bundle_lux"),
    ],
)
def test_import_lux_hands_every_keyword_to_its_route(
    monkeypatch: pytest.MonkeyPatch, julia: bool, export: bool, route: str
) -> None:
    got: list[tuple[Any, ...]] = []
    monkeypatch.setattr(importers, "is_julia_export", lambda path: julia)
    monkeypatch.setattr(importers, "is_export_dir", lambda path: export)
    monkeypatch.setattr(importers, route, lambda *args: got.append(args) or "model")
    assert juliabridge.import_lux(Path("m"), **OTHER) == "model"
    assert got == [(Path("m"), LoadOptions(**OTHER))]
    juliabridge.import_lux(Path("m"))
    assert got[1] == (Path("m"), DEFAULT_OPTIONS) and LoadOptions() == DEFAULT_OPTIONS


def test_options_are_checked_when_made_layout_first() -> None:
    with pytest.raises(JuliaBridgeError, match=r"unknown layout 'row'; expected 'mlir' or 'julia'"):
        LoadOptions(layout="row", backend="nope")
    with pytest.raises(JuliaBridgeError, match=r"unknown backend 'nope'; expected one of auto"):
        LoadOptions(backend="nope")
    with pytest.raises(JuliaBridgeError, match="unknown layout"):
        juliabridge.import_lux("/nonexistent", layout="row")


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_OPTIONS.trust = True  # type: ignore[misc]
