"""Shared pieces of the benchmark scripts: models, timing, machine facts, tables and JSON.

The benchmark models are Lux models whose bundles are made in Python
(`juliabridge.examples.luxmodels` re-implements Lux's layers in JAX and lowers them with
Reactant's conventions), so the *native* JAX version of each model is the very same Python
function, fed the very same weights. An imported model can therefore be timed side by side
with its native twin, in one process, on one machine.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.examples import luxmodels as lux

REPO = Path(__file__).resolve().parents[1]
#: 1-minute load average when the benchmark started: other jobs on the machine show up here.
LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
RESULTS = REPO / "benchmarks" / "results"
#: The backends a script measures unless `--backends` says otherwise: all three, the default
#: `lax` first (enzyme is skipped, with a note, where enzyme-ad does not import).
DEFAULT_BACKENDS = ("lax", "enzyme", "xla")

Params = dict[str, dict[str, Any]]


# ----------------------------------------------------------------------------------------
# Models: a bundle on disk and the same model written natively in JAX


@dataclass(frozen=True)
class Case:
    """One benchmark model: its bundle, native forward, example input, labels and weights."""

    name: str
    description: str
    bundle: Path
    forward: Callable[[Params, jax.Array], jax.Array]
    x: np.ndarray
    labels: np.ndarray
    params: Params
    weight_bytes: int


def lenet_forward(ps: Params, x: jax.Array) -> jax.Array:
    """LeNet-5 as Lux computes it (luxmodels.LENET_SOURCE), MLIR layout: x (B, 1, 28, 28)."""
    h = lux.conv2d(x, ps["layer_1"]["weight"], ps["layer_1"]["bias"], lux.relu)
    h = lux.maxpool2d(h, (2, 2))
    h = lux.conv2d(h, ps["layer_3"]["weight"], ps["layer_3"]["bias"], lux.relu)
    h = lux.flatten(lux.maxpool2d(h, (2, 2)))
    h = lux.dense(h, ps["layer_6"]["weight"], ps["layer_6"]["bias"], lux.relu)
    return lux.dense(h, ps["layer_7"]["weight"], ps["layer_7"]["bias"])


def mlp_forward(ps: Params, x: jax.Array) -> jax.Array:
    """Lux ``Chain(Dense(..., relu), ..., Dense(...))``: relu on every layer but the last."""
    names = sorted(ps, key=lambda k: int(k.split("_")[1]))
    h = x
    for i, name in enumerate(names):
        act = lux.relu if i < len(names) - 1 else None
        h = lux.dense(h, ps[name]["weight"], ps[name]["bias"], act)
    return h


def _labels(n: int, classes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, classes, n).astype(np.int32)


def nbytes(tree: Any) -> int:
    """Total bytes of the array leaves of `tree`."""
    return int(sum(np.asarray(a).nbytes for a in jax.tree.leaves(tree)))


def lenet_case(directory: Path, *, batch: int, seed: int = 0) -> Case:
    """LeNet-5 (Lux's tutorial model) traced for `batch` samples."""
    path = lux.build_bundle("lenet", directory / "lenet.bundle", batch=batch, seed=seed)
    spec = lux.lenet(batch=batch, seed=seed)
    params: Params = {}
    for a in spec.arguments:
        if a.role == "parameter":
            params.setdefault(str(a.path[0]), {})[str(a.path[1])] = a.value
    return Case(
        name="lenet",
        description=f"LeNet-5, batch {batch}",
        bundle=path,
        forward=lenet_forward,
        x=spec.arguments[0].value,
        labels=_labels(batch, 10, seed),
        params=params,
        weight_bytes=nbytes(params),
    )


def dense_chain_case(directory: Path, *, batch: int = 5, seed: int = 0) -> Case:
    """Lux ``Chain(Dense(4 => 16, relu), Dense(16 => 3))``: a model small enough that a call
    is almost all overhead."""
    path = lux.build_bundle("dense_chain", directory / "dense_chain.bundle", batch=batch, seed=seed)
    spec = lux.dense_chain(batch=batch, seed=seed)
    params: Params = {}
    for a in spec.arguments:
        if a.role == "parameter":
            params.setdefault(str(a.path[0]), {})[str(a.path[1])] = a.value
    return Case(
        name="dense_chain",
        description=f"MLP 4-16-3 (Lux dense_chain), batch {batch}",
        bundle=path,
        forward=mlp_forward,
        x=spec.arguments[0].value,
        labels=_labels(batch, 3, seed),
        params=params,
        weight_bytes=nbytes(params),
    )


_RESULT_INFO = re.compile(r"\s*\{jax\.result_info = \"[^\"]*\"\}")


def mlp_case(
    directory: Path,
    *,
    widths: Sequence[int],
    batch: int,
    seed: int = 0,
    name: str = "mlp",
    examples: bool = True,
) -> Case:
    """``Chain(Dense(w0 => w1, relu), ..., Dense(w[-2] => w[-1]))`` traced for `batch` samples.

    Weights get Lux's default scale (kaiming-uniform bounds) so activations stay finite.
    """
    rng = np.random.default_rng(seed)
    params: Params = {}
    for i, (n_in, n_out) in enumerate(itertools.pairwise(widths), start=1):
        bound = np.float32(np.sqrt(6.0 / n_in))
        w = rng.random((n_in, n_out), dtype=np.float32)
        w -= np.float32(0.5)
        w *= 2 * bound
        b = ((rng.random(n_out, dtype=np.float32) - 0.5) * 2 / np.sqrt(n_in)).astype(np.float32)
        params[f"layer_{i}"] = {"weight": w, "bias": b}
    x = rng.standard_normal((batch, widths[0]), dtype=np.float32)
    leaves = [(name_, key) for name_ in params for key in ("weight", "bias")]

    def main(x: jax.Array, *flat: jax.Array) -> tuple[jax.Array]:
        ps: Params = {}
        for (layer, key), value in zip(leaves, flat):
            ps.setdefault(layer, {})[key] = value
        return (mlp_forward(ps, x),)

    values = [x] + [params[layer][key] for layer, key in leaves]
    avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in values]
    text = jax.jit(main, keep_unused=True).lower(*avals).as_text()
    text = _RESULT_INFO.sub("", text)
    arguments = [ArgumentSpec("input", [], x, batch_axis=0)]
    arguments += [
        ArgumentSpec("parameter", [layer, key], params[layer][key]) for layer, key in leaves
    ]
    outputs = None
    if examples:
        with jax.default_device(jax.devices("cpu")[0]):
            outputs = [np.asarray(jax.jit(main)(*values)[0])]
    source = ", ".join(
        f"Dense({a} => {b}{', relu' if i < len(widths) - 2 else ''})"
        for i, (a, b) in enumerate(itertools.pairwise(widths))
    )
    path = write_bundle(
        directory / f"{name}.bundle",
        BundleDescription(
            name=name,
            mlir_text=text,
            arguments=arguments,
            result_paths=[[["output"]]],
            batch={"size": batch, "samples_independent": True},
            example_outputs=outputs,
            result_batch_axes=[0],
            metadata={"lux_model": f"Chain({source})"},
        ),
        overwrite=True,
    )
    return Case(
        name=name,
        description=f"MLP {'-'.join(map(str, widths))}, batch {batch}",
        bundle=path,
        forward=mlp_forward,
        x=x,
        labels=_labels(batch, widths[-1], seed),
        params=params,
        weight_bytes=nbytes(params),
    )


