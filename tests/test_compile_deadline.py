"""The first compile of an untrusted module runs under a deadline (backends/deadline.py, issue
50): a module that compiles slowly ends as a ResourceLimitError naming it and the limit, this
process stays usable, and trusted modules never take the child's path."""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.backends import deadline
from juliabridge.errors import JuliaBridgeError, ResourceLimitError
from juliabridge.support import childproc
from juliabridge.support.jaxversion import release

C = "tensor<4xcomplex<f32>>"
F = "tensor<4xf32>"


def _chain(op: str, n: int, t: str) -> str:
    body = "\n".join(f"    %v{i + 1} = stablehlo.{op} %v{i} : {t}" for i in range(n))
    return (
        f"module @m {{\n  func.func public @main(%v0: {t}) -> {t} {{\n{body}\n"
        f"    return %v{n} : {t}\n  }}\n}}\n"
    )


#: 20 chained complex sqrt: about 40 s for XLA to compile on jax 0.10.2 (0.1 s in f32), far
#: past a 3 s limit. jaxlib 0.12.1's XLA compiles them in under a second, so there the limit is
#: one the child cannot meet at all (starting Python and importing jax take longer): the
#: mechanism (stop the child at the limit, a typed error, this process usable) is what is
#: tested on every version, a real slow compile where XLA is slow.
SLOW = _chain("sqrt", 20, C)
SLOW_COMPILES_SLOWLY = release(jax.__version__) < (0, 12, 1)
LIMIT_S = 3.0 if SLOW_COMPILES_SLOWLY else 0.3


@pytest.fixture
def no_child(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record (instead of run) any child the deadline would start."""
    started: list[Any] = []

    def refuse(*args: Any, **kw: Any) -> Any:
        started.append(args)
        raise AssertionError("the deadline started a child")

    monkeypatch.setattr(childproc, "run", refuse)
    return started


@pytest.mark.parametrize("backend", ["xla", "lax"])
def test_a_slow_compile_is_a_resource_limit_error_and_the_process_stays_usable(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.setenv(deadline.ENV, str(LIMIT_S))
    # Past the complex weights of the op budget (budget.COMPLEX_EXPANSION), so the deadline
    # is what stops it.
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", str(10**7))
    t0 = time.monotonic()
    with pytest.raises(ResourceLimitError) as e:
        juliabridge.load_mlir(SLOW, backend=backend)
    took = time.monotonic() - t0
    msg = str(e.value)
    assert msg.startswith(
        f"<mlir text>: compiling the module did not finish within the {LIMIT_S:g} s"
    )
    assert "JULIABRIDGE_COMPILE_LIMIT=SECONDS" in msg and "trust=True" in msg
    assert took < LIMIT_S + 30  # the child is stopped at the limit; parsing and lifting besides
    # Usable: a module loads and computes what numpy computes.
    fn = juliabridge.load_mlir(_chain("sqrt", 2, F), backend=backend)
    x = np.array([1.0, 4.0, 9.0, 16.0], np.float32)
    np.testing.assert_allclose(np.asarray(fn(x)[0]), np.sqrt(np.sqrt(x)), rtol=1e-6)


def test_the_keyword_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from juliabridge.backends.select import make_backend
    from juliabridge.stablehlo import parse_module

    monkeypatch.setenv(deadline.ENV, "0")
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", str(10**7))
    limit = 2.5 if SLOW_COMPILES_SLOWLY else 0.25
    with pytest.raises(ResourceLimitError, match=rf"within the {limit:g} s compile limit"):
        make_backend(parse_module(SLOW), "xla", compile_limit=limit)


def test_a_module_that_compiles_in_time_loads_and_computes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(deadline.ENV, "120")
    text = _chain("sqrt", deadline.COMPLEX_PROBE_LINES, C)
    assert deadline.needs_probe(juliabridge.stablehlo.parse_module(text))
    fn = juliabridge.load_mlir(text, backend="xla")
    x = np.array([1 + 1j, -4, 9j, 16], np.complex64)
    want = x
    for _ in range(deadline.COMPLEX_PROBE_LINES):
        want = np.sqrt(want)
    np.testing.assert_allclose(np.asarray(fn(x)[0]), want, rtol=1e-5)


def test_trusted_modules_never_start_the_child(no_child: list[Any]) -> None:
    juliabridge.load_mlir(SLOW, backend="xla", trust=True)  # loading only: the call compiles
    assert no_child == []


def test_short_real_modules_skip_the_child(no_child: list[Any]) -> None:
    fn = juliabridge.load_mlir(_chain("sqrt", 3, F), backend="xla")
    assert fn(np.ones(4, np.float32))[0].shape == (4,)
    assert no_child == []


def test_zero_turns_the_deadline_off(monkeypatch: pytest.MonkeyPatch, no_child: list[Any]) -> None:
    monkeypatch.setenv(deadline.ENV, "0")
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", str(10**7))
    juliabridge.load_mlir(SLOW, backend="xla")
    assert no_child == []


def test_long_modules_and_complex_ones_take_the_child() -> None:
    from juliabridge.stablehlo import parse_module

    assert deadline.needs_probe(parse_module(_chain("sqrt", deadline.COMPLEX_PROBE_LINES, C)))
    assert not deadline.needs_probe(parse_module(_chain("sqrt", 2, C)))
    assert deadline.needs_probe(parse_module(_chain("sqrt", deadline.COMPILE_PROBE_LINES, F)))
    assert not deadline.needs_probe(parse_module(_chain("sqrt", 100, F)))


@pytest.mark.parametrize("bad", ["soon", "-1", "nan", "inf"])
def test_a_bad_limit_is_a_typed_error(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(deadline.ENV, bad)
    with pytest.raises(JuliaBridgeError, match=r"JULIABRIDGE_COMPILE_LIMIT.* is not a number"):
        juliabridge.load_mlir(_chain("sqrt", 1, F), backend="xla")
    with pytest.raises(JuliaBridgeError, match="compile_limit"):
        deadline.compile_limit(-2.0)
    assert deadline.compile_limit(7) == 7.0
    monkeypatch.delenv(deadline.ENV)
    assert deadline.compile_limit() == deadline.DEFAULT_COMPILE_LIMIT
