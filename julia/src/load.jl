# load_params: parameters and states of a bundle, or of a weights file saved from Python
# (`juliabridge.save_params`, spec §4), back into Lux's nested NamedTuples.

"""
    load_params(path) -> (ps, st)
    load_params(path, ps_template, st_template) -> (ps, st)

Read `/params` and `/state` of a bundle directory or of a weights `.h5` file.

Without templates the trees are rebuilt from the bundle's manifest: every parameter and state
array, the empty containers of `empty` (a MaxPool layer's `NamedTuple()`), and the
configuration values of `static_state` (Lux's `training = Val(false)`). Keys come in the order
the file recorded (Lux's order for bundles JuliaBridge wrote; natural order such as `layer_2`
before `layer_10` otherwise), configuration values after the arrays of their container;
integer keys become Tuples. Random number generators in the state come back as their seed
arrays. For a weights file saved from Python (no manifest) the trees are its groups.

With templates (e.g. from `Lux.setup`) the result has exactly the templates' structure and
element types: every array leaf is read from the file and checked for shape, everything else
is kept from the template.

Format 2 bundles record a sha256 of every dataset; it is checked as the data is read. Throws
`BundleReadError` for a missing, malformed or modified file.
"""
function load_params(path::AbstractString)
    file, entries = weights_location(path)
    return HDF5.h5open(file, "r") do f
        check_weights_file(f, file)
        if entries === nothing
            (read_group_tree(f, "params"), read_group_tree(f, "state"))
        else
            (
                tree_from_entries(f, "params", entries.params, entries.empty_params, StaticLeaf[]),
                tree_from_entries(f, "state", entries.state, entries.empty_state, entries.static),
            )
        end
    end
end

function load_params(path::AbstractString, ps_template, st_template)
    file, entries = weights_location(path)
    shas = entries === nothing ? Dict{String,String}() : entries.shas
    return HDF5.h5open(file, "r") do f
        check_weights_file(f, file)
        (fill_like(f, file, "/params", ps_template, Any[], shas), fill_like(f, file, "/state", st_template, Any[], shas))
    end
end

# A JSON path as a Vector{Any} of String/Int steps.
json_path(p) = Any[s isa AbstractString ? String(s) : Int(s) for s in p]

# The weights file of `path` and, for a bundle, what its manifest says about it: the
# (path, dataset, sha256) of each parameter and state argument in manifest order (Lux's
# depth-first order), the empty containers and the static state.
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
        sha(a) = (s = get(a, "sha256", nothing); s isa AbstractString ? String(s) : nothing)
        entry(a) = (json_path(a["path"]), String(a["dataset"]), sha(a))
        params = [entry(a) for a in m["arguments"] if a["role"] == "parameter"]
        state = [entry(a) for a in m["arguments"] if a["role"] == "state"]
        empty = get(m, "empty", nothing)
        empties(k) = empty === nothing ? Vector{Any}[] : [json_path(p) for p in get(empty, k, Any[])]
        static = [
            StaticLeaf(json_path(s["path"]), s["value"], String(s["julia_type"])) for s in get(m, "static_state", Any[])
        ]
        shas = Dict{String,String}(d => h for (_, d, h) in vcat(params, state) if h !== nothing)
        return file, (; params, state, empty_params=empties("params"), empty_state=empties("state"), static, shas)
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

# Nested trees built in insertion order: a node is a Vector of key => (node or leaf value).
const Node = Vector{Pair{Any,Any}}

# The child node at `key` of `node`, created empty if absent.
function child_node!(node::Node, key, path::AbstractVector)
    i = findfirst(p -> first(p) == key, node)
    if i === nothing
        child = Node()
        push!(node, key => child)
        return child
    end
    child = last(node[i])
    child isa Node || throw(BundleReadError("path $(path_label(path)) goes through an array or value"))
    return child
end

function insert_leaf!(node::Node, path::AbstractVector, value)
    isempty(path) && throw(BundleReadError("a parameter or state path is empty"))
    for (depth, key) in enumerate(path[1:(end - 1)])
        node = child_node!(node, key, path[1:depth])
    end
    any(p -> first(p) == last(path), node) && throw(BundleReadError("path $(path_label(path)) appears twice"))
    push!(node, last(path) => value)
    return nothing
end

# An empty container at `path` (spec §3.10): an empty node.
function insert_empty!(node::Node, path::AbstractVector)
    isempty(path) && return nothing
    for (depth, key) in enumerate(path)
        node = child_node!(node, key, path[1:depth])
    end
    isempty(node) || throw(BundleReadError("empty container $(path_label(path)) holds arrays"))
    return nothing
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

# Natural order ("layer_2" before "layer_10") for files whose groups do not track creation order.
natural_key(s) = [isdigit(first(m.match)) ? lpad(m.match, 20, '0') : String(m.match) for m in eachmatch(r"\d+|\D+", s)]

