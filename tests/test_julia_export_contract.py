"""A Julia export directory's read, complete and convert routes as contracts (issue 52).

- The trees: the model `import_lux` reads from the directory, the model read from the bundle
  `convert_julia_export` writes, and the tree the description states (its leaves and its empty
  containers, written here from the generated paths) are one tree, for any set of empty
  containers (top level, nested, Unicode and case-differing names).
- The entry points: every path form `is_julia_export` accepts (the directory as str or Path,
  with a trailing slash, relative, through `..`, the description file itself) is read by
  `import_lux` as the same model; forms it refuses are not routed there.
- The file names: the module, the weights and the description must be three files under any
  case rule of the file systems the directory may be copied to, so names equal after Unicode
  case folding are refused (ß and SS, K and the Kelvin sign included).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import ManifestError
from juliabridge.julia_export import complete, convert_julia_export, is_julia_export
from tests.julia_export_writer import JArg, JExport, flat, write_julia_export

F = np.float32
X = np.arange(6, dtype=F).reshape(3, 2)
W = np.array([[1.0, -2.0], [0.5, 3.0]], F)
M = np.array([0.25, -1.0], F)


def _fn(x: Any, w: Any, m: Any) -> tuple[Any, ...]:
    return (x @ w + m, m)


def _args() -> list[JArg]:
    return [
        JArg("input", [], X),
        JArg("parameter", ["layer_1", "weight"], W),
        JArg("state", ["layer_1", "mean"], M),
    ]


@pytest.fixture(scope="module")
def mlir() -> str:
    return flat(_fn, _args())


def _export(mlir: str, empty: dict[str, list[list[Any]]] | None = None, **kw: Any) -> JExport:
    return JExport(
        "contract",
        mlir,
        _args(),
        [["output"], ["state", "layer_1", "mean"]],
        example_outputs={0: X @ W + M, 1: M},
        empty=empty,
        **kw,
    )


#: Names an empty container may have beside layer_1: case-differing, Unicode, digits.
EMPTY_NAMES = ["layer_2", "Layer_2", "LAYER_2", "é", "É", "Ωmega", "straße", "x1", "layer_10"]


@st.composite
def empties(draw: st.DrawFn) -> list[list[Any]]:
    """Paths of empty containers: top-level names, or one level below a top-level name or
    below layer_1 (which holds the leaves)."""
    out: list[list[Any]] = []
    for name in draw(st.lists(st.sampled_from(EMPTY_NAMES), unique=True, max_size=4)):
        out.append([name] if draw(st.booleans()) else [name, draw(st.sampled_from(EMPTY_NAMES))])
    if draw(st.booleans()):
        out.append(["layer_1", draw(st.sampled_from(EMPTY_NAMES))])
    return out


def expected(leaves: dict[tuple[str, ...], np.ndarray], empty: list[list[Any]]) -> dict[str, Any]:
    """The tree the description states: its leaves at their paths, `{}` at each empty path."""
    root: dict[str, Any] = {}
    for path in empty:
        node = root
        for s in path:
            node = node.setdefault(s, {})
    for path, v in leaves.items():
        node = root
        for s in path[:-1]:
            node = node.setdefault(s, {})
        node[path[-1]] = v
    return root


def same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {type(got).__name__}, expected a dict"
        assert sorted(got) == sorted(want), f"{where}: keys {sorted(got)}, expected {sorted(want)}"
        for k in want:
            same(got[k], want[k], f"{where}.{k}")
    else:
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=where)
        assert np.asarray(got).dtype == want.dtype, where


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(p_empty=empties(), s_empty=empties())
def test_convert_keeps_the_directory_tree(
    tmp_path_factory: pytest.TempPathFactory,
    mlir: str,
    p_empty: list[list[Any]],
    s_empty: list[list[Any]],
) -> None:
    root = tmp_path_factory.mktemp("e")
    d = write_julia_export(root / "m", _export(mlir, {"params": p_empty, "state": s_empty}))
    want_p = expected({("layer_1", "weight"): W}, p_empty)
    want_s = expected({("layer_1", "mean"): M}, s_empty)
    direct = juliabridge.import_lux(d, backend="lax")
    same(direct.params, want_p, "directory params")
    same(direct.state, want_s, "directory state")
    out = convert_julia_export(d, root / "m.bundle")
    converted = juliabridge.import_lux(out, backend="lax")
    same(converted.params, want_p, "converted params")
    same(converted.state, want_s, "converted state")
    assert converted.manifest.empty == direct.manifest.empty
    y, st_new = converted.apply(converted.params, converted.state, X)
    np.testing.assert_allclose(np.asarray(y), X @ W + M, rtol=1e-6)
    same(st_new, want_s, "converted new state")


def _forms(d: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every spelling of the directory and of its description file."""
    monkeypatch.chdir(d.parent)
    desc = d / "juliabridge-export.json"
    return [
        d,
        str(d),
        str(d) + "/",
        d.name,
        "./" + d.name,
        f"{d.name}/../{d.name}",
        desc,
        str(desc),
        f"{d.name}/juliabridge-export.json",
        f"./{d.name}/./juliabridge-export.json",
        Path(d.name) / "juliabridge-export.json",
    ]


