"""An inputs-npz member holding more or fewer data bytes than its header declares (issue 38).

A .npy member is a header then exactly prod(shape) * itemsize bytes (numpy's format spec).
The reader refuses a member whose data is cut short or followed by extra bytes with a typed
error naming the npz, the member and the byte count its header declares, and reads a member
of the exact size as the array written. The space: every element type Reactant writes to the
npz, shapes of rank 0 to 3, and the data short or long by one byte or by a whole element. The
reference is numpy's own writer and its byte count.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from juliabridge.errors import BundleError
from juliabridge.reactant_export import npz as npz_mod
from juliabridge.stablehlo import TensorSpec

#: numpy dtype -> the MLIR element type @main declares for it (the StableHLO spec's names).
TYPES = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "ui8",
    "uint16": "ui16",
    "uint32": "ui32",
    "uint64": "ui64",
    "complex64": "complex<f32>",
    "complex128": "complex<f64>",
}
SHAPES = [(), (3,), (2, 3), (2, 1, 2)]


def _member(tmp: Path, arr: np.ndarray, delta: int) -> Path:
    """An npz whose arr_1.npy is numpy's .npy of `arr` with `delta` bytes cut (<0) or added."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=(1, 0))
    data = buf.getvalue()
    data = data[:delta] if delta < 0 else data + b"\x01" * delta
    path = tmp / "x.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("arr_1.npy", data)
    return path


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(TYPES))
def test_a_member_of_another_data_size_is_refused_naming_the_size(
    tmp_path: Path, name: str, shape: tuple[int, ...]
) -> None:
    dtype = np.dtype(name)
    arr = (np.arange(int(np.prod(shape))) % 2).astype(dtype).reshape(shape)
    spec = TensorSpec(shape, TYPES[name])
    nbytes = int(np.prod(shape)) * dtype.itemsize  # the .npy format: no padding after data
    got = npz_mod.read_inputs(_member(tmp_path, arr, 0), ["arr_1"], [spec])
    assert got[0].dtype == dtype and got[0].shape == shape
    np.testing.assert_array_equal(got[0], arr)
    for delta in sorted({-1, -dtype.itemsize, 1, dtype.itemsize}):
        path = _member(tmp_path, arr, delta)
        with pytest.raises(BundleError) as e:
            npz_mod.read_inputs(path, ["arr_1"], [spec])
        assert str(e.value) == (
            f"{path} (arr_1.npy): expected {nbytes} bytes of data after the header, "
            "found another size"
        ), (delta, str(e.value))
