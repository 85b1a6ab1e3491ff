"""The eager fast path: concrete jax arrays go straight to one cached jax.jit whose traced body
checks them (juliabridge/function.py, lux/model.py). What it must not change: every signature
it has not seen is checked (a wrong call after a right one still raises, with the message the
numpy path gives), the x64 guard, the weights and state read at each call, and the results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from juliabridge import CallArgumentError, X64DisabledError
from juliabridge.function import all_concrete_arrays

from .conftest import require_backend
from .pinned_support import lower
from .test_pinned_calls import MODULE, K, X, _layout_bundle

ALL = ("lax", "xla", "enzyme")


def _fn(backend: str) -> Any:
    require_backend(backend)
    return juliabridge.load_mlir(MODULE, backend=backend)


def _message(call: Any, *args: Any) -> str:
    with pytest.raises(CallArgumentError) as e:
        call(*args)
    assert type(e.value) is CallArgumentError
    return str(e.value)


@pytest.mark.parametrize("backend", ALL)
def test_a_wrong_call_after_a_right_one_still_raises_the_numpy_message(backend: str) -> None:
    fn = _fn(backend)
    x, k = jnp.asarray(X), jnp.asarray(K)
    out = fn(x, k)
    assert isinstance(out, tuple) and len(out) == 1
    np.testing.assert_array_equal(out[0], X * K)
    wrong = [
        (X.astype(np.float16), K),  # dtype
        (X.T.copy(), K),  # shape (reversed: the hint)
        (X[:1], K),  # shape
        (X, K.astype(np.int8)),  # dtype of another argument
        (X,),  # count
        (X, K, K),
    ]
    for args in wrong:
        want = _message(fn, *args)  # numpy arrays: the checked path
        as_jax = tuple(jnp.asarray(a) for a in args)
        for _ in range(2):  # a failed trace is not cached: it raises every time
            assert _message(fn, *as_jax) == want
        np.testing.assert_array_equal(fn(x, k)[0], X * K)  # and the right call still runs


@pytest.mark.parametrize("backend", ALL)
def test_fast_path_errors_are_raised_outside_the_trace(backend: str) -> None:
    fn = _fn(backend)
    fn(jnp.asarray(X), jnp.asarray(K))
    with pytest.raises(CallArgumentError) as e:
        fn(jnp.asarray(X, jnp.float16), jnp.asarray(K))
    # As from numpy arguments: no chained tracing error, no note about JAX's filtered frames.
    assert e.value.__context__ is None and e.value.__cause__ is None
    assert not getattr(e.value, "__notes__", None)


@pytest.mark.parametrize("backend", ALL)
def test_mixed_and_converted_arguments_compute(backend: str) -> None:
    fn = _fn(backend)
    for args in [
        (jnp.asarray(X), K),
        (X, jnp.asarray(K)),
        (X.tolist(), jnp.asarray(K)),
        (jnp.asarray(X), jnp.asarray(K)),
    ]:
        np.testing.assert_array_equal(fn(*args)[0], X * K)


def test_transformations_after_eager_calls() -> None:
    fn = _fn("lax")
    x, k = jnp.asarray(X), jnp.asarray(K)
    fn(x, k)
    np.testing.assert_array_equal(jax.jit(fn)(x, k)[0], X * K)
    g = jax.grad(lambda x: fn(x, k)[0].sum())(x)
    np.testing.assert_array_equal(g, K.astype(np.float32))
    xs = jnp.stack([x, 2 * x])
    np.testing.assert_array_equal(jax.vmap(lambda x: fn(x, k)[0])(xs), np.stack([X, 2 * X]) * K)
    with pytest.raises(CallArgumentError, match="reversed"):
        jax.jit(fn)(x.T, k)


@pytest.mark.parametrize("backend", ["lax", "xla"])
def test_the_x64_guard_holds_for_arrays_made_while_it_was_on(backend: str) -> None:
    with jax.enable_x64(True):
        a = np.arange(3, dtype=np.float64)
        fn = juliabridge.load_mlir(lower(lambda a: (a * a,), a), backend=backend)
        wide = jnp.asarray(a)
        np.testing.assert_array_equal(fn(wide)[0], a * a)  # cached for this signature
    with jax.enable_x64(False), pytest.raises(X64DisabledError, match="jax_enable_x64"):
        fn(wide)


def test_all_concrete_arrays_admits_only_jax_arrays() -> None:
    a = jnp.ones(2)
    assert all_concrete_arrays((a, a)) and all_concrete_arrays(())
    assert not all_concrete_arrays((a, np.ones(2)))
    assert not all_concrete_arrays((a, 1.0))
    seen = []
    jax.jit(lambda t: seen.append(all_concrete_arrays((t,))) or t)(a)
    assert seen == [False]


# --- model(x) -----------------------------------------------------------------------------------


def _reference(model: Any, x: np.ndarray) -> np.ndarray:
    w, s = np.asarray(model.params["w"]), np.asarray(model.state["s"])
    return x * s + w


@pytest.mark.parametrize("backend", ALL)
def test_model_call_checks_every_new_signature(tmp_path: Path, backend: str) -> None:
    require_backend(backend)
    model = juliabridge.import_lux(_layout_bundle(tmp_path), backend=backend)
    x = np.random.default_rng(1).standard_normal((4, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(model(jnp.asarray(x)), _reference(model, x), rtol=1e-5, atol=1e-6)
    for bad in [x.astype(np.float16), x.astype(np.int32), x.T.copy(), x[:, :1]]:
        want = _message(model, bad)
        for _ in range(2):
            assert _message(model, jnp.asarray(bad)) == want
    assert _message(model, jnp.asarray(x), jnp.asarray(x)) == (
        "layout: the model takes one array: model(x) or model.apply(params, state, x); got 2 "
        "argument(s)"
    )
    # Another batch size (the module serves any): a new signature, checked and computed.
    x7 = np.random.default_rng(2).standard_normal((7, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(model(jnp.asarray(x7)), _reference(model, x7), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(jnp.asarray(x)), _reference(model, x), rtol=1e-5, atol=1e-6)


def test_model_call_reads_params_and_state_at_every_call(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_layout_bundle(tmp_path))
    x = jnp.asarray(np.random.default_rng(3).standard_normal((4, 2, 3)).astype(np.float32))
    model(x)
    model.params = {"w": model.params["w"] + 1}
    np.testing.assert_allclose(model(x), _reference(model, np.asarray(x)), rtol=1e-5, atol=1e-6)
    model.params["w"] = jnp.zeros((2, 3), jnp.float32)  # in place, same dict
    np.testing.assert_allclose(model(x), _reference(model, np.asarray(x)), rtol=1e-5, atol=1e-6)
    # The state apply returns, fed back: c counts up, s (an alias) is echoed unchanged.
    for step in range(1, 3):
        _, model.state = model.apply(model.params, model.state, x)
        np.testing.assert_array_equal(model.state["c"], np.arange(6).reshape(2, 3) + step)
        np.testing.assert_allclose(model(x), _reference(model, np.asarray(x)), rtol=1e-5, atol=1e-6)
    model.state = {**model.state, "s": 2 * model.state["s"]}
    np.testing.assert_allclose(model(x), _reference(model, np.asarray(x)), rtol=1e-5, atol=1e-6)


def test_julia_layout_on_the_fast_path(tmp_path: Path) -> None:
    root = _layout_bundle(tmp_path)
    mlir = juliabridge.import_lux(root)
    jl = juliabridge.import_lux(root, layout="julia")
    x = np.random.default_rng(4).standard_normal((4, 2, 3)).astype(np.float32)
    want = _reference(mlir, x).T
    for _ in range(2):
        np.testing.assert_allclose(jl(jnp.asarray(x.T)), want, rtol=1e-5, atol=1e-6)
    # MLIR-order x under layout="julia": the advice names the other layout, never this one.
    msg = _message(jl, jnp.asarray(x))
    assert "look like the MLIR (row-major) order" in msg and "layout='mlir'" in msg
