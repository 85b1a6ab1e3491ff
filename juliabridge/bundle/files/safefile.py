"""Opening a bundle's files without following symlinks, and reading them once.

Every file juliabridge reads from a bundle (and the file `load_params` is given) is opened
here: ``O_NOFOLLOW`` (a symlink is refused, not followed), relative to the bundle directory's
own descriptor where the platform allows (the name cannot resolve outside it), ``O_NONBLOCK``
while opening (a FIFO cannot block), then checked with ``fstat`` to be a regular file. The
descriptor is what gets hashed and parsed afterwards: nothing is looked up by name twice.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ...errors import BundleError, UnsafeBundleError

HF_HINT = (
    "copy it to a plain directory first (`cp -rL SRC DST`, or huggingface_hub's "
    "snapshot_download(..., local_dir=DST)), so that it holds regular files"
)


def kind_of(mode: int) -> str:
    """'a directory', 'a named pipe', ... for an `st_mode`."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a special file"


_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def symlink_error(path: Path, what: str) -> UnsafeBundleError:
    """The refusal of a symlinked file."""
    return UnsafeBundleError(
        f"{path}: {what} is a symlink; a bundle holds regular files only (symlinks could point "
        f"anywhere). If this is a model-hub cache, {HF_HINT}"
    )


def open_regular(path: Path, what: str, *, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """(descriptor, fstat) of the regular file `path` (`path.name` inside `dir_fd` if given).

    Raises UnsafeBundleError for a symlink, BundleError for anything else that is not a
    readable regular file.
    """
    target: str | Path = path.name if dir_fd is not None else path
    try:
        fd = os.open(target, _FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise BundleError(f"{path}: {what} is missing") from None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK) or (
            os.path.islink(path) and e.errno != errno.EACCES
        ):
            raise symlink_error(path, what) from None
        raise BundleError(
            f"{path}: cannot open {what} ({e.strerror or e}); check its permissions"
        ) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path}: {what} must be a regular file, found {kind_of(st.st_mode)}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


@contextlib.contextmanager
def directory(path: Path) -> Iterator[int | None]:
    """A descriptor of directory `path` for `open_regular(dir_fd=...)`, or None where the
    platform cannot open files relative to one."""
    if os.open not in os.supports_dir_fd or not hasattr(os, "O_DIRECTORY"):
        yield None
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise BundleError(f"{path}: cannot open the directory ({e.strerror or e})") from e
    try:
        yield fd
    finally:
        os.close(fd)


def read_all(fd: int, size: int, path: Path, what: str) -> bytes:
    """The first `size` bytes of `fd` (its size when opened); a file that shrank is an error."""
    out = bytearray(size)
    view = memoryview(out)
    got = 0
    while got < size:
        try:
            n = read_at(fd, view[got:], got)
        except OSError as e:
            raise BundleError(f"{path}: cannot read {what} ({e.strerror or e})") from e
        if n <= 0:
            raise BundleError(f"{path}: {what} became shorter while it was read")
        got += n
    return bytes(out)


def read_at(fd: int, view: memoryview, offset: int) -> int:
    """Read up to len(view) bytes at `offset` into `view`; the count read (0 at the end).

    preadv where the platform has it; elsewhere (Windows) a seek and a read, so the caller
    must not share `fd` between threads there.
    """
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.readv(fd, [view]) if hasattr(os, "readv") else _copy(os.read(fd, len(view)), view)


def _copy(data: bytes, view: memoryview) -> int:
    view[: len(data)] = data
    return len(data)
