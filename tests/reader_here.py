"""The HDF5 reader process's entry, ``_h5core.serve``, run in a thread of the test process.

``_worker`` starts its reader with ``childproc.start(_h5core.py, [socket fd], ...)``;
`serve_here` replaces that call (for one test) by a thread running ``serve`` over the same
two pipes and the same descriptor socket, behind an object with the ``Popen`` methods
``_worker`` uses. The parent side, the protocol and the reader's request loop then run in the
process where the test runs -- which is where mutmut's mutants are live (a real reader process
runs ``_h5core.py`` afresh as a script, outside mutmut's reach). What a thread cannot show --
``python -I``, the scrubbed environment, the kernel's limits, a crash or a kill -- stays with
the tests that start the real process.

The reader lowers its own ``RLIMIT_DATA`` (``_h5core._limit_memory``); here ``setrlimit`` only
records what it was asked for (`ServedHere.limits`), so the test process keeps its own limit.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import pytest

from juliabridge.bundle.weights import _h5core, _worker

Serve = Callable[[BinaryIO, BinaryIO, "socket.socket | None"], None]


class ServedHere:
    """A reader 'process' that is `serve` in a thread; ``Popen``'s poll/wait/kill."""

    def __init__(self, serve: Serve, args: Sequence[str]) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.stdin = os.fdopen(req_w, "wb")
        self.stdout = os.fdopen(rep_r, "rb")
        # the caller closes its end of the socket pair once started, as after a real fork
        sock = socket.socket(fileno=os.dup(int(args[0]))) if args else None
        self._sock = sock
        self.pid = os.getpid()
        self.returncode: int | None = None
        self.killed = False

        def run() -> None:
            rc = 0
            with os.fdopen(req_r, "rb") as inp, os.fdopen(rep_w, "wb") as out:
                try:
                    serve(inp, out, sock)
                except SystemExit as e:  # SystemExit(-11) stands for a crash by SIGSEGV
                    rc = e.code if isinstance(e.code, int) else 1
                except BaseException:
                    rc = 1
                finally:
                    if sock is not None:
                        sock.close()
                    with contextlib.suppress(OSError, ValueError):
                        out.flush()
                    # ended before its pipes close, as a process that exits
                    self.returncode = -9 if self.killed else rc

        self.thread = threading.Thread(target=run, name="reader-served-here", daemon=True)
        self.thread.start()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("serve", timeout or 0.0)
        return self.returncode

    def kill(self) -> None:
        # No thread can be killed: end both of its pipes, so that it reads end of input or
        # fails its next write, and returns.
        self.killed = True
        if self._sock is not None:  # first, one waiting for a descriptor
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError, ValueError):
                stream.close()


class Harness:
    """What `serve_here` installed: the started readers and the limits they set."""

    def __init__(self) -> None:
        self.started: list[ServedHere] = []
        self.starts: list[dict[str, Any]] = []
        self.limits: list[tuple[int, int]] = []


def serve_here(monkeypatch: pytest.MonkeyPatch, serve: Serve | None = None) -> Harness:
    """Run every reader ``_worker`` starts during this test as `serve` (default
    ``_h5core.serve``) in a thread; returns the record of what was started."""
    import resource

    harness = Harness()

    def start(entry: str, args: Sequence[str] = (), **kwargs: Any) -> ServedHere:
        harness.starts.append({"entry": entry, "args": list(args), **kwargs})
        proc = ServedHere(serve or _h5core.serve, args)
        harness.started.append(proc)
        return proc

    def setrlimit(which: int, limits: tuple[int, int]) -> None:
        if which == resource.RLIMIT_DATA:
            harness.limits.append(limits)

    monkeypatch.setattr(_worker.childproc, "start", start)
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    monkeypatch.setattr(_h5core, "_BASE", [])  # the start-up size of this 'process'
    # the idle-exit thread would end the test process (os._exit) 300 s after the test
    monkeypatch.setattr(_h5core, "_retire_when_idle", lambda last: None)
    monkeypatch.setenv(_worker.WORKER_ENV, "1")
    _worker.stop_idle()  # no real reader left over from an earlier test serves this one
    return harness
