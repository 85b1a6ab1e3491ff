# Trees of values (x, ps, st, a model's outputs): their children with Lux path steps, a map that
# rebuilds them, and the flatten of (x, ps, st) into the arguments of the exported function.

"""`path` as text for messages: `ps.layer_1.weight`."""
label(root, path) = join([root; string.(path)], ".")

# A leaf that is an RNG to convert (Reactant's own RNG is a struct holding a seed array).
is_host_rng(v) = v isa Random.AbstractRNG && !(v isa ReactantRNG)

"""
The children of a container as `(step, child)` pairs, or `nothing` for a leaf. Steps are Lux's
(docs/bundle-format.md §3.8): NamedTuple and struct fields by name (declaration order), Tuple
and Array-of-arrays positions as 1-based integers. Numeric arrays, numbers, strings, symbols,
RNGs and field-less values (`Val`, `nothing`) are leaves.
"""
function children(v, root, path)
    T = typeof(v)
    (v isa Union{AbstractArray{<:Number},Number,AbstractString,Symbol,Type,Module} || is_host_rng(v)) && return nothing
    v isa Tuple && return Any[(i, c) for (i, c) in enumerate(v)]
    v isa NamedTuple && return Any[(string(k), c) for (k, c) in pairs(v)]
    v isa AbstractDict && throw(ExportError("$(label(root, path)) is a $T; JuliaBridge names leaves by NamedTuple, Tuple, Array and struct positions, not Dict keys: use a NamedTuple"))
    v isa AbstractArray && return Any[(i, v[i]) for i in 1:length(v)]   # linear index
    (isstructtype(T) && fieldcount(T) > 0) || return nothing
    for i in 1:fieldcount(T)
        isdefined(v, i) || throw(ExportError("$(label(root, path)) is a $T whose field $(fieldname(T, i)) is undefined"))
    end
    return Any[(string(fieldname(T, i)), getfield(v, i)) for i in 1:fieldcount(T)]
end

"""A container of the same kind as `v` holding `vals`."""
remake(::Tuple, vals) = Tuple(vals)
remake(::NamedTuple{K}, vals) where {K} = NamedTuple{K}(Tuple(vals))
remake(v::AbstractArray, vals) = reshape([vals...], size(v))
function remake(v, vals)
    try
        # ConstructionBase's documented API: the type's constructor without its parameters.
        return ConstructionBase.constructorof(typeof(v))(vals...)
    catch err
        throw(ExportError("cannot rebuild a $(typeof(v)) with new leaves ($(sprint(showerror, err))); give it a constructor taking its fields, with parametric field types"))
    end
end

"""
`tree` rebuilt depth-first with every node without children (leaves and empty containers)
replaced by `leaf(node, path)`.
"""
function map_tree(leaf, tree, root, path=Any[])
    cs = children(tree, root, path)
    (cs === nothing || isempty(cs)) && return leaf(tree, path)
    return remake(tree, Any[map_tree(leaf, c, root, Any[path; s]) for (s, c) in cs])
end

"""(path => node) of every node of `tree` without children, depth-first."""
function leaves_with_paths(tree, root, path=Any[], out=Pair{Vector{Any},Any}[])
    cs = children(tree, root, path)
    (cs === nothing || isempty(cs)) && return push!(out, path => tree)
    foreach(((s, c),) -> leaves_with_paths(c, root, Any[path; s], out), cs)
    return out
end

"""The JSON value `julia_type`/`value` of a static state leaf (spec §3.11), or `nothing`."""
function static_value(v)
    v isa Val && return static_value(typeof(v).parameters[1])
    v isa Union{Bool,Integer,AbstractString,Nothing} && return Some(v)
    v isa Symbol && return Some(string(v))
    return nothing
end

const ROLES = (x="input", ps="parameter", st="state")
"""The root name (`:x`, `:ps`, `:st`) of an argument's `role`, for messages."""
root_of(role) = only(k for (k, r) in pairs(ROLES) if r == role)

