"""Directories in the layout of Reactant's export_to_enzymejax: named functions, Lux models,
every lax transform, and hostile variants refused with nothing run or written.

The directories are written by tests/reactant_export_writer.py (from Reactant's template);
values are checked against the numpy references of tests/reference (Lux layers written from
Lux's semantics, fixtures from the StableHLO spec), never only against another backend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.errors import (
    BundleError,
    ManifestError,
    SignatureMismatchError,
    UnsafeBundleError,
)
from juliabridge.examples import luxmodels
from tests.conftest import require_backend
from tests.outside import reactant_fixture as _fixture
from tests.reactant_export_writer import ArgInfo, Export, write_export
from tests.reference import lux_numpy
from tests.reference.fixture_refs import FIXTURES

LENET = Path(juliabridge.__file__).parent / "examples" / "lenet.bundle"

# Lux's field order (Lux src/layers/basic.jl Dense: weight, bias; normalize.jl BatchNorm ps:
# scale, bias; st: running_mean, running_var, training), which Reactant's integer paths follow.
FIELD = {"weight": 1, "bias": 2, "scale": 1, "running_mean": 1, "running_var": 2}


def _step(name: str | int) -> int:
    if isinstance(name, int):
        return name
    return int(name[6:]) if name.startswith("layer_") else FIELD[name]


# --- Lux models in export_to_enzymejax's result layout --------------------------------------


def _export_main(spec: luxmodels.LuxModelSpec) -> Callable[..., tuple[jax.Array, ...]]:
    """@main as Reactant builds it under export_to_enzymejax's gensym prefix: the leaves of
    (y, st_new) (an unchanged st leaf is the argument itself), then every argument not yet
    returned, in order (Reactant.jl src/TracedUtils.jl:699-753)."""
    state_args = [i for i, a in enumerate(spec.arguments) if a.role == "state"]

    def main(*args: jax.Array) -> tuple[jax.Array, ...]:
        results = spec.main(*args)
        by_path: dict[tuple[Any, ...], Any] = {}
        for k, paths in enumerate(spec.result_paths):
            for p in paths:
                by_path[tuple(p)] = ("r", k)
        for p, j in spec.aliases:
            by_path[tuple(p)] = ("a", j)
        tree = [src for p, src in by_path.items() if p[0] == "output"]
        tree += [by_path[("state", *spec.arguments[i].path)] for i in state_args]
        returned = {j for kind, j in tree if kind == "a"}
        out = [results[j] if kind == "r" else args[j] for kind, j in tree]
        out += [args[i] for i in range(len(args)) if i not in returned]
        return tuple(out)

    return main


def write_lux_export(
    tmp: Path, spec: luxmodels.LuxModelSpec, *, layer: bool = True, name: str = "run_lux_model"
) -> Path:
    """The manual's export_to_enzymejax(model, x, ps, st) (layer) or f(x, ps, st)."""
    main = _export_main(spec)
    values = [a.value for a in spec.arguments]
    avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in values]
    text = jax.jit(main, keep_unused=True).lower(*avals).as_text()
    first = 2 if layer else 1
    slot = {"input": first, "parameter": first + 1, "state": first + 2}
    args = [ArgInfo([slot[a.role], *(_step(s) for s in a.path)], a.value) for a in spec.arguments]
    write_export(tmp, Export(name, text, args))
    return tmp


def _named(spec: luxmodels.LuxModelSpec, role: str) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for a in spec.arguments:
        if a.role == role:
            node = tree
            for s in a.path[:-1]:
                node = node.setdefault(s, {})
            node[a.path[-1]] = a.value
    return tree


