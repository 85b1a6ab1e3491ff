"""Julia export directories (docs/julia-export.md), written from the spec alone by
tests/julia_export_writer.py (h5py and a module lowered from JAX, no juliabridge writer), are
imported and converted: values against numpy references of what each flat function computes,
on every backend; the completed bundle read by the ordinary bundle reader; and every kind of
disagreement between the description and the module refused with a typed error naming both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.bundle import open_bundle
from juliabridge.cli.commands import main as cli_main
from juliabridge.errors import (
    BundleVersionError,
    CallArgumentError,
    ManifestError,
    SignatureMismatchError,
    UnsafeBundleError,
)
from juliabridge.julia_export import complete, convert_julia_export, is_julia_export
from tests.conftest import require_backend
from tests.julia_export_writer import TAG, JArg, JExport, flat, write_julia_export

F = np.float32
EPS = 1e-5


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --- a Dense + BatchNorm chain, test and train mode ------------------------------------------


def dense_bn_args(seed: int = 0) -> list[JArg]:
    r = _rng(seed)
    return [
        JArg("input", [], r.standard_normal((5, 2)).astype(F)),
        JArg("parameter", ["layer_1", "weight"], r.standard_normal((2, 3)).astype(F)),
        JArg("parameter", ["layer_1", "bias"], r.standard_normal(3).astype(F)),
        JArg("parameter", ["layer_2", "scale"], (1 + 0.1 * r.standard_normal(3)).astype(F)),
        JArg("parameter", ["layer_2", "bias"], r.standard_normal(3).astype(F)),
        JArg("state", ["layer_2", "running_mean"], r.standard_normal(3).astype(F)),
        JArg("state", ["layer_2", "running_var"], (1 + r.random(3)).astype(F)),
    ]


def bn_test(x: Any, w: Any, b: Any, s: Any, c: Any, m: Any, v: Any) -> tuple[Any, ...]:
    y = ((x @ w + b) - m) / jnp.sqrt(v + EPS) * s + c
    return y, m, v


def bn_train(x: Any, w: Any, b: Any, s: Any, c: Any, m: Any, v: Any) -> tuple[Any, ...]:
    h = x @ w + b
    mu = h.mean(0)
    var = ((h - mu) ** 2).mean(0)
    y = (h - mu) / jnp.sqrt(var + EPS) * s + c
    n = h.shape[0]
    return y, 0.9 * m + 0.1 * mu, 0.9 * v + 0.1 * var * n / (n - 1)


def bn_reference(mode: str, vals: list[np.ndarray]) -> list[np.ndarray]:
    """numpy, in float64, of what the flat function computes."""
    x, w, b, s, c, m, v = (np.asarray(a, np.float64) for a in vals)
    h = x @ w + b
    if mode == "test":
        return [((h - m) / np.sqrt(v + EPS) * s + c), m, v]
    mu, var, n = h.mean(0), h.var(0), h.shape[0]
    y = (h - mu) / np.sqrt(var + EPS) * s + c
    return [y, 0.9 * m + 0.1 * mu, 0.9 * v + 0.1 * var * n / (n - 1)]


def with_echoes(fn: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    """The flat function as Reactant's exporter returns it: every argument echoed after it."""
    return lambda *a: (*fn(*a), *a)


def dense_bn(
    mode: str = "test", *, echoes: bool = False, examples: bool = True, **kw: Any
) -> JExport:
    args = dense_bn_args()
    fn = bn_test if mode == "test" else bn_train
    if echoes:
        fn = with_echoes(fn)
    ref = bn_reference(mode, [a.value for a in args])
    return JExport(
        name="dense_bn",
        mlir=flat(fn, args),
        args=args,
        results=[
            ["output"],
            ["state", "layer_2", "running_mean"],
            ["state", "layer_2", "running_var"],
        ],
        mode=mode,
        example_outputs={k: r.astype(F) for k, r in enumerate(ref)} if examples else None,
        empty={"params": [], "state": [["layer_1"]]},
        static_state=[
            {
                "path": ["layer_2", "training"],
                "value": mode == "train",
                "julia_type": f"Val{{{str(mode == 'train').lower()}}}",
            }
        ],
        metadata={"note": "written from the spec"},
        **kw,
    )


