"""
    JuliaBridge

Export a Lux.jl model as a Julia export directory (docs/julia-export.md: the StableHLO text of
a flat function, HDF5 weights and a JSON description) that the Python package `juliabridge`
imports as a JAX function, and read weights saved from Python back into Lux's NamedTuples.

    export_lux(dir, model, ps, st, inputs...; name, mode=:test, overwrite=false,
               reference=true, metadata=Dict(), samples_independent=nothing, progress=nothing)
    load_params(path)                          # -> (ps, st)
    load_params(path, ps_template, st_template)
"""
module JuliaBridge

using ConstructionBase: ConstructionBase
using Dates: Dates
using HDF5: HDF5
using JSON: JSON
using Lux: Lux
using Random: Random
using Reactant: Reactant
using Serialization: Serialization

export export_lux, load_params

# The Reactant names used beyond its documented API (docs/src/api/api.md), each with its source.
const TracedRArray = Reactant.TracedRArray      # R src/Types.jl:67, what a traced array is
const TracedRNumber = Reactant.TracedRNumber    # R src/Types.jl:41
const ReactantRNG = Reactant.ReactantRNG        # R src/Types.jl:652, a seed array and a name
const BFloat16 = Reactant.BFloat16              # BFloat16s.jl's type, R src/Reactant.jl:22

const FORMAT = "juliabridge.julia-export"
const FORMAT_VERSION = 1
const DESCRIPTION_FILE = "juliabridge-export.json"
const MODULE_FILE = "model.mlir"
const WEIGHTS_FILE = "weights.h5"

"""The model or its arguments cannot be exported; the message says why and what to do."""
struct ExportError <: Exception
    msg::String
end
Base.showerror(io::IO, e::ExportError) = print(io, "ExportError: ", e.msg)

"""A weights file or export directory is missing, malformed or does not match a template."""
struct BundleReadError <: Exception
    msg::String
end
Base.showerror(io::IO, e::BundleReadError) = print(io, "BundleReadError: ", e.msg)

include("trees.jl")
include("hdf5.jl")
include("export.jl")
include("load.jl")
include("driver.jl")

end # module JuliaBridge