@pytest.mark.parametrize("mode", ["test", "train"])
@pytest.mark.parametrize("backend", ["lax", "xla", "enzyme"])
def test_batchnorm_layer_export_matches_numpy(tmp_path: Path, mode: str, backend: str) -> None:
    require_backend(backend)
    spec = luxmodels.batchnorm_model(mode=mode, batch=6)
    model = juliabridge.import_lux(write_lux_export(tmp_path, spec), backend=backend)
    x = spec.arguments[0].value
    want_y, want_st = lux_numpy.batchnorm_chain(
        x, _named(spec, "parameter"), _named(spec, "state"), training=mode == "train"
    )
    y, st = model.apply(model.params, model.state, x)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
    # Integer paths (Reactant's): st[2] is layer_2 = (running_mean, running_var).
    assert st[0] is None  # st.layer_1 is an empty NamedTuple: no argument
    for j, key in enumerate(("running_mean", "running_var")):
        np.testing.assert_allclose(
            np.asarray(st[1][j]), want_st["layer_2"][key], rtol=1e-5, atol=1e-6
        )
    assert model.manifest.mode == mode
    assert model.fn.arg_labels[0] == "x"
    assert model.metadata["metadata"]["reactant_export"]["arguments"][0]["path"] == "arg.2"


def test_function_form_and_py_path(tmp_path: Path) -> None:
    spec = luxmodels.batchnorm_model(mode="train", batch=4)
    d = write_lux_export(tmp_path, spec, layer=False, name="f!")
    model = juliabridge.import_lux(d / "f_.py", backend="lax")
    x = spec.arguments[0].value
    want_y, _ = lux_numpy.batchnorm_chain(
        x, _named(spec, "parameter"), _named(spec, "state"), training=True
    )
    np.testing.assert_allclose(np.asarray(model(x)), want_y, rtol=1e-5, atol=1e-5)


