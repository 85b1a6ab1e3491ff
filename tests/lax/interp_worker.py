"""Child process running jaxlib's StableHLO reference interpreter (an independent oracle).

The interpreter aborts the process on some ops (chlo, batch_norm_*), so it runs here, apart
from the tests. Protocol, one request per line on stdin: a directory holding `module.mlir`
and `args.{json,bin}`; the worker writes `out.{json,bin}` there and answers `ok` or `error <message>`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from juliabridge.backends.lax.attrs import dense
from juliabridge.backends.lax.valtypes import ELEMENT_TYPES, TensorType, value_type
from juliabridge.support.jaxinternals import ir, make_context

ELEMENT_BY_NAME = {dt.name: dt for dt in ELEMENT_TYPES.values()}


def _attr(x: np.ndarray, t: ir.Type) -> ir.Attribute:
    # Hex of the raw bytes works for every element type (bf16, complex, f8 have no buffer view).
    raw = (x.astype(np.uint8) if x.dtype == np.bool_ else x).tobytes()
    return (
        ir.Attribute.parse(f'dense<"0x{raw.hex().upper()}"> : {t}')
        if raw
        else ir.Attribute.parse(f"dense<> : {t}")
    )


def _run(req: Path) -> None:
    from jaxlib.mlir.dialects import stablehlo

    ctx = make_context()
    stablehlo.register_interpreter_dialect(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse((req / "module.mlir").read_text())
        main = next(
            op.operation
            for op in module.body.operations
            if ir.StringAttr(op.operation.attributes["sym_name"]).value == "main"
        )
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        args = load_arrays(req / "args")
        attrs = [_attr(a, t) for a, t in zip(args, ftype.inputs)]
        outs = stablehlo.eval_module(module, attrs)
        arrays = []
        for o, t in zip(outs, ftype.results):
            vt = value_type(t)
            if not isinstance(vt, TensorType):
                raise TypeError(f"result type {t} is not a tensor")
            arrays.append(dense(o, vt))
        save_arrays(req / "out", arrays)


def save_arrays(stem: Path, arrays: list[np.ndarray]) -> None:
    """Raw bytes plus a JSON index: works for dtypes npz cannot hold without pickle (bf16, f8)."""
    index = []
    with open(stem.with_suffix(".bin"), "wb") as f:
        for a in arrays:
            a = np.asarray(a, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
            index.append({"dtype": a.dtype.name, "shape": list(a.shape), "nbytes": a.nbytes})
            f.write(a.tobytes())
    stem.with_suffix(".json").write_text(json.dumps(index))


def load_arrays(stem: Path) -> list[np.ndarray]:
    """Inverse of save_arrays."""
    index = json.loads(stem.with_suffix(".json").read_text())
    raw = stem.with_suffix(".bin").read_bytes()
    out, pos = [], 0
    for e in index:
        dt = ELEMENT_BY_NAME[e["dtype"]]
        out.append(np.frombuffer(raw[pos : pos + e["nbytes"]], dt).reshape(e["shape"]).copy())
        pos += e["nbytes"]
    return out


def main() -> None:
    for line in sys.stdin:
        req = Path(line.strip())
        try:
            _run(req)
        except Exception as e:
            msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:2000]
            print(f"error {msg}", flush=True)
        else:
            print("ok", flush=True)


if __name__ == "__main__":
    main()
