"""Compare a JAX function or a LuxModel with the reference outputs Julia stored in a bundle."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bundle import Bundle, open_bundle
from ..bundle.manifest import Manifest
from ..errors import BundleError, CallArgumentError, JuliaBridgeError
from ..lux.trees import build_tree, lookup

#: (rtol, atol) by dtype when neither the caller nor the manifest gives them (the spec's
#: writer defaults): 16-bit, 32-bit and 64-bit floats; integers and Bool compare exactly.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "f16": (1e-2, 1e-3),
    "bf16": (1e-2, 1e-3),
    "f32": (1e-4, 1e-5),
    "complex<f32>": (1e-4, 1e-5),
    "f64": (1e-10, 1e-12),
    "complex<f64>": (1e-10, 1e-12),
}


@dataclass(frozen=True)
class OutputDiff:
    """How one output of the candidate compares with Julia's reference for it."""

    name: str
    result: int
    dtype: str
    shape: tuple[int, ...]
    rtol: float
    atol: float
    max_abs: float = 0.0
    abs_index: tuple[int, ...] | None = None
    max_rel: float = 0.0
    rel_index: tuple[int, ...] | None = None
    got: Any = None
    want: Any = None
    outside: int = 0
    problem: str | None = None
    source: str = "Julia"

    @property
    def ok(self) -> bool:
        """True when every element is within tolerance and nothing is missing."""
        return self.problem is None and self.outside == 0

    @property
    def size(self) -> int:
        """Number of elements compared."""
        return int(np.prod(self.shape, dtype=np.int64))

    def line(self) -> str:
        """One readable line: where, how far off, and where the worst element is."""
        head = f"{self.name} (result {self.result}, {self.dtype}{list(self.shape)})"
        if self.problem is not None:
            return f"{head}: {self.problem}"
        text = f"{head}: max abs err {self.max_abs:.3g}"
        if self.abs_index is not None:
            got, want = _scalar(self.got), _scalar(self.want)
            text += f" at {list(self.abs_index)} (got {got}, {self.source} {want})"
        text += f"; max rel err {self.max_rel:.3g}"
        if self.rel_index is not None:
            text += f" at {list(self.rel_index)}"
        tol = f"rtol={self.rtol:g}, atol={self.atol:g}"
        if self.ok:
            return f"{text}; within {tol}"
        return f"{text}; {self.outside}/{self.size} elements outside {tol}"


@dataclass(frozen=True)
class MatchReport:
    """Every compared output of one candidate against one bundle."""

    bundle: str
    diffs: list[OutputDiff] = field(default_factory=list)
    source: str = "Julia"

    @property
    def ok(self) -> bool:
        """True when every output matches."""
        return all(d.ok for d in self.diffs)

    def __str__(self) -> str:
        bad = sum(not d.ok for d in self.diffs)
        whose = "Julia's reference outputs" if self.source == "Julia" else "the reference outputs"
        head = (
            f"all {len(self.diffs)} outputs match {whose} in {self.bundle}"
            if self.ok
            else f"{bad} of {len(self.diffs)} outputs differ from {whose} in {self.bundle}"
        )
        lines = [head]
        lines += [f"  {'ok ' if d.ok else 'BAD'} {d.line()}" for d in self.diffs]
        lines.append("  (indices are in the layout the candidate was called in; 0-based)")
        return "\n".join(lines)


class ReferenceMismatch(JuliaBridgeError, AssertionError):
    """The candidate's outputs differ from the Julia reference outputs of a bundle.

    Also an AssertionError, so pytest reports it as a failed assertion; ``report`` holds the
    full comparison.
    """

    def __init__(self, report: MatchReport) -> None:
        super().__init__(str(report))
        self.report = report


def _scalar(v: Any) -> str:
    if v is None:
        return "?"
    if isinstance(v, (complex, np.complexfloating)):
        return f"{complex(v):.6g}"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{float(v):.6g}"


def _tolerances(
    dtype: str, manifest: Manifest, rtol: float | None, atol: float | None
) -> tuple[float, float]:
    default = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    ex = manifest.examples
    stored_rtol = getattr(ex, "rtol", None)
    stored_atol = getattr(ex, "atol", None)
    r = rtol if rtol is not None else stored_rtol if stored_rtol is not None else default[0]
    a = atol if atol is not None else stored_atol if stored_atol is not None else default[1]
    return float(r), float(a)


