"""ONNX export (the onnx extra: jax2onnx converts, onnxruntime checks): `export_onnx` and
`save_onnx` (convert), the jaxpr rewrites behind them (rewrite, faithful) and the check of
every graph before it is returned (check)."""

from .convert import AUTO, DEFAULT_OPSET, export_onnx, save_onnx

__all__ = ["AUTO", "DEFAULT_OPSET", "export_onnx", "save_onnx"]
