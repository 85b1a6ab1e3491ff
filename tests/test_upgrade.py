"""Format-1 and format-2 bundles keep loading, and `juliabridge upgrade` turns them into format 3
in place.

The format-1 and format-2 copies of the shipped LeNet are made at test time by `to_format1` and
`to_format2`, the inverses of the upgrade written from the spec's §8 (drop what later formats
added, restore the whole-file hash; sha256 digests under `sha256` instead of BLAKE3 ones).
Outputs are checked against tests/reference/lux_numpy.py, not only against each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import blake3
import h5py
import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle import open_bundle
from juliabridge.bundle.files.checksum import sha256_file
from juliabridge.bundle.write import upgrade as upgrade_mod
from juliabridge.bundle.write.upgrade import upgrade_bundle
from juliabridge.cli import main
from juliabridge.examples.paths import example_bundle_path
from tests.bundle_factory import make_dense_bn
from tests.reference import lux_numpy

LENET = example_bundle_path("lenet")


def _stored(f: h5py.File, dataset: str) -> bytes:
    """The canonical bytes (spec §4.1) of an f32 dataset, read with plain h5py."""
    return np.asarray(f[dataset][()], dtype="<f4").tobytes()


def _dataset_entries(m: dict[str, Any]) -> list[dict[str, Any]]:
    entries = [a for a in m["arguments"] if "dataset" in a]
    return entries + m["examples"]["inputs"] + m["examples"]["outputs"]


def to_format2(src: Path, dst: Path) -> Path:
    """A format-2 copy of format-3 bundle `src` at `dst`: sha256 digests, hashed here."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["format_version"] = 2
    with h5py.File(dst / "weights.h5") as f:
        for e in _dataset_entries(m):
            e.pop("blake3")
            e["sha256"] = hashlib.sha256(_stored(f, e["dataset"])).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    return dst


def to_format1(src: Path, dst: Path) -> Path:
    """A format-1 copy of format-3 bundle `src` at `dst` (spec §8, the upgrade's inverse)."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["format_version"] = 1
    for key in ("module", "vjp"):
        art = m.get(key, {}).pop("artifact", None)
        if art is not None:
            (dst / art["file"]).unlink()
    for a in m["arguments"]:
        a.pop("blake3", None)
    for group in ("inputs", "outputs"):
        for e in m.get("examples", {}).get(group, []):
            e.pop("blake3", None)
    m.pop("static_state", None)
    m["weights"]["sha256"] = sha256_file(dst / m["weights"]["file"])
    (dst / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    return dst


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    return to_format1(LENET, tmp_path / "lenet_v1.bundle")


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    return to_format2(LENET, tmp_path / "lenet_v2.bundle")


def _artifacts_first(path: Path) -> None:
    """Record a writer newer than this jaxlib's StableHLO, so the artifacts are read (§2.1)."""
    m = json.loads((path / "manifest.json").read_text())
    for key in ("module", "vjp"):
        if "artifact" in m.get(key, {}):
            m[key]["artifact"]["stablehlo_version"] = "99.0.0"
    (path / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")


def _x() -> np.ndarray:
    return np.random.default_rng(11).standard_normal((4, 1, 28, 28)).astype(np.float32)


def _check_against_numpy(model: juliabridge.LuxModel, label: str) -> np.ndarray:
    y = np.asarray(model(_x()))
    params = jax.tree.map(np.asarray, model.params)
    y_ref, _ = lux_numpy.lenet(_x(), params, {})
    scale = max(1.0, float(np.max(np.abs(y_ref))))
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5 * scale, err_msg=label)
    return y


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_shipped_example_is_format_3_with_artifacts(tmp_path: Path) -> None:
    model = juliabridge.import_lux(LENET, backend="xla")
    m = model.manifest
    assert m.format_version == 3 and m.weights.sha256 is None and m.dataset_digest == "blake3"
    assert m.module.artifact is not None and m.vjp is not None and m.vjp.artifact is not None
    assert all(a.digest for a in m.arguments if a.dataset)
    # Written at jaxlib 0.10.2's StableHLO, which every supported jaxlib reads: the text.
    assert model.bundle.module_source == "text" and model.bundle.vjp_source == "text"
    _check_against_numpy(model, "shipped format 3")
    # Its artifacts are readable too: forced first, they give the same answer and gradient.
    copy = tmp_path / "lenet.bundle"
    shutil.copytree(LENET, copy)
    _artifacts_first(copy)
    forced = juliabridge.import_lux(copy, backend="xla")
    assert forced.bundle.module_source == "artifact"
    np.testing.assert_array_equal(
        _check_against_numpy(forced, "artifacts"), np.asarray(model(_x()))
    )
    loss = lambda mod: lambda p: mod.apply(p, mod.state, _x())[0].sum()  # noqa: E731
    g = jax.grad(loss(forced))(forced.params)
    assert forced.bundle.vjp_source == "artifact"
    np.testing.assert_allclose(
        np.asarray(g["layer_1"]["weight"]),
        np.asarray(jax.grad(loss(model))(model.params)["layer_1"]["weight"]),
        rtol=1e-6,
    )


