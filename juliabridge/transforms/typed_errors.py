"""Everything a backend raises while lowering, compiling or running a module becomes typed, and
what native code prints meanwhile stays out of the user's terminal.

- `typed(...)` turns any exception other than a JuliaBridgeError into a TransformError (for a
  derivative) or an ExecutionError (for the module itself): jaxlib's JaxRuntimeError for a
  custom call this platform lacks, enzyme-ad's ValueError for a failed pass pipeline, its
  AttributeError and bare AssertionErrors.
- `quiet_native_stderr()` sends file descriptor 2 to a temporary file while a module is lowered
  in this process (enzyme-ad prints the whole module there when a pass fails, and Python's
  logging the traceback); on success what was captured is written out unchanged, on failure it
  is dropped, unless JULIABRIDGE_DEBUG=1, which disables the capture.

enzyme-ad's dump files are dropped by the enzyme backend itself (backends/enzyme/dumps.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ExecutionError, JuliaBridgeError, TransformError


def debug_enabled() -> bool:
    """JULIABRIDGE_DEBUG=1: show what Enzyme and XLA print, keep their dump files."""
    return os.environ.get("JULIABRIDGE_DEBUG", "").strip() not in ("", "0")


_CAPTURE = threading.RLock()
_depth = 0


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Capture fd 2 for the block: replayed if it succeeds, dropped if it raises."""
    global _depth
    if debug_enabled():
        yield
        return
    with _CAPTURE:
        if _depth:
            yield
            return
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all: nothing to protect
            yield
            return
        sink = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
        ok = False
        try:
            sys.stderr.flush()
            os.dup2(sink.fileno(), 2)
            _depth += 1
            try:
                yield
                ok = True
            finally:
                _depth -= 1
                with contextlib.suppress(ValueError, OSError):
                    sys.stderr.flush()
                os.dup2(saved, 2)
            if ok:
                sink.seek(0)
                data = sink.read()
                if data:
                    os.write(2, data)
        finally:
            os.close(saved)
            sink.close()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:400]


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _raised_in_juliabridge(e: BaseException) -> str | None:
    """'file:line' within juliabridge where `e` was raised, when it is not JAX's or jaxlib's
    own exception and its innermost Python frame is juliabridge's code (other than this
    module, which only calls what fails below it); else None."""
    tb = e.__traceback__
    if tb is None or type(e).__module__.split(".")[0] in ("jax", "jaxlib", "enzyme_ad"):
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = os.path.abspath(tb.tb_frame.f_code.co_filename)
    if not path.startswith(_PACKAGE) or path == os.path.abspath(__file__):
        return None
    return f"juliabridge/{path[len(_PACKAGE) :]}:{tb.tb_lineno}"


def as_typed(name: str, what: str | None, e: Exception) -> JuliaBridgeError:
    """The typed error for a backend's failure `e`: TransformError for a derivative (`what`
    names it), else ExecutionError."""
    if what is not None:
        return TransformError(
            f"{name}: the backend could not compute the {what} of this module "
            f"({type(e).__name__}: {_first_line(e)}). Enzyme does not differentiate "
            "every StableHLO op in every mode (e.g. forward mode through "
            "reduce_window/max-pooling); use backend='lax' (JAX's own rules, every mode), "
            "reverse mode (jax.grad/jax.vjp), or backend='xla' with a VJP module."
        )
    own = _raised_in_juliabridge(e)
    if own is not None:
        return ExecutionError(
            f"{name}: juliabridge itself failed while preparing or running the call "
            f"({type(e).__name__}: {_first_line(e)}, at {own}); neither the module nor XLA is "
            "at fault. This is a bug in juliabridge: please report it with this message."
        )
    return ExecutionError(
        f"{name}: XLA could not compile or run the module ({type(e).__name__}: "
        f"{_first_line(e)}). If it names a custom call this platform lacks, run the "
        "model on the platform it was exported for; if it is out of memory, use a "
        "smaller batch; JULIABRIDGE_DEBUG=1 shows the backend's own output."
    )


def typed(
    name: str, what: str | None, fn: Callable[..., Any], *, capture: bool = True
) -> Callable[..., Any]:
    """`fn` with failures typed (as_typed); KeyboardInterrupt and the like pass through.
    With `capture`, native stderr is captured while it runs (only for lowering and
    compiling: the capture is process-wide and serialized)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            if not capture:
                return fn(*args, **kwargs)
            with quiet_native_stderr():
                return fn(*args, **kwargs)
        except JuliaBridgeError:
            raise
        except Exception as e:
            raise as_typed(name, what, e) from e

    return run


class Compiled:
    """jax.jit(fn) whose first call (which lowers and compiles) is quiet and whose every call
    ends in a typed error; later calls only run, without the stderr capture."""

    def __init__(self, name: str, what: str | None, fn: Callable[..., Any]) -> None:
        import jax

        self._name, self._what = name, what
        self._jitted = jax.jit(fn)
        self._first = typed(name, what, self._jitted)
        self._warm = False

    def __call__(self, *args: Any) -> Any:
        if self._warm:  # the hot path of an eager call: one try, no capture
            try:
                return self._jitted(*args)
            except JuliaBridgeError:
                raise
            except Exception as e:
                raise as_typed(self._name, self._what, e) from e
        out = self._first(*args)
        self._warm = True
        return out