def _close(got: Any, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode", ["test", "train"])
@pytest.mark.parametrize("echoes", [False, True], ids=["flat", "echoed"])
def test_dense_bn_on_every_backend(tmp_path: Path, backend: str, mode: str, echoes: bool) -> None:
    e = dense_bn(mode, echoes=echoes)
    d = write_julia_export(tmp_path / "m.jlexport", e)
    assert is_julia_export(d)
    model = juliabridge.import_lux(d, backend=backend)
    m = model.manifest
    assert m.format_version == 3 and m.producer.made_with_julia and m.mode == mode
    assert m.producer.tool == "JuliaBridge.jl" and m.producer.lux == "1.31.4"
    vals = [a.value for a in e.args]
    x = vals[0]
    y, new_state = model.apply(model.params, model.state, x)
    ref = bn_reference(mode, vals)
    _close(y, ref[0], 1e-4, 1e-4)
    _close(new_state["layer_2"]["running_mean"], ref[1], 1e-4, 1e-5)
    _close(new_state["layer_2"]["running_var"], ref[2], 1e-4, 1e-5)
    assert new_state["layer_1"] == {}
    assert model.params["layer_1"]["weight"].shape == (2, 3)
    assert model.metadata["static_state"][0]["path"] == ("layer_2", "training")
    assert model.metadata["metadata"] == {"note": "written from the spec"}
    # Echoes from the structure: test mode returns the state arguments (copied: a block
    # argument returned); train mode computes new values; trailing ones have no paths.
    state_echo = [r.echo_of for r in m.results[1:3]]
    assert state_echo == ([5, 6] if mode == "test" else [None, None])
    trailing = m.results[3:]
    assert len(trailing) == (7 if echoes else 0)
    assert all(r.paths == () and r.echo_of == r.index - 3 for r in trailing)
    assert m.batch is not None and m.batch.size == 5
    assert m.batch.samples_independent is False  # not told: juliabridge does not guess
    assert m.arguments[0].batch_axis == 0 and m.results[0].batch_axis == 0
    if mode == "train":
        with pytest.raises(CallArgumentError, match="batch size 5"):
            model.apply(model.params, model.state, np.zeros((4, 2), F))


def test_samples_independent_as_told(tmp_path: Path) -> None:
    e = dense_bn("test", samples_independent=True)
    model = juliabridge.import_lux(write_julia_export(tmp_path / "m", e), backend="lax")
    assert model.manifest.batch is not None and model.manifest.batch.samples_independent
    x = _rng(3).standard_normal((8, 2)).astype(F)  # another batch size, served in pieces
    vals = [x, *[a.value for a in e.args[1:]]]
    y, _ = model.apply(model.params, model.state, x)
    _close(y, bn_reference("test", vals)[0], 1e-4, 1e-4)


def test_train_mode_with_samples_independent_is_refused(tmp_path: Path) -> None:
    d = write_julia_export(tmp_path / "m", dense_bn("train", samples_independent=True))
    with pytest.raises(ManifestError, match="samples_independent"):
        juliabridge.import_lux(d)


@pytest.mark.parametrize("mode", ["test", "train"])
def test_convert_writes_a_bundle_the_reader_reads(tmp_path: Path, mode: str) -> None:
    e = dense_bn(mode, echoes=True)
    d = write_julia_export(tmp_path / "m.jlexport", e)
    out = convert_julia_export(d, tmp_path / "m.bundle")
    b = open_bundle(out)  # every check, every digest
    assert b.manifest.producer.made_with_julia
    assert b.manifest.module.artifact is not None
    assert {p.name for p in out.iterdir()} >= {"manifest.json", "model.mlir", "weights.h5"}
    assert juliabridge.verify(out).ok
    model = juliabridge.import_lux(out, backend="lax")
    y, _ = model.apply(model.params, model.state, e.args[0].value)
    _close(y, bn_reference(mode, [a.value for a in e.args])[0], 1e-4, 1e-4)
    # The completed manifest in memory and the written one agree on what matters.
    c = complete(d)
    mem, disk = c.bundle.manifest, b.manifest
    assert [(r.paths, r.echo_of, r.batch_axis) for r in mem.results] == [
        (r.paths, r.echo_of, r.batch_axis) for r in disk.results
    ]
    assert [a.digest for a in mem.arguments] == [a.digest for a in disk.arguments]


def test_cli_convert_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write_julia_export(tmp_path / "m.jlexport", dense_bn("train"))
    assert cli_main(["inspect", str(d)]) == 0
    text = capsys.readouterr().out
    assert "juliabridge-export.json" in text and "mode=train" in text
    assert "state.layer_2.running_mean" in text
    out = tmp_path / "m.bundle"
    assert cli_main(["convert", str(d), "--out", str(out)]) == 0
    assert cli_main(["verify", str(out)]) == 0
    assert cli_main(["verify", str(d)]) == 0  # the directory itself, completed in memory


def test_without_examples(tmp_path: Path) -> None:
    d = write_julia_export(tmp_path / "m", dense_bn("test", examples=False))
    out = convert_julia_export(d, tmp_path / "m.bundle")
    assert open_bundle(out).manifest.examples is None


# --- ties, several inputs, static state, empty layers -----------------------------------------


def test_tied_parameters_several_inputs_and_empties(tmp_path: Path, backend: str) -> None:
    r = _rng(1)
    a = r.standard_normal((4, 3)).astype(F)
    b = r.standard_normal((4, 2)).astype(F)
    w = r.standard_normal((3, 3)).astype(F)  # layer_1.weight, also layer_3.weight
    c = r.standard_normal(3).astype(F)
    args = [
        JArg("input", [1], a),
        JArg("input", [2], b),
        JArg("parameter", ["layer_1", "weight"], w, tied_paths=[["layer_3", "weight"]]),
        JArg("parameter", ["layer_4", "bias"], c),
    ]

    def fn(a: Any, b: Any, w: Any, c: Any) -> tuple[Any, ...]:
        h = jnp.tanh(a @ w)
        return (h @ w + c, b.sum(1))

    e = JExport(
        "tied",
        flat(fn, args),
        args,
        [["output", 1], ["output", 2]],
        example_outputs={0: np.tanh(a @ w) @ w + c, 1: b.sum(1)},
        empty={"params": [["layer_2"]], "state": [["layer_1"], ["layer_2"], ["layer_3"]]},
    )
    d = write_julia_export(tmp_path / "t", e)
    model = juliabridge.import_lux(d, backend=backend)
    m = model.manifest
    assert m.arguments[2].tied_paths == (("layer_3", "weight"),)
    assert model.params["layer_2"] == {} and model.state == {
        "layer_1": {},
        "layer_2": {},
        "layer_3": {},
    }
    (y1, y2), _ = model.apply(model.params, model.state, a, b)
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    _close(y1, np.tanh(a64 @ w64) @ w64 + c, 1e-4, 1e-4)
    _close(y2, b.astype(np.float64).sum(1))
    assert [x.batch_axis for x in m.arguments[:2]] == [0, 0]
    out = convert_julia_export(d, tmp_path / "t.bundle")
    assert open_bundle(out).manifest.arguments[2].tied_paths == (("layer_3", "weight"),)


def test_rank0_input_has_no_batch(tmp_path: Path) -> None:
    x = np.float32(2.5).reshape(())
    p = np.arange(3, dtype=F)
    args = [JArg("input", [], np.asarray(x)), JArg("parameter", ["p"], p)]
    e = JExport("s", flat(lambda x, p: (x * p,), args), args, [["output"]])
    model = juliabridge.import_lux(write_julia_export(tmp_path / "s", e), backend="lax")
    assert model.manifest.batch is None and model.manifest.arguments[0].batch_axis is None
    y, _ = model.apply(model.params, model.state, np.asarray(x))
    _close(y, 2.5 * p.astype(np.float64))


# --- every element type --------------------------------------------------------------------

#: Every element type of bundle §3.9 (and whether it is 64-bit).
DTYPES: list[tuple[Any, bool]] = [
    (np.float16, False),
    (ml_dtypes.bfloat16, False),
    (np.float32, False),
    (np.float64, True),
    (np.bool_, False),
    (np.int8, False),
    (np.int16, False),
    (np.int32, False),
    (np.int64, True),
    (np.uint8, False),
    (np.uint16, False),
    (np.uint32, False),
    (np.uint64, True),
    (np.complex64, False),
    (np.complex128, True),
]


def _values(dtype: Any, shape: tuple[int, ...], seed: int) -> np.ndarray:
    r = _rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return r.random(shape) < 0.5
    if dt.kind in "iu":
        return r.integers(0, 50, shape).astype(dt)
    if dt.kind == "c":
        return (r.standard_normal(shape) + 1j * r.standard_normal(shape)).astype(dt)
    return r.standard_normal(shape).astype(dt)


def _combine(x: Any, p: Any, s: Any, xp: Any) -> tuple[Any, Any]:
    """(output, new state) of the flat function, in numpy or jax (`xp`)."""
    if x.dtype == np.bool_:
        return xp.logical_xor(x, p), xp.logical_not(s)
    return x + p, s + p


def test_every_element_type(tmp_path: Path, backend: str, x64: None) -> None:
    """One flat function over an (x, p, s) triple of every element type the bundle allows."""
    args: list[JArg] = []
    for n, (dtype, _) in enumerate(DTYPES):
        x, p, s = (_values(dtype, shape, 3 * n + k) for k, shape in enumerate([(3, 2), (2,), (2,)]))
        name = f"t{n}"
        args += [JArg("input", [n + 1], x), JArg("parameter", [name], p), JArg("state", [name], s)]
    xs, ps, ss = args[0::3], args[1::3], args[2::3]

    def fn(*leaves: Any) -> tuple[Any, ...]:
        pairs = [_combine(*leaves[3 * n : 3 * n + 3], jnp) for n in range(len(DTYPES))]
        return (*(y for y, _ in pairs), *(s for _, s in pairs))

    ordered = [*xs, *ps, *ss]  # the flatten's order: x, then ps, then st
    perm = [args.index(a) for a in ordered]

    def flat_fn(*leaves: Any) -> tuple[Any, ...]:
        back = [None] * len(leaves)
        for k, i in enumerate(perm):
            back[i] = leaves[k]
        return fn(*back)

    refs = [_combine(x.value, p.value, s.value, np) for x, p, s in zip(xs, ps, ss)]
    n = len(DTYPES)
    e = JExport(
        "dtypes",
        flat(flat_fn, ordered),
        ordered,
        [["output", k + 1] for k in range(n)] + [["state", a.path[0]] for a in ss],
        mode="train",
        example_outputs={k: r for k, r in enumerate([y for y, _ in refs] + [s for _, s in refs])},
    )
    d = write_julia_export(tmp_path / "d", e)
    model = juliabridge.import_lux(d, backend=backend)
    m = model.manifest
    assert [a.dtype for a in m.arguments[n : 2 * n]] == [TAG[np.dtype(t)] for t, _ in DTYPES]
    ys, new = model.apply(model.params, model.state, *[a.value for a in xs])
    for k, ((y_ref, s_ref), p, s) in enumerate(zip(refs, ps, ss)):
        assert np.asarray(ys[k]).dtype == y_ref.dtype
        np.testing.assert_array_equal(np.asarray(ys[k]), y_ref)  # one add per element: exact
        np.testing.assert_array_equal(np.asarray(new[s.path[0]]), s_ref)
        np.testing.assert_array_equal(np.asarray(model.params[p.path[0]]), p.value)  # bits kept
    if backend == "lax":  # verify imports again; once is enough for the examples' route
        assert juliabridge.verify(d, backend=backend).ok


# --- refusals ------------------------------------------------------------------------------


def _written(tmp_path: Path, e: JExport | None = None) -> tuple[Path, dict[str, Any]]:
    d = write_julia_export(tmp_path / "m", e or dense_bn("train"))
    return d, json.loads((d / "juliabridge-export.json").read_text())


def _rewrite(d: Path, desc: dict[str, Any]) -> None:
    (d / "juliabridge-export.json").write_text(json.dumps(desc))


def test_wrong_argument_count(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["arguments"].pop()
    _rewrite(d, desc)
    with pytest.raises(
        SignatureMismatchError, match=r"lists 6 arguments but @main of model\.mlir takes 7"
    ):
        complete(d)


def test_julia_shape_not_reversed(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["arguments"][1]["julia_shape"] = [2, 3]  # the MLIR order written as Julia's
    _rewrite(d, desc)
    with pytest.raises(SignatureMismatchError) as err:
        complete(d)
    text = str(err.value)
    assert "params.layer_1.weight" in text and "tensor<3x2xf32>" in text
    assert "tensor<2x3xf32>" in text and "julia_shape is written in MLIR order" in text


def test_wrong_dtype(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["arguments"][0]["dtype"] = "f64"
    _rewrite(d, desc)
    with pytest.raises(
        SignatureMismatchError, match=r"f64.*@main of model.mlir argument 0 is tensor<5x2xf32>"
    ):
        complete(d)


def test_more_results_listed_than_returned(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["results"].append({"index": 3, "path": ["output", 2]})
    _rewrite(d, desc)
    with pytest.raises(
        SignatureMismatchError, match=r"lists 4 results but @main of model\.mlir returns 3"
    ):
        complete(d)


def test_unlisted_computed_result(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["results"].pop()  # running_var is computed: not an echo, so it cannot trail
    _rewrite(d, desc)
    with pytest.raises(SignatureMismatchError, match=r"result 2 \(tensor<3xf32>\) is computed"):
        complete(d)


def test_state_result_not_a_state_argument(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["results"][1]["path"] = ["state", "layer_9", "running_mean"]
    _rewrite(d, desc)
    with pytest.raises(ManifestError, match=r"names no state argument.*state.layer_2.running_mean"):
        complete(d)


def test_state_results_out_of_order(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    r = desc["results"]
    r[1]["path"], r[2]["path"] = r[2]["path"], r[1]["path"]
    _rewrite(d, desc)
    with pytest.raises(ManifestError, match=r"state result 0 is state\.layer_2\.running_var"):
        complete(d)


def test_state_result_of_another_type(tmp_path: Path) -> None:
    args = dense_bn_args()
    fn = lambda *a: (*bn_train(*a)[:2], bn_train(*a)[2][:2])  # noqa: E731
    e = JExport("x", flat(fn, args), args, dense_bn().results, mode="train")
    d = write_julia_export(tmp_path / "m", e)
    with pytest.raises(SignatureMismatchError, match=r"result 2 is tensor<2xf32> but the state"):
        complete(d)


def test_format_version_too_new(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["format_version"] = 2
    _rewrite(d, desc)
    with pytest.raises(BundleVersionError, match="upgrade juliabridge"):
        complete(d)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"format": "juliabridge.julia-export", "format": "x"}', "appears twice"),
        ('{"format": NaN}', "not strict JSON"),
        ("[" * 200 + "]" * 200, "nested 200 levels"),
        ('{"format": "juliabridge.bundle", "format_version": 1}', "juliabridge.julia-export"),
    ],
    ids=["duplicate-key", "nan", "deep", "other-format"],
)
def test_hostile_json(tmp_path: Path, text: str, match: str) -> None:
    d, _ = _written(tmp_path)
    (d / "juliabridge-export.json").write_text(text)
    with pytest.raises(ManifestError, match=match):
        complete(d)


def test_huge_description_is_refused_unread(tmp_path: Path) -> None:
    d, _ = _written(tmp_path)
    with open(d / "juliabridge-export.json", "r+b") as f:
        f.truncate(65 << 20)  # sparse: refused by its size before any byte is read
    with pytest.raises(ManifestError, match="larger than the 64 MiB"):
        complete(d)


@pytest.mark.parametrize("name", ["juliabridge-export.json", "model.mlir", "weights.h5"])
def test_symlinked_file(tmp_path: Path, name: str) -> None:
    d, _ = _written(tmp_path)
    real = tmp_path / f"real-{name}"
    (d / name).rename(real)
    os.symlink(real, d / name)
    with pytest.raises(UnsafeBundleError, match="symlink"):
        complete(d)


def test_file_name_leaving_the_directory(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["weights"]["file"] = "../weights.h5"
    _rewrite(d, desc)
    with pytest.raises(UnsafeBundleError, match="not a plain name"):
        complete(d)


def test_dtype_attribute_must_match(tmp_path: Path) -> None:
    import h5py

    d, _ = _written(tmp_path)
    with h5py.File(d / "weights.h5", "r+") as f:
        f["/params/layer_1/bias"].attrs["dtype"] = "f16"
    with pytest.raises(juliabridge.JuliaBridgeError, match="dtype"):
        complete(d)


# --- a generated family ----------------------------------------------------------------------

FAMILY_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.bool_, np.complex64]


@st.composite
def families(draw: st.DrawFn) -> dict[str, Any]:
    """A random small Lux-like (x, ps, st): leaves with dtypes, shapes and ties."""
    n_in = draw(st.integers(1, 2))
    batch = draw(st.integers(1, 3))
    leaves: list[tuple[str, list[Any], Any, tuple[int, ...], list[list[Any]]]] = []
    for role, group, n in (
        ("parameter", "p", draw(st.integers(0, 3))),
        ("state", "s", draw(st.integers(0, 3))),
    ):
        for j in range(n):
            dtype = draw(st.sampled_from(FAMILY_DTYPES))
            shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
            path: list[Any] = [f"layer_{j + 1}", draw(st.sampled_from(["weight", "bias", 1]))]
            tied = [[f"tie_{group}{j}", "weight"]] if draw(st.booleans()) else []
            leaves.append((role, path, dtype, shape, tied))
    return {
        "n_in": n_in,
        "batch": batch,
        "leaves": leaves,
        "mode": draw(st.sampled_from(["test", "train"])),
        "echoes": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def _step(v: Any, xp: Any) -> Any:
    """What the generated flat function does to a leaf: one exact operation per element."""
    return xp.logical_not(v) if v.dtype == np.bool_ else v + v


@settings(
    max_examples=int(os.environ.get("JB_JULIA_EXPORT_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(fam=families())
def test_generated_family(tmp_path_factory: pytest.TempPathFactory, fam: dict[str, Any]) -> None:
    require_backend("lax")
    seed = fam["seed"]
    args = [
        JArg("input", [n + 1] if fam["n_in"] > 1 else [], _values(F, (fam["batch"], 2), seed + n))
        for n in range(fam["n_in"])
    ]
    for k, (role, path, dtype, shape, tied) in enumerate(fam["leaves"]):
        args.append(
            JArg(
                role,
                path if role == "parameter" else ["st", *path],
                _values(dtype, shape, seed + 10 + k),
                tied,
            )
        )
    # Paths unique within a tree: the second leaf of a layer gets its own layer.
    seen: set[tuple[str, tuple[Any, ...]]] = set()
    for a in args[fam["n_in"] :]:
        while (a.role, tuple(a.path[:-1])) in seen:
            a.path = [*a.path[:-2], a.path[-2] + "x", a.path[-1]]
        seen.add((a.role, tuple(a.path[:-1])))
    params = [i for i, a in enumerate(args) if a.role == "parameter"]
    state = [i for i, a in enumerate(args) if a.role == "state"]
    train = fam["mode"] == "train"

    def fn(*leaves: Any) -> tuple[Any, ...]:
        outs = [leaves[i] * 2 for i in range(fam["n_in"])] + [_step(leaves[i], jnp) for i in params]
        new = [_step(leaves[i], jnp) if train else leaves[i] for i in state]
        return (*outs, *new, *(leaves if fam["echoes"] else ()))

    n_out = fam["n_in"] + len(params)
    results: list[list[Any]] = [["output", k + 1] for k in range(n_out)]
    results += [["state", *args[i].path] for i in state]
    vals = [a.value for a in args]
    want = [v * 2 for v in vals[: fam["n_in"]]] + [_step(vals[i], np) for i in params]
    want_state = [_step(vals[i], np) if train else vals[i] for i in state]
    e = JExport("fam", flat(fn, args), args, results, mode=fam["mode"])
    d = write_julia_export(tmp_path_factory.mktemp("fam") / "f", e)
    model = juliabridge.import_lux(d, backend="lax")
    m = model.manifest
    for i, a in enumerate(args):
        assert m.arguments[i].path == tuple(a.path)
        assert m.arguments[i].tied_paths == tuple(tuple(t) for t in a.tied_paths)
        assert m.arguments[i].shape == np.shape(a.value)
    for j, i in enumerate(state):
        r = m.results[n_out + j]
        assert r.paths == (("state", *args[i].path),)
        assert r.echo_of == (None if train else i)
    assert len(m.results) == n_out + len(state) + (len(args) if fam["echoes"] else 0)
    assert m.batch is not None and m.batch.size == fam["batch"]
    assert m.batch.samples_independent is False
    y, new = model.apply(model.params, model.state, *vals[: fam["n_in"]])
    for got, ref in zip(y, want):
        np.testing.assert_array_equal(np.asarray(got), ref)
    for j, i in enumerate(state):
        np.testing.assert_array_equal(np.asarray(_at(new, args[i].path)), want_state[j])
    for i in params:
        np.testing.assert_array_equal(np.asarray(_at(model.params, args[i].path)), vals[i])


def _at(tree: Any, path: list[Any]) -> Any:
    """The leaf at a Lux path: names are dict keys, integers 1-based tuple positions."""
    for step in path:
        tree = tree[step - 1] if isinstance(step, int) else tree[step]
    return tree


def test_routing_keeps_bundles_and_reactant_exports(tmp_path: Path) -> None:
    lenet = Path(juliabridge.__file__).parent / "examples" / "lenet.bundle"
    assert not is_julia_export(lenet)
    assert not is_julia_export(tmp_path / "missing")
    d, _ = _written(tmp_path)
    assert is_julia_export(d) and is_julia_export(d / "juliabridge-export.json")


def test_other_files_are_never_opened(tmp_path: Path) -> None:
    d, _ = _written(tmp_path)
    os.mkfifo(d / "stray")  # opening it for reading would block
    (d / "manifest.json").write_text("not json")  # not this directory's: ignored
    assert complete(d).bundle.manifest.name == "dense_bn"


def test_a_fifo_as_the_module_is_refused_without_blocking(tmp_path: Path) -> None:
    d, _ = _written(tmp_path)
    (d / "model.mlir").unlink()
    os.mkfifo(d / "model.mlir")
    with pytest.raises(juliabridge.BundleError, match="regular file, found a named pipe"):
        complete(d)


def test_a_rule_of_the_completed_manifest_names_the_description(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["examples"]["inputs"] = [{"argument": 1, "dataset": "/examples/inputs/0"}]
    _rewrite(d, desc)
    with pytest.raises(ManifestError) as err:
        complete(d)
    text = str(err.value)
    assert "juliabridge-export.json: completed to a bundle manifest" in text
    assert "examples.inputs[0].argument" in text and "is a parameter" in text


def test_producer_must_be_juliabridge(tmp_path: Path) -> None:
    d, desc = _written(tmp_path)
    desc["producer"]["tool"] = "SomethingElse.jl"
    _rewrite(d, desc)
    with pytest.raises(ManifestError, match=r"producer\.tool: expected 'JuliaBridge\.jl'"):
        complete(d)


# --- what JuliaBridge.jl writes after the fifth review (issue 48) ------------------------------
# Each directory is what the fixed Julia side writes (julia/src, docs/julia-export.md), next to
# the Julia test of the same case in julia/test/runtests.jl.


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lux's Conv (a true convolution: the kernel flipped) in MLIR layout, NCHW and OIHW."""
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w[:, :, ::-1, ::-1]) + b[None, :, None, None]


def _pool_ref(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def lenet_export() -> tuple[JExport, np.ndarray]:
    """julia/examples/lenet.jl as export_lux writes it, and Julia's output (numpy, f64)."""
    r = _rng(5)
    shapes = {  # MLIR shapes: Julia's reversed (a conv weight (kW, kH, Cin, Cout) is OIHW)
        "layer_1": [(6, 1, 5, 5), (6,)],
        "layer_3": [(16, 6, 5, 5), (16,)],
        "layer_6": [(256, 128), (128,)],
        "layer_7": [(128, 10), (10,)],
    }
    args = [JArg("input", [], r.standard_normal((4, 1, 28, 28)).astype(F))]
    for layer, (ws, bs) in shapes.items():
        scale = 1 / np.sqrt(np.prod(ws[1:]) if len(ws) == 4 else ws[0])
        args.append(JArg("parameter", [layer, "weight"], (scale * r.standard_normal(ws)).astype(F)))
        args.append(JArg("parameter", [layer, "bias"], (0.1 * r.standard_normal(bs)).astype(F)))

    def fn(x: Any, w1: Any, b1: Any, w3: Any, b3: Any, w6: Any, b6: Any, w7: Any, b7: Any) -> Any:
        from jax import lax

        def conv(h: Any, w: Any, b: Any) -> Any:
            dn = ("NCHW", "OIHW", "NCHW")
            y = lax.conv_general_dilated(
                h, w[:, :, ::-1, ::-1], (1, 1), "VALID", dimension_numbers=dn
            )
            return jnp.maximum(y + b[None, :, None, None], 0)

        def pool(h: Any) -> Any:
            return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        h = pool(conv(pool(conv(x, w1, b1)), w3, b3)).reshape(x.shape[0], -1)
        return (jnp.maximum(h @ w6 + b6, 0) @ w7 + b7,)

    v = [np.asarray(a.value, np.float64) for a in args]
    h = _pool_ref(np.maximum(_conv_ref(v[0], v[1], v[2]), 0))
    h = _pool_ref(np.maximum(_conv_ref(h, v[3], v[4]), 0)).reshape(4, -1)
    ref = np.maximum(h @ v[5] + v[6], 0) @ v[7] + v[8]
    e = JExport(
        "lenet",
        flat(fn, args),
        args,
        [["output"]],
        example_outputs={0: ref.astype(F)},
        empty={
            "params": [["layer_2"], ["layer_4"], ["layer_5"]],
            "state": [[f"layer_{i}"] for i in range(1, 8)],
        },
        static_state=[],
        metadata={"lux_model": "Chain(...)", "kind": "lenet", "seed": 0},
    )
    return e, ref


def test_lenet_as_the_shipped_example_exports_it(tmp_path: Path, backend: str) -> None:
    e, ref = lenet_export()
    d = write_julia_export(tmp_path / "lenet.jlexport", e)
    model = juliabridge.import_lux(d, backend=backend)
    assert model.manifest.name == "lenet" and model.metadata["metadata"]["kind"] == "lenet"
    assert model.params["layer_2"] == {} and model.params["layer_5"] == {}
    assert set(model.state) == {f"layer_{i}" for i in range(1, 8)}
    assert model.params["layer_1"]["weight"].shape == (6, 1, 5, 5)
    y, _ = model.apply(model.params, model.state, e.args[0].value)
    _close(y, ref, 1e-4, 1e-4)
    assert juliabridge.verify(d, backend=backend).ok


def _lcg(seed: Any, xp: Any) -> Any:
    """The new seed of a draw (a 64-bit LCG step, wrapping), in numpy or jax (`xp`)."""
    return seed * xp.uint64(6364136223846793005) + xp.uint64(1442695040888963407)


def noisy_export(*, weights_after_reference: bool = False, trailing: bool = False) -> JExport:
    """A layer drawing from its state RNG in place (`rand!` without `Lux.replicate`) and
    returning that state: Julia hands the model copies, so the changed seed is the new state
    (results: output, then state.rng.seed) and the weights hold the seed before the draw. The
    flags write what the Julia side did before the fix: weights written after the reference run
    had changed the seed in place, or the changed argument as an extra computed @main result."""
    x = _rng(6).standard_normal((3, 2)).astype(F)
    seed = np.array([12345, 678910], np.uint64)
    new = _lcg(seed, np)
    noise = np.float32((int(new[0]) >> 40) / 2**24)

    def fn(x: Any, s: Any) -> tuple[Any, ...]:
        n = _lcg(s, jnp)
        y = x + (n[0] >> jnp.uint64(40)).astype(jnp.float32) / jnp.float32(2**24)
        return (y, n, n) if trailing else (y, n)

    args = [JArg("input", [], x), JArg("state", ["rng", "seed"], seed)]
    e = JExport(
        "noisy",
        flat(fn, args),
        args,
        [["output"], ["state", "rng", "seed"]],
        example_outputs={0: x + noise, 1: new},
        empty={"params": [], "state": []},
        static_state=[{"path": ["rng", "algorithm"], "value": "DEFAULT", "julia_type": "String"}],
    )
    if weights_after_reference:
        e.args[1] = JArg("state", ["rng", "seed"], new)
    return e


def test_a_state_rng_drawn_in_place_is_new_state(tmp_path: Path, backend: str, x64: None) -> None:
    e = noisy_export()
    d = write_julia_export(tmp_path / "noisy", e)
    model = juliabridge.import_lux(d, backend=backend)
    x = e.args[0].value
    y, new_state = model.apply(model.params, model.state, x)
    new = _lcg(np.array([12345, 678910], np.uint64), np)
    np.testing.assert_array_equal(np.asarray(new_state["rng"]["seed"]), new)
    _close(y, x.astype(np.float64) + (int(new[0]) >> 40) / 2**24)
    assert [r.paths for r in model.manifest.results] == [
        (("output",),),
        (("state", "rng", "seed"),),
    ]
    assert juliabridge.verify(d, backend=backend).ok
    # Before the fix: the seed written after the reference run had advanced it (the examples
    # no longer follow from the weights), or the changed argument trailed as a computed result.
    late = write_julia_export(tmp_path / "late", noisy_export(weights_after_reference=True))
    assert not juliabridge.verify(late, backend=backend).ok
    extra = write_julia_export(tmp_path / "extra", noisy_export(trailing=True))
    with pytest.raises(SignatureMismatchError, match=r"result 2 \(tensor<2xui64>\) is computed"):
        complete(extra)


@pytest.mark.parametrize("role", ["parameter", "state"])
def test_an_array_valued_ps_or_st_is_refused_saying_so(tmp_path: Path, role: str) -> None:
    """What JuliaBridge.jl wrote before it refused `ps` (or `st`) that is itself an array."""
    x = _rng(7).standard_normal((2, 3)).astype(F)
    w = _rng(8).standard_normal(3).astype(F)
    args = [
        JArg("input", [], x),
        JArg(role, [], w, dataset="/params" if role == "parameter" else "/state"),
    ]
    results = [["output"]] + ([["state"]] if role == "state" else [])
    e = JExport("bare", flat(lambda x, w: (x + w, w)[: len(results)], args), args, results)
    d = write_julia_export(tmp_path / "bare", e)
    root = "ps" if role == "parameter" else "st"
    with pytest.raises(ManifestError, match=rf"arguments\[1\]\.path: .*{root} is itself an array"):
        complete(d)


def test_save_params_records_the_empties_julia_restores(tmp_path: Path) -> None:
    """JuliaBridge.load_params(file) without templates adds `params.empty` and `state.empty` of
    /juliabridge/tree (julia/src/load.jl) to the trees of the file's groups; this is that
    reading, in Python, of a file save_params wrote for a Chain with pooling layers."""
    import h5py

    r = _rng(9)
    params = {
        "layer_1": {"weight": r.standard_normal((2, 1, 3, 3)).astype(F), "bias": np.zeros(2, F)},
        "layer_2": {},
        "layer_3": {},
        "layer_4": {"weight": r.standard_normal((8, 2)).astype(F), "bias": np.zeros(2, F)},
    }
    state: dict[str, Any] = {f"layer_{i}": {} for i in range(1, 5)}
    path = juliabridge.save_params(params, tmp_path / "pooled.h5", state=state)

    def groups(g: Any) -> dict[str, Any]:
        return {k: groups(v) if isinstance(v, h5py.Group) else v[()] for k, v in g.items()}

    with h5py.File(path, "r") as f:
        tree = f["/juliabridge/tree"]
        assert tree.attrs["dtype"] == "ui8" and tree.ndim == 1 and tree.dtype == np.uint8
        record = json.loads(bytes(tree[()]).decode())
        trees = {g: groups(f[g]) if g in f else {} for g in ("params", "state")}
    for g, tree_ in trees.items():
        for p in record[g]["empty"]:  # load.jl: insert_at!(node, p, Node())
            node = tree_
            for step in p[:-1]:
                node = node.setdefault(step, {})
            node.setdefault(p[-1], {})
    assert set(trees["params"]) == set(params) and trees["params"]["layer_2"] == {}
    assert trees["state"] == state
    np.testing.assert_array_equal(trees["params"]["layer_4"]["weight"], params["layer_4"]["weight"])
