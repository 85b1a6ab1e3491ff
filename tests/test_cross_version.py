"""A bundle written under one jax loads under another with the same outputs, both ways.

CI runs this in the CPython 3.11 / jax 0.10.2 environment with JULIABRIDGE_OTHER_PYTHON set to
the newest-jax environment's interpreter (.ci/run). Elsewhere it skips with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent / "scripts" / "cross_version.py"
OTHER = os.environ.get("JULIABRIDGE_OTHER_PYTHON")

pytestmark = pytest.mark.skipif(
    not OTHER,
    reason="needs a second Python environment with another jax: set JULIABRIDGE_OTHER_PYTHON "
    "to its interpreter (.ci/run does: CPython 3.11 + jax 0.10.2 and the newest jax)",
)


def _run(python: str, verb: str, root: Path) -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("JULIABRIDGE_OTHER_PYTHON", None)
    done = subprocess.run(
        [python, str(SCRIPT), verb, str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{python} {verb} failed:\n{done.stdout}\n{done.stderr[-4000:]}"


def _compare(root: Path) -> None:
    written = json.loads((root / "writer.json").read_text())
    writer = written["jax"]
    reader = json.loads((root / "reader.json").read_text())["jax"]
    assert writer != reader, f"both sides ran jax {writer}; the test needs two versions"
    for kind in written["kinds"]:
        w = np.load(root / f"{kind}.writer.npz")
        r = np.load(root / f"{kind}.reader.npz")
        assert sorted(w.files) == sorted(r.files), kind
        for key in w.files:
            if key in ("backend", "module_source"):
                continue
            np.testing.assert_allclose(
                r[key],
                w[key],
                rtol=2e-6,
                atol=1e-6,
                err_msg=f"{kind} {key}: jax {reader} reading a jax {writer} bundle",
            )


def test_written_here_read_there(tmp_path: Path) -> None:
    _run(sys.executable, "write", tmp_path)
    _run(OTHER or "", "read", tmp_path)
    _compare(tmp_path)


def test_written_there_read_here(tmp_path: Path) -> None:
    _run(OTHER or "", "write", tmp_path)
    _run(sys.executable, "read", tmp_path)
    _compare(tmp_path)
