"""The `juliabridge` command: inspect, verify, vjp, demo, doctor, upgrade, export, export-jax,
export-onnx and convert.

Everything a bundle says is printed escaped (exitcodes.safe) and never as rich markup; every
failure ends in one line on stderr and the exit code of its error class (exitcodes.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._version import __version__
from ..support.exitcodes import INTERRUPTED, MISMATCH, OK, USAGE, report, safe, table_text

if TYPE_CHECKING:
    #: What `add_subparsers` returns; each `_add_*` registers one command on it.
    Subparsers = argparse._SubParsersAction["_Parser"]
    from ..bundle import Bundle, Manifest
    from ..reactant_export.directory import ReactantExport


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _t(*parts: object, style: str = "") -> Text:
    """A rich Text of bundle-derived parts: escaped, never parsed as markup."""
    return Text("".join(safe(p) for p in parts), style=style)


#: How each format's weights are checked (spec §4.1, §8), by Manifest.dataset_digest.
_DIGESTS = {
    "blake3": "a BLAKE3 digest per dataset",
    "sha256": "a sha256 digest per dataset",
    None: "one sha256 of the whole file",
}


def python_path(role: str, path: Sequence[int | str]) -> str:
    """How Python reaches a leaf of an export's LuxModel: ``params[0][1]``, ``params['w']``."""
    text = {"input": "x", "parameter": "params", "state": "state"}[role]
    for step in path:
        text += f"[{step - 1}]" if isinstance(step, int) else f"[{step!r}]"
    return text


def cmd_inspect(args: argparse.Namespace, console: Console) -> int:
    """Print producer, arguments, results and sizes of a bundle (or a Julia or Reactant export
    directory)."""
    bundle, export = _open_for_inspect(args, console)
    _print_summary(bundle, export, console)
    arguments, total = _arguments_table(bundle.manifest, export)
    console.print(arguments)
    console.print(_results_table(bundle.manifest))
    _print_module_facts(bundle, total, console)
    return OK


def _open_for_inspect(
    args: argparse.Namespace, console: Console
) -> tuple[Bundle, ReactantExport | None]:
    """The bundle `args.path` names, read as a Julia export, a Reactant export or a bundle (in
    that order), and the Reactant export's description (None for the other two); says which."""
    from ..bundle import open_bundle
    from ..julia_export import DESCRIPTION_NAME, complete, is_julia_export
    from ..reactant_export.directory import is_export_dir

    if is_julia_export(args.path):
        console.print(
            _t(
                f"JuliaBridge.jl export directory ({DESCRIPTION_NAME}), completed to a format-3 "
                "bundle in memory (`juliabridge convert` writes it)"
            )
        )
        return complete(args.path).bundle, None
    if is_export_dir(args.path):
        from ..reactant_export.luxmodel import export_bundle

        bundle, export = export_bundle(args.path, require_inputs=False)
        console.print(_t(f"Reactant export_to_enzymejax directory, read from {export.script.path}"))
        return bundle, export
    return open_bundle(args.path, verify_checksums=not args.no_verify), None


def _print_summary(bundle: Bundle, export: ReactantExport | None, console: Console) -> None:
    """The bundle's name, format, producer, module source, weights' checks, note and batch."""
    from ..bundle.manifest import REACTANT_EXPORTER

    m = bundle.manifest
    p = m.producer
    head = _t(m.name, style="bold")
    # An export directory is read into an in-memory manifest of format 3's model; it has no
    # format of its own, and calling it "format 3" would make it look like a bundle.
    fmt = (
        "format n/a (a Reactant export directory, not a bundle)"
        if export is not None
        else f"format {m.format_version}"
    )
    head.append(_t(f"  {fmt}  mode={m.mode}  ", bundle.root))
    console.print(head)
    made = (
        f"Julia {p.julia}, Lux {p.lux}, Reactant {p.reactant}"
        if p.made_with_julia
        else "Julia, Lux and Reactant versions not recorded"
        if p.tool == REACTANT_EXPORTER
        else "made without Julia"
    )
    console.print(_t(f"producer: {p.tool} {p.tool_version} ({made})"))
    console.print(_t(f"module read from: {bundle.module_source} ({bundle.module_source_note})"))
    if export is not None:
        npz = export.script.npz_file or "none (exported with export_data_as_npz=false)"
        console.print(
            _t(
                f"weights: {npz}; an export directory records no digests, so there is nothing "
                "to verify"
            )
        )
    else:
        digests = _DIGESTS[m.dataset_digest]
        verified = "verified" if bundle.checksums_verified else "not verified (--no-verify)"
        console.print(_t(f"weights: {digests}, {verified}"))
    if p.note:
        console.print(_t(f"note: {p.note}"))
    if m.batch:
        console.print(
            _t(f"batch: size {m.batch.size}, samples independent: {m.batch.samples_independent}")
        )


