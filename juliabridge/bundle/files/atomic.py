"""Atomic replacement of files and bundle directories, and cleanup after a killed writer.

A writer builds its output under a hidden temporary name next to the target,
``.NAME.jbtmp~HOST~PID~RANDOM``, flushes it to disk, then renames it over the target in one
step. Readers only ever see the old or the new content under the final name. A writer that is
killed (SIGKILL, power loss) can leave its temporary behind; the next write to the same target
removes temporaries whose writer process is gone (same host, PID no longer running). Such a
leftover is never read by juliabridge: its name differs from every name a manifest may use.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import socket
import sys
from pathlib import Path

TMP_MARK = ".jbtmp~"
_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname() or "host")[:64]


def temp_path(target: Path) -> Path:
    """A fresh hidden name next to `target` that marks this host and process as its writer."""
    return target.parent / f".{target.name}{TMP_MARK}{_HOST}~{os.getpid()}~{secrets.token_hex(4)}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # e.g. EPERM: it exists, owned by someone else
    return True


def stale_temporaries(target: Path) -> list[Path]:
    """Temporaries of `target` left by writers on this host whose process no longer runs."""
    if os.name != "posix":
        return []  # os.kill(pid, 0) is not a liveness probe everywhere
    out = []
    prefix = f".{target.name}{TMP_MARK}"
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return []
    for p in entries:
        if not p.name.startswith(prefix):
            continue
        parts = p.name[len(prefix) :].split("~")
        if len(parts) != 3 or parts[0] != _HOST or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid != os.getpid() and not _alive(pid):
            out.append(p)
    return out


def clean_stale(target: Path) -> None:
    """Remove what `stale_temporaries` finds (best effort)."""
    for p in stale_temporaries(target):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()


def create_file(path: Path) -> None:
    """Create `path` exclusively, with the usual umask-derived permissions (not mkstemp's 0600)."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a file's content to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (renames, creations) to disk, where the OS supports it."""
    if os.name != "posix":
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_file(path: Path, data: bytes) -> None:
    """Replace `path` by `data` in one rename, flushed to disk; permissions from the umask
    (not mkstemp's 0600). Temporaries of dead writers are removed first; this one is removed
    on failure.

    Raises:
        OSError: the temporary could not be written or renamed.
    """
    clean_stale(path)
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
