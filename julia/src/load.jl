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

Every dataset must carry its `dtype` attribute (spec §4); for a bundle it must equal the
manifest's, with the manifest's shape. Format 3 and 2 bundles record a digest of every dataset
(spec §4.1: its `blake3` in format 3, its `sha256` in format 2), checked as the data is read; a
`weights.sha256` (required in format 1) is checked over the whole file. Throws
`BundleReadError` for a missing, malformed or modified file, and for a format-3 bundle when
JuliaBridge's BLAKE3 failed its self-test in this session (its digests cannot be checked then).
"""
function load_params(path::AbstractString)
    file, plan = weights_location(path)
    return HDF5.h5open(file, "r") do f
        check_weights_file(f, file)
        if plan === nothing
            (read_group_tree(f, "params"), read_group_tree(f, "state"))
        else
            (
                tree_from_entries(f, "params", plan.params, plan.empty_params, StaticLeaf[]),
                tree_from_entries(f, "state", plan.state, plan.empty_state, plan.static),
            )
        end
    end
end

function load_params(path::AbstractString, ps_template, st_template)
    file, plan = weights_location(path)
    by_path = plan === nothing ? nothing : entries_by_path(plan)
    return HDF5.h5open(file, "r") do f
        check_weights_file(f, file)
        (
            fill_like(f, file, "params", ps_template, Any[], by_path),
            fill_like(f, file, "state", st_template, Any[], by_path),
        )
    end
end

"""What a bundle's manifest says about one parameter or state argument's dataset."""
struct DatasetEntry
    path::Vector{Any}
    tied_paths::Vector{Vector{Any}}
    dataset::String
    digest::Union{Nothing,String}   # nothing in format 1 (spec §8: not part of it, ignored)
    algorithm::Symbol               # of `digest`: :blake3 (format 3), :sha256 (format 2), :none
    dtype::String
    julia_shape::Vector{Int}
end

# The manifest value at `obj[key]` (`at` names `obj` in messages), of type `T`, or a BundleReadError saying what was expected.
function manifest_value(obj, key::String, ::Type{T}, mpath, at::String; default=missing) where {T}
    obj isa AbstractDict || throw(BundleReadError("$mpath: $at is not a JSON object"))
    if !haskey(obj, key) || obj[key] === nothing
        default === missing || return default
        throw(BundleReadError("$mpath: $at has no $(repr(key)); the manifest does not follow docs/bundle-format.md"))
    end
    v = obj[key]
    v isa T || throw(BundleReadError("$mpath: $at.$key is a $(typeof(v)), expected $T"))
    return v
end

# A JSON path as a Vector{Any} of String/Int steps (spec §3.8: names, or 1-based positions).
function json_path(p, mpath="manifest.json", at="path")::Vector{Any}
    p isa AbstractVector || throw(BundleReadError("$mpath: $at is not a JSON array"))
    out = Any[]
    for s in p
        if s isa AbstractString
            push!(out, String(s))
        elseif s isa Integer && !(s isa Bool) && 1 <= s <= MAX_PATH_STEP
            push!(out, Int(s))
        else
            throw(BundleReadError("$mpath: $at holds the step $(repr(s)); steps are names or positions in [1, 2^31]"))
        end
    end
    return out
end

function manifest_dims(dims, mpath, at)::Vector{Int}
    all(d -> d isa Integer && !(d isa Bool) && 0 <= d <= MAX_DIM, dims) ||
        throw(BundleReadError("$mpath: $at holds $(repr(dims)); dimensions are integers in [0, 2^40]"))
    return Int[Int(d) for d in dims]
end

# The weights file of `path` and, for a bundle, what its manifest says about it: one
# DatasetEntry per parameter and state argument in manifest order (Lux's depth-first order),
# the empty containers and (formats 2 and 3) the static state. The whole-file `weights.sha256`
# is checked here when the manifest has one (required in format 1, optional in formats 2 and 3).
function weights_location(path::AbstractString)
    if isdir(path)
        mpath = joinpath(path, MANIFEST_FILE)
        (isfile(mpath) && !islink(mpath)) || throw(BundleReadError("$path is a directory without a regular file $MANIFEST_FILE, so not a bundle"))
        m = JSON.parsefile(mpath)                                    # JSON src/parse.jl:241
        m isa AbstractDict || throw(BundleReadError("$mpath is not a JSON object"))
        get(m, "format", nothing) == FORMAT || throw(BundleReadError("$mpath is not a juliabridge bundle manifest"))
        v = get(m, "format_version", 0)
        (v isa Integer && !(v isa Bool) && 1 <= v <= FORMAT_VERSION) ||
            throw(BundleReadError("$path has format_version $(repr(v)); this JuliaBridge reads 1 to $FORMAT_VERSION, upgrade it"))
        scheme = digest_scheme_of(v)                                  # nothing in format 1
        weights = manifest_value(m, "weights", AbstractDict, mpath, "top level")
        name = manifest_value(weights, "file", AbstractString, mpath, "weights")
        why = unsafe_file_name(name)
        why === nothing || throw(BundleReadError("$mpath: weights.file $(repr(name)) $why; a bundle names only its own files"))
        file = joinpath(path, name)
        islink(file) && throw(BundleReadError("$file is a symlink; bundles hold regular files only"))
        isfile(file) || throw(BundleReadError("$file is missing or not a regular file"))
        whole = manifest_value(weights, "sha256", AbstractString, mpath, "weights"; default=nothing)
        (v == 1 && whole === nothing) && throw(BundleReadError("$mpath: a format-1 manifest records weights.sha256"))
        if whole !== nothing
            got = file_sha256(file)
            got == whole || throw(BundleReadError("$file: sha256 is $got but the manifest records $whole; the file was modified or is corrupt"))
        end
        params = DatasetEntry[]
        state = DatasetEntry[]
        for (i, a) in enumerate(manifest_value(m, "arguments", AbstractVector, mpath, "top level"))
            at = "arguments[$(i - 1)]"
            role = manifest_value(a, "role", AbstractString, mpath, at)
            role in ("parameter", "state") || continue
            # Format 3: `blake3`; format 2: `sha256`; the other key, if present, is not part of
            # that format and is ignored (spec §4.1, §8).
            digest = nothing
            if scheme !== nothing
                digest = manifest_value(a, scheme.key, AbstractString, mpath, at)
                occursin(HEX64_RE, digest) || throw(BundleReadError("$mpath: $at.$(scheme.key) is not 64 lowercase hex digits"))
            end
            entry = DatasetEntry(
                json_path(manifest_value(a, "path", AbstractVector, mpath, at), mpath, "$at.path"),
                [json_path(p, mpath, "$at.tied_paths") for p in manifest_value(a, "tied_paths", AbstractVector, mpath, at; default=Any[])],
                String(manifest_value(a, "dataset", AbstractString, mpath, at)),
                digest === nothing ? nothing : String(digest),
                scheme === nothing ? :none : scheme.algorithm,
                String(manifest_value(a, "dtype", AbstractString, mpath, at)),
                manifest_dims(manifest_value(a, "julia_shape", AbstractVector, mpath, at), mpath, "$at.julia_shape"),
            )
            push!(role == "parameter" ? params : state, entry)
        end
        # Refused before any dataset is read: BLAKE3 digests that cannot be checked here.
        if scheme !== nothing && scheme.algorithm === :blake3 && !(isempty(params) && isempty(state))
            problem = blake3_selftest_problem()
            problem === nothing || throw(BundleReadError("$path is a format-$v bundle: $(blake3_unusable(problem))"))
        end
        empty = get(m, "empty", nothing)
        empties(k) = empty isa AbstractDict ? [json_path(p, mpath, "empty.$k") for p in get(empty, k, Any[])] : Vector{Any}[]
        # static_state is format 2 and 3 (spec §8: a format-1 reader ignores it).
        static = StaticLeaf[]
        if v >= 2
            for (j, s) in enumerate(manifest_value(m, "static_state", AbstractVector, mpath, "top level"; default=Any[]))
                at = "static_state[$(j - 1)]"
                (s isa AbstractDict && haskey(s, "value")) || throw(BundleReadError("$mpath: $at has no value"))
                push!(
                    static,
                    StaticLeaf(
                        json_path(manifest_value(s, "path", AbstractVector, mpath, at), mpath, "$at.path"),
                        s["value"],
                        String(manifest_value(s, "julia_type", AbstractString, mpath, at)),
                    ),
                )
            end
        end
        return file, (; params, state, empty_params=empties("params"), empty_state=empties("state"), static)
    end
    isfile(path) || throw(BundleReadError("no bundle directory or weights file at $path"))
    return path, nothing
end

# A standalone weights file saved from Python says so in its root attributes (spec §4).
function check_weights_file(f, file)
    a = HDF5.attrs(f)
    if haskey(a, "format")
        fmt = a["format"]
        fmt in (WEIGHTS_FORMAT, FORMAT) || throw(BundleReadError("$file has format $(repr(fmt)), not $WEIGHTS_FORMAT"))
        newest = fmt == WEIGHTS_FORMAT ? WEIGHTS_FORMAT_VERSION : FORMAT_VERSION
        v = haskey(a, "format_version") ? a["format_version"] : 1
        (v isa Integer && v <= newest) || throw(BundleReadError("$file has format_version $(repr(v)); this JuliaBridge reads up to $newest, upgrade it"))
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

# A tree from the manifest: the arrays (each checked against the manifest's dtype, shape and,
# in formats 2 and 3, digest; a tied array at every one of its paths), the empty containers and the
# static values, ordered like the file's groups.
function tree_from_entries(f, group::AbstractString, entries::Vector{DatasetEntry}, empties, static::Vector{StaticLeaf})
    root = Node()
    for e in entries
        A = read_entry(f, e)
        for p in vcat([e.path], e.tied_paths)
            insert_leaf!(root, p, A)
        end
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

function read_entry(f, e::DatasetEntry)
    A = read_array(f, e.dataset; digest=e.digest, algorithm=e.algorithm, dtype=e.dtype, julia_shape=e.julia_shape)
    A === nothing && throw(BundleReadError("the manifest names dataset $(e.dataset), which the weights file lacks"))
    return A
end

# The bundle's entries by ("params"/"state", path), tied paths included.
function entries_by_path(plan)::Dict{Tuple{String,Vector{Any}},DatasetEntry}
    out = Dict{Tuple{String,Vector{Any}},DatasetEntry}()
    for (group, entries) in ("params" => plan.params, "state" => plan.state), e in entries, p in vcat([e.path], e.tied_paths)
        out[(group, p)] = e
    end
    return out
end

const INTEGER_TYPES = (Int8, Int16, Int32, Int64, Int128, UInt8, UInt16, UInt32, UInt64, UInt128)
const FLOAT_TYPES = (Float16, Float32, Float64)

"""
The Julia value of a `static_state` entry, rebuilt from its `julia_type` by this fixed list of
forms (never `eval`): `Nothing`, `Bool`, `Symbol`, `String`, the integer and float types, and
`Val{...}` of a Bool, an `Int` or a Symbol.
"""
function static_value(s::StaticLeaf)
    t, v = s.julia_type, s.value
    fail() = throw(BundleReadError("static_state entry $(path_label(s.path)) has julia_type $(repr(t)) and value $(repr(v)), which load_params cannot rebuild"))
    t == "Nothing" && return v === nothing ? nothing : fail()
    t == "Bool" && return v isa Bool ? v : fail()
    t == "Symbol" && return v isa AbstractString ? Symbol(v) : fail()
    t == "String" && return v isa AbstractString ? String(v) : fail()
    for T in INTEGER_TYPES
        t == string(T) && return (v isa Integer && !(v isa Bool) && typemin(T) <= v <= typemax(T)) ? T(v) : fail()
    end
    for T in FLOAT_TYPES
        t == string(T) && return (v isa Real && !(v isa Bool)) ? T(v) : fail()
    end
    m = match(r"^Val\{(.*)\}\z", t)
    m === nothing && fail()
    p = m.captures[1]
    (p == "true" || p == "false") && return v isa Bool && string(v) == p ? Val(v) : fail()
    startswith(p, ":") && return v isa AbstractString && ":" * v == p ? Val(Symbol(v)) : fail()
    occursin(r"^-?\d+\z", p) && return v isa Integer && !(v isa Bool) && typemin(Int) <= v <= typemax(Int) && string(v) == p ? Val(Int(v)) : fail()
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

# The template's structure, with every array leaf read from the file: for a bundle, from the
# dataset the manifest gives for that path (`by_path`, checked against its dtype, shape and
# digest); for a standalone weights file, from `/group/<path>`.
function fill_like(f, file, group::AbstractString, t, path::Vector{Any}, by_path)
    if t isa NamedTuple
        return NamedTuple{keys(t)}(Tuple(fill_like(f, file, group, getfield(t, k), vcat(path, string(k)), by_path) for k in keys(t)))
    elseif t isa Tuple
        return Tuple(fill_like(f, file, group, c, vcat(path, i), by_path) for (i, c) in enumerate(t))
    elseif t isa ReactantLeaf || t isa AbstractArray{<:Number}
        A = if by_path === nothing
            dspath = "/" * group * "/" * join(string.(path), "/")
            a = read_array(f, dspath)
            a === nothing && throw(BundleReadError("$file has no dataset $dspath for $(path_label(path))"))
            a
        else
            e = get(by_path, (String(group), path), nothing)
            e === nothing && throw(BundleReadError("the bundle's manifest has no $group array at $(path_label(path)), which the template has"))
            read_entry(f, e)
        end
        size(A) == size(t) || throw(
            BundleReadError("$group.$(path_label(path)) has Julia shape $(size(A)) in $file but the template's has $(size(t))"),
        )
        return restore_like(t, A)
    elseif t isa AbstractArray
        return reshape([fill_like(f, file, group, c, vcat(path, i), by_path) for (i, c) in enumerate(t)], size(t))
    end
    return t
end

# `A` with the template leaf's element type, and on Reactant if the template leaf was.
restore_like(t::Reactant.AbstractConcreteArray, A) = Reactant.to_rarray(convert(Array{eltype(t)}, A))
restore_like(t::Reactant.AbstractConcreteNumber{T}, A) where {T} = Reactant.ConcreteRNumber(convert(T, A[]))
restore_like(t::AbstractArray{T}, A) where {T} = convert(Array{T}, A)
