"""HDF5 weights: the dtype encodings of docs/bundle-format.md §4, safe reading, atomic writing.

Reading takes one of two routes, chosen per file (``route.py``):

- **in this process, without libhdf5** (the default whenever it applies): ``h5parse`` reads
  the file's metadata in pure Python (bounded, it cannot crash or hang the caller) and
  ``fastread`` reads the datasets with ``preadv`` into aligned buffers, hashing them as they
  are read, in parallel;
- **libhdf5 in a sandboxed reader process** (``_worker`` / ``_h5core``) for files the Python
  reader does not parse (chunked or compressed data, unusual structures), or when
  ``JULIABRIDGE_HDF5_FASTPATH=0``; ``JULIABRIDGE_HDF5_WORKER=0`` runs libhdf5 in this process
  instead (``inprocess.py``; no protection, for files you trust).

Either way the file is opened once, without following symlinks, and everything (metadata,
data, checksums) is read through that one descriptor.

Where each part lives: ``encoding`` (stored dtype encode/decode), ``read`` (`open_weights`,
`WeightsReader`, `ReadRequest`), ``write`` (`write_weights`), ``refusals`` (the errors a file is
refused with), ``memory`` (the refusal of datasets larger than the machine), ``route`` (which
reader goes first), ``h5parse`` and ``lookup3`` (the pure-Python metadata reader and its
checksum), ``fastread`` (the preadv reads), ``_worker`` and ``_h5core`` (the libhdf5 reader
process). weights/ may import bundle/files/, errors, dtypes and childproc; it does not read the
manifest (callers pass what to check).
"""

from __future__ import annotations

from ._worker import DEFAULT_TIMEOUT, TIMEOUT_ENV, WORKER_ENV, use_worker
from .encoding import accepted_stored, decode, encode, stored_dtype
from .memory import check_memory
from .read import ReadRequest, WeightsReader, open_weights
from .refusals import file_checksum_error
from .route import FAST_ENV, use_fast_path
from .write import write_weights

__all__ = [
    "DEFAULT_TIMEOUT",
    "FAST_ENV",
    "TIMEOUT_ENV",
    "WORKER_ENV",
    "ReadRequest",
    "WeightsReader",
    "accepted_stored",
    "check_memory",
    "decode",
    "encode",
    "file_checksum_error",
    "open_weights",
    "stored_dtype",
    "use_fast_path",
    "use_worker",
    "write_weights",
]
