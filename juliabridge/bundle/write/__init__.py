"""write/: everything that writes or rewrites a bundle, on the top floor of bundle/.

Owns the Python bundle writer (what to write as a BundleDescription, description; write_bundle,
writer), the in-place upgrade to format 3 (upgrade) and the storing of a VJP module
(vjp_bundle; the caller passes the deriver, backends/vjp_text.py). May import the rest of
bundle/, stablehlo/ and transforms/, not backends/; nothing below lux/ imports it.
"""
