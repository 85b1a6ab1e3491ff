# The HDF5 weights file (spec §4): /params and /state datasets at the arguments' paths, and
# the example inputs/outputs under /examples. HDF5.jl writes a Julia array's dims reversed
# (HDF5 src/dataspaces.jl:58-59), which is exactly the MLIR shape: no permutedims.

"""Create the groups above dataset path `dspath`, tracking creation order so a template-free
`load_params` sees keys in Lux's order (HDF5 src/properties.jl:285-304)."""
function ensure_groups!(f, dspath::AbstractString)
    parts = split(strip(dspath, '/'), '/')
    for i in 1:(length(parts) - 1)
        g = "/" * join(parts[1:i], "/")
        haskey(f, g) || close(HDF5.create_group(f, g; track_order=true))   # HDF5 src/groups.jl:39-52
    end
    return nothing
end

"""Write Julia array `A` (Julia layout) at `dspath` with its spec §4 encoding and `dtype` attribute."""
function write_array!(f, dspath::AbstractString, A::AbstractArray, dtype::AbstractString)
    ensure_groups!(f, dspath)
    data = encode_for_hdf5(A, dtype)
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
    return nothing
end

"""
Write the weights file: every parameter and state argument at its dataset, and, when
`examples` is given, `examples.inputs` (argument index => array) under /examples/inputs and
`examples.outputs` (result index => array) under /examples/outputs.
"""
function write_weights(path::AbstractString, arguments::Vector{ArgumentInfo}, datasets::Dict{Int,String}, examples)
    HDF5.h5open(path, "w"; track_order=true) do f                   # HDF5 src/file.jl:95-110
        for a in arguments
            a.role == "input" && continue
            write_array!(f, datasets[a.index], host(a.value), a.dtype)
        end
        if examples !== nothing
            for (i, (A, dtype)) in examples.inputs
                write_array!(f, "/examples/inputs/$i", A, dtype)
            end
            for (k, (A, dtype)) in examples.outputs
                write_array!(f, "/examples/outputs/$k", A, dtype)
            end
        end
    end
    return nothing
end

"""Read and decode dataset `dspath` of open file `f` (Julia layout); `nothing` if absent."""
function read_array(f, dspath::AbstractString)
    haskey(f, dspath) || return nothing
    obj = f[dspath]                                                  # HDF5 src/highlevel.jl:74-77
    try
        obj isa HDF5.Dataset || throw(BundleReadError("$dspath is not a dataset"))
        attrs = HDF5.attrs(obj)
        dtype = haskey(attrs, "dtype") ? String(attrs["dtype"]) : nothing
        raw = read(obj)                                              # HDF5 src/readwrite.jl:48-54
        raw isa AbstractArray || (raw = fill(raw))                   # scalar dataspace -> 0-dim
        return dtype === nothing ? collect(raw) : decode_from_hdf5(raw, dtype)
    finally
        close(obj)
    end
end