def test_lax_transforms_and_other_batch_size(tmp_path: Path) -> None:
    spec = luxmodels.batchnorm_model(mode="test", batch=6)
    model = juliabridge.import_lux(write_lux_export(tmp_path, spec), backend="lax", batch_axis=0)
    ps_named, st_named = _named(spec, "parameter"), _named(spec, "state")
    x = spec.arguments[0].value
    scale = model.params[1][0]

    def loss(s: Any, x: Any) -> Any:
        ps = (model.params[0], (s, model.params[1][1]))
        return jnp.sum(model.apply(ps, model.state, x)[0] ** 2)

    def ref_loss(s: np.ndarray) -> float:
        p = {**ps_named, "layer_2": {**ps_named["layer_2"], "scale": s}}
        y, _ = lux_numpy.batchnorm_chain(x, p, st_named, training=False)
        return float(np.sum(y.astype(np.float64) ** 2))

    g = np.asarray(jax.grad(loss)(scale, x))
    eps = 1e-3
    fd = np.array(
        [
            (ref_loss(scale + eps * e) - ref_loss(scale - eps * e)) / (2 * eps)
            for e in np.eye(len(scale), dtype=np.float32)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=2e-2, atol=2e-2)
    t = np.ones_like(x)
    _, jv = jax.jvp(lambda x: model.apply(model.params, model.state, x)[0], (x,), (t,))
    y1, _ = lux_numpy.batchnorm_chain(x + eps * t, ps_named, st_named, training=False)
    y0, _ = lux_numpy.batchnorm_chain(x - eps * t, ps_named, st_named, training=False)
    np.testing.assert_allclose(np.asarray(jv), (y1 - y0) / (2 * eps), rtol=2e-2, atol=2e-2)
    xs = np.stack([x, 2 * x])
    ys = jax.vmap(lambda x: model.apply(model.params, model.state, x)[0])(xs)
    for k in range(2):
        want, _ = lux_numpy.batchnorm_chain(xs[k], ps_named, st_named, training=False)
        np.testing.assert_allclose(np.asarray(ys[k]), want, rtol=1e-5, atol=1e-5)
    x3 = x[:3]
    want3, _ = lux_numpy.batchnorm_chain(x3, ps_named, st_named, training=False)
    np.testing.assert_allclose(np.asarray(model(x3)), want3, rtol=1e-5, atol=1e-5)


def test_lenet_bundle_module_as_plain_function(tmp_path: Path) -> None:
    # lenet.bundle's @main takes x then the ps leaves and returns y alone (no echoes): a
    # field-less f(x, ps) traced with Reactant's own prefix, so arg.1 and arg.2.*.
    bundle = juliabridge.import_lux(LENET, backend="xla")
    m = bundle.manifest
    x = bundle.bundle.read_examples()[0][0]  # type: ignore[index]
    args = [ArgInfo([1], x)]
    for a in m.arguments[1:]:
        node: Any = bundle.params
        for s in a.path:
            node = node[s]
        args.append(ArgInfo([2, *(_step(s) for s in a.path)], np.asarray(node)))
    write_export(tmp_path, Export("lenet", (LENET / "model.mlir").read_text(), args))
    model = juliabridge.import_lux(tmp_path, backend="lax")
    ps_named = {
        f"layer_{layer}": {"weight": np.asarray(v[0]), "bias": np.asarray(v[1])}
        for layer, v in enumerate(model.params, start=1)
        if v is not None
    }
    want, _ = lux_numpy.lenet(x, ps_named, {})
    np.testing.assert_allclose(np.asarray(model(x)), want, rtol=1e-4, atol=1e-4)
    fn = juliabridge.load_reactant_export(tmp_path, backend="lax")
    assert fn.arg_labels[:2] == ["arg.1", "arg.2.1.1"]
    np.testing.assert_allclose(np.asarray(fn(*fn.example_inputs())[0]), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "name", ["dense_matvec_slices.mlir", "nnlib_grouped_conv2d.mlir", "cumsum_reduce_window.mlir"]
)
@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_real_reactant_modules_as_exports(tmp_path: Path, name: str, backend: str) -> None:
    text = _fixture(name).read_text()
    ref = FIXTURES[name]
    inputs = ref.make_inputs(np.random.default_rng(3))
    args = [ArgInfo([i + 1], v) for i, v in enumerate(inputs)]
    write_export(tmp_path, Export("f", text, args))
    fn = juliabridge.load_reactant_export(tmp_path, backend=backend)
    got = fn(*fn.example_inputs())
    want = ref.reference(*inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=ref.rtol, atol=ref.atol)
    assert [a["path"] for a in fn.metadata["arguments"]] == [
        f"arg.{i + 1}" for i in range(len(args))
    ]


def test_no_npz_export(tmp_path: Path) -> None:
    text = _fixture("dense_matvec_slices.mlir").read_text()
    inputs = FIXTURES["dense_matvec_slices.mlir"].make_inputs(np.random.default_rng(0))
    e = Export("f", text, [ArgInfo([i + 1], v) for i, v in enumerate(inputs)], False)
    write_export(tmp_path, e)
    fn = juliabridge.load_reactant_export(tmp_path, backend="lax")
    with pytest.raises(BundleError, match="export_data_as_npz=false"):
        fn.example_inputs()
    want = FIXTURES["dense_matvec_slices.mlir"].reference(*inputs)
    np.testing.assert_allclose(np.asarray(fn(*inputs)[0]), want[0], rtol=1e-5, atol=1e-6)


def test_sharding_recorded_and_placed(tmp_path: Path) -> None:
    text = _fixture("dense_matvec_slices.mlir").read_text()
    inputs = FIXTURES["dense_matvec_slices.mlir"].make_inputs(np.random.default_rng(0))
    # Julia order: mesh (x=1,), the first argument's Julia dims (2, 6) split as (nothing, :x).
    args = [
        ArgInfo([1], inputs[0], sharding=("m", (1,), ("x",), (None, "x"))),
        ArgInfo([2], inputs[1]),
    ]
    write_export(tmp_path, Export("f", text, args))
    fn = juliabridge.load_reactant_export(tmp_path, backend="lax")
    meta = fn.metadata
    assert meta["meshes"] == {"mesh0": {"axis_sizes": [1], "axis_names": ["x"]}}
    assert meta["shardings"] == {
        "arg.1": {"type": "NamedSharding", "mesh": "mesh0", "spec": ["x", None]}
    }
    placed = fn.place_inputs(devices=jax.devices()[:1])
    assert placed[0].sharding.spec == jax.sharding.PartitionSpec("x", None)
    np.testing.assert_array_equal(np.asarray(placed[0]), inputs[0])


# --- hostile variants: typed errors, nothing executed or written ---------------------------


def _plain_export(tmp: Path) -> Path:
    text = _fixture("dense_matvec_slices.mlir").read_text()
    inputs = FIXTURES["dense_matvec_slices.mlir"].make_inputs(np.random.default_rng(0))
    return write_export(tmp, Export("f", text, [ArgInfo([i + 1], v) for i, v in enumerate(inputs)]))


def _files(d: Path) -> set[str]:
    return {p.name for p in d.rglob("*")}


def test_module_level_code_is_not_run(tmp_path: Path) -> None:
    py = _plain_export(tmp_path)
    marker = tmp_path / "pwned"
    lines = py.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("_script_dir"))
    lines.insert(at + 1, f"open({str(marker)!r}, 'w').write('x')")
    py.write_text("\n".join(lines) + "\n")
    before = _files(tmp_path)
    with pytest.raises(ManifestError, match=rf"f\.py:{at + 2}: unexpected statement"):
        juliabridge.load_reactant_export(tmp_path)
    assert not marker.exists() and _files(tmp_path) == before


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("import os", "import os, subprocess", "unexpected statement"),
        ("return hlo_call(", "return print(", "unexpected statement"),
        ("_hlo_code = f.read()", "_hlo_code = f.read() + __import__('os').getcwd()", "unexpected"),
        ("def load_inputs():", "def load_inputs(:", "does not parse"),
    ],
)
def test_non_template_py_refused(tmp_path: Path, old: str, new: str, what: str) -> None:
    py = _plain_export(tmp_path)
    py.write_text(py.read_text().replace(old, new, 1))
    with pytest.raises(ManifestError, match=what):
        juliabridge.load_reactant_export(tmp_path)


