"""The `juliabridge` command: inspect, verify, demo, run and export."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ._version import __version__
from .errors import JuliaBridgeError


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def cmd_inspect(args: argparse.Namespace, console: Console) -> int:
    """Print producer, arguments, results and sizes of a bundle."""
    from . import dtypes
    from .bundle import open_bundle

    bundle = open_bundle(args.path, verify_checksums=not args.no_verify)
    m = bundle.manifest
    p = m.producer
    console.print(f"[bold]{m.name}[/bold]  format {m.format_version}  mode={m.mode}  {bundle.root}")
    made = (
        f"Julia {p.julia}, Lux {p.lux}, Reactant {p.reactant}"
        if p.made_with_julia
        else "made without Julia"
    )
    console.print(f"producer: {p.tool} {p.tool_version} ({made})")
    console.print(f"module read from: {bundle.module_source} ({bundle.module_source_note})")
    if p.note:
        console.print(f"note: {p.note}")
    if m.batch:
        console.print(
            f"batch: size {m.batch.size}, samples independent: {m.batch.samples_independent}"
        )
    table = Table(title="arguments (@main order)")
    for col in ("#", "role", "name", "MLIR shape", "Julia shape", "dtype", "size"):
        table.add_column(col, no_wrap=True)
    total = 0
    for a in m.arguments:
        nbytes = dtypes.to_numpy(a.dtype).itemsize
        for d in a.shape:
            nbytes *= d
        total += nbytes if a.role != "input" else 0
        table.add_row(
            str(a.index),
            a.role,
            a.label,
            str(list(a.shape)),
            str(list(a.julia_shape)),
            a.dtype,
            _human_bytes(nbytes),
        )
    console.print(table)
    rt = Table(title="results")
    for col in ("#", "output path(s)", "MLIR shape", "dtype"):
        rt.add_column(col)
    for r in m.results:
        rt.add_row(
            str(r.index),
            ", ".join(".".join(map(str, q)) for q in r.paths),
            str(list(r.shape)),
            r.dtype,
        )
    for al in m.aliases:
        src = m.arguments[al.argument]
        rt.add_row(
            "=",
            ".".join(map(str, al.path)),
            f"argument {al.argument} ({src.label}) unchanged",
            src.dtype,
        )
    console.print(rt)
    console.print(
        f"parameters and state: {_human_bytes(total)}; module ops: {len(bundle.module.ops)} kinds"
    )
    if bundle.module.arg_shardings or bundle.module.num_partitions > 1:
        console.print(
            f"recorded shardings (reported, not applied; place arrays with jax.device_put): "
            f"num_partitions={bundle.module.num_partitions}; "
            + ", ".join(
                f"{m.arguments[i].label}: {s}" for i, s in bundle.module.arg_shardings.items()
            )
        )
    if bundle.module.custom_calls:
        console.print(f"custom calls: {', '.join(bundle.module.custom_calls)}")
    if m.examples:
        console.print(
            f"examples: {len(m.examples.inputs)} input(s), "
            f"{len(m.examples.outputs)} reference output(s)"
        )
    return 0


def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    """Run the bundled examples; exit 1 when any result is out of tolerance."""
    from .verify import verify

    report = verify(args.path, backend=args.backend, rtol=args.rtol, atol=args.atol)
    table = Table(
        title=escape(
            f"verify {report.bundle} [{report.backend}] rtol={report.rtol:g} atol={report.atol:g}"
        )
    )
    for col in ("result", "max abs err", "max rel err", "ok"):
        table.add_column(col)
    for c in report.checks:
        table.add_row(
            c.name, f"{c.max_abs:.3g}", f"{c.max_rel:.3g}", "yes" if c.ok else "[red]NO[/red]"
        )
    console.print(table)
    console.print(
        "OK" if report.ok else "[red]MISMATCH[/red]: outputs differ from Julia's reference"
    )
    return 0 if report.ok else 1


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    """Import the example LeNet bundle shipped in the package, run it and verify it."""
    import jax
    import numpy as np

    from .examples.paths import example_bundle_path
    from .model import import_lux
    from .verify import verify

    path = example_bundle_path("lenet")
    console.print(f"example bundle: {path}")
    args.path, args.no_verify = path, False
    cmd_inspect(args, console)
    model = import_lux(path, backend=args.backend)
    x_spec = next(a for a in model.manifest.arguments if a.role == "input")
    x = np.random.default_rng(0).standard_normal(x_spec.shape).astype(np.float32)
    logits, _ = jax.jit(model.apply)(model.params, model.state, x)
    console.print(
        f"jax.jit(model.apply) on x of shape {x.shape} (Julia {tuple(reversed(x.shape))}) -> "
        f"logits {tuple(logits.shape)}; "
        f"predicted classes {np.asarray(logits).argmax(axis=1).tolist()}"
    )
    report = verify(path, backend=args.backend)
    console.print(
        f"verify against the bundled reference outputs (backend {report.backend}): max abs err "
        f"{report.max_abs:.3g}, max rel err {report.max_rel:.3g} -> "
        f"{'OK' if report.ok else 'MISMATCH'}"
    )
    return 0 if report.ok else 1


def cmd_vjp(args: argparse.Namespace, console: Console) -> int:
    """Derive and store a bundle's VJP module, for gradients without enzyme-ad."""
    from .vjp_bundle import add_vjp

    target = add_vjp(args.path, overwrite=args.overwrite)
    console.print(
        f"wrote {target}; gradients on backend='xla' now work without enzyme-ad for this bundle"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `juliabridge` command."""
    parser = argparse.ArgumentParser(
        prog="juliabridge", description="Lux.jl models as JAX functions."
    )
    parser.add_argument("--version", action="version", version=f"juliabridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="show a bundle's signature, sizes and producer")
    p.add_argument("path")
    p.add_argument("--no-verify", action="store_true", help="skip sha256 checks")
    p.set_defaults(func=cmd_inspect)
    p = sub.add_parser("verify", help="compare a bundle's outputs with Julia's reference outputs")
    p.add_argument("path")
    p.add_argument("--backend", default="auto", choices=["auto", "enzyme", "xla"])
    p.add_argument("--rtol", type=float, default=None)
    p.add_argument("--atol", type=float, default=None)
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("vjp", help="derive the bundle's VJP module with enzyme-ad and store it")
    p.add_argument("path")
    p.add_argument("--overwrite", action="store_true", help="replace an existing VJP module")
    p.set_defaults(func=cmd_vjp)
    p = sub.add_parser("demo", help="run the example LeNet bundle shipped with juliabridge")
    p.add_argument("--backend", default="auto", choices=["auto", "enzyme", "xla"])
    p.set_defaults(func=cmd_demo)
    from .bundle.upgrade import add_upgrade_parser

    add_upgrade_parser(sub)
    try:
        from .cli_export import add_export_parser
    except ImportError:  # the export command lives in its own module; absent in slim installs
        pass
    else:
        add_export_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one readable line on error, never a traceback for a JuliaBridgeError."""
    args = build_parser().parse_args(argv)
    # Rich assumes 80 columns when piped; tables of Lux paths need more to stay readable.
    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        return int(args.func(args, console))
    except JuliaBridgeError as e:
        Console(stderr=True, soft_wrap=True).print(
            f"juliabridge {args.command}: error: {e}", markup=False, highlight=False
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