def test_format_1_bundle_still_loads(v1: Path) -> None:
    model = juliabridge.import_lux(v1, backend="xla")
    assert model.manifest.format_version == 1
    assert model.bundle.module_source == "text" and model.bundle.vjp_source == "text"
    assert "format 1" in model.bundle.module_source_note
    _check_against_numpy(model, "format 1")
    assert juliabridge.verify(v1, backend="xla").ok
    # Gradients come from the format-1 VJP text module on the xla backend.
    loss = lambda p: model.apply(p, model.state, _x())[0].sum()  # noqa: E731
    grads = jax.grad(loss)(model.params)
    assert np.all(np.isfinite(np.asarray(grads["layer_1"]["weight"])))


def test_format_1_whole_file_hash_is_still_verified(v1: Path) -> None:
    with open(v1 / "weights.h5", "ab") as f:
        f.write(b"x")
    with pytest.raises(juliabridge.ChecksumError, match=r"weights\.h5: sha256 is"):
        open_bundle(v1)


def test_upgrade_format_1(v1: Path) -> None:
    before = _files(v1)
    y_before = np.asarray(juliabridge.import_lux(v1, backend="xla")(_x()))
    report = upgrade_bundle(v1)
    assert report.changed and (report.from_version, report.to_version) == (1, 3)
    assert report.changes[:2] == (
        "format_version 1 -> 3",
        "blake3 of 10 datasets (the whole-file weights hash is dropped)",
    )
    after = _files(v1)
    # Only the manifest changed; the artifacts are new; weights and text modules are untouched.
    assert set(after) - set(before) == {"model.mlirbc", "vjp.mlirbc"}
    for name in before:
        if name != "manifest.json":
            assert after[name] == before[name], name
    m = json.loads(after["manifest.json"])
    assert m["format_version"] == 3 and "sha256" not in m["weights"]
    for key, file in (("module", "model.mlirbc"), ("vjp", "vjp.mlirbc")):
        art = m[key]["artifact"]
        assert art["file"] == file and art["target"] == "1.17.0"
        assert art["sha256"] == hashlib.sha256(after[file]).hexdigest()
    # Digests over the stored f32 data, read with plain h5py and hashed here.
    with h5py.File(v1 / "weights.h5") as f:
        for e in _dataset_entries(m):
            assert e["blake3"] == blake3.blake3(_stored(f, e["dataset"])).hexdigest(), e["dataset"]
            assert "sha256" not in e
    model = juliabridge.import_lux(v1, backend="xla")
    assert model.bundle.module_source == "text" and model.bundle.vjp_source == "text"
    np.testing.assert_array_equal(_check_against_numpy(model, "upgraded"), y_before)
    assert juliabridge.verify(v1, backend="xla").ok
    _artifacts_first(v1)  # the new artifacts themselves
    model = juliabridge.import_lux(v1, backend="xla")
    assert model.bundle.module_source == "artifact" and model.bundle.vjp_source == "artifact"
    np.testing.assert_array_equal(_check_against_numpy(model, "upgraded artifact"), y_before)


