"""Pinned: derivatives of an imported module, on every backend, against derivatives written by hand.

The module has a non-differentiable (integer) argument between two float arguments and an
integer result between two float results, so a cotangent or tangent placed by position instead
of by differentiable index lands on the wrong value. It uses elementwise ops only, so the lax
backend lifts it too. Expectations: the partial derivatives of

    y1 = sin(x) * w,   n = k * k,   y2 = x * float(k) + exp(w)

written out in numpy below (not computed by JAX or by any backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import juliabridge
from juliabridge import SignatureMismatchError, TransformError

from .conftest import require_backend
from .pinned_support import Arg, Res, Spec, lower, write

ALL = ("lax", "xla", "enzyme")

RNG = np.random.default_rng(7)
X = RNG.standard_normal(3).astype(np.float32)
K = np.array([2, -1, 3], np.int32)
W = RNG.standard_normal(3).astype(np.float32)
C1 = RNG.standard_normal(3).astype(np.float32)
C2 = RNG.standard_normal(3).astype(np.float32)
TX = RNG.standard_normal(3).astype(np.float32)
TW = RNG.standard_normal(3).astype(np.float32)


def forward(x: Any, k: Any, w: Any) -> Any:
    return lax.sin(x) * w, k * k, x * k.astype(x.dtype) + lax.exp(w)


MODULE = lower(forward, X, K, W)


def by_hand_vjp(x: np.ndarray, k: np.ndarray, w: np.ndarray, c1: Any, c2: Any) -> Any:
    kf = k.astype(np.float64)
    x, w = x.astype(np.float64), w.astype(np.float64)
    return c1 * np.cos(x) * w + c2 * kf, c1 * np.sin(x) + c2 * np.exp(w)


def by_hand_jvp(x: np.ndarray, k: np.ndarray, w: np.ndarray, tx: Any, tw: Any) -> Any:
    kf = k.astype(np.float64)
    x, w = x.astype(np.float64), w.astype(np.float64)
    return np.cos(x) * w * tx + np.sin(x) * tw, kf * tx + np.exp(w) * tw


def test_module_lifts_onto_lax() -> None:
    assert "stablehlo.sine" in MODULE and "stablehlo.convert" in MODULE
    assert juliabridge.load_mlir(MODULE, backend="auto").backend_name == "lax"


def _fn(backend: str) -> Any:
    require_backend(backend)
    return juliabridge.load_mlir(MODULE, backend=backend)


def _loss(fn: Any) -> Any:
    def loss(x: Any, w: Any) -> Any:
        y1, n, y2 = fn(x, K, w)
        return jnp.sum(C1 * y1) + jnp.sum(C2 * y2) + 0.0 * jnp.sum(n)

    return loss


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("jit", [False, True])
def test_grad_places_cotangents_by_differentiable_index(backend: str, jit: bool) -> None:
    fn = _fn(backend)
    grad = jax.grad(_loss(fn), argnums=(0, 1))
    gx, gw = (jax.jit(grad) if jit else grad)(X, W)
    want_x, want_w = by_hand_vjp(X, K, W, C1, C2)
    np.testing.assert_allclose(gx, want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, want_w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ALL)
def test_vjp_with_one_result_cotangent_zero(backend: str) -> None:
    # Only y2 carries a cotangent: a rule that put it on y1 (position 1 of the float results
    # being index 2 overall) would give c2 * cos(x) * w instead of c2 * k.
    fn = _fn(backend)
    primals, pullback = jax.vjp(lambda x, w: fn(x, K, w), X, W)
    np.testing.assert_array_equal(primals[1], K * K)
    int_ct = np.zeros(3, jax.dtypes.float0)
    gx, gw = pullback((np.zeros(3, np.float32), int_ct, C2))
    want_x, want_w = by_hand_vjp(X, K, W, 0.0, C2)
    np.testing.assert_allclose(gx, want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, want_w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["lax", "enzyme"])
def test_jvp_places_tangents_by_differentiable_index(backend: str) -> None:
    fn = _fn(backend)
    primals, tangents = jax.jvp(lambda x, w: fn(x, K, w), (X, W), (TX, TW))
    t1, tn, t2 = tangents
    want1, want2 = by_hand_jvp(X, K, W, TX, TW)
    np.testing.assert_allclose(t1, want1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t2, want2, rtol=1e-5, atol=1e-6)
    assert tn.dtype == jax.dtypes.float0
    np.testing.assert_allclose(primals[2], X * K + np.exp(W), rtol=1e-6)


@pytest.mark.parametrize("backend", ["lax", "enzyme"])
def test_jvp_with_only_the_second_float_argument_moving(backend: str) -> None:
    fn = _fn(backend)
    _, (t1, _, t2) = jax.jvp(lambda w: fn(X, K, w), (W,), (TW,))
    want1, want2 = by_hand_jvp(X, K, W, 0.0, TW)
    np.testing.assert_allclose(t1, want1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t2, want2, rtol=1e-5, atol=1e-6)


def test_xla_has_no_forward_mode_and_says_so() -> None:
    fn = _fn("xla")
    with pytest.raises(TransformError, match="forward mode"):
        jax.jvp(lambda x, w: fn(x, K, w), (X, W), (TX, TW))


@pytest.mark.parametrize("backend", ["xla", "enzyme"])
def test_second_order_is_refused_on_foreign_backends(backend: str) -> None:
    fn = _fn(backend)

    def scalar(x: Any) -> Any:
        return jnp.sum(fn(x, K, W)[0])

    with pytest.raises(TransformError, match="second-order"):
        jax.grad(lambda x: jnp.sum(jax.grad(scalar)(x)))(X)
    with pytest.raises(TransformError):
        jax.hessian(scalar)(X)


def test_second_order_on_lax_matches_the_hand_written_hessian() -> None:
    fn = _fn("lax")
    h = jax.hessian(lambda x: jnp.sum(fn(x, K, W)[0]))(X)
    np.testing.assert_allclose(h, np.diag(-np.sin(X) * W), rtol=1e-5, atol=1e-6)


# --- derivative failures -----------------------------------------------------------------------


def test_enzyme_forward_mode_failure_is_a_transform_error() -> None:
    # Enzyme has no forward rule for reduce_window (docs/transforms.md); the failure must be typed.
    require_backend("enzyme")
    x = np.arange(4, dtype=np.float32)
    text = lower(lambda x: lax.reduce_window(x, -np.inf, lax.max, (2,), (2,), "VALID"), x)
    fn = juliabridge.load_mlir(text, backend="enzyme")
    with pytest.raises(TransformError):
        jax.jvp(lambda x: fn(x)[0], (x,), (np.ones(4, np.float32),))


# --- the xla backend's VJP module from a bundle ------------------------------------------------


def _vjp_module(drop_int_cotangent: bool = False) -> str:
    def vjp(x: Any, k: Any, w: Any, c1: Any, cn: Any, c2: Any) -> Any:
        kf = k.astype(x.dtype)
        gx = c1 * lax.cos(x) * w + c2 * kf
        gw = c1 * lax.sin(x) + c2 * lax.exp(w)
        return gx, jnp.zeros_like(k), gw

    if drop_int_cotangent:
        return lower(lambda x, k, w, c1, c2: vjp(x, k, w, c1, None, c2), X, K, W, C1, C2)
    return lower(vjp, X, K, W, C1, K, C2)


def _bundle(tmp_path: Path, vjp: str) -> Path:
    spec = Spec(
        name="t",
        mlir=MODULE,
        args=[Arg("input", [1], X), Arg("parameter", ["k"], K), Arg("parameter", ["w"], W)],
        results=[
            Res([["output", 1]], (3,), "f32"),
            Res([["output", 2]], (3,), "i32"),
            Res([["output", 3]], (3,), "f32"),
        ],
        vjp=vjp,
    )
    return write(tmp_path / "t.bundle", spec)


def test_xla_uses_the_bundles_vjp_module(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path, _vjp_module()), backend="xla")

    def loss(params: Any, x: Any) -> Any:
        (y1, _n, y2), _ = model.apply(params, model.state, x)
        return jnp.sum(C1 * y1) + jnp.sum(C2 * y2)

    g = jax.grad(lambda w: loss({**model.params, "w": w}, X))(model.params["w"])
    _, want_w = by_hand_vjp(X, K, W, C1, C2)
    np.testing.assert_allclose(g, want_w, rtol=1e-5, atol=1e-6)
    want_x, _ = by_hand_vjp(X, K, W, C1, C2)
    np.testing.assert_allclose(jax.grad(loss, argnums=1)(model.params, X), want_x, rtol=1e-5)


def test_a_vjp_module_with_the_wrong_signature_is_refused(tmp_path: Path) -> None:
    root = _bundle(tmp_path, _vjp_module(drop_int_cotangent=True))
    try:
        model = juliabridge.import_lux(root, backend="xla")
    except SignatureMismatchError:
        return  # refused at load time: also right
    with pytest.raises(TransformError, match="signature"):
        jax.grad(lambda x: jnp.sum(model.apply(model.params, model.state, x)[0][0]))(X)


# --- failures inside XLA are typed (guard) ------------------------------------------------------

_MISSING_KERNEL = """module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.custom_call @jb_no_such_target(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"""


def test_a_module_xla_cannot_run_is_an_execution_error_on_every_call() -> None:
    # trust=True admits a custom call this platform has no kernel for; XLA refuses it when it
    # compiles. The first call (which compiles) and every later one end in ExecutionError,
    # naming the module and the first line of XLA's message, never a raw JaxRuntimeError.
    from juliabridge import ExecutionError

    fn = juliabridge.load_mlir(_MISSING_KERNEL, backend="xla", trust=True)
    x = np.ones(2, np.float32)
    for _ in range(2):
        with pytest.raises(ExecutionError) as e:
            fn(x)
        msg = str(e.value)
        assert msg.startswith("<mlir text>: XLA could not compile or run the module (")
        assert "jb_no_such_target" in msg and "\n" not in msg  # XLA's first line only
        assert msg.endswith(
            "). If it names a custom call this platform lacks, run the model on the platform it "
            "was exported for; if it is out of memory, use a smaller batch; JULIABRIDGE_DEBUG=1 "
            "shows the backend's own output."
        )
        assert e.value.__cause__ is not None
    with pytest.raises(ExecutionError, match="XLA could not compile"):
        jax.grad(lambda x: jnp.sum(fn(x)[0]))(x)


# --- vmap of an imported call (a loop over the mapped axis) --------------------------------------


def test_vmap_maps_only_the_batched_arguments_on_any_axis() -> None:
    # xla runs the module as a juliabridge primitive, so vmap goes through its batching rule.
    fn = _fn("xla")
    xs = RNG.standard_normal((3, 4)).astype(np.float32)  # mapped over axis 1: 4 samples of x
    y1, n, y2 = jax.vmap(lambda x: fn(x, K, W), in_axes=1, out_axes=0)(xs)
    for s in range(4):
        x = xs[:, s].astype(np.float64)
        np.testing.assert_allclose(y1[s], np.sin(x) * W, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y2[s], x * K + np.exp(W.astype(np.float64)), rtol=1e-5)
        np.testing.assert_array_equal(n[s], K * K)
    ws = RNG.standard_normal((2, 3)).astype(np.float32)  # now w mapped on axis 0, x fixed
    y1, _, _ = jax.vmap(lambda w: fn(X, K, w))(ws)
    np.testing.assert_allclose(y1, np.sin(X.astype(np.float64)) * ws, rtol=1e-5, atol=1e-6)


def test_vmap_of_grad_gives_per_sample_gradients() -> None:
    fn = _fn("xla")
    xs = RNG.standard_normal((5, 3)).astype(np.float32)
    gx = jax.vmap(jax.grad(lambda x: _loss(fn)(x, W)))(xs)
    for s in range(5):
        want_x, _ = by_hand_vjp(xs[s], K, W, C1, C2)
        np.testing.assert_allclose(gx[s], want_x, rtol=1e-5, atol=1e-6)


# --- guard: typed errors and the native-stderr capture, seen from the caller --------------------
# What native code (a backend, XLA) prints on file descriptor 2 while a module is lowered is
# held back: written out unchanged when the step succeeds, dropped when it fails, shown as it
# comes with JULIABRIDGE_DEBUG=1. os.write(2, ...) stands in for native code here.

_XLA_HINT = (
    "). If it names a custom call this platform lacks, run the model on the platform it was "
    "exported for; if it is out of memory, use a smaller batch; JULIABRIDGE_DEBUG=1 shows the "
    "backend's own output."
)
_DERIVATIVE_HINT = (
    "). Enzyme does not differentiate every StableHLO op in every mode (e.g. forward mode "
    "through reduce_window/max-pooling); use backend='lax' (JAX's own rules, every mode), "
    "reverse mode (jax.grad/jax.vjp), or backend='xla' with a VJP module."
)


@pytest.fixture
def no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JULIABRIDGE_DEBUG", raising=False)


def _prints_then_raises(text: bytes, error: BaseException) -> Any:
    import os

    def fn(*args: Any, **kwargs: Any) -> Any:
        os.write(2, text)
        raise error

    return fn


def test_native_stderr_is_replayed_on_success_and_dropped_on_failure(
    capfd: pytest.CaptureFixture[str], no_debug: None
) -> None:
    import os

    from juliabridge.transforms.typed_errors import quiet_native_stderr

    with quiet_native_stderr():
        os.write(2, b"compiler notes\n")
        assert capfd.readouterr().err == ""  # held back while the block runs
    assert capfd.readouterr().err == "compiler notes\n"
    with pytest.raises(ValueError, match="pass failed"), quiet_native_stderr():
        _prints_then_raises(b"the whole module\n", ValueError("pass failed"))()
    assert capfd.readouterr().err == ""
    with quiet_native_stderr():
        pass
    assert capfd.readouterr().err == ""  # nothing printed: nothing written


def test_a_nested_capture_is_part_of_the_outer_one(
    capfd: pytest.CaptureFixture[str], no_debug: None
) -> None:
    # The inner block fails but the outer one succeeds: what the inner printed is the outer
    # block's output, replayed with it (one capture per process, not one per block).
    import os

    from juliabridge.transforms.typed_errors import quiet_native_stderr

    with quiet_native_stderr():
        os.write(2, b"outer\n")
        with pytest.raises(RuntimeError), quiet_native_stderr():
            _prints_then_raises(b"inner\n", RuntimeError("x"))()
        assert capfd.readouterr().err == ""
    assert capfd.readouterr().err == "outer\ninner\n"
    with pytest.raises(RuntimeError), quiet_native_stderr():
        with quiet_native_stderr():
            os.write(2, b"inner ok\n")
        raise RuntimeError("outer fails")
    assert capfd.readouterr().err == ""


def test_debug_mode_shows_native_stderr_of_a_failure(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.transforms.typed_errors import quiet_native_stderr

    monkeypatch.setenv("JULIABRIDGE_DEBUG", "1")
    with pytest.raises(ValueError), quiet_native_stderr():
        _prints_then_raises(b"visible\n", ValueError("x"))()
    assert capfd.readouterr().err == "visible\n"


def test_typed_turns_a_backend_failure_into_an_execution_error(
    capfd: pytest.CaptureFixture[str], no_debug: None
) -> None:
    from juliabridge import ExecutionError
    from juliabridge.transforms.typed_errors import typed

    cause = ValueError("\n  custom call jb_x has no kernel\nsecond line\n")
    run = typed("m.bundle", None, _prints_then_raises(b"native noise\n", cause))
    with pytest.raises(ExecutionError) as e:
        run(1, k=2)
    assert str(e.value) == (
        "m.bundle: XLA could not compile or run the module (ValueError: custom call jb_x has no "
        "kernel" + _XLA_HINT
    )
    assert e.value.__cause__ is cause
    assert capfd.readouterr().err == ""  # captured by default, dropped on failure
    quiet = typed("m.bundle", None, _prints_then_raises(b"shown\n", cause), capture=False)
    with pytest.raises(ExecutionError):
        quiet()
    assert capfd.readouterr().err == "shown\n"
    assert typed("m", None, lambda a, *, b: a + b)(1, b=2) == 3


def test_typed_names_the_derivative_in_a_transform_error(no_debug: None) -> None:
    from juliabridge.transforms.typed_errors import typed

    run = typed("net", "forward-mode derivative", _prints_then_raises(b"", KeyError("op")))
    with pytest.raises(TransformError) as e:
        run()
    assert str(e.value) == (
        "net: the backend could not compute the forward-mode derivative of this module "
        "(KeyError: 'op'" + _DERIVATIVE_HINT
    )


@pytest.mark.parametrize(
    ("message", "shown"),
    [("", "AssertionError"), ("  \n \n", "AssertionError"), ("y" * 1000, "y" * 400)],
)
def test_the_typed_message_quotes_one_short_line(message: str, shown: str, no_debug: None) -> None:
    # a bare `assert` in a backend has no message: its type stands in; a long one is cut
    from juliabridge import ExecutionError
    from juliabridge.transforms.typed_errors import typed

    with pytest.raises(ExecutionError) as e:
        typed("m", None, _prints_then_raises(b"", AssertionError(message)))()
    assert f"(AssertionError: {shown}). If it names" in str(e.value)


def test_typed_lets_juliabridge_errors_and_interrupts_through(no_debug: None) -> None:
    from juliabridge import CallArgumentError
    from juliabridge.transforms.typed_errors import typed

    own = CallArgumentError("x: expects rank 2")
    with pytest.raises(CallArgumentError) as e:
        typed("m", None, _prints_then_raises(b"", own))()
    assert e.value is own
    with pytest.raises(KeyboardInterrupt):
        typed("m", "reverse-mode derivative", _prints_then_raises(b"", KeyboardInterrupt()))()


def _shape_picky(x: Any) -> Any:
    # Runs when jit traces: fine for 2 elements; 3 is a backend failure, 4 juliabridge's own.
    import os

    from juliabridge import CallArgumentError

    if x.shape == (3,):
        os.write(2, b"tracing 3\n")
        raise ValueError("no kernel for 3")
    if x.shape == (4,):
        raise CallArgumentError("four is refused")
    return x * 2


def test_compiled_types_failures_on_first_and_later_calls(
    capfd: pytest.CaptureFixture[str], no_debug: None
) -> None:
    from juliabridge import CallArgumentError, ExecutionError
    from juliabridge.transforms.typed_errors import Compiled

    first_fails = Compiled("m", "reverse-mode derivative", _shape_picky)
    with pytest.raises(TransformError, match=r"^m: the backend could not compute the reverse"):
        first_fails(np.ones(3, np.float32))
    assert capfd.readouterr().err == ""  # the first call (lowering, compiling) is quiet

    f = Compiled("net", None, _shape_picky)
    np.testing.assert_array_equal(f(np.arange(2.0, dtype=np.float32)), [0.0, 2.0])
    # A later call that has to trace again fails on the hot path, still typed and named ...
    with pytest.raises(ExecutionError) as e:
        f(np.ones(3, np.float32))
    assert str(e.value) == (
        "net: XLA could not compile or run the module (ValueError: no kernel for 3" + _XLA_HINT
    )
    assert isinstance(e.value.__cause__, ValueError)
    # ... without the capture (process-wide and serialized: warm calls must not queue on it)
    assert capfd.readouterr().err == "tracing 3\n"
    with pytest.raises(CallArgumentError, match="four is refused"):
        f(np.ones(4, np.float32))
    np.testing.assert_array_equal(f(np.ones(2, np.float32)), [2.0, 2.0])


def test_mlir_dump_records_are_dropped_and_their_files_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # enzyme-ad logs "Enzyme MLIR dumped to FILE" (through absl, or the root logger) for every
    # failed pass pipeline and leaves FILE behind; after drop_enzyme_dumps() neither remains,
    # unless JULIABRIDGE_DEBUG=1. Other records are untouched.
    import logging

    from juliabridge.backends.enzyme import dumps as guard

    monkeypatch.delenv("JULIABRIDGE_DEBUG", raising=False)
    loggers = [logging.getLogger("absl"), logging.getLogger()]
    had = [guard._FILTER in lg.filters for lg in loggers]
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep(logging.DEBUG)
    try:
        guard.drop_enzyme_dumps()
        guard.drop_enzyme_dumps()  # idempotent
        for lg in loggers:
            lg.addHandler(handler)
            monkeypatch.setattr(lg, "propagate", False)
            monkeypatch.setattr(lg, "level", logging.DEBUG)
        for i, lg in enumerate(loggers):
            dump = tmp_path / f"tmp{i}.mlir"
            dump.write_text("module {}")
            lg.warning("Enzyme MLIR dumped to %s", dump)
            assert not dump.exists()
            lg.warning("Enzyme MLIR dumped to %s", tmp_path / "already-gone.mlir")
            lg.warning("compiling %s", dump.name)
        assert seen == ["compiling tmp0.mlir", "compiling tmp1.mlir"]
        monkeypatch.setenv("JULIABRIDGE_DEBUG", "1")
        kept = tmp_path / "tmpkept.mlir"
        kept.write_text("module {}")
        loggers[0].warning("Enzyme MLIR dumped to %s", kept)
        assert kept.exists() and seen[-1] == f"Enzyme MLIR dumped to {kept}"
    finally:
        for lg, before in zip(loggers, had):
            lg.removeHandler(handler)
            if not before:
                lg.removeFilter(guard._FILTER)


# --- primitives: the rules every juliabridge primitive gets ---------------------------------------


def test_registered_rules_run_eagerly_and_inlined_with_typed_failures(no_debug: None) -> None:
    # call_p, jvp_p and vjp_p get their rules when juliabridge is imported; the same
    # registration on a fresh primitive shows what they do: an eager bind runs the backend's
    # jitted entry, a bind under jit lowers its traceable function into the caller's program,
    # and a failure of either is typed and names the module and the derivative.
    from juliabridge.stablehlo import TensorSpec
    from juliabridge.support.jaxinternals import make_primitive
    from juliabridge.transforms import primitives
    from juliabridge.transforms.call_target import CallTarget

    spec = TensorSpec((3,), "f32")
    target = CallTarget(
        name="triple",
        in_specs=[spec],
        out_specs=[spec, spec],
        primal=lambda x: (x * 3, x + 1),
        jvp_factory=lambda: None,
        vjp_factory=lambda: None,
    )
    asked: list[bool] = []
    broken = False

    def get_fn(t: CallTarget, jitted: bool) -> Any:
        assert t is target
        asked.append(jitted)
        if broken:
            raise LookupError("no such entry")
        return jax.jit(t.primal) if jitted else t.primal

    prim = make_primitive("jb_test_triple")
    prim.def_abstract_eval(
        lambda *a, target: [jax.core.ShapedArray((3,), np.float32) for _ in target.out_specs]
    )
    primitives._register(prim, get_fn, "reverse-mode derivative")
    x = np.array([1.0, -2.0, 0.5], np.float32)
    eager = prim.bind(x, target=target)
    np.testing.assert_array_equal(eager[0], [3.0, -6.0, 1.5])
    np.testing.assert_array_equal(eager[1], [2.0, -1.0, 1.5])
    assert asked == [True]
    inlined = jax.jit(lambda v: prim.bind(v, target=target))(x)
    np.testing.assert_array_equal(inlined[0], [3.0, -6.0, 1.5])
    np.testing.assert_array_equal(inlined[1], [2.0, -1.0, 1.5])
    assert asked == [True, False]
    broken = True
    want = (
        "triple: the backend could not compute the reverse-mode derivative of this module "
        "(LookupError: no such entry" + _DERIVATIVE_HINT
    )
    for call in (
        lambda: prim.bind(x, target=target),
        lambda: jax.jit(lambda v: prim.bind(v, target=target))(x + 1),
    ):
        with pytest.raises(TransformError) as e:
            call()
        assert str(e.value) == want


# --- derive: JVP and VJP functions and modules built from a traceable primal ---------------------
# (Enzyme's backend uses these; they are plain JAX, so they are pinned here without enzyme-ad.)


def _specs() -> tuple[Any, Any]:
    from juliabridge.stablehlo import TensorSpec

    f, i = TensorSpec((3,), "f32"), TensorSpec((3,), "i32")
    return (f, i, f), (f, i, f)


def test_derived_jvp_takes_tangents_of_the_float_arguments_only() -> None:
    from juliabridge.transforms import derive

    ins, outs = _specs()
    jvp = derive.jvp_from_primal(forward, ins, outs)
    t1, t2 = jvp(X, K, W, TX, TW)  # tangents of x and w, then of y1 and y2 (not of n)
    want1, want2 = by_hand_jvp(X, K, W, TX, TW)
    np.testing.assert_allclose(t1, want1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t2, want2, rtol=1e-5, atol=1e-6)
    assert derive.jvp_signature(ins, outs) == ([*ins, ins[0], ins[2]], [outs[0], outs[2]])


def test_derived_jvp_and_vjp_modules_follow_their_conventions() -> None:
    from juliabridge.stablehlo import parse_module
    from juliabridge.transforms import derive

    ins, outs = _specs()
    jvp_text = derive.jvp_module_text(forward, ins, outs)
    assert parse_module(jvp_text).arguments == tuple(derive.jvp_signature(ins, outs)[0])
    t1, t2 = juliabridge.load_mlir(jvp_text, backend="lax")(X, K, W, TX, TW)
    want1, want2 = by_hand_jvp(X, K, W, TX, TW)
    np.testing.assert_allclose(t1, want1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t2, want2, rtol=1e-5, atol=1e-6)

    vjp_text = derive.vjp_module_text(forward, ins, outs)
    want_in, want_out = derive.vjp_signature(ins, outs)
    assert want_in == [*ins, *outs] and want_out == list(ins)
    m = parse_module(vjp_text)
    assert (list(m.arguments), list(m.results)) == (want_in, want_out)
    gx, gk, gw = juliabridge.load_mlir(vjp_text, backend="lax")(X, K, W, C1, K, C2)
    want_x, want_w = by_hand_vjp(X, K, W, C1, C2)
    np.testing.assert_allclose(gx, want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(gk, np.zeros(3, np.int32))  # an integer argument: zeros
    assert np.asarray(gk).dtype == np.int32
