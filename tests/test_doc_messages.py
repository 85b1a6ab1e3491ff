"""Every error message a doc quotes is one the code produces: each scenario below runs the
situation the doc describes and the quoted line must match the message it raised.

In a quoted line, ``...`` stands for any text (shortened temporary paths, digests); everything
else must be exact. A quoted message that no scenario produces fails the test, so a changed
message cannot leave a stale quote behind.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.examples import lenet_bundle

from .bundle_factory import dense_bn_arrays, edit_manifest, make_dense_bn

REPO = Path(__file__).resolve().parent.parent
DOCS = ("docs/architecture.md", "README.md", "docs/reliability.md", "docs/multihost.md")
QUOTED = re.compile(r"^((?:[A-Z]\w*(?:Error|Unavailable))|juliabridge \w+: error): (.+)$", re.M)
F64_MODULE = """module @m {
  func.func public @main(%arg0: tensor<2xf64>) -> tensor<2xf64> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2xf64>
    return %0 : tensor<2xf64>
  }
}
"""


def _quoted() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        text = (REPO / doc).read_text(encoding="utf-8")
        for block in re.findall(r"```text\n(.*?)```", text, re.S):
            out += [(doc, m.group(0)) for m in QUOTED.finditer(block)]
    return out


def _raised(fn: Callable[[], object]) -> str:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError("the scenario raised nothing")


def _copy(tmp: Path, name: str) -> Path:
    return Path(shutil.copytree(lenet_bundle(), tmp / name))


def _scenarios(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    out: dict[str, str] = {}
    lenet = juliabridge.import_lux(lenet_bundle())
    x = np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32)

    # Loading a bundle
    out["no such bundle"] = _raised(lambda: juliabridge.import_lux(tmp / "nope.bundle"))
    out["a .mlir file"] = _raised(lambda: juliabridge.import_lux(lenet_bundle() / "model.mlir"))
    changed = _copy(tmp, "lenet_copy.bundle")
    with h5py.File(changed / "weights.h5", "r") as f:
        offset = f["/params/layer_1/weight"].id.get_offset()
    with open(changed / "weights.h5", "r+b") as f:
        f.seek(offset)
        f.write(b"\x00\x00\x80\x7f")  # the first weight becomes +inf
    out["checksum"] = _raised(lambda: juliabridge.import_lux(changed))
    out["typo"] = _raised(lambda: juliabridge.import_lux(tmp / "lenet_copy.bundel"))
    models = tmp / "models"
    models.mkdir()
    _copy(models, "a.bundle")
    _copy(models, "b.bundle")
    out["folder of models"] = _raised(lambda: juliabridge.import_lux(models))
    newer = _copy(tmp, "newer.bundle")
    edit_manifest(newer, lambda m: m.update(format_version=4))
    out["newer format"] = _raised(lambda: juliabridge.import_lux(newer))
    sym = _copy(tmp, "sym.bundle")
    (sym / "model.mlir").rename(sym / "real.mlir")
    (sym / "model.mlir").symlink_to("real.mlir")
    out["symlink"] = _raised(lambda: juliabridge.import_lux(sym))
    ext = make_dense_bn(tmp / "ext.bundle")
    with h5py.File(ext / "weights.h5", "a") as f:
        f["evil"] = h5py.ExternalLink("/etc/passwd", "/x")
    out["external link"] = _raised(lambda: juliabridge.import_lux(ext))
    f32 = F64_MODULE.replace("f64", "f32")
    add = "%0 = stablehlo.add %arg0, %arg0 : tensor<2xf32>"
    out["foreign op"] = _raised(
        lambda: juliabridge.load_mlir(
            f32.replace(add, '%0 = "enzymexla.gelu"(%arg0) : (tensor<2xf32>) -> tensor<2xf32>')
        )
    )
    out["custom call"] = _raised(
        lambda: juliabridge.load_mlir(
            f32.replace(
                add,
                "%0 = stablehlo.custom_call @enzymexla_lapack_sgetrf_(%arg0) : "
                "(tensor<2xf32>) -> tensor<2xf32>",
            )
        )
    )
    out["dynamic"] = _raised(
        lambda: juliabridge.load_mlir(F64_MODULE.replace("tensor<2xf64>", "tensor<?xf32>"))
    )
    out["parse"] = _raised(lambda: juliabridge.load_mlir("module { func.func @main( }"))
    out["x64"] = _raised(lambda: juliabridge.load_mlir(F64_MODULE)(np.ones(2)))
    out["backend typo"] = _raised(lambda: juliabridge.import_lux(lenet_bundle(), backend="gpu"))
    out["layout typo"] = _raised(
        lambda: juliabridge.import_lux(lenet_bundle(), layout="julia_order")
    )

    # Calling the model
    out["julia order"] = _raised(lambda: lenet(np.ascontiguousarray(x.T)))
    out["float64"] = _raised(lambda: lenet(x.astype(np.float64)))
    weights = [
        lenet.params[k][w]
        for k in ("layer_1", "layer_3", "layer_6", "layer_7")
        for w in ("weight", "bias")
    ]
    out["fn dtype"] = _raised(lambda: lenet.fn(x.astype(np.float64), *weights))
    out["fn reversed"] = _raised(lambda: lenet.fn(np.ascontiguousarray(x.T), *weights))
    out["fn count"] = _raised(lambda: lenet.fn(x))
    partial = {k: v for k, v in lenet.params.items() if k != "layer_6"}
    out["missing leaf"] = _raised(lambda: lenet.apply(partial, lenet.state, x))
    from juliabridge.examples.luxmodels import build_bundle

    bn = juliabridge.import_lux(build_bundle("batchnorm_train", tmp / "bn.bundle", batch=6, seed=0))
    out["batch"] = _raised(lambda: bn.apply(bn.params, bn.state, np.ones((8, 3), np.float32)))

    pair, named = _input_forms(tmp)
    a = np.ones(3, np.float32)
    out["tuple input"] = _raised(lambda: pair((a, a)))
    out["dict input"] = _raised(lambda: named({"img": a}))

    # Transformations
    on_xla = juliabridge.import_lux(lenet_bundle(), backend="xla")
    out["xla forward"] = _raised(lambda: jax.jvp(on_xla, (x,), (x,)))

    def loss(b: jax.Array) -> jax.Array:
        p = {**on_xla.params, "layer_7": {**on_xla.params["layer_7"], "bias": b}}
        return jnp.sum(on_xla.apply(p, on_xla.state, x)[0])

    bias = on_xla.params["layer_7"]["bias"]
    out["second order"] = _raised(lambda: jax.grad(lambda b: jax.grad(loss)(b)[0])(bias))
    from juliabridge.errors import UnsupportedOpError

    def cannot_lift(*_: object, **__: object) -> None:
        raise UnsupportedOpError("stablehlo.foo does not lift", op="stablehlo.foo", where="line 3")

    with monkeypatch.context() as m:
        m.setattr("juliabridge.backends.lax.LaxBackend.__init__", cannot_lift)
        m.setattr("juliabridge.backends.enzyme.availability.enzyme_available", lambda: False)
        dc = juliabridge.import_lux(make_dense_bn(tmp / "dc.bundle"), backend="xla")
        xs = dense_bn_arrays()[0]
        out["no vjp"] = _raised(
            lambda: jax.grad(lambda p: jnp.sum(dc.apply(p, dc.state, xs)[0]))(dc.params)
        )
        out["enzyme missing"] = _raised(
            lambda: juliabridge.import_lux(lenet_bundle(), backend="enzyme")
        )
    try:
        import enzyme_ad.jax  # noqa: F401

        on_enzyme = juliabridge.import_lux(lenet_bundle(), backend="enzyme")
        out["enzyme forward"] = _raised(lambda: jax.jvp(on_enzyme, (x,), (x,)))
    except ImportError:
        pass

    # Environment
    from juliabridge import cli

    monkeypatch.delenv("PYTHON_JULIAPKG_EXE", raising=False)
    monkeypatch.setenv("PATH", str(tmp))  # no julia on PATH
    monkeypatch.setenv("HOME", str(tmp))  # no juliaup install
    monkeypatch.setattr("juliabridge.driver.process._juliapkg_project", lambda: tmp / "none")
    script = tmp / "m.jl"
    script.write_text("model = nothing\n")
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        cli.main(["export", str(script), "--out", str(tmp / "out.bundle")])
    out["no julia"] = err.getvalue().strip().splitlines()[-1]
    return out


def _input_forms(tmp: Path) -> tuple[juliabridge.LuxModel, juliabridge.LuxModel]:
    """A model of Julia's tuple x = (a, b), and one of a NamedTuple x = (img=..., mask=...)."""
    from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
    from juliabridge.bundle.write.writer import write_bundle

    a = np.ones(3, np.float32)
    text = jax.jit(lambda p, q: p * q).lower(a, a).as_text()
    models = []
    for name, paths in (("pair", [[1], [2]]), ("named", [["img"], ["mask"]])):
        desc = BundleDescription(
            name=name,
            mlir_text=text,
            arguments=[ArgumentSpec("input", p, a) for p in paths],
            result_paths=[[["output"]]],
            portable_artifact=False,
        )
        models.append(juliabridge.import_lux(write_bundle(tmp / f"{name}.bundle", desc)))
    return models[0], models[1]


