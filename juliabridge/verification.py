"""verify: run a bundle's example inputs and compare with the outputs Julia computed.

It takes any source `import_lux` reads (importers.py), so it sits above it."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import jax
import numpy as np

from .bundle.manifest import REACTANT_EXPORTER
from .errors import BundleError, ExecutionError, JuliaBridgeError, NoReferenceOutputsError
from .importers import import_lux
from .lux.trees import lookup


@dataclass(frozen=True)
class ResultCheck:
    """Agreement of one @main result with Julia's reference output."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool


@dataclass(frozen=True)
class VerifyReport:
    """Per-result errors against the bundled reference outputs, and the overall verdict.

    Args:
        bundle: the bundle directory verified.
        backend: the backend that ran the module.
        rtol: the relative tolerance used (the manifest's, or its dtype default).
        atol: the absolute tolerance used.
        checks: one ResultCheck per reference output (result, max_abs, max_rel, ok).
        made_with_julia: whether Julia computed the reference outputs (the manifest's
            producer.made_with_julia); False for bundles written by other tools.
        matmul_precision: the `jax.default_matmul_precision` the module ran under (None: the
            platform's own default).
    """

    bundle: str
    backend: str
    rtol: float
    atol: float
    checks: list[ResultCheck] = field(default_factory=list)
    made_with_julia: bool = True
    matmul_precision: str | None = None

    @property
    def ok(self) -> bool:
        """True when every result is within tolerance."""
        return all(c.ok for c in self.checks)

    @property
    def max_abs(self) -> float:
        """Largest absolute error over all results."""
        return max((c.max_abs for c in self.checks), default=0.0)

    @property
    def max_rel(self) -> float:
        """Largest relative error over all results."""
        return max((c.max_rel for c in self.checks), default=0.0)


def _compare(
    got: np.ndarray, want: np.ndarray, rtol: float, atol: float
) -> tuple[float, float, bool]:
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        same = bool(np.array_equal(got, want))
        diff = float(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64)), initial=0))
        return diff, diff, same
    g = got.astype(np.complex128 if np.iscomplexobj(want) else np.float64)
    w = want.astype(g.dtype)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    # NaN where the reference has NaN, and equal infinities, agree (as in Julia's isapprox);
    # their difference would be NaN, which no tolerance accepts.
    same = (g == w) | (nan_g & nan_w)
    with np.errstate(invalid="ignore"):
        err = np.where(same, 0.0, np.abs(g - w))
    max_abs = float(np.max(err, initial=0.0))
    max_rel = float(np.max(err / np.fmax(np.abs(w), np.finfo(np.float64).tiny), initial=0.0))
    ok = bool(np.all(same | (err <= atol + rtol * np.abs(w)))) and bool(
        np.array_equal(nan_g, nan_w)
    )
    return max_abs, max_rel, ok


def verify(
    path: str | os.PathLike[str],
    *,
    backend: str = "auto",
    rtol: float | None = None,
    atol: float | None = None,
    verify_checksums: bool = True,
    matmul_precision: str | None = "highest",
) -> VerifyReport:
    """Run the bundle's example inputs; report max abs/rel error per result against Julia's.

    Args:
        path: the bundle directory.
        backend: "auto", "lax", "enzyme" or "xla" (as in import_lux).
        rtol, atol: tolerances, finite and >= 0; default to the manifest's ``examples``
            values.
        verify_checksums: check the files' digests first (BLAKE3 per dataset in format 3,
            sha256 in formats 1-2; False: skip, for edited files).
        matmul_precision: run the module under ``jax.default_matmul_precision(...)`` with this
            value. "highest" (the default) checks the translation against Julia's f32 (or f64)
            arithmetic on every platform: a TPU's default runs each f32 product as one bf16 pass,
            about 1e-2 relative, far outside f32 tolerances. None runs the platform's default,
            to see what the model computes there. It acts through the lax backend (which defers
            a module's DEFAULT precision to this setting); xla and enzyme run the precision
            written in the module.

    Returns:
        A VerifyReport; ``.ok`` is False when any result is out of tolerance.

    Raises:
        JuliaBridgeError (a subclass): everything import_lux raises; NoReferenceOutputsError
        (a BundleError) when the bundle has no examples (exit code 24 on the command
        line); ExecutionError when XLA fails to compile or run the module;
        JuliaBridgeError itself for a negative, infinite or NaN tolerance, or a
        matmul_precision JAX does not name.
    """
    for name, tol in (("rtol", rtol), ("atol", atol)):
        # A NaN tolerance fails every comparison, a negative one every nonzero error: either
        # ends in a MISMATCH that says nothing about the model.
        if tol is not None and not (0 <= tol < float("inf")):
            raise JuliaBridgeError(f"{name} must be a finite number >= 0, got {tol!r}")
    precision = _precision_context(matmul_precision)
    model = import_lux(path, backend=backend, verify_checksums=verify_checksums)
    m = model.manifest
    examples = model.bundle.read_examples()
    if examples is None or m.examples is None:
        raise NoReferenceOutputsError(
            f"{path}: no reference outputs to verify against (the bundle has no examples "
            "section"
            + (
                "; it comes from a Reactant export_to_enzymejax directory, which records none"
                if m.producer.tool == REACTANT_EXPORTER
                else ""
            )
            + "), so verify can neither pass nor fail it; to check the model, compare its "
            "outputs with ones you computed in Julia"
        )
    ins, outs = examples
    rtol = m.examples.rtol if rtol is None else rtol
    atol = m.examples.atol if atol is None else atol
    flat = []
    for a in m.arguments:
        if a.role == "input":
            if a.index not in ins:
                raise BundleError(f"{path}: examples give no value for input {a.label}")
            flat.append(ins[a.index])
        else:
            tree = model.params if a.role == "parameter" else model.state
            flat.append(lookup(tree, a.path, a.role))
    try:
        with precision:
            results = model.fn(*flat)
    except JuliaBridgeError:
        raise
    except Exception as e:  # the backends type their failures; this is the last line of defence
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ExecutionError(
            f"{path}: running the module on the bundled example inputs failed "
            f"({type(e).__name__}: {first})"
        ) from e
    checks = []
    for k, want in sorted(outs.items()):
        got = np.asarray(results[k])
        max_abs, max_rel, ok = _compare(got, want, rtol, atol)
        checks.append(ResultCheck(m.results[k].label, max_abs, max_rel, ok))
    made = bool(getattr(m.producer, "made_with_julia", True))
    return VerifyReport(
        str(path), model.fn.backend_name, rtol, atol, checks, made, matmul_precision
    )


def _precision_context(value: str | None) -> contextlib.AbstractContextManager[object]:
    """``jax.default_matmul_precision(value)`` (a no-op for None), refused before any work when
    JAX does not know the name."""
    if value is None:
        return contextlib.nullcontext()
    try:
        # JAX parses the name when the context is made, not when it is entered.
        return jax.default_matmul_precision(value)
    except (ValueError, TypeError) as e:
        raise JuliaBridgeError(
            f"matmul_precision {value!r:.80} is not a precision JAX names ({e}); use 'highest', "
            "'high', 'default', 'float32', 'tensorfloat32', 'bfloat16', or None for the "
            "platform's default"
        ) from None
