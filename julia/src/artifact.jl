# The StableHLO portable artifact (spec §2.1: `module.artifact`, `vjp.artifact`): the module as
# versioned VHLO bytecode, which a reader whose StableHLO is at least `target` can load even
# when it cannot parse the text Reactant's newer StableHLO printed.
#
# The artifact holds the module the Python writer would serialize from the same text
# (juliabridge/stablehlo/sanitize.py, then jax.extend.mlir.serialize_portable_artifact):
#  1. the module's symbol name and the Reactant-only attributes readers drop (spec §2) are
#     removed, exactly the names sanitize.py removes;
#  2. the passes jaxlib runs before serializing (xla/pjrt/mlir_to_hlo.cc,
#     SerializeUsingVersionedStablehlo) run on it, so CHLO becomes StableHLO and ops newer than
#     the target are expanded, through Reactant's own pass runner
#     `Reactant.Compiler.run_pass_pipeline!(mod, pipeline, key)` (R src/compiler/OptimizationPasses.jl:222-229,
#     called so from R src/Sharding.jl:627; the passes are registered by Enzyme-JAX's
#     `initializePasses`, EJ src/enzyme_ad/jax/RegistryUtils.cpp:361, 391-395 at f76f8763, the
#     Enzyme-JAX commit Reactant 0.2.280 builds: R deps/ReactantExtra/WORKSPACE:7
#     `ENZYMEXLA_COMMIT = "f76f876398835354fdeea8be96f030b60cacdd45"`);
#  3. it is serialized with `allowOtherDialects = false`, so only StableHLO and func ops pass.
# A module that fails any step gets no artifact (a warning): the text is always there.
#
# StableHLO C API, as Reactant's MLIR bindings expose it:
#   MLIR.API.stablehloGetCurrentVersion(callback, userData)          R src/mlir/libMLIR_h.jl:13964-13968
#   MLIR.API.stablehloSerializePortableArtifactFromModule(
#       module, targetVersion, callback, userData, allowOtherDialects) R src/mlir/libMLIR_h.jl:13996-14006
#   MLIR.API.stablehloDeserializePortableArtifactNoError(bytes, ctx)  R src/mlir/libMLIR_h.jl:14014-14018
# called the way Reactant's TF SavedModel exporter calls the serializer: parse the module text
# in a fresh ReactantContext, serialize with `MLIR.IR.print_callback` collecting into an
# IOBuffer (R src/serialization/TFSavedModel.jl:47-52, 77-87; callback R src/mlir/IR/Utils.jl:5-9).
# Ops are walked with Reactant's IR iterators (operation -> regions -> blocks -> operations,
# R src/mlir/IR/Operation.jl:59-77, src/mlir/IR/Region.jl:39-57, src/mlir/IR/Block.jl:49-67) and
# attributes read and written through the C API by 0-based position
# (R src/mlir/libMLIR_h.jl:1712-1758, 3930-4015; `MLIR.IR.getattr`/`setattr!`/`rmattr!`,
# R src/mlir/IR/Operation.jl:236-276).

"""
The VHLO version artifacts are written for: StableHLO 1.17.0 is what jaxlib 0.10.2, the
oldest jaxlib the Python reader supports, reads (`jaxlib.mlir.dialects.stablehlo.get_current_version()`).
"""
const ARTIFACT_TARGET = v"1.17.0"

# Attribute names readers drop (spec §2), as juliabridge/stablehlo/sanitize.py lists them:
# any op's attributes in these namespaces,
const DROPPED_ATTR_PREFIXES = ("enzymexla.", "enzyme.")
# and, in a func.func's `arg_attrs`/`res_attrs`, also these names and namespaces.
const DROPPED_ARG_ATTRS = ("tf.aliasing_output", "mhlo.sharding", "mhlo.layout_mode")
const DROPPED_ARG_ATTR_PREFIXES = ("jax.",)

"""
The passes run before serializing: jaxlib's pre-serialization pipeline
(complex-math expansion, CHLO -> StableHLO, expansion of ops newer than `target`, CHLO again
for what the expander emitted, shape -> StableHLO, cast cleanup), minus its steps for dialects
a JuliaBridge module never holds (Shardy, MHLO; `check_ops` admits only stablehlo/chlo/func).
The pass names are StableHLO's (stablehlo/transforms/Passes.td); the compatibility expander is
a module pass, the others func passes.
"""
artifact_pipeline(target::VersionNumber) = join(
    (
        "func.func(stablehlo-complex-math-expander)",
        "func.func(chlo-legalize-to-stablehlo)",
        "stablehlo-compatibility-expander{target=$target}",
        "func.func(chlo-legalize-to-stablehlo)",
        "func.func(shape-legalize-to-stablehlo)",
        "reconcile-unrealized-casts",
    ),
    ",",
)