"""What the flatten of (x, ps, st) found: the arguments and everything else the description records."""
Base.@kwdef struct Flattened
    leaves::Vector{Any} = Any[]                      # ConcreteRArrays, in argument order
    args::Vector{Dict{String,Any}} = Dict{String,Any}[]
    index::IdDict{Any,Int} = IdDict{Any,Int}()       # ConcreteRArray => argument position
    converted::IdDict{Any,Any} = IdDict{Any,Any}()   # user's array or RNG => its Reactant value
    empty::Dict{String,Vector{Any}} = Dict("params" => Any[], "state" => Any[])
    static::Vector{Any} = Any[]                      # static_state entries
    static_leaves::Vector{Any} = Any[]               # their values, to check the new state
end

"""
Flatten `tree` (root `:x`, `:ps` or `:st`) into `flat` and return it with every array leaf a
`Reactant.ConcreteRArray`: a plain array is converted once with `Reactant.to_rarray` (each
distinct array once, by identity, so a tied array stays one argument with `tied_paths`), an RNG
becomes Reactant's RNG (its seed array an argument). Static leaves of `st` and empty containers
of `ps`/`st` are recorded; any other leaf would be frozen into the module and is refused.
"""
function flatten!(flat::Flattened, tree, root::Symbol)
    role = ROLES[root]
    function leaf(v, path)
        if v isa AbstractArray{<:Number}
            # Lux names parameters and states by their path in the tree: a bare array has none.
            (root === :x || !isempty(path)) || throw(ExportError("$root is itself an array ($(typeof(v))); JuliaBridge names parameters and states by their Lux paths, so $root must be a NamedTuple of arrays: pass (; weight=$root) and read $root.weight in the model"))
            # Documented: to_rarray converts an array to a ConcreteRArray (R docs/src/api/api.md:29).
            r = get!(() -> v isa Reactant.ConcreteRArray ? v : Reactant.to_rarray(Array(v)), flat.converted, v)
            k = get(flat.index, r, 0)
            # Inputs are never tied (a reader refuses): an array given twice is two inputs.
            (k != 0 && root === :x) && (r = Reactant.to_rarray(Array(v)); k = 0)
            if k == 0
                dtype = dtype_of(eltype(r), label(root, path))
                push!(flat.leaves, r)
                flat.index[r] = k = length(flat.leaves)
                arg = Dict{String,Any}("index" => k - 1, "role" => role, "path" => path, "dtype" => dtype, "julia_shape" => collect(size(r)))
                role == "input" || (arg["dataset"] = "/" * join([root === :ps ? "params" : "state"; string.(path)], "/"))
                push!(flat.args, arg)
            elseif flat.args[k]["role"] != role
                a = flat.args[k]
                throw(ExportError("the array at $(label(root, path)) is also the $(a["role"]) at $(label(root_of(a["role"]), a["path"])); an argument has one role: pass a copy (copy(A)) to one of them"))
            else
                push!(get!(flat.args[k], "tied_paths", Any[]), path)
            end
            return r
        elseif is_host_rng(v)
            # A copy, so the user's RNG does not advance; to_rarray makes it Reactant's RNG
            # (R src/Tracing.jl:2106-2117).
            rng = get!(() -> Reactant.to_rarray(copy(v)), flat.converted, v)
            return map_tree(leaf, rng, root, path)
        elseif children(v, root, path) !== nothing          # an empty container
            root === :x || isempty(path) || push!(flat.empty[root === :ps ? "params" : "state"], path)
            return v
        elseif root === :st && static_value(v) !== nothing
            push!(flat.static, Dict{String,Any}("path" => path, "value" => something(static_value(v)), "julia_type" => string(typeof(v))))
            push!(flat.static_leaves, v)
            return v
        end
        throw(ExportError("$(label(root, path)) is a $(typeof(v)): Reactant would freeze it into the module as a constant. Use an array (fill(x) for a number) of Float16/BFloat16/Float32/Float64/Int/UInt/Bool/Complex numbers$(root === :st ? ", or a Bool/Integer/Symbol/String/Val/nothing setting" : "")"))
    end
    return map_tree(leaf, tree, root)
end
