"""Bundles: manifest, HDF5 weights, checksums, reading and writing (docs/bundle-format.md)."""

from .bundle import Bundle, open_bundle
from .manifest import FORMAT_VERSION, Manifest, load_manifest, parse_manifest

__all__ = ["FORMAT_VERSION", "Bundle", "Manifest", "load_manifest", "open_bundle", "parse_manifest"]
