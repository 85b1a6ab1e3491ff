"""Past one machine on JAX's own runtime: 2 processes x 4 CPU devices, and model parallelism.

The multi-process test starts two `jax.distributed` processes on localhost (gloo collectives
on CPU), each importing the same bundle; a data-parallel training step over the global mesh
(Explicit axes, JAX's default, and Auto ones) must give what one process on one device gives.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_two_processes_data_parallel_equals_one_device(tmp_path: Path, kind: str) -> None:
    import juliabridge
    from juliabridge.examples.paths import example_bundle_path

    sys.path.insert(0, str(SCRIPTS))
    try:
        import multiprocess_train as mp  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SCRIPTS))
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPTS / "multiprocess_train.py"),
                str(i),
                str(port),
                str(tmp_path),
                kind,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the jax.distributed processes did not finish within 600 s")
        outputs.append(out)
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-4000:]
    got = np.load(tmp_path / "result.npz")

    model = juliabridge.import_lux(example_bundle_path("lenet"))
    assert str(got["backend"]) == model.backend
    x, y = mp.data()
    losses, params = mp.train(model, x, y)
    np.testing.assert_allclose(got["losses"], [float(v) for v in losses], rtol=1e-5)
    import jax

    for path, v in jax.tree_util.tree_flatten_with_path(params)[0]:
        key = "p:" + "/".join(str(k.key) for k in path)
        np.testing.assert_allclose(got[key], np.asarray(v), rtol=1e-4, atol=1e-6, err_msg=key)
    # The logits of the global batch stay split over the 8 devices of both processes: process
    # 0's first device holds 4 of them, the ones one process on one device gives there.
    assert [str(e) for e in got["logits_spec"]] == ["data", "None"]
    start = int(got["logits_shard_index"][0])
    want = np.asarray(model(x))[start : start + 4]
    np.testing.assert_allclose(got["logits"], want, rtol=1e-5, atol=1e-5)


def test_model_parallel_dense_on_8_devices(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "model_parallel_check.py"), str(tmp_path)],
        env=dict(
            os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8"
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "OK" in done.stdout, done.stdout
