"""Compare what Python computes, on every backend that imports here, with what Julia computed.

Two references: the outputs Julia stored in an export (``Reactant.@jit`` of the flat function,
compared by ``juliabridge.testing.assert_matches_julia``), and Lux's own CPU outputs that the
model scripts put in ``metadata["lux"]`` (models/common.jl), independent of Reactant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from juliabridge.backends.enzyme import enzyme_available

#: The spec's dtype names of the element types the model scripts use.
DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
#: (rtol, atol) for Lux's CPU outputs against the compiled module's: f32 arithmetic in a
#: different order; bf16 rounds every product.
TOLERANCE = {"bf16": (2e-2, 2e-2), "f16": (1e-2, 1e-2)}
DEFAULT_TOLERANCE = (1e-4, 1e-5)


def backends() -> list[str]:
    """Every backend that runs here: lax and xla always, enzyme where enzyme-ad imports."""
    return ["lax", "xla", *(["enzyme"] if enzyme_available() else [])]


def julia_array(entry: Mapping[str, Any], dtype: Any = np.float64) -> np.ndarray:
    """An array models/common.jl wrote (Julia size, column-major values) in MLIR layout:
    the Julia dims reversed, which is the column-major order read row-major."""
    shape = [int(n) for n in entry["julia_shape"]]
    values = np.asarray(entry["values"], dtype=np.float64)
    return values.reshape(shape[::-1]).astype(dtype)


def input_dtypes(model: Any) -> list[Any]:
    """The numpy dtype of each model input, from its signature."""
    return [DTYPES[a["dtype"]] for a in model.signature["arguments"] if a["role"] == "input"]


def lux_inputs(model: Any, lux: Mapping[str, Any]) -> list[np.ndarray]:
    """The example inputs Lux ran on, in the model's layout and dtypes."""
    entries: Sequence[Mapping[str, Any]] = lux["inputs"]
    dtypes = input_dtypes(model)
    if len(dtypes) != len(entries):
        raise AssertionError(
            f"the model takes {len(dtypes)} input(s), Lux ran on {len(entries)}: {model.signature}"
        )
    return [julia_array(e, d) for e, d in zip(entries, dtypes, strict=True)]


def leaf(tree: Any, dotted: str) -> Any:
    """The leaf of a state tree at a dotted Lux path (``layer_2.running_mean``)."""
    for key in dotted.split("."):
        tree = tree[int(key) - 1] if isinstance(tree, (list, tuple)) else tree[key]
    return tree


def check_against_lux(model: Any, lux: Mapping[str, Any], *, state: bool = True) -> list[str]:
    """Run `model` on Lux's inputs; every output (and, with `state`, every float state array
    Lux returned) that differs from Lux's, as a line (empty: all match)."""
    inputs = lux_inputs(model, lux)
    y, new_state = model.apply(model.params, model.state, *inputs)
    dtype = str(model.signature["arguments"][0]["dtype"])
    rtol, atol = TOLERANCE.get(dtype, DEFAULT_TOLERANCE)
    wanted = {"output": (np.asarray(y, dtype=np.float64), julia_array(lux["y"]))}
    if state:
        for path, entry in lux["state"].items():
            wanted[f"state.{path}"] = (
                np.asarray(leaf(new_state, path), dtype=np.float64),
                julia_array(entry),
            )
    bad = []
    for name, (got, want) in wanted.items():
        if got.shape != want.shape:
            bad.append(f"{name}: shape {got.shape}, Lux's {want.shape}")
        elif not np.allclose(got, want, rtol=rtol, atol=atol):
            err = float(np.max(np.abs(got - want)))
            bad.append(f"{name}: max abs err {err:.3g} from Lux's (rtol={rtol}, atol={atol})")
    return bad
