"""Pinned: digests cover every byte of files longer than any read buffer (spec §3.1, §4.1).

Every other test's files are far smaller than the buffers the readers hash through, so a digest
that covered only a prefix, skipped the last partial buffer or hashed one buffer twice would
pass them. Here the module and the weights are several buffers long with a partial last one,
and one byte is changed at the end, in the middle and in the last partial buffer; each route
that hashes the file must refuse each change with a ChecksumError naming it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest

import juliabridge
from juliabridge import ChecksumError
from juliabridge.bundle.weights import _worker
from juliabridge.bundle.weights.fastread import PASS_SLAB, SLAB, THREAD_ABOVE, sha256_fd
from juliabridge.bundle.write.upgrade import upgrade_bundle

from .pinned_support import Arg, dense_spec, edit, lower, write

#: The libhdf5 route hashes the whole file first, through sha256_fd's buffer.
FD_CHUNK = int(inspect.signature(sha256_fd).parameters["chunk"].default)
#: route -> (JULIABRIDGE_HDF5_FASTPATH, the buffer the file is hashed in, bytes of state)
ROUTES = {
    # the Python reader hashes the file as it reads it: in SLABs up to THREAD_ABOVE bytes,
    "python-small-slabs": ("1", SLAB, 3 * SLAB + 1),
    # in PASS_SLABs, read ahead by a second thread, above it
    "python-large-slabs": ("1", PASS_SLAB, max(4 * PASS_SLAB, THREAD_ABOVE) + 1),
    # the libhdf5 route hashes the whole file before libhdf5 sees it
    "libhdf5": ("0", FD_CHUNK, 3 * FD_CHUNK + 1),
}
WHERE = ["end", "middle", "last-partial-buffer"]


@pytest.fixture(autouse=True)
def _no_idle_reader() -> Iterator[None]:
    yield
    _worker.stop_idle()


def _big_bundle(tmp_path: Path, n: int) -> tuple[Path, int]:
    """The dense bundle with `n` bytes of ui8 state last in the file; and their offset."""
    spec, _ = dense_spec()
    rng = np.random.default_rng(1)
    spec.args.append(Arg("state", ["big"], rng.integers(0, 200, n, dtype=np.uint8)))
    spec.mlir = lower(lambda x, w, b, s: x @ w + b, *[a.value for a in spec.args])
    root = write(tmp_path / "big.bundle", spec)
    with h5py.File(root / "weights.h5") as f:
        offset = int(f["/state/big"].id.get_offset())
    assert offset + n == (root / "weights.h5").stat().st_size  # the state ends the file
    return root, offset


def _position(where: str, start: int, length: int, buffer: int) -> int:
    """The byte changed: in `length` bytes from `start`, hashed in pieces of `buffer`."""
    assert length % buffer != 0 and length > 2 * buffer  # several buffers and a partial one
    at = {
        "end": length - 1,
        "middle": length // 2,
        "last-partial-buffer": (length // buffer) * buffer,
    }[where]
    return start + at


def _flip(path: Path, at: int, bit: int = 0x40) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(1)[0]
        f.seek(at)
        f.write(bytes([old ^ bit]))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_byte_changed_anywhere_in_a_large_weights_file_fails_its_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, where: str
) -> None:
    fast, buffer, n = ROUTES[route]
    monkeypatch.setenv("JULIABRIDGE_HDF5_FASTPATH", fast)
    root, offset = _big_bundle(tmp_path, n)
    weights = root / "weights.h5"
    size = weights.stat().st_size
    np.testing.assert_array_equal(
        juliabridge.load_params(root)[1]["big"][-5:], h5py.File(weights)["/state/big"][-5:]
    )
    at = _position(where, 0, size, buffer)
    assert offset <= at < size  # a value changes, not the metadata
    _flip(weights, at)
    with pytest.raises(ChecksumError) as e:
        juliabridge.import_lux(root)
    assert str(e.value).startswith(f"{weights}: sha256 is ")
    assert "but manifest.json records" in str(e.value)


@pytest.mark.parametrize("where", WHERE)
def test_a_byte_changed_anywhere_in_a_large_dataset_fails_its_blake3(
    tmp_path: Path, where: str
) -> None:
    # Format 3 without a whole-file sha256: only the dataset's digest, hashed in SLABs, can tell.
    n = 3 * SLAB + 1
    root, offset = _big_bundle(tmp_path, n)
    upgrade_bundle(root)
    edit(root, lambda m: m["weights"].pop("sha256", None), seal=False)
    assert juliabridge.import_lux(root).manifest.format_version == 3
    _flip(root / "weights.h5", _position(where, offset, n, SLAB))
    with pytest.raises(ChecksumError) as e:
        juliabridge.import_lux(root)
    assert str(e.value).startswith(
        f"{root / 'weights.h5'}: state.big (/state/big): the blake3 of its stored bytes is "
    )


@pytest.mark.parametrize("where", WHERE)
def test_a_byte_changed_anywhere_in_a_large_module_fails_its_sha256(
    tmp_path: Path, where: str
) -> None:
    spec, _ = dense_spec()
    lead = spec.mlir + "\n// "
    spec.mlir = lead + "a" * (3 * FD_CHUNK + 2 - len(lead) - 1) + "\n"
    root = write(tmp_path / "m.bundle", spec)
    module = root / "model.mlir"
    assert module.stat().st_size == 3 * FD_CHUNK + 2
    juliabridge.import_lux(root)
    at = _position(where, 0, module.stat().st_size - 1, FD_CHUNK)  # the comment, not its newline
    assert module.read_bytes()[at] == ord("a")
    _flip(module, at, 0x03)  # "a" -> "b": still a comment, the module parses the same
    with pytest.raises(ChecksumError) as e:
        juliabridge.import_lux(root)
    assert str(e.value).startswith(f"{module}: sha256 is ")


@pytest.mark.parametrize("where", WHERE)
def test_datasets_read_in_parallel_are_each_checked_and_read_whole(
    tmp_path: Path, where: str
) -> None:
    # Several datasets of more than THREAD_ABOVE bytes in all are read by a thread pool, each
    # hashed in SLABs: every one must arrive whole, and a change in any one be found in it.
    n = (THREAD_ABOVE // 3) + SLAB + 1  # each several slabs and a partial one
    spec, _ = dense_spec()
    rng = np.random.default_rng(2)
    values = [rng.integers(0, 200, n, dtype=np.uint8) for _ in range(3)]
    for k, v in enumerate(values):
        spec.args.append(Arg("state", [f"s{k}"], v))
    spec.mlir = lower(lambda x, w, b, *s: x @ w + b, *[a.value for a in spec.args])
    root = write(tmp_path / "par.bundle", spec)
    upgrade_bundle(root)
    edit(root, lambda m: m["weights"].pop("sha256", None), seal=False)
    _, state = juliabridge.load_params(root)
    for k, v in enumerate(values):
        np.testing.assert_array_equal(state[f"s{k}"], v)
    with h5py.File(root / "weights.h5") as f:
        offset = int(f["/state/s1"].id.get_offset())
    _flip(root / "weights.h5", _position(where, offset, n, SLAB))
    with pytest.raises(ChecksumError) as e:
        juliabridge.import_lux(root)
    assert str(e.value).startswith(
        f"{root / 'weights.h5'}: state.s1 (/state/s1): the blake3 of its stored bytes is "
    )
