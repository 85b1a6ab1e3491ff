"""Child process for tests/test_fuzz.py: loads and calls one bundle per request, reports how.

Run as ``python -m tests.fuzz_runner`` from the repository root. Requests and replies are JSON
lines on stdin and on the original stdout (everything else printed goes to stderr). A crash or
hang of this process is how the parent detects that juliabridge took a process down.

Each request is ``{"path": ..., "verify_checksums": bool, "trust": bool, "backend": name,
"grad": bool, "cli": [argv] | None}``; the reply says ``outcome``: ``ok`` (loaded and called;
numbers compared here), ``error`` (a JuliaBridgeError, with its class and message) or
``other`` (any other exception: always a bug). With ``grad`` the gradient of the output's sum
with respect to the parameters is computed too (on enzyme: Enzyme's derivation). With ``cli``
the command ``juliabridge ARGV`` runs instead (in this process, as `juliabridge.cli.main`), and
the reply carries its exit code and output plus ``api_code``: the exit code the library's own
outcome for the same bundle maps to (exitcodes.exit_code), so the two can be compared.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from typing import Any

import numpy as np

# Replies go to a private copy of stdout; fd 1 itself then points at stderr, so nothing a
# library prints (from Python or C) can corrupt the protocol.
_PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import jax  # noqa: E402

import juliabridge  # noqa: E402
from juliabridge.lux.trees import lookup  # noqa: E402
from tests.bundle_factory import dense_bn_arrays, dense_bn_reference  # noqa: E402

jax.config.update("jax_platforms", "cpu")

ORIGINAL = dense_bn_arrays()
REFERENCE = dense_bn_reference(ORIGINAL)
ORIGINAL_MAP = [
    ("input", None),
    ("parameter", "/params/layer_1/weight"),
    ("parameter", "/params/layer_1/bias"),
    ("parameter", "/params/layer_2/scale"),
    ("parameter", "/params/layer_2/bias"),
    ("state", "/state/layer_2/running_mean"),
    ("state", "/state/layer_2/running_var"),
]
SHAPES = [a.shape for a in ORIGINAL]


def _max_err(got: np.ndarray, want: np.ndarray) -> float | None:
    """Largest error relative to the output scale; None when values are not comparable."""
    if got.shape != want.shape:
        return float("inf")
    if not (np.all(np.isfinite(want)) and np.all(np.abs(want) < 1e15)):
        return None  # overflow in f32 vs f64 differs legitimately
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    return float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0)) / scale


def run(req: dict[str, Any]) -> dict[str, Any]:
    """Load and call the bundle at req['path'] (and differentiate it with req['grad'])."""
    model = juliabridge.import_lux(
        req["path"],
        backend=req.get("backend", "xla"),
        verify_checksums=req.get("verify_checksums", True),
        trust=req.get("trust", False),
    )
    m = model.manifest
    x = ORIGINAL[0]
    out = model(x)
    reply: dict[str, Any] = {"outcome": "ok", "err_self": None, "err_orig": None}
    if req.get("grad"):
        loss = lambda p: sum(  # noqa: E731
            jax.numpy.sum(v) for v in jax.tree_util.tree_leaves(model.apply(p, model.state, x)[0])
        )
        grads = jax.grad(loss)(model.params)
        reply["grad_leaves"] = len(jax.tree_util.tree_leaves(grads))
    results = [r for r in m.results]
    if len(results) != 1 or results[0].paths != (("output",),):
        reply["note"] = "result structure changed"
        return reply
    y = np.asarray(out)
    reply["shape"] = list(y.shape)
    reply["dtype"] = str(y.dtype)
    flat = []
    for a in m.arguments:
        if a.role == "input":
            flat.append(x)
        else:
            tree = model.params if a.role == "parameter" else model.state
            flat.append(np.asarray(lookup(tree, a.path, a.role)))
    if len(flat) == 7 and [f.shape for f in flat] == SHAPES:
        if all(f.dtype == np.float32 for f in flat):
            reply["err_self"] = _max_err(y, dense_bn_reference(flat))
        reply["mapping_same"] = [(a.role, a.dataset) for a in m.arguments] == ORIGINAL_MAP
        reply["err_orig"] = _max_err(y, REFERENCE)
    return reply


def run_cli(req: dict[str, Any]) -> dict[str, Any]:
    """``juliabridge ARGV`` in this process, and what the library says about the same bundle."""
    from juliabridge import cli, verify
    from juliabridge.support.exitcodes import exit_code

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(req["cli"])
    argv = req["cli"]
    api: int | None = None
    try:
        if argv[0] == "verify":
            result = verify(
                argv[1],
                backend=req.get("backend", "xla"),
                verify_checksums="--no-verify" not in argv,
            )
            api = 0 if result.ok else 1
        else:
            from juliabridge.bundle import open_bundle

            open_bundle(argv[1], verify_checksums="--no-verify" not in argv)
            api = 0
    except Exception as e:
        api = exit_code(e)
    return {
        "outcome": "cli",
        "code": code,
        "api_code": api,
        "stdout": out.getvalue()[-4000:],
        "stderr": err.getvalue()[-4000:],
    }


@contextlib.contextmanager
def _racing(race: dict[str, Any] | None) -> Any:
    """With `race`, a writer that acts right after the reader's `after`-th open of a file
    (``safefile.open_regular``, behind every export and bundle file the readers open): it
    renames ``source`` over ``target`` (``replace``), or puts a symlink to ``source``
    (``symlink``) or a FIFO (``fifo``) there. Deterministic: the hook is the interleaving."""
    if not race:
        yield
        return
    from juliabridge.bundle.files import safefile
    from juliabridge.reactant_export import files as export_files

    real = safefile.open_regular
    calls = [0]

    def hooked(*args: Any, **kw: Any) -> Any:
        got = real(*args, **kw)
        calls[0] += 1
        if calls[0] == race["after"]:
            target = race["target"]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
            if race["how"] == "replace":
                os.link(race["source"], target)
            elif race["how"] == "symlink":
                os.symlink(race["source"], target)
            else:
                os.mkfifo(target)
        return got

    safefile.open_regular = hooked
    export_files.open_regular = hooked
    try:
        yield
    finally:
        safefile.open_regular = real
        export_files.open_regular = real


def run_export(req: dict[str, Any]) -> dict[str, Any]:
    """An export directory (Reactant's or JuliaBridge.jl's) or a bundle, by the user's routes:
    ``import_lux(path)`` (``route: direct``) or ``convert`` then ``import_lux`` of the bundle
    (``route: convert``), called on the input saved at req['x']; the output comes back."""
    path = req["export"]
    kw = {"verify_checksums": req.get("verify_checksums", True), "backend": "xla"}
    with _racing(req.get("race")):
        if req.get("route") == "convert":
            from juliabridge.julia_export.complete import is_julia_export
            from juliabridge.julia_export.convert import convert_julia_export
            from juliabridge.reactant_export.convert import convert_export

            out = req["out"]
            conv = convert_julia_export if is_julia_export(path) else convert_export
            path = str(conv(path, out))
        model = juliabridge.import_lux(path, **kw)
    y = np.asarray(model(np.load(req["x"])))
    return {"outcome": "ok", "shape": list(y.shape), "value": y.astype(np.float64).tolist()}


def main() -> None:
    """Serve requests until stdin closes."""
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req.get("export"):
                reply = run_export(req)
            else:
                reply = run_cli(req) if req.get("cli") else run(req)
        except juliabridge.JuliaBridgeError as e:
            reply = {"outcome": "error", "cls": type(e).__name__, "message": str(e)}
        except Exception as e:
            reply = {
                "outcome": "other",
                "cls": type(e).__name__,
                "message": f"{e}\n{traceback.format_exc()}",
            }
        _PROTOCOL.write(json.dumps(reply) + "\n")
        _PROTOCOL.flush()


if __name__ == "__main__":
    main()