def _arguments_table(m: Manifest, export: ReactantExport | None) -> tuple[Table, int]:
    """The table of @main's arguments, and the bytes of its parameters and state."""
    from ..support import dtypes

    table = Table(title="arguments (@main order)")
    # An export's trees are indexed from Python (model.params[0][1]); Reactant's own path
    # (1-based, as the .py prints it) is shown beside.
    cols: tuple[str, ...] = ("#", "role", "name", "MLIR shape", "Julia shape", "dtype", "size")
    if export is not None:
        cols = (*cols, "Reactant path")
    for col in cols:
        table.add_column(col, no_wrap=True)
    total = 0
    for a in m.arguments:
        nbytes = dtypes.to_numpy(a.dtype).itemsize
        for d in a.shape:
            nbytes *= d
        total += nbytes if a.role != "input" else 0
        row: tuple[object, ...] = (
            a.index,
            a.role,
            a.label if export is None else python_path(a.role, a.path),
            list(a.shape),
            list(a.julia_shape),
            a.dtype,
            _human_bytes(nbytes),
        )
        if export is not None:
            row = (*row, export.script.arguments[a.index].label)
        table.add_row(*(_t(c) for c in row))
    return table, total


def _results_table(m: Manifest) -> Table:
    """The table of @main's results, then the output paths that alias an argument."""
    rt = Table(title="results")
    for col in ("#", "output path(s)", "MLIR shape", "dtype"):
        rt.add_column(col)
    for r in m.results:
        # A result no output path names returns an argument unchanged (spec §3.4): say which.
        named = ", ".join(".".join(map(str, q)) for q in r.paths)
        rt.add_row(
            _t(r.index),
            _t(named or f"(echo of argument #{r.echo_of}, unchanged)"),
            _t(list(r.shape)),
            _t(r.dtype),
        )
    for al in m.aliases:
        src = m.arguments[al.argument]
        rt.add_row(
            _t("="),
            _t(".".join(map(str, al.path))),
            _t(f"argument {al.argument} ({src.label}) unchanged"),
            _t(src.dtype),
        )
    return rt


def _print_module_facts(bundle: Bundle, total: int, console: Console) -> None:
    """Static state, sizes, recorded shardings, custom calls, examples and the auto backend."""
    m = bundle.manifest
    if m.static_state:
        # Non-array state leaves (Val(true), ...) are not JAX leaves (spec §3.11).
        console.print(
            _t(
                "static state (not arrays; model.metadata['static_state']): "
                + ", ".join(
                    f"state.{'.'.join(map(str, s.path))} = {s.value!r} ({s.julia_type})"
                    for s in m.static_state
                )
            )
        )
    console.print(
        _t(
            f"parameters and state: {_human_bytes(total)}; "
            f"module ops: {len(bundle.module.ops)} kinds"
        )
    )
    if bundle.module.arg_shardings or bundle.module.num_partitions > 1:
        console.print(
            _t(
                f"recorded shardings (reported, not applied; place arrays with jax.device_put): "
                f"num_partitions={bundle.module.num_partitions}; "
                + ", ".join(
                    f"{m.arguments[i].label}: {s}" for i, s in bundle.module.arg_shardings.items()
                )
            )
        )
    if bundle.module.custom_calls:
        console.print(_t(f"custom calls: {', '.join(bundle.module.custom_calls)}"))
    if m.examples:
        console.print(
            _t(
                f"examples: {len(m.examples.inputs)} input(s), "
                f"{len(m.examples.outputs)} reference output(s)"
            )
        )
    console.print(_t(f"backend (auto): {_auto_backend(bundle.module)}"))


