# Leaves of x, ps and st: moving them to Reactant, checking every array became a Reactant
# array, the non-array configuration values of st (`static_state`), and arrays reached by more
# than one path.

const ReactantLeaf = Union{Reactant.AbstractConcreteArray,Reactant.AbstractConcreteNumber}

# Values Reactant leaves alone while tracing: they become compile-time constants by design.
# Lux layers are opaque through LuxCore's Reactant extension (L lib/LuxCore/ext/ReactantExt.jl:6-10).
is_opaque(v) = v isa Union{Nothing,Val,Symbol,AbstractString,Function,Type,Module,Lux.AbstractLuxLayer}

"""
Call `f(leaf, path, in_array)` for every leaf of `v`, depth-first in field order (Reactant's
order, R src/Tracing.jl:1182-1320, 1967-2033). Leaves are Reactant arrays/numbers, plain
numeric arrays, plain numbers and opaque values; `in_array` says the leaf is an element of a
non-numeric array (which Reactant indexes linearly, R src/Tracing.jl:1834-1850).
"""
function foreach_leaf(f, v, path::Vector{Any}=Any[], in_array::Bool=false)
    if v isa ReactantLeaf
        f(v, path, in_array)
    elseif v isa NamedTuple
        for (k, c) in pairs(v)
            foreach_leaf(f, c, vcat(path, string(k)))
        end
    elseif v isa Tuple
        for (i, c) in enumerate(v)
            foreach_leaf(f, c, vcat(path, i))
        end
    elseif v isa AbstractDict
        for (k, c) in v
            foreach_leaf(f, c, vcat(path, string(k)))
        end
    elseif v isa AbstractArray{<:Number}
        f(v, path, in_array)
    elseif v isa AbstractArray
        for (i, c) in enumerate(v)
            foreach_leaf(f, c, vcat(path, i), true)
        end
    elseif v isa Number || is_opaque(v)
        f(v, path, in_array)
    elseif isstructtype(typeof(v))
        for i in 1:nfields(v)
            isdefined(v, i) || continue
            foreach_leaf(f, getfield(v, i), vcat(path, string(fieldname(typeof(v), i))))
        end
    end
    return nothing
end

"""
Throw `NonReactantLeafError` for a leaf of `root` that tracing would bake in as a constant
(R src/Tracing.jl:1777-1860, docs/src/tutorials/partial-evaluation.md): a plain numeric array,
a plain float/complex number, any element of a non-numeric array that is not itself an array
or container, and, unless `static_ok` (the state tree, where they are configuration recorded
as `static_state`), Bool and Integer numbers.
"""
function check_leaves(root, role::AbstractString; static_ok::Bool=false)
    foreach_leaf(root) do leaf, path, in_array
        leaf isa ReactantLeaf && return nothing
        if in_array && !(leaf isa AbstractArray)
            throw(
                NonReactantLeafError(
                    role, path, typeof(leaf),
                    "It is an element of a non-numeric array, which Reactant cannot make an argument; the whole array would be frozen into the module.",
                ),
            )
        elseif leaf isa AbstractArray
            throw(NonReactantLeafError(role, path, typeof(leaf)))
        elseif leaf isa Union{Bool,Integer}
            static_ok && return nothing
            throw(
                NonReactantLeafError(
                    role, path, typeof(leaf),
                    "Reactant would freeze this number into the module (only the state tree may hold Bool/Integer configuration).",
                ),
            )
        elseif leaf isa Number
            throw(NonReactantLeafError(role, path, typeof(leaf)))
        end
        return nothing
    end
    return nothing
end

"""Every bundle path at which each Reactant leaf of `root` is reachable, keyed by identity."""
function leaf_paths(root)::IdDict{Any,Vector{Vector{Any}}}
    found = IdDict{Any,Vector{Vector{Any}}}()
    foreach_leaf(root) do leaf, path, _
        leaf isa ReactantLeaf && push!(get!(found, leaf, Vector{Any}[]), copy(path))
    end
    return found
end

