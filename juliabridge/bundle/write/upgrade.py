"""`juliabridge upgrade BUNDLE`: bring a bundle to format 3 in place (docs/bundle-format.md §8).

A format-1 or format-2 bundle gains BLAKE3 per-dataset digests (spec §4.1), replacing format
2's sha256 ones and format 1's whole-file weights hash, and portable artifacts of its modules
(spec §2.1) where it has none. Nothing else changes: the weights and the text modules are not
rewritten.

The upgrade is atomic for readers: the new artifact files are written first under names the old
manifest does not use (readers ignore files the manifest does not name), then manifest.json is
replaced in one rename. A reader sees the old bundle or the new one, never a mixture; an
interrupted upgrade leaves at most an unreferenced artifact file behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import BundleError, JuliaBridgeError, SaveError
from ..bundle import open_bundle
from ..files import atomic
from ..files.checksum import sha256_file
from ..files.digest import dataset_digest
from ..manifest import FORMAT_VERSION, MANIFEST_NAME, parse_manifest
from .writer import DIGEST, artifact_entry


@dataclass(frozen=True)
class UpgradeReport:
    """What `upgrade_bundle` did."""

    path: Path
    from_version: int
    to_version: int
    #: One line per change, e.g. "sha256 of 9 datasets" or "artifact model.mlirbc".
    changes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """Whether the bundle was modified."""
        return bool(self.changes)


def _free_name(root: Path, stem: str, taken: set[str]) -> str:
    """``STEM.mlirbc``, or ``STEM-2.mlirbc``... if that name is used (never replace a file)."""
    for n in range(1, 1000):
        name = f"{stem}.mlirbc" if n == 1 else f"{stem}-{n}.mlirbc"
        if name.casefold() not in taken and not os.path.lexists(root / name):
            return name
    raise SaveError(f"{root}: no free name for a {stem} artifact; remove stray *.mlirbc files")


def _write_temp(tmp: Path, data: bytes) -> None:
    """`data` flushed to disk in the new file `tmp` (an atomic.temp_path)."""
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_new(path: Path, data: bytes) -> None:
    tmp = atomic.temp_path(path)
    try:
        _write_temp(tmp, data)
        if os.path.lexists(path):  # appeared meanwhile: never replace someone's file
            raise SaveError(f"{path}: appeared during the upgrade; run it again")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _set_digest(entry: dict[str, Any], digest: str) -> None:
    """Record this format's dataset digest in a raw manifest entry, dropping older ones."""
    entry.pop("sha256", None)
    entry[DIGEST] = digest


def _add_digests(raw: dict[str, Any], bundle: Any) -> int:
    """Write each dataset's digest (spec §4.1) into the raw manifest; return how many.

    The values are read through the bundle's verifying reader, so each new digest is taken
    over bytes that just matched the old one (or the whole-file sha256 of format 1).
    """
    m = bundle.manifest
    count = 0
    entries = {a.index: entry for entry, a in zip(raw["arguments"], m.arguments)}
    for a, value in bundle.read_weights():
        _set_digest(entries[a.index], dataset_digest(value, a.dtype, DIGEST))
        count += 1
    examples = bundle.read_examples()
    if examples is not None:
        ins, outs = examples
        for e in raw["examples"]["inputs"]:
            dtype = m.arguments[e["argument"]].dtype
            _set_digest(e, dataset_digest(ins[e["argument"]], dtype, DIGEST))
            count += 1
        for e in raw["examples"]["outputs"]:
            _set_digest(e, dataset_digest(outs[e["result"]], m.results[e["result"]].dtype, DIGEST))
            count += 1
    return count


