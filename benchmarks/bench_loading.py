"""Loading: a bundle with ~500 MB of weights read into JAX arrays, vs NPZ and vs a raw read.

    python benchmarks/bench_loading.py [--mb 512] [--repeats 5] [--workdir DIR] [--quick]

It writes a bundle of a wide MLP (Lux ``Chain(Dense(4096 => 4096, relu), ...)``, float32)
whose weights total about `--mb` MiB (bundle format 3, as the writers make it: every dataset's
BLAKE3 in the manifest), a format-2 twin whose manifest has every dataset's sha256 instead and a
format-1 twin whose manifest has the whole file's sha256 (same weights file, hard-linked), the
same weights as a compressed NPZ
(what Reactant's ``export_to_enzymejax`` writes: ``np.savez_compressed`` with keys
``arr_1..N``), and then times, each in a fresh Python process (so peak memory is that
variant's own):

- ``import_lux, format 1``: ``juliabridge.import_lux(bundle)`` until every parameter is a ready
  JAX array, verifying the whole file's sha256 (one pass in file order: bytes read straight
  into aligned buffers while a second thread hashes them);
- ``import_lux, format 3``: the same with per-dataset BLAKE3 digests, hashed while read, in
  parallel over datasets (what both writers write);
- ``import_lux, format 2``: the same with per-dataset sha256 digests;
- ``import_lux, no sha256``: ``verify_checksums=False``;
- ``import_lux, libhdf5 reader process``: ``JULIABRIDGE_HDF5_FASTPATH=0``, i.e. the route every
  file took before the pure-Python metadata reader (HDF5 read by libhdf5 in a sandboxed
  process, streamed through a pipe, whole-file sha256 in a pass of its own);
- ``npz``: ``np.load`` + ``jnp.asarray`` of every array;
- ``raw read + memcpy``: the weights file read into one buffer and copied once, the
  physical limit of a loader that reads the file and hands over a copy;
- ``sha256 of weights.h5``: hashlib over the file on one core, the floor of format 1;
- ``blake3 of weights.h5``: BLAKE3 over the file on one core (one hasher, no threads).

Throughput is weight bytes / wall time (GB = 1e9 bytes). Peak RSS is the rise of the
process's resident-set high-water mark during the load (VmHWM, reset through
/proc/self/clear_refs where the kernel allows) plus the peak RSS of the processes the load
starts (the libhdf5 reader process; from ``getrusage(RUSAGE_CHILDREN)``, so no thread polls
while the clock runs), over the weight bytes. Libraries (jax, juliabridge,
enzyme-ad) are imported and the JAX backend started before the clock starts; that one-time
cost is not loading. Files are read from the page cache (a warm-up round runs first), and each
process touches (then frees) 3x the weights' size of memory before the clock starts
(``--no-prefault`` turns this off; see ``child``). Targets (issue 13): format 3 within 1.25x of
the raw read + memcpy of the same run, peak RSS of all processes <= 1.1x the weights. The big
files are deleted at the end (``--keep`` keeps them). ``--quick`` (a smoke test, with e.g.
``--mb 1 --repeats 1``) skips the warm-up round and profiles each mode once.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

F1 = "import_lux, format 1 (whole-file sha256)"
F2 = "import_lux, format 2 (per-dataset sha256)"
F3 = "import_lux, format 3 (per-dataset BLAKE3)"
NOSHA = "import_lux, no sha256"
LIBHDF5 = "import_lux, libhdf5 reader process (FASTPATH=0: the route before)"
NPZ = "npz"
RAW = "raw read + memcpy"
SHA = "sha256 of weights.h5 (one core)"
B3 = "blake3 of weights.h5 (one core)"
VARIANTS = (F1, F2, F3, NOSHA, LIBHDF5, NPZ, RAW, SHA, B3)
TARGET_VS_RAW = 1.25
TARGET_RSS = 1.1
WIDTH = 4096
FAST_ENV = "JULIABRIDGE_HDF5_FASTPATH"
#: "poll" when --poll-children asks for the old instrument (set by main, read by run_child).
POLL = ["nopoll"]


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


class _ChildPeak:
    """Peak RSS of the child processes started during a load (e.g. the HDF5 reader process).

    VmHWM of this process does not count them. The kernel does: ``getrusage(RUSAGE_CHILDREN)``
    gives the largest peak RSS of any child this process has waited for, at no cost while the
    load runs; adding it to this process's own peak bounds all processes' peak together when
    at most one child runs. A child still running at the end is read once from /proc. Where
    processes are expected (the libhdf5 route) or ``--poll-children`` asks, a thread also polls
    /proc every millisecond and sums every child's peak (the instrument of earlier runs); it
    is off elsewhere because it takes the GIL and a core from the loader's own threads.
    """

    def __init__(self, poll: bool = False) -> None:
        self._before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        self._poller = _ChildPoller() if poll else None
        self._peak_kib = 0

    def stop(self) -> None:
        after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # ru_maxrss is a maximum, not a sum: a child during the load shows only if its peak
        # beat every earlier child's; the parent checks `children_before_kib` is 0.
        self._peak_kib = after if after > self._before else 0
        self._peak_kib += sum(_hwm_kib(pid) for pid in _children())
        if self._poller is not None:
            self._poller.stop()
            self._peak_kib = max(self._peak_kib, self._poller.peak_kib())

    @property
    def before_kib(self) -> int:
        return self._before

    def peak_bytes(self) -> int:
        return 1024 * self._peak_kib


def _children() -> set[int]:
    """Live children of every thread of this process."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(p) for p in (task / "children").read_text().split())
    return pids


