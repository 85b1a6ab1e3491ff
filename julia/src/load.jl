# load_params: parameters and states of a bundle, or of a weights file saved from Python
# (`juliabridge.save_params`, spec §4), back into Lux's nested NamedTuples.

"""
    load_params(path) -> (ps, st)
    load_params(path, ps_template, st_template) -> (ps, st)

Read `/params` and `/state` of a bundle directory or of a weights `.h5` file. Without
templates the trees are rebuilt from the bundle's manifest (or the file's groups): keys
come in Lux's order, integer keys become Tuples, but layers without parameters (empty
NamedTuples) and non-array state (`training`, RNGs) are absent. With templates (e.g. from
`Lux.setup`) the result has exactly the templates' structure and element types; every array
leaf is read from the file and checked for shape, everything else is kept from the template.
"""
function load_params(path::AbstractString)
    file, entries = weights_location(path)
    return HDF5.h5open(file, "r") do f
        check_weights_file(f, file)
        if entries === nothing
            (read_group_tree(f, "params"), read_group_tree(f, "state"))
        else
            (tree_from_entries(f, entries.params), tree_from_entries(f, entries.state))
        end
    end
end

function load_params(path::AbstractString, ps_template, st_template)
    file, _ = weights_location(path)
    return HDF5.h5open(file, "r") do f
        check_weights_file(f, file)
        (fill_like(f, file, "/params", ps_template, Any[]), fill_like(f, file, "/state", st_template, Any[]))
    end
end

# The weights file of `path`, and for a bundle the (path, dataset) of each parameter and
# state argument in manifest order (which is Lux's depth-first order).
function weights_location(path::AbstractString)
    if isdir(path)
        mpath = joinpath(path, MANIFEST_FILE)
        isfile(mpath) || throw(BundleReadError("$path is a directory without $MANIFEST_FILE, so not a bundle"))
        m = JSON.parsefile(mpath)                                    # JSON src/parse.jl:241
        get(m, "format", nothing) == FORMAT || throw(BundleReadError("$mpath is not a juliabridge bundle manifest"))
        v = get(m, "format_version", 0)
        (v isa Integer && 1 <= v <= FORMAT_VERSION) ||
            throw(BundleReadError("$path has format_version $v; this JuliaBridge reads up to $FORMAT_VERSION, upgrade it"))
        name = m["weights"]["file"]
        (name isa AbstractString && !isempty(name) && !isabspath(name) && !occursin(r"[/\\]", name) && name != "..") ||
            throw(BundleReadError("unsafe weights file name in $mpath: $(repr(name))"))
        file = joinpath(path, name)
        islink(file) && throw(BundleReadError("$file is a symlink; bundles hold regular files only"))
        entry(a) = (Any[s for s in a["path"]], String(a["dataset"]))
        params = [entry(a) for a in m["arguments"] if a["role"] == "parameter"]
        state = [entry(a) for a in m["arguments"] if a["role"] == "state"]
        return file, (; params, state)
    end
    isfile(path) || throw(BundleReadError("no bundle directory or weights file at $path"))
    return path, nothing
end

# A standalone weights file saved from Python says so in its root attributes (spec §4).
function check_weights_file(f, file)
    a = HDF5.attrs(f)
    if haskey(a, "format")
        a["format"] == WEIGHTS_FORMAT || a["format"] == FORMAT ||
            throw(BundleReadError("$file has format $(repr(a["format"])), not $WEIGHTS_FORMAT"))
        v = haskey(a, "format_version") ? a["format_version"] : 1
        v <= FORMAT_VERSION || throw(BundleReadError("$file has format_version $v; upgrade JuliaBridge"))
    end
    return nothing
end

# Nested trees built in insertion order: a node is a Vector of key => (node or array).
const Node = Vector{Pair{Any,Any}}

