"""Sharded loading on two `jax.distributed` processes x 4 CPU devices (issue 54), at small size:
benchmarks/bench_sharded_load.py loads a bundle with every weight matrix split by rows over the
8 devices of both processes; each process holds only its half (checked bit for bit against
h5py's reading of the same boxes, in the script), and one SGD step on the sharded arrays equals
one device's."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import juliabridge

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_sharded_load.py"


@pytest.mark.parametrize("axes", ["explicit", "auto"])
def test_two_processes_each_hold_their_half_and_train_like_one_device(
    tmp_path: Path, axes: str
) -> None:
    work = tmp_path / "work"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--mb",
            "0.25",
            "--width",
            "128",
            "--axes",
            axes,
            "--modes",
            "sharded,sharded-noverify",
            "--step",
            str(work),
            "--out",
            str(tmp_path),
        ],
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "sharded_load.json").read_text())
    model = juliabridge.import_lux(work / "wide_mlp.bundle")
    leaves = [(a.path[-1], a) for a in model.manifest.arguments if a.role == "parameter"]
    nbytes = {
        k: sum(int(np.prod(a.shape)) * 4 for key, a in leaves if key == k)
        for k in ("weight", "bias")
    }
    for name, figures in report["results"].items():
        assert [f["process"] for f in figures] == [0, 1], name
        for f in figures:
            # weights: 4 of 8 row blocks here; biases: replicated on this process's 4 devices
            assert f["local_bytes"] == nbytes["weight"] // 2 + 4 * nbytes["bias"], (name, f)
            assert f["shards_checked_bit_identical"] == len(leaves) * 4, (name, f)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        bench = importlib.import_module("bench_sharded_load")
    finally:
        sys.path.remove(str(SCRIPT.parent))
    x = bench.step_input(model)
    one = jax.jit(lambda p, xb: bench.sgd_step(model, p, xb))(model.params, x)
    got = np.load(work / "step.npz")
    flat = jax.tree_util.tree_flatten_with_path(one)[0]
    assert sorted(got.files) == sorted(jax.tree_util.keystr(k) for k, _ in flat)
    for k, v in flat:
        np.testing.assert_allclose(
            got[jax.tree_util.keystr(k)], np.asarray(v), rtol=1e-5, atol=1e-6, err_msg=str(k)
        )
