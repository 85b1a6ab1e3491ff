"""Loading: a bundle with ~500 MB of weights read into JAX arrays, vs NPZ and vs a raw read.

    python benchmarks/bench_loading.py [--mb 512] [--repeats 5] [--workdir DIR]

It writes a bundle of a wide MLP (Lux ``Chain(Dense(4096 => 4096, relu), ...)``, float32)
whose weights total about `--mb` MiB, the same weights as a compressed NPZ (what Reactant's
``export_to_enzymejax`` writes: ``np.savez_compressed`` with keys ``arr_1..N``), and then
times, each in a fresh Python process (so peak memory is that variant's own):

- ``import_lux``: ``juliabridge.import_lux(bundle)`` until every parameter is a ready JAX
  array (sha256 of the files, manifest and MLIR checks, HDF5 read, device transfer);
- ``import_lux, no sha256``: the same with ``verify_checksums=False``;
- ``import_lux, HDF5 in-process``: the same with ``JULIABRIDGE_HDF5_WORKER=0`` (libhdf5 called
  in the importing process instead of the default isolated worker process);
- ``npz``: ``np.load`` + ``jnp.asarray`` of every array;
- ``raw read + memcpy``: the weights file read into one buffer and copied once, the
  physical limit of any loader that reads the file;
- two ``prototype`` variants (not package code): what import_lux could do with HDF5
  ``read_direct`` into 64-byte-aligned buffers that ``jax.device_put`` adopts without a copy,
  with the sha256 computed in a thread meanwhile, or skipped.

Throughput is weight bytes / wall time (GB = 1e9 bytes). Peak RSS is the rise of the
process's resident-set high-water mark during the load (VmHWM, reset through
/proc/self/clear_refs where the kernel allows), over the weight bytes; processes the load
starts (juliabridge's HDF5 worker) are reported separately, as their own peak RSS. Libraries (jax,
juliabridge, enzyme-ad) are imported and the JAX backend started before the clock starts;
that one-time cost is not loading. Files are read from the page cache (a warm-up round runs
first), and each process touches (then frees) 3x the weights' size of memory before the clock
starts (``--no-prefault`` turns this off; see ``child``). Targets: >= 2 GB/s end to end,
>= 10x the NPZ path, peak RSS <= 1.3x the weights. The big files are deleted at the end
(``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = (
    "import_lux",
    "import_lux, no sha256",
    "import_lux, HDF5 in-process",
    "prototype: aligned read + zero-copy, sha256 in a thread",
    "prototype: aligned read + zero-copy, no sha256",
    "npz",
    "raw read + memcpy",
)
TARGET_GBPS = 2.0
TARGET_VS_NPZ = 10.0
TARGET_RSS = 1.3
WIDTH = 4096
#: Reading HDF5 in a worker process is juliabridge's default; this switches it off.
HDF5_WORKER_ENV = "JULIABRIDGE_HDF5_WORKER"


# ----------------------------------------------------------------------------------------
# Child process: one load, reported as one JSON line


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_kib("VmHWM") <= _status_kib("VmRSS") + 64


class _ChildSampler:
    """Peak RSS (VmHWM) of the child processes started during a load, e.g. an HDF5 worker.

    VmHWM of this process does not count them. A thread polls /proc every millisecond for the
    children of every thread of this process and remembers each child's highest VmHWM.
    """

    def __init__(self) -> None:
        import threading

        self._peaks: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _children(self) -> set[int]:
        pids: set[int] = set()
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in (task / "children").read_text().split())
        return pids

    def _run(self) -> None:
        while not self._done.is_set():
            for pid in self._children():
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            kib = int(line.split()[1])
                            self._peaks[pid] = max(self._peaks.get(pid, 0), kib)
                except (OSError, ValueError):
                    pass
            time.sleep(0.001)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def peak_bytes(self) -> int:
        """Sum over the children seen of their peak RSS (they may not overlap in time)."""
        return 1024 * sum(self._peaks.values())


def _profile_import(bundle: Path) -> dict[str, Any]:
    """import_lux's phases, timed one by one with the functions it calls (internal API)."""
    import jax

    from juliabridge.backends import make_backend
    from juliabridge.bundle import open_bundle
    from juliabridge.bundle.checksum import sha256_file
    from juliabridge.bundle.weights import open_weights, read_array
    from juliabridge.trees import build_tree

    phases: dict[str, float] = {}
    t = time.perf_counter()
    b = open_bundle(bundle, verify_checksums=False)
    phases["open_bundle (manifest, MLIR parse, checks; no sha256)"] = time.perf_counter() - t
    m = b.manifest
    t = time.perf_counter()
    sha256_file(b.file(m.weights))
    sha256_file(b.file(m.module))
    phases["sha256 of model.mlir + weights.h5"] = time.perf_counter() - t
    t = time.perf_counter()
    make_backend(b.module, "auto")
    phases["backend construction"] = time.perf_counter() - t
    read_s = put_s = 0.0
    zero_copy = []
    leaves = []
    t = time.perf_counter()
    with open_weights(b.file(m.weights)) as f:
        phases["open weights.h5 (link/external-storage scan)"] = time.perf_counter() - t
        for a in m.arguments:
            if a.role == "input" or a.dataset is None:
                continue
            t = time.perf_counter()
            host = read_array(f, a.dataset, a.shape, a.dtype, a.label)
            read_s += time.perf_counter() - t
            t = time.perf_counter()
            dev = jax.block_until_ready(jax.device_put(host))
            put_s += time.perf_counter() - t
            zero_copy.append(dev.unsafe_buffer_pointer() == host.ctypes.data)
            leaves.append((a.path, dev))
            del host
    phases["HDF5 read (read_array, all datasets)"] = read_s
    phases["jax.device_put (all arrays)"] = put_s
    t = time.perf_counter()
    build_tree(leaves)
    phases["build_tree"] = time.perf_counter() - t
    return {"phases": phases, "device_put_zero_copy": zero_copy}


