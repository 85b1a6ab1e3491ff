"""Opening a bundle directory: safe paths, checksums, manifest vs MLIR vs HDF5 checks.

Each file is opened once, without following symlinks, relative to the bundle directory
(``safefile``); what is hashed is what is parsed: the module's bytes are read once, hashed,
then parsed; the weights are hashed while they are read (``weights``). Sizes are compared with
what the manifest declares before anything is hashed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import (
    BundleError,
    ChecksumError,
    SignatureMismatchError,
    UnsafeBundleError,
)
from ..stablehlo import StableHLOModule, TensorSpec
from .files import nearby, safefile
from .manifest import MANIFEST_NAME, ArgumentEntry, FileRef, Manifest, load_manifest, tensor_bytes
from .sources import ModuleSource, parse_source, read_module_sources
from .weights import (
    ReadRequest,
    WeightsReader,
    fastread,
    file_checksum_error,
    h5parse,
    open_weights,
)
from .weights.memory import physical_memory

#: A weights file may be at most this many times the bytes of the datasets its manifest
#: declares, plus FILE_SLACK: HDF5 metadata is small, so a much larger file is padded or sparse
#: (a sparse 200 GiB file would otherwise be hashed for minutes before anything is compared).
FILE_FACTOR = 2
FILE_SLACK = 64 << 20


@dataclass(frozen=True)
class Bundle:
    """A validated bundle: its manifest and parsed forward (and VJP) modules.

    `checksums_verified`: the module files were verified when opened, and the weights are
    verified whenever they are read through `read_weights`/`read_examples` (format 1: the
    whole file's sha256; formats 2 and 3: each dataset's digest).
    """

    root: Path
    manifest: Manifest
    module: StableHLOModule
    checksums_verified: bool
    #: Which form of the forward module was parsed: "artifact" or "text" (spec §2.1).
    module_source: str = "text"
    #: Why that form, for `inspect` and `model.metadata`.
    module_source_note: str = ""
    _vjp: ModuleSource | None = field(default=None, repr=False)
    #: The VJP module's source once parsed (the artifact, if its text did not parse).
    _vjp_read: dict[str, ModuleSource] = field(default_factory=dict, repr=False, compare=False)

    def file(self, ref: FileRef) -> Path:
        """Absolute path of a file the manifest names."""
        return self.root / ref.file

    @property
    def vjp_source(self) -> str | None:
        """Which form of the VJP module is used ("artifact" or "text"); None without one.

        Before `vjp_module` has parsed it, the form that will be tried first.
        """
        src = self._vjp_read.get("vjp", self._vjp)
        return None if src is None else src.used

    def vjp_module(self, *, trust: bool = False) -> StableHLOModule | None:
        """The parsed VJP module (spec §5), or None when the bundle has none.

        Its bytes were read and verified by `open_bundle`; it is parsed only when asked for
        (only the xla backend needs it).

        Raises:
            MLIRParseError, UnsupportedModuleError: it does not parse or breaks the policy.
        """
        if self._vjp is None:
            return None
        module, used = parse_source(self._vjp, trust=trust)
        self._vjp_read["vjp"] = used
        return module

    @contextmanager
    def open_weights(self, requests: Sequence[ReadRequest] = ()) -> Iterator[WeightsReader]:
        """The weights file opened for reading `requests` with this bundle's checksum policy.

        The file is opened without following symlinks inside the bundle directory, and its
        size is checked against the manifest on the very descriptor that is then read.
        """
        ref = self.manifest.weights
        path = self.file(ref)
        with safefile.directory(self.root) as dfd:
            fd, st = safefile.open_regular(path, "the weights file", dir_fd=dfd)
        try:
            _check_weight_sizes(self.manifest, path, st.st_size)
            file_sha256 = self._file_digest(requests)
            with open_weights(path, fd=fd, file_sha256=file_sha256) as f:
                yield f
        finally:
            os.close(fd)

    def _file_digest(self, requests: Sequence[ReadRequest]) -> str | None:
        """The whole-file sha256 to verify: the manifest's when it records one (always in
        format 1; spec §8: verified when present in later formats), else None when the
        per-dataset digests cover every dataset read."""
        if not self.checksums_verified:
            return None
        expected: str | None = self.manifest.weights.sha256
        if expected is not None or all(r.digest is not None for r in requests):
            return expected
        missing = next(r for r in requests if r.digest is None)
        raise ChecksumError(
            f"{self.file(self.manifest.weights)}: {missing.where} ({missing.dataset}) has "
            f"no digest in {MANIFEST_NAME} and the weights file has no sha256 either, so it "
            "cannot be verified; re-export the bundle, or pass verify_checksums=False"
        )

    def _request(self, dataset: str, spec: Any, where: str, digest: str | None) -> ReadRequest:
        return ReadRequest(
            dataset,
            tuple(spec.shape),
            spec.dtype,
            where,
            digest if self.checksums_verified else None,
            self.manifest.dataset_digest,
        )

    def weight_requests(self) -> list[ReadRequest]:
        """A request for every parameter and state dataset, in @main order."""
        return [
            self._request(a.dataset, a, a.label, a.digest)
            for a in self.manifest.arguments
            if a.role != "input" and a.dataset is not None
        ]

    def read_weights(self) -> Iterator[tuple[ArgumentEntry, np.ndarray]]:
        """(argument, decoded array) for every parameter and state, in no particular order.

        Every check runs before any data is read and every array is verified before it is
        yielded (see `open_weights`).
        """
        by_dataset = {
            a.dataset: a for a in self.manifest.arguments if a.role != "input" and a.dataset
        }
        requests = self.weight_requests()
        with self.open_weights(requests) as f:
            for r, arr in f.read(requests):
                yield by_dataset[r.dataset], arr

    def read_examples(self) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]] | None:
        """(inputs by argument index, Julia's outputs by result index), or None without examples."""
        ex = self.manifest.examples
        if ex is None:
            return None
        args, res = self.manifest.arguments, self.manifest.results
        ins = [
            (i, self._request(ds, args[i], f"example input {args[i].label}", sha))
            for i, ds, sha in _example_entries(ex.inputs)
        ]
        outs = [
            (k, self._request(ds, res[k], f"example output {res[k].label}", sha))
            for k, ds, sha in _example_entries(ex.outputs)
        ]
        requests = [r for _, r in ins + outs]
        got: dict[ReadRequest, np.ndarray] = {}
        with self.open_weights(requests) as f:
            for r, arr in f.read(requests):
                got[r] = arr
        return {i: got[r] for i, r in ins}, {k: got[r] for k, r in outs}

    def verify_weights(self) -> None:
        """Check the weights' checksums now, without keeping what was read.

        Format 1: the whole file's sha256 through one descriptor, after the size checks (no
        array is allocated). Formats 2 and 3: every dataset read and hashed, streamed (at most
        a window of datasets in memory at once), and the whole file's sha256 too when the
        manifest records one.
        """
        if not self.checksums_verified:
            return
        requests = self.weight_requests()
        expected = self._file_digest(requests)
        if expected is None or any(r.digest is not None for r in requests):
            with self.open_weights(requests) as f:
                for _ in f.read(requests):
                    pass
            return
        path = self.file(self.manifest.weights)
        with safefile.directory(self.root) as dfd:
            fd, st = safefile.open_regular(path, "the weights file", dir_fd=dfd)
        try:
            _check_weight_sizes(self.manifest, path, st.st_size)
            got = fastread.sha256_fd(fd, st.st_size)
        except OSError as e:
            raise BundleError(
                f"{path}: cannot read the weights file ({e.strerror or e}); check its permissions"
            ) from e
        except h5parse.Problem as e:  # the file shrank while it was hashed
            raise BundleError(f"{path}: {e}") from e
        finally:
            os.close(fd)
        if got != expected:
            raise file_checksum_error(path, got, expected)


def _example_entries(entries: Any) -> list[tuple[int, str, str | None]]:
    """(index, dataset, digest or None) of `Examples.inputs`/`.outputs` entries."""
    return [(int(e.index), str(e.dataset), e.digest) for e in entries]


_HF_HINT = safefile.HF_HINT


def _resolve_root(path: str | os.PathLike[str]) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise BundleError(
            f"expected the path of a bundle directory (str or os.PathLike), got "
            f"{type(path).__name__} {path!r:.80}"
        )
    root = Path(path)
    try:
        st = root.stat()
    except FileNotFoundError:
        raise BundleError(
            f"{root}: no such bundle directory; check the path (relative paths start at "
            f"{Path.cwd()}){nearby.did_you_mean(root)}"
        ) from None
    except OSError as e:
        raise BundleError(f"{root}: cannot access it ({e.strerror}); check its permissions") from e
    if stat.S_ISREG(st.st_mode) and root.name == MANIFEST_NAME:
        root = root.parent
    elif not stat.S_ISDIR(st.st_mode):
        suffix = root.suffix.lower()
        hint = {
            ".mlir": "; for a bare StableHLO module use juliabridge.load_mlir",
            ".h5": "; this looks like a weights file: pass the bundle directory that holds it, "
            "or read fine-tuned weights with juliabridge.load_params",
            ".hdf5": "; this looks like a weights file: pass the bundle directory that holds it",
            ".json": f"; pass the directory that holds {MANIFEST_NAME}",
            ".zip": "; unpack the archive and pass the bundle directory inside it",
            ".tar": "; unpack the archive and pass the bundle directory inside it",
            ".gz": "; unpack the archive and pass the bundle directory inside it",
        }.get(suffix, f"; pass the directory that holds {MANIFEST_NAME}")
        raise BundleError(
            f"{root}: expected a bundle directory (holding {MANIFEST_NAME}, the module and the "
            f"weights), found a file{hint}"
        )
    manifest = root / MANIFEST_NAME
    try:
        mst = os.lstat(manifest)
    except FileNotFoundError:
        hint = nearby.found_inside(root)
        raise BundleError(
            f"{root}: no {MANIFEST_NAME} in this directory, so it is not a juliabridge bundle "
            f"(a bundle holds {MANIFEST_NAME}, model.mlir and weights.h5){hint}"
        ) from None
    except OSError as e:
        raise BundleError(
            f"{manifest}: cannot access it ({e.strerror}); check the permissions of {root}"
        ) from e
    if stat.S_ISLNK(mst.st_mode):
        raise UnsafeBundleError(
            f"{manifest}: is a symlink; a bundle holds regular files only (symlinks could point "
            f"anywhere). If this is a model-hub cache, {_HF_HINT}"
        )
    if not stat.S_ISREG(mst.st_mode):
        raise BundleError(f"{manifest}: expected a regular file, found {_kind(mst.st_mode)}")
    return root.resolve()


_kind = safefile.kind_of


def _check_all_present(root: Path, manifest: Manifest) -> None:
    """One error naming every file the manifest names that is missing (a half-copied bundle
    would otherwise be reported a file at a time)."""
    missing = [
        (key, ref.file) for key, ref in manifest.files() if not os.path.lexists(root / ref.file)
    ]
    if len(missing) > 1:
        names = ", ".join(f"{file} ({key}.file)" for key, file in missing)
        raise BundleError(
            f"{root}: {len(missing)} files named in {MANIFEST_NAME} are missing: {names}; the "
            "bundle is incomplete: copy or download all of its files"
        )


def _inside(root: Path, ref: FileRef, key: str) -> Path:
    p = root / ref.file
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        raise BundleError(
            f"{p}: the {key} file named in {MANIFEST_NAME} ({key}.file = {ref.file!r}) is "
            "missing; the bundle is incomplete: copy or download all of its files"
        ) from None
    except (OSError, ValueError) as e:
        raise BundleError(f"{p}: cannot access the {key} file ({e})") from e
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeBundleError(
            f"{p}: the manifest's {key} file is a symlink; a bundle holds regular files only "
            f"(symlinks could point anywhere). If this is a model-hub cache, {_HF_HINT}"
        )
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(
            f"{p}: the {key} file must be a regular file, found {_kind(st.st_mode)}; the bundle "
            "is damaged, export or download it again"
        )
    if p.resolve().parent != root:
        raise UnsafeBundleError(f"{p}: the {key} file resolves outside the bundle directory")
    return p


def _declared(manifest: Manifest) -> tuple[int, int]:
    """(bytes of parameters and states, bytes of every dataset the manifest names)."""
    weights = sum(
        tensor_bytes(a.shape, a.dtype)
        for a in manifest.arguments
        if a.role != "input" and a.dataset is not None
    )
    examples = 0
    if manifest.examples is not None:
        args, res = manifest.arguments, manifest.results
        examples += sum(
            tensor_bytes(args[i].shape, args[i].dtype)
            for i, _, _ in _example_entries(manifest.examples.inputs)
        )
        examples += sum(
            tensor_bytes(res[k].shape, res[k].dtype)
            for k, _, _ in _example_entries(manifest.examples.outputs)
        )
    return weights, weights + examples


def _check_weight_sizes(manifest: Manifest, weights: Path, size: int) -> None:
    """Refuse, before the file is hashed or parsed, a weights file whose size does not fit
    what the manifest declares, or weights memory cannot hold."""
    declared, named = _declared(manifest)
    if declared > h5parse.expansion_budget(size):
        raise BundleError(
            f"{weights}: the manifest declares {declared} bytes of parameters and states but the "
            f"file holds only {size} bytes (juliabridge accepts at most "
            f"{h5parse.EXPANSION_FACTOR} times the file's size plus "
            f"{h5parse.EXPANSION_SLACK >> 20} MiB, even compressed); the manifest's "
            "shapes are wrong or the file is truncated. Export or download the bundle again"
        )
    limit = FILE_FACTOR * named + FILE_SLACK
    if size > limit:
        raise BundleError(
            f"{weights}: the file is {size} bytes but the datasets {MANIFEST_NAME} names take "
            f"{named} bytes; juliabridge accepts at most {FILE_FACTOR} times that plus "
            f"{FILE_SLACK >> 20} MiB (HDF5's own metadata is small), so the file is padded, "
            "sparse or not this bundle's. Export or download the bundle again"
        )
    memory_bytes = physical_memory()
    if memory_bytes is not None and declared > memory_bytes:
        raise BundleError(
            f"{weights}: the parameters and states take {declared} bytes but this machine has "
            f"{memory_bytes} bytes of memory; load the bundle on a larger machine"
        )


def _check_signature(
    name: str, entries: list[TensorSpec], module: list[TensorSpec], labels: list[str], origin: str
) -> None:
    if len(entries) != len(module):
        raise SignatureMismatchError(
            f"{origin}: @main has {len(module)} {name}s but the manifest lists {len(entries)}; "
            "the manifest does not belong to this module. Export or download the bundle again"
        )
    for i, (want, got, label) in enumerate(zip(entries, module, labels)):
        if want != got:
            raise SignatureMismatchError(
                f"{origin}: @main {name} {i} ({label}) is {got} but the manifest says {want}; "
                "the manifest does not belong to this module. Export or download the bundle "
                "again"
            )


def _check_echoes(manifest: Manifest, module: StableHLOModule, origin: str) -> None:
    """Refuse an `echo_of` claim the module's structure does not make (spec §3.4).

    A reader that believed a false claim would return the argument where the module computes a
    new value (a train-mode BatchNorm's running mean labelled an echo silently keeps the old
    one), while `verify`, which compares the module's results, would still pass. The claim
    holds only when @main returns the block argument itself, through Reactant's boundary
    transposes at most (`StableHLOModule.returned_arguments`); equal values do not count.
    """
    for r in manifest.results:
        if r.echo_of is None:
            continue
        returned = module.returned_arguments.get(r.index)
        if returned == r.echo_of:
            continue
        found = (
            "computes it"
            if returned is None
            else f"returns argument {returned} ({manifest.arguments[returned].label}) there"
        )
        raise SignatureMismatchError(
            f"{origin}: the manifest says @main result {r.index} is argument {r.echo_of} "
            f"({manifest.arguments[r.echo_of].label}) returned unchanged (echo_of), but the "
            f"module {found}; a reader trusting the claim would return the old value. The "
            "manifest does not describe this module: export the bundle again"
        )


def check_module(manifest: Manifest, module: StableHLOModule, origin: str) -> None:
    """@main's argument and result types equal the manifest's, and every `echo_of` is an
    argument the module returns unchanged (spec §6 step 5).

    Raises:
        SignatureMismatchError: naming the argument or result and both types.
    """
    _check_signature(
        "argument",
        [TensorSpec(a.shape, a.dtype) for a in manifest.arguments],
        list(module.arguments),
        [a.label for a in manifest.arguments],
        origin,
    )
    _check_signature(
        "result",
        [TensorSpec(r.shape, r.dtype) for r in manifest.results],
        list(module.results),
        [r.label for r in manifest.results],
        origin,
    )
    _check_echoes(manifest, module, origin)


def open_bundle(
    path: str | os.PathLike[str],
    *,
    verify_checksums: bool = True,
    trust: bool = False,
    defer_weights: bool = False,
) -> Bundle:
    """Validate and open a bundle directory (docs/bundle-format.md §6).

    The module (and VJP module) are read once, verified and parsed. The weights are verified
    now (a full read) unless `defer_weights`, in which case they are verified when read
    through `Bundle.read_weights` (what `import_lux` does: hashed while loaded).
    """
    root = _resolve_root(path)
    manifest = load_manifest(root / MANIFEST_NAME)
    _check_all_present(root, manifest)
    files = {key: _inside(root, ref, key) for key, ref in manifest.files()}
    _check_weight_sizes(manifest, files["weights"], os.lstat(files["weights"]).st_size)
    with safefile.directory(root) as dfd:
        sources = read_module_sources(
            root, manifest, verify=verify_checksums, isolated=not trust, dir_fd=dfd
        )
    module, src = parse_source(sources["module"], trust=trust)
    check_module(manifest, module, src.origin)
    bundle = Bundle(
        root,
        manifest,
        module,
        checksums_verified=verify_checksums,
        module_source=src.used,
        module_source_note=src.note,
        _vjp=sources.get("vjp"),
    )
    if verify_checksums and not defer_weights:
        bundle.verify_weights()
    return bundle
