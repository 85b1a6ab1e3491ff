"""export_jax / save_jax's `batch_args` as a contract over every index (issue 52).

For a load_mlir function of n arguments, any subset of [0, n) exports with exactly those
arguments given the new leading batch axis (the others keep their traced shapes), and the
exported program computes, per stacked sample, what the function computes (numpy reference);
an index outside [0, n) (negative, n, past n), a bool or a non-integer is a CallArgumentError
naming it, never dropped, from both entry points. A LuxModel takes no batch_args at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import CallArgumentError
from tests.pinned_support import lower

A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.array([1.0, -2.0, 0.5], np.float32)
C = np.float32(3.0) * np.ones((2, 3), np.float32)
ARGS = [A, B, C]
N = len(ARGS)


def _fn(a: Any, b: Any, c: Any) -> tuple[Any, ...]:
    return (a * b + c, (a - c).sum(axis=0))


def _ref(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
    return (a * b + c, (a - c).sum(axis=0))


@pytest.fixture(scope="module")
def fn() -> Any:
    return juliabridge.load_mlir(lower(_fn, *ARGS), backend="lax")


@settings(max_examples=8, deadline=None)
@given(chosen=st.sets(st.integers(0, N - 1), min_size=1), k=st.integers(1, 3))
def test_every_subset_of_indices_batches_exactly_those(fn: Any, chosen: set[int], k: int) -> None:
    exported = juliabridge.export_jax(fn, batch="b", batch_args=sorted(chosen), vjp_order=0)
    for i, (aval, a) in enumerate(zip(exported.in_avals, ARGS)):
        if i in chosen:
            assert str(aval.shape[0]) == "b" and tuple(aval.shape[1:]) == a.shape, i
        else:
            assert tuple(aval.shape) == a.shape, i
    rng = np.random.default_rng(k)
    stacks = [rng.standard_normal((k, *a.shape)).astype(np.float32) for a in ARGS]
    call = [stacks[i] if i in chosen else ARGS[i] for i in range(N)]
    got = exported.call(*call)
    for s in range(k):
        want = _ref(*[stacks[i][s] if i in chosen else ARGS[i] for i in range(N)])
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g)[s], w, rtol=1e-5, atol=1e-5)


BAD = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=N),
    st.booleans(),
    st.floats(allow_nan=False, min_value=0, max_value=N - 1).filter(lambda x: x != int(x)),
    st.sampled_from(["0", 1.0, None]),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(bad=BAD, good=st.sets(st.integers(0, N - 1)), save=st.booleans())
def test_an_index_out_of_range_is_refused_never_ignored(
    tmp_path: Path, fn: Any, bad: Any, good: set[int], save: bool
) -> None:
    batch_args = [*sorted(good), bad]
    with pytest.raises(
        CallArgumentError, match=r"batch_args=.*expected argument indices in \[0, 3\)"
    ):
        if save:
            juliabridge.save_jax(
                fn, tmp_path / "f.jaxexport", batch_args=batch_args, overwrite=True
            )
        else:
            juliabridge.export_jax(fn, batch_args=batch_args, vjp_order=0)
    assert not (tmp_path / "f.jaxexport").exists()


@pytest.mark.parametrize("index", [-1, N, N + 5])
def test_the_refusal_names_the_index(fn: Any, index: int) -> None:
    with pytest.raises(CallArgumentError) as e:
        juliabridge.export_jax(fn, batch_args=[0, index], vjp_order=0)
    assert repr(str(index)) in str(e.value)


def test_no_batch_keeps_every_traced_shape(fn: Any) -> None:
    exported = juliabridge.export_jax(fn, batch=None, vjp_order=0)
    assert [tuple(a.shape) for a in exported.in_avals] == [a.shape for a in ARGS]
    for g, w in zip(exported.call(*ARGS), _ref(*ARGS)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)


@pytest.mark.parametrize("batch_args", [[], [0]])
def test_a_lux_model_takes_no_batch_args(batch_args: list[int]) -> None:
    lenet = juliabridge.import_lux(
        Path(juliabridge.__file__).parent / "examples" / "lenet.bundle", backend="lax"
    )
    with pytest.raises(CallArgumentError, match="batch_args applies to a load_mlir function"):
        juliabridge.export_jax(lenet, batch_args=batch_args, vjp_order=0)


@pytest.mark.parametrize("batch_args", [0, 2, "0", b"0"])
def test_a_single_index_not_in_a_sequence_is_refused(fn: Any, batch_args: Any) -> None:
    with pytest.raises(CallArgumentError, match="expected a sequence of argument indices"):
        juliabridge.export_jax(fn, batch_args=batch_args, vjp_order=0)
