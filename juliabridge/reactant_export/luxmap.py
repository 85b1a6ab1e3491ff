"""An export directory as a Lux model: the manual's ``export_to_enzymejax(model, x, ps, st)``.

Arguments: Reactant numbers them by position among the traced arguments (EnzymeJAX.jl:143,160).
A Lux layer has fields, so Reactant traces ``apply(model, x, ps, st)``: x is ``arg.2``, ps
``arg.3.*`` and st ``arg.4.*``; a field-less ``f(x, ps, st)`` gives ``arg.1``, ``arg.2``,
``arg.3``; a StatefulLuxLayer ``export_to_enzymejax(smodel, x)`` gives ``arg.1.ps.*``,
``arg.1.st.*`` (or ``st_any``) and x at ``arg.2`` (`Layout`). Paths below are kept as read:
positions as integer steps, symbols and Dict keys as names.

Results: nothing in the directory names them. The exporter traces with a fresh argument
prefix (EnzymeJAX.jl:108), so Reactant keeps every traced leaf of ``(y, st_new)`` as a result
and then returns each argument not already returned, in argument order (Reactant.jl
src/TracedUtils.jl:699-753, src/compiler/Compiler.jl:1046-1056). So the results are: the
output leaves, then one per state leaf in st order (the argument itself when unchanged, a new
value of its shape otherwise), then echoes of the remaining arguments in increasing order.
An output may be an input returned unchanged (testmode Dropout), never a ps or st leaf; when
both a reading with such an output and one without fit, the one without is taken.
Echoes are read from the module's structure (`StableHLOModule.returned_arguments`). The split
is accepted only when exactly one reading fits; otherwise `outputs=`/`state_results=` say it.
A StatefulLuxLayer returns y only and its new st through the mutated layer, so its results are
read differently (`_stateful_results`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..bundle.manifest import (
    ArgumentEntry,
    BatchInfo,
    FileRef,
    LuxPath,
    Manifest,
    Producer,
    ResultEntry,
    check_consistency,
)
from ..errors import ManifestError, SignatureMismatchError
from ..stablehlo import TensorSpec
from .directory import PRODUCER, ReactantExport

ROLES_BY_SLOT = ("input", "parameter", "state")

_OVERRIDE = (
    "pass outputs=[result indices] (the @main results that are the model's outputs, in "
    "order) and state_results={result index: argument index} (each new state leaf and the st "
    "argument it replaces) to import_lux"
)


@dataclass(frozen=True)
class ResultMap:
    """Which @main results are outputs and which new state leaves (the others return an
    argument unchanged: build_manifest reads those from the module)."""

    outputs: tuple[int, ...]
    #: result index -> @main argument index of the st leaf it replaces.
    state: dict[int, int]


#: The fields of Lux's StatefulLuxLayer that Lux's Reactant extension traces, with the role
#: of what lies below each (Lux ext/ReactantExt/tracing.jl: ``(path..., :ps)`` etc.).
STATEFUL_FIELDS = {"ps": "parameter", "st": "state", "st_any": "state"}


@dataclass(frozen=True)
class Layout:
    """Where x, ps and st are among the traced arguments.

    ``apply``: positions (x, ps, st), as ``apply(model, x, ps, st)`` (2, 3, 4) or
    ``f(x, ps, st)`` (1, 2, 3). ``stateful``: ``export_to_enzymejax(smodel, x)`` of a
    StatefulLuxLayer: ps at ``arg.1.ps.*``, st at ``arg.1.st.*`` (or ``st_any``), x at
    ``arg.2``.
    """

    kind: str
    x: int
    ps: int
    st: int

    def split(self, path: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
        """(role, path below x/ps/st) of an argument's Reactant path.

        A bare array at the ps or st position (``f(x, w)``) is leaf 1 of its tree: a bundle
        names every parameter by a non-empty path, so import and convert agree.
        """
        if self.kind == "stateful" and path[0] == self.ps:
            role, below = STATEFUL_FIELDS[str(path[1])], path[2:]
        else:
            role = dict(zip((self.x, self.ps, self.st), ROLES_BY_SLOT))[int(path[0])]
            below = path[1:]
        if role != "input" and not below:
            below = (1,)
        return role, below


def _stateful(export: ReactantExport) -> bool:
    paths = [a.path for a in export.script.arguments]
    layer = [p for p in paths if p[0] == 1]
    return (
        bool(layer)
        and all(p[0] in (1, 2) for p in paths)
        and all(len(p) >= 2 and p[1] in STATEFUL_FIELDS for p in layer)
    )


def positions(export: ReactantExport, given: Sequence[int] | None) -> Layout:
    """Where x, ps and st are (Layout), from the paths or `given` (x, ps, st) positions.

    Raises:
        ManifestError: the arguments do not have a layout Lux exports have; `positions=`
            overrides.
    """
    used = sorted({int(a.path[0]) for a in export.script.arguments})
    if given is not None:
        if len(given) != 3 or len(set(given)) != 3:
            raise ManifestError(
                f"positions= takes three distinct positions (x, ps, st), got {given}"
            )
        x, ps, st = (int(p) for p in given)
        stray = [p for p in used if p not in (x, ps, st)]
        if stray:
            raise ManifestError(
                f"{export.script.path}: arguments at position(s) {stray} are none of x={x}, "
                f"ps={ps}, st={st}"
            )
        return Layout("apply", x, ps, st)
    if _stateful(export):
        return Layout("stateful", 2, 1, 1)  # export_to_enzymejax(StatefulLuxLayer, x)
    if used and set(used) <= {2, 3, 4} and 2 in used:
        return Layout("apply", 2, 3, 4)  # a Lux layer: apply(model, x, ps, st)
    if used and set(used) <= {1, 2, 3} and 1 in used:
        return Layout("apply", 1, 2, 3)  # a field-less f(x, ps, st)
    raise ManifestError(
        f"{export.script.path}: the arguments are at traced positions {used}, not the Lux "
        "manual's export_to_enzymejax(model, x, ps, st) (x=2, ps=3, st=4), f(x, ps, st) "
        "(1, 2, 3) nor a StatefulLuxLayer's export_to_enzymejax(smodel, x) (arg.1.ps..., "
        "arg.1.st..., x=2); pass positions=(x, ps, st) to import_lux, or use "
        "juliabridge.load_reactant_export for a plain function"
    )


def argument_entries(
    export: ReactantExport, layout: Layout, batch_axis: int | None
) -> tuple[ArgumentEntry, ...]:
    """One ArgumentEntry per @main argument, with its role and the path below x/ps/st."""
    out = []
    for i, (a, spec) in enumerate(zip(export.script.arguments, export.specs)):
        role, below = layout.split(a.path)
        out.append(
            ArgumentEntry(
                index=i,
                role=role,
                path=below,
                dtype=spec.dtype,
                shape=spec.shape,
                julia_shape=tuple(reversed(spec.shape)),
                dataset=None if role == "input" else f"arr_{i + 1}",
                batch_axis=batch_axis if role == "input" else None,
            )
        )
    return tuple(out)


def _fits_state(
    results: Sequence[TensorSpec],
    args: Sequence[TensorSpec],
    echoes: Mapping[int, int],
    k: int,
    s: int,
) -> bool:
    # Result k stands for state argument s: s itself, or a new value of its shape and dtype.
    if k in echoes:
        return echoes[k] == s
    return results[k] == args[s]


def _stateful_results(
    where: str,
    results: Sequence[TensorSpec],
    args: Sequence[TensorSpec],
    echoes: Mapping[int, int],
    entries: Sequence[ArgumentEntry],
) -> ResultMap:
    """A StatefulLuxLayer's results: the leaves of y, then every argument not among them, in
    argument order, each the argument itself or (a st leaf set by ``set_state!``) its new
    value (Reactant.jl src/TracedUtils.jl:677-693: the arguments are traced after the call,
    so the mutated layer's st holds the new leaves)."""
    m, n = len(results), len(args)
    fits = []
    for p in range(m + 1):
        out_echoes = {echoes[k] for k in range(p) if k in echoes}
        if any(entries[j].role != "input" for j in out_echoes):
            continue
        rest = [j for j in range(n) if j not in out_echoes]
        if len(rest) != m - p:
            continue
        if all(
            echoes[k] == j if k in echoes else entries[j].role == "state" and results[k] == args[j]
            for k, j in zip(range(p, m), rest)
        ):
            fits.append((p, rest))
    plain = [f for f in fits if not any(k in echoes for k in range(f[0]))]
    if len(plain) == 1:
        fits = plain
    if len(fits) == 1:
        p, rest = fits[0]
        new = {k: j for k, j in zip(range(p, m), rest) if k not in echoes}
        return ResultMap(tuple(range(p)), new)
    raise ManifestError(
        f"{where}: the {m} results of this StatefulLuxLayer export can be split into outputs "
        f"and the layer's arguments in {len(fits)} ways, not exactly one; " + _OVERRIDE
    )


def map_results(
    export: ReactantExport,
    entries: Sequence[ArgumentEntry],
    outputs: Sequence[int] | None = None,
    state_results: Mapping[int, int] | None = None,
    layout: Layout | None = None,
) -> ResultMap:
    """Split the @main results into outputs, new state leaves and echoes (module docstring).

    Raises:
        ManifestError: the split is not determined, or the overrides do not fit @main.
    """
    module = export.module
    results, args = module.results, module.arguments
    echoes = dict(module.returned_arguments)
    where = f"{export.script.mlir_file}"
    if outputs is not None or state_results is not None:
        return _given(
            where, results, entries, echoes, list(outputs or ()), dict(state_results or {})
        )
    if layout is not None and layout.kind == "stateful":
        return _stateful_results(where, results, args, echoes, entries)
    state = [a.index for a in entries if a.role == "state"]
    n, m = len(state), len(results)
    if sorted(echoes.values()) == list(range(len(args))) and len(set(echoes.values())) == len(args):
        fits = []
        for p in range(n + 1, m + 1):
            tail = list(range(p, m))
            order = [echoes.get(k, -1) for k in tail]
            if any(j < 0 for j in order) or order != sorted(order):
                continue
            # An output may be an input returned unchanged (Lux's testmode Dropout), never a
            # ps or st leaf: that rule keeps "every argument returned as an output" out.
            if any(entries[echoes[k]].role != "input" for k in range(p - n) if k in echoes):
                continue
            if all(_fits_state(results, args, echoes, p - n + j, s) for j, s in enumerate(state)):
                fits.append(p)
        # (y, x) and y followed by the echo of x read the same; the reading whose outputs
        # return no argument is taken when there is one, as Lux outputs are computed values.
        plain = [p for p in fits if not any(k in echoes for k in range(p - n))]
        if len(plain) == 1:
            fits = plain
        if len(fits) == 1:
            p = fits[0]
            outs = tuple(range(p - n))
            new = {p - n + j: s for j, s in enumerate(state) if (p - n + j) not in echoes}
            return ResultMap(outs, new)
        raise ManifestError(
            f"{where}: the {m} results can be split into outputs, {n} state leaves and echoes "
            f"in {len(fits)} ways, not exactly one; " + _OVERRIDE
        )
    fresh = [k for k in range(m) if k not in echoes]
    if n == 0 and fresh:
        return ResultMap(tuple(fresh), {})
    raise ManifestError(
        f"{where}: results {fresh} are not echoes of arguments and the module does not return "
        f"every argument (not the layout export_to_enzymejax writes), so which of them are new "
        f"values of the {n} state leaves is not determined; " + _OVERRIDE
    )


def _given(
    where: str,
    results: Sequence[TensorSpec],
    entries: Sequence[ArgumentEntry],
    echoes: dict[int, int],
    outputs: list[int],
    state: dict[int, int],
) -> ResultMap:
    m = len(results)
    for k in [*outputs, *state]:
        if not (0 <= int(k) < m):
            raise ManifestError(f"{where}: result {k} does not exist; @main has {m} results")
    if set(outputs) & set(state) or len(set(outputs)) != len(outputs):
        raise ManifestError(f"{where}: a result is listed twice in outputs=/state_results=")
    for k, j in state.items():
        if not (0 <= j < len(entries)) or entries[j].role != "state":
            raise ManifestError(
                f"{where}: state_results maps result {k} to argument {j}, not a st leaf"
            )
        if results[k] != TensorSpec(entries[j].shape, entries[j].dtype):
            raise SignatureMismatchError(
                f"{where}: result {k} is {results[k]} but {entries[j].label} (argument {j}) is "
                f"{TensorSpec(entries[j].shape, entries[j].dtype)}; a state leaf keeps its shape"
            )
    unlisted = [k for k in range(m) if k not in outputs and k not in state and k not in echoes]
    if unlisted:
        raise ManifestError(
            f"{where}: results {unlisted} are neither in outputs=/state_results= nor echoes of "
            "an argument; list every result that is not an argument returned unchanged"
        )
    return ResultMap(tuple(outputs), state)


def build_manifest(
    export: ReactantExport,
    entries: tuple[ArgumentEntry, ...],
    rmap: ResultMap,
    batch_axis: int | None,
) -> Manifest:
    """An in-memory manifest (format 3's model) of the export, checked like a bundle's."""
    results = []
    single = len(rmap.outputs) == 1
    out_pos = {k: n for n, k in enumerate(rmap.outputs, start=1)}
    batch_size = None
    if batch_axis is not None:
        xs = [a for a in entries if a.role == "input"]
        if not xs or any(len(a.shape) <= batch_axis for a in xs):
            raise ManifestError(f"batch_axis={batch_axis}: an input has no such axis")
        batch_size = xs[0].shape[batch_axis]
    for k, spec in enumerate(export.module.results):
        paths: tuple[LuxPath, ...] = ()
        axis = None
        if k in out_pos:
            paths = (("output",) if single else ("output", out_pos[k]),)
            if (
                batch_axis is not None
                and len(spec.shape) > batch_axis
                and spec.shape[batch_axis] == batch_size
            ):
                axis = batch_axis
        elif k in rmap.state:
            paths = (("state", *entries[rmap.state[k]].path),)
        echo = export.module.returned_arguments.get(k)
        if echo is not None and not paths:
            axis = entries[echo].batch_axis  # an argument returned unchanged keeps its axis
        elif echo is not None and entries[echo].batch_axis != axis:
            echo = None  # an echoed input as an output: recorded as a result, not an echo
        results.append(ResultEntry(k, paths, spec.dtype, spec.shape, axis, echo))
    s = export.script
    if batch_size is not None and rmap.state:
        raise ManifestError(
            f"{s.path}: batch_axis= serves other batch sizes by splitting the batch into "
            "traced-size calls, but this export returns new state (train mode), whose samples "
            "are not independent (batch statistics), so it runs only at its traced shapes; "
            "drop batch_axis=, or export in test mode (Lux.testmode(st))"
        )
    m = Manifest(
        name=s.function_name,
        producer=Producer(
            tool=PRODUCER,
            tool_version="unknown",
            julia=None,
            lux=None,
            reactant=None,
            made_with_julia=False,  # spec §3.2: true only for JuliaBridge.jl
            note=f"read from {s.path.name} by juliabridge.reactant_export; nothing in it was run",
        ),
        module=FileRef(s.mlir_file, None),
        weights=FileRef(s.npz_file or "", None),
        mode="train" if rmap.state else "test",
        arguments=entries,
        results=tuple(results),
        aliases=(),
        batch=BatchInfo(batch_size, True) if batch_size is not None else None,
        metadata={"reactant_export": export.metadata},
    )
    try:
        check_consistency(m)
    except ManifestError as e:
        # The in-memory manifest is built from the .py's paths: name the file they came from.
        detail = str(e).removeprefix("manifest.json: ")
        raise ManifestError(
            f"{s.path}: the arguments' paths do not form the trees of a Lux model ({detail})"
        ) from e
    return m


__all__ = [
    "STATEFUL_FIELDS",
    "Layout",
    "ResultMap",
    "argument_entries",
    "build_manifest",
    "map_results",
    "positions",
]
