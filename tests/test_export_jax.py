"""A model out of juliabridge through jax.export (issue 41): one artifact for every batch size.

References are independent of the lifted module: LeNet's forward written in JAX from Lux's
semantics (juliabridge.examples.luxmodels, the formulas the shipped bundle was made from),
evaluated directly; and a numpy Dense+BatchNorm. The serialized artifact runs in a child
process (``python -I``) where juliabridge cannot be imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge.errors import CallArgumentError, TransformError
from juliabridge.examples import lenet_bundle
from juliabridge.examples import luxmodels as lux
from tests.bundle_factory import dense_bn_arrays, dense_bn_reference, edit_manifest, make_dense_bn
from tests.conftest import require_backend

LOADER = Path(__file__).resolve().parent / "scripts" / "load_jax_export.py"
OTHER = os.environ.get("JULIABRIDGE_OTHER_PYTHON")
SIZES = (1, 7, 64)


def lenet_reference(ps: Any, x: Any) -> jax.Array:
    """LeNet-5 as Lux computes it, from luxmodels' layer formulas (not the bundle's module)."""
    h = lux.conv2d(x, ps["layer_1"]["weight"], ps["layer_1"]["bias"], lux.relu)
    h = lux.maxpool2d(h, (2, 2))
    h = lux.conv2d(h, ps["layer_3"]["weight"], ps["layer_3"]["bias"], lux.relu)
    h = lux.flatten(lux.maxpool2d(h, (2, 2)))
    h = lux.dense(h, ps["layer_6"]["weight"], ps["layer_6"]["bias"], lux.relu)
    return lux.dense(h, ps["layer_7"]["weight"], ps["layer_7"]["bias"])


@pytest.fixture(scope="module")
def lenet() -> juliabridge.LuxModel:
    return juliabridge.import_lux(lenet_bundle(), backend="lax")


def _x(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + n).standard_normal((n, 1, 28, 28)).astype(np.float32)


def _close(got: Any, want: Any, what: str) -> None:
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(want), rtol=2e-4, atol=2e-5, err_msg=what
    )


def _spec(shape: tuple[Any, ...]) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def test_jax_export_of_model_apply_and_grad_with_a_symbolic_batch(lenet: Any) -> None:
    (b,) = jax.export.symbolic_shape("b")
    x_spec = _spec((b, 1, 28, 28))
    ps_spec = jax.tree.map(lambda a: _spec(a.shape), lenet.params)
    st_spec = jax.tree.map(lambda a: _spec(a.shape), lenet.state)

    def loss(params: Any, x: Any) -> Any:
        return jnp.sum(lenet.apply(params, lenet.state, x)[0] ** 2)

    forward = jax.export.export(jax.jit(lenet))(x_spec)
    apply = jax.export.export(jax.jit(lenet.apply))(ps_spec, st_spec, x_spec)
    grad = jax.export.export(jax.jit(jax.grad(loss)))(ps_spec, x_spec)
    assert str(forward.out_avals[0].shape[0]) == "b"
    ref_loss = lambda p, x: jnp.sum(lenet_reference(p, x) ** 2)  # noqa: E731
    _close(forward.call(_x(1)), lenet_reference(lenet.params, _x(1)), "model at batch 1")
    x = _x(7)
    _close(forward.call(x), lenet_reference(lenet.params, x), "model at batch 7")
    y, st = apply.call(lenet.params, lenet.state, x)
    _close(y, lenet_reference(lenet.params, x), "apply at batch 7")
    assert jax.tree.structure(st) == jax.tree.structure(lenet.state)
    got = grad.call(lenet.params, x)
    want = jax.grad(ref_loss)(lenet.params, x)
    jax.tree.map(lambda g, w: _close(g, w, "grad at batch 7"), got, want)


def test_load_mlir_function_exports_vmapped_and_refuses_a_symbolic_traced_axis(
    lenet: Any,
) -> None:
    fn = juliabridge.load_mlir(lenet.bundle.root / "model.mlir", backend="lax")
    (b,) = jax.export.symbolic_shape("b")
    specs = [_spec(s.shape) for s in fn.in_specs]
    bad = [_spec((b, *s.shape[1:])) if i == 0 else s for i, s in enumerate(specs)]
    with pytest.raises(CallArgumentError, match="symbolic dimension"):
        jax.export.export(jax.jit(fn))(*bad)
    exported = juliabridge.export_jax(fn, batch="b", batch_args=[0])
    assert str(exported.in_avals[0].shape[0]) == "b"
    assert [a.shape for a in exported.in_avals[1:]] == [s.shape for s in specs[1:]]
    leaves = [lenet.params[k][n] for k, n in _lenet_order()]
    xs = np.stack([_x(4, 1), _x(4, 2)])
    (y,) = exported.call(xs, *leaves)
    for i in range(2):
        _close(y[i], lenet_reference(lenet.params, xs[i]), f"stacked call {i}")


def _lenet_order() -> list[tuple[str, str]]:
    return [(f"layer_{i}", n) for i in (1, 3, 6, 7) for n in ("weight", "bias")]


def test_weights_as_arguments_in_lux_order(lenet: Any) -> None:
    exported = juliabridge.export_jax(lenet, weights="arguments", vjp_order=0)
    names = [a.label for a in lenet.manifest.arguments]
    assert names[0] == "x" and names[1:] == [f"params.{k}.{n}" for k, n in _lenet_order()]
    assert len(exported.in_avals) == len(names)
    x = _x(7)
    y, _ = exported.call(x, *[lenet.params[k][n] for k, n in _lenet_order()])
    _close(y, lenet_reference(lenet.params, x), "weights as arguments")


def _cases(model: Any, sizes: tuple[int, ...]) -> dict[str, np.ndarray]:
    cases = {}
    for n in sizes:
        cases[f"x_{n}"] = _x(n, 3)
        cases[f"ct_{n}"] = np.random.default_rng(n).standard_normal((n, 10)).astype(np.float32)
    return cases


def _run_loader(python: str, artifact: Path, cases: dict[str, np.ndarray], tmp: Path) -> Any:
    np.savez(tmp / "cases.npz", **cases)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JULIABRIDGE"))}
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run(
        [python, "-I", str(LOADER), str(artifact), str(tmp / "cases.npz"), str(tmp / "out.npz")],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{python} -I loader failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return np.load(tmp / "out.npz")


def _check_loaded(model: Any, out: Any, cases: dict[str, np.ndarray]) -> None:
    """The child's outputs and VJPs against the reference, and its outputs against
    juliabridge's own (the VJP only against the reference: each costs a compile)."""
    for key in cases:
        if not key.startswith("x_"):
            continue
        n = key[2:]
        x, ct = cases[key], cases["ct_" + n]
        want = lenet_reference(model.params, x)
        _close(out["y_" + n], want, f"artifact output at batch {n}")
        _close(out["y_" + n], model(x), f"artifact vs juliabridge at batch {n}")
        _, pullback = jax.vjp(lambda x: lenet_reference(model.params, x), x)
        _close(out["g_" + n], pullback(ct)[0], f"artifact VJP at batch {n}")


