"""Opening an export's files: once each, non-blocking, without following symlinks.

Each file of an export directory (the .py, the .mlir, the npz) is opened here with the bundle
reader's flags (bundle/files/safefile.py): ``O_NOFOLLOW`` (a symlink is refused, not
followed), ``O_NONBLOCK`` while opening (a FIFO named as the .py or npz cannot block), then
checked with ``fstat`` to be a regular file. Everything is then read through that descriptor:
nothing is looked up by name again, so a file swapped for a symlink after the checks is never
read (the module `convert` copies into the bundle is the text that was checked).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..bundle.files.safefile import open_regular, read_all
from ..errors import BundleError, UnsafeBundleError


def _open(path: Path, what: str) -> tuple[int, os.stat_result]:
    try:
        return open_regular(path, what)
    except UnsafeBundleError as e:
        raise UnsafeBundleError(
            f"{path}: is a symlink; an export's files are read only as regular files inside its "
            "directory"
        ) from e
    except BundleError as e:
        if "must be a regular file" in str(e):
            raise UnsafeBundleError(f"{path}: is not a regular file ({e})") from e
        raise


@contextlib.contextmanager
def opened(path: Path, what: str) -> Iterator[tuple[int, int]]:
    """(descriptor, size) of the regular file `path`, closed on exit.

    Raises:
        UnsafeBundleError: a symlink, or not a regular file (a FIFO, a directory, a device).
        BundleError: missing or unreadable.
    """
    fd, st = _open(path, what)
    try:
        yield fd, st.st_size
    finally:
        os.close(fd)


def read_bytes(path: Path, what: str, limit: int, error: type[BundleError] = BundleError) -> bytes:
    """All of the regular file `path`, at most `limit` bytes, read through one descriptor.

    A file whose size stat does not tell (procfs reports 0) is bounded by what is read.

    Raises:
        UnsafeBundleError: a symlink or not a regular file.
        `error` (a BundleError): missing, unreadable, or larger than `limit`.
    """
    with opened(path, what) as (fd, size):
        if size > limit:
            raise error(f"{path}: {size} bytes, more than the {limit} allowed")
        data = read_all(fd, size, path, what) if size else b""
        # Anything past the size stat gave (procfs, a file that grew): bounded by the limit.
        with os.fdopen(os.dup(fd), "rb") as f:
            f.seek(len(data))
            more = f.read(limit + 1 - len(data))
    if len(data) + len(more) > limit:
        raise error(f"{path}: more than the {limit} bytes allowed")
    return data + more


__all__ = ["opened", "read_bytes"]