def _aligned_empty(shape: tuple[int, ...], dtype: Any, align: int = 64) -> Any:
    """An uninitialised numpy array whose data starts on an `align`-byte boundary."""
    import numpy as np

    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + align, np.uint8)
    offset = -raw.ctypes.data % align
    return raw[offset : offset + n].view(dtype).reshape(shape)


def _prototype_load(bundle: Path, verify: bool) -> Any:
    """What import_lux could do (a sketch, f32/f64/int datasets only, not package code).

    Each dataset is read with h5py's read_direct into a 64-byte-aligned buffer, which the
    XLA CPU client then adopts without a copy (jax.device_put is zero-copy for aligned host
    buffers on CPU); the sha256 of weights.h5 runs in a thread meanwhile (hashlib releases
    the GIL), and is checked before the arrays are handed out.
    """
    from concurrent.futures import ThreadPoolExecutor

    import h5py
    import jax

    from juliabridge.bundle import open_bundle
    from juliabridge.bundle.checksum import sha256_file
    from juliabridge.trees import build_tree

    b = open_bundle(bundle, verify_checksums=False)
    m = b.manifest
    pool = ThreadPoolExecutor(1) if verify else None
    digest = pool.submit(sha256_file, b.file(m.weights)) if pool else None
    module_ok = (not verify) or sha256_file(b.file(m.module)) == m.module.sha256
    leaves = []
    # Plain h5py in this process: the sketch skips the package's HDF5 safety checks.
    with h5py.File(b.file(m.weights), "r") as f:
        for a in m.arguments:
            if a.role == "input" or a.dataset is None:
                continue
            ds = f[a.dataset]
            out = _aligned_empty(tuple(ds.shape), ds.dtype)
            if out.size:
                ds.read_direct(out)
            leaves.append((a.path, jax.device_put(out)))
            del out
    if pool is not None and digest is not None:
        ok = digest.result() == m.weights.sha256
        pool.shutdown()
        if not (ok and module_ok):
            raise RuntimeError("checksum mismatch")
    return build_tree(leaves)