def test_every_form_the_predicate_accepts_imports_the_same_model(
    tmp_path: Path, mlir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = write_julia_export(tmp_path / "m.jlexport", _export(mlir, {"params": [["layer_2"]]}))
    want = juliabridge.import_lux(d, backend="lax")
    forms = _forms(d, monkeypatch)
    for form in forms:
        assert is_julia_export(form), form
        got = juliabridge.import_lux(form, backend="lax")
        same(got.params, want.params, f"params via {form!r}")
        same(got.state, want.state, f"state via {form!r}")
        assert complete(form).description.name == "contract", form


@pytest.mark.parametrize(
    "name", ["model.mlir", "weights.h5", "missing.json", "Juliabridge-Export.json"]
)
def test_a_form_the_predicate_refuses_is_not_read_as_an_export(
    tmp_path: Path, mlir: str, name: str
) -> None:
    d = write_julia_export(tmp_path / "m", _export(mlir))
    assert not is_julia_export(d / name)
    with pytest.raises(juliabridge.BundleError):
        juliabridge.import_lux(d / name, backend="lax")


def test_the_predicate_is_false_for_what_it_cannot_examine(tmp_path: Path) -> None:
    for thing in (None, 3, b"dir", tmp_path / "missing", tmp_path / "missing" / "x.json"):
        assert is_julia_export(thing) is False  # type: ignore[arg-type]
    (tmp_path / "juliabridge-export.json").mkdir()  # a directory of that name is not the file
    assert not is_julia_export(tmp_path / "juliabridge-export.json")


def _case_variants(draw: st.DrawFn, name: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c for c in name)


#: (a name, another spelling equal to it under Unicode case folding).
FOLDED = [
    ("straße.mlir", "STRASSE.mlir"),
    ("\u212a.h5", "k.h5"),  # the Kelvin sign folds to k
    ("ΣΊΣΥΦΟΣ.h5", "σίσυφος.h5"),
]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), which=st.sampled_from(["module", "weights"]))
def test_file_names_equal_but_for_case_are_refused(
    tmp_path_factory: pytest.TempPathFactory, mlir: str, data: st.DataObject, which: str
) -> None:
    base = data.draw(
        st.sampled_from(["model.mlir", "weights.h5", "Wéights.h5", *[a for a, _ in FOLDED]])
    )
    kind = data.draw(st.sampled_from(["flip", "folded", "description"]))
    if kind == "description":
        first, second = (
            "juliabridge-export.json",
            _case_variants(data.draw, "juliabridge-export.json"),
        )
    elif kind == "folded":
        first, second = data.draw(st.sampled_from(FOLDED))
    else:
        first = base
        second = _case_variants(data.draw, base)
        if second == first:
            second = first.swapcase()
    d = write_julia_export(tmp_path_factory.mktemp("c") / "m", _export(mlir))
    desc = json.loads((d / "juliabridge-export.json").read_text())
    if kind == "description":
        desc[which]["file"] = second
        clash = which
    else:
        desc["module"]["file"], desc["weights"]["file"] = (
            (first, second) if which == "module" else (second, first)
        )
        clash = "weights"
    for key in ("module", "weights"):
        src = d / ("model.mlir" if key == "module" else "weights.h5")
        target = d / desc[key]["file"]
        if target.name != src.name and not target.exists():
            os.link(src, target)
    (d / "juliabridge-export.json").write_text(json.dumps(desc))
    with pytest.raises(ManifestError, match=f"{clash}.file.*each file has its own name"):
        complete(d)


def test_distinct_names_are_accepted(tmp_path: Path, mlir: str) -> None:
    e = _export(mlir, module_file="Straße.mlir", weights_file="Weights.H5")
    d = write_julia_export(tmp_path / "m", e)
    model = juliabridge.import_lux(d, backend="lax")
    y, _ = model.apply(model.params, model.state, X)
    np.testing.assert_allclose(np.asarray(y), np.asarray(jnp.asarray(X @ W + M)), rtol=1e-6)