def _auto_backend(module: object) -> str:
    """What backend="auto" picks for `module`, and the op that forced a fallback."""
    from ..backends import LaxBackend, foreign_backend_name
    from ..errors import UnsupportedModuleError

    try:
        LaxBackend(module)  # type: ignore[arg-type]
    except UnsupportedModuleError as e:
        return f"{foreign_backend_name()}, because the lax backend cannot lift it: {e}"
    return "lax (every op lifts onto JAX primitives)"


def cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    """Print what this installation can do (juliabridge.cli.doctor)."""
    import json

    from .doctor import report as doctor_report

    r = doctor_report()
    julia = None
    if args.julia:
        from .doctor_julia import julia_report

        julia = julia_report(export=not args.no_export, export_timeout=args.timeout)
    if args.json:
        data = r.as_dict()
        if julia is not None:
            data["julia_end_to_end"] = julia.as_dict()
        print(json.dumps(data, indent=2))
        return OK if julia is None else julia.exit_code
    tested = "tested" if r.jax_tested else "NOT in the tested range"
    console.print(_t(f"juliabridge {r.juliabridge}, Python {r.python}, {r.platform}"))
    console.print(_t(f"jax {r.jax} ({tested}), jaxlib {r.jaxlib}, devices: {r.devices}"))
    console.print(_t(_stablehlo_line(r.stablehlo)))
    for title, checks in (("backends", r.backends), ("Julia", r.julia), ("extras", r.extras)):
        table = Table(title=title)
        for col in ("name", "available", "what it gives / why not"):
            table.add_column(col)
        for c in checks:
            table.add_row(
                _t(c.name), Text("yes") if c.ok else Text("no", style="red"), _t(c.detail)
            )
        console.print(table)
    if julia is None:
        return OK
    console.print(_t("Julia, end to end (juliabridge doctor --julia):"))
    for line in julia.lines():
        console.print(_t("  " + line))
    return julia.exit_code


#: What each StableHLO version doctor reports means (its JSON keys are kept for scripts).
_STABLEHLO_WORDS = {
    "reads_from": "this jaxlib reads portable artifacts from StableHLO {}",
    "writes_and_reads_up_to": "up to {} (its own version)",
    "12_week_target": "its 12-week compatibility target is {}",
}


def _stablehlo_line(versions: dict[str, str]) -> str:
    """doctor's StableHLO facts in words, and the target juliabridge writes artifacts at."""
    from ..stablehlo.artifact import ARTIFACT_TARGET

    parts = [_STABLEHLO_WORDS.get(k, k + " {}").format(v) for k, v in versions.items()]
    parts.append(f"juliabridge writes artifacts at {ARTIFACT_TARGET}")
    return "StableHLO: " + ", ".join(parts)


def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    """Run the bundled examples; exit 1 when any result is out of tolerance."""
    from ..verification import verify

    result = verify(
        args.path,
        backend=args.backend,
        rtol=args.rtol,
        atol=args.atol,
        verify_checksums=not args.no_verify,
        matmul_precision=None if args.matmul_precision == "platform" else args.matmul_precision,
    )
    table = Table(
        title=_t(
            f"verify {result.bundle} [{result.backend}] rtol={result.rtol:g} atol={result.atol:g}"
            f" matmul_precision={result.matmul_precision or 'platform'}"
        )
    )
    for col in ("result", "max abs err", "max rel err", "ok"):
        table.add_column(col)
    for c in result.checks:
        table.add_row(
            _t(c.name),
            _t(f"{c.max_abs:.3g}"),
            _t(f"{c.max_rel:.3g}"),
            Text("yes") if c.ok else Text("NO", style="red"),
        )
    console.print(table)
    if result.ok:
        console.print(Text("OK"))
        return OK
    whose = (
        "Julia's reference outputs"
        if result.made_with_julia
        else "the bundle's reference outputs (made without Julia)"
    )
    console.print(Text("MISMATCH", style="red") + Text(f": outputs differ from {whose}"))
    return MISMATCH


def cmd_convert(args: argparse.Namespace, console: Console) -> int:
    """Write a bundle from a JuliaBridge.jl export directory (julia_export) or a Reactant
    export_to_enzymejax directory (reactant_export.convert)."""
    from ..julia_export import convert_julia_export, is_julia_export
    from ..lux.options import LoadOptions
    from ..reactant_export.convert import convert_export

    if is_julia_export(args.path):
        out = convert_julia_export(args.path, args.out, overwrite=args.overwrite)
        console.print(_t(f"wrote {out} from the JuliaBridge.jl export directory {args.path}"))
        return OK
    options = LoadOptions(
        outputs=args.outputs,
        state_results=args.state_results,
        positions=args.positions,
        batch_axis=args.batch_axis,
    )
    out = convert_export(args.path, args.out, options, overwrite=args.overwrite)
    console.print(_t(f"wrote {out} (no reference outputs: Reactant's exporter records none)"))
    return OK


