"""write/: everything that writes or rewrites a bundle, on the top floor of bundle/.

Owns the Python bundle writer (writer), the in-place upgrade to format 3 (upgrade) and the
derivation and storing of a VJP module (vjp_bundle). May import the rest of bundle/,
stablehlo/, transforms/ and backends/ (vjp_bundle derives through lax or Enzyme); nothing
below lux/ imports it.
"""
