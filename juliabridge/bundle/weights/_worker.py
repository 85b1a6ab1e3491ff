"""The parent side of the sandboxed HDF5 reader process (``_h5core.py``).

The child is started isolated: ``python -I`` (no ``PYTHON*`` variables, no user site, no
script or working directory on ``sys.path``), in a neutral working directory (the file system
root), with an environment reduced to what locating shared libraries needs, one thread and no
HDF5 plugin path. So nothing in the bundle, the caller's working directory or ``PYTHONPATH``
can be imported by it. The caller's open file descriptor is handed over a Unix socket
(``socket.send_fds``), so the child reads the very file the caller opened without following
symlinks, never a name looked up again.

A watchdog thread kills the child when a request makes no progress for
``JULIABRIDGE_HDF5_TIMEOUT`` seconds (read at every request, so a value set after the first
load applies to a reused child too). A child that answered every request (data or a refusal)
goes back to a small pool for the next file; one that hung, crashed or broke the protocol is
stopped and never reused.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BundleError, JuliaBridgeError
from ...support import childproc

#: "0" reads HDF5 in this process (no protection from a hanging or crashing libhdf5);
#: anything else, or unset, uses a separate reader process.
WORKER_ENV = "JULIABRIDGE_HDF5_WORKER"
#: Seconds the reader process may go without progress before it is stopped (default 60).
TIMEOUT_ENV = "JULIABRIDGE_HDF5_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
#: Frames: one type byte (J = JSON, D = data), an 8-byte little-endian length, the payload
#: (the same struct as ``_h5core._HEAD``; a test checks they agree).
HEAD = struct.Struct("<cQ")
#: Environment variables the child keeps (childproc's, the same for every helper).
KEEP_ENV = childproc.KEEP_ENV
SEND_FDS = hasattr(socket, "send_fds") and hasattr(socket, "socketpair") and os.name == "posix"


def timeout() -> float:
    """The current JULIABRIDGE_HDF5_TIMEOUT (seconds), or the default."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value > 0 else DEFAULT_TIMEOUT