def upgrade_bundle(path: str | os.PathLike[str], *, trust: bool = False) -> UpgradeReport:
    """Upgrade the bundle at `path` to format 3 in place (see the module docstring).

    The bundle is fully validated first, checksums included, so an upgrade never blesses a
    corrupted file with new digests.

    Args:
        path: the bundle directory.
        trust: as for import_lux (the module policy and artifact isolation).

    Returns:
        What changed (nothing when the bundle is already format 3 with artifacts).

    Raises:
        BundleError, ChecksumError, ManifestError: the bundle does not validate as it is.
        SaveError: the new files cannot be written; the bundle is then unchanged.
    """
    bundle = open_bundle(path, verify_checksums=True, trust=trust)
    root = bundle.root
    manifest_path = root / MANIFEST_NAME
    original = manifest_path.read_bytes()
    raw = json.loads(original.decode("utf-8"))
    old_version = bundle.manifest.format_version
    changes: list[str] = []
    if old_version < FORMAT_VERSION:
        n = _add_digests(raw, bundle)
        raw["format_version"] = FORMAT_VERSION
        dropped = "the whole-file weights hash is" if old_version < 2 else "sha256 digests are"
        raw["weights"].pop("sha256", None)
        changes.append(f"format_version {old_version} -> {FORMAT_VERSION}")
        changes.append(f"{DIGEST} of {n} datasets ({dropped} dropped)")
    modules = {"module": bundle.module, "vjp": bundle.vjp_module(trust=trust)}
    taken = {ref.file.casefold() for _, ref in bundle.manifest.files()}
    written: list[Path] = []
    try:
        for key, module in modules.items():
            if module is None or raw[key].get("artifact") is not None:
                continue
            name = _free_name(root, Path(raw[key]["file"]).stem, taken)
            entry, data = artifact_entry(module.text, name, f"{root}: {key}")
            if entry is None or data is None:
                continue
            _write_new(root / name, data)
            written.append(root / name)
            taken.add(name.casefold())
            entry["sha256"] = sha256_file(root / name)
            raw[key]["artifact"] = entry
            changes.append(f"artifact {name} of {raw[key]['file']} (VHLO {entry['target']})")
        if not changes:
            return UpgradeReport(root, old_version, old_version, ())
        parse_manifest(json.loads(json.dumps(raw)))  # never write what we would not read
        _replace_manifest(manifest_path, original, (json.dumps(raw, indent=2) + "\n").encode())
    except BaseException as e:
        for p in written:
            with contextlib.suppress(OSError):
                p.unlink()
        if isinstance(e, OSError) and not isinstance(e, JuliaBridgeError):
            raise SaveError(
                f"{root}: the upgrade failed ({e}); the bundle is unchanged. Check free space "
                "and permissions"
            ) from e
        raise
    open_bundle(root, trust=trust)  # the upgraded bundle must validate
    return UpgradeReport(root, old_version, FORMAT_VERSION, tuple(changes))


def _replace_manifest(path: Path, expected: bytes, data: bytes) -> None:
    """Swap in the new manifest, unless someone changed the old one since we read it."""
    atomic.clean_stale(path)
    tmp = atomic.temp_path(path)
    try:
        _write_temp(tmp, data)
        if path.read_bytes() != expected:
            raise BundleError(
                f"{path}: changed while the upgrade ran (another writer?); nothing was "
                "replaced. Run the upgrade again"
            )
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    atomic.fsync_dir(path.parent)


# --- the command ------------------------------------------------------------------------------


def cmd_upgrade(args: argparse.Namespace, console: Any) -> int:
    """Run `juliabridge upgrade` and print what changed."""
    report = upgrade_bundle(args.path)
    if not report.changed:
        console.print(
            f"{report.path}: already format {report.to_version} with portable artifacts; "
            "nothing to do"
        )
        return 0
    # A format-3 bundle that only gains artifacts keeps its format: say so, not "3 to 3".
    what = (
        f"upgraded from format {report.from_version} to {report.to_version}"
        if report.from_version != report.to_version
        else f"format {report.to_version} kept; added"
    )
    console.print(f"{report.path}: {what}:", markup=False, highlight=False)
    for line in report.changes:
        console.print(f"  {line}", markup=False, highlight=False)
    return 0


def add_upgrade_parser(sub: Any) -> None:
    """Register `upgrade` on the `juliabridge` command's subparsers."""
    p = sub.add_parser(
        "upgrade",
        help="upgrade a bundle to the current format in place (digests, portable artifacts)",
        description="Bring a bundle to format 3 in place: a format-1 or format-2 bundle gains "
        "BLAKE3 per-dataset digests, and any bundle gains portable artifacts (model.mlirbc) of "
        "modules that have none. The bundle is fully verified first; weights and module text "
        "are not rewritten, and readers see the old bundle or the new one, never a mixture.",
    )
    p.add_argument("path", help="bundle directory to upgrade (changed in place)")
    p.set_defaults(func=cmd_upgrade)