def cmd_export_jax(args: argparse.Namespace, console: Console) -> int:
    """Write a bundle's model as a serialized jax.export artifact and its JSON description."""
    from ..errors import CallArgumentError
    from ..exporting import save_jax
    from ..importers import import_lux

    model = import_lux(args.path, backend="lax", verify_checksums=not args.no_verify)
    batch = None if args.batch.lower() == "none" else args.batch
    try:
        info = save_jax(
            model,
            args.out,
            batch=batch,
            weights=args.weights,
            vjp_order=args.vjp_order,
            platforms=args.platform or None,
            overwrite=args.overwrite,
        )
    except CallArgumentError as e:  # the advice in the command's own words
        said = str(e).replace("batch=None", "--batch none")
        said = said.replace(
            "import_lux(dir, batch_axis=0) (juliabridge convert DIR --batch-axis 0)",
            "juliabridge convert DIR --batch-axis 0",
        )
        raise CallArgumentError(said) from e
    shapes = ", ".join(f"{a['name']} {a['shape']}" for a in info["arguments"][:4])
    more = ", ..." if len(info["arguments"]) > 4 else ""
    console.print(_t(f"wrote {args.out} and {args.out}.json: ({shapes}{more})"))
    return OK


def cmd_export_onnx(args: argparse.Namespace, console: Console) -> int:
    """Write a bundle's model as an ONNX file (jax2onnx, the onnx extra)."""
    from ..exporting_onnx import save_onnx
    from ..importers import import_lux

    model = import_lux(args.path, backend="lax", verify_checksums=not args.no_verify)
    batch = None if args.batch.lower() == "none" else args.batch
    out = save_onnx(
        model,
        args.out,
        opset=args.opset,
        batch=batch,
        check=not args.no_check,
        overwrite=args.overwrite,
    )
    console.print(_t(f"wrote {out} (ONNX opset {args.opset})"))
    return OK


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    """Import the example LeNet bundle shipped in the package, run it and verify it."""
    import jax
    import numpy as np

    from ..examples.paths import example_bundle_path
    from ..importers import import_lux
    from ..verification import verify

    path = example_bundle_path("lenet")
    console.print(_t(f"example bundle: {path}"))
    console.print(_t(_enzyme_note()))
    args.path, args.no_verify = path, False
    cmd_inspect(args, console)
    model = import_lux(path, backend=args.backend)
    x_spec = next(a for a in model.manifest.arguments if a.role == "input")
    x = np.random.default_rng(0).standard_normal(x_spec.shape).astype(np.float32)
    logits, _ = jax.jit(model.apply)(model.params, model.state, x)
    console.print(
        _t(
            f"jax.jit(model.apply) on x of shape {x.shape} (Julia {tuple(reversed(x.shape))}) -> "
            f"logits {tuple(logits.shape)}; "
            f"predicted classes {np.asarray(logits).argmax(axis=1).tolist()}"
        )
    )
    result = verify(path, backend=args.backend)
    console.print(
        _t(
            f"verify against the bundled reference outputs (backend {result.backend}): max abs "
            f"err {result.max_abs:.3g}, max rel err {result.max_rel:.3g} -> "
            f"{'OK' if result.ok else 'MISMATCH'}"
        )
    )
    return OK if result.ok else MISMATCH


#: Where the [enzyme] extra installs enzyme-ad (pyproject.toml's marker: its wheels).
_ENZYME_WHEELS = {("linux", "x86_64"), ("linux", "aarch64"), ("darwin", "arm64")}


