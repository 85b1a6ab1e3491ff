"""The errors a weights file is refused with: the kind of problem picks the type and advice."""

from __future__ import annotations

from pathlib import Path

from ...errors import (
    BundleError,
    ChecksumError,
    JuliaBridgeError,
    SignatureMismatchError,
    UnsafeBundleError,
)
from . import h5parse
from .route import FAST_ENV

__all__ = ["file_checksum_error", "refusal", "refusal_of_python_reader"]

_ADVICE = {
    "unsafe": "Refused because it could make the reader open other files; "
    "re-export the bundle with JuliaBridge.export_lux or juliabridge.save_params",
    "mismatch": "The weights file does not belong to this manifest; re-export the bundle",
    "corrupt": "The file is corrupt or truncated; download or export the bundle again",
    "limit": "Re-export the bundle (JuliaBridge.export_lux and juliabridge.save_params write "
    "complete, inline datasets)",
    "internal": "This is a juliabridge bug; please report it together with the file",
}
_FAST_HINT = (
    f" (juliabridge's own HDF5 reader found this; if libhdf5 reads the file, please report it, "
    f"and set {FAST_ENV}=0 meanwhile)"
)


def refusal(path: Path, where: str | None, kind: str, message: str) -> JuliaBridgeError:
    """The error for a problem of `kind` ("unsafe", "mismatch", "corrupt", "limit", "internal")
    in `path` (at `where`), with the advice for that kind."""
    cls = {"unsafe": UnsafeBundleError, "mismatch": SignatureMismatchError}.get(kind, BundleError)
    lead = f"{path}: {where}: " if where else f"{path}: "
    return cls(f"{lead}{message.rstrip('.')}. {_ADVICE.get(kind, _ADVICE['corrupt'])}")


def refusal_of_python_reader(path: Path, where: str | None, e: h5parse.Problem) -> JuliaBridgeError:
    """`refusal` for a problem the pure-Python reader found (a corrupt file also names the way
    around it, in case the reader is wrong)."""
    err = refusal(path, where, e.kind, str(e))
    if e.kind == "corrupt":
        return type(err)(f"{err}{_FAST_HINT}")
    return err


def file_checksum_error(path: Path, got: str, expected: str) -> ChecksumError:
    """The error for a file whose sha256 differs from the manifest's."""
    return ChecksumError(
        f"{path}: sha256 is {got} but manifest.json records {expected}; the file was modified "
        "or corrupted. Re-export the bundle, or pass verify_checksums=False if you changed it "
        "on purpose."
    )
