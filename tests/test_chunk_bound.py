"""A chunk larger than its dataset needs is refused before anything inflates it (issue 27).

The residual of issue 11's decompression bound: every deflate chunk is inflated with a bound,
but the bound is the chunk's *declared* size, so a (2,)-element dataset that claims a 1 GiB
chunk (legal for a resizable dataset) made the libhdf5 reader inflate 1 GiB (1.1 GB RSS,
about 35 s). A chunk larger than CHUNK_FACTOR x its dataset + CHUNK_SLACK is never useful, and
is refused on both routes: by juliabridge's own metadata reader in the caller (the layout
message) and by the libhdf5 reader process (``JULIABRIDGE_HDF5_FASTPATH=0``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.weights import _h5core, h5parse

REPO = Path(__file__).resolve().parents[1]


def _bomb(nbytes: int) -> bytes:
    """deflate of `nbytes` zeros, compressed piece by piece (no `nbytes` buffer here)."""
    z = zlib.compressobj(9)
    piece = bytes(1 << 20)
    out = [z.compress(piece) for _ in range(nbytes >> 20)]
    return b"".join(out) + z.flush()


def _weights(path: Path, n: int, chunk: int, data: bytes | None = None, **kw: object) -> Path:
    """A weights file whose /params/b holds `n` f32 in chunks of `chunk` elements."""
    with h5py.File(path, "w", **kw) as f:  # type: ignore[arg-type]
        ds = f.create_dataset(
            "params/b", shape=(n,), maxshape=(None,), chunks=(chunk,), dtype="<f4",
            compression="gzip",
        )  # fmt: skip
        ds.attrs["dtype"] = "f32"
        if data is None:
            ds[...] = np.arange(n, dtype=np.float32)
        else:
            ds.id.write_direct_chunk((0,), data)
    return path


@pytest.mark.parametrize("fast_path", ["1", "0"])
def test_a_one_gib_chunk_for_two_elements_is_refused_before_it_inflates(
    tmp_path: Path, fast_path: str
) -> None:
    path = _weights(tmp_path / "w.h5", 2, 1 << 28, data=_bomb(1 << 30))
    assert path.stat().st_size < 2 << 20
    code = f"""
        import json, resource, time
        import juliabridge
        t0 = time.monotonic()
        try:
            juliabridge.load_params({str(path)!r})
            out = {{"outcome": "ok"}}
        except juliabridge.JuliaBridgeError as e:
            out = {{"outcome": type(e).__name__, "message": str(e)}}
        out["seconds"] = time.monotonic() - t0
        out["children_peak_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # VmHWM, not RUSAGE_SELF: Linux's ru_maxrss survives exec, so it reports the forking
        # test process's own peak.
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
        out["self_peak_kib"] = int(hwm[0].split()[1])
        print(json.dumps(out))
    """
    env = dict(os.environ, PYTHONPATH=str(REPO), JULIABRIDGE_HDF5_FASTPATH=fast_path)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["outcome"] == "BundleError", out
    assert "is stored in chunks of 1073741824 bytes for 8 bytes of data" in out["message"], out
    assert "/params/b" in out["message"]
    assert out["seconds"] < 20, out
    assert out["children_peak_kib"] < 400_000 and out["self_peak_kib"] < 1_000_000, out


@pytest.mark.parametrize("fast_path", ["1", "0"])
def test_chunks_up_to_the_bound_load(
    tmp_path: Path, fast_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", fast_path)
    # A chunk shape written for larger data (1 KiB for 8 bytes) and one equal to the dataset.
    for n, chunk in ((2, 256), (1000, 1000), (1000, 300)):
        path = _weights(tmp_path / f"w{n}_{chunk}.h5", n, chunk)
        params, _ = juliabridge.load_params(path)
        np.testing.assert_array_equal(params["b"], np.arange(n, dtype=np.float32))


def test_the_two_readers_apply_one_rule() -> None:
    assert (h5parse.CHUNK_FACTOR, h5parse.CHUNK_SLACK) == (
        _h5core.CHUNK_FACTOR,
        _h5core.CHUNK_SLACK,
    )
    for chunk, nbytes in ((8, 8), (1 << 20, 0), ((1 << 20) + 1, 0), (1 << 30, 8), (41, 10)):
        assert h5parse.chunk_too_large("d", chunk, nbytes) == _h5core.chunk_too_large(
            "d", chunk, nbytes
        )
    assert h5parse.chunk_too_large("d", (1 << 20) + 40, 10) is None
    assert h5parse.chunk_too_large("d", (1 << 20) + 41, 10) is not None


@pytest.mark.parametrize("libver", ["earliest", "latest"])  # layout message v3, v4
@pytest.mark.parametrize(
    ("shape", "chunks", "dtype"),
    [
        ((2,), (2,), "<f4"),
        ((3, 4), (1, 4), "<f8"),
        ((5, 6, 7), (5, 2, 3), "<i2"),
        ((9,), (4,), "?"),
    ],
)
def test_the_metadata_reader_reads_chunk_sizes_as_libhdf5(
    tmp_path: Path, libver: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str
) -> None:
    path = tmp_path / "c.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("d", data=np.zeros(shape, dtype), chunks=chunks)
    with h5py.File(path, "r") as f:
        want = f["d"].dtype.itemsize * int(np.prod(f["d"].id.get_create_plist().get_chunk()))
    fd = os.open(path, os.O_RDONLY)
    try:
        meta = h5parse.open_metadata(fd, os.fstat(fd).st_size)
        assert meta.datasets["/d"].layout.chunk_bytes == want
    finally:
        os.close(fd)