def _enzyme_note(
    version: tuple[int, int] | None = None,
    system: str | None = None,
    machine: str | None = None,
) -> str:
    """Whether the enzyme backend is here and, if not, why, true for this Python: pip installs
    the [enzyme] extra's enzyme-ad on CPython 3.11 (Linux x86_64/aarch64, macOS arm64) only and
    says nothing elsewhere, so the first command run says it. The arguments stand in for this
    interpreter's (sys.version_info, sys.platform, platform.machine()) in tests."""
    import platform

    from ..backends.enzyme import availability

    if availability.enzyme_available():
        return "enzyme backend: available (enzyme-ad)"
    major, minor = version or sys.version_info[:2]
    system = system or sys.platform
    machine = (machine or platform.machine()).lower()
    machine = {"amd64": "x86_64", "arm64": "arm64" if system == "darwin" else "aarch64"}.get(
        machine, machine
    )
    tail = "; lax and xla need nothing extra"
    if (major, minor) != (3, 11):
        return (
            f"enzyme backend: not available (enzyme-ad has CPython 3.11 wheels only, so the "
            f"[enzyme] extra installs nothing on Python {major}.{minor}; "
            "`juliabridge doctor` says why)" + tail
        )
    if (system, machine) not in _ENZYME_WHEELS:
        return (
            f"enzyme backend: not available (enzyme-ad has no wheel for {system} {machine}, "
            "only Linux x86_64/aarch64 and macOS arm64, so the [enzyme] extra installs nothing "
            "here)" + tail
        )
    return (
        "enzyme backend: not available (enzyme-ad does not import; on this Python the "
        "[enzyme] extra installs it: pip install 'juliabridge[enzyme]' (or -e '.[enzyme]' in "
        "a clone); if it is installed, `juliabridge doctor` says why it fails)" + tail
    )


def cmd_vjp(args: argparse.Namespace, console: Console) -> int:
    """Derive and store a bundle's VJP module, for gradients without enzyme-ad."""
    from ..backends.vjp_text import derive_vjp_text
    from ..bundle.write.vjp_bundle import add_vjp

    target = add_vjp(
        args.path,
        derive=derive_vjp_text,
        overwrite=args.overwrite,
        verify_checksums=not args.no_verify,
    )
    console.print(
        _t(f"wrote {target}; gradients on backend 'xla' now need no derivation for this bundle")
    )
    return OK


_NO_VERIFY = (
    "skip the digest checks of the bundle's files (BLAKE3 per dataset in format 3, sha256 in "
    "formats 1-2; for files you changed on purpose; every other check still runs)"
)


def _tolerance(text: str) -> float:
    """An --rtol/--atol value: a finite number >= 0 (argparse reports others as usage errors)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _int_list(text: str) -> list[int]:
    """A comma-separated list of integers (argparse reports others as usage errors)."""
    try:
        return [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 0,1, got {text!r}"
        ) from None


def _int_map(text: str) -> dict[int, int]:
    """Comma-separated ``key:value`` integer pairs (argparse reports others as usage errors)."""
    try:
        pairs = [t.split(":") for t in text.split(",")]
        return {int(k): int(v) for k, v in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated result:argument pairs such as 1:3,2:4, got {text!r}"
        ) from None


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error on one line of stderr, as every other error is."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit with code 2."""
        line = f"{self.prog}: error: {message} (see {self.prog} --help)"
        sys.stderr.write(safe(line) + "\n")
        sys.exit(USAGE)


_BACKEND = (
    "backend to run the module: lax (JAX primitives), enzyme (enzyme-ad), xla, or auto (lax "
    "when every op lifts, else enzyme where importable, else xla)"
)


def _source_and_out(p: argparse.ArgumentParser, out_help: str) -> None:
    """The export commands' source (a bundle or Reactant export) and their --out FILE."""
    p.add_argument("path", help="bundle directory, or a Reactant export_to_enzymejax directory")
    p.add_argument("--out", required=True, help=out_help)


def _overwrite_and_verify(p: argparse.ArgumentParser, overwrite_help: str) -> None:
    p.add_argument("--overwrite", action="store_true", help=overwrite_help)
    p.add_argument("--no-verify", action="store_true", help=_NO_VERIFY)


def _add_inspect(sub: Subparsers) -> None:
    """``juliabridge inspect PATH``: a bundle's or an export directory's signature."""
    p = sub.add_parser("inspect", help="show a bundle's signature, sizes and producer")
    p.add_argument(
        "path",
        help="bundle directory, a JuliaBridge.jl export directory, or a Reactant "
        "export_to_enzymejax directory",
    )
    p.add_argument("--no-verify", action="store_true", help=_NO_VERIFY)
    p.set_defaults(func=cmd_inspect)


