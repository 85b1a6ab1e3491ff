"""Values from untrusted files, written into error messages so that the writing cannot fail.

An f-string of a value read from a file is itself a computation that can raise: ``str`` of an
integer of more than 4,300 decimal digits is a ValueError (CPython's int_max_str_digits), and
the repr of a long string or of a deep sequence is as long as the file. `shown` is the one way a
message quotes such a value: a bounded repr that never raises.
"""

from __future__ import annotations

#: Longest decimal integer written in full; larger ones are described by size and leading digits.
_MAX_DIGITS = 40
#: Characters of a string's repr kept before it is cut.
_MAX_CHARS = 80
#: Items of a sequence written before "... (N items)".
_MAX_ITEMS = 8


def shown(value: object, limit: int = _MAX_CHARS) -> str:
    """A repr of `value` of at most about `limit` characters, for an error message; never raises.

    Integers of more than 40 digits are written as their bit length and leading hex digits
    (hex needs no decimal conversion), strings and reprs are cut at `limit` characters with the
    full length said, and tuples and lists show their first 8 items.

    Args:
        value: any value, typically one read from a file.
        limit: characters kept of a string or of another object's repr.

    Returns:
        The bounded text, e.g. ``'0x1ffff... (an integer of 20000 bits)'``.
    """
    try:
        return _shown(value, max(8, limit), 3)
    except Exception:  # a repr that raises must not replace the real error
        return f"<a {type(value).__name__} that cannot be printed>"


def clipped(text: str, limit: int = _MAX_CHARS) -> str:
    """`text` itself (no quotes added) when it has at most `limit` characters, else its first
    `limit` followed by "... (N characters)"."""
    return _cut(text, max(8, limit), len(text), "characters")


def _shown(value: object, limit: int, depth: int) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, str):
        return _cut(repr(value[: limit + 1]), limit, len(value), "characters")
    if isinstance(value, (tuple, list)):
        if depth == 0:
            return f"<a {type(value).__name__} of {len(value)} items>"
        items = [_shown(v, limit, depth - 1) for v in value[:_MAX_ITEMS]]
        if len(value) > _MAX_ITEMS:
            items.append(f"... ({len(value)} items)")
        open_, close = ("[", "]") if isinstance(value, list) else ("(", ")")
        if isinstance(value, tuple) and len(value) == 1:
            close = ",)"
        return _cut(open_ + ", ".join(items) + close, limit * 2, None, "")
    return _cut(repr(value), limit, None, "")


def _integer(n: int) -> str:
    bits = int(n).bit_length()
    if bits <= _MAX_DIGITS * 3:  # under 10**36: few enough digits to write in full
        return str(int(n))
    sign = "-" if n < 0 else ""
    return f"{sign}{hex(abs(int(n)))[:18]}... (an integer of {bits} bits)"


def _cut(text: str, limit: int, total: int | None, unit: str) -> str:
    if len(text) <= limit and (total is None or total <= limit):
        return text
    size = f"{total} {unit}" if total is not None else f"{len(text)} characters"
    return f"{text[:limit]}... ({size})"


__all__ = ["clipped", "shown"]
