"""The `juliabridge` command's exit codes (one per error class) and its one-line error output.

Every command ends in exactly one of these codes; the table is printed by ``juliabridge
--help``, reproduced in docs/reliability.md and generated into the site's CLI reference
(tests/test_cli_errors.py checks that all three say the same). An error is reported on one
line of stderr, with every character that could act on a terminal escaped, so a hostile
bundle cannot retitle the window, clear the screen or write the clipboard through an error
message.
"""

from __future__ import annotations

import sys
import unicodedata
from dataclasses import dataclass

from .. import errors as E


@dataclass(frozen=True)
class ExitCode:
    """One row of the table: the code, the error class it reports (None: not an error)."""

    code: int
    error: type[BaseException] | None
    meaning: str


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(0, None, "success"),
    ExitCode(1, None, "verify: the outputs differ from the bundle's reference outputs"),
    ExitCode(2, None, "command-line usage error (unknown option, bad value)"),
    ExitCode(3, E.JuliaUnavailable, "no usable Julia installation (export)"),
    ExitCode(4, E.JuliaExportError, "Julia ran but the export failed"),
    ExitCode(5, E.BackendUnavailableError, "the requested backend is not available here"),
    ExitCode(6, E.TransformError, "a derivative cannot be computed (e.g. Enzyme failed)"),
    ExitCode(7, E.ExecutionError, "XLA failed to compile or run the module"),
    ExitCode(8, E.CallArgumentError, "wrong inputs for the model"),
    ExitCode(9, E.X64DisabledError, "64-bit types while jax_enable_x64 is off"),
    ExitCode(10, E.BundleError, "the bundle is missing, unreadable or malformed"),
    ExitCode(11, E.ManifestError, "manifest.json is invalid"),
    ExitCode(12, E.ChecksumError, "a file's or dataset's digest differs from the manifest's"),
    ExitCode(13, E.BundleVersionError, "a bundle format this juliabridge does not read"),
    ExitCode(14, E.UnsafeBundleError, "the bundle points outside itself (links, paths)"),
    ExitCode(15, E.SignatureMismatchError, "manifest, module and weights disagree"),
    ExitCode(16, E.MLIRParseError, "the module text does not parse"),
    ExitCode(17, E.UnsupportedModuleError, "the module holds ops the policy refuses"),
    ExitCode(18, E.ModuleContractError, "an op breaks its contract (could crash XLA)"),
    ExitCode(19, E.ResourceLimitError, "the module exceeds a resource budget"),
    ExitCode(20, E.SaveError, "writing a file failed"),
    ExitCode(21, OSError, "reading or writing a file failed (operating-system error)"),
    ExitCode(22, E.UnsupportedOpError, "backend lax: an op of the module does not lift"),
    ExitCode(23, E.OnnxConversionError, "export-onnx: jax2onnx cannot convert a JAX primitive"),
    ExitCode(
        24,
        E.NoReferenceOutputsError,
        "verify: the bundle has no reference outputs to verify against",
    ),
    ExitCode(29, E.JuliaBridgeError, "any other juliabridge error"),
    ExitCode(70, None, "internal error (a bug in juliabridge: please report it)"),
    ExitCode(130, None, "interrupted (Ctrl-C)"),
)
OK, MISMATCH, USAGE, INTERNAL, INTERRUPTED = 0, 1, 2, 70, 130


def exit_code(exc: BaseException) -> int:
    """The code of the most specific class in the table that `exc` is an instance of."""
    by_class = {row.error: row.code for row in EXIT_CODES if row.error is not None}
    for cls in type(exc).__mro__:
        if cls in by_class:
            return by_class[cls]
    return INTERNAL


def table_text() -> str:
    """The table as plain text, for ``--help``."""
    return "\n".join(f"  {row.code:>3}  {row.meaning}" for row in EXIT_CODES)


def table_markdown() -> str:
    """The table as the markdown docs/reliability.md and the site's CLI reference carry."""
    lines = ["| code | meaning | error class |", "| ---: | --- | --- |"]
    for row in EXIT_CODES:
        cls = "" if row.error is None else f"`{row.error.__name__}`"
        lines.append(f"| {row.code} | {row.meaning} | {cls} |")
    return "\n".join(lines)


def _escape(ch: str) -> str:
    o = ord(ch)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


#: Unicode categories that act on a terminal or hide text: controls (C0, DEL, C1 incl. CSI),
#: format characters (bidi overrides, zero-width), separators, surrogates, private use.
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def safe(text: object) -> str:
    """`text` with every terminal-active or invisible character written as an escape.

    Newlines and tabs are escaped too, so the result is always one line.
    """
    s = str(text)
    if s.isprintable() and s.isascii():
        return s
    return "".join(_escape(c) if unicodedata.category(c) in _UNSAFE else c for c in s)


#: Python API words in messages, as the command line spells them.
CLI_SPELLING = (
    ("verify_checksums=False", "--no-verify"),
    ("overwrite=True (--overwrite)", "--overwrite"),
    ("overwrite=True", "--overwrite"),
    ("backend='xla'", "--backend xla"),
    ("backend='enzyme'", "--backend enzyme"),
)


def for_cli(message: str) -> str:
    """A library message with the API's keywords replaced by the command's flags."""
    for api, flag in CLI_SPELLING:
        message = message.replace(api, flag)
    return message


def report(command: str, exc: BaseException) -> int:
    """Print `exc` as one escaped line on stderr; return its exit code."""
    code = exit_code(exc)
    if code == INTERNAL:
        text = (
            f"internal error ({type(exc).__name__}: {exc}); please report it "
            "(JULIABRIDGE_DEBUG=1 shows the traceback)"
        )
    else:
        text = for_cli(str(exc)) or type(exc).__name__
    sys.stderr.write(f"juliabridge {command}: error: {safe(text)}\n")
    sys.stderr.flush()
    return code
