"""`juliabridge export SCRIPT.jl --out DIR`: export a Lux model defined in a Julia script.

The CLI always uses the `julia` subprocess route (juliabridge.driver.process); Julia objects of a
running juliacall session are exported with juliabridge.export_lux instead.

Errors print one readable line on stderr (no traceback) and give the exit code of their error
class (juliabridge/support/exitcodes.py): 3 when no Julia is available, 4 for an export that failed,
2 for an invalid option value, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import JuliaBridgeError
from ..support.exitcodes import INTERRUPTED, USAGE, exit_code, for_cli, safe

EXIT_INTERRUPTED = INTERRUPTED

DESCRIPTION = """\
Export the Lux model defined by a Julia script to a Julia export directory (import it with
juliabridge.import_lux, or make a bundle of it with `juliabridge convert`). The script must
define `model` (a Lux layer), `ps` and `st` (e.g. `ps, st = Lux.setup(rng, model)`) and `x`
(an example input in Julia's layout, batch last; a tuple for several inputs); it may define
`metadata` (a Dict) and `name`. Example: `juliabridge export julia/examples/lenet.jl --out
lenet.jlexport` in juliabridge's source tree. Needs Julia >= 1.10 (juliaup, or
PYTHON_JULIAPKG_EXE); the Julia packages are installed with juliapkg on first use."""


def add_export_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `export` sub-command to `subparsers` (from `ArgumentParser.add_subparsers`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "export",
        help="export a Lux model defined in a Julia script (needs Julia)",
        description=DESCRIPTION,
    )
    p.add_argument("script", type=_script, help="Julia script defining model, ps, st and x")
    p.add_argument("--out", "-o", type=Path, required=True, help="export directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export")
    p.add_argument("--name", help="model name (default: the directory name)")
    p.add_argument("--mode", choices=["test", "train"], default="test", help="Lux mode")
    p.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="do not store example inputs and Julia's outputs",
    )
    p.add_argument(
        "--offline", action="store_true", help="never let juliapkg download Julia packages"
    )
    p.add_argument("--timeout", type=float, default=None, help="stop Julia after SECONDS")
    p.add_argument("--verbose", "-v", action="store_true", help="show Julia's output and errors")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=_command)
    return p


def _script(text: str) -> Path:
    """The SCRIPT argument: an existing file, else a usage error (exit 2) before Julia starts."""
    path = Path(text).expanduser()
    if not path.is_file():
        what = "is a directory, not a Julia script" if path.is_dir() else "no such file"
        raise argparse.ArgumentTypeError(f"{text}: {what}")
    return path


def _one_line(message: str) -> str:
    """The first line of `message`, with a hint when more was cut off."""
    lines = [ln.strip() for ln in str(message).strip().splitlines() if ln.strip()]
    if not lines:
        return "unknown error"
    return lines[0] + (" (more with --verbose)" if len(lines) > 1 else "")


def run_export(args: argparse.Namespace) -> int:
    """Run the export the parsed `args` describe; return the process exit status."""
    from ..driver import export_script

    try:
        path = export_script(
            args.script,
            args.out,
            overwrite=args.overwrite,
            name=args.name,
            mode=args.mode,
            reference=args.reference,
            offline=args.offline,
            progress=False if args.quiet else None,
            verbose=args.verbose,
            timeout=args.timeout,
        )
    except KeyboardInterrupt:
        print("juliabridge export: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (JuliaBridgeError, ValueError) as exc:
        status = exit_code(exc) if isinstance(exc, JuliaBridgeError) else USAGE
        if args.verbose:
            print(f"juliabridge export: error: {for_cli(str(exc))}", file=sys.stderr)
        else:
            print(
                f"juliabridge export: error: {safe(_one_line(for_cli(str(exc))))}", file=sys.stderr
            )
        return status
    print(f"juliabridge export: wrote {path}")
    return 0


def _command(args: argparse.Namespace, console: Any = None) -> int:
    """Adapter for a `func(args, console)` dispatch in the main CLI."""
    return run_export(args)
