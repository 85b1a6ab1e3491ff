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
from juliabridge.bundle import open_bundle
from juliabridge.bundle.write.upgrade import upgrade_bundle
from juliabridge.bundle.write.vjp_bundle import add_vjp
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
    "shardings": (None, None),
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


def drift(fn: Callable[..., Any], *, every_field: bool) -> list[str]:
    """How `fn`'s keyword-only parameters differ from LoadOptions' fields: a load option
    under another default or annotation (both modules postpone annotations, so these are the
    source texts), and with `every_field`, other names or order than the fields'."""
    fields = {f.name: f for f in FIELDS}
    kws = [p for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
    found = []
    if every_field and [p.name for p in kws] != NAMES:
        found.append(f"keywords {[p.name for p in kws]}, fields {NAMES}")
    for p in kws:
        f = fields.get(p.name)
        if f is not None and (p.default, p.annotation) != (f.default, f.type):
            found.append(
                f"{p.name}: {p.annotation} = {p.default!r}, field {f.type} = {f.default!r}"
            )
    return found


def test_import_lux_keywords_are_the_fields_in_order_with_their_defaults() -> None:
    assert drift(juliabridge.import_lux, every_field=True) == []


#: Entries that take some load options as keywords of their own: the public loaders and
#: verify, and the lower-level readers and rewriters a user or the CLI calls directly.
SPELLERS: list[Callable[..., Any]] = [
    juliabridge.load_mlir,
    juliabridge.load_reactant_export,
    juliabridge.verify,
    open_bundle,
    upgrade_bundle,
    add_vjp,
]


@pytest.mark.parametrize("entry", SPELLERS, ids=lambda f: f.__name__)
def test_other_entries_spell_their_load_options_as_the_fields(entry: Callable[..., Any]) -> None:
    assert set(inspect.signature(entry).parameters) & set(NAMES), "takes no load option"
    assert drift(entry, every_field=False) == []


def test_the_drift_check_can_fail() -> None:
    def renamed(path: str, *, backend: str = "auto", trusted: bool = False) -> None: ...

    def other_default(path: str, *, backend: str = "lax", trust: bool = False) -> None: ...

    assert drift(other_default, every_field=False) == ["backend: str = 'lax', field str = 'auto'"]
    assert drift(renamed, every_field=False) == []  # not an option's name: not compared
    assert drift(renamed, every_field=True) == [f"keywords ['backend', 'trusted'], fields {NAMES}"]


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