# The children of HDF5 group `g` in creation order if it tracks it, else in natural order.
function ordered_keys(g)::Vector{String}
    ks = keys(g)                                                     # HDF5 src/groups.jl:146-153
    tracked = try
        HDF5.get_create_properties(g).track_order                    # HDF5 src/highlevel.jl:114, src/types.jl:181-187
    catch
        false
    end
    tracked || sort!(ks; by=natural_key)
    return ks
end

# Reorder `node` (and its descendants) like the HDF5 group at `gpath`: children stored in the
# file first, in the file's order, then the others (configuration values) in insertion order.
function order_like_file!(node::Node, f, gpath::AbstractString)
    haskey(f, gpath) || return node
    g = f[gpath]
    try
        g isa HDF5.Group || return node
        rank = Dict(k => i for (i, k) in enumerate(ordered_keys(g)))
        stored = sort!([p for p in node if haskey(rank, string(first(p)))]; by=p -> rank[string(first(p))])
        others = [p for p in node if !haskey(rank, string(first(p)))]
        copyto!(node, vcat(stored, others))
    finally
        close(g)
    end
    for (k, c) in node
        c isa Node && order_like_file!(c, f, gpath * "/" * string(k))
    end
    return node
end

# A tree from the manifest: the arrays (each checked against its sha256), the empty
# containers and the static values, ordered like the file's groups.
function tree_from_entries(f, group::AbstractString, entries, empties, static::Vector{StaticLeaf})
    root = Node()
    for (path, dspath, sha) in entries
        A = read_array(f, dspath; sha256=sha)
        A === nothing && throw(BundleReadError("the manifest names dataset $dspath, which the weights file lacks"))
        insert_leaf!(root, path, A)
    end
    for path in empties
        insert_empty!(root, path)
    end
    for s in static
        insert_leaf!(root, s.path, static_value(s))
    end
    order_like_file!(root, f, "/" * group)
    return materialize(root)
end

const INTEGER_TYPES = (Int8, Int16, Int32, Int64, Int128, UInt8, UInt16, UInt32, UInt64, UInt128)

"""
The Julia value of a `static_state` entry, rebuilt from its `julia_type` by this fixed list of
forms (never `eval`): `Nothing`, `Bool`, `Symbol`, `String`, the integer types, and `Val{...}` of
a Bool, an integer or a Symbol.
"""
function static_value(s::StaticLeaf)
    t, v = s.julia_type, s.value
    fail() = throw(BundleReadError("static_state entry $(path_label(s.path)) has julia_type $(repr(t)) and value $(repr(v)), which load_params cannot rebuild"))
    t == "Nothing" && return v === nothing ? nothing : fail()
    t == "Bool" && return v isa Bool ? v : fail()
    t == "Symbol" && return v isa AbstractString ? Symbol(v) : fail()
    t == "String" && return v isa AbstractString ? String(v) : fail()
    for T in INTEGER_TYPES
        t == string(T) && return (v isa Integer && !(v isa Bool)) ? T(v) : fail()
    end
    m = match(r"^Val\{(.*)\}$", t)
    m === nothing && fail()
    p = m.captures[1]
    (p == "true" || p == "false") && return v isa Bool && string(v) == p ? Val(v) : fail()
    startswith(p, ":") && return v isa AbstractString && ":" * v == p ? Val(Symbol(v)) : fail()
    occursin(r"^-?\d+$", p) && return v isa Integer && !(v isa Bool) && string(v) == p ? Val(Int(v)) : fail()
    return fail()
end

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
    for k in ordered_keys(g)
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

# The template's structure, with every array leaf read from `prefix/<path>` (checked against
# the manifest's sha256 of that dataset when `shas` has one).
function fill_like(f, file, prefix::AbstractString, t, path::Vector{Any}, shas::Dict{String,String})
    if t isa NamedTuple
        return NamedTuple{keys(t)}(Tuple(fill_like(f, file, prefix, getfield(t, k), vcat(path, string(k)), shas) for k in keys(t)))
    elseif t isa Tuple
        return Tuple(fill_like(f, file, prefix, c, vcat(path, i), shas) for (i, c) in enumerate(t))
    elseif t isa ReactantLeaf || t isa AbstractArray{<:Number}
        dspath = prefix * "/" * join(string.(path), "/")
        A = read_array(f, dspath; sha256=get(shas, dspath, nothing))
        A === nothing && throw(BundleReadError("$file has no dataset $dspath for $(path_label(path))"))
        size(A) == size(t) || throw(
            BundleReadError("$dspath has Julia shape $(size(A)) but the template's $(path_label(path)) has $(size(t))"),
        )
        return restore_like(t, A)
    elseif t isa AbstractArray
        return reshape([fill_like(f, file, prefix, c, vcat(path, i), shas) for (i, c) in enumerate(t)], size(t))
    end
    return t
end

# `A` with the template leaf's element type, and on Reactant if the template leaf was.
restore_like(t::Reactant.AbstractConcreteArray, A) = Reactant.to_rarray(convert(Array{eltype(t)}, A))
restore_like(t::Reactant.AbstractConcreteNumber{T}, A) where {T} = Reactant.ConcreteRNumber(convert(T, A[]))
restore_like(t::AbstractArray{T}, A) where {T} = convert(Array{T}, A)