"""The StableHLO version Reactant's bundled StableHLO is at."""
function stablehlo_current_version()::VersionNumber
    io = IOBuffer()
    callback = @cfunction(MLIR.IR.print_callback, Cvoid, (MLIR.API.MlirStringRef, Any))
    MLIR.API.stablehloGetCurrentVersion(callback, Ref(io))
    return VersionNumber(String(take!(io)))
end

"""The artifact's target: `ARTIFACT_TARGET`, or the writer's own version if that is older."""
artifact_target(current::VersionNumber) = min(current, ARTIFACT_TARGET)

reactant_only_attr(name::AbstractString) = any(p -> startswith(name, p), DROPPED_ATTR_PREFIXES)

dropped_arg_attr(name::AbstractString) =
    reactant_only_attr(name) || name in DROPPED_ARG_ATTRS || any(p -> startswith(name, p), DROPPED_ARG_ATTR_PREFIXES)

"""The names of `op`'s attributes (C API positions are 0-based)."""
attribute_names(op::MLIR.IR.Operation)::Vector{String} =
    [String(MLIR.API.mlirOperationGetAttribute(op, i - 1).name) for i in 1:MLIR.IR.nattrs(op)]

"""Remove the attributes of `op` whose names satisfy `drop`."""
function remove_attributes!(drop, op::MLIR.IR.Operation)
    for name in attribute_names(op)
        drop(name) && MLIR.IR.rmattr!(op, name)
    end
    return nothing
end

"""
Rewrite the array-of-dictionaries attribute `key` (`arg_attrs`/`res_attrs`) of func.func `op`
without the entries `dropped_arg_attr` names.
"""
function filter_arg_attrs!(op::MLIR.IR.Operation, key::String, ctx)
    attr = MLIR.IR.getattr(op, key)
    (attr === nothing || !MLIR.IR.isarray(attr)) && return nothing
    dicts = MLIR.IR.Attribute[]
    for i in 0:(MLIR.API.mlirArrayAttrGetNumElements(attr) - 1)
        d = MLIR.IR.Attribute(MLIR.API.mlirArrayAttrGetElement(attr, i))
        if !MLIR.IR.isdict(d)
            push!(dicts, d)
            continue
        end
        kept = MLIR.API.MlirNamedAttribute[]
        for j in 0:(MLIR.API.mlirDictionaryAttrGetNumElements(d) - 1)
            na = MLIR.API.mlirDictionaryAttrGetElement(d, j)
            dropped_arg_attr(String(na.name)) || push!(kept, na)
        end
        push!(dicts, MLIR.IR.Attribute(MLIR.API.mlirDictionaryAttrGet(ctx, length(kept), kept)))
    end
    MLIR.IR.setattr!(op, key, MLIR.IR.Attribute(dicts; context=ctx))   # R src/mlir/IR/Attribute.jl:88-90
    return nothing
end

"""Every operation nested in `root` (not `root` itself); iterative, so depth cannot overflow."""
function nested_operations(root::MLIR.IR.Operation)::Vector{MLIR.IR.Operation}
    found = MLIR.IR.Operation[]
    stack = [root]
    while !isempty(stack)
        op = pop!(stack)
        for region in op, block in region, child in block
            push!(found, child)
            push!(stack, child)
        end
    end
    return found
end

"""
Remove from module `mod`, in place, what sanitize.py removes before serializing: the module's
`sym_name` (Reactant prints names XLA's parser rejects), Reactant-only attributes on every op
and on the module, and the dropped argument/result attributes of every func.func.
"""
function strip_for_artifact!(mod::MLIR.IR.Module, ctx)
    top = MLIR.IR.Operation(mod)                                     # R src/mlir/IR/Module.jl:60
    MLIR.IR.rmattr!(top, "sym_name")
    remove_attributes!(reactant_only_attr, top)
    for op in nested_operations(top)
        remove_attributes!(reactant_only_attr, op)
        if MLIR.IR.name(op) == "func.func"                           # R src/mlir/IR/Operation.jl:112
            filter_arg_attrs!(op, "arg_attrs", ctx)
            filter_arg_attrs!(op, "res_attrs", ctx)
        end
    end
    return nothing