def test_artifact_runs_without_juliabridge_at_every_batch_size(lenet: Any, tmp_path: Path) -> None:
    artifact = tmp_path / "lenet.jaxexport"
    info = juliabridge.save_jax(lenet, artifact, vjp_order=1)
    described = json.loads((tmp_path / "lenet.jaxexport.json").read_text())
    assert described == json.loads(json.dumps(info))
    assert described["arguments"] == [{"name": "x", "shape": ["b", 1, 28, 28], "dtype": "float32"}]
    assert described["results"] == [{"name": "output", "shape": ["b", 10], "dtype": "float32"}]
    manifest = (lenet.bundle.root / "manifest.json").read_bytes()
    assert described["source_digest"]["hex"] == hashlib.sha256(manifest).hexdigest()
    cases = _cases(lenet, SIZES)
    _check_loaded(lenet, _run_loader(sys.executable, artifact, cases, tmp_path), cases)


def test_cli_export_jax_writes_the_artifact_and_refuses_to_overwrite(tmp_path: Path) -> None:
    from juliabridge.cli import main

    out = tmp_path / "lenet.bin"
    assert main(["export-jax", str(lenet_bundle()), "--out", str(out), "--batch", "n"]) == 0
    assert (
        json.loads(out.with_name("lenet.bin.json").read_text())["arguments"][0]["shape"][0] == "n"
    )
    assert jax.export.deserialize(bytearray(out.read_bytes())).in_avals[0].shape[1:] == (1, 28, 28)
    assert main(["export-jax", str(lenet_bundle()), "--out", str(out)]) == 20  # SaveError