def test_upgrade_is_idempotent(v1: Path) -> None:
    upgrade_bundle(v1)
    before = _files(v1)
    report = upgrade_bundle(v1)
    assert not report.changed and report.from_version == report.to_version == 3
    assert _files(v1) == before


def test_format_2_bundle_still_loads_and_verifies_its_sha256(v2: Path) -> None:
    model = juliabridge.import_lux(v2, backend="xla")
    assert model.manifest.format_version == 2 and model.manifest.dataset_digest == "sha256"
    _check_against_numpy(model, "format 2")
    assert juliabridge.verify(v2, backend="xla").ok
    with h5py.File(v2 / "weights.h5", "r+") as f:
        f["/params/layer_1/bias"][0] += 1
    with pytest.raises(juliabridge.ChecksumError, match=r"layer_1\.bias .*the sha256 of its"):
        open_bundle(v2)


def test_upgrade_format_2(v2: Path) -> None:
    before = _files(v2)
    y_before = np.asarray(juliabridge.import_lux(v2, backend="xla")(_x()))
    report = upgrade_bundle(v2)
    assert (report.from_version, report.to_version) == (2, 3)
    assert report.changes == (
        "format_version 2 -> 3",
        "blake3 of 10 datasets (sha256 digests are dropped)",
    )
    after = _files(v2)
    assert set(after) == set(before)
    assert all(after[n] == before[n] for n in before if n != "manifest.json")
    # The manifest is the shipped format-3 one again, key for key.
    assert json.loads(after["manifest.json"]) == json.loads((LENET / "manifest.json").read_text())
    model = juliabridge.import_lux(v2, backend="xla")
    np.testing.assert_array_equal(_check_against_numpy(model, "upgraded from 2"), y_before)


def test_upgrade_refuses_a_corrupted_format_2_bundle(v2: Path) -> None:
    with h5py.File(v2 / "weights.h5", "r+") as f:
        f["/examples/outputs/0"][0, 0] += 1
    before = _files(v2)
    with pytest.raises(juliabridge.ChecksumError, match=r"example output .*the sha256 of its"):
        upgrade_bundle(v2)
    assert _files(v2) == before


def test_upgrade_of_the_shipped_example_changes_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "lenet.bundle"
    shutil.copytree(LENET, copy)
    assert not upgrade_bundle(copy).changed
    assert _files(copy) == _files(LENET)