def _hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class _ChildPoller:
    """The old instrument (``--poll-children``): /proc polled every millisecond by a thread."""

    def __init__(self) -> None:
        import threading

        self._peaks: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            for pid in _children():
                self._peaks[pid] = max(self._peaks.get(pid, 0), _hwm_kib(pid))
            time.sleep(0.001)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def peak_kib(self) -> int:
        return sum(self._peaks.values())


def _profile_import(bundle: Path) -> dict[str, Any]:
    """import_lux's phases, timed one by one with the functions it calls (internal API)."""
    import jax

    from juliabridge.bundle import open_bundle
    from juliabridge.lux.trees import build_tree

    phases: dict[str, float] = {}
    t = time.perf_counter()
    b = open_bundle(bundle, defer_weights=True)
    phases["open_bundle (manifest; module read once, sha256, MLIR parse; checks)"] = (
        time.perf_counter() - t
    )
    requests = b.weight_requests()
    t = time.perf_counter()
    with b.open_weights(requests) as f:
        phases["open weights.h5 + its HDF5 metadata, parsed in Python"] = time.perf_counter() - t
        t = time.perf_counter()
        arrays = list(f.read(requests))
        phases["read every dataset + verify its digest (format 1: the whole file's)"] = (
            time.perf_counter() - t
        )
        mode = f.mode
    t = time.perf_counter()
    leaves = []
    zero_copy = []
    for r, host in arrays:
        dev = jax.device_put(host)
        zero_copy.append(dev.unsafe_buffer_pointer() == host.ctypes.data)
        leaves.append((tuple(r.dataset.split("/")[2:]), dev))
    jax.block_until_ready([d for _, d in leaves])
    phases["jax.device_put (all arrays)"] = time.perf_counter() - t
    t = time.perf_counter()
    build_tree(leaves)
    phases["build_tree"] = time.perf_counter() - t
    return {"phases": phases, "device_put_zero_copy": zero_copy, "reader": mode}


