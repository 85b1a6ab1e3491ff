# Which `@main` results return an argument unchanged, decided from the module's structure
# (spec §3.4), never from values: the rule the Python reader applies
# (juliabridge/stablehlo/module.py `_echoed_argument`), so a claim the writer makes is one the
# reader accepts.

# Ops whose result holds their operand's values unchanged when the two types are equal
# (Reactant's boundary transposes aside: identity converts and reshapes).
const SAME_VALUE_OPS = ("stablehlo.convert", "stablehlo.reshape", "stablehlo.bitcast_convert", "stablehlo.copy")

# The elements of a dense i64 array attribute (`permutation`, `broadcast_dimensions`), read with
# the 0-based C API (R src/mlir/libMLIR_h.jl:4607, 4671, 4696) rather than `Attribute`'s
# iterate, which starts its 0-based index at 1 (R src/mlir/IR/Attribute.jl:808-871).
function dense_i64(attr)::Union{Nothing,Vector{Int}}
    (attr === nothing || !MLIR.API.mlirAttributeIsADenseI64Array(attr)) && return nothing
    n = MLIR.API.mlirDenseArrayGetNumElements(attr)
    return [Int(MLIR.API.mlirDenseI64ArrayGetElement(attr, i)) for i in 0:(n - 1)]
end

"""
The 0-based `@main` argument whose values `v` holds unchanged, or `nothing` when `v` is
computed. Followed back through transposes whose permutations compose to the identity and
through `SAME_VALUE_OPS` / identity `broadcast_in_dim` of the same type; any other op means
the value was computed, even when it equals the argument on the example input.
"""
function echoed_argument(v)::Union{Nothing,Int}
    perm = nothing                      # v == transpose(current, perm)
    for _ in 1:10_000
        if MLIR.IR.is_block_arg(v)      # R src/mlir/IR/Value.jl:23, 71
            (perm === nothing || perm == 0:(length(perm) - 1)) || return nothing
            return Int(MLIR.IR.block_arg_num(v))
        end
        MLIR.IR.is_op_res(v) || return nothing
        op = MLIR.IR.op_owner(v)        # R src/mlir/IR/Value.jl:47
        MLIR.IR.noperands(op) == 1 || return nothing
        name = MLIR.IR.name(op)
        src = MLIR.IR.operand(op, 1)    # R src/mlir/IR/Operation.jl:191
        if name == "stablehlo.transpose"
            p = dense_i64(MLIR.IR.getattr(op, "permutation"))
            p === nothing && return nothing
            perm = perm === nothing ? p : [p[k + 1] for k in perm]
        elseif name in SAME_VALUE_OPS || name == "stablehlo.broadcast_in_dim"
            MLIR.IR.type(src) == MLIR.IR.type(v) || return nothing
            if name == "stablehlo.broadcast_in_dim"
                d = dense_i64(MLIR.IR.getattr(op, "broadcast_dimensions"))
                (d === nothing || d != 0:(length(d) - 1)) && return nothing
            end
        else
            return nothing
        end
        v = src
    end
    return nothing
end

"""
Result index => argument index (both 0-based) for each `@main` result of `mod` that returns an
argument unchanged. `@main` is looked up and its terminator read as Reactant does when it
drops preserved arguments (R src/compiler/Compiler.jl:1034-1057).
"""
function returned_arguments(mod)::Dict{Int,Int}
    main = MLIR.IR.@dispose sym_table = MLIR.IR.SymbolTable(mod) begin
        MLIR.IR.lookup(sym_table, "main")
    end
    main === nothing && throw(ExportError("internal: the traced module has no @main"))
    block = MLIR.IR.first_block(MLIR.IR.region(main, 1))
    ret = MLIR.IR.terminator(block)
    found = Dict{Int,Int}()
    for k in 1:MLIR.IR.noperands(ret)
        j = echoed_argument(MLIR.IR.operand(ret, k))
        j === nothing || (found[k - 1] = j)
    end
    return found
end

"""
`returned_arguments` of MLIR text `text`, parsed in a fresh Reactant context the way the
artifact is made (artifact.jl `portable_artifact`): to check a written bundle's `echo_of`
claims against its `model.mlir` (`check_manifest(m; returned=...)`).
"""
function returned_arguments_of_text(text::AbstractString)::Dict{Int,Int}
    return MLIR.IR.@dispose ctx = Reactant.ReactantContext() begin
        MLIR.IR.activate(ctx)
        try
            mod = parse(MLIR.IR.Module, text)                      # R src/mlir/IR/Module.jl:30-32
            try
                returned_arguments(mod)
            finally
                MLIR.IR.dispose(mod)
            end
        finally
            MLIR.IR.deactivate(ctx)
        end
    end
end