end

"""The serialized bytes of `mod` at `target`, or `nothing` when StableHLO refuses."""
function serialize_module(mod::MLIR.IR.Module, target::VersionNumber)::Union{Nothing,Vector{UInt8}}
    io = IOBuffer()
    callback = @cfunction(MLIR.IR.print_callback, Cvoid, (MLIR.API.MlirStringRef, Any))
    allow_other_dialects = false
    result = MLIR.IR.LogicalResult(
        MLIR.API.stablehloSerializePortableArtifactFromModule(mod, string(target), callback, Ref(io), allow_other_dialects),
    )
    return MLIR.IR.isfailure(result) ? nothing : take!(io)
end

"""The MLIR text of a portable artifact, or `nothing` if it does not deserialize."""
function artifact_module_text(bytes::Vector{UInt8}, ctx)::Union{Nothing,String}
    raw = MLIR.API.stablehloDeserializePortableArtifactNoError(String(copy(bytes)), ctx)
    MLIR.IR.mlirIsNull(raw) && return nothing                        # R src/mlir/IR/Utils.jl:1-3
    mod = MLIR.IR.Module(MLIR.IR.mark_alloc(raw))                     # as R src/mlir/IR/Module.jl:10
    try
        return string(mod)
    finally
        MLIR.IR.dispose(mod)
    end
end

"""
The portable artifact of MLIR module `text` for StableHLO version `target`, or `nothing` (with
a warning) when the module cannot be expressed at that version: stripped, legalized and
serialized as described at the top of this file, then read back to check its `@main`
signature is the text's. The artifact is optional; readers then use the text.
"""
function portable_artifact(text::AbstractString, target::VersionNumber, what::AbstractString)::Union{Nothing,Vector{UInt8}}
    why = Ref("")
    bytes = MLIR.IR.@dispose ctx = Reactant.ReactantContext() begin
        MLIR.IR.activate(ctx)
        try
            artifact_bytes(text, target, ctx, why)
        finally
            MLIR.IR.deactivate(ctx)
        end
    end
    bytes === nothing &&
        @warn "JuliaBridge: no portable artifact for the $what module at StableHLO $target ($(why[])); the bundle carries its text only, which readers use instead"
    return bytes
end

function artifact_bytes(text, target::VersionNumber, ctx, why::Ref{String})::Union{Nothing,Vector{UInt8}}
    mod = try
        parse(MLIR.IR.Module, text)                                  # R src/mlir/IR/Module.jl:30-32
    catch err
        err isa InterruptException && rethrow()
        why[] = "its text does not parse in a fresh Reactant context"
        return nothing
    end
    try
        strip_for_artifact!(mod, ctx)
        try
            Reactant.Compiler.run_pass_pipeline!(mod, artifact_pipeline(target), "juliabridge_artifact")
        catch err
            err isa InterruptException && rethrow()
            why[] = "legalizing it to plain StableHLO failed: $(first(sprint(showerror, err), 500))"
            return nothing
        end
        bytes = serialize_module(mod, target)
        if bytes === nothing
            why[] = "StableHLO cannot serialize it (an op or feature outside StableHLO at that version)"
            return nothing
        end
        same_signature = try
            back = artifact_module_text(bytes, ctx)
            back !== nothing && main_signature(back) == main_signature(text)
        catch err
            err isa InterruptException && rethrow()
            false
        end
        if !same_signature
            why[] = "the artifact does not read back with the module's @main signature"
            return nothing
        end
        return bytes
    finally
        MLIR.IR.dispose(mod)
    end
end

"""The manifest's `artifact` object for artifact file `file` (already written in `dir`)."""
function artifact_object(dir::AbstractString, file::AbstractString, current::VersionNumber, target::VersionNumber)
    return jobject(
        "file" => file,
        "sha256" => file_sha256(joinpath(dir, file)),
        "stablehlo_version" => version_text(current),
        "target" => version_text(target),
    )
end

"""`MAJOR.MINOR.PATCH` of a StableHLO version (spec §2.1: decimal, no pre-release or build part)."""
function version_text(v::VersionNumber)::String
    (isempty(v.prerelease) && isempty(v.build)) ||
        throw(ExportError("internal: StableHLO reported version $v, which is not MAJOR.MINOR.PATCH"))
    return "$(v.major).$(v.minor).$(v.patch)"
end