def agreement_tolerance(cpu: float) -> float:
    """The tolerance for the agreement checks that precede timing: `cpu` on the CPU, 3e-2 on an
    accelerator, whose default precision (one bf16 pass per f32 product on a TPU) rounds
    differently shaped programs of the same function differently. On a TPU v5e a vmapped
    batch-1 LeNet against a batch of 64 differed by up to 0.065 absolute on logits of about 10,
    within 3e-2 relative plus 3e-2 absolute (the checks pass both as rtol and atol)."""
    return cpu if jax.default_backend() == "cpu" else 3e-2


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy with integer labels (no optax needed)."""
    picked = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=1) - picked)


# ----------------------------------------------------------------------------------------
# Timing


def block(tree: Any) -> Any:
    """Wait for every array in `tree` (JAX dispatches asynchronously)."""
    return jax.block_until_ready(tree)


def calibrate(fn: Callable[[], Any], target_s: float = 0.05, max_inner: int = 10_000) -> int:
    """Calls per timing sample so that one sample takes about `target_s` seconds."""
    block(fn())
    t = time.perf_counter()
    block(fn())
    once = max(time.perf_counter() - t, 1e-7)
    return int(min(max_inner, max(1, target_s / once)))


def interleaved(
    fns: dict[str, Callable[[], Any]],
    *,
    repeats: int,
    inner: int | None = None,
    target_s: float = 0.05,
    block_each: bool = True,
) -> dict[str, list[float]]:
    """Seconds per call of each function, sampled `repeats` times in alternating order.

    Sample r runs every function once (`inner` calls each), the order rotating from one sample
    to the next, so slow drifts of the machine hit all variants alike. With `block_each`, each
    call waits for its result (what a Python loop calling the model sees); otherwise only the
    last call of a sample is waited for.
    """
    if inner is None:
        inner = min(calibrate(f, target_s) for f in fns.values())
    names = list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            f = fns[n]
            t = time.perf_counter()
            if block_each:
                for _ in range(inner):
                    block(f())
            else:
                out = None
                for _ in range(inner):
                    out = f()
                block(out)
            samples[n].append((time.perf_counter() - t) / inner)
    return samples


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def spread(xs: Sequence[float]) -> float:
    """Interquartile range relative to the median (a noise indicator)."""
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    return float((q[2] - q[0]) / statistics.median(xs))


# ----------------------------------------------------------------------------------------
# Machine facts, tables, JSON


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _git_commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "juliabridge"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu": _cpu_model(),
        "cores_usable": usable,
        "memory_gib": _mem_total_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "enzyme_ad": _version("enzyme-ad") or _version("enzyme_ad"),
        "h5py": _version("h5py"),
        "numpy": np.__version__,
        "devices": [str(d) for d in jax.devices()],
        "juliabridge_commit": _git_commit(),
        "load_average_1min": {
            "start": LOAD_AT_START,
            "end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
    }


def command() -> str:
    """The command line that ran this script, relative to the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        shown = str(script.relative_to(REPO))
    except ValueError:
        shown = str(script)
    return " ".join(["python", shown, *sys.argv[1:]])


def run_json_child(
    script: str, args: Sequence[str], what: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``python SCRIPT ARGS...`` in a fresh process (warnings off) and return the JSON
    object its last line of output prints; RuntimeError with its stderr if it fails."""
    full = dict(os.environ, PYTHONWARNINGS="ignore") | (env or {})
    proc = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, env=full, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {what} failed:\n{proc.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    """A plain-text table (markdown pipe syntax, so it pastes into docs/benchmarks.md)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [f"### {title}"] if title else []

    def fmt(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"

    lines.append(fmt(cells[0]))
    lines.append("| " + " | ".join("-" * w for w in widths) + " |")
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def verdict(value: float, target: float, *, at_most: bool) -> str:
    """'met' or 'MISSED' for a figure against its target."""
    ok = value <= target if at_most else value >= target
    return "met" if ok else "MISSED"


def write_json(name: str, payload: dict[str, Any], out_dir: Path | None = None) -> Path:
    """Write `payload` (with machine facts, command and time) to benchmarks/results/NAME.json."""
    out_dir = out_dir or RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    full = {
        "benchmark": name,
        "command": command(),
        "time_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        **payload,
    }
    path.write_text(json.dumps(full, indent=2) + "\n", encoding="utf-8")
    return path


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"
