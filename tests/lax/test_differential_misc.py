"""Checks of the differential harness's misc families beyond the fixed-seed family sample.

Every op of the families that draw among several ops, once each (the family's sample draws
some of them only now and then), on every oracle test_differential uses.

Constants: every backend parses the literal with MLIR, so lax, XLA and the interpreter could
agree on a misread literal; here lax's constant must be the array numpy built the literal from.

Issue 26 class 6b: rng_bit_generator with a signed or float output came back from the xla
and enzyme backends with the dtype of the module but the buffer of XLA's unsigned draw. Here
each backend's typed bits must be, byte for byte, numpy's view of the unsigned bits that the
same state draws in the same module (XLA's native form of the op).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import juliabridge
from juliabridge.backends.lax.valtypes import ELEMENT_TYPES

from .differential import Case
from .differential_misc import (
    BY_OP,
    FAMILIES,
    RBG_TYPES,
    ConstantCase,
    rng_bit_generator_case,
    unsigned_of,
)
from .oracles import run_lax
from .test_differential import ENZYME, check_case

pytestmark = pytest.mark.usefixtures("x64")

BACKENDS = ["lax", "xla"] + (["enzyme"] if importlib.util.find_spec("enzyme_ad") else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", [t for t in RBG_TYPES if unsigned_of(t) != t])
def test_typed_random_bits_are_the_unsigned_bits_viewed(backend: str, t: str) -> None:
    @settings(max_examples=1, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(rng_bit_generator_case(types=(t,)))
    def run(case: Case) -> None:
        got = [np.asarray(r) for r in juliabridge.load_mlir(case.text, backend=backend)(*case.args)]
        raw = ELEMENT_TYPES[unsigned_of(t)]
        assert got[1].dtype == ELEMENT_TYPES[t], (backend, t, got[1].dtype)
        # got[3]: the unsigned draw of the same state; got[2]: bitcast_convert of got[1].
        assert got[3].dtype == raw and got[1].shape == got[3].shape
        assert got[1].view(raw).tobytes() == got[3].tobytes(), (backend, t, case.text)
        np.testing.assert_array_equal(got[2], got[3])

    run()


def test_constants_are_the_arrays_their_literals_spell() -> None:
    @settings(max_examples=20, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(FAMILIES["constant"])
    def run(case: ConstantCase) -> None:
        (got,) = run_lax(case.text, case.args)
        want = case.expected
        assert got.dtype == want.dtype and got.shape == want.shape, case.text
        if want.dtype.kind == "f" or want.dtype.name == "bfloat16":
            nan = np.isnan(want.astype(np.float64))
            assert (np.isnan(got.astype(np.float64)) == nan).all(), case.text
            got, want = got[~nan], want[~nan]
        # Bitwise: signed zeros and denormals as spelled.
        assert got.tobytes() == want.tobytes(), (case.text, got, want)

    run()


@pytest.mark.parametrize("op", sorted(BY_OP))
def test_each_op_of_the_misc_families(op: str) -> None:
    @settings(max_examples=1, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(BY_OP[op])
    def run(case: Case) -> None:
        check_case(case, enzyme=ENZYME)

    run()