"""
`v` with every Reactant array inside its NamedTuples, Tuples and arrays replaced by a CPU
`Array`, the same `Array` wherever the same Reactant array is reached. `Reactant.to_rarray`
copies a Reactant array before it looks it up in its `seen` table (R src/Tracing.jl:1383-1402,
src/Types.jl:280-297), so a Reactant array tied at two paths of `ps` would become two
arguments and the tie would be lost; a plain `Array` is looked up first (R src/Tracing.jl:1790-1797)
and stays one argument with `tied_paths`. Reactant numbers and arrays inside other structs
(a `ReactantRNG`'s seed) are left as they are.
"""
function host_tied(v, cache::IdDict{Any,Any}=IdDict{Any,Any}())
    if v isa Reactant.AbstractConcreteArray
        return get!(() -> host(v), cache, v)
    elseif v isa NamedTuple || v isa Tuple
        return map(c -> host_tied(c, cache), v)
    elseif v isa AbstractArray && !(eltype(v) <: Number)
        return map(c -> host_tied(c, cache), v)
    end
    return v
end

"""
Refuse a Reactant number reached at two paths of `root`: `Reactant.to_rarray` copies it
(R src/Tracing.jl:1425-1443), so the two places would become two arguments; unlike an array
it cannot be made a host value without freezing it.
"""
function check_numbers_not_tied(root, role::AbstractString)
    for (leaf, paths) in leaf_paths(root)
        (leaf isa Reactant.AbstractConcreteNumber && length(paths) > 1) || continue
        throw(
            ExportError(
                "the same Reactant number is the $role at $(path_label(paths[1])) and at $(path_label(paths[2])); Reactant would make it two arguments, so the bundle could not keep them one value. Use a 0-dimensional array (`Reactant.to_rarray(fill(x))`) shared at both places, or a copy for one of them.",
            ),
        )
    end
    return nothing
end

"""
Refuse a Reactant array reached from two of x, ps and st. Reactant traces a shared array once
(R src/Tracing.jl:1398), so it would be one `@main` argument with the first role only and the
other path would be lost. Arrays in NamedTuples/Tuples never get here: `export_lux` makes them
host arrays (`host_tied`) and converts x, ps and st separately, so an array shared between them
becomes one argument per role; what is left is an array inside another struct.
"""
function check_not_shared(trees::Pair{String}...)
    owner = IdDict{Any,Tuple{String,Vector{Any}}}()
    for (role, tree) in trees
        for (leaf, paths) in leaf_paths(tree)
            if haskey(owner, leaf) && first(owner[leaf]) != role
                other_role, other_path = owner[leaf]
                throw(
                    ExportError(
                        "the same Reactant array is the $other_role at $(path_label(other_path)) and the $role at $(path_label(first(paths))); Reactant traces a shared array once, so the bundle could not give it both roles. Pass a copy (`copy(a)`) for one of them.",
                    ),
                )
            end
            haskey(owner, leaf) || (owner[leaf] = (role, first(paths)))
        end
    end
    return nothing
end

"""
`st` with every CPU random number generator copied: `Reactant.to_rarray` draws a seed from
each one (R src/Tracing.jl:2105-2116), and the caller's state should not advance.
"""
copy_rngs(v::NamedTuple) = map(copy_rngs, v)
copy_rngs(v::Tuple) = map(copy_rngs, v)
copy_rngs(v::Random.AbstractRNG) = v isa Reactant.ReactantRNG ? v : copy(v)
copy_rngs(v) = v

"""A Reactant leaf as a CPU `Array` (0-dimensional for a number), in Julia layout."""
host(a::Reactant.AbstractConcreteArray) = Array(a)                       # R src/ConcreteRArray.jl:150
host(n::Reactant.AbstractConcreteNumber{T}) where {T} = fill(convert(T, n)) # R src/ConcreteRArray.jl:85
host(a::AbstractArray) = collect(a)
host(n::Number) = fill(n)

"""
Paths of the empty NamedTuples/Tuples inside `root` (e.g. `ps.layer_2 == NamedTuple()` for a
MaxPool layer), depth-first. They hold no arrays, so the manifest lists them separately
(spec §3.10) for readers to rebuild Lux's tree exactly.
"""
function empty_containers(root)::Vector{Vector{Any}}
    found = Vector{Any}[]
    function walk(v, path::Vector{Any})
        if v isa NamedTuple || v isa Tuple
            if isempty(v)
                isempty(path) || push!(found, copy(path))
            else
                for (k, c) in pairs(v)
                    walk(c, vcat(path, v isa NamedTuple ? string(k) : k))
                end
            end
        end
        return nothing
    end
    walk(root, Any[])
    return found
end

