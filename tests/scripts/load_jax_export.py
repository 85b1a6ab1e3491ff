"""Run a jax.export artifact with nothing but jax and numpy: run as ``python -I`` (no
PYTHONPATH, no current directory on sys.path), juliabridge made unimportable.

    python -I load_jax_export.py ARTIFACT CASES.npz OUT.npz

CASES.npz holds ``x_<name>`` (an input) and ``ct_<name>`` (a cotangent for the output) per
case; OUT.npz gets ``y_<name>`` (the output) and ``g_<name>`` (the input's cotangent, through
the artifact's serialized VJP), and ``jax`` (the version that ran it).
"""

import importlib.abc
import sys


class _NoJuliabridge(importlib.abc.MetaPathFinder):
    """Refuse juliabridge whatever installed it (an editable install's finder, a path)."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name == "juliabridge" or name.startswith("juliabridge."):
            raise ImportError(f"{name} must not be importable here")
        return None


sys.meta_path.insert(0, _NoJuliabridge())
sys.path[:] = [p for p in sys.path if p and "juliabridge" not in p.lower()]

import jax  # noqa: E402
import numpy as np  # noqa: E402


def main() -> None:
    artifact, cases, out = sys.argv[1:4]
    try:
        import juliabridge  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("juliabridge is importable in the loader; the test would prove nothing")
    with open(artifact, "rb") as f:
        exported = jax.export.deserialize(bytearray(f.read()))
    data = np.load(cases)
    results = {"jax": np.asarray(jax.__version__)}
    for key in data.files:
        if not key.startswith("x_"):
            continue
        name = key[2:]
        y, pullback = jax.vjp(exported.call, data[key])
        (g,) = pullback(data["ct_" + name])
        results["y_" + name] = np.asarray(y)
        results["g_" + name] = np.asarray(g)
    np.savez(out, **results)


if __name__ == "__main__":
    main()
