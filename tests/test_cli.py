"""The juliabridge command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from juliabridge.cli import main
from juliabridge.examples.paths import example_bundle_path
from tests.bundle_factory import make_dense_bn


def test_inspect_shows_signature_and_producer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(example_bundle_path("lenet"))]) == 0
    out = capsys.readouterr().out
    assert "params.layer_1.weight" in out
    assert "[6, 1, 5, 5]" in out and "[5, 5, 1, 6]" in out  # MLIR and Julia shapes
    assert "made without Julia" in out
    assert "format 3" in out and "weights: a BLAKE3 digest per dataset, verified" in out


def test_inspect_names_how_each_format_checks_the_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.bundle_factory import to_format1, to_format2

    for name, convert, want in (
        ("v2", to_format2, "weights: a sha256 digest per dataset, verified"),
        ("v1", to_format1, "weights: one sha256 of the whole file, verified"),
    ):
        bundle = convert(make_dense_bn(tmp_path / f"{name}.bundle"))
        assert main(["inspect", str(bundle)]) == 0
        assert want in capsys.readouterr().out
    assert main(["inspect", "--no-verify", str(bundle)]) == 0
    assert "weights: one sha256 of the whole file, not verified (--no-verify)" in (
        capsys.readouterr().out
    )


def test_verify_ok_and_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = make_dense_bn(tmp_path / "good.bundle")
    assert main(["verify", str(good), "--backend", "xla"]) == 0
    assert "OK" in capsys.readouterr().out

    # A bundle whose reference outputs disagree with its module must fail verify.
    from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
    from juliabridge.bundle.write.writer import write_bundle
    from tests.bundle_factory import DENSE_BN_ARGUMENTS, dense_bn_arrays

    arrays = dense_bn_arrays()
    text = (good / "model.mlir").read_text()
    bad = write_bundle(
        tmp_path / "bad.bundle",
        BundleDescription(
            name="bad",
            mlir_text=text,
            arguments=[
                ArgumentSpec(role, p, a)
                for (role, p), a in zip(DENSE_BN_ARGUMENTS, arrays, strict=True)
            ],
            result_paths=[[["output"]]],
            example_outputs=[np.zeros((5, 3), np.float32) + 100.0],
        ),
    )
    assert main(["verify", str(bad), "--backend", "xla"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "juliabridge", "inspect", str(tmp_path / "missing.bundle")],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 10  # BundleError (juliabridge/support/exitcodes.py)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "no such bundle directory" in lines[0]


def test_demo_runs_the_shipped_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--backend", "xla"]) == 0
    out = capsys.readouterr().out
    assert "logits (4, 10)" in out and "OK" in out
    assert main(["demo"]) == 0  # backend auto: every op of LeNet lifts onto lax
    out = " ".join(capsys.readouterr().out.split())
    assert "verify against the bundled reference outputs (backend lax)" in out


def test_doctor_reports_backends(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from juliabridge.backends.enzyme import enzyme_available
    from juliabridge.cli import main

    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_name = {b["name"]: b for b in report["backends"]}
    assert by_name["lax"]["ok"] and by_name["enzyme"]["ok"] == enzyme_available()
    assert main(["doctor"]) == 0
    assert "backends" in capsys.readouterr().out


def test_inspect_names_the_op_that_forces_a_fallback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.cli import main
    from juliabridge.errors import UnsupportedOpError
    from juliabridge.examples.paths import example_bundle_path

    assert main(["inspect", str(example_bundle_path("lenet"))]) == 0
    assert "backend (auto): lax" in capsys.readouterr().out

    def cannot_lift(*_: object, **__: object) -> None:
        raise UnsupportedOpError("stablehlo.frob at line 7 is not lifted", op="x", where="y")

    monkeypatch.setattr("juliabridge.backends.lax.LaxBackend.__init__", cannot_lift)
    assert main(["inspect", str(example_bundle_path("lenet"))]) == 0
    out = capsys.readouterr().out
    assert "because the lax backend cannot lift it: stablehlo.frob at line 7" in out


def test_verify_matmul_precision_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from juliabridge.examples import lenet_bundle

    assert main(["verify", str(lenet_bundle()), "--backend", "lax"]) == 0
    assert "matmul_precision=highest" in capsys.readouterr().out
    assert main(["verify", str(lenet_bundle()), "--matmul-precision", "platform"]) == 0
    assert "matmul_precision=platform" in capsys.readouterr().out
    # An unknown name is refused with verify's typed error, before the bundle loads.
    assert main(["verify", str(lenet_bundle()), "--matmul-precision", "fastest"]) != 0
    assert "is not a precision JAX names" in capsys.readouterr().err
