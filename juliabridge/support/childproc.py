"""The one way juliabridge starts a helper process on untrusted input.

The artifact reader (stablehlo/_artifact_child.py), the HDF5 reader (bundle/weights/_h5core.py) and
the Enzyme derivation child (backends/enzyme/sandbox.py) read bytes a bundle supplies, in C++
libraries that can crash or allocate on them. Each starts through `start` or `run` here, so
each gets the same four protections, never a subset:

- **isolated mode** (``python -I``): no ``PYTHON*`` variables, no user site directory, neither
  the script's nor the working directory on ``sys.path``;
- **a scrubbed environment**: only the dynamic loader's variables, the locale and the
  temporary directory are kept (`KEEP_ENV`), plus what the caller adds explicitly;
- **a neutral working directory**: the file system root unless the caller gives a private
  directory it created;
- **bounded memory and time**: the address space of data segments (``RLIMIT_DATA``, which
  counts ``brk`` and private writable ``mmap``) and, where given, CPU seconds
  (``RLIMIT_CPU``) are capped by a bootstrap in the child before any of its code is imported;
  the wall-clock bound is the caller's (a ``run`` timeout, or the caller's watchdog).

tests/test_childproc.py enumerates every process-starting call in the package and fails when
one does not go through here (the Julia driver, which runs the user's own Julia script with
the user's environment on purpose, is the one documented exception).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

#: Environment variables a helper keeps: the dynamic loader's, the locale, a temp dir.
KEEP_ENV = (
    "PATH",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
    "DYLD_FALLBACK_LIBRARY_PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "SYSTEMROOT",
)

#: Runs in the child before its own code: caps memory and CPU, then runs the entry point.
#: Only ``resource``, ``runpy`` and ``sys`` are imported (all built into the interpreter).
_BOOT = """\
import sys
def _cap(name, n):
    try:
        import resource
    except ImportError:
        return
    kind = getattr(resource, name, None)
    if kind is None or n is None:
        return
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        n = min(n, hard)
    resource.setrlimit(kind, (n, n))
_cap("RLIMIT_DATA", {memory!r})
_cap("RLIMIT_CPU", {cpu!r})
del _cap
{entry}
"""
#: The directory holding this juliabridge package (this file is juliabridge/support/childproc.py):
#: a ``package.module:function`` entry imports from there, so the child runs the parent's code
#: even from a checkout that is not installed (isolated mode ignores PYTHONPATH).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SCRIPT = "import runpy; sys.argv[0] = {path!r}; runpy.run_path({path!r}, run_name='__main__')"
_CALL = "sys.path.insert(0, {root!r}); from {module} import {function}; {function}()"


def physical_memory() -> int:
    """Bytes of physical memory of this machine (1 TiB where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def helper_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A helper's environment: `KEEP_ENV` from this process's, then `extra`.

    Args:
        extra: variables the helper needs set (thread counts, a temp dir, a platform).

    Returns:
        The environment mapping to start the child with.
    """
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def helper_argv(
    entry: str, args: Sequence[str] = (), *, memory: int, cpu_seconds: int | None = None
) -> list[str]:
    """The command line of a helper: ``python -I -c BOOTSTRAP [args]``.

    Args:
        entry: a path to a Python script, or ``"package.module:function"`` (imported from the
            directory this juliabridge is installed in, then called without arguments).
        args: the child's ``sys.argv[1:]``.
        memory: the cap on the child's data segments, in bytes.
        cpu_seconds: the cap on its CPU time, or None for none (a long-lived child).

    Returns:
        The argument vector.
    """
    if not entry.endswith(".py"):
        module, function = entry.split(":", 1)
        root = _PACKAGE_PARENT
        code = _CALL.format(root=root, module=module, function=function)
    else:
        code = _SCRIPT.format(path=os.path.abspath(entry))
    boot = _BOOT.format(memory=int(memory), cpu=cpu_seconds, entry=code)
    return [sys.executable, "-I", "-c", boot, *args]


def start(
    entry: str,
    args: Sequence[str] = (),
    *,
    memory: int,
    cpu_seconds: int | None = None,
    cwd: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    stdin: int | IO[Any] | None = subprocess.PIPE,
    stdout: int | IO[Any] | None = subprocess.PIPE,
    stderr: int | IO[Any] | None = subprocess.PIPE,
    pass_fds: Sequence[int] = (),
    bufsize: int = 0,
) -> subprocess.Popen[bytes]:
    """Start a helper process isolated, scrubbed, in a neutral directory, memory-bounded.

    Args:
        entry: the script path or ``"package.module:function"`` (see `helper_argv`).
        args: the child's ``sys.argv[1:]``.
        memory: cap on the child's data segments, bytes.
        cpu_seconds: cap on its CPU seconds, or None.
        cwd: its working directory: a directory the caller created for it; default ``/``.
        extra_env: variables added to the scrubbed environment.
        stdin: as for ``subprocess.Popen``.
        stdout: as for ``subprocess.Popen``.
        stderr: as for ``subprocess.Popen``.
        pass_fds: descriptors the child inherits (all others are closed).
        bufsize: as for ``subprocess.Popen`` (default unbuffered).

    Returns:
        The running process (binary pipes).

    Raises:
        OSError: the interpreter could not be started.
    """
    return subprocess.Popen(
        helper_argv(entry, args, memory=memory, cpu_seconds=cpu_seconds),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        bufsize=bufsize,
        env=helper_env(extra_env),
        cwd=cwd if cwd is not None else os.path.abspath(os.sep),
        close_fds=True,
        pass_fds=tuple(pass_fds),
    )


def run(
    entry: str,
    args: Sequence[str] = (),
    *,
    input: bytes,
    timeout: float,
    memory: int,
    cpu_seconds: int | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a helper to completion (as `start`), feeding `input`, within `timeout` seconds.

    Args:
        entry: the script path or ``"package.module:function"``.
        args: the child's ``sys.argv[1:]``.
        input: bytes written to its stdin.
        timeout: wall-clock seconds before it is killed.
        memory: cap on its data segments, bytes.
        cpu_seconds: cap on its CPU seconds (default: the timeout, rounded up).
        extra_env: variables added to the scrubbed environment.

    Returns:
        The completed process, stdout and stderr captured.

    Raises:
        subprocess.TimeoutExpired: it ran past `timeout` (it was killed).
        OSError: the interpreter could not be started.
    """
    cpu = cpu_seconds if cpu_seconds is not None else int(timeout) + 1
    with start(
        entry, args, memory=memory, cpu_seconds=cpu, extra_env=extra_env, stderr=subprocess.PIPE
    ) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        rc = proc.poll()
    return subprocess.CompletedProcess(proc.args, rc if rc is not None else -9, out, err)
