"""Data parallelism over 8 (fake CPU) devices equals the single-device run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "scripts" / "data_parallel_check.py"
ROOT = Path(__file__).resolve().parents[1]


def test_data_parallel_on_8_devices(backend: str) -> None:
    pytest.importorskip("optax", reason="the training step uses optax")
    env = dict(os.environ)
    # The device count is fixed when XLA starts, so this runs in its own process.
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), backend],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["devices"] == 8
    # Outputs reach ~20 in magnitude; f32 reassociation between programs stays below 1e-4.
    assert figures["jit_sharded_max_diff"] < 1e-4
    assert figures["dp_max_diff"] < 1e-4
    assert figures["dp_output_spec"].startswith("P('data'")
    for single, parallel in figures["train_losses"]:
        assert abs(single - parallel) < 1e-4 * max(1.0, abs(single))
    assert figures["train_losses"][-1][0] < figures["train_losses"][0][0]
    assert figures["train_param_max_diff"] < 1e-4