def test_file_outside_directory_refused(tmp_path: Path) -> None:
    py = _plain_export(tmp_path)
    py.write_text(py.read_text().replace('"f_0.mlir"', '"../f_0.mlir"'))
    with pytest.raises(
        UnsafeBundleError,
        match=r"the \.py names the module '\.\./f_0\.mlir', which is not a plain file name inside",
    ):
        juliabridge.load_reactant_export(tmp_path)


def test_pickled_npz_refused(tmp_path: Path) -> None:
    py = _plain_export(tmp_path)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> Any:
            return (open, (str(marker), "w"))

    obj = np.empty(2, dtype=object)
    obj[:] = [Evil(), Evil()]
    np.savez(tmp_path / "f_0_inputs.npz", arr_1=obj, arr_2=obj)
    assert not marker.exists()
    fn = juliabridge.load_reactant_export(py)
    with pytest.raises(UnsafeBundleError, match="pickle"):
        fn.example_inputs()
    assert not marker.exists()


def test_shapes_disagreeing_with_main(tmp_path: Path) -> None:
    py = _plain_export(tmp_path)
    py.write_text(py.read_text().replace("(6, 2)", "(6, 3)"))
    with pytest.raises(SignatureMismatchError, match=r"f\.py:\d+: arg1 \(arg\.1\)"):
        juliabridge.load_reactant_export(tmp_path)


def test_npz_disagreeing_with_main(tmp_path: Path) -> None:
    _plain_export(tmp_path)
    np.savez(
        tmp_path / "f_0_inputs.npz",
        arr_1=np.zeros((6, 3), np.float32),
        arr_2=np.zeros((2, 4), np.float32),
    )
    with pytest.raises(BundleError, match="does not belong to this export"):
        juliabridge.load_reactant_export(tmp_path).example_inputs()


