"""files/: a bundle's bytes on disk, below everything else in bundle/.

Owns opening files without following symlinks and reading them once (safefile), atomic
replacement and cleanup after a killed writer (atomic), per-dataset digests (digest) and
whole-file sha256 (checksum). May import errors and dtypes only; every other part of bundle/
imports it.
"""