"""One non-array leaf of `st` (spec `static_state`): Lux's `training = Val(true)` and the like."""
struct StaticLeaf
    path::Vector{Any}
    value::Any          # a JSON scalar: Bool, Integer, String or nothing
    julia_type::String  # e.g. "Val{true}", "Int64", "Symbol"
end

Base.:(==)(a::StaticLeaf, b::StaticLeaf) = a.path == b.path && isequal(a.value, b.value) && a.julia_type == b.julia_type

# Base's `BitInteger` spelled out: that name is not public API.
const BIT_INTEGERS = Union{Int8,Int16,Int32,Int64,Int128,UInt8,UInt16,UInt32,UInt64,UInt128}

"""
`(value, julia_type)` of a configuration value JuliaBridge records and `load_params` rebuilds
(see `static_value` in load.jl), or `nothing` for values it leaves alone (layers, functions).
`julia_type` is `string(typeof(v))` (spec §3.11); `check_manifest` refuses a value or type name
outside the spec's limits (an integer beyond UInt64, a string over 4096 characters).
"""
function static_entry(v)
    if v isa Val
        p = typeof(v).parameters[1]
        p isa Bool && return (p, string(typeof(v)))
        # Only an `Int`: `string(typeof(Val(Int32(3))))` is "Val{3}" too, which `static_value`
        # rebuilds as `Val(3)`, so other widths would not come back as they were.
        p isa Int && return (p, string(typeof(v)))
        p isa Symbol && return (string(p), string(typeof(v)))
        return nothing
    elseif v isa Bool
        return (v, "Bool")
    elseif v isa BIT_INTEGERS
        return (v, string(typeof(v)))
    elseif v === nothing
        return (nothing, "Nothing")
    elseif v isa Symbol
        return (string(v), "Symbol")
    elseif v isa String
        return (v, "String")
    end
    return nothing
end

"""
The static leaves of state tree `st`: non-array values directly inside its NamedTuples and
Tuples (Lux's containers), depth-first. Values inside other structs (a `ReactantRNG`'s
algorithm name, a user struct's `Int` counter) belong to that struct's type and are not listed
in the manifest; with `inside_structs` they are also collected (by field name), so that
`check_static_unchanged` sees a traced call change one, which Reactant would freeze as it does
a plain number anywhere in `st`.
"""
function static_leaves(st; inside_structs::Bool=false)::Vector{StaticLeaf}
    found = StaticLeaf[]
    function walk(v, path::Vector{Any})
        if v isa NamedTuple || v isa Tuple
            for (k, c) in pairs(v)
                walk(c, vcat(path, v isa NamedTuple ? string(k) : k))
            end
        elseif !(v isa ReactantLeaf || v isa Reactant.TracedRArray || v isa Reactant.TracedRNumber || v isa AbstractArray)
            entry = static_entry(v)
            if entry !== nothing
                isempty(path) || push!(found, StaticLeaf(copy(path), entry...))
            elseif inside_structs && !is_opaque(v) && !(v isa AbstractDict) && isstructtype(typeof(v))
                # (A Dict's own fields, e.g. its `age` counter, are bookkeeping, not configuration.)
                for i in 1:nfields(v)
                    isdefined(v, i) || continue
                    walk(getfield(v, i), vcat(path, string(fieldname(typeof(v), i))))
                end
            end
        end
        return nothing
    end
    walk(st, Any[])
    return found
end

"""
Refuse a model that changes a static leaf of `st` (say `st.step = st.step + 1` with a plain
Int): Reactant freezes plain numbers at trace time, so every call of the exported module
would return the value of the traced call.
"""
function check_static_unchanged(before::Vector{StaticLeaf}, after::Vector{StaticLeaf})
    before == after && return nothing
    old = Dict(s.path => s for s in before)
    new = Dict(s.path => s for s in after)
    for (p, s) in old
        t = get(new, p, nothing)
        t == s && continue
        shown = t === nothing ? "drops it" : "changes it from $(repr(s.value)) to $(repr(t.value))"
        throw(
            ExportError(
                "st.$(path_label(p)) is a plain $(s.julia_type) and the model $shown. Reactant freezes plain numbers at trace time, so the exported module would always return the traced value; make it a 0-dimensional array (`fill(x)`) so it becomes an argument.",
            ),
        )
    end
    extra = [path_label(p) for p in keys(new) if !haskey(old, p)]
    isempty(extra) && return nothing
    throw(ExportError("the model adds configuration values to the state that st does not have: $(join(extra, ", "))"))
end
