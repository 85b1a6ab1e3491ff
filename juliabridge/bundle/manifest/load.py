"""Reading manifest.json: strict JSON within its limits, then parse.py, with advice on refusal."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ...errors import BundleVersionError, ManifestError, UnsafeBundleError
from ...stablehlo.nesting import JSON_SKIP, max_depth
from .entries import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest
from .parse import parse_manifest
from .schema import (
    MAX_DEPTH,
)


class _StrictJSONError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _StrictJSONError(
                f"key {key!r:.80} appears twice in one object; readers could disagree on which "
                "value counts"
            )
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _StrictJSONError(f"{name} is not a JSON number")


def decode_strict_json(data: bytes, origin: str | Path) -> Any:
    """Decode `data` as strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, at most
    MAX_DEPTH levels of nesting (measured before parsing).

    Raises:
        ManifestError: naming `origin` and what is wrong.
    """
    depth = max_depth(data, JSON_SKIP, opens=b"[{", closes=b"]}", drop=())
    if depth > MAX_DEPTH:
        raise ManifestError(
            f"{origin}: JSON nested {depth} levels deep, more than the {MAX_DEPTH} a manifest may "
            "use"
        )
    try:
        return json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
        )
    except UnicodeDecodeError as e:
        raise ManifestError(f"{origin}: not UTF-8 ({e})") from e
    except json.JSONDecodeError as e:
        raise ManifestError(f"{origin}: not valid JSON: {e}") from e
    except _StrictJSONError as e:
        raise ManifestError(f"{origin}: not strict JSON: {e}") from e
    except ValueError as e:  # e.g. an integer literal longer than Python converts
        raise ManifestError(f"{origin}: not valid JSON: {str(e)[:200]}") from e
    except RecursionError as e:
        raise ManifestError(f"{origin}: JSON nested too deeply") from e


def load_manifest(path: Path) -> Manifest:
    """Read, size-check and validate ``manifest.json`` at `path`.

    The JSON must be strict: no duplicate keys, no NaN/Infinity, at most MAX_DEPTH levels of
    nesting (measured before parsing), at most MAX_MANIFEST_BYTES bytes.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as e:
        raise ManifestError(
            f"{path}: cannot read the manifest ({e.strerror}); check its permissions"
        ) from e
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{path}: larger than the {MAX_MANIFEST_BYTES >> 20} MiB manifest limit; a manifest "
            "describes arrays, it does not hold them, so this is not a juliabridge manifest"
        )
    obj = decode_strict_json(data, path)
    try:
        parsed = parse_manifest(obj)
    except RecursionError as e:
        raise ManifestError(f"{path}: JSON nested too deeply") from e
    except (ManifestError, UnsafeBundleError, BundleVersionError) as e:
        # Name the actual file, and say what to do.
        text = str(e)
        if text.startswith(f"{MANIFEST_NAME}: "):
            text = f"{path}: " + text[len(MANIFEST_NAME) + 2 :]
        if not isinstance(e, BundleVersionError):
            text = f"{text.rstrip('.')}. {manifest_advice(obj)}"
        raise type(e)(text) from None
    return dataclasses.replace(parsed, source_bytes=data)


#: How to write a bundle again, by the producer.tool that wrote it (spec §3.2).
_REWRITE = {
    "JuliaBridge.jl": (
        "export the model again with JuliaBridge.export_lux and read or convert the directory "
        "it writes (juliabridge convert DIR --out NAME.bundle)"
    ),
    "juliabridge-python": (
        "write the bundle again with juliabridge.bundle.write.writer.write_bundle"
    ),
}


def manifest_advice(obj: object) -> str:
    """The advice a manifest refusal ends with: fix the entry, or rewrite the bundle with the
    tool that wrote it (read from the unvalidated `obj`, only to choose the words)."""
    producer = obj.get("producer") if isinstance(obj, dict) else None
    tool = producer.get("tool") if isinstance(producer, dict) else None
    rewrite = _REWRITE.get(tool) if isinstance(tool, str) else None
    if rewrite is None:
        rewrite = (
            "have the tool that wrote it follow the spec"
            if not isinstance(tool, str)
            else f"have the tool that wrote it ({tool[:60]!r}) follow the spec"
        )
    return (
        "The manifest does not follow docs/bundle-format.md: fix the entry named above, or "
        f"{rewrite}."
    )