def child(variant: str, bundle: Path, npz: Path, prefault: bool, poll: bool) -> None:
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
    # The libhdf5 route starts processes (more than one: getrusage keeps only the largest).
    sampler = _ChildPeak(poll or variant == LIBHDF5)
    t = time.perf_counter()
    if variant in (F1, F2, F3, LIBHDF5):  # run_child picks the bundle / sets the environment
        model = juliabridge.import_lux(bundle)
        jax.block_until_ready(model.params)
        extra["checksums_verified"] = model.metadata["checksums_verified"]
    elif variant == NOSHA:
        model = juliabridge.import_lux(bundle, verify_checksums=False)
        jax.block_until_ready(model.params)
    elif variant == NPZ:
        with np.load(npz) as z:
            arrays = [jnp.asarray(z[k]) for k in z.files]
        jax.block_until_ready(arrays)
    elif variant == RAW:
        size = weights.stat().st_size
        buf = np.empty(size, np.uint8)
        view = memoryview(buf)
        got = 0
        with open(weights, "rb", buffering=0) as f:
            while got < size:  # one read returns at most 2 GiB - 4 KiB on Linux
                n = f.readinto(view[got:])
                assert n, "file shorter than its size"
                got += n
        dst = np.empty_like(buf)
        np.copyto(dst, buf)
    elif variant in (SHA, B3):
        import blake3

        h = hashlib.sha256() if variant == SHA else blake3.blake3()
        with open(weights, "rb", buffering=0) as f:
            while block := f.read(1 << 20):
                h.update(block)
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
                "children_before_kib": sampler.before_kib,
                "hwm_reset": reset,
                **extra,
            }
        )
    )


# ----------------------------------------------------------------------------------------
# Parent: build the files, run the children, report


def run_child(
    variant: str, bundles: dict[str, Path], npz: Path, prefault: bool, fast: bool = True
) -> dict[str, Any]:
    from common import run_json_child

    env = {FAST_ENV: "0"} if variant == LIBHDF5 or not fast else {}
    bundle = bundles[{F2: "v2", F3: "v3"}.get(variant, "v1")]
    flag = "prefault" if prefault else "cold"
    args = ["--child", variant, str(bundle), str(npz), flag, POLL[0]]
    return run_json_child(__file__, args, repr(variant), env)