def test_dependent_samples_are_refused_at_export_time(tmp_path: Path) -> None:
    bundle = make_dense_bn(tmp_path / "bn.bundle")
    edit_manifest(bundle, lambda m: m["batch"].update(samples_independent=False))
    model = juliabridge.import_lux(bundle, backend="lax")
    (b,) = jax.export.symbolic_shape("b")
    with pytest.raises(CallArgumentError, match=r"not independent.*symbolic batch size b"):
        jax.export.export(jax.jit(model))(_spec((b, 2)))
    with pytest.raises(CallArgumentError, match=r"samples are not independent.*batch=None"):
        juliabridge.export_jax(model)
    fixed = juliabridge.export_jax(model, batch=None)
    arrays = dense_bn_arrays()
    _close(fixed.call(arrays[0]), dense_bn_reference(arrays), "traced-size export")


@pytest.mark.parametrize("backend", ["xla", "enzyme"])
def test_other_backends_export_once_differentiable(backend: str) -> None:
    require_backend(backend)
    model = juliabridge.import_lux(lenet_bundle(), backend=backend)
    exported = jax.export.deserialize(juliabridge.export_jax(model).serialize(vjp_order=1))
    x, ct = _x(7, 5), np.ones((7, 10), np.float32)
    y, pullback = jax.vjp(exported.call, x)
    _close(y, lenet_reference(model.params, x), f"{backend} artifact at batch 7")
    _, want = jax.vjp(lambda x: lenet_reference(model.params, x), x)
    _close(pullback(ct)[0], want(ct)[0], f"{backend} artifact VJP")
    with pytest.raises(TransformError, match="backend='lax'"):
        juliabridge.export_jax(model, vjp_order=2)


@pytest.mark.parametrize(
    ("option", "match"),
    [
        ({"batch": "2b"}, "symbolic dimension"),
        ({"weights": "baked"}, "constants"),
        ({"vjp_order": -1}, "int >= 0"),
    ],
)
def test_bad_options_are_typed(lenet: Any, option: dict[str, Any], match: str) -> None:
    with pytest.raises(CallArgumentError, match=match):
        juliabridge.export_jax(lenet, **option)


# --- across jax versions -----------------------------------------------------------------------

needs_other = pytest.mark.skipif(
    not OTHER,
    reason="needs a second Python environment with another jax: set JULIABRIDGE_OTHER_PYTHON "
    "(.ci/run does)",
)