def compare_arrays(
    got: np.ndarray, want: np.ndarray, *, rtol: float, atol: float
) -> dict[str, Any]:
    """Max abs/rel error (with their indices) and the count of elements outside tolerance.

    NaN matches NaN; a NaN on one side only counts as outside with an infinite error.
    Integers and Bool are compared exactly.
    """
    if want.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0, "outside": 0}
    exact = want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer)
    if exact:
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        err = np.abs(g - w)
        bad = got != want
    else:
        kind = np.complex128 if np.iscomplexobj(want) or np.iscomplexobj(got) else np.float64
        g = got.astype(kind)
        w = want.astype(kind)
        nan_g, nan_w = np.isnan(g), np.isnan(w)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(g - w)
        err = np.where(nan_g & nan_w, 0.0, err)
        err = np.where(nan_g != nan_w, np.inf, err)
        err = np.where(np.isnan(err), np.inf, err)  # inf - inf
        with np.errstate(invalid="ignore"):
            bad = ~(err <= atol + rtol * np.abs(w)) & ~(nan_g & nan_w)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = err / np.maximum(np.abs(w), np.finfo(np.float64).tiny)
    rel = np.where(err == 0, 0.0, rel)
    i_abs = np.unravel_index(int(np.argmax(err)), err.shape)
    i_rel = np.unravel_index(int(np.argmax(rel)), rel.shape)
    return {
        "max_abs": float(err[i_abs]),
        "abs_index": tuple(int(i) for i in i_abs),
        "max_rel": float(rel[i_rel]),
        "rel_index": tuple(int(i) for i in i_rel),
        "got": got[i_abs],
        "want": want[i_abs],
        "outside": int(np.count_nonzero(bad)),
    }


def _example_inputs(
    manifest: Manifest, ins: Mapping[int, np.ndarray], path: str
) -> tuple[Any, ...]:
    """The example inputs as positional arguments of ``model.apply`` / a JAX function."""
    entries = [a for a in manifest.arguments if a.role == "input"]
    for a in entries:
        if a.index not in ins:
            raise BundleError(f"{path}: the examples give no value for input {a.label}")
    paths = [tuple(a.path) for a in entries]
    if paths and all(p and isinstance(p[0], int) for p in paths):
        count = max(int(p[0]) for p in paths)
        return tuple(
            build_tree([(p[1:], ins[a.index]) for a, p in zip(entries, paths) if p[0] == n])
            for n in range(1, count + 1)
        )
    return (build_tree([(p, ins[a.index]) for a, p in zip(entries, paths)]),)


def _compare_path(
    head: OutputDiff, tree: Any, path: tuple[Any, ...], want: np.ndarray, layout: str
) -> OutputDiff:
    """Compare the candidate's value at result path `path` (below its root) with `want`."""
    name = ".".join(str(s) for s in path)
    head = dataclasses.replace(head, name=name)
    try:
        value = lookup(tree, tuple(path[1:]), str(path[0]))
    except CallArgumentError:
        return dataclasses.replace(head, problem=f"the candidate returns no {name}")
    try:
        got = np.asarray(value)
        if got.dtype == object:
            raise ValueError("not one array")
    except (TypeError, ValueError):
        return dataclasses.replace(
            head,
            problem=f"the candidate's {name} is a {type(value).__name__}, not an array",
        )
    if layout == "julia":
        got = got.T
    want = np.asarray(want)
    if got.shape != want.shape:
        return dataclasses.replace(
            head,
            problem=f"the candidate's {name} has shape {list(got.shape)}, Julia's "
            f"{list(want.shape)}",
        )
    found = compare_arrays(got, want, rtol=head.rtol, atol=head.atol)
    return dataclasses.replace(head, **found)


def _refuse_a_state_pair(m: Manifest, value: Any) -> None:
    """Refuse a ``(y, new_state)`` pair from a candidate not declared `with_state`.

    Lux's ``model(x, ps, st)`` returns such a pair, so a candidate written after it is the
    common case; without this, numpy's "setting an array element with a sequence" was all
    the caller saw.
    """
    __tracebackhide__ = True
    single = any(tuple(p) == ("output",) for r in m.results for p in r.paths)
    if single and isinstance(value, (tuple, list)):
        raise CallArgumentError(
            f"{m.name}: the model's output is one array, but the candidate returned a "
            f"{type(value).__name__} of {len(value)}; if it returns (y, new_state) as Lux does, "
            "pass with_state=True (the state is compared too), else return y alone"
        )


def _open(bundle: Any, candidate: Any) -> Bundle:
    from ..lux.model import LuxModel

    if bundle is None:
        if isinstance(candidate, LuxModel):
            return candidate.bundle
        raise JuliaBridgeError(
            "assert_matches_julia needs the bundle whose reference outputs to compare with "
            "(pass bundle=PATH), unless the candidate is a LuxModel"
        )
    if isinstance(bundle, Bundle):
        return bundle
    if isinstance(bundle, LuxModel):
        return bundle.bundle
    if isinstance(bundle, (str, os.PathLike)):
        return open_bundle(Path(bundle))
    raise JuliaBridgeError(
        f"bundle must be a bundle directory, a Bundle or a LuxModel, got {type(bundle).__name__}"
    )


