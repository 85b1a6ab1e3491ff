"""What loading a jax.export artifact needs (docs/exporting.md): jax and flatbuffers, proved in
a fresh virtual environment holding only ``pip install jax==<this jax> flatbuffers`` (and what
pip brings with jax), and that without flatbuffers it does not load.

Building the environment downloads jax and jaxlib (~1-2 minutes): it is built once per test
session under pytest's tmp, and the test skips, saying why, where pip cannot reach an index.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import jax
import pytest

import juliabridge
from tests.test_export_jax import _cases, _check_loaded, _run_loader

INSTALL_SECONDS = 900


@pytest.fixture(scope="session")
def jax_only_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jax-only") / "venv"
    venv.create(root, with_pip=True)
    python = root / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    try:
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"jax=={jax.__version__}",
             "flatbuffers"],
            capture_output=True, text=True, timeout=INSTALL_SECONDS,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip install jax flatbuffers took over {INSTALL_SECONDS} s")
    if done.returncode != 0:
        pytest.skip(f"pip cannot install jax and flatbuffers here: {done.stderr.strip()[-300:]}")
    return python


def test_an_artifact_loads_with_jax_and_flatbuffers_only(
    jax_only_python: Path, tmp_path: Path
) -> None:
    model = juliabridge.import_lux(juliabridge.examples.lenet_bundle(), backend="lax")
    artifact = tmp_path / "lenet.jaxexport"
    juliabridge.save_jax(model, artifact, vjp_order=1)
    cases = _cases(model, (1, 7))
    _check_loaded(model, _run_loader(str(jax_only_python), artifact, cases, tmp_path), cases)
    listed = subprocess.run(
        [str(jax_only_python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, timeout=120,
    ).stdout.lower()  # fmt: skip
    assert "juliabridge" not in listed and "flatbuffers" in listed


def test_without_flatbuffers_it_does_not_load(jax_only_python: Path, tmp_path: Path) -> None:
    model: Any = juliabridge.import_lux(juliabridge.examples.lenet_bundle(), backend="lax")
    artifact = tmp_path / "lenet.jaxexport"
    juliabridge.save_jax(model, artifact, vjp_order=0)
    run = [str(jax_only_python), "-m", "pip"]
    subprocess.run([*run, "uninstall", "-y", "--quiet", "flatbuffers"], check=True, timeout=120)
    try:
        code = "import sys, jax; jax.export.deserialize(bytearray(open(sys.argv[1], 'rb').read()))"
        done = subprocess.run(
            [str(jax_only_python), "-I", "-c", code, str(artifact)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode != 0 and "flatbuffers" in done.stderr
    finally:
        subprocess.run([*run, "install", "--quiet", "flatbuffers"], check=True, timeout=300)