function insert_leaf!(node::Node, path::AbstractVector, value)
    key = first(path)
    i = findfirst(p -> first(p) == key, node)
    if length(path) == 1
        i === nothing || throw(BundleReadError("path $(path_label(path)) appears twice"))
        push!(node, key => value)
        return nothing
    end
    if i === nothing
        child = Node()
        push!(node, key => child)
    else
        child = last(node[i])
        child isa Node || throw(BundleReadError("path $(path_label(path)) goes through an array"))
    end
    return insert_leaf!(child, path[2:end], value)
end

# Integer keys 1..n become a Tuple (Lux tuples), string keys a NamedTuple.
function materialize(node)
    node isa Node || return node
    isempty(node) && return NamedTuple()
    keys_ = first.(node)
    values_ = [materialize(last(p)) for p in node]
    if all(k -> k isa Integer, keys_)
        order = sortperm(keys_)
        keys_[order] == 1:length(keys_) || throw(BundleReadError("tuple positions $(keys_) are not 1..n"))
        return Tuple(values_[order])
    end
    return NamedTuple{Tuple(Symbol.(string.(keys_)))}(Tuple(values_))
end

function tree_from_entries(f, entries)
    root = Node()
    for (path, dspath) in entries
        A = read_array(f, dspath)
        A === nothing && throw(BundleReadError("the manifest names dataset $dspath, which the weights file lacks"))
        insert_leaf!(root, path, A)
    end
    return materialize(root)
end

# Natural order ("layer_2" before "layer_10") for files whose groups do not track creation order.
natural_key(s) = [isdigit(first(m.match)) ? lpad(m.match, 20, '0') : String(m.match) for m in eachmatch(r"\d+|\D+", s)]

function read_group_tree(f, name::AbstractString)
    haskey(f, name) || return NamedTuple()
    g = f[name]
    try
        return materialize(walk_group(g))
    finally
        close(g)
    end
end

function walk_group(g)::Node
    node = Node()
    ks = keys(g)                                                     # HDF5 src/groups.jl:146-153
    tracked = try
        HDF5.get_create_properties(g).track_order                    # HDF5 src/highlevel.jl:114, src/types.jl:181-187
    catch
        false
    end
    tracked || sort!(ks; by=natural_key)
    for k in ks
        key = occursin(r"^\d+$", k) ? parse(Int, k) : k
        obj = g[k]
        if obj isa HDF5.Group
            try
                push!(node, key => walk_group(obj))
            finally
                close(obj)
            end
        else
            close(obj)
            push!(node, key => read_array(g, k))
        end
    end
    return node
end

# The template's structure, with every array leaf read from `prefix/<path>`.
function fill_like(f, file, prefix::AbstractString, t, path::Vector{Any})
    if t isa NamedTuple
        return NamedTuple{keys(t)}(Tuple(fill_like(f, file, prefix, getfield(t, k), vcat(path, string(k))) for k in keys(t)))
    elseif t isa Tuple
        return Tuple(fill_like(f, file, prefix, c, vcat(path, i)) for (i, c) in enumerate(t))
    elseif t isa ReactantLeaf || t isa AbstractArray{<:Number}
        dspath = prefix * "/" * join(string.(path), "/")
        A = read_array(f, dspath)
        A === nothing && throw(BundleReadError("$file has no dataset $dspath for $(path_label(path))"))
        size(A) == size(t) || throw(
            BundleReadError("$dspath has Julia shape $(size(A)) but the template's $(path_label(path)) has $(size(t))"),
        )
        return restore_like(t, A)
    elseif t isa AbstractArray
        return reshape([fill_like(f, file, prefix, c, vcat(path, i)) for (i, c) in enumerate(t)], size(t))
    end
    return t
end

# `A` with the template leaf's element type, and on Reactant if the template leaf was.
restore_like(t::Reactant.AbstractConcreteArray, A) = Reactant.to_rarray(convert(Array{eltype(t)}, A))
restore_like(t::Reactant.AbstractConcreteNumber{T}, A) where {T} = Reactant.ConcreteRNumber(convert(T, A[]))
restore_like(t::AbstractArray{T}, A) where {T} = convert(Array{T}, A)