def compare_with_julia(
    candidate: Any,
    bundle: str | os.PathLike[str] | Bundle | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    with_state: bool = False,
    layout: str | None = None,
) -> MatchReport:
    """Run `candidate` on a bundle's example inputs and compare with Julia's outputs.

    Args:
        candidate: a ``LuxModel`` (called as ``apply(params, state, *inputs)``; its outputs and
            new state are compared), or a function of the inputs (a JAX re-implementation,
            ``jax.jit(model)``...) returning the outputs ``y`` shaped like Lux's ``y``, or
            ``(y, new_state)`` when `with_state`.
        bundle: the bundle with reference outputs (default: the LuxModel's own bundle).
        rtol, atol: tolerances (default: the manifest's, else per-dtype defaults).
        with_state: a function candidate also returns the new state, which is compared too.
        layout: ``"mlir"`` (batch first, the default) or ``"julia"``: the layout the candidate
            takes and returns arrays in (default: the LuxModel's own).

    Returns:
        The comparison of every reference output (a result returned at several paths is
        compared at each).

    Raises:
        BundleError: the bundle has no reference outputs (exported with reference=false).
        JuliaBridgeError: the candidate or bundle is of the wrong kind.
    """
    from ..lux.model import LuxModel

    __tracebackhide__ = True  # a failure report shows the caller's line, not this source
    b = _open(bundle, candidate)
    m = b.manifest
    examples = b.read_examples()
    if examples is None or m.examples is None:
        raise BundleError(
            f"{b.root}: the bundle has no reference outputs to compare with (it was exported "
            "with reference=false); export it again with reference=true"
        )
    ins, outs = examples
    if layout is None:
        layout = candidate.layout if isinstance(candidate, LuxModel) else "mlir"
    if layout not in ("mlir", "julia"):
        raise JuliaBridgeError(f"layout must be 'mlir' or 'julia', got {layout!r}")
    if layout == "julia":
        ins = {i: np.ascontiguousarray(v.T) for i, v in ins.items()}
    inputs = _example_inputs(m, ins, str(b.root))
    if isinstance(candidate, LuxModel):
        y, new_state = candidate.apply(candidate.params, candidate.state, *inputs)
        trees: dict[str, Any] = {"output": y, "state": new_state}
    elif callable(candidate):
        value = candidate(*inputs)
        if with_state:
            if not (isinstance(value, tuple) and len(value) == 2):
                raise CallArgumentError(
                    f"with_state=True: the candidate must return (y, new_state), got "
                    f"{type(value).__name__}"
                )
            trees = {"output": value[0], "state": value[1]}
        else:
            _refuse_a_state_pair(m, value)
            trees = {"output": value}
    else:
        raise JuliaBridgeError(
            f"the candidate must be a LuxModel or a callable, got {type(candidate).__name__}"
        )
    # Bundles made without Julia (the shipped examples) hold the producer's own outputs.
    source = "Julia" if getattr(m.producer, "made_with_julia", False) else "reference"
    diffs = []
    for k in sorted(outs):
        r = m.results[k]
        rt, at = _tolerances(r.dtype, m, rtol, atol)
        head = OutputDiff("", k, r.dtype, tuple(r.shape), rt, at, source=source)
        for path in r.paths:
            if path[0] in trees:  # else a state output of a candidate that returns no state
                diffs.append(_compare_path(head, trees[path[0]], path, outs[k], layout))
    return MatchReport(str(b.root), diffs, source=source)


def assert_matches_julia(
    candidate: Any,
    bundle: str | os.PathLike[str] | Bundle | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    with_state: bool = False,
    layout: str | None = None,
) -> MatchReport:
    """``compare_with_julia``, raising ``ReferenceMismatch`` (an AssertionError) on a difference.

    The message names each differing output by its path (``output``,
    ``state.layer_2.running_mean``), with its max abs and rel error, the index of the worst
    element (got vs Julia) and how many elements are outside the tolerance. Returns the report
    when everything matches.
    """
    # pytest leaves this helper's frames (and their source) out of a failure report.
    __tracebackhide__ = True
    report = compare_with_julia(
        candidate, bundle, rtol=rtol, atol=atol, with_state=with_state, layout=layout
    )
    if not report.diffs:
        raise BundleError(
            f"{report.bundle}: nothing to compare: no reference output is at a path the "
            "candidate returns"
        )
    if not report.ok:
        raise ReferenceMismatch(report)
    return report


__all__ = [
    "DEFAULT_TOLERANCES",
    "MatchReport",
    "OutputDiff",
    "ReferenceMismatch",
    "assert_matches_julia",
    "compare_arrays",
    "compare_with_julia",
]
