# The HDF5 weights file (spec §4): /params and /state datasets at the arguments' paths, and
# the example inputs/outputs under /examples. HDF5.jl writes a Julia array's dims reversed
# (HDF5 src/dataspaces.jl:58-59), which is exactly the MLIR shape: no permutedims. For the same
# reason the memory of the stored Julia array, in Julia's column-major order, is the dataset's
# data in MLIR row-major order: that is what the per-dataset digest covers (spec §4.1: BLAKE3
# in format 3, sha256 in format 2).

"""
The `algorithm` digest (64 lowercase hex digits) of the memory of plain-bits array `data`, each
element little-endian: on every machine JuliaBridge runs on, the bytes as they lie in memory.
"""
function stored_digest(data::Array, algorithm::Symbol)::String
    T = eltype(data)
    isbitstype(T) || throw(ArgumentError("cannot hash an array of $T: not a plain bits type"))
    ENDIAN_BOM == 0x04030201 || (data = map(htol, data))          # bswap is defined for Complex too
    GC.@preserve data begin
        bytes = unsafe_wrap(Array, Ptr{UInt8}(pointer(data)), sizeof(data))
        return hex_digest(bytes, algorithm)
    end
end

"""
The digest of spec §4.1 of Julia array `A` holding values of bundle dtype `dtype`: the
`algorithm` hash (`:blake3`, format 3, the default; `:sha256`, format 2) of its canonical
bytes. The elements are taken in Julia's column-major memory order, which is the MLIR row-major
order of the dataset (HDF5.jl reverses the dims), encoded as §4 stores them (`encode_for_hdf5`:
16-bit floats as their UInt16 bits, Bool as one byte 0/1), complex numbers as (re, im) as Julia
lays them out, every value little-endian. It is a function of the values alone: a native half
dataset and its UInt16 encoding, a Bool bitfield and its UInt8 encoding, a 0-dimensional array
(its one element) and an empty one (the empty string) hash as the Python writer's
`juliabridge.bundle.files.digest.dataset_digest` does.
"""
canonical_digest(A::AbstractArray, dtype::AbstractString, algorithm::Symbol=:blake3)::String =
    stored_digest(canonical_encoding(A, dtype), algorithm)

"""`A` as spec §4 stores it (`encode_for_hdf5`), after checking it holds `dtype`'s Julia type."""
function canonical_encoding(A::AbstractArray, dtype::AbstractString)::Array
    T = julia_eltype(dtype)
    eltype(A) === T || throw(ArgumentError("a $dtype dataset holds $T values, got an array of $(eltype(A))"))
    return encode_for_hdf5(A, dtype)
end

"""Create `group` (an absolute path) and the groups above it, tracking creation order so
`load_params` sees keys in Lux's order (HDF5 src/properties.jl:285-304, src/types.jl:181-187)."""
function ensure_group!(f, group::AbstractString)
    parts = split(strip(group, '/'), '/'; keepempty=false)
    for i in eachindex(parts)
        g = "/" * join(parts[1:i], "/")
        haskey(f, g) || close(HDF5.create_group(f, g; track_order=true))   # HDF5 src/groups.jl:39-52
    end
    return nothing
end

"""The groups above dataset path `dspath`."""
ensure_groups!(f, dspath::AbstractString) = ensure_group!(f, dirname(dspath))

"""
Write Julia array `A` (Julia layout) at `dspath` with its spec §4 encoding and `dtype`
attribute; return its digest (spec §4.1, `canonical_digest` with `algorithm`).
"""
function write_array!(f, dspath::AbstractString, A::AbstractArray, dtype::AbstractString; algorithm::Symbol=:blake3)::String
    ensure_groups!(f, dspath)
    data = canonical_encoding(A, dtype)
    # A 0-dimensional array is written as its element: an HDF5 scalar dataspace
    # (HDF5 src/dataspaces.jl:122-123, src/datasets.jl:549-554).
    value = ndims(data) == 0 ? data[] : data
    dset, dt = HDF5.create_dataset(f, dspath, value)               # HDF5 src/datasets.jl:269-280
    try
        HDF5.write_dataset(dset, dt, value)                          # HDF5 src/datasets.jl:491-554
        HDF5.attrs(dset)["dtype"] = String(dtype)                     # HDF5 src/attributes.jl:329-362
    finally
        close(dt)
        close(dset)
    end
    return stored_digest(data, algorithm)
end

"""
Call `group(path)` for every NamedTuple/Tuple/struct container of `tree` (empty ones too) and
`leaf(value, path)` for every Reactant array, depth-first in field order: the order in which
Lux's NamedTuples list their keys.
"""
function foreach_node(group, leaf, v, path::Vector{Any}=Any[])
    if v isa ReactantLeaf
        leaf(v, path)
    elseif v isa NamedTuple || v isa Tuple
        isempty(path) || group(path)
        for (k, c) in pairs(v)
            foreach_node(group, leaf, c, vcat(path, v isa NamedTuple ? string(k) : k))
        end
    elseif v isa AbstractDict
        isempty(path) || group(path)
        for (k, c) in v
            foreach_node(group, leaf, c, vcat(path, string(k)))
        end
    elseif v isa AbstractArray && !(v isa AbstractArray{<:Number})
        isempty(path) || group(path)
        for (i, c) in enumerate(v)
            foreach_node(group, leaf, c, vcat(path, i))
        end
    elseif !(v isa AbstractArray || v isa Number || is_opaque(v)) && isstructtype(typeof(v)) && nfields(v) > 0
        isempty(path) || group(path)
        for i in 1:nfields(v)
            isdefined(v, i) || continue
            foreach_node(group, leaf, getfield(v, i), vcat(path, string(fieldname(typeof(v), i))))
        end
    end
    return nothing
