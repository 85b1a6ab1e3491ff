# Leaves of x, ps and st: moving them to Reactant, checking every array became a Reactant
# array, and finding arrays reached by more than one path.

const ReactantLeaf = Union{Reactant.AbstractConcreteArray,Reactant.AbstractConcreteNumber}

# Values Reactant leaves alone while tracing: they become compile-time constants by design.
# Lux layers are opaque through LuxCore's Reactant extension (L lib/LuxCore/ext/ReactantExt.jl:6-10).
is_opaque(v) = v isa Union{Nothing,Val,Symbol,AbstractString,Function,Type,Module,Lux.AbstractLuxLayer}

"""
Call `f(leaf, path)` for every leaf of `v`, depth-first in field order (Reactant's order,
R src/Tracing.jl:1182-1320, 1967-2033). Leaves are Reactant arrays/numbers, plain numeric
arrays and plain numbers; opaque values are skipped.
"""
function foreach_leaf(f, v, path::Vector{Any}=Any[])
    if v isa ReactantLeaf
        f(v, path)
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
        f(v, path)
    elseif v isa AbstractArray
        for (i, c) in enumerate(v)
            foreach_leaf(f, c, vcat(path, i))
        end
    elseif v isa Number
        f(v, path)
    elseif is_opaque(v)
        nothing
    elseif isstructtype(typeof(v))
        for i in 1:nfields(v)
            isdefined(v, i) || continue
            foreach_leaf(f, getfield(v, i), vcat(path, string(fieldname(typeof(v), i))))
        end
    end
    return nothing
end

"""
Throw `NonReactantLeafError` for a leaf of `root` that tracing would bake in as a constant:
a plain numeric array, or a plain float/complex number (R src/Tracing.jl:1777-1860,
docs/src/tutorials/partial-evaluation.md). Integers and Bools are configuration.
"""
function check_leaves(root, role::AbstractString)
    foreach_leaf(root) do leaf, path
        leaf isa ReactantLeaf && return nothing
        leaf isa Union{Bool,Integer} && return nothing
        throw(NonReactantLeafError(role, path, typeof(leaf)))
    end
    return nothing
end

"""Every bundle path at which each Reactant leaf of `root` is reachable, keyed by identity."""
function leaf_paths(root)::IdDict{Any,Vector{Vector{Any}}}
    found = IdDict{Any,Vector{Vector{Any}}}()
    foreach_leaf(root) do leaf, path
        leaf isa ReactantLeaf && push!(get!(found, leaf, Vector{Any}[]), copy(path))
    end
    return found
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
