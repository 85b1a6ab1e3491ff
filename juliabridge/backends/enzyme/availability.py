"""Whether enzyme-ad is importable here: the enzyme backend, its VJP deriver, the CLI's notes
and `juliabridge doctor` call ``availability.enzyme_available``; backends/select.py and
backends/vjp_text.py bind the name when imported, so a test patches it there too."""

from __future__ import annotations


def enzyme_available() -> bool:
    """Whether enzyme_ad's JAX integration imports here (CPython 3.11 wheels only)."""
    try:
        import enzyme_ad.jax  # noqa: F401
    except Exception:  # enzyme_ad can fail with ImportError or a jaxlib ABI error
        return False
    return True
