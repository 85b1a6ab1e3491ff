"""Enzyme derivations of untrusted modules, run in a separate process.

Enzyme's differentiation passes run as C++ inside the process that lowers the derivative, and
they crash on some valid modules: reverse and forward mode of a plain ``stablehlo.sort`` (the
lowering of ``jnp.sort``) segfault in enzyme-ad 0.0.16, and a derivation that fails cleanly
writes the module to ``/tmp/tmp*.mlir`` and about 40 lines of MLIR to stderr. So for a module
loaded without ``trust=True`` the derivative is *derived* in a child process (the same
EnzymeBackend code, lowering the JVP or VJP to plain StableHLO) and only its text comes back;
the parent parses it with every load-time check (parse_module) and runs it through XLA like
any other module (the child's loop is ``child.py``). A crash, hang or error of the child
becomes a TransformError; the child's temporary files live in a private directory that is
removed after every request, and its stderr is shown only with ``JULIABRIDGE_DEBUG=1``.

One child serves the process (started on first use, about as long as importing jax and
enzyme-ad; a forked process starts its own); results are cached per module text and mode.
``JULIABRIDGE_ENZYME_TIMEOUT`` (seconds, default 600) bounds one derivation.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import selectors
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from ... import childproc
from ...errors import TransformError
from ...transforms.typed_errors import debug_enabled

MODES = {"jvp": "forward-mode", "vjp": "reverse-mode"}
#: The caller's variables the child keeps besides childproc's: how JAX reads the module.
_PASS_ENV = ("JAX_ENABLE_X64",)


def child_memory() -> int:
    """The derivation child's memory cap: half this machine's physical memory (JAX and
    enzyme-ad take about 1 GiB to start; a derivation takes a few times its module)."""
    return childproc.physical_memory() // 2


def _timeout() -> float:
    try:
        return float(os.environ.get("JULIABRIDGE_ENZYME_TIMEOUT", "600"))
    except ValueError:
        return 600.0


class _Child:
    """The derivation process: JSON lines in, JSON lines out."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="juliabridge-enzyme-")
        self.err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives with the child
        # The child only lowers: keep it off accelerators and inside its own temporary dir.
        env = {"TMPDIR": self.tmp, "JAX_PLATFORMS": "cpu"}
        env.update({k: v for k, v in os.environ.items() if k in _PASS_ENV})
        self.proc = childproc.start(
            "juliabridge.backends.enzyme.child:serve",
            memory=child_memory(),
            cwd=self.tmp,
            extra_env=env,
            stderr=self.err,
            bufsize=-1,
        )
        self.pid = os.getpid()

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request; raise _Died (with what happened) if there is no answer."""
        if self.proc.stdin is None or self.proc.stdout is None:  # started with pipes
            raise _Died("the derivation process has no pipes to talk through")
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as e:
            raise _Died(self._death()) from e
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        if not ready:
            self.kill()
            raise _Died(f"did not finish within {timeout:g} s (JULIABRIDGE_ENZYME_TIMEOUT)")
        line = self.proc.stdout.readline()
        if not line:
            raise _Died(self._death())
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _death(self) -> str:
        rc = self.proc.wait()
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            return f"crashed ({name})"
        return f"exited with status {rc}"

    def stderr_tail(self) -> str:
        self.err.seek(0)
        return self.err.read()[-20000:].decode("utf-8", "replace")

    def clear(self) -> None:
        """Forget what the child printed and wrote so far."""
        self.err.seek(0)
        self.err.truncate()
        for p in Path(self.tmp).iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self.err.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class _Died(Exception):
    pass


_LOCK = threading.Lock()
_CHILD: _Child | None = None
_CACHE: dict[tuple[str, str], str] = {}


def _child() -> _Child:
    global _CHILD
    if _CHILD is not None and (_CHILD.pid != os.getpid() or _CHILD.proc.poll() is not None):
        if _CHILD.pid == os.getpid():
            _CHILD.close()
        _CHILD = None  # a forked copy's child belongs to the parent process
    if _CHILD is None:
        _CHILD = _Child()
    return _CHILD


@atexit.register
def _shutdown() -> None:
    global _CHILD
    if _CHILD is not None and _CHILD.pid == os.getpid():
        _CHILD.close()
    _CHILD = None


def derive(module_text: str, mode: str, origin: str) -> str:
    """StableHLO text of the JVP or VJP of `module_text` (a sanitized module), derived by
    Enzyme in the child process.

    Raises TransformError when Enzyme fails, crashes or hangs on the module.
    """
    key = (hashlib.sha256(module_text.encode()).hexdigest(), mode)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        child = _child()
        try:
            reply = child.ask({"text": module_text, "mode": mode}, _timeout())
        except _Died as e:
            detail = child.stderr_tail() if debug_enabled() else ""
            child.close()
            global _CHILD
            _CHILD = None
            raise TransformError(
                f"{origin}: Enzyme {e} while deriving the {MODES[mode]} derivative of this "
                "module (it ran in a separate process, so only the derivation was lost). "
                "Enzyme cannot differentiate every StableHLO module (e.g. sorts); use "
                "backend='lax', or backend='xla' with a VJP module exported from Julia, or "
                "differentiate "
                "another part of the computation." + (f"\n{detail}" if detail else "")
            ) from None
        if debug_enabled():
            sys.stderr.write(child.stderr_tail())
        child.clear()
    if not reply.get("ok"):
        raise TransformError(
            f"{origin}: Enzyme could not compute the {MODES[mode]} derivative of this module "
            f"({reply.get('error', 'no detail')}). Enzyme does not differentiate every "
            "StableHLO op in every mode (e.g. forward mode through reduce_window/max-pooling); "
            "use backend='lax' (JAX's own rules, every mode), reverse mode (jax.grad/jax.vjp), "
            "or backend='xla' with a VJP module. "
            "JULIABRIDGE_DEBUG=1 shows Enzyme's own output."
        )
    text = str(reply["text"])
    with _LOCK:
        _CACHE[key] = text
    return text