def _jax_version(python: str) -> tuple[int, ...]:
    done = subprocess.run(
        [python, "-I", "-c", "import jax; print(jax.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return tuple(int(p) for p in done.stdout.strip().split(".")[:3])


@needs_other
def test_artifact_written_here_runs_there(lenet: Any, tmp_path: Path) -> None:
    here, there = _jax_version(sys.executable), _jax_version(OTHER or "")
    # Newer jax reads older artifacts (jax.export's backward compatibility); an older jax
    # reads a newer one's only within StableHLO's forward window, and jax 0.10.2 cannot read
    # jax 0.12's shape assertions (docs/exporting.md): that direction is tested at fixed shapes.
    batch = "b" if here <= there else None
    artifact = tmp_path / "lenet.jaxexport"
    juliabridge.save_jax(lenet, artifact, batch=batch)
    cases = _cases(lenet, (7,) if batch else (4,))
    _check_loaded(lenet, _run_loader(OTHER or "", artifact, cases, tmp_path), cases)


@needs_other
def test_artifact_written_there_runs_here(lenet: Any, tmp_path: Path) -> None:
    here, there = _jax_version(sys.executable), _jax_version(OTHER or "")
    batch = "b" if there <= here else "none"
    artifact = tmp_path / "lenet.jaxexport"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("JULIABRIDGE_OTHER_PYTHON", None)
    done = subprocess.run(
        [
            OTHER or "",
            "-m",
            "juliabridge",
            "export-jax",
            str(lenet_bundle()),
            "--out",
            str(artifact),
            "--batch",
            batch,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        json.loads((tmp_path / "lenet.jaxexport.json").read_text())["jax_version"]
        != jax.__version__
    )
    cases = _cases(lenet, (7,) if batch == "b" else (4,))
    _check_loaded(lenet, _run_loader(sys.executable, artifact, cases, tmp_path), cases)


def test_arguments_of_builds_the_arguments_artifacts_order(lenet: Any) -> None:
    """jax.tree.leaves(model.params) is sorted (bias before weight): not the artifact's order,
    which arguments_of builds from the manifest's paths."""
    from juliabridge.exporting import arguments_of

    exported = juliabridge.export_jax(lenet, weights="arguments", vjp_order=0)
    x = _x(5)
    arrays = arguments_of(lenet, x)
    assert [np.shape(a) for a in arrays] == [tuple(int(d) if isinstance(d, int) else 5
                                                   for d in a.shape) for a in exported.in_avals]  # fmt: skip
    assert [np.shape(a) for a in arrays[1:]] != [np.shape(a) for a in jax.tree.leaves(lenet.params)]
    y, _ = exported.call(*arrays)
    _close(y, lenet_reference(lenet.params, x), "arguments_of")
    with pytest.raises(CallArgumentError, match="LuxModel"):
        arguments_of(object(), x)  # type: ignore[arg-type]


def test_a_bundle_without_a_batch_names_the_way_to_every_batch_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from juliabridge.cli import main

    bundle = make_dense_bn(tmp_path / "bn.bundle")
    edit_manifest(bundle, lambda m: m.pop("batch"))
    model = juliabridge.import_lux(bundle, backend="lax")
    with pytest.raises(CallArgumentError, match=r"import_lux\(dir, batch_axis=0\).*batch=None"):
        juliabridge.export_jax(model)
    out = str(tmp_path / "bn.jaxexport")
    assert main(["export-jax", str(bundle), "--out", out]) != 0
    err = capsys.readouterr().err
    assert "convert DIR --batch-axis 0" in err and "--batch none" in err
    assert "batch=None" not in err and "import_lux(" not in err


def test_save_jax_digests_the_manifest_it_read_and_opens_no_file_again(
    lenet: Any, tmp_path: Path
) -> None:
    import shutil

    src = Path(lenet.bundle.root)
    bundle = Path(shutil.copytree(src, tmp_path / "copy.bundle"))
    read = (bundle / "manifest.json").read_bytes()
    model = juliabridge.import_lux(bundle)
    assert model.manifest.source_sha256 == hashlib.sha256(read).hexdigest()
    # After the import, manifest.json becomes a link to a file outside the bundle: the
    # artifact's digest is still that of the bytes the import read, not the link's target.
    outside = tmp_path / "outside.json"
    outside.write_bytes(b'{"not": "the bundle"}')
    (bundle / "manifest.json").unlink()
    (bundle / "manifest.json").symlink_to(outside)
    info = juliabridge.save_jax(model, tmp_path / "a.jaxexport", vjp_order=0)
    assert info["source_digest"] == {
        "algorithm": "sha256",
        "of": "manifest.json",
        "hex": hashlib.sha256(read).hexdigest(),
    }
