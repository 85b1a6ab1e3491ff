"""Every import_lux option reaches every route that takes it (issue 42's LoadOptions, issue 38):
a bundle, a JuliaBridge.jl export directory and a Reactant export directory, through
`import_lux` and through `juliabridge convert`.

Each option is checked by what it does, not by what is passed: `backend` is the backend the
model runs on; `layout="julia"` presents the parameters transposed (Julia's dimension order)
and takes and returns arrays in that order; `trust=True` skips the module's resource budgets
(docs/reliability.md: an op budget of 1 refuses any module, trusted or not is the difference);
`verify_checksums=False` reads a bundle whose weights no longer match their digest; Reactant's
overrides (`outputs`, `positions`, `batch_axis`) shape the manifest the same way through
`import_lux` and through `juliabridge convert`'s flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import juliabridge
from juliabridge import ResourceLimitError
from juliabridge.bundle import open_bundle
from juliabridge.cli.commands import main as cli_main
from juliabridge.errors import ChecksumError

from .julia_export_writer import JArg, JExport, flat, write_julia_export
from .pinned_support import lower
from .reactant_export_writer import ArgInfo, Export, write_export

rng = np.random.default_rng(11)
X = rng.standard_normal((4, 3)).astype(np.float32)
W = rng.standard_normal((3, 2)).astype(np.float32)  # not square: a missing transpose shows
S = rng.standard_normal((2, 3)).astype(np.float32)


def _reactant(tmp: Path) -> Path:
    # f(x, ps, st) -> (y, st, x, w), as Reactant's exporter returns it
    text = lower(lambda x, w, s: (x @ w, s, x, w), X, W, S)
    write_export(tmp, Export("f", text, [ArgInfo([1], X), ArgInfo([2, 1], W), ArgInfo([3, 1], S)]))
    return tmp


def _julia(tmp: Path) -> Path:
    args = [JArg("input", [], X), JArg("parameter", ["layer_1", "weight"], W),
            JArg("state", ["layer_1", "s"], S)]  # fmt: skip
    e = JExport(
        name="dense",
        mlir=flat(lambda x, w, s: (x @ w, s), args),
        args=args,
        results=[["output"], ["state", "layer_1", "s"]],
        example_outputs={0: X @ W, 1: S},
    )
    return write_julia_export(tmp, e)


def _bundle(tmp: Path) -> Path:
    out = tmp / "dense.bundle"
    juliabridge.julia_export.convert_julia_export(_julia(tmp / "j"), out)
    return out


ROUTES = {"bundle": _bundle, "julia export": _julia, "reactant export": _reactant}


def _weight(model: Any) -> np.ndarray:
    params = model.params
    leaf = params["layer_1"]["weight"] if isinstance(params, dict) else params[0]
    return np.asarray(leaf)


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("backend", ["lax", "xla"])
@pytest.mark.parametrize("layout", ["mlir", "julia"])
def test_backend_and_layout_reach_every_route(
    tmp_path: Path, route: str, backend: str, layout: str
) -> None:
    model = juliabridge.import_lux(ROUTES[route](tmp_path), backend=backend, layout=layout)
    assert model.fn.backend_name == backend
    julia = layout == "julia"
    assert model.layout == layout
    np.testing.assert_array_equal(_weight(model), W.T if julia else W)
    y = np.asarray(model(X.T if julia else X))
    np.testing.assert_allclose(y, (X @ W).T if julia else X @ W, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_trust_reaches_every_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    path = ROUTES[route](tmp_path)
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", "1")
    with pytest.raises(ResourceLimitError, match="JULIABRIDGE_MAX_OPS"):
        juliabridge.import_lux(path, backend="lax")
    model = juliabridge.import_lux(path, backend="lax", trust=True)
    np.testing.assert_allclose(np.asarray(model(X)), X @ W, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("route", ["julia export", "reactant export"])
def test_trust_reaches_the_converters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    from juliabridge.julia_export import convert_julia_export
    from juliabridge.lux.options import LoadOptions
    from juliabridge.reactant_export.convert import convert_export

    convert = convert_julia_export if route == "julia export" else convert_export
    src = ROUTES[route](tmp_path / "src")
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", "1")
    with pytest.raises(ResourceLimitError):
        convert(src, tmp_path / "a.bundle")
    assert not (tmp_path / "a.bundle").exists()
    out = convert(src, tmp_path / "b.bundle", LoadOptions(trust=True))
    # what was written under trust loads under trust, and is refused without it
    with pytest.raises(ResourceLimitError):
        juliabridge.import_lux(out)
    model = juliabridge.import_lux(out, backend="lax", trust=True)
    np.testing.assert_allclose(np.asarray(model(X)), X @ W, rtol=1e-5, atol=1e-6)


def test_verify_checksums_reaches_the_bundle_route(tmp_path: Path) -> None:
    path = _bundle(tmp_path)
    weights = next(p for p in path.iterdir() if p.suffix == ".h5")
    with h5py.File(weights, "r+") as f:
        name = next(n for n in ("params/layer_1/weight",) if n in f)
        f[name][0, 0] = f[name][0, 0] + 1.0
    with pytest.raises(ChecksumError):
        juliabridge.import_lux(path)
    model = juliabridge.import_lux(path, verify_checksums=False)
    assert _weight(model)[0, 0] == W[0, 0] + 1.0


# --- Reactant's overrides through import_lux and `juliabridge convert` ---------------------------

OVERRIDES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, []),
    ({"batch_axis": 0}, ["--batch-axis", "0"]),
    ({"outputs": [0, 2]}, ["--outputs", "0,2"]),
    ({"outputs": [0, 2], "batch_axis": 0}, ["--outputs", "0,2", "--batch-axis", "0"]),
]


def _shape(m: Any) -> tuple[Any, ...]:
    return (
        [(a.role, a.path, a.batch_axis) for a in m.arguments],
        [(r.paths, r.batch_axis, r.echo_of) for r in m.results],
    )


@pytest.mark.parametrize(("kw", "flags"), OVERRIDES, ids=lambda v: str(v))
def test_reactant_overrides_reach_import_lux_and_convert_alike(
    tmp_path: Path, kw: dict[str, Any], flags: list[str]
) -> None:
    src = _reactant(tmp_path / "r")
    model = juliabridge.import_lux(src, **kw)
    out = tmp_path / "c.bundle"
    assert cli_main(["convert", str(src), "--out", str(out), *flags]) == 0
    converted = open_bundle(out).manifest
    assert _shape(converted) == _shape(model.manifest)
    default = juliabridge.import_lux(src).manifest
    if kw:  # each override changes what the default load makes of the directory
        assert _shape(model.manifest) != _shape(default), kw