def test_10_gb_npz_header(tmp_path: Path) -> None:
    import tracemalloc
    import zipfile

    from juliabridge.reactant_export.npz import read_inputs
    from juliabridge.stablehlo import TensorSpec

    header = {"descr": "<f4", "fortran_order": False, "shape": (50000, 50000)}
    buf = bytearray(b"\x93NUMPY\x01\x00")
    h = repr(header).encode()
    h += b" " * (63 - (len(buf) + 2 + len(h)) % 64) + b"\n"
    buf += len(h).to_bytes(2, "little") + h + b"\0" * 64
    with zipfile.ZipFile(tmp_path / "x.npz", "w") as z:
        z.writestr("arr_1.npy", bytes(buf))
    tracemalloc.start()
    try:
        with pytest.raises(BundleError, match="declares 10000000000 bytes"):
            read_inputs(tmp_path / "x.npz", ["arr_1"], [TensorSpec((50000, 50000), "f32")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20  # nothing near 10 GB was allocated


def test_results_not_determined_names_the_override(tmp_path: Path) -> None:
    spec = luxmodels.batchnorm_model(mode="train", batch=4)
    # Reactant's own prefix (not the exporter's): echoes dropped, so the two new stats and
    # the output cannot be told apart by the module alone.
    values = [a.value for a in spec.arguments]
    text = jax.jit(spec.main, keep_unused=True).lower(*values).as_text()
    args = [
        ArgInfo(
            [{"input": 2, "parameter": 3, "state": 4}[a.role], *(_step(s) for s in a.path)], a.value
        )
        for a in spec.arguments
    ]
    write_export(tmp_path, Export("m", text, args))
    with pytest.raises(ManifestError, match="state_results="):
        juliabridge.import_lux(tmp_path, backend="lax")
    state = [i for i, a in enumerate(spec.arguments) if a.role == "state"]
    model = juliabridge.import_lux(
        tmp_path, backend="lax", outputs=[0], state_results={1: state[0], 2: state[1]}
    )
    want_y, want_st = lux_numpy.batchnorm_chain(
        values[0], _named(spec, "parameter"), _named(spec, "state"), training=True
    )
    y, st = model.apply(model.params, model.state, values[0])
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(st[1][0]), want_st["layer_2"]["running_mean"], rtol=1e-5, atol=1e-6
    )


# --- convert, verify and inspect ------------------------------------------------------------


def test_convert_then_bundle_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from juliabridge.cli.commands import main
    from juliabridge.support.exitcodes import OK

    spec = luxmodels.batchnorm_model(mode="train", batch=4)
    d = write_lux_export(tmp_path / "exp", spec)
    out = tmp_path / "m.bundle"
    assert main(["convert", str(d), "--out", str(out)]) == OK
    model = juliabridge.import_lux(out, backend="lax")
    assert model.manifest.producer.tool == "Reactant.Serialization.export_to_enzymejax"
    assert model.manifest.examples is None
    x = spec.arguments[0].value
    want_y, want_st = lux_numpy.batchnorm_chain(
        x, _named(spec, "parameter"), _named(spec, "state"), training=True
    )
    y, st = model.apply(model.params, model.state, x)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(st[1][1]), want_st["layer_2"]["running_var"], rtol=1e-5, atol=1e-6
    )
    with pytest.raises(BundleError, match="no reference outputs"):
        juliabridge.verify(out)
    capsys.readouterr()
    # No reference outputs is its own outcome (exit 24), not a malformed bundle (10).
    assert main(["verify", str(out)]) == 24
    err = capsys.readouterr().err
    assert "records none" in err and "no reference outputs to verify against" in err
    # The bundle names leaves by Julia position; the export directory by Python index, beside
    # Reactant's own path, and says it has no digests (not "--no-verify").
    for target, leaf, fmt in (
        (out, "state[2][1]", "format 3 "),
        (d, "state[1][0]", "format n/a (a Reactant export directory, not a bundle)"),
    ):
        assert main(["inspect", str(target)]) == OK
        text = capsys.readouterr().out
        assert "export_to_enzymejax" in text and leaf in text
        head = [ln for ln in text.splitlines() if " mode=" in ln]
        assert fmt in head[0], text  # the directory is not called a bundle
    assert "arg.4.2.1" in text and "records no digests" in text and "--no-verify" not in text


def test_deeply_nested_expression_refused(tmp_path: Path) -> None:
    py = _plain_export(tmp_path)
    text = py.read_text().replace(
        "import os\n", "import os\nx = " + "+".join(["1"] * 200000) + "\n"
    )
    py.write_text(text)
    with pytest.raises(ManifestError):
        juliabridge.load_reactant_export(tmp_path)


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_real_module_with_aliasing_as_lux_function_form(tmp_path: Path, backend: str) -> None:
    # Reactant's @main returns (y, arg0, arg1) with tf.aliasing_output on both arguments: as
    # f(x, ps), x=arg.1 and ps=arg.2; y is the output, the rest echoes. Called twice: nothing
    # the module aliases is consumed.
    name = "dense_matvec_slices.mlir"
    ref = FIXTURES[name]
    inputs = ref.make_inputs(np.random.default_rng(5))
    args = [ArgInfo([i + 1], v) for i, v in enumerate(inputs)]
    write_export(tmp_path, Export("f", _fixture(name).read_text(), args))
    model = juliabridge.import_lux(tmp_path, backend=backend)
    want = ref.reference(*inputs)[0]
    x = jnp.asarray(inputs[0])
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(model(x)), want, rtol=ref.rtol, atol=ref.atol)