def _add_verify(sub: Subparsers) -> None:
    """``juliabridge verify PATH``: the bundled examples against their reference outputs."""
    p = sub.add_parser("verify", help="compare a bundle's outputs with its reference outputs")
    p.add_argument("path", help="bundle directory")
    p.add_argument(
        "--backend", default="auto", choices=["auto", "lax", "enzyme", "xla"], help=_BACKEND
    )
    p.add_argument(
        "--rtol",
        type=_tolerance,
        default=None,
        help="relative tolerance (default: the manifest's examples.rtol, else the spec's "
        "per-dtype default)",
    )
    p.add_argument(
        "--atol",
        type=_tolerance,
        default=None,
        help="absolute tolerance (default: the manifest's examples.atol, else the spec's "
        "per-dtype default)",
    )
    p.add_argument(
        "--matmul-precision",
        default="highest",
        help="jax.default_matmul_precision to run under (default: highest, Julia's f32 "
        "arithmetic on every platform; 'platform': the device's own default, e.g. one bf16 "
        "pass per f32 product on a TPU). It reaches the lax backend only",
    )
    p.add_argument("--no-verify", action="store_true", help=_NO_VERIFY)
    p.set_defaults(func=cmd_verify)


def _add_vjp(sub: Subparsers) -> None:
    """``juliabridge vjp PATH``: derive and store the bundle's VJP module."""
    p = sub.add_parser(
        "vjp",
        help="derive the bundle's VJP module (through lax when every op lifts, else with "
        "enzyme-ad) and store it",
    )
    p.add_argument("path", help="bundle directory")
    p.add_argument("--overwrite", action="store_true", help="replace an existing VJP module")
    p.add_argument("--no-verify", action="store_true", help=_NO_VERIFY)
    p.set_defaults(func=cmd_vjp)


def _add_convert(sub: Subparsers) -> None:
    """``juliabridge convert PATH --out BUNDLE``: a bundle from an export directory."""
    p = sub.add_parser(
        "convert",
        help="write a bundle from a JuliaBridge.jl export directory or a Reactant "
        "export_to_enzymejax directory",
    )
    p.add_argument(
        "path",
        help="the export directory (holding juliabridge-export.json, or Reactant's .py; or "
        "that .py)",
    )
    p.add_argument("--out", required=True, help="the bundle directory to write (NAME.bundle)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    p.add_argument(
        "--outputs",
        type=_int_list,
        default=None,
        help="the @main results that are the outputs, in order, e.g. 0,1 (as import_lux's "
        "outputs=)",
    )
    p.add_argument(
        "--state-results",
        type=_int_map,
        default=None,
        help="result:argument pairs, each a new state leaf and the st argument it replaces, "
        "e.g. 1:3,2:4 (as import_lux's state_results=)",
    )
    p.add_argument(
        "--positions",
        type=_int_list,
        default=None,
        help="traced positions of x,ps,st, e.g. 1,2,3 (as import_lux's positions=)",
    )
    p.add_argument(
        "--batch-axis",
        type=int,
        default=None,
        help="the inputs' batch axis when samples are independent along it (as import_lux's "
        "batch_axis=)",
    )
    p.set_defaults(func=cmd_convert)


def _add_export_jax(sub: Subparsers) -> None:
    """``juliabridge export-jax PATH --out FILE``: a serialized jax.export artifact."""
    p = sub.add_parser(
        "export-jax",
        help="write a bundle's model as a serialized jax.export artifact (FILE) and its "
        "description (FILE.json), runnable with jax alone (docs/exporting.md)",
    )
    _source_and_out(p, "the file to write (and FILE.json beside it)")
    p.add_argument(
        "--batch",
        default="b",
        help="name of the symbolic batch dimension (default b), or 'none' for the traced shapes",
    )
    p.add_argument(
        "--weights",
        default="constants",
        choices=["constants", "arguments"],
        help="constants: params and state inside the program (default); arguments: the "
        "program takes every @main argument and returns (outputs, new_state)",
    )
    p.add_argument(
        "--vjp-order", type=int, default=1, help="derivative orders serialized (default 1)"
    )
    p.add_argument(
        "--platform",
        action="append",
        choices=["cpu", "cuda", "rocm", "tpu"],
        help="a platform to lower for (repeatable; default the current one)",
    )
    _overwrite_and_verify(p, "replace existing files")
    p.set_defaults(func=cmd_export_jax)


