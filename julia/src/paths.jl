# Paths: Reactant records where a leaf sits as integer positions (R src/Tracing.jl:1967-2033
# for Tuple/NamedTuple, 1182-1320 for structs, 1777-1860 for arrays of arrays, key for Dict).
# Bundle paths (spec §3.8) use names, so we rebuild them by walking the real values, the way
# Reactant names block arguments (R src/TracedUtils.jl:561-588).

"""Follow one Reactant path step from `v`; return the child and its bundle path step."""
function path_step(v, step)
    if v isa AbstractDict
        return v[step], string(step)
    elseif v isa Tuple
        return v[step], Int(step)
    elseif v isa NamedTuple
        key = step isa Integer ? keys(v)[step] : Symbol(step)
        return getfield(v, key), string(key)
    elseif v isa AbstractArray
        # an Array of arrays, which Reactant indexes linearly (R src/Tracing.jl:1834-1850)
        return v[step], Int(step)
    elseif step isa Symbol
        # Complex :re/:im, Core.Box :contents (R src/Tracing.jl:1756-1775, 2038-2075)
        return getfield(v, step), string(step)
    else
        return getfield(v, step), string(fieldname(typeof(v), step))
    end
end

"""The bundle path (Vector of String/Int steps) of Reactant steps `steps` below `root`."""
function name_path(root, steps)::Vector{Any}
    names = Any[]
    v = root
    for s in steps
        v, name = path_step(v, s)
        push!(names, name)
    end
    return names
end

"""The value at Reactant steps `steps` below `root`."""
function follow(root, steps)
    v = root
    for s in steps
        v, _ = path_step(v, s)
    end
    return v
end

"""The HDF5 dataset path of a parameter or state leaf (spec §4): `/params/a/b`, `/state/a/b`."""
function dataset_path(role::AbstractString, path::AbstractVector)::String
    group = role == "parameter" ? "params" : role == "state" ? "state" : throw(ArgumentError(role))
    isempty(path) && throw(
        ExportError("the $(group == "params" ? "parameters" : "states") must be a NamedTuple or Tuple, not a bare array"),
    )
    for step in path
        s = string(step)
        (isempty(s) || s == "." || s == ".." || occursin('/', s)) && throw(
            ExportError("path step \"$s\" of $(join(string.(path), ".")) cannot name an HDF5 dataset"),
        )
    end
    return "/" * group * "/" * join(string.(path), "/")
end

"""`path` as text for messages: `layer_1.weight`, or `(root)` for the empty path."""
path_label(path) = isempty(path) ? "(root)" : join(string.(path), ".")
