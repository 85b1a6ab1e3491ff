"""select_and_scatter next to padding, with values of either sign (issue 38).

spec.md#select_and_scatter: each window picks one of its *real* operand elements (padding is
never a candidate), keeping the current pick while ``select(current, candidate)`` holds; the
source value of the window is then combined into the picked position. A lift that lets a
padding position compete (its value is the pad's, 0) goes wrong exactly where select(current,
0) is false: a max-select (GE, GT) over negative values, a min-select (LE, LT) over positive
ones, in a window that reaches into the padding on either side.

The space: rank 1-3, each dimension padded 0-2 low and high (at least one dimension padded),
windows up to the padded size, strides 1-3, the four selects, add and max scatters, and
operands of distinct values that are all negative, all positive, or both (no ties, so the
order a window is visited in does not decide). The reference is the spec's rule in numpy
(tests/lax/reduction_reference.py).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from tests.lax import reduction_reference as ref
from tests.lax.test_reduction import sas_text
from tests.lax.test_select_scatter_windows import geometries


def padded_geometries() -> st.SearchStrategy[tuple]:
    """test_select_scatter_windows.py's geometries (rank 1-3, padding 0-2 on each side, any
    window and stride) with at least one dimension padded."""
    return geometries().filter(lambda g: any(lo or hi for lo, hi in g[4]))


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    geometry=padded_geometries(),
    select=st.sampled_from(["GE", "GT", "LE", "LT"]),
    scatter=st.sampled_from(["add", "maximum"]),
    sign=st.sampled_from(["negative", "positive", "mixed"]),
    seed=st.integers(0, 2**16),
)
def test_padding_never_competes_for_the_pick(
    geometry: tuple, select: str, scatter: str, sign: str, seed: int
) -> None:
    shape, src, window, strides, padding = geometry
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    distinct = rng.permutation(n).reshape(shape) + 1.0  # 1..n, no ties
    x = {"negative": -distinct, "positive": distinct, "mixed": distinct - (n + 1) / 2}[sign]
    x = (x / 4).astype(np.float32)
    s = rng.uniform(0.5, 2.0, src).astype(np.float32)
    init = np.float32(0.25)
    want = ref.select_and_scatter(select, scatter, x, s, init, window, strides, padding)
    text = sas_text(select, scatter, shape, src, "f32", window, strides, padding)
    (got,) = juliabridge.load_mlir(text, backend="lax")(x, s, init)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_xla_s_cpu_reduce_window_never_passes_padding_to_its_body() -> None:
    # The lift's pick is a reduce_window over (value, position) pairs whose body refuses a
    # padding candidate (position -1). XLA's CPU reduce_window skips padding positions instead
    # of passing the init value in their place (the spec pads with it): a window of 3 over
    # [pad, 1, 2] sums to init + 3, not 2 x init + 3. While it does, that refusal is never
    # reached on CPU (the realistic mutant `window-sas-padding-candidate-taken` is equivalent
    # here); this fails first if a jaxlib starts passing padding.
    import jax
    import jax.numpy as jnp
    from jax import lax

    if jax.default_backend() != "cpu":
        return

    def body(a: tuple, b: tuple) -> tuple:  # a tuple body: no monoid JAX could special-case
        return a[0] + b[0], jnp.maximum(a[1], b[1])

    x = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    init = (jnp.float32(100.0), jnp.int32(-1))
    total, _ = lax.reduce_window((x, jnp.zeros(3, jnp.int32)), init, body, (3,), (1,), [(1, 1)])
    np.testing.assert_array_equal(np.asarray(total), [103.0, 106.0, 105.0])
