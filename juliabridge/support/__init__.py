"""Plumbing shared by the whole package, not part of its public surface: element types
(dtypes), JAX's private APIs (jaxinternals), how helper processes start (childproc), progress
bars (progress), the CLI's exit codes (exitcodes) and the jax releases CI tests (jaxversion)."""
