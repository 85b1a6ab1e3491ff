"""The exception hierarchy: every error juliabridge raises derives from JuliaBridgeError."""

from __future__ import annotations


class JuliaBridgeError(Exception):
    """Base class of every error juliabridge raises on bad input or a missing dependency."""


class BundleError(JuliaBridgeError):
    """A bundle is missing, unreadable, corrupt or does not follow docs/bundle-format.md."""


class ManifestError(BundleError):
    """manifest.json is missing a key, has a wrong type or an inconsistent value."""


class ChecksumError(BundleError):
    """A bundle file's sha256, or a dataset's digest, differs from the one its manifest records."""


class BundleVersionError(BundleError):
    """The bundle was written in a format version this juliabridge does not read."""


class UnsafeBundleError(BundleError):
    """The bundle points outside its directory, or its HDF5 file uses external storage."""


class NoReferenceOutputsError(BundleError):
    """`verify` was given a bundle without reference outputs (no examples section, e.g. one
    converted from a Reactant export directory): there is nothing to compare against."""


class SignatureMismatchError(JuliaBridgeError):
    """The manifest, the MLIR module and the HDF5 file disagree on an argument or result."""


class CallArgumentError(JuliaBridgeError, TypeError):
    """A call got the wrong number of arrays, or one with the wrong shape or dtype."""


class MLIRParseError(JuliaBridgeError):
    """The MLIR text could not be parsed, even after removing Reactant-only attributes."""


class UnsupportedModuleError(JuliaBridgeError):
    """The module holds ops or custom calls that stock XLA cannot run, or that policy refuses."""


class UnsupportedOpError(UnsupportedModuleError):
    """The lax backend cannot lift or evaluate one op; `op` and `where` name it and its line.

    Args:
        message: what failed and what to do (e.g. use backend="enzyme" or "xla").
        op: the op's name, e.g. ``"stablehlo.custom_call"``.
        where: its location in the module (file and line).
    """

    def __init__(self, message: str, *, op: str = "", where: str = "") -> None:
        super().__init__(message)
        self.op = op
        self.where = where

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Keyword-only arguments need an explicit reduce to survive pickling (multiprocessing).
        return (_rebuild_op_error, (self.args[0], self.op, self.where))


def _rebuild_op_error(message: str, op: str, where: str) -> UnsupportedOpError:
    return UnsupportedOpError(message, op=op, where=where)


class ModuleContractError(UnsupportedModuleError):
    """An op breaks the contract XLA or a kernel relies on (operand/result shapes, attributes,
    call graph, host I/O), so running it could crash or hang the process; refused at load."""


class ResourceLimitError(UnsupportedModuleError):
    """The module would need more than this machine gives or juliabridge allows (ops after
    inlining, dependency-chain depth, bytes of one value or of all live values, text size)."""


class ExecutionError(JuliaBridgeError, RuntimeError):
    """XLA (or Enzyme) failed to compile or run a module that passed every load-time check.

    Also a RuntimeError, like the JaxRuntimeError it replaces.
    """


class X64DisabledError(JuliaBridgeError):
    """A 64-bit element type is used while jax_enable_x64 is off (JAX would truncate it)."""


class BackendUnavailableError(JuliaBridgeError):
    """The requested backend (e.g. enzyme, which needs enzyme-ad) cannot be used here."""


class TransformError(JuliaBridgeError):
    """A JAX transformation (grad, jvp, vmap) is not available for this function and backend."""


class OnnxConversionError(JuliaBridgeError):
    """jax2onnx cannot convert the model to ONNX: it has no rule for a JAX primitive.

    Args:
        message: what failed and what to do.
        primitive: the JAX primitive jax2onnx lacks, e.g. ``"reduce_window_min"``.
        op: the module's op that emitted it (lax backend), e.g. ``"stablehlo.reduce_window"``.
        where: that op's location in the module (file and line).
    """

    def __init__(self, message: str, *, primitive: str = "", op: str = "", where: str = "") -> None:
        super().__init__(message)
        self.primitive = primitive
        self.op = op
        self.where = where

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild_onnx_error, (self.args[0], self.primitive, self.op, self.where))


def _rebuild_onnx_error(message: str, primitive: str, op: str, where: str) -> OnnxConversionError:
    return OnnxConversionError(message, primitive=primitive, op=op, where=where)


class JuliaUnavailable(JuliaBridgeError):
    """No usable Julia installation was found for driving the Julia side."""


class JuliaExportError(JuliaBridgeError):
    """Julia ran but the export failed; the message carries Julia's own error."""


class SaveError(JuliaBridgeError, OSError):
    """Writing weights or a bundle failed (target is a directory, not writable, disk full).

    Also an OSError, so code that catches OSError around file writes keeps working.
    """


class JuliaBridgeWarning(UserWarning):
    """Base class of the warning categories juliabridge defines (filter them by this one)."""


class UntestedJaxWarning(JuliaBridgeWarning):
    """The installed jax or jaxlib is outside the releases CI tests (`juliabridge doctor`)."""