def child(variant: str, bundle: Path, npz: Path, prefault: bool) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import juliabridge
    from juliabridge.backends.enzyme import enzyme_available

    enzyme_available()  # imports enzyme_ad where present: library import, not loading
    jax.block_until_ready(jnp.zeros(8) + 1)  # start the backend
    weights = bundle / "weights.h5"
    if prefault:
        # Touch (then free) 3x the weights' size first. On this project's VMs the first touch
        # of guest memory the hypervisor has not backed yet costs ~0.5 GB/s, at random; this
        # keeps that artefact out of the figures (the kernel still zeroes every fresh page).
        scratch = np.ones(3 * weights.stat().st_size, np.uint8)
        del scratch
    reset = _reset_peak()
    rss0 = _status_kib("VmRSS")
    hwm0 = _status_kib("VmHWM")
    extra: dict[str, Any] = {}
    sampler = _ChildSampler()
    t = time.perf_counter()
    if variant == "import_lux":
        model = juliabridge.import_lux(bundle)
        jax.block_until_ready(model.params)
    elif variant == "import_lux, HDF5 in-process":
        model = juliabridge.import_lux(bundle)  # run_child sets JULIABRIDGE_HDF5_WORKER=0
        jax.block_until_ready(model.params)
    elif variant == "import_lux, no sha256":
        model = juliabridge.import_lux(bundle, verify_checksums=False)
        jax.block_until_ready(model.params)
    elif variant == "prototype: aligned read + zero-copy, sha256 in a thread":
        jax.block_until_ready(_prototype_load(bundle, verify=True))
    elif variant == "prototype: aligned read + zero-copy, no sha256":
        jax.block_until_ready(_prototype_load(bundle, verify=False))
    elif variant == "npz":
        with np.load(npz) as z:
            arrays = [jnp.asarray(z[k]) for k in z.files]
        jax.block_until_ready(arrays)
    elif variant == "raw read + memcpy":
        size = weights.stat().st_size
        buf = np.empty(size, np.uint8)
        with open(weights, "rb", buffering=0) as f:
            got = f.readinto(memoryview(buf))
        assert got == size
        dst = np.empty_like(buf)
        np.copyto(dst, buf)
    elif variant == "profile":
        extra = _profile_import(bundle)
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    seconds = time.perf_counter() - t
    hwm1 = _status_kib("VmHWM")
    sampler.stop()
    base = rss0 if reset else hwm0
    print(
        json.dumps(
            {
                "variant": variant,
                "seconds": seconds,
                "peak_rise_bytes": max(0, hwm1 - base) * 1024,
                "children_peak_rss_bytes": sampler.peak_bytes(),
                "hwm_reset": reset,
                **extra,
            }
        )
    )


# ----------------------------------------------------------------------------------------
# Parent: build the files, run the children, report