def _matches(quote: str, message: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in quote.split("..."))
    return re.fullmatch(pattern, message, re.S) is not None


def test_every_quoted_message_is_produced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    produced = _scenarios(tmp_path, monkeypatch)
    quotes = _quoted()
    assert len(quotes) >= 20, quotes
    # Enzyme's own refusals can only be produced where enzyme-ad imports (CPython 3.11); CI's
    # environment A checks them.
    needs_enzyme = "enzyme forward" not in produced
    unmatched = [
        f"{doc}: {quote}"
        for doc, quote in quotes
        if not any(_matches(quote, message) for message in produced.values())
        and not (needs_enzyme and quote.startswith("TransformError") and "Enzyme could" in quote)
    ]
    assert not unmatched, (
        "quoted but not produced:\n"
        + "\n".join(unmatched)
        + ("\n\nproduced:\n" + "\n".join(produced.values()))
    )


def test_the_custom_call_allowlist_is_as_documented() -> None:
    """docs/reliability.md, "Module policy": 72 targets admitted, and which are refused."""
    from juliabridge.stablehlo.policy import allowed_custom_calls

    allowed = allowed_custom_calls()
    assert len(allowed) == 72
    refused = {
        "AllocateBuffer",
        "ApproxTopK",
        "Eigh",
        "LuDecomposition",
        "Qr",
        "ProductOfElementaryHouseholderReflectors",
        "annotate_device_placement",
        "shape_assertion",
        "hipsolver_gesdd_ffi",
        "stablehlo.dynamic_approx_top_k",
        "stablehlo.dynamic_reduce_window",
        "stablehlo.dynamic_rng_bit_generator",
        "stablehlo.dynamic_top_k",
        "tpu_custom_call",
        "mosaic_gpu_v2",
        "tf.call_tf_function",
    }
    assert not refused & allowed
    if jax.__version__ == "0.10.2":
        from jax._src.export import _export

        stable = set(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)
        assert len(stable) == 88 and stable - allowed == refused


