"""StableHLO portable artifacts (versioned VHLO bytecode, docs/bundle-format.md §2.1).

MLIR text has no compatibility promise across StableHLO versions; a portable artifact does:
a reader whose StableHLO is at version C reads artifacts serialized to any target between its
minimum version and C. Writers serialize to `ARTIFACT_TARGET`, the version of the oldest
jaxlib juliabridge supports, so every supported jaxlib reads what any of them writes.

Reading untrusted bytecode happens in a child process (see _artifact_child.py): deserializing
and printing recurse per nesting level in C++, and a crafted artifact would otherwise be able
to crash the caller.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from jaxlib.mlir.dialects import stablehlo as _stablehlo

from ..errors import MLIRParseError, UnsupportedModuleError
from ..support import childproc
from ..support.jaxinternals import make_context

#: The VHLO version writers serialize to: StableHLO's version in jaxlib 0.10.2 (its
#: get_current_version()), the oldest jaxlib juliabridge supports. jaxlib 0.12 writes it too.
ARTIFACT_TARGET = "1.17.0"
#: Largest artifact read, the same limit as for module text.
MAX_ARTIFACT_BYTES = 1 << 30
#: Seconds the child process may take for one bundle's artifacts.
CHILD_TIMEOUT = 120.0
_CHILD = Path(__file__).with_name("_artifact_child.py")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def installed_versions() -> tuple[str, str]:
    """(minimum, current) StableHLO versions the installed jaxlib reads."""
    return str(_stablehlo.get_minimum_version()), str(_stablehlo.get_current_version())


def unreadable_reason(target: str) -> str | None:
    """Why the installed jaxlib cannot read an artifact serialized to `target`, or None."""
    lo, hi = installed_versions()
    t = _version_tuple(target)
    if t > _version_tuple(hi):
        return (
            f"its target {target} is newer than this jaxlib's StableHLO {hi} reads "
            f"(it reads {lo} to {hi})"
        )
    if t < _version_tuple(lo):
        return f"its target {target} is older than this jaxlib's StableHLO reads ({lo} to {hi})"
    return None


def newer_writer_reason(writer_version: str) -> str | None:
    """Why a bundle's text should not be read first: its writer's StableHLO is newer, or None.

    Text printed by a newer StableHLO may use syntax this parser does not know: usually a
    parse error, but an attribute it does not know can also be kept as an inert discardable
    one, changing the meaning without a word. The artifact is read at this jaxlib's version.
    """
    _, hi = installed_versions()
    if _version_tuple(writer_version) > _version_tuple(hi):
        return (
            f"it was written at StableHLO {writer_version}, newer than this jaxlib's {hi}, "
            "whose parser may not know all of its text"
        )
    return None


@dataclass(frozen=True)
class Serialized:
    """A portable artifact and the versions the manifest records for it."""

    data: bytes
    stablehlo_version: str
    target: str


def serialize(module_text: str, *, target: str = ARTIFACT_TARGET) -> Serialized:
    """Serialize a StableHLO module (text, as juliabridge sanitized it) to a portable artifact.

    The target is `target` or the installed StableHLO's own version if that is older (an
    older jaxlib silently writes its own version when asked for a newer one, so the target is
    clamped here and the manifest records what was really written). CHLO ops are legalized to
    StableHLO on the way, as jax.export does.

    Args:
        module_text: MLIR text of a module that parses in JAX's context.
        target: the VHLO version to serialize to, ``MAJOR.MINOR.PATCH``.

    Returns:
        The bytes, the installed StableHLO version and the target actually used.

    Raises:
        UnsupportedModuleError: the module cannot be expressed at that target (it uses a
            feature newer than the target, or ops outside StableHLO/CHLO).
    """
    from jax.extend import mlir as jax_mlir

    current = str(_stablehlo.get_current_version())
    used = str(_stablehlo.get_smaller_version(target, current))
    try:
        data = bytes(jax_mlir.serialize_portable_artifact(module_text, used))
    except Exception as e:  # jaxlib raises its own runtime error type
        raise UnsupportedModuleError(
            f"cannot serialize the module to a StableHLO portable artifact at target {used} "
            f"({type(e).__name__}: {str(e)[:500]}); it uses ops or features that version "
            "lacks. Write the bundle without an artifact (the text module is always there)"
        ) from e
    return Serialized(data, current, used)


def deserialize(
    artifacts: list[bytes], origins: list[str], *, isolated: bool = True
) -> list[str | MLIRParseError]:
    """MLIR text of each portable artifact, or an MLIRParseError in its place.

    Args:
        artifacts: the artifacts' bytes (already checked against their sha256).
        origins: a name per artifact for messages (its file).
        isolated: read in a child process (the default; a crafted artifact cannot crash the
            caller). False reads in this process with jax.extend.mlir, for trusted bundles.

    Returns:
        One entry per artifact: its MLIR text, or the MLIRParseError saying why it failed.
        Failures are returned, not raised, so the caller can fall back to the text module.
    """
    if not artifacts:
        return []
    if not isolated:
        return [_in_process(a, o) for a, o in zip(artifacts, origins)]
    return _in_child(artifacts, origins)


def _in_process(artifact: bytes, origin: str) -> str | MLIRParseError:
    from jax.extend import mlir as jax_mlir

    try:
        module = jax_mlir.deserialize_portable_artifact(artifact, context=make_context())
        return str(module.operation.get_asm(enable_debug_info=False))
    except Exception as e:
        return MLIRParseError(f"{origin}: not a readable StableHLO portable artifact ({e})")


def child_memory(artifact_bytes: int) -> int:
    """The artifact reader's memory cap: 2 GiB + 64 bytes per artifact byte, at most the
    machine's physical memory (a module in MLIR's context takes tens of times its bytecode;
    the text sent back is at most 1 GiB)."""
    return min(childproc.physical_memory(), (2 << 30) + 64 * artifact_bytes)


def _in_child(artifacts: list[bytes], origins: list[str]) -> list[str | MLIRParseError]:
    framed = b"".join(len(a).to_bytes(8, "little") + a for a in artifacts)
    try:
        done = childproc.run(
            str(_CHILD),
            input=framed,
            timeout=CHILD_TIMEOUT,
            memory=child_memory(len(framed)),
            extra_env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        why = f"the artifact reader process took more than {CHILD_TIMEOUT:.0f} s and was stopped"
        return [MLIRParseError(f"{o}: {why}") for o in origins]
    except OSError as e:
        why = f"the artifact reader process could not start ({e})"
        return [MLIRParseError(f"{o}: {why}") for o in origins]
    out: list[str | MLIRParseError] = []
    data, pos = done.stdout, 0
    for origin in origins:
        if pos + 9 > len(data):
            reason = (
                f"killed by signal {-done.returncode}"
                if done.returncode < 0
                else f"exit status {done.returncode}"
            )
            tail = done.stderr.decode("utf-8", "replace").strip()[-300:]
            out.append(
                MLIRParseError(
                    f"{origin}: the artifact reader process stopped before answering ({reason}"
                    f"{'; ' + tail if tail else ''}); the artifact is corrupt or crafted"
                )
            )
            continue
        status, n = data[pos : pos + 1], int.from_bytes(data[pos + 1 : pos + 9], "little")
        payload = data[pos + 9 : pos + 9 + n]
        pos += 9 + n
        text = payload.decode("utf-8", "replace")
        if status == b"T" and len(payload) == n:
            out.append(text)
        else:
            out.append(
                MLIRParseError(
                    f"{origin}: not a readable StableHLO portable artifact ({text[:500]})"
                )
            )
    return out
