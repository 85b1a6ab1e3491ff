"""Sharded loading across processes: peak RSS growth per process, as a share of the weights.

    python benchmarks/bench_sharded_load.py --mb 1024 [--width 4096] [--out DIR]

Writes a bundle of a wide MLP (``Chain(Dense(W => W, relu), ..., Dense(W => W))``, float32,
bundle format 3: every dataset has a BLAKE3 digest) whose weights total about `--mb` MiB, then
loads it, each load in fresh processes with 4 CPU devices each:

- ``one process, whole``: ``juliabridge.import_lux(bundle)`` in one process, the route before
  sharded loading (the baseline of the same run);
- ``2 processes, sharded (digests verified)``: two ``jax.distributed`` processes on localhost,
  ``import_lux(bundle, shardings=...)`` with every weight matrix split by rows over the 8
  devices of both (``P("model", None)``; biases replicated), so each process holds half of
  each matrix. Each process streams every dataset through BLAKE3 once (bounded blocks) and keeps
  only its rows;
- ``2 processes, sharded (verify_checksums=False)``: the same, reading only each process's
  byte ranges.

Each process reports its peak RSS growth during the load (VmHWM after, minus VmRSS before, the
peak reset first where the kernel allows) over the bundle's weight bytes; the target is at most
0.6 for the sharded loads (the whole load is about 1). After measuring, each sharded process
compares every shard it holds with the same box read by h5py (libhdf5) from the weights file,
bit for bit. With ``--step DIR`` process 0 also writes the parameters after one SGD step on
the sharded arrays (and the bundle stays in DIR), which tests/test_sharded_distributed.py
compares with one device's step.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_RATIO = 0.6
MODES = {
    "whole": "one process, whole (import_lux without shardings)",
    "sharded": "2 processes, sharded (digests verified)",
    "sharded-noverify": "2 processes, sharded (verify_checksums=False)",
}
STEP_LR = 0.01


# ----------------------------------------------------------------------------------------
# Child: one process of one load, its figures as JSON


def child(
    mode: str, pid: int, nproc: int, port: int, bundle: Path, out: Path, step: str, axes: str
) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import gc

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    if nproc > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=f"localhost:{port}", num_processes=nproc, process_id=pid
        )
    from bench_loading import _reset_peak, _status_kib  # this script's folder is on sys.path

    import juliabridge
    from juliabridge.lux.trees import lookup

    kind = AxisType.Explicit if axes == "explicit" else AxisType.Auto
    mesh = jax.make_mesh((jax.device_count(),), ("model",), axis_types=(kind,))
    jnp.zeros(1).block_until_ready()  # the backend starts before the measurement

    def shardings(path: str, shape: tuple[int, ...], dtype: Any) -> Any:
        return NamedSharding(mesh, P("model", None)) if path.endswith(".weight") else None

    gc.collect()
    reset = _reset_peak()
    before = _status_kib("VmRSS")
    t = time.perf_counter()
    if mode == "whole":
        model = juliabridge.import_lux(bundle)
    else:
        model = juliabridge.import_lux(
            bundle, shardings=shardings, verify_checksums=mode == "sharded"
        )
    jax.block_until_ready((model.params, model.state))
    seconds = time.perf_counter() - t
    peak = _status_kib("VmHWM")
    figures: dict[str, Any] = {
        "process": pid,
        "seconds": seconds,
        "rss_before_bytes": before * 1024,
        "peak_growth_bytes": (peak - before) * 1024,
        "peak_reset": reset,
        "local_bytes": sum(
            s.data.nbytes for leaf in jax.tree.leaves(model.params) for s in leaf.addressable_shards
        ),
    }
    if mode != "whole":
        import h5py

        checked = 0
        with h5py.File(bundle / model.manifest.weights.file, "r") as f:
            for a in model.manifest.arguments:
                if a.role != "parameter":
                    continue
                leaf = lookup(model.params, a.path, "params")
                for s in leaf.addressable_shards:
                    want = np.asarray(f[a.dataset][s.index])
                    got = np.asarray(s.data)
                    if got.dtype != want.dtype or got.tobytes() != want.tobytes():
                        raise SystemExit(f"{a.label} shard {s.index} differs from h5py's")
                    checked += 1
        figures["shards_checked_bit_identical"] = checked
    if step and mode != "whole":
        _step(model, mesh, pid, Path(step))
    out.write_text(json.dumps(figures))
    if nproc > 1:
        jax.distributed.shutdown()


def step_input(model: Any) -> Any:
    """The batch of the training step (the same in every process and in the reference)."""
    import numpy as np

    a = next(a for a in model.manifest.arguments if a.role == "input")
    return np.random.default_rng(1).standard_normal(a.shape).astype(np.float32)


def sgd_step(model: Any, params: Any, x: Any) -> Any:
    """One SGD step of sum(outputs^2) on `params`."""
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        return jnp.sum(model.apply(p, model.state, x)[0] ** 2)

    g = jax.grad(loss)(params)
    return jax.tree.map(lambda a, b: a - STEP_LR * b, params, g)


def _step(model: Any, mesh: Any, pid: int, out: Path) -> None:
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    x = step_input(model)
    xs = jax.make_array_from_callback(x.shape, NamedSharding(mesh, P()), lambda i: x[i])
    with jax.set_mesh(mesh):
        new = jax.jit(lambda p, xb: sgd_step(model, p, xb))(model.params, xs)
    flat = jax.tree_util.tree_flatten_with_path(new)[0]
    full = multihost_utils.process_allgather([v for _, v in flat], tiled=True)
    if pid == 0:
        np.savez(
            out / "step.npz",
            **{jax.tree_util.keystr(k): np.asarray(v) for (k, _), v in zip(flat, full)},
        )


# ----------------------------------------------------------------------------------------
# Parent: build, run the loads, report


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def run_load(
    mode: str, bundle: Path, work: Path, step: Path | None, axes: str
) -> list[dict[str, Any]]:
    """One load in fresh processes (1 for "whole", 2 otherwise); each process's figures."""
    nproc = 1 if mode == "whole" else 2
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    outs = [work / f"{mode}-{i}.json" for i in range(nproc)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                mode,
                str(i),
                str(nproc),
                str(port),
                str(bundle),
                str(outs[i]),
                str(step or ""),
                axes,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(nproc)
    ]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=1800)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"{mode}: the load did not finish within 1800 s") from None
    for p, log in zip(procs, logs):
        if p.returncode != 0:
            raise SystemExit(f"{mode}: a process exited {p.returncode}:\n{log[-4000:]}")
    return [json.loads(o.read_text()) for o in outs]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, pid, nproc, port, bundle, out, step, axes = sys.argv[2:10]
        child(mode, int(pid), int(nproc), int(port), Path(bundle), Path(out), step, axes)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import mlp_case, table, verdict, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1024.0, help="weights, MiB (default 1024)")
    parser.add_argument("--width", type=int, default=4096, help="layer width (multiple of 8)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated loads to run")
    parser.add_argument("--step", type=Path, default=None, help="write step.npz and the bundle")
    parser.add_argument("--axes", choices=("explicit", "auto"), default="explicit")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    if args.width % 8:
        parser.error("--width must be a multiple of 8 (the rows are split over 8 devices)")
    modes = [m for m in args.modes.split(",") if m]
    with tempfile.TemporaryDirectory(prefix="jb-sharded-") as tmp:
        work = args.step or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        layers = max(1, round(args.mb * 2**20 / (args.width * args.width * 4)))
        t = time.perf_counter()
        case = mlp_case(
            work, widths=[args.width] * (layers + 1), batch=8, name="wide_mlp", examples=False
        )
        build_s = time.perf_counter() - t
        results: dict[str, Any] = {}
        for mode in modes:
            figures = run_load(mode, case.bundle, Path(tmp), args.step, args.axes)
            for f in figures:
                f["ratio_of_weights"] = f["peak_growth_bytes"] / case.weight_bytes
            results[MODES[mode]] = figures
    rows = [["load", "process", "seconds", "peak RSS growth (MB)", "x weights", "target"]]
    for name, figures in results.items():
        for f in figures:
            target = "" if name == MODES["whole"] else f"<= {TARGET_RATIO}"
            rows.append(
                [
                    name,
                    str(f["process"]),
                    f"{f['seconds']:.2f}",
                    f"{f['peak_growth_bytes'] / 1e6:.0f}",
                    f"{f['ratio_of_weights']:.2f}",
                    target
                    and f"{target} {verdict(f['ratio_of_weights'], TARGET_RATIO, at_most=True)}",
                ]
            )
    print(f"weights: {case.weight_bytes / 1e6:.0f} MB ({layers} layers of {args.width}^2 f32)")
    print(table(rows[0], rows[1:]))
    path = write_json(
        "sharded_load",
        {
            "weight_bytes": case.weight_bytes,
            "width": args.width,
            "layers": layers,
            "axes": args.axes,
            "build_seconds": build_s,
            "target_ratio_at_most": TARGET_RATIO,
            "results": results,
        },
        args.out,
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