def test_reliability_quotes_the_message_for_a_string_input() -> None:
    doc = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    quote = "lenet: x expects an array of f32 (Float32), got a str; "
    assert f"`{quote}...`" in doc
    with pytest.raises(juliabridge.CallArgumentError) as info:
        juliabridge.import_lux(lenet_bundle())("a")
    assert str(info.value).startswith(quote)
    with pytest.raises(TypeError) as raw:
        jax.jit(juliabridge.import_lux(lenet_bundle()))("a")
    assert not isinstance(raw.value, juliabridge.JuliaBridgeError)  # JAX's own, as documented


def test_bundle_checks_run_in_the_documented_order(tmp_path: Path) -> None:
    """docs/bundle-format.md §6: sizes (4) before the module (5) before the datasets (6)."""
    bundle = make_dense_bn(tmp_path / "order.bundle")
    with open(bundle / "weights.h5", "r+b") as f:  # breaks 6: a dataset's digest
        with h5py.File(bundle / "weights.h5", "r") as h:
            offset = h["/params/layer_1/weight"].id.get_offset()
        f.seek(offset)
        f.write(b"\xff\xff\xff\xff")
    with pytest.raises(juliabridge.ChecksumError, match=r"params\.layer_1\.weight"):
        juliabridge.import_lux(bundle)
    (bundle / "model.mlir").write_text((bundle / "model.mlir").read_text() + "\n")  # breaks 5
    with pytest.raises(juliabridge.ChecksumError, match=r"model\.mlir"):
        juliabridge.import_lux(bundle)

    def declare_huge(m: dict) -> None:  # breaks 4: far more bytes than the file holds
        arg = m["arguments"][1]
        arg["shape"], arg["julia_shape"] = [65536, 65536], [65536, 65536]

    edit_manifest(bundle, declare_huge)
    with pytest.raises(juliabridge.BundleError, match=r"declares \d+ bytes of parameters"):
        juliabridge.import_lux(bundle)