def use_worker() -> bool:
    """Whether libhdf5 runs in a separate process (the default)."""
    return os.environ.get(WORKER_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def script() -> str:
    """Path of ``_h5core.py`` (through the module when imported, so tests may replace it)."""
    mod = sys.modules.get(f"{__package__}._h5core")
    if mod is not None and getattr(mod, "__file__", None):
        return str(mod.__file__)
    spec = importlib.util.find_spec(f"{__package__}._h5core")
    if spec is None or spec.origin is None:
        raise BundleError(
            f"{__package__}._h5core is missing from this juliabridge installation; reinstall "
            "juliabridge"
        )
    return spec.origin


def child_env() -> dict[str, str]:
    """The child's environment: what loading libraries needs, nothing a bundle could use."""
    # One thread is plenty, and no filter plugin is ever loaded (only built-in filters).
    return childproc.helper_env(
        {
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HDF5_PLUGIN_PATH": os.devnull,
        }
    )


class Garbled(Exception):
    """The reader process broke the protocol or vanished."""


def _widen_pipe(fd: int) -> None:
    """Ask Linux for a 1 MiB pipe buffer (default 64 KiB): fewer wake-ups per weight read."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


class WorkerProcess:
    """A ``python -I _h5core.py`` child, its pipes and the socket that carries descriptors."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self.sock: socket.socket | None = None
        theirs: socket.socket | None = None
        args: list[str] = []
        if SEND_FDS:
            self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            args.append(str(theirs.fileno()))
        try:
            # The outer cap is the machine's memory; the reader lowers its own soft limit to
            # what each read needs (_h5core._limit_memory) and can never pass this one.
            self.proc = childproc.start(
                script(),
                args,
                memory=childproc.physical_memory(),
                stderr=self.stderr,
                extra_env=child_env(),
                pass_fds=(theirs.fileno(),) if theirs is not None else (),
            )
        except BaseException:
            self.stderr.close()
            if self.sock is not None:
                self.sock.close()
            raise
        finally:
            if theirs is not None:
                theirs.close()
        if self.proc.stdin is None or self.proc.stdout is None:  # started with pipes
            self.proc.kill()
            raise BundleError("the HDF5 reader process started without pipes to talk through")
        self._in = self.proc.stdin
        self._out = self.proc.stdout
        _widen_pipe(self._out.fileno())
        self.timeout = timeout()
        self.timed_out = False
        self._progress = time.monotonic()
        self._busy = threading.Event()
        self._stopped = False
        threading.Thread(target=self._watch, name="juliabridge-hdf5-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while not self._stopped:
            self._busy.wait()
            while self._busy.is_set() and not self._stopped:
                if time.monotonic() - self._progress > self.timeout:
                    self.timed_out = True
                    with contextlib.suppress(OSError):
                        self.proc.kill()
                    return
                time.sleep(0.05)

    def alive(self) -> bool:
        """Still running, and started by this very process (not inherited through fork)."""
        return self.owner == os.getpid() and not self._stopped and self.proc.poll() is None

    def failure(self, path: Path, doing: str) -> JuliaBridgeError:
        """The error for a child that died, hung or broke the protocol; stops the child."""
        if self.proc.poll() is None and not self.timed_out:
            self.proc.kill()
        rc = self.proc.wait()
        tail = ""  # what it wrote before it ended, read before stop() closes the file
        with contextlib.suppress(OSError, ValueError):
            self.stderr.seek(0)
            tail = self.stderr.read()[-1500:].decode("utf-8", "replace").strip()
        self.stop()
        if self.timed_out:
            what = (
                f"libhdf5 made no progress for {self.timeout:g} s while {doing} (the file makes "
                "it loop), so the reader process was stopped"
            )
        elif rc == -9:
            what = f"the HDF5 reader process was killed (SIGKILL: out of memory?) while {doing}"
        elif rc < 0:
            what = f"libhdf5 crashed (signal {-rc}) while {doing}"
        else:
            what = f"the HDF5 reader process ended (status {rc}) while {doing}: {tail}"
        hint = (
            f" (A disk so slow that one read needs more than {self.timeout:g} s can raise "
            f"{TIMEOUT_ENV}.)"
            if self.timed_out
            else ""
        )
        return BundleError(
            f"{path}: {what}. The file is corrupt or crafted; download or export the bundle "
            f"again.{hint}"
        )

    # --- protocol ----------------------------------------------------------------------------

    def _read_exact(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = self._out.readinto(view[got:])  # type: ignore[attr-defined]
            if not n:
                raise Garbled
            got += n
            self._progress = time.monotonic()

    def frame(self) -> tuple[bytes, int]:
        """The next frame's (type, length)."""
        head = bytearray(HEAD.size)
        self._read_exact(memoryview(head))
        kind, length = HEAD.unpack(bytes(head))
        return kind, int(length)

    def json_body(self, length: int) -> dict[str, Any]:
        """A JSON frame's body."""
        if length > 1 << 30:
            raise Garbled
        body = bytearray(length)
        self._read_exact(memoryview(body))
        try:
            obj = json.loads(bytes(body))
        except ValueError:
            raise Garbled from None
        if not isinstance(obj, dict):
            raise Garbled
        return obj

    def data_into(self, view: memoryview) -> None:
        """A data frame's body, into `view`."""
        self._read_exact(view)

    def send(self, obj: dict[str, Any], fd: int | None = None) -> None:
        """Send one request (and, first, descriptor `fd` over the socket)."""
        data = json.dumps(obj).encode()
        try:
            if fd is not None:
                if self.sock is None:
                    raise Garbled
                socket.send_fds(self.sock, [b"F"], [fd])
            self._in.write(HEAD.pack(b"J", len(data)) + data)
            self._in.flush()
        except (OSError, ValueError) as e:
            raise Garbled from e

    def begin(self) -> None:
        """Start timing a request (with the timeout in force now)."""
        self.timeout = timeout()
        self._progress = time.monotonic()
        self._busy.set()

    def end(self) -> None:
        """Stop timing."""
        self._busy.clear()

    def call(
        self,
        obj: dict[str, Any] | None,
        doing: str,
        expect: str = "ok",
        fd: int | None = None,
    ) -> dict[str, Any]:
        """Send `obj` (if any) and return the JSON reply; raises Garbled on trouble."""
        self.begin()
        try:
            if obj is not None:
                self.send(obj, fd)
            kind, length = self.frame()
            if kind != b"J":
                raise Garbled
            reply = self.json_body(length)
        finally:
            self.end()
        if expect == "ready" and not reply.get("ready"):
            raise Garbled
        return reply

    def stop(self) -> None:
        """End the child (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._busy.set()  # wake the watchdog so it exits
        if self.owner != os.getpid():
            return  # inherited through fork: the parent owns the child
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self._in.close()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self._in, self._out, self.stderr, self.sock):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.close()  # type: ignore[union-attr]


IDLE: list[WorkerProcess] = []
_IDLE_LOCK = threading.Lock()
MAX_IDLE = 2


def stop_idle() -> None:
    """Stop the pooled idle reader processes."""
    with _IDLE_LOCK:
        idle = list(IDLE)
        IDLE.clear()
    for proc in idle:
        proc.stop()


atexit.register(stop_idle)


def take_process() -> WorkerProcess | None:
    """An idle reader process of this process's, if any."""
    with _IDLE_LOCK:
        while IDLE:
            proc = IDLE.pop()
            if proc.alive():
                return proc
            if proc.owner == os.getpid():
                proc.stop()
    return None


def return_process(proc: WorkerProcess) -> None:
    """Keep `proc` for the next file, or stop it if the pool is full."""
    with _IDLE_LOCK:
        if proc.alive() and len(IDLE) < MAX_IDLE:
            IDLE.append(proc)
            return
    proc.stop()


def new_process(path: Path) -> WorkerProcess:
    """Start a reader process and wait until it is ready."""
    proc = WorkerProcess()
    try:
        proc.call(None, "starting the HDF5 reader process", expect="ready")
    except Garbled:
        err = proc.failure(path, "starting the HDF5 reader process")
        raise BundleError(
            f"{err} Is h5py importable by `{sys.executable} -I` (isolated mode ignores "
            f"PYTHONPATH)? Set {WORKER_ENV}=0 to read HDF5 in this process instead."
        ) from None
    return proc


class WorkerReader:
    """A weights file read by libhdf5 in a reader process.

    `error(kind, message, where)` turns the child's refusals into juliabridge errors.
    """

    def __init__(self, path: Path, fd: int, error: Any) -> None:
        self.path = path
        self._error = error
        self._clean = True
        proc = take_process()
        reused = proc is not None
        if proc is None:
            proc = new_process(path)
        self._proc = proc
        request = {"op": "open", "path": str(path), "fd": SEND_FDS}
        send = fd if SEND_FDS else None
        try:
            reply = proc.call(request, "opening the file", fd=send)
        except Garbled:
            if not reused:
                raise proc.failure(path, "opening the file") from None
            # A pooled child may have just retired itself (idle timeout): start afresh once.
            proc.stop()
            self._proc = proc = new_process(path)
            try:
                reply = proc.call(request, "opening the file", fd=send)
            except Garbled:
                raise proc.failure(path, "opening the file") from None
        if not reply.get("ok"):
            # Refused on open: the child answered, so it can serve the next file.
            if reply.get("kind") == "internal":
                proc.stop()
            else:
                return_process(proc)
            raise error(str(reply.get("kind")), str(reply.get("message")), None)

    def _refused(self, reply: dict[str, Any], where: str | None) -> JuliaBridgeError:
        # A refusal is an answer: the child is responsive and may serve the next file.
        if reply.get("kind") == "internal":
            self._clean = False
        return self._error(str(reply.get("kind")), str(reply.get("message")), where)  # type: ignore[no-any-return]

    def read(
        self,
        dataset: str,
        shape: tuple[int, ...],
        accept: list[str],
        tag: str | None,
        where: str | None,
        check_memory: Any,
        sink: Any = None,
    ) -> np.ndarray:
        """Dataset `dataset` as stored (native byte order), checked by the child first.

        With `sink`, nothing is kept: each piece's bytes go to ``sink(offset, bytes)`` in order
        (offsets into the row-major stored bytes) and an empty array is returned; memory stays
        one piece (sharded loading of datasets the Python reader leaves to libhdf5)."""
        doing = f"reading {dataset}"
        proc = self._proc
        if not proc.alive():
            raise proc.failure(self.path, doing)
        proc.begin()
        try:
            request = {"op": "read", "dataset": dataset, "shape": list(shape), "accept": accept}
            proc.send({**request, "tag": tag})
            kind, length = proc.frame()
            if kind != b"J":
                raise Garbled
            head = proc.json_body(length)
            if not head.get("ok"):
                raise self._refused(head, where)
            # Never trust the child's numbers beyond what the caller asked for.
            try:
                dt = np.dtype(str(head.get("dtype")))
            except (TypeError, ValueError):
                raise Garbled from None
            nbytes = dt.itemsize * int(np.prod(shape, dtype=object))
            if (
                dt.str not in accept
                or tuple(head.get("shape", ())) != tuple(shape)
                or head.get("nbytes") != nbytes
            ):
                raise Garbled
            from .fastread import aligned_empty

            if sink is None:
                check_memory(nbytes, self.path, where or dataset)
                out = aligned_empty(tuple(shape), dt)
            else:
                out = np.empty(0, dt)
            flat = out.reshape(-1).view(np.uint8)
            view = memoryview(flat) if nbytes else memoryview(b"")  # type: ignore[arg-type]
            got = 0
            while True:
                kind, length = proc.frame()
                if kind == b"D":
                    if got + length > nbytes:
                        raise Garbled
                    if sink is None:
                        proc.data_into(view[got : got + length])
                    else:
                        piece = memoryview(bytearray(length))
                        proc.data_into(piece)
                        sink(got, piece)
                    got += length
                    continue
                if kind != b"J":
                    raise Garbled
                tail = proc.json_body(length)
                if tail.get("done") and got == nbytes:
                    return out
                if "kind" in tail:
                    raise self._refused(tail, where)
                raise Garbled
        except Garbled:
            self._clean = False
            raise proc.failure(self.path, doing) from None
        except JuliaBridgeError:
            raise
        except BaseException:  # e.g. KeyboardInterrupt mid-stream: the pipe is out of step
            self._clean = False
            raise
        finally:
            proc.end()

    def list_datasets(self, groups: list[str]) -> list[dict[str, Any]]:
        """name, shape, dtype, tag and nbytes of every dataset under `groups`."""
        doing = "listing datasets"
        try:
            reply = self._proc.call({"op": "list", "groups": groups}, doing)
        except Garbled:
            self._clean = False
            raise self._proc.failure(self.path, doing) from None
        if not reply.get("ok"):
            raise self._refused(reply, None)
        out = reply.get("datasets")
        if not isinstance(out, list):
            self._clean = False
            raise self._proc.failure(self.path, doing)
        return out

    def close(self) -> None:
        """Close the file in the child; keep the child for the next file if it behaved."""
        proc = self._proc
        if not self._clean or not proc.alive():
            proc.stop()
            return
        try:
            reply = proc.call({"op": "close"}, "closing the file")
        except Garbled:
            proc.stop()
            return
        if reply.get("ok"):
            return_process(proc)
        else:
            proc.stop()
