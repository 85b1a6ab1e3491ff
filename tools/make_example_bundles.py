"""Regenerate the example bundles shipped in juliabridge/examples/ (made in Python, no Julia).

    python tools/make_example_bundles.py [--out DIR]

Writes format 2 (docs/bundle-format.md): model.mlir, weights.h5, vjp.mlir and the portable
artifacts model.mlirbc and vjp.mlirbc, serialized by the installed jaxlib at the spec's target.
Needs enzyme-ad (to derive vjp.mlir). The arrays, weights.h5 and model.mlir are byte-for-byte
reproducible (fixed seed) with the same jax; only the manifest's ``producer.created`` timestamp
changes between runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Run from a checkout without installing: the package sits next to tools/.
sys.path.insert(0, str(REPO))

from juliabridge.bundle.write.upgrade import upgrade_bundle  # noqa: E402
from juliabridge.bundle.write.vjp_bundle import add_vjp  # noqa: E402
from juliabridge.examples.luxmodels import build_bundle  # noqa: E402

EXAMPLES_DIR = REPO / "juliabridge" / "examples"

#: (kind, bundle directory name, batch size, seed) of every shipped example.
EXAMPLES = [("lenet", "lenet.bundle", 4, 0)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=EXAMPLES_DIR, help="target directory")
    args = parser.parse_args(argv)
    for kind, dirname, batch, seed in EXAMPLES:
        path = build_bundle(kind, args.out / dirname, batch=batch, seed=seed, overwrite=True)
        # Ship the VJP module too, so gradients work on backend='xla' without enzyme-ad.
        add_vjp(path)
        # add_vjp writes the text only; this adds the VJP module's portable artifact.
        upgrade_bundle(path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