def _add_export_onnx(sub: Subparsers) -> None:
    """``juliabridge export-onnx PATH --out FILE``: the model as an ONNX file."""
    p = sub.add_parser(
        "export-onnx",
        help="write a bundle's model as an ONNX file, converted by jax2onnx and checked in "
        "onnxruntime (pip install 'juliabridge[onnx]'; docs/exporting.md)",
    )
    _source_and_out(p, "the .onnx file to write")
    p.add_argument("--opset", type=int, default=23, help="the ONNX opset (default 23)")
    p.add_argument(
        "--batch",
        default="auto",
        help="auto (default): the bundle's batch axis symbolic where it declares one; a name "
        "for it; or 'none' for the traced shapes",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="write the graph without running it in onnxruntime against the model's outputs",
    )
    _overwrite_and_verify(p, "replace an existing file")
    p.set_defaults(func=cmd_export_onnx)


def _add_demo(sub: Subparsers) -> None:
    """``juliabridge demo``: the example LeNet bundle, run and verified."""
    p = sub.add_parser("demo", help="run the example LeNet bundle shipped with juliabridge")
    p.add_argument(
        "--backend", default="auto", choices=["auto", "lax", "enzyme", "xla"], help=_BACKEND
    )
    p.set_defaults(func=cmd_demo)


def _add_doctor(sub: Subparsers) -> None:
    """``juliabridge doctor``: what this installation can do."""
    p = sub.add_parser("doctor", help="show what this installation can do (backends, Julia)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--julia",
        action="store_true",
        help="also check the Julia half end to end: Julia, its environment, the versions of "
        "JuliaBridge, Reactant and Lux, and a two-layer export in a child julia; exits with "
        "the first failure's code",
    )
    p.add_argument(
        "--no-export", action="store_true", help="with --julia: skip the export (minutes)"
    )
    p.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=900,
        metavar="SECONDS",
        help="with --julia: stop the export after this many seconds (default 900)",
    )
    p.set_defaults(func=cmd_doctor)


def _positive_seconds(text: str) -> float:
    """A time limit from the command line: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `juliabridge` command."""
    parser = _Parser(
        prog="juliabridge",
        description="Lux.jl models as JAX functions.",
        epilog="exit codes (one per error class):\n"
        + table_text()
        + "\n\nJULIABRIDGE_DEBUG=1 shows tracebacks and what Enzyme/XLA print.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"juliabridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_inspect,
        _add_verify,
        _add_vjp,
        _add_convert,
        _add_export_jax,
        _add_export_onnx,
        _add_demo,
        _add_doctor,
    ):
        add(sub)
    from ..bundle.write.upgrade import add_upgrade_parser

    add_upgrade_parser(sub)
    try:
        from .export import add_export_parser
    except ImportError:  # the export command lives in its own module; absent in slim installs
        pass
    else:
        add_export_parser(sub)
    return parser


#: The commands that run a bundle's module, and so need x64 where it has 64-bit types.
_RUNS_THE_MODULE = frozenset({"inspect", "verify", "vjp", "export-jax", "export-onnx"})


def _x64_for(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """x64 turned on (and said so) for a command running a bundle with 64-bit types (x64.py)."""
    if args.command not in _RUNS_THE_MODULE or getattr(args, "path", None) is None:
        return contextlib.nullcontext()
    from .x64 import x64_where_needed

    return x64_where_needed(args.command, args.path)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the command's exit code; one escaped line on stderr for any failure."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help/--version (0) or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else USAGE
    # Rich assumes 80 columns when piped; tables of Lux paths need more to stay readable, and
    # piped lines are never wrapped (a wrapped path, "/len" then "et.bundle", cannot be grepped
    # or pasted).
    piped = not sys.stdout.isatty()
    console = Console(
        width=160 if piped else None,
        soft_wrap=piped,
        markup=False,
        highlight=False,
        emoji=False,
    )
    try:
        with _x64_for(args):
            return int(args.func(args, console))
    except KeyboardInterrupt:
        sys.stderr.write(f"juliabridge {args.command}: interrupted\n")
        return INTERRUPTED
    except Exception as e:  # every failure, typed or not, is one line and a code
        if os.environ.get("JULIABRIDGE_DEBUG", "").strip() not in ("", "0"):
            import traceback

            traceback.print_exc()
        return report(args.command, e)


if __name__ == "__main__":
    sys.exit(main())
