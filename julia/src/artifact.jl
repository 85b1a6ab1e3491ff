# The StableHLO portable artifact (spec: `module.artifact`, `vjp.artifact`): the module as
# versioned VHLO bytecode, which a reader whose StableHLO is at least `target` can load even
# when it cannot parse the text Reactant's newer StableHLO printed.
#
# Written through the StableHLO C API that Reactant's MLIR bindings expose:
#   MLIR.API.stablehloGetCurrentVersion(callback, userData)          R src/mlir/libMLIR_h.jl:13964-13968
#   MLIR.API.stablehloSerializePortableArtifactFromModule(
#       module, targetVersion, callback, userData, allowOtherDialects) R src/mlir/libMLIR_h.jl:13996-14006
# called exactly the way Reactant's TF SavedModel exporter calls it: parse the module text in a
# fresh ReactantContext, serialize with `MLIR.IR.print_callback` collecting into an IOBuffer
# (R src/serialization/TFSavedModel.jl:47-52, 77-87; callback R src/mlir/IR/Utils.jl:5-9).

"""
The VHLO version artifacts are written for: StableHLO 1.17.0 is what jaxlib 0.10.2, the
oldest jaxlib the Python reader supports, reads (`jaxlib.mlir.dialects.stablehlo.get_current_version()`).
"""
const ARTIFACT_TARGET = v"1.17.0"

"""The StableHLO version Reactant's bundled StableHLO is at."""
function stablehlo_current_version()::VersionNumber
    io = IOBuffer()
    callback = @cfunction(MLIR.IR.print_callback, Cvoid, (MLIR.API.MlirStringRef, Any))
    MLIR.API.stablehloGetCurrentVersion(callback, Ref(io))
    return VersionNumber(String(take!(io)))
end

"""The artifact's target: `ARTIFACT_TARGET`, or the writer's own version if that is older."""
artifact_target(current::VersionNumber) = min(current, ARTIFACT_TARGET)

"""
The portable artifact of MLIR module `text` for StableHLO version `target`, or `nothing` (with
a warning) when StableHLO cannot express the module at that version: the artifact is
optional, readers then use the text.
"""
function portable_artifact(text::AbstractString, target::VersionNumber, what::AbstractString)::Union{Nothing,Vector{UInt8}}
    bytes = MLIR.IR.@dispose ctx = Reactant.ReactantContext() begin
        MLIR.IR.activate(ctx)
        try
            mod = parse(MLIR.IR.Module, text)
            try
                io = IOBuffer()
                callback = @cfunction(MLIR.IR.print_callback, Cvoid, (MLIR.API.MlirStringRef, Any))
                result = MLIR.IR.LogicalResult(
                    MLIR.API.stablehloSerializePortableArtifactFromModule(mod, string(target), callback, Ref(io), true),
                )
                MLIR.IR.isfailure(result) ? nothing : take!(io)
            finally
                MLIR.IR.dispose(mod)
            end
        finally
            MLIR.IR.deactivate(ctx)
        end
    end
    bytes === nothing && @warn "JuliaBridge: StableHLO could not write the $what module as a portable artifact for version $target; the bundle carries its text only"
    return bytes
end

"""The manifest's `artifact` object for artifact file `file` (already written in `dir`)."""
function artifact_object(dir::AbstractString, file::AbstractString, current::VersionNumber, target::VersionNumber)
    return jobject(
        "file" => file,
        "sha256" => file_sha256(joinpath(dir, file)),
        "stablehlo_version" => string(current),
        "target" => string(target),
    )
end
