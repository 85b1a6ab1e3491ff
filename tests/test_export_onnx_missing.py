"""export_onnx without the onnx extra: a BackendUnavailableError saying what to install (issue 41).

Runs everywhere: jax2onnx is hidden from the import system where it is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import juliabridge
from juliabridge.errors import BackendUnavailableError
from juliabridge.examples import lenet_bundle


def test_missing_jax2onnx_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from juliabridge.cli import main

    monkeypatch.setitem(sys.modules, "jax2onnx", None)  # `import jax2onnx` raises ImportError
    model = juliabridge.import_lux(lenet_bundle(), backend="lax")
    with pytest.raises(BackendUnavailableError, match=r"pip install 'juliabridge\[onnx\]'"):
        juliabridge.export_onnx(model)
    out = str(tmp_path / "lenet.onnx")
    assert main(["export-onnx", str(lenet_bundle()), "--out", out]) == 5
    assert "juliabridge[onnx]" in capsys.readouterr().err
