"""stablehlo.rng_bit_generator and stablehlo.rng on the lax backend.

rng_bit_generator is deterministic given its state: lax must reproduce XLA bit for bit, and
both must agree with values recorded independently of this code (the spec's example,
StableHLO's testdata) and with jax.lax.rng_bit_generator where JAX accepts the form. The
reference interpreter has no rng support (it aborts). stablehlo.rng draws anew on every run,
on XLA too, so it is checked statistically (with failure probabilities below 1e-6).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import scipy.stats

import juliabridge
from juliabridge import TransformError, UnsupportedOpError

from ._elementwise_util import (
    dt,
    module,
)
from .oracles import run_lax, run_xla

# 64-bit types cross @main (the x64 fixture of tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")

ALGORITHMS = ("DEFAULT", "THREE_FRY", "PHILOX")
OUT_TYPES = ("ui64", "ui32", "ui16", "ui8", "i64", "i32", "i8", "f64", "f32", "f16", "bf16")


def _rbg(algorithm: str, words: int, out: str, *, generic: bool = True) -> str:
    st = f"tensor<{words}xui64>"
    if generic:
        op = (
            f'%0:2 = "stablehlo.rng_bit_generator"(%a0) {{rng_algorithm = '
            f"#stablehlo<rng_algorithm {algorithm}>}} : ({st}) -> ({st}, {out})"
        )
    else:
        op = f"%0:2 = stablehlo.rng_bit_generator %a0, algorithm = {algorithm} : ({st}) -> ({st}, {out})"
    return module([st], [op], [("%0#0", st), ("%0#1", out)])


def _same_bits(
    got: list[np.ndarray], want: list[np.ndarray], what: str, *, dtypes: bool = True
) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, what
        assert g.dtype == w.dtype or not dtypes, what
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes(), what


@pytest.mark.parametrize(
    ("algorithm", "words"), [("DEFAULT", 2), ("THREE_FRY", 2), ("PHILOX", 2), ("PHILOX", 3)]
)
def test_rng_bit_generator_matches_xla_bit_for_bit(algorithm: str, words: int) -> None:
    """Every output element type, in one module per algorithm and state size."""
    st = f"tensor<{words}xui64>"
    body, outs = [], []
    for k, t in enumerate(OUT_TYPES):
        shape = "3x5" if k % 2 else "7"
        body.append(
            f"%s{k}, %b{k} = stablehlo.rng_bit_generator %a0, algorithm = {algorithm} : ({st}) -> ({st}, tensor<{shape}x{t}>)"
        )
        outs += [(f"%s{k}", st), (f"%b{k}", f"tensor<{shape}x{t}>")]
    text = module([st], body, outs)
    state = np.array([0x0123456789ABCDEF, 42, 7][:words], np.uint64)
    got = run_lax(text, [state])
    # XLA handed back signed and float outputs with the unsigned type of their width; the
    # xla backend now draws them as lax does (backends/lax/rewrite.py), so types agree too.
    _same_bits(got, run_xla(text, [state]), f"{algorithm}[{words}] lax vs xla")
    assert [g.dtype for g in got[1::2]] == [dt(t) for t in OUT_TYPES]
    _same_bits(run_lax(text, [state], jit=False), got, "eager vs jit")
    # The state advances, and differently sized outputs advance it differently.
    assert not np.array_equal(got[0], state)
    bits = [g for g in got[1::2] if g.dtype.kind == "u"]
    assert all(len(np.unique(b)) > 1 for b in bits)


def test_rng_bit_generator_spec_example_and_recorded_values() -> None:
    # spec.md#rng_bit_generator's example, and stablehlo/testdata/rng_bit_generator_uint64_2.
    got = run_lax(
        _rbg("THREE_FRY", 2, "tensor<2x2xui64>", generic=True), [np.array([1, 2], np.uint64)]
    )
    want = [
        np.array([1, 6], np.uint64),
        np.array(
            [
                [9236835810183407956, 16087790271692313299],
                [18212823393184779219, 2658481902456610144],
            ],
            np.uint64,
        ),
    ]
    _same_bits(got, want, "spec example")
    got = run_lax(
        _rbg("THREE_FRY", 2, "tensor<ui64>", generic=False), [np.array([3, 3], np.uint64)]
    )
    _same_bits(
        got, [np.array([3, 4], np.uint64), np.array(3349939604322698703, np.uint64)], "testdata"
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("out", ["ui8", "ui16", "ui32", "ui64"])
def test_rng_bit_generator_agrees_with_jax_lax(algorithm: str, out: str) -> None:
    state = np.array([5, 0xFFFFFFFFFFFFFFFF], np.uint64)
    text = _rbg(algorithm, 2, f"tensor<4x6x{out}>")
    got = run_lax(text, [state])
    alg = getattr(jax.lax.RandomAlgorithm, f"RNG_{algorithm}")
    key, bits = jax.jit(lambda s: jax.lax.rng_bit_generator(s, (4, 6), dt(out), alg))(state)
    _same_bits(got, [np.asarray(key), np.asarray(bits)], f"{algorithm} {out} vs jax.lax")


def test_rng_bit_generator_float_bits_are_the_integer_bits() -> None:
    # An f32 output holds the very bits of the ui32 output of the same state (XLA generates
    # bits and reinterprets them; jax.lax would convert the values instead).
    state = np.array([9, 9], np.uint64)
    f = run_lax(_rbg("PHILOX", 2, "tensor<8xf32>"), [state])[1]
    u = run_lax(_rbg("PHILOX", 2, "tensor<8xui32>"), [state])[1]
    assert f.view(np.uint32).tolist() == u.tolist()


def _backends() -> list[str]:
    import importlib.util

    return ["xla", "lax"] + (["enzyme"] if importlib.util.find_spec("enzyme_ad") else [])


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize(("out", "raw"), [("f32", "ui32"), ("i32", "ui32"), ("i64", "ui64"),
                                          ("f64", "ui64"), ("f16", "ui16")])  # fmt: skip
def test_rng_bit_generator_signed_and_float_bits_on_every_backend(
    backend: str, out: str, raw: str
) -> None:
    # On the xla and enzyme backends these came back as arrays of dtype uint32/uint64 (XLA's
    # translation of the op), so a consumer saw integers where the module declares floats.
    # Reference: jax.lax.rng_bit_generator's unsigned bits of the same state, reinterpreted.
    st, shape = "tensor<2xui64>", "tensor<2x3x"
    text = module(
        [st],
        [
            f"%s, %b = stablehlo.rng_bit_generator %a0, algorithm = PHILOX : ({st}) -> ({st}, {shape}{out}>)",
            f"%c = stablehlo.add %b, %b : {shape}{out}>",
        ],
        [("%s", st), ("%b", f"{shape}{out}>"), ("%c", f"{shape}{out}>")],
    )
    state = np.array([11, 0xFFFF], np.uint64)
    _, want = jax.jit(
        lambda s: jax.lax.rng_bit_generator(s, (2, 3), dt(raw), jax.lax.RandomAlgorithm.RNG_PHILOX)
    )(state)
    want = np.asarray(want).view(dt(out))
    got = [np.asarray(r) for r in juliabridge.load_mlir(text, backend=backend)(state)]
    assert got[1].dtype == dt(out) and got[2].dtype == dt(out)
    assert got[1].tobytes() == want.tobytes()
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(got[2], (want + want).astype(dt(out)))


@pytest.mark.parametrize(
    ("algorithm", "words", "out", "match"),
    [
        ("THREE_FRY", 3, "tensor<4xui32>", "THREE_FRY takes a state of 2 words"),
        ("PHILOX", 4, "tensor<4xui32>", "PHILOX takes a state of 2 or 3 words"),
        ("PHILOX", 2, "tensor<4xi1>", "rng_bit_generator' op result #1 must be"),
    ],
)
def test_rng_bit_generator_refusals(algorithm: str, words: int, out: str, match: str) -> None:
    with pytest.raises(juliabridge.JuliaBridgeError, match=match):
        juliabridge.load_mlir(_rbg(algorithm, words, out), backend="lax")


def test_rng_bit_generator_vmap_runs_each_state() -> None:
    fn = juliabridge.load_mlir(_rbg("THREE_FRY", 2, "tensor<3xui32>"), backend="lax")
    states = np.array([[1, 2], [3, 4], [1, 2], [0, 9]], np.uint64)
    new, bits = jax.jit(jax.vmap(fn))(states)
    for i, s in enumerate(states):
        s1, b1 = fn(s)
        np.testing.assert_array_equal(new[i], s1)
        np.testing.assert_array_equal(bits[i], b1)
    np.testing.assert_array_equal(bits[0], bits[2])  # same state, same bits
    assert not np.array_equal(bits[0], bits[1])
    # An unbatched state stays one op; only other arguments are batched.
    text = module(
        ["tensor<2xui64>", "tensor<3xf32>"],
        [
            "%s, %b = stablehlo.rng_bit_generator %a0, algorithm = PHILOX : (tensor<2xui64>) -> (tensor<2xui64>, tensor<3xf32>)",
            "%0 = stablehlo.add %b, %a1 : tensor<3xf32>",
        ],
        [("%0", "tensor<3xf32>")],
    )
    g = juliabridge.load_mlir(text, backend="lax")
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = jax.vmap(g, in_axes=(None, 0))(np.array([1, 2], np.uint64), xs)[0]
    for i in range(2):
        np.testing.assert_array_equal(out[i], g(np.array([1, 2], np.uint64), xs[i])[0])


def test_rng_bit_generator_inside_a_differentiated_function() -> None:
    # Noise from the generator added to a differentiated value: the gradient passes around it.
    text = module(
        ["tensor<2xui64>", "tensor<4xf32>"],
        [
            "%s, %u = stablehlo.rng_bit_generator %a0, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)",
            "%f = stablehlo.convert %u : (tensor<4xui32>) -> tensor<4xf32>",
            "%0 = stablehlo.multiply %a1, %f : tensor<4xf32>",
        ],
        [("%0", "tensor<4xf32>")],
    )
    fn = juliabridge.load_mlir(text, backend="lax")
    state = np.array([1, 2], np.uint64)
    x = np.ones(4, np.float32)
    g = jax.grad(lambda v: fn(state, v)[0].sum())(x)
    noise = fn(state, x)[0] / x
    np.testing.assert_allclose(g, noise, rtol=1e-6)


# --- rng --------------------------------------------------------------------------------------


def _rng(distribution: str, t: str, shape: tuple[int, ...]) -> str:
    st = "x".join(map(str, shape))
    return module(
        [f"tensor<{t}>", f"tensor<{t}>"],
        [
            f"%s = stablehlo.constant dense<{list(shape)}> : tensor<{len(shape)}xi64>",
            f'%0 = "stablehlo.rng"(%a0, %a1, %s) {{rng_distribution = #stablehlo<rng_distribution {distribution}>}} : (tensor<{t}>, tensor<{t}>, tensor<{len(shape)}xi64>) -> tensor<{st}x{t}>',
        ],
        [("%0", f"tensor<{st}x{t}>")],
    )


@pytest.mark.parametrize("t", ["f16", "bf16", "f32", "f64"])
def test_rng_uniform_floats(t: str) -> None:
    a, b = np.array(-1.5).astype(dt(t)), np.array(2.5).astype(dt(t))
    text = _rng("UNIFORM", t, (50, 80))
    for draw in (run_lax(text, [a, b])[0], run_xla(text, [a, b])[0]):
        x = draw.astype(np.float64)
        assert draw.shape == (50, 80) and draw.dtype == dt(t)
        assert x.min() >= -1.5 and x.max() <= 2.5  # [a, b), up to rounding to the type
        if t in ("f32", "f64"):
            assert x.max() < 2.5
            assert scipy.stats.kstest(x.ravel(), scipy.stats.uniform(-1.5, 4).cdf).pvalue > 1e-6


@pytest.mark.parametrize("t", ["i32", "ui32", "i64", "ui64"])
def test_rng_uniform_integers(t: str) -> None:
    lo, hi = (3, 10) if t.startswith("u") else (-4, 3)
    text = _rng("UNIFORM", t, (4000,))
    x = run_lax(text, [np.array(lo, dt(t)), np.array(hi, dt(t))])[0]
    assert x.dtype == dt(t) and x.min() >= lo and x.max() < hi
    counts = np.bincount((x.astype(np.int64) - lo), minlength=hi - lo)
    assert len(counts) == hi - lo
    assert scipy.stats.chisquare(counts).pvalue > 1e-6


@pytest.mark.parametrize("t", ["bf16", "f32", "f64"])
def test_rng_normal(t: str) -> None:
    mean, std = np.array(2.0).astype(dt(t)), np.array(0.5).astype(dt(t))
    text = _rng("NORMAL", t, (100, 60))
    for draw in (run_lax(text, [mean, std])[0], run_xla(text, [mean, std])[0]):
        x = draw.astype(np.float64).ravel()
        assert draw.dtype == dt(t)
        if t != "bf16":
            assert scipy.stats.kstest(x, scipy.stats.norm(2.0, 0.5).cdf).pvalue > 1e-6
        else:
            assert abs(x.mean() - 2.0) < 0.05 and abs(x.std() - 0.5) < 0.05


def test_rng_draws_anew_on_each_call_and_under_vmap() -> None:
    fn = juliabridge.load_mlir(_rng("UNIFORM", "f32", (16,)), backend="lax")
    a, b = np.float32(0), np.float32(1)
    assert not np.array_equal(fn(a, b)[0], fn(a, b)[0])
    # Batched bounds: each row drawn within its own bounds.
    lo = np.array([0, 10, 20], np.float32)
    rows = jax.vmap(fn)(lo, lo + 1)[0]
    assert rows.shape == (3, 16)
    for i in range(3):
        assert (rows[i] >= lo[i]).all() and (rows[i] < lo[i] + 1).all()
    # Unbatched bounds with a batched neighbour: JAX evaluates the op once, so every batch
    # element sees the same draw (rng may be deterministic, spec.md#rng).
    text = module(
        ["tensor<f32>", "tensor<f32>", "tensor<16xf32>"],
        [
            "%s = stablehlo.constant dense<16> : tensor<1xi64>",
            "%r = stablehlo.rng %a0, %a1, %s, distribution = UNIFORM : (tensor<f32>, tensor<f32>, tensor<1xi64>) -> tensor<16xf32>",
            "%0 = stablehlo.add %r, %a2 : tensor<16xf32>",
        ],
        [("%0", "tensor<16xf32>")],
    )
    g = juliabridge.load_mlir(text, backend="lax")
    out = jax.vmap(g, in_axes=(None, None, 0))(a, b, np.zeros((4, 16), np.float32))[0]
    assert out.shape == (4, 16) and (out >= 0).all() and (out < 1).all()
    np.testing.assert_array_equal(out, np.broadcast_to(out[0], out.shape))


def test_rng_gradient_with_respect_to_bounds_is_a_typed_error() -> None:
    fn = juliabridge.load_mlir(_rng("NORMAL", "f32", (8,)), backend="lax")
    with pytest.raises(TransformError, match=r"stablehlo.rng at line 4.*NORMAL"):
        jax.grad(lambda m: fn(m, np.float32(1))[0].sum())(np.float32(0))
    # With the bounds held fixed, a function of the draw differentiates as usual.
    grad = jax.grad(lambda w: (w * fn(np.float32(0), np.float32(1))[0]).sum())(np.float32(2))
    assert np.isfinite(grad)


@pytest.mark.parametrize("t", ["i1", "i8", "ui16"])
def test_rng_uniform_on_narrow_integers_is_refused(t: str) -> None:
    # XLA aborts the process on these (RngExpander CHECK failure), so they never reach it.
    with pytest.raises(
        UnsupportedOpError, match=r"UNIFORM over .*XLA draws integers of 32 or 64 bits"
    ):
        juliabridge.load_mlir(_rng("UNIFORM", t, (4,)), backend="lax")


def test_rng_vmap_with_one_bound_batched() -> None:
    # One bound per batch element, the other shared: each row is drawn within its own bounds.
    fn = juliabridge.load_mlir(_rng("UNIFORM", "f32", (16,)), backend="lax")
    lo = np.array([0, 10, 20], np.float32)
    for in_axes, a, b in (((0, None), lo, np.float32(30)), ((None, 0), np.float32(-5), lo + 1)):
        rows = np.asarray(jax.vmap(fn, in_axes=in_axes)(a, b)[0])
        assert rows.shape == (3, 16)
        for i in range(3):
            low = a[i] if in_axes[0] == 0 else a
            high = b[i] if in_axes[1] == 0 else b
            assert (rows[i] >= low).all() and (rows[i] < high).all(), (in_axes, i)