def test_two_axis_mesh_sharding(tmp_path: Path) -> None:
    text = _fixture("dense_matvec_slices.mlir").read_text()
    inputs = FIXTURES["dense_matvec_slices.mlir"].make_inputs(np.random.default_rng(0))
    # Julia: mesh axes (:a, :b) of sizes (1, 1); arg 1's Julia dims (2, 6) as (:a, :b), arg 2
    # NoSharding on the same mesh: the .py reverses sizes, names and specs (EnzymeJAX.jl:282-310).
    args = [
        ArgInfo([1], inputs[0], sharding=("m", (1, 1), ("a", "b"), ("a", "b"))),
        ArgInfo([2], inputs[1], sharding=("m", (1, 1), ("a", "b"), ()), kind="NoSharding"),
    ]
    py = write_export(tmp_path, Export("g", text, args))
    assert "jax.make_mesh((1, 1), ('b', 'a'))" in py.read_text()
    fn = juliabridge.load_reactant_export(tmp_path, backend="lax")
    assert fn.metadata["meshes"]["mesh0"] == {"axis_sizes": [1, 1], "axis_names": ["b", "a"]}
    assert fn.metadata["shardings"]["arg.1"]["spec"] == ["b", "a"]
    assert fn.metadata["shardings"]["arg.2"] == {"type": "NoSharding"}
    placed = fn.place_inputs(devices=jax.devices()[:1])
    assert placed[0].sharding.spec == jax.sharding.PartitionSpec("b", "a")
    want = FIXTURES["dense_matvec_slices.mlir"].reference(*inputs)[0]
    np.testing.assert_allclose(np.asarray(fn(*placed)[0]), want, rtol=1e-5, atol=1e-6)


# --- bounds found by review: each hostile form a typed error ------------------------------


def test_token_bomb_refused_before_parsing(tmp_path: Path) -> None:
    # A 1M-element list literal: ast.parse of it peaks near 1 GB; the token budget stops it.
    import tracemalloc

    py = _plain_export(tmp_path)
    text = py.read_text().replace("import os\n", "import os\nx = [" + "1," * 1_000_000 + "]\n")
    py.write_text(text)
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError, match=r"f\.py:\d+: holds more than \d+ tokens"):
            juliabridge.load_reactant_export(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 << 20


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("(6, 2)", "(" + "9" * 5000 + ", 2)"),  # int() of it: Python's int-string limit
        ("Path: arg.1", "Path: arg." + "1" * 5000),
        ("(6, 2)", "(\u0666, 2)"),  # an Arabic-Indic digit: not the template's ASCII
    ],
)
def test_overlong_or_foreign_numbers_refused(tmp_path: Path, old: str, new: str) -> None:
    py = _plain_export(tmp_path)
    py.write_text(py.read_text().replace(old, new, 1))
    with pytest.raises(ManifestError):
        juliabridge.load_reactant_export(tmp_path)


def test_corrupt_compressed_member_is_a_bundle_error(tmp_path: Path) -> None:
    import zipfile

    from juliabridge.reactant_export.npz import read_inputs
    from juliabridge.stablehlo import TensorSpec

    arr = np.arange(4096, dtype=np.float32)
    path = tmp_path / "x.npz"
    np.savez_compressed(path, arr_1=arr)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("arr_1.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 40, start + 80):  # inside the deflate stream
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"arr_1\.npy"):
        read_inputs(path, ["arr_1"], [TensorSpec((4096,), "f32")])


