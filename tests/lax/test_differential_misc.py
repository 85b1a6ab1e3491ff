"""Checks of the differential harness's random-bits family beyond lax against XLA.

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
from .differential_misc import FAMILIES, unsigned_of

pytestmark = pytest.mark.usefixtures("x64")

BACKENDS = ["lax", "xla"] + (["enzyme"] if importlib.util.find_spec("enzyme_ad") else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_typed_random_bits_are_the_unsigned_bits_viewed(backend: str) -> None:
    @settings(max_examples=8, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(FAMILIES["rng_bit_generator"])
    def run(case: Case) -> None:
        t = next(f for f in case.features if f in ELEMENT_TYPES)
        got = [np.asarray(r) for r in juliabridge.load_mlir(case.text, backend=backend)(*case.args)]
        assert got[1].dtype == ELEMENT_TYPES[t], (backend, t, got[1].dtype)
        if unsigned_of(t) == t:
            return
        raw = ELEMENT_TYPES[unsigned_of(t)]
        # got[3]: the unsigned draw of the same state; got[2]: bitcast_convert of got[1].
        assert got[3].dtype == raw and got[1].shape == got[3].shape
        assert got[1].view(raw).tobytes() == got[3].tobytes(), (backend, t, case.text)
        np.testing.assert_array_equal(got[2], got[3])

    run()
