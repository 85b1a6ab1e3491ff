"""Bob Jenkins' lookup3 ``hashlittle``, the checksum of HDF5's version-2 metadata blocks.

Written from the algorithm's public description (burtleburtle.net/bob/hash/doobs.html) for the
pure-Python HDF5 metadata reader (``h5parse.py``), which checks every checksummed block it
parses so that a damaged header is caught instead of being read differently from libhdf5.
"""

from __future__ import annotations

import struct

_M = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def lookup3(data: bytes | memoryview, initval: int = 0) -> int:
    """``hashlittle(data, len(data), initval)`` as a 32-bit unsigned integer."""
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & _M
    if length == 0:
        return c
    # Every 12-byte block but the last goes through `mix`; the last (1..12 bytes, zero-padded)
    # through `final`.
    full = (length - 1) // 12
    words = struct.unpack_from(f"<{3 * full}I", data, 0) if full else ()
    for i in range(0, 3 * full, 3):
        a = (a + words[i]) & _M
        b = (b + words[i + 1]) & _M
        c = (c + words[i + 2]) & _M
        a = (a - c) & _M
        a ^= _rot(c, 4)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 6)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 8)
        b = (b + a) & _M
        a = (a - c) & _M
        a ^= _rot(c, 16)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 19)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 4)
        b = (b + a) & _M
    tail = bytes(data[12 * full :]).ljust(12, b"\0")
    ta, tb, tc = struct.unpack("<3I", tail)
    a = (a + ta) & _M
    b = (b + tb) & _M
    c = (c + tc) & _M
    c ^= b
    c = (c - _rot(b, 14)) & _M
    a ^= c
    a = (a - _rot(c, 11)) & _M
    b ^= a
    b = (b - _rot(a, 25)) & _M
    c ^= b
    c = (c - _rot(b, 16)) & _M
    a ^= c
    a = (a - _rot(c, 4)) & _M
    b ^= a
    b = (b - _rot(a, 14)) & _M
    c ^= b
    c = (c - _rot(b, 24)) & _M
    return c