@pytest.mark.parametrize(
    ("sharding", "match"),
    [
        (("m", (0,), ("x",), (None, "x")), "axis size 0"),
        (("m", (1,), ("x",), (None, "y")), "at most once"),
        (("m", (1, 1), ("x", "x"), (None, "x")), "unique axis names"),
    ],
)
def test_meshes_jax_cannot_build_refused(tmp_path: Path, sharding: Any, match: str) -> None:
    text = _fixture("dense_matvec_slices.mlir").read_text()
    inputs = FIXTURES["dense_matvec_slices.mlir"].make_inputs(np.random.default_rng(0))
    args = [ArgInfo([1], inputs[0], sharding=sharding), ArgInfo([2], inputs[1])]
    write_export(tmp_path, Export("f", text, args))
    with pytest.raises(ManifestError, match=match):
        juliabridge.load_reactant_export(tmp_path, backend="lax")


def test_batch_axis_refused_for_train_mode(tmp_path: Path) -> None:
    spec = luxmodels.batchnorm_model(mode="train", batch=6)
    d = write_lux_export(tmp_path, spec)
    with pytest.raises(ManifestError, match="train mode"):
        juliabridge.import_lux(d, batch_axis=0)
    assert juliabridge.import_lux(d).manifest.mode == "train"  # without it, it loads


def test_flax_and_equinox_wrap_an_export_and_load_into_reads_it(tmp_path: Path) -> None:
    """Before: the Flax wrapper refused positional trees, and load_into(model, export_dir)
    asked for a weights.h5 the directory never had."""
    pytest.importorskip("flax.nnx", reason="flax (the [flax] extra) is not installed")
    pytest.importorskip("equinox", reason="equinox (the [equinox] extra) is not installed")
    import equinox as eqx
    import optax
    from flax import nnx

    import juliabridge.equinox
    import juliabridge.flax

    spec = luxmodels.batchnorm_model(mode="train", batch=6)
    d = write_lux_export(tmp_path / "exp", spec)
    model = juliabridge.import_lux(d)
    x = spec.arguments[0].value
    want_y, want_st = lux_numpy.batchnorm_chain(
        x, _named(spec, "parameter"), _named(spec, "state"), training=True
    )
    fmod = juliabridge.flax.LuxModule(d)
    assert fmod.state[0] is None  # st.layer_1: an empty NamedTuple, as in model.state
    np.testing.assert_allclose(np.asarray(fmod(x)), want_y, rtol=1e-5, atol=1e-5)
    # The call wrote Lux's new state (train mode: running statistics) back.
    np.testing.assert_allclose(
        np.asarray(fmod.state[1][0].get_value()),
        want_st["layer_2"]["running_mean"],
        rtol=1e-5,
        atol=1e-6,
    )
    weight = np.asarray(model.params[0][0])
    opt = nnx.Optimizer(fmod, optax.sgd(0.5), wrt=nnx.Param)
    _, grads = nnx.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(fmod)
    opt.update(fmod, grads)
    assert not np.allclose(np.asarray(fmod.params[0][0].get_value()), weight)
    # load_into reads the directory's npz: the exported values come back, state included.
    assert juliabridge.load_into(fmod, d) is fmod
    np.testing.assert_array_equal(np.asarray(fmod.params[0][0].get_value()), weight)
    np.testing.assert_array_equal(
        np.asarray(fmod.state[1][0].get_value()), np.asarray(model.state[1][0])
    )
    params, state = juliabridge.load_params(d)
    assert jax.tree.structure(params) == jax.tree.structure(model.params)
    assert jax.tree.structure(state) == jax.tree.structure(model.state)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(model.params), strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))
    emod = juliabridge.equinox.LuxModule(d)
    y, emod2 = emod.apply(x)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
    changed = eqx.tree_at(lambda m: m.params[0][0], emod2, emod2.params[0][0] + 1)
    restored = juliabridge.load_into(changed, d)
    np.testing.assert_array_equal(np.asarray(restored.params[0][0]), weight)
    moved = juliabridge.load_into(model, d)  # the LuxModel itself
    np.testing.assert_array_equal(np.asarray(moved.params[1][1]), np.asarray(model.params[1][1]))