def test_upgrade_adds_a_missing_vjp_artifact(tmp_path: Path) -> None:
    # What `juliabridge vjp` leaves behind on a format-3 bundle: a VJP text without artifact.
    copy = tmp_path / "lenet.bundle"
    shutil.copytree(LENET, copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["vjp"].pop("artifact")
    (copy / "vjp.mlirbc").unlink()
    (copy / "manifest.json").write_text(json.dumps(m))
    assert open_bundle(copy).vjp_source == "text"
    report = upgrade_bundle(copy)
    assert report.changes == ("artifact vjp.mlirbc of vjp.mlir (VHLO 1.17.0)",)
    _artifacts_first(copy)
    assert open_bundle(copy).vjp_source == "artifact"


def test_upgrade_refuses_a_corrupted_bundle(v1: Path) -> None:
    # New digests over corrupted data would bless the damage: the old checksums must hold.
    with h5py.File(v1 / "weights.h5", "r+") as f:
        f["/params/layer_1/bias"][0] += 1
    before = _files(v1)
    with pytest.raises(juliabridge.ChecksumError, match=r"weights\.h5: sha256 is"):
        upgrade_bundle(v1)
    assert _files(v1) == before


def test_upgrade_never_replaces_a_stray_file(v1: Path) -> None:
    (v1 / "model.mlirbc").write_bytes(b"someone's file")
    upgrade_bundle(v1)
    assert (v1 / "model.mlirbc").read_bytes() == b"someone's file"
    m = json.loads((v1 / "manifest.json").read_text())
    assert m["module"]["artifact"]["file"] == "model-2.mlirbc"
    _artifacts_first(v1)
    b = open_bundle(v1)
    assert b.module_source == "artifact" and b.module.origin.endswith("model-2.mlirbc")


def test_failed_upgrade_leaves_the_bundle_as_it_was(
    v1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _files(v1)
    real_replace = os.replace

    def failing_replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "manifest.json":
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(upgrade_mod.os, "replace", failing_replace)
    with pytest.raises(juliabridge.SaveError, match="the bundle is unchanged"):
        upgrade_bundle(v1)
    monkeypatch.undo()
    assert _files(v1) == before  # no artifact, no temporary left behind
    assert open_bundle(v1).manifest.format_version == 1


def test_concurrent_change_is_not_overwritten(v1: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = upgrade_mod._write_new

    def write_and_interfere(path: Path, data: bytes) -> None:
        real_write(path, data)
        m = json.loads((v1 / "manifest.json").read_text())
        m["metadata"] = {"edited": "meanwhile"}
        (v1 / "manifest.json").write_text(json.dumps(m))

    monkeypatch.setattr(upgrade_mod, "_write_new", write_and_interfere)
    with pytest.raises(juliabridge.BundleError, match="changed while the upgrade ran"):
        upgrade_bundle(v1)
    m = json.loads((v1 / "manifest.json").read_text())
    assert m["metadata"] == {"edited": "meanwhile"} and m["format_version"] == 1
    assert not (v1 / "model.mlirbc").exists() and not (v1 / "vjp.mlirbc").exists()


def test_upgrade_command(v1: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upgrade", str(v1)]) == 0
    out = capsys.readouterr().out
    assert "upgraded from format 1 to 3" in out and "artifact model.mlirbc" in out
    assert main(["upgrade", str(v1)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["inspect", str(v1)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "module read from: text (the text, written at StableHLO" in out
    assert "model.mlirbc is read only if the text does not parse)" in out
    _artifacts_first(v1)
    assert main(["inspect", str(v1)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "module read from: artifact (portable artifact model.mlirbc" in out


def test_upgrade_command_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["upgrade", str(tmp_path / "missing.bundle")]) == 10
    )  # BundleError (juliabridge/support/exitcodes.py)
    err = capsys.readouterr().err
    assert "juliabridge upgrade: error:" in err and "no such bundle directory" in err


def test_upgrade_without_a_free_artifact_name_is_refused(
    v1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # model.mlirbc, model-2.mlirbc ... model-999.mlirbc all taken: nothing is replaced.
    real = os.path.lexists
    monkeypatch.setattr(
        upgrade_mod.os.path, "lexists", lambda p: str(p).endswith(".mlirbc") or real(p)
    )
    before = _files(v1)
    with pytest.raises(juliabridge.SaveError) as e:
        upgrade_bundle(v1)
    root = v1.resolve()
    assert str(e.value) == (
        f"{root}: no free name for a model artifact; remove stray *.mlirbc files"
    )
    monkeypatch.undo()
    assert _files(v1) == before


def test_a_failed_manifest_write_is_a_save_error(v2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # v2 has its artifacts: only the manifest is written, and that write fails before its
    # temporary exists (no space for it).
    def full(tmp: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    before = _files(v2)
    monkeypatch.setattr(upgrade_mod, "_write_temp", full)
    with pytest.raises(juliabridge.SaveError) as e:
        upgrade_bundle(v2)
    assert str(e.value) == (
        f"{v2.resolve()}: the upgrade failed ([Errno 28] No space left on device); the bundle "
        "is unchanged. Check free space and permissions"
    )
    assert _files(v2) == before


def test_upgrade_holds_the_module_to_the_policy_unless_trusted(v1: Path) -> None:
    # A custom call outside the allowlist: refused as import_lux refuses it, unless trust=True.
    from tests.test_cli_errors import CASES

    edit, cls, named = CASES["policy"]
    bundle = make_dense_bn(v1.parent / "policy.bundle")
    edit(bundle)
    before = _files(bundle)
    with pytest.raises(cls, match=named):
        upgrade_bundle(bundle)
    assert _files(bundle) == before
    upgrade_bundle(bundle, trust=True)
