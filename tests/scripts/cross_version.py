"""Write bundles with this environment's jax, or read ones another environment wrote.

    python tests/scripts/cross_version.py write DIR   # bundles + this jax's outputs for them
    python tests/scripts/cross_version.py read DIR    # this jax's outputs for DIR's bundles

tests/test_cross_version.py runs it under a second Python (CI: jax 0.10.2 on CPython 3.11 and
the newest jax on the newest CPython), so a bundle written by one loads in the other.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np

#: (model kind, batch) written and read; train-mode BatchNorm exercises batch_norm_training.
KINDS = (("lenet", 4), ("dense_chain", 5), ("batchnorm_train", 6))


def _outputs(bundle: Path) -> dict[str, np.ndarray]:
    """Every @main result for the bundle's example inputs, computed here."""
    import juliabridge
    from juliabridge.lux.trees import lookup

    model = juliabridge.import_lux(bundle)
    examples = model.bundle.read_examples()
    assert examples is not None, f"{bundle} has no examples"
    ins, _ = examples
    flat = []
    for a in model.manifest.arguments:
        if a.role == "input":
            flat.append(ins[a.index])
        else:
            tree = model.params if a.role == "parameter" else model.state
            flat.append(lookup(tree, a.path, a.role))
    results = model.fn(*flat)
    return {f"r{k}": np.asarray(v) for k, v in enumerate(results)} | {
        "backend": np.array(model.backend),
        "module_source": np.array(str(model.metadata.get("module_source", "text"))),
    }


def write(root: Path) -> None:
    """Write every kind's bundle under `root` and this environment's outputs for it."""
    from juliabridge.examples.luxmodels import build_bundle

    root.mkdir(parents=True, exist_ok=True)
    for kind, batch in KINDS:
        path = build_bundle(kind, root / f"{kind}.bundle", batch=batch, seed=3)
        np.savez(root / f"{kind}.writer.npz", **_outputs(path))
    (root / "writer.json").write_text(
        json.dumps({"jax": jax.__version__, "kinds": [k for k, _ in KINDS]})
    )


def read(root: Path) -> None:
    """This environment's outputs for every bundle under `root`."""
    for kind, _ in KINDS:
        np.savez(root / f"{kind}.reader.npz", **_outputs(root / f"{kind}.bundle"))
    (root / "reader.json").write_text(json.dumps({"jax": jax.__version__}))


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](Path(sys.argv[2]))
