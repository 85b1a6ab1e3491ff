# load_params: weights saved from Python (`juliabridge.save_params`) or written by export_lux,
# back into Lux's trees, with plain HDF5.jl reads mapped by names.

"""
    load_params(path) -> (ps, st)
    load_params(path, ps_template, st_template) -> (ps, st)

Read `/params/<path>` and `/state/<path>` (docs/bundle-format.md §4) of a weights `.h5` file
(Python's `juliabridge.save_params`), a Julia export directory or a bundle directory. With
templates (e.g. from `Lux.setup`) the result has exactly their structure: each array leaf is read
at its path and must have the template leaf's shape and element type (a Reactant array gives a
Reactant array); empty layers, settings (`training = Val(false)`) and RNGs are the template's.
Without: NamedTuples from the file's groups (keys in natural order, `layer_2` before `layer_10`;
keys 1..n make a Tuple), and for a directory also the tied paths, empty containers and static
state its description records; for a file from Python's `save_params`, the empty containers of
its tree record. Digests are not checked (Python's `juliabridge verify` does).
Throws `BundleReadError` for a missing or malformed file or a template that does not match it.
"""
function load_params(path::AbstractString)
    file, desc = weights_file(path)
    return HDF5.h5open(file, "r") do f
        ps, st = (haskey(f, g) ? read_group(f[g]) : Node() for g in ("params", "state"))
        if desc !== nothing
            for a in desc["arguments"], t in get(a, "tied_paths", [])
                a["role"] in ("parameter", "state") && insert_at!(a["role"] == "state" ? st : ps, t, value_at(a["role"] == "state" ? st : ps, a["path"]))
            end
            empties = something(get(desc, "empty", nothing), Dict())
            foreach(p -> insert_at!(ps, p, Node()), get(empties, "params", []))
            foreach(p -> insert_at!(st, p, Node()), get(empties, "state", []))
            foreach(s -> insert_at!(st, s["path"], static_from(s)), something(get(desc, "static_state", nothing), []))
        elseif haskey(f, TREE_RECORD)
            # Python's save_params records the empty containers (a MaxPool's NamedTuple())
            # that HDF5 groups cannot hold (docs/bundle-format.md §4.2).
            record = try
                JSON.parse(String(read_array(f, TREE_RECORD)))
            catch err
                err isa BundleReadError ? rethrow() : throw(BundleReadError("$file: $TREE_RECORD is not JSON ($(sprint(showerror, err)))"))
            end
            for (node, g) in ((ps, "params"), (st, "state"))
                empties = record isa AbstractDict && get(record, g, nothing) isa AbstractDict ? get(record[g], "empty", []) : nothing
                empties isa AbstractVector && all(p -> p isa AbstractVector, empties) || throw(BundleReadError("$file: $TREE_RECORD has no list of paths at $g.empty (docs/bundle-format.md §4.2)"))
                foreach(p -> insert_at!(node, p, Node()), empties)
            end
        end
        (materialize(ps), materialize(st))
    end
end

function load_params(path::AbstractString, ps_template, st_template)
    file, _ = weights_file(path)
    return HDF5.h5open(file, "r") do f
        function leaf(group)
            return function (v, p)
                v isa AbstractArray{<:Number} || return v
                name = "/" * join([group; string.(p)], "/")
                haskey(f, name) || throw(BundleReadError("$file has no dataset $name for the template's $(label(group, p))"))
                A = read_array(f, name)
                (size(A), eltype(A)) == (size(v), eltype(v)) || throw(BundleReadError("$name is a $(eltype(A)) array of size $(size(A)) in $file, the template's a $(eltype(v)) array of size $(size(v))"))
                return v isa Reactant.ConcreteRArray ? Reactant.to_rarray(A) : A
            end
        end
        (map_tree(leaf("params"), ps_template, :ps), map_tree(leaf("state"), st_template, :st))
    end
end

"""The weights file of `path` and the description of its directory (`nothing` for a file)."""
function weights_file(path::AbstractString)
    isfile(path) && return (path, nothing)
    isdir(path) || throw(BundleReadError("no weights file or export directory at $path"))
    for name in (DESCRIPTION_FILE, "manifest.json")
        isfile(joinpath(path, name)) || continue
        desc = JSON.parsefile(joinpath(path, name))
        file = string(get(get(desc, "weights", Dict()), "file", ""))
        occursin(r"^[^/\\]+\z", file) && !(file in (".", "..")) || throw(BundleReadError("$path/$name names the weights file $(repr(file)); expected a plain file name"))
        return (joinpath(path, file), desc)
    end
    throw(BundleReadError("$path has neither $DESCRIPTION_FILE nor manifest.json"))
end

"""The dataset of Python's tree record (juliabridge/lux/params_io.py: TREE_DATASET)."""
const TREE_RECORD = "/juliabridge/tree"

# Trees under construction: a node lists key => (node or value) in insertion order.
const Node = Vector{Pair{Any,Any}}

natural_key(s) = [isdigit(m.match[1]) ? lpad(m.match, 20, '0') : String(m.match) for m in eachmatch(r"\d+|\D+", s)]

function read_group(g)::Node
    node = Node()
    for k in keys(g)
        obj = g[k]
        try
            key = occursin(r"^[1-9]\d*\z", k) ? parse(Int, k) : String(k)
            push!(node, key => (obj isa HDF5.Group ? read_group(obj) : read_array(obj, k)))
        finally
            close(obj)
        end
    end
    return node
end

function value_at(node, path)
    for k in path
        i = node isa Node ? findfirst(p -> first(p) == k, node) : nothing
        i === nothing && throw(BundleReadError("the description names $(join(string.(path), ".")), which the weights file lacks"))
        node = last(node[i])
    end
    return node
end

function insert_at!(node::Node, path, value)
    isempty(path) && throw(BundleReadError("an empty path in the description"))
    for k in path[1:(end - 1)]
        i = findfirst(p -> first(p) == k, node)
        i === nothing && (push!(node, k => Node()); i = length(node))
        node = last(node[i])
        node isa Node || throw(BundleReadError("the path $(join(string.(path), ".")) goes through an array"))
    end
    any(p -> first(p) == last(path), node) || push!(node, last(path) => value)
    return nothing
end

materialize(v) = v
function materialize(node::Node)
    isempty(node) && return NamedTuple()
    sort!(node; by=p -> natural_key(string(first(p))))
    ks, vs = first.(node), [materialize(last(p)) for p in node]
    all(k -> k isa Integer, ks) || return NamedTuple{Tuple(Symbol.(string.(ks)))}(Tuple(vs))
    ks == 1:length(ks) || throw(BundleReadError("positions $ks are not 1..n"))
    return Tuple(vs)
end

"""The Julia value of a `static_state` entry, from a fixed list of forms (never `eval`)."""
function static_from(s)
    t, v = s["julia_type"], s["value"]
    startswith(t, "Val{:") && return Val(Symbol(v))
    startswith(t, "Val{") && v isa Union{Bool,Integer} && return Val(v)
    t == "Symbol" && return Symbol(v)
    for T in (Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, String, Nothing)
        t == string(T) && return T === Nothing ? nothing : convert(T, v)
    end
    throw(BundleReadError("static_state $(s["path"]) has julia_type $t, which load_params does not rebuild; pass templates"))
end
