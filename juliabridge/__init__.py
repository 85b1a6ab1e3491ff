"""juliabridge: Lux.jl models exported from Julia, as ordinary JAX functions."""

from ._version import __version__
from .driver.session import export_lux
from .errors import (
    BackendUnavailableError,
    BundleError,
    BundleVersionError,
    CallArgumentError,
    ChecksumError,
    ExecutionError,
    JuliaBridgeError,
    JuliaBridgeWarning,
    JuliaExportError,
    JuliaUnavailable,
    ManifestError,
    MLIRParseError,
    ModuleContractError,
    NoReferenceOutputsError,
    OnnxConversionError,
    ResourceLimitError,
    SaveError,
    SignatureMismatchError,
    TransformError,
    UnsafeBundleError,
    UnsupportedModuleError,
    UnsupportedOpError,
    UntestedJaxWarning,
    X64DisabledError,
)
from .exporting import export_jax, save_jax
from .exporting_onnx import export_onnx, save_onnx
from .function import ImportedFunction
from .importers import import_lux, load_into, load_mlir, load_params, load_reactant_export
from .lux.model import LuxModel
from .lux.params_io import save_params
from .support import jaxversion as _jaxversion
from .verification import VerifyReport, verify

__all__ = [
    "BackendUnavailableError",
    "BundleError",
    "BundleVersionError",
    "CallArgumentError",
    "ChecksumError",
    "ExecutionError",
    "ImportedFunction",
    "JuliaBridgeError",
    "JuliaBridgeWarning",
    "JuliaExportError",
    "JuliaUnavailable",
    "LuxModel",
    "MLIRParseError",
    "ManifestError",
    "ModuleContractError",
    "NoReferenceOutputsError",
    "OnnxConversionError",
    "ResourceLimitError",
    "SaveError",
    "SignatureMismatchError",
    "TransformError",
    "UnsafeBundleError",
    "UnsupportedModuleError",
    "UnsupportedOpError",
    "UntestedJaxWarning",
    "VerifyReport",
    "X64DisabledError",
    "__version__",
    "export_jax",
    "export_lux",
    "export_onnx",
    "import_lux",
    "load_into",
    "load_mlir",
    "load_params",
    "load_reactant_export",
    "save_jax",
    "save_onnx",
    "save_params",
    "verify",
]

# One line, once, where jax or jaxlib is outside the releases CI tests (support/jaxversion.py).
_jaxversion.warn_if_untested()
