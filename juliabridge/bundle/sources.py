"""Which form of a bundle's modules to read: the text or the portable artifact (spec §2.1).

The text is read first when this jaxlib's StableHLO is at least as new as the writer's: it is
then parsed in-process like any module file, and the artifact (deserialized in a child
process, which costs a Python start and a jaxlib import) is only the fallback for a text that
does not parse. A writer newer than this jaxlib may print syntax it does not know, or know
silently, so then the artifact comes first. Each file is read once, hashed and then parsed
from those same bytes, so what is checked is what is compiled.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import BundleError, ChecksumError, MLIRParseError
from ..stablehlo import artifact
from ..stablehlo.module import MAX_MODULE_BYTES, StableHLOModule, parse_module
from .files import safefile
from .manifest import MANIFEST_NAME, ArtifactRef, FileRef, Manifest
from .weights import fastread

ARTIFACT = "artifact"
TEXT = "text"


@dataclass(frozen=True)
class ArtifactFallback:
    """A verified artifact kept for a text module that turns out not to parse here."""

    data: bytes
    path: Path
    #: Its manifest entry, described for the note, e.g. "VHLO target 1.17.0, written at ...".
    described: str
    isolated: bool


@dataclass(frozen=True)
class ModuleSource:
    """The MLIR text to parse for one module, where it came from and why that form."""

    text: str
    #: The file the text came from, for messages.
    origin: str
    #: ``"artifact"`` or ``"text"``.
    used: str
    #: Why, e.g. "artifact target 1.22.0 is newer than this jaxlib's StableHLO 1.17.0 reads".
    note: str
    #: The artifact to read instead when `text` does not parse (see `parse_source`).
    fallback: ArtifactFallback | None = None
    #: Why an artifact the bundle has is not the fallback (the text was edited), for messages.
    no_fallback: str = ""


def parse_source(src: ModuleSource, *, trust: bool) -> tuple[StableHLOModule, ModuleSource]:
    """Parse a module source, reading its artifact instead when the text does not parse.

    Args:
        src: from `read_module_sources`.
        trust: passed to `parse_module` (skips the policy, contracts and budgets).

    Returns:
        The parsed module and the source it came from (`src`, or the artifact's).

    Raises:
        MLIRParseError: the text does not parse and there is no artifact, or it cannot be
            read either (the message names both files).
        UnsupportedModuleError: the module breaks the policy, a contract or a budget.
    """
    try:
        return parse_module(src.text, trust=trust, origin=src.origin), src
    except MLIRParseError as e:
        fb = src.fallback
        if fb is None:
            if src.no_fallback:
                raise MLIRParseError(f"{e}. {src.no_fallback}") from e
            raise
        (text,) = artifact.deserialize([fb.data], [str(fb.path)], isolated=fb.isolated)
        if not isinstance(text, str):
            raise MLIRParseError(
                f"{e}; its portable artifact could not be read either: {text}"
            ) from e
        alt = ModuleSource(
            text,
            str(fb.path),
            ARTIFACT,
            f"portable artifact {fb.path.name} ({fb.described}): the text "
            f"{Path(src.origin).name} does not parse in this jaxlib",
        )
        return parse_module(alt.text, trust=trust, origin=alt.origin), alt


def _read(path: Path, key: str, limit: int, dir_fd: int | None) -> bytes:
    """The whole file, opened without following symlinks, its size bounded before reading."""
    fd, st = safefile.open_regular(path, f"the {key} file", dir_fd=dir_fd)
    try:
        if st.st_size > limit:
            raise MLIRParseError(
                f"{path}: {st.st_size} bytes is larger than the {limit >> 30} GiB {key} file limit"
            )
        return safefile.read_all(fd, st.st_size, path, f"the {key} file")
    finally:
        os.close(fd)


def _check_sha(path: Path, got: str, want: str | None) -> None:
    if want is not None and got != want:
        raise ChecksumError(
            f"{path}: sha256 is {got} but {MANIFEST_NAME} records {want}; the file was "
            "modified or corrupted. Re-export the bundle, or pass verify_checksums=False if you "
            "changed it on purpose."
        )


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MLIRParseError(
            f"{path}: not UTF-8 text ({e}), so not an MLIR module; is it the right file "
            "(e.g. not the HDF5 weights)?"
        ) from e


def _read_text(path: Path, key: str, ref: FileRef, verify: bool, dir_fd: int | None) -> str:
    data = _read(path, key, MAX_MODULE_BYTES, dir_fd)
    if verify:
        _check_sha(path, hashlib.sha256(data).hexdigest(), ref.sha256)
    return _text(path, data)


def read_module_sources(
    root: Path,
    manifest: Manifest,
    *,
    verify: bool,
    isolated: bool,
    dir_fd: int | None = None,
) -> dict[str, ModuleSource]:
    """The text to parse for ``"module"`` and (when the bundle has one) ``"vjp"``.

    A module with an artifact whose target the installed StableHLO reads: when the writer's
    StableHLO is newer than the installed one, the artifact is deserialized now (and the text
    used, with a RuntimeWarning, if that fails); otherwise the text is returned with the
    artifact's verified bytes as its fallback (`parse_source` reads them if the text does not
    parse). Without a readable artifact, the text. With `verify`, every module file is checked
    against its sha256, the form not used included.

    Args:
        root: the bundle directory (file names already checked by the caller).
        manifest: the validated manifest.
        verify: check sha256 digests.
        isolated: deserialize artifacts in a child process (False only for trusted bundles).
        dir_fd: a descriptor of `root`: files are opened relative to it (no symlinks).

    Returns:
        ``{"module": ModuleSource, "vjp": ModuleSource}`` (no ``"vjp"`` without one).

    Raises:
        ChecksumError: a file does not match its sha256.
        BundleError, MLIRParseError: a file cannot be read, is too large or is not UTF-8 text.
    """
    refs = {"module": manifest.module, "vjp": manifest.vjp}
    out: dict[str, ModuleSource] = {}
    pending: list[_Pending] = []
    for key, ref in refs.items():
        if ref is None:
            continue
        art = ref.artifact
        reason = _artifact_not_used(manifest, art)
        if art is None or reason:
            if art is not None and verify:  # not used, but part of the bundle: check it
                _check_sha(root / art.file, _hash_file(root / art.file, key, dir_fd), art.sha256)
            text_path = root / ref.file
            out[key] = ModuleSource(
                _read_text(text_path, key, ref, verify, dir_fd), str(text_path), TEXT, reason
            )
            continue
        path = root / art.file
        data = _read(path, f"{key} artifact", artifact.MAX_ARTIFACT_BYTES, dir_fd)
        if verify:
            _check_sha(path, hashlib.sha256(data).hexdigest(), art.sha256)
        if newer := artifact.newer_writer_reason(art.stablehlo_version):
            _check_unread_text(root, key, ref, art, newer, verify, dir_fd)
            described = f"VHLO target {art.target}, written at StableHLO {art.stablehlo_version}"
            note = f"portable artifact {art.file} ({described}): {newer}"
            pending.append(_Pending(key, data, path, note))
            continue
        fallback = ArtifactFallback(
            data,
            path,
            f"VHLO target {art.target}, written at StableHLO {art.stablehlo_version}",
            isolated,
        )
        out[key] = _text_with_fallback(root, key, ref, art, fallback, verify, dir_fd)
    out.update(_deserialize_pending(root, refs, pending, verify, isolated, dir_fd))
    return out


@dataclass(frozen=True)
class _Pending:
    """An artifact to deserialize (all of a bundle's in one child), read before its text."""

    key: str
    data: bytes
    path: Path
    #: The ModuleSource note when it deserializes.
    note: str


def _artifact_not_used(manifest: Manifest, art: ArtifactRef | None) -> str:
    """Why a module's portable artifact is not read (none, or this jaxlib cannot read its
    target), or "" when it can be."""
    if art is None:
        return (
            "format 1 bundles have no portable artifact"
            if manifest.format_version < 2
            else "the bundle has no portable artifact of it"
        )
    why = artifact.unreadable_reason(art.target)
    return f"the artifact {art.file} is not used: {why}" if why else ""


def _check_unread_text(
    root: Path,
    key: str,
    ref: FileRef,
    art: ArtifactRef,
    newer: str,
    verify: bool,
    dir_fd: int | None,
) -> None:
    """The text of a module whose artifact is read instead (`newer` says why): checked with
    `verify`, else a RuntimeWarning when it changed since export (the change has no effect)."""
    text_path = root / ref.file
    text_sha = _hash_file(text_path, key, dir_fd)
    if verify:  # the text is not parsed, but it is part of the bundle: check it
        _check_sha(text_path, text_sha, ref.sha256)
    elif ref.sha256 is not None and text_sha != ref.sha256:
        warnings.warn(
            f"{text_path}: changed since export, but this bundle's portable artifact "
            f"{art.file} is read instead ({newer}); the change has no effect",
            RuntimeWarning,
            stacklevel=4,
        )


def _text_with_fallback(
    root: Path,
    key: str,
    ref: FileRef,
    art: ArtifactRef,
    fallback: ArtifactFallback,
    verify: bool,
    dir_fd: int | None,
) -> ModuleSource:
    """The text of a module this jaxlib reads, with its artifact as the fallback for a text
    that does not parse; without it when the text changed since export (not verified)."""
    text_path = root / ref.file
    text_data = _read(text_path, key, MAX_MODULE_BYTES, dir_fd)
    text_sha = hashlib.sha256(text_data).hexdigest()
    if verify:
        _check_sha(text_path, text_sha, ref.sha256)
    if ref.sha256 is not None and text_sha != ref.sha256:
        # Unverified and changed since export: the artifact holds the module as it was
        # before the change, so reading it instead would quietly undo the edit.
        return ModuleSource(
            _text(text_path, text_data),
            str(text_path),
            TEXT,
            "the text, changed since export (not verified: --no-verify); the portable "
            f"artifact {art.file} is not read in its place",
            None,
            f"The text differs from the one exported (its sha256 is not the manifest's), "
            f"so the portable artifact {art.file}, the module as exported, is not read in "
            "its place; fix the text, or restore it to use the artifact",
        )
    return ModuleSource(
        _text(text_path, text_data),
        str(text_path),
        TEXT,
        f"the text, written at StableHLO {art.stablehlo_version}, which this jaxlib "
        f"reads; the portable artifact {art.file} is read only if the text does not parse",
        fallback,
    )


def _deserialize_pending(
    root: Path,
    refs: dict[str, FileRef | None],
    pending: list[_Pending],
    verify: bool,
    isolated: bool,
    dir_fd: int | None,
) -> dict[str, ModuleSource]:
    """The pending artifacts' texts, deserialized together; the text module, with a
    RuntimeWarning, for each that cannot be read."""
    texts = artifact.deserialize(
        [p.data for p in pending], [str(p.path) for p in pending], isolated=isolated
    )
    out: dict[str, ModuleSource] = {}
    for p, text in zip(pending, texts):
        if isinstance(text, str):
            out[p.key] = ModuleSource(text, str(p.path), ARTIFACT, p.note)
            continue
        ref = refs[p.key]
        if ref is None:  # pending holds only keys with a reference
            raise BundleError(f"{p.path}: internal error: no manifest entry for the {p.key} module")
        warnings.warn(
            f"{text}; reading the text module {ref.file} instead", RuntimeWarning, stacklevel=4
        )
        text_path = root / ref.file
        out[p.key] = ModuleSource(
            _read_text(text_path, p.key, ref, verify, dir_fd),
            str(text_path),
            TEXT,
            f"the artifact could not be read ({text})",
        )
    return out


def _hash_file(path: Path, key: str, dir_fd: int | None) -> str:
    """sha256 of a file that is checked but not parsed, opened like every other bundle file."""
    fd, st = safefile.open_regular(path, f"the {key} file", dir_fd=dir_fd)
    try:
        return fastread.sha256_fd(fd, st.st_size)
    except OSError as e:
        raise BundleError(
            f"{path}: cannot read the {key} file ({e.strerror}); check its permissions"
        ) from e
    finally:
        os.close(fd)