def _twin(bundle: Path, target: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """`target` with `names` of `bundle` hard-linked (copied where links fail); its manifest."""
    target.mkdir()
    for name in names:
        try:
            os.link(bundle / name, target / name)
        except OSError:
            shutil.copyfile(bundle / name, target / name)
    manifest: dict[str, Any] = json.loads((bundle / "manifest.json").read_text())
    return manifest


def as_format_1(bundle: Path, target: Path) -> Path:
    """A format-1 twin of format-3 `bundle` (weights hard-linked): whole-file sha256 only.

    The inverse of `juliabridge upgrade` (spec §8): no artifact, no per-dataset digests.
    """
    from juliabridge.bundle.files.checksum import sha256_file

    manifest = _twin(bundle, target, ("weights.h5", "model.mlir"))
    manifest["format_version"] = 1
    manifest["module"].pop("artifact", None)
    for a in manifest["arguments"]:
        a.pop("blake3", None)
    manifest.pop("static_state", None)
    manifest["weights"]["sha256"] = sha256_file(target / "weights.h5")
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return target


def as_format_2(bundle: Path, target: Path, params: dict[str, Any]) -> Path:
    """A format-2 twin of format-3 `bundle` (files hard-linked): per-dataset sha256 of
    `params` (the arrays written, float32 little-endian here) instead of their BLAKE3."""
    manifest = _twin(bundle, target, ("weights.h5", "model.mlir", "model.mlirbc"))
    manifest["format_version"] = 2
    for a in manifest["arguments"]:
        if "dataset" in a:
            value = params[a["path"][0]][a["path"][1]]
            a.pop("blake3")
            a["sha256"] = hashlib.sha256(value.astype("<f4").tobytes()).hexdigest()
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return target


def build(
    work: Path, mb: float, npz_too: bool = True
) -> tuple[dict[str, Path], Path, int, dict[str, float]]:
    import numpy as np
    from common import mlp_case

    layers = max(1, round(mb * 2**20 / (WIDTH * WIDTH * 4)))
    timings = {}
    t = time.perf_counter()
    case = mlp_case(work, widths=[WIDTH] * (layers + 1), batch=4, name="big_mlp", examples=False)
    timings["write bundle"] = time.perf_counter() - t
    t = time.perf_counter()
    v1 = as_format_1(case.bundle, work / "big_mlp_v1.bundle")
    timings["format-1 twin (whole-file sha256)"] = time.perf_counter() - t
    t = time.perf_counter()
    v2 = as_format_2(case.bundle, work / "big_mlp_v2.bundle", case.params)
    timings["format-2 twin (per-dataset sha256)"] = time.perf_counter() - t
    npz = work / "big_mlp_inputs.npz"
    leaves = [
        case.params[f"layer_{i}"][key] for i in range(1, layers + 1) for key in ("weight", "bias")
    ]
    if npz_too:
        t = time.perf_counter()
        np.savez_compressed(npz, **{f"arr_{i}": a for i, a in enumerate(leaves, start=1)})
        timings["write compressed NPZ"] = time.perf_counter() - t
    return {"v1": v1, "v2": v2, "v3": case.bundle}, npz, case.weight_bytes, timings


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        prefault, poll = sys.argv[5] == "prefault", sys.argv[6] == "poll"
        child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), prefault, poll)
        return
    from common import median, table, verdict, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=512, help="weights to write, in MiB")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per variant")
    parser.add_argument("--workdir", type=Path, default=None, help="where the big files go")
    parser.add_argument("--keep", action="store_true", help="keep the bundle and NPZ")
    parser.add_argument("--no-npz", action="store_true", help="skip the (slow) NPZ variant")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test (with e.g. --mb 1 --repeats 1): no warm-up round, each mode of "
        "the phase profile run once",
    )
    parser.add_argument(
        "--no-prefault",
        dest="prefault",
        action="store_false",
        help="do not pre-touch memory in each process (see the module docstring)",
    )
    parser.add_argument(
        "--poll-children",
        action="store_true",
        help="also poll /proc every millisecond for child processes' peak RSS (the old "
        "instrument; its thread competes with the loader's, see _ChildPeak)",
    )
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    parser.add_argument("--name", default="loading", help="results file name (NAME.json)")
    args = parser.parse_args()
    POLL[0] = "poll" if args.poll_children else "nopoll"
    variants = tuple(v for v in VARIANTS if not (args.no_npz and v == NPZ))
    work = Path(tempfile.mkdtemp(prefix="juliabridge-bench-loading-", dir=args.workdir))
    try:
        bundles, npz, weight_bytes, build_s = build(work, args.mb, NPZ in variants)
        sizes = {"weights.h5": (bundles["v1"] / "weights.h5").stat().st_size}
        if NPZ in variants:
            sizes["npz"] = npz.stat().st_size
        print(
            f"weights {weight_bytes / 1e6:.1f} MB; weights.h5 {sizes['weights.h5'] / 1e6:.1f} MB;"
            + (f" NPZ {sizes['npz'] / 1e6:.1f} MB" if "npz" in sizes else "")
            + " (built in "
            + ", ".join(f"{k} {v:.1f} s" for k, v in build_s.items())
            + ")"
        )
        for v in () if args.quick else variants:  # warm-up round: page cache, .pyc files
            run_child(v, bundles, npz, args.prefault)
        samples: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for r in range(args.repeats):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for v in order:
                samples[v].append(run_child(v, bundles, npz, args.prefault))
        profiles = 1 if args.quick else 3
        prof = {
            mode: [
                run_child("profile", {"v1": b}, npz, args.prefault, fast) for _ in range(profiles)
            ]
            for mode, b, fast in (
                ("format 1", bundles["v1"], True),
                ("format 2", bundles["v2"], True),
                ("format 3", bundles["v3"], True),
                ("libhdf5 reader process", bundles["v1"], False),
            )
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res: dict[str, dict[str, Any]] = {}
    for v, runs in samples.items():
        sec = median([s["seconds"] for s in runs])
        peak = max(s["peak_rise_bytes"] for s in runs)
        children = max(s.get("children_peak_rss_bytes", 0) for s in runs)
        together = max(s["peak_rise_bytes"] + s.get("children_peak_rss_bytes", 0) for s in runs)
        res[v] = {
            "seconds": sec,
            "gb_per_s": weight_bytes / sec / 1e9,
            "peak_rss_rise_bytes": peak,
            "children_peak_rss_bytes": children,
            "all_processes_peak_over_weights": together / weight_bytes,
            "runs": runs,
        }
    raw_s = res[RAW]["seconds"]
    npz_s = res[NPZ]["seconds"] if NPZ in res else None
    rows = []
    for v in variants:
        r = res[v]
        rows.append(
            [
                v,
                f"{r['seconds']:.3f}",
                f"{r['gb_per_s']:.2f}",
                f"{r['seconds'] / raw_s:.2f}x",
                f"{npz_s / r['seconds']:.1f}x" if npz_s else "",
                f"{r['all_processes_peak_over_weights']:.2f}x",
                f"{r['children_peak_rss_bytes'] / 1e6:.0f}",
            ]
        )
    print(
        table(
            [
                "variant",
                "seconds",
                "GB/s",
                "time vs raw read + memcpy",
                "speed vs NPZ",
                "peak RSS of all processes / weights",
                "of which child processes, MB",
            ],
            rows,
            title=f"Loading {weight_bytes / 1e6:.0f} MB of float32 weights (median of "
            f"{args.repeats} fresh processes)",
        )
    )
    checks = {}
    for v in (F3, F2, F1):
        checks[f"{v} <= {TARGET_VS_RAW}x raw read + memcpy"] = verdict(
            res[v]["seconds"] / raw_s, TARGET_VS_RAW, at_most=True
        )
        checks[f"{v}: peak RSS of all processes <= {TARGET_RSS}x weights"] = verdict(
            res[v]["all_processes_peak_over_weights"], TARGET_RSS, at_most=True
        )
    print("\n" + "\n".join(f"{k}: {v}" for k, v in checks.items()))
    if any(s.get("children_before_kib", 0) for runs in samples.values() for s in runs):
        print(
            "note: a child process ran before the clock started in some runs, so "
            "getrusage could hide a smaller child of the load (rerun with --poll-children)"
        )
    modes = list(prof)
    phase_names = list(prof[modes[0]][0]["phases"])
    phase_rows = [
        [name] + [f"{median([p['phases'][name] for p in prof[m]]):.3f}" for m in modes]
        for name in phase_names
    ]
    print()
    print(
        table(
            [f"phase of import_lux (profiled separately), seconds (median of {profiles})", *modes],
            phase_rows,
            title="Where import_lux's time goes",
        )
    )
    for m in modes:
        zc = prof[m][0]["device_put_zero_copy"]
        print(
            f"{m}: reader {prof[m][0]['reader']}; jax.device_put adopted the host buffer "
            f"(zero-copy) for {sum(zc)} of {len(zc)} arrays"
        )
    path = write_json(
        args.name,
        {
            "weight_bytes": weight_bytes,
            "file_bytes": sizes,
            "build_seconds": build_s,
            "repeats": args.repeats,
            "prefault": args.prefault,
            "poll_children": args.poll_children,
            "targets": {
                "time_vs_raw_read_memcpy_at_most": TARGET_VS_RAW,
                "peak_rss_all_processes_over_weights_at_most": TARGET_RSS,
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