def run_child(
    variant: str, bundle: Path, npz: Path, prefault: bool, worker: bool = True
) -> dict[str, Any]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if variant == "import_lux, HDF5 in-process" or not worker:
        env[HDF5_WORKER_ENV] = "0"
    flag = "prefault" if prefault else "cold"
    proc = subprocess.run(
        [sys.executable, __file__, "--child", variant, str(bundle), str(npz), flag],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {variant!r} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def build(work: Path, mb: float) -> tuple[Path, Path, int, dict[str, float]]:
    import numpy as np
    from common import mlp_case

    layers = max(1, round(mb * 2**20 / (WIDTH * WIDTH * 4)))
    timings = {}
    t = time.perf_counter()
    case = mlp_case(work, widths=[WIDTH] * (layers + 1), batch=4, name="big_mlp", examples=False)
    timings["write bundle"] = time.perf_counter() - t
    npz = work / "big_mlp_inputs.npz"
    leaves = [
        case.params[f"layer_{i}"][key] for i in range(1, layers + 1) for key in ("weight", "bias")
    ]
    t = time.perf_counter()
    np.savez_compressed(npz, **{f"arr_{i}": a for i, a in enumerate(leaves, start=1)})
    timings["write compressed NPZ"] = time.perf_counter() - t
    return case.bundle, npz, case.weight_bytes, timings


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5] == "prefault")
        return
    from common import median, table, verdict, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=512, help="weights to write, in MiB")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per variant")
    parser.add_argument("--workdir", type=Path, default=None, help="where the big files go")
    parser.add_argument("--keep", action="store_true", help="keep the bundle and NPZ")
    parser.add_argument(
        "--no-prefault",
        dest="prefault",
        action="store_false",
        help="do not pre-touch memory in each process (see the module docstring)",
    )
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="juliabridge-bench-loading-", dir=args.workdir))
    try:
        bundle, npz, weight_bytes, build_s = build(work, args.mb)
        sizes = {
            "weights.h5": (bundle / "weights.h5").stat().st_size,
            "npz": npz.stat().st_size,
        }
        print(
            f"weights {weight_bytes / 1e6:.1f} MB; weights.h5 {sizes['weights.h5'] / 1e6:.1f} MB;"
            f" NPZ {sizes['npz'] / 1e6:.1f} MB (built in "
            + ", ".join(f"{k} {v:.1f} s" for k, v in build_s.items())
            + ")"
        )
        for v in VARIANTS:  # warm-up round: page cache, .pyc files
            run_child(v, bundle, npz, args.prefault)
        samples: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
        for r in range(args.repeats):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for v in order:
                samples[v].append(run_child(v, bundle, npz, args.prefault))
        prof = {
            mode: [run_child("profile", bundle, npz, args.prefault, worker) for _ in range(3)]
            for mode, worker in (("HDF5 worker (default)", True), ("HDF5 in-process", False))
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res: dict[str, dict[str, Any]] = {}
    for v, runs in samples.items():
        sec = median([s["seconds"] for s in runs])
        peak = max(s["peak_rise_bytes"] for s in runs)
        children = max(s.get("children_peak_rss_bytes", 0) for s in runs)
        res[v] = {
            "children_peak_rss_bytes": children,
            "seconds": sec,
            "gb_per_s": weight_bytes / sec / 1e9,
            "peak_rss_rise_bytes": peak,
            "peak_rss_over_weights": peak / weight_bytes,
            "runs": runs,
        }
    npz_s = res["npz"]["seconds"]
    rows = []
    for v in VARIANTS:
        r = res[v]
        rows.append(
            [
                v,
                f"{r['seconds']:.3f}",
                f"{r['gb_per_s']:.2f}",
                f"{npz_s / r['seconds']:.1f}x",
                f"{r['peak_rss_over_weights']:.2f}x",
                f"{r['children_peak_rss_bytes'] / 1e6:.0f}",
            ]
        )
    print(
        table(
            [
                "variant",
                "seconds",
                "GB/s",
                "vs NPZ",
                "peak RSS / weights",
                "child processes' peak RSS, MB",
            ],
            rows,
            title=f"Loading {weight_bytes / 1e6:.0f} MB of float32 weights (median of "
            f"{args.repeats} fresh processes)",
        )
    )
    head = res["import_lux"]
    checks = {
        f"import_lux >= {TARGET_GBPS} GB/s": verdict(head["gb_per_s"], TARGET_GBPS, at_most=False),
        f"import_lux >= {TARGET_VS_NPZ}x NPZ": verdict(
            npz_s / head["seconds"], TARGET_VS_NPZ, at_most=False
        ),
        f"import_lux peak RSS <= {TARGET_RSS}x weights": verdict(
            head["peak_rss_over_weights"], TARGET_RSS, at_most=True
        ),
    }
    print("\n" + "\n".join(f"{k}: {v}" for k, v in checks.items()))
    modes = list(prof)
    phase_names = list(prof[modes[0]][0]["phases"])
    phase_rows = [
        [name] + [f"{median([p['phases'][name] for p in prof[m]]):.3f}" for m in modes]
        for name in phase_names
    ]
    print()
    print(
        table(
            ["phase of import_lux (profiled separately), seconds (median of 3)", *modes],
            phase_rows,
            title="Where import_lux's time goes",
        )
    )
    zc = prof[modes[0]][0]["device_put_zero_copy"]
    print(f"jax.device_put reused the numpy buffer (zero-copy) for {sum(zc)} of {len(zc)} arrays")
    path = write_json(
        "loading",
        {
            "weight_bytes": weight_bytes,
            "file_bytes": sizes,
            "build_seconds": build_s,
            "repeats": args.repeats,
            "prefault": args.prefault,
            "targets": {
                "gb_per_s_at_least": TARGET_GBPS,
                "vs_npz_at_least": TARGET_VS_NPZ,
                "peak_rss_over_weights_at_most": TARGET_RSS,
            },
            "checks": checks,
            "results": res,
            "profile": prof,
        },
        args.out,
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
