# Element types and the HDF5 storage of docs/bundle-format.md §4, with plain HDF5.jl calls.
# HDF5.jl writes a Julia array's dims reversed, which is the MLIR shape: no permutedims.

const DTYPES = (
    Float16 => "f16", BFloat16 => "bf16", Float32 => "f32", Float64 => "f64", Bool => "i1",
    Int8 => "i8", Int16 => "i16", Int32 => "i32", Int64 => "i64",
    UInt8 => "ui8", UInt16 => "ui16", UInt32 => "ui32", UInt64 => "ui64",
    ComplexF32 => "complex<f32>", ComplexF64 => "complex<f64>",
)

"""The dtype name (spec §3.9) of element type `T`; an ExportError naming `what` if it has none."""
function dtype_of(T::Type, what="an array")::String
    for (J, name) in DTYPES
        T === J && return name
    end
    throw(ExportError("$what has element type $T, which has no bundle dtype; use one of $(join(first.(DTYPES), ", "))"))
end

"""The element type of dtype name `name`."""
function eltype_of(name::AbstractString)::Type
    for (J, n) in DTYPES
        n == name && return J
    end
    throw(BundleReadError("unknown dtype $(repr(name)) (docs/bundle-format.md §3.9 lists them)"))
end

"""
Write array `A` at `name` (e.g. "/params/layer_1/weight", intermediate groups are created) as
§4 stores it: bf16/f16 as their UInt16 bits, Bool as UInt8 0/1, complex as HDF5.jl's compound
{r, i}, a 0-dimensional array as an HDF5 scalar; with the string attribute `dtype`.
"""
function write_array(f, name::AbstractString, A::AbstractArray)
    tag = dtype_of(eltype(A), name)
    data = if tag in ("bf16", "f16")
        map(v -> reinterpret(UInt16, v), Array(A))
    elseif tag == "i1"
        map(UInt8, Array(A))
    else
        Array(A)
    end
    f[name] = ndims(data) == 0 ? data[] : data        # HDF5.jl's documented `parent[name] = data`
    dset = f[name]
    try
        HDF5.attrs(dset)["dtype"] = tag              # documented (HDF5 src/attributes.jl:317-329)
    finally
        close(dset)
    end
    return nothing
end

"""The array at dataset `name` of file `f` (Julia layout, element type from its `dtype` attribute)."""
function read_array(f, name::AbstractString)::Array
    dset = f[name]
    try
        return read_array(dset, name)
    finally
        close(dset)
    end
end

"""The array of open dataset `dset`, called `name` in messages."""
function read_array(dset::HDF5.Dataset, name::AbstractString)::Array
    haskey(HDF5.attrs(dset), "dtype") || throw(BundleReadError("dataset $name has no dtype attribute (docs/bundle-format.md §4)"))
    tag = HDF5.attrs(dset)["dtype"]
    T = eltype_of(tag)
    raw = read(dset)
    raw isa AbstractArray || (raw = fill(raw))       # a scalar dataset: a 0-dimensional array
    if T <: Union{Float16,BFloat16} && eltype(raw) === UInt16
        return map(v -> reinterpret(T, v), raw)
    elseif T === Bool && eltype(raw) <: Integer
        all(v -> v == 0 || v == 1, raw) || throw(BundleReadError("dataset $name (i1) holds values other than 0 and 1"))
        return map(!iszero, raw)
    end
    eltype(raw) === T || throw(BundleReadError("dataset $name holds $(eltype(raw)) values but its dtype attribute says $tag"))
    return raw
end
