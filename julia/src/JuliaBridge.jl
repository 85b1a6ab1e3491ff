"""
    JuliaBridge

Export a Lux.jl model to a juliabridge bundle (format 3: StableHLO text and portable artifact,
HDF5 weights with a BLAKE3 digest per dataset, JSON manifest; `docs/bundle-format.md`) that the
Python package `juliabridge` loads as a JAX function, and read parameters saved from Python back
into Lux's NamedTuples.

    export_lux(dir, model, ps, st, inputs...; name, mode=:test, overwrite=false,
               reference=true, vjp=false, metadata=Dict())
    load_params(path)                          # -> (ps, st)
    load_params(path, ps_template, st_template)
"""
module JuliaBridge

using Dates: Dates
using Enzyme: Enzyme
using HDF5: HDF5
using JSON: JSON
using Lux: Lux
using Random: Random
using Reactant: Reactant, MLIR
using SHA: SHA

export export_lux, load_params

const FORMAT = "juliabridge.bundle"
const FORMAT_VERSION = 3
# Written instead of FORMAT_VERSION only when BLAKE3 failed its self-test (digests.jl).
const FALLBACK_FORMAT_VERSION = 2
# The key of a dataset's digest in the manifest (spec §4.1): BLAKE3 in format 3, sha256 in 2.
const DIGEST_KEY = "blake3"
const FALLBACK_DIGEST_KEY = "sha256"
const WEIGHTS_FORMAT = "juliabridge.weights"
const WEIGHTS_FORMAT_VERSION = 1
const MODULE_FILE = "model.mlir"
const ARTIFACT_FILE = "model.mlirbc"
const WEIGHTS_FILE = "weights.h5"
const VJP_FILE = "vjp.mlir"
const VJP_ARTIFACT_FILE = "vjp.mlirbc"
const MANIFEST_FILE = "manifest.json"

include("errors.jl")
include("blake3.jl")
include("digests.jl")
include("dtypes.jl")
include("paths.jl")
include("conformance.jl")
include("leaves.jl")
include("mlir_text.jl")
include("echoes.jl")
include("artifact.jl")
include("tracing.jl")
include("reference.jl")
include("vjp.jl")
include("weights.jl")
include("manifest.jl")
include("atomic.jl")
include("export.jl")
include("load.jl")
include("driver.jl")

end # module JuliaBridge