end

"""
Write the weights file and return the digest (spec §4.1, `canonical_digest` with `algorithm`:
`:blake3` for format 3, `:sha256` for format 2) of every dataset: `args` (argument index =>
digest) and, when `examples` is given, `inputs`/`outputs` (index => digest).

`trees` are `"params" => ps` and `"state" => st` (the Reactant trees that were traced): they are
walked depth-first so that groups, empty ones included (spec §3.10), and datasets are created
in Lux's order. `values[i]` is the CPU value of argument `i` to store. `examples.inputs`
(argument index => (array, dtype)) go to /examples/inputs, `examples.outputs` to
/examples/outputs.
"""
function write_weights(
    path::AbstractString, trees, arguments::Vector{ArgumentInfo}, datasets::Dict{Int,String}, values, examples;
    algorithm::Symbol=:blake3,
)
    digests = (; args=Dict{Int,String}(), inputs=Dict{Int,String}(), outputs=Dict{Int,String}())
    by_leaf = IdDict{Any,ArgumentInfo}(a.value => a for a in arguments if a.role != "input")
    HDF5.h5open(path, "w"; track_order=true) do f                   # HDF5 src/file.jl:95-110
        write_argument(a) =
            haskey(digests.args, a.index) ||
            (digests.args[a.index] = write_array!(f, datasets[a.index], values[a.index + 1], a.dtype; algorithm))
        for (group, tree) in trees
            ensure_group!(f, "/" * group)
            function write_leaf(leaf, _)
                arg = get(by_leaf, leaf, nothing)
                arg === nothing || write_argument(arg)
                return nothing
            end
            foreach_node(p -> ensure_group!(f, "/" * group * "/" * join(string.(p), "/")), write_leaf, tree)
        end
        foreach(write_argument, (a for a in arguments if a.role != "input"))   # any the walk missed
        if examples !== nothing
            for (i, (A, dtype)) in examples.inputs
                digests.inputs[i] = write_array!(f, "/examples/inputs/$i", A, dtype; algorithm)
            end
            for (k, (A, dtype)) in examples.outputs
                digests.outputs[k] = write_array!(f, "/examples/outputs/$k", A, dtype; algorithm)
            end
        end
    end
    return digests
end

"""
Read and decode dataset `dspath` of open file `f` (Julia layout); `nothing` if absent.

The dataset must carry its `dtype` attribute (spec §4), equal to `dtype` when the manifest gives
one; with `julia_shape`, it must have that shape. With `digest`, the `algorithm` digest (spec
§4.1; `:blake3` in format 3, `:sha256` in format 2) of the values just read must match it: it
is taken over the decoded values (`canonical_digest`), so it does not depend on the stored type
(a native half or a Bool bitfield dataset hashes like its UInt16/UInt8 encoding), as the Python
reader's is. A BLAKE3 digest cannot be checked when BLAKE3 failed its self-test in this session
(`blake3_selftest_problem`): that is a `BundleReadError` too.
"""
function read_array(
    f,
    dspath::AbstractString;
    digest::Union{Nothing,AbstractString}=nothing,
    algorithm::Symbol=:blake3,
    dtype::Union{Nothing,AbstractString}=nothing,
    julia_shape=nothing,
)
    haskey(f, dspath) || return nothing
    if digest !== nothing && algorithm === :blake3
        problem = blake3_selftest_problem()
        problem === nothing || throw(BundleReadError("cannot verify the blake3 digest of dataset $dspath: $(blake3_unusable(problem))"))
    end
    obj = f[dspath]                                                  # HDF5 src/highlevel.jl:74-77
    try
        obj isa HDF5.Dataset || throw(BundleReadError("$dspath is not a dataset"))
        attrs = HDF5.attrs(obj)
        haskey(attrs, "dtype") || throw(
            BundleReadError("dataset $dspath has no dtype attribute; every dataset of a bundle or weights file carries its MLIR element type (spec §4)"),
        )
        tag = attrs["dtype"]
        tag isa AbstractString || throw(BundleReadError("dataset $dspath: its dtype attribute is a $(typeof(tag)), not a string"))
        (dtype === nothing || tag == dtype) ||
            throw(BundleReadError("dataset $dspath has dtype attribute $(repr(tag)) but the manifest says $(repr(dtype))"))
        raw = read(obj)                                              # HDF5 src/readwrite.jl:48-54
        raw isa AbstractArray || (raw = fill(raw))                   # scalar dataspace -> 0-dim
        A = try
            decode_from_hdf5(raw, String(tag))
        catch err
            err isa BundleReadError ? throw(BundleReadError("dataset $dspath: $(err.msg)")) : rethrow()
        end
        (julia_shape === nothing || collect(size(A)) == collect(julia_shape)) || throw(
            BundleReadError("dataset $dspath has Julia shape $(size(A)) but the manifest says $(Tuple(julia_shape))"),
        )
        if digest !== nothing
            got = canonical_digest(A, String(tag), algorithm)
            got == digest || throw(
                BundleReadError(
                    "dataset $dspath: the $algorithm digest of its data is $got but the manifest records $digest; the weights file was modified or is corrupt. Export the bundle again",
                ),
            )
        end
        return A
    finally
        close(obj)
    end
end
