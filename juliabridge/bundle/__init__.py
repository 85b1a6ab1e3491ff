"""Bundles (docs/bundle-format.md), in four rooms and two modules:

- files/: safe opening and reading, atomic replacement, digests and checksums (lowest);
- manifest/: manifest.json, its schema declarations and the published JSON Schema;
- weights/: the HDF5 weights, their three read routes and the writer's encoder;
- bundle.py and sources.py: opening a bundle and reading its modules (this floor);
- write/: the writer, upgrade and vjp (above the backends, which vjp_bundle derives with).

This package re-exports the reader's public names; nothing here imports write/.
"""

from .bundle import Bundle, open_bundle
from .manifest import FORMAT_VERSION, Manifest, load_manifest, parse_manifest

__all__ = ["FORMAT_VERSION", "Bundle", "Manifest", "load_manifest", "open_bundle", "parse_manifest"]
