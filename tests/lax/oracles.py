"""Independent oracles for the lax backend: XLA running the original module, and jaxlib's
StableHLO reference interpreter (in a child process, since it aborts on some ops).

`check_module` is what op tests call: lax must equal both oracles (bitwise for integers and
Booleans, to tolerance for floats, NaN where they have NaN).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import juliabridge
from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from .interp_worker import load_arrays, save_arrays

WORKER = Path(__file__).with_name("interp_worker.py")


class InterpreterUnavailable(Exception):
    """The reference interpreter crashed, timed out or refused the module."""


class _Worker:
    """One long-lived interpreter process, restarted after a crash."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        return subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def run(self, text: str, args: Sequence[np.ndarray], timeout: float) -> list[np.ndarray]:
        with self.lock, tempfile.TemporaryDirectory(prefix="jb-interp-") as tmp:
            req = Path(tmp)
            (req / "module.mlir").write_text(text)
            save_arrays(req / "args", [np.asarray(a) for a in args])
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(f"{req}\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            if not ready:
                self.proc.kill()
                self.proc = None
                raise InterpreterUnavailable(f"timed out after {timeout} s")
            line = self.proc.stdout.readline().strip()
            if not line:
                code = self.proc.wait()
                self.proc = None
                raise InterpreterUnavailable(f"the interpreter process died (exit {code})")
            if line != "ok":
                raise InterpreterUnavailable(line)
            return load_arrays(req / "out")


_WORKER = _Worker()


def interpret(text: str, args: Sequence[Any], timeout: float = 120.0) -> list[np.ndarray]:
    """Run `text`'s @main in the StableHLO reference interpreter."""
    return _WORKER.run(text, [np.asarray(a) for a in args], timeout)


def run_xla(text: str, args: Sequence[Any], *, trust: bool = False) -> list[np.ndarray]:
    """Run the module through XLA (the xla backend: the original module, compiled); `trust`
    admits custom-call targets off jax.export's stable list."""
    fn = juliabridge.load_mlir(text, backend="xla", trust=trust)
    return [np.asarray(r) for r in fn(*args)]


def run_enzyme(text: str, args: Sequence[Any], *, trust: bool = False) -> list[np.ndarray]:
    """Run the module on the enzyme backend (XLA through enzyme-ad; env A only); `trust` as
    for `run_xla`."""
    fn = juliabridge.load_mlir(text, backend="enzyme", trust=trust)
    return [np.asarray(r) for r in fn(*args)]


def run_lax(text: str, args: Sequence[Any], *, jit: bool = True) -> list[np.ndarray]:
    """Run the module on the lax backend (eager calls are jitted inside; jit=True wraps it)."""
    import jax

    fn = juliabridge.load_mlir(text, backend="lax")
    call = jax.jit(fn) if jit else fn
    return [np.asarray(r) for r in call(*args)]


def assert_same(
    got: Sequence[Any], want: Sequence[Any], *, rtol: float, atol: float, what: str
) -> None:
    """Arrays equal: exactly for integers/Booleans, to tolerance for floats; NaN matches NaN."""
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what} result {k}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{what} result {k}: dtype {g.dtype} != {w.dtype}"
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what} result {k}")
            continue
        wide = np.complex128 if g.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(
            g.astype(wide),
            w.astype(wide),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            err_msg=f"{what} result {k}",
        )


def check_module(
    text: str,
    args: Sequence[Any],
    *,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    interpreter: bool = True,
    expected: Sequence[Any] | None = None,
) -> list[np.ndarray]:
    """lax == xla, lax == reference interpreter (when it runs), lax == `expected` if given.

    Returns lax's results. The interpreter is skipped only where `interpreter=False` (ops it
    is known to abort on); a crash otherwise fails the test, so a skipped oracle is visible.
    """
    got = run_lax(text, args)
    assert_same(got, run_xla(text, args), rtol=rtol, atol=atol, what="lax vs xla")
    assert_same(run_lax(text, args, jit=False), got, rtol=0, atol=0, what="eager vs jit")
    if interpreter:
        assert_same(got, interpret(text, args), rtol=rtol, atol=atol, what="lax vs interpreter")
    if expected is not None:
        assert_same(got, expected, rtol=rtol, atol=atol, what="lax vs numpy reference")
    return got


def random_array(
    rng: np.random.Generator, shape: Sequence[int], mlir_type: str, *, special: bool = False
) -> np.ndarray:
    """Random values of an element type; `special` mixes in 0, -0, inf, nan and extremes."""
    dt = ELEMENT_TYPES[mlir_type]
    shape = tuple(shape)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = (
            (max(int(info.min), -100), min(int(info.max), 100))
            if not special
            else (int(info.min), int(info.max))
        )
        return rng.integers(
            lo, hi, size=shape, endpoint=True, dtype=np.int64 if dt.kind == "i" else np.uint64
        ).astype(dt)
    if dt.kind == "c":
        comp = np.float32 if dt == np.complex64 else np.float64
        return (
            rng.standard_normal(shape).astype(comp) + 1j * rng.standard_normal(shape).astype(comp)
        ).astype(dt)
    x = rng.standard_normal(shape) * 3
    if special and x.size:
        flat = x.reshape(-1)
        picks = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30, 0.5, -2.5])
        idx = rng.integers(0, flat.size, size=min(flat.size, len(picks)))
        flat[idx] = picks[: len(idx)]
    return x.astype(dt)
