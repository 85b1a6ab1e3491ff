"""load_mlir on real Reactant.jl output, checked against independent numpy references.

The modules live outside the repository (they are third-party data); see SOURCES.md next
to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import jax
import numpy as np
import pytest

import juliabridge
from tests.outside import reactant_fixture
from tests.reference.fixture_refs import FIXTURES, FixtureRef

BACKENDS = ("xla", "enzyme")
MODES = ("eager", "jit")


def _require_backend(backend: str) -> None:
    if backend == "enzyme":
        pytest.importorskip(
            "enzyme_ad.jax",
            reason="backend='enzyme' needs enzyme-ad, which is not importable",
        )


@pytest.fixture(params=sorted(FIXTURES))
def fixture_name(request: pytest.FixtureRequest) -> Iterator[str]:
    # Set x64 per fixture (on for 64-bit interfaces, off otherwise so f32 modules are
    # also run the way most users run JAX); the context manager restores the previous
    # value.
    with jax.enable_x64(FIXTURES[request.param].needs_x64):
        yield request.param


def _assert_matches(
    outputs: object, expected: Sequence[np.ndarray], ref: FixtureRef, label: str
) -> None:
    assert isinstance(outputs, tuple), f"{label}: expected a tuple, got {type(outputs).__name__}"
    assert len(outputs) == len(expected), f"{label}: {len(outputs)} results, not {len(expected)}"
    for i, (got, want) in enumerate(zip(outputs, expected, strict=True)):
        got = np.asarray(got)
        assert got.shape == want.shape, f"{label}: result {i} shape {got.shape} != {want.shape}"
        assert got.dtype == want.dtype, f"{label}: result {i} dtype {got.dtype} != {want.dtype}"
        np.testing.assert_allclose(
            got, want, rtol=ref.rtol, atol=ref.atol, err_msg=f"{label}: result {i}"
        )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fixture_matches_numpy_reference(fixture_name: str, backend: str, mode: str) -> None:
    path = reactant_fixture(fixture_name)
    _require_backend(backend)
    ref = FIXTURES[fixture_name]
    fn = juliabridge.load_mlir(path, backend=backend)
    call: Callable[..., object] = jax.jit(fn) if mode == "jit" else fn
    for make_inputs in (ref.make_inputs, *ref.extra_inputs):
        inputs = make_inputs(np.random.default_rng(0))
        expected = ref.reference(*inputs)
        label = f"{fixture_name} [{backend}, {mode}, {make_inputs.__name__}]"
        _assert_matches(call(*inputs), expected, ref, label)


@pytest.mark.parametrize("source_kind", ["text", "str path"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_source_may_be_text_or_str_path(backend: str, source_kind: str) -> None:
    # This fixture has a `module @reactant_sine_lo...` name and enzymexla / enzyme
    # attributes, so text input has to go through the same clean-up as a file.
    name = "sine_loop_while.mlir"
    path = reactant_fixture(name)
    _require_backend(backend)
    ref = FIXTURES[name]
    source = path.read_text() if source_kind == "text" else str(path)
    with jax.enable_x64(ref.needs_x64):
        fn = juliabridge.load_mlir(source, backend=backend)
        inputs = ref.make_inputs(np.random.default_rng(1))
        _assert_matches(fn(*inputs), ref.reference(*inputs), ref, f"{name} from {source_kind}")
