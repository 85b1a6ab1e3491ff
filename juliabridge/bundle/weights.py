"""HDF5 weights: the dtype encodings of docs/bundle-format.md §4, safe reading, atomic writing."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import ml_dtypes
import numpy as np

from .. import dtypes
from ..errors import (
    BundleError,
    JuliaBridgeError,
    SaveError,
    SignatureMismatchError,
    UnsafeBundleError,
)
from . import _h5core, atomic

#: "0" reads HDF5 in this process (faster start, no protection from a hanging or crashing
#: libhdf5); anything else, or unset, uses a separate reader process.
WORKER_ENV = "JULIABRIDGE_HDF5_WORKER"
#: Seconds the reader process may go without progress before it is stopped (default 60).
TIMEOUT_ENV = "JULIABRIDGE_HDF5_TIMEOUT"
DEFAULT_TIMEOUT = 60.0

# Types HDF5.jl cannot write portably travel as bit patterns / bytes (spec §4).
_ENCODED: dict[str, np.dtype] = {
    "bf16": np.dtype(np.uint16),
    "f16": np.dtype(np.uint16),
    "i1": np.dtype(np.uint8),
}


def stored_dtype(mlir_dtype: str) -> np.dtype:
    """The numpy dtype a dataset of `mlir_dtype` is stored with."""
    return _ENCODED.get(mlir_dtype, dtypes.to_numpy(mlir_dtype))


def encode(value: np.ndarray, mlir_dtype: str) -> np.ndarray:
    """Array as stored in HDF5: bit patterns for bf16/f16, 0/1 bytes for Bool."""
    arr = np.ascontiguousarray(value, dtype=dtypes.to_numpy(mlir_dtype))
    if mlir_dtype in ("bf16", "f16"):
        return arr.view(np.uint16)
    if mlir_dtype == "i1":
        return arr.astype(np.uint8)
    return arr


def accepted_stored(mlir_dtype: str) -> list[str]:
    """Native numpy type strings a dataset of `mlir_dtype` may be stored as (spec §4)."""
    kinds = [stored_dtype(mlir_dtype)]
    if mlir_dtype == "f16":
        kinds.append(np.dtype(np.float16))
    if mlir_dtype == "i1":
        kinds += [np.dtype(np.int8), np.dtype(np.bool_)]
    return [k.str for k in kinds]


def decode(stored: np.ndarray, mlir_dtype: str, where: str) -> np.ndarray:
    """Inverse of `encode`; also accepts native IEEE half for f16 and bool/enum for i1."""
    want = dtypes.to_numpy(mlir_dtype)
    kind = stored.dtype
    if mlir_dtype == "bf16" and kind == np.uint16:
        return stored.view(ml_dtypes.bfloat16)
    if mlir_dtype == "f16" and kind in (np.uint16, np.float16):
        return stored.view(np.float16) if kind == np.uint16 else stored
    if mlir_dtype == "i1" and kind in (np.uint8, np.int8, np.bool_):
        return stored != 0
    if kind == want:
        return stored
    raise SignatureMismatchError(
        f"{where}: stored as {kind} but the manifest says {mlir_dtype} "
        f"(expected stored type {stored_dtype(mlir_dtype)}, see docs/bundle-format.md §4)"
    )


_ADVICE = {
    "unsafe": "Refused because it could make the reader open other files; "
    "re-export the bundle with JuliaBridge.export_lux or juliabridge.save_params",
    "mismatch": "The weights file does not belong to this manifest; re-export the bundle",
    "corrupt": "The file is corrupt or truncated; download or export the bundle again",
    "limit": "Re-export the bundle (JuliaBridge.export_lux and juliabridge.save_params write "
    "complete, inline datasets)",
    "internal": "This is a juliabridge bug; please report it together with the file",
}


def _error(path: Path, where: str | None, kind: str, message: str) -> JuliaBridgeError:
    cls = {"unsafe": UnsafeBundleError, "mismatch": SignatureMismatchError}.get(kind, BundleError)
    lead = f"{path}: {where}: " if where else f"{path}: "
    return cls(f"{lead}{message.rstrip('.')}. {_ADVICE.get(kind, _ADVICE['corrupt'])}")


def _timeout() -> float:
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value > 0 else DEFAULT_TIMEOUT


def use_worker() -> bool:
    """Whether HDF5 files are read in a separate process (the default)."""
    return os.environ.get(WORKER_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class WeightsReader:
    """An open weights file; every dataset is checked before any of its data is read."""

    path: Path
    isolated: bool

    def read_array(
        self, dataset: str, shape: tuple[int, ...], mlir_dtype: str, where: str
    ) -> np.ndarray:
        """Dataset `dataset`, checked against `shape`/`mlir_dtype`, decoded (spec §4)."""
        raw = self._read(dataset, tuple(shape), accepted_stored(mlir_dtype), mlir_dtype, where)
        return decode(raw, mlir_dtype, f"{self.path}: {where} ({dataset})")

    def list_datasets(self, groups: list[str]) -> list[dict[str, Any]]:
        """name, shape, dtype (numpy str), tag and nbytes of every dataset under `groups`."""
        raise NotImplementedError

    def read_stored(self, dataset: str, shape: tuple[int, ...], accept: list[str]) -> np.ndarray:
        """Dataset `dataset` as stored (no decoding), checked against `shape` and `accept`."""
        return self._read(dataset, shape, accept, None, None)

    def _read(
        self,
        dataset: str,
        shape: tuple[int, ...],
        accept: list[str],
        tag: str | None,
        where: str | None,
    ) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        """Release the file (and the reader process)."""


class _LocalReader(WeightsReader):
    """libhdf5 in this process (JULIABRIDGE_HDF5_WORKER=0)."""

    isolated = False

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._reader = _h5core.Reader(str(path))
        except _h5core.Problem as e:
            raise _error(path, None, e.kind, str(e)) from e

    def _read(
        self,
        dataset: str,
        shape: tuple[int, ...],
        accept: list[str],
        tag: str | None,
        where: str | None,
    ) -> np.ndarray:
        try:
            prep = self._reader.prepare(dataset, shape, accept, tag)
            _check_memory(prep.nbytes, self.path, where or dataset)
            return self._reader.read(prep)
        except _h5core.Problem as e:
            raise _error(self.path, where, e.kind, str(e)) from e

    def list_datasets(self, groups: list[str]) -> list[dict[str, Any]]:
        try:
            return self._reader.listing(groups)
        except _h5core.Problem as e:
            raise _error(self.path, None, e.kind, str(e)) from e

    def close(self) -> None:
        self._reader.close()


class _Garbled(Exception):
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


class _WorkerProcess:
    """A `python -P _h5core.py` child and its pipes; reused for later files after a clean read.

    A watchdog thread kills the child when a request makes no progress for the timeout.
    """

    def __init__(self) -> None:
        env = dict(os.environ)
        # One thread is plenty, and no filter plugin is ever loaded (only built-in filters).
        env.update(
            OPENBLAS_NUM_THREADS="1",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            HDF5_PLUGIN_PATH=os.devnull,
            PYTHONDONTWRITEBYTECODE="1",
        )
        self.owner = os.getpid()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", _h5core.__file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                bufsize=0,
                env=env,
                close_fds=True,
            )
        except BaseException:
            self.stderr.close()
            raise
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin
        self._out = self.proc.stdout
        _widen_pipe(self._out.fileno())
        self.timeout = _timeout()
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
                time.sleep(0.1)

    def alive(self) -> bool:
        """Still running, and started by this very process (not inherited through fork)."""
        return self.owner == os.getpid() and not self._stopped and self.proc.poll() is None

    def failure(self, path: Path, doing: str) -> JuliaBridgeError:
        """The error for a child that died, hung or broke the protocol; stops the child."""
        if self.proc.poll() is None and not self.timed_out:
            self.proc.kill()
        rc = self.proc.wait()
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
            with contextlib.suppress(OSError, ValueError):
                self.stderr.seek(0)
            try:
                tail = self.stderr.read()[-1500:].decode("utf-8", "replace").strip()
            except (OSError, ValueError):
                tail = ""
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
                raise _Garbled
            got += n
            self._progress = time.monotonic()

    def frame(self) -> tuple[bytes, int]:
        """The next frame's (type, length)."""
        head = bytearray(_h5core._HEAD.size)
        self._read_exact(memoryview(head))
        kind, length = _h5core._HEAD.unpack(bytes(head))
        return kind, int(length)

    def json_body(self, length: int) -> dict[str, Any]:
        """A JSON frame's body."""
        if length > 1 << 30:
            raise _Garbled
        body = bytearray(length)
        self._read_exact(memoryview(body))
        try:
            obj = json.loads(bytes(body))
        except ValueError:
            raise _Garbled from None
        if not isinstance(obj, dict):
            raise _Garbled
        return obj

    def data_into(self, view: memoryview) -> None:
        """A data frame's body, into `view`."""
        self._read_exact(view)

    def send(self, obj: dict[str, Any]) -> None:
        """Send one request."""
        data = json.dumps(obj).encode()
        try:
            self._in.write(_h5core._HEAD.pack(b"J", len(data)) + data)
            self._in.flush()
        except (OSError, ValueError) as e:
            raise _Garbled from e

    def begin(self) -> None:
        """Start timing a request."""
        self._progress = time.monotonic()
        self._busy.set()

    def end(self) -> None:
        """Stop timing."""
        self._busy.clear()

    def call(self, obj: dict[str, Any] | None, doing: str, expect: str = "ok") -> dict[str, Any]:
        """Send `obj` (if any) and return the JSON reply; raises _Garbled on trouble."""
        self.begin()
        try:
            if obj is not None:
                self.send(obj)
            kind, length = self.frame()
            if kind != b"J":
                raise _Garbled
            reply = self.json_body(length)
        finally:
            self.end()
        if expect == "ready" and not reply.get("ready"):
            raise _Garbled
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
        for stream in (self._in, self._out, self.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.close()


_IDLE: list[_WorkerProcess] = []
_IDLE_LOCK = threading.Lock()
_MAX_IDLE = 2


def _stop_idle() -> None:
    with _IDLE_LOCK:
        idle = list(_IDLE)
        _IDLE.clear()
    for proc in idle:
        proc.stop()


atexit.register(_stop_idle)


def _take_process() -> _WorkerProcess | None:
    with _IDLE_LOCK:
        while _IDLE:
            proc = _IDLE.pop()
            if proc.alive():
                return proc
            if proc.owner == os.getpid():
                proc.stop()
    return None


def _return_process(proc: _WorkerProcess) -> None:
    with _IDLE_LOCK:
        if proc.alive() and len(_IDLE) < _MAX_IDLE:
            _IDLE.append(proc)
            return
    proc.stop()


class _WorkerReader(WeightsReader):
    """libhdf5 in a child process: a hang is cut off after a timeout, a crash becomes an error.

    A child that answered every request (data or a refusal) goes back to a small pool for the
    next file; one that hung, crashed or broke the protocol is stopped and never reused.
    """

    isolated = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self._clean = True
        proc = _take_process()
        reused = proc is not None
        if proc is None:
            proc = _new_process(path)
        self._proc = proc
        try:
            reply = proc.call({"op": "open", "path": str(path)}, "opening the file")
        except _Garbled:
            if not reused:
                raise proc.failure(path, "opening the file") from None
            # A pooled child may have just retired itself (idle timeout): start afresh once.
            proc.stop()
            self._proc = proc = _new_process(path)
            try:
                reply = proc.call({"op": "open", "path": str(path)}, "opening the file")
            except _Garbled:
                raise proc.failure(path, "opening the file") from None
        if not reply.get("ok"):
            # Refused on open: the child answered, so it can serve the next file.
            if reply.get("kind") == "internal":
                proc.stop()
            else:
                _return_process(proc)
            raise _error(path, None, str(reply.get("kind")), str(reply.get("message")))

    def _refused(self, reply: dict[str, Any], where: str | None) -> JuliaBridgeError:
        # A refusal is an answer: the child is responsive and may serve the next file.
        if reply.get("kind") == "internal":
            self._clean = False
        return _error(self.path, where, str(reply.get("kind")), str(reply.get("message")))

    def _read(
        self,
        dataset: str,
        shape: tuple[int, ...],
        accept: list[str],
        tag: str | None,
        where: str | None,
    ) -> np.ndarray:
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
                raise _Garbled
            head = proc.json_body(length)
            if not head.get("ok"):
                raise self._refused(head, where)
            # Never trust the child's numbers beyond what the caller asked for.
            try:
                dt = np.dtype(str(head.get("dtype")))
            except (TypeError, ValueError):
                raise _Garbled from None
            nbytes = dt.itemsize * int(np.prod(shape, dtype=object))
            if (
                dt.str not in accept
                or tuple(head.get("shape", ())) != tuple(shape)
                or head.get("nbytes") != nbytes
            ):
                raise _Garbled
            _check_memory(nbytes, self.path, where or dataset)
            out = np.empty(shape, dt)
            flat = out.reshape(-1).view(np.uint8)
            view = memoryview(flat) if nbytes else memoryview(b"")  # type: ignore[arg-type]
            got = 0
            while True:
                kind, length = proc.frame()
                if kind == b"D":
                    if got + length > nbytes:
                        raise _Garbled
                    proc.data_into(view[got : got + length])
                    got += length
                    continue
                if kind != b"J":
                    raise _Garbled
                tail = proc.json_body(length)
                if tail.get("done") and got == nbytes:
                    return out
                if "kind" in tail:
                    raise self._refused(tail, where)
                raise _Garbled
        except _Garbled:
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
        doing = "listing datasets"
        try:
            reply = self._proc.call({"op": "list", "groups": groups}, doing)
        except _Garbled:
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
        proc = self._proc
        if not self._clean or not proc.alive():
            proc.stop()
            return
        try:
            reply = proc.call({"op": "close"}, "closing the file")
        except _Garbled:
            proc.stop()
            return
        if reply.get("ok"):
            _return_process(proc)
        else:
            proc.stop()


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _check_memory(nbytes: int, path: Path, what: str) -> None:
    total = _physical_memory()
    if total is not None and nbytes > total:
        raise BundleError(
            f"{path}: {what} needs {nbytes} bytes but this machine has {total} bytes of memory; "
            "the bundle is too large for it (or its sizes are forged)"
        )


def _new_process(path: Path) -> _WorkerProcess:
    proc = _WorkerProcess()
    try:
        proc.call(None, "starting the HDF5 reader process", expect="ready")
    except _Garbled:
        err = proc.failure(path, "starting the HDF5 reader process")
        raise BundleError(
            f"{err} Is h5py importable by {sys.executable}? Set {WORKER_ENV}=0 to read HDF5 "
            "in this process instead."
        ) from None
    return proc


@contextmanager
def open_weights(path: Path) -> Iterator[WeightsReader]:
    """Open a weights file for `read_array` after refusing links and external/virtual storage.

    libhdf5 runs in a separate process unless JULIABRIDGE_HDF5_WORKER=0, so a file that makes
    it hang or crash ends in a BundleError instead of taking this process down.
    """
    path = Path(path)
    reader: WeightsReader | None = None
    if use_worker():
        try:
            reader = _WorkerReader(path)
        except OSError as e:  # no interpreter to start, too many processes, ...
            warnings.warn(
                f"juliabridge could not start its HDF5 reader process ({e}); reading {path} in "
                f"this process instead (set {WORKER_ENV}=0 to do so without this warning)",
                RuntimeWarning,
                stacklevel=3,
            )
    if reader is None:
        reader = _LocalReader(path)
    try:
        yield reader
    finally:
        reader.close()


def read_array(
    f: WeightsReader | h5py.File, dataset: str, shape: tuple[int, ...], mlir_dtype: str, where: str
) -> np.ndarray:
    """Read one dataset after checking its shape, stored type and storage against the manifest."""
    if isinstance(f, h5py.File):
        # A file opened by the caller: run the same checks in this process.
        local = object.__new__(_LocalReader)
        local.path = Path(f.filename)
        try:
            local._reader = _h5core.Reader(f.filename)
        except _h5core.Problem as e:
            raise _error(local.path, None, e.kind, str(e)) from e
        try:
            return local.read_array(dataset, shape, mlir_dtype, where)
        finally:
            local.close()
    return f.read_array(dataset, shape, mlir_dtype, where)


def write_weights(
    path: Path,
    arrays: Mapping[str, tuple[np.ndarray, str]],
    *,
    root_attrs: Mapping[str, Any] | None = None,
) -> None:
    """Write `{dataset: (array, mlir_dtype)}` atomically: a temp file, fsync, then rename.

    The temporary is ``.NAME.jbtmp~HOST~PID~RANDOM`` next to `path`; one left by a killed
    writer is removed by the next write to `path` (see juliabridge/bundle/atomic.py). Readers
    never see a partial file under `path`: it holds the old content or the new, nothing else.
    """
    path = Path(path)
    if path.is_dir():
        raise SaveError(
            f"{path}: is a directory; pass the path of the file to write, e.g. "
            f"{path / 'finetuned.h5'}"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.clean_stale(path)
        tmp = atomic.temp_path(path)
        atomic.create_file(tmp)
    except OSError as e:
        raise SaveError(
            f"{path}: cannot create a file in {path.parent} ({e.strerror or e}); check that "
            "the directory exists and is writable"
        ) from e
    try:
        with h5py.File(tmp, "w") as f:
            for key, val in (root_attrs or {}).items():
                f.attrs[key] = val
            for name, (arr, mlir_dtype) in arrays.items():
                ds = f.create_dataset(name, data=encode(np.asarray(arr), mlir_dtype))
                ds.attrs["dtype"] = mlir_dtype
        atomic.fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, JuliaBridgeError):
            raise SaveError(
                f"{path}: writing the weights failed ({e}); the previous file, if any, is "
                "unchanged. Check free space and permissions"
            ) from e
        raise
    atomic.fsync_dir(path.parent)
