# Element types: Julia type <-> bundle dtype (the MLIR element type name, spec §3.9), and the
# fixed HDF5 storage encodings of spec §4 for the types HDF5.jl cannot write portably.

# Order matters only for error messages. BFloat16 is the BFloat16s.jl type Reactant uses
# (`using BFloat16s: BFloat16` in Reactant src/Reactant.jl:22; MLIR name `bf16` per
# Reactant src/mlir/IR/Type.jl:165,180-182).
const DTYPES = (
    Float16 => "f16",
    Reactant.BFloat16 => "bf16",
    Float32 => "f32",
    Float64 => "f64",
    Bool => "i1",
    Int8 => "i8",
    Int16 => "i16",
    Int32 => "i32",
    Int64 => "i64",
    UInt8 => "ui8",
    UInt16 => "ui16",
    UInt32 => "ui32",
    UInt64 => "ui64",
    ComplexF32 => "complex<f32>",
    ComplexF64 => "complex<f64>",
)

"""The bundle dtype string of Julia element type `T` (e.g. `Float32` -> "f32")."""
function mlir_dtype(T::Type)::String
    for (J, name) in DTYPES
        T === J && return name
    end
    supported = join((string(J) for (J, _) in DTYPES), ", ")
    throw(ExportError("element type $T has no bundle dtype; supported: $supported"))
end

"""The Julia element type of bundle dtype `name` (e.g. "bf16" -> `BFloat16`)."""
function julia_eltype(name::AbstractString)::Type
    for (J, n) in DTYPES
        n == name && return J
    end
    throw(BundleReadError("unknown dtype \"$name\" (spec §3.9 lists the allowed ones)"))
end

is_float_dtype(name::AbstractString) = name in ("f16", "bf16", "f32", "f64")
is_complex_dtype(name::AbstractString) = startswith(name, "complex<")

"""
`A` as stored in HDF5 (spec §4): 16-bit floats as UInt16 bit patterns, Bool as UInt8 0/1,
every other type as is; always a fresh `Array` of `A`'s shape and of the stored element type,
empty and 0-dimensional arrays included (`convert_each`).
"""
function encode_for_hdf5(A::AbstractArray, dtype::AbstractString)::Array
    if dtype == "f16" || dtype == "bf16"
        # HDF5.jl has no BFloat16 mapping and Float16 only with recent libhdf5
        # (HDF5 src/typeconversions.jl:135-153), so store the bits.
        return convert_each(v -> reinterpret(UInt16, v), UInt16, A)
    elseif dtype == "i1"
        # HDF5.jl would write Bool as an H5T_NATIVE_B8 bitfield (typeconversions.jl:137).
        return convert_each(v -> v ? 0x01 : 0x00, UInt8, A)
    else
        return collect(A)
    end
end

"""Inverse of `encode_for_hdf5`: the array a reader gets back for a dataset of `dtype`."""
function decode_from_hdf5(raw::AbstractArray, dtype::AbstractString)::Array
    T = julia_eltype(dtype)
    if dtype == "f16" || dtype == "bf16"
        eltype(raw) === T && return collect(raw)          # a native IEEE half dataset
        eltype(raw) === UInt16 || throw(BundleReadError("a $dtype dataset must hold uint16 bit patterns, found $(eltype(raw))"))
        return convert_each(v -> reinterpret(T, v), T, raw)
    elseif dtype == "i1"
        eltype(raw) === Bool && return collect(raw)       # an HDF5 bitfield bool
        eltype(raw) <: Integer || throw(BundleReadError("an i1 dataset must hold integers 0/1, found $(eltype(raw))"))
        # Spec §4: Bool is stored as 0 or 1; another value would read as true yet not hash as it
        # (the Python reader refuses it too, juliabridge/bundle/weights/__init__.py `decode`).
        bad = findfirst(v -> !(iszero(v) || isone(v)), raw)
        bad === nothing || throw(BundleReadError("an i1 (Bool) dataset holds the value $(raw[bad]); Bool is stored as 0 or 1 (docs/bundle-format.md §4). Export the bundle again"))
        return convert_each(!iszero, Bool, raw)
    end
    eltype(raw) === T && return collect(raw)
    throw(BundleReadError("dataset has element type $(eltype(raw)) but its dtype attribute says $dtype"))
end

"""`f` applied to every element of `A`, in an `Array{T}` of `A`'s shape (also when empty)."""
function convert_each(f, ::Type{T}, A::AbstractArray)::Array{T} where {T}
    out = Array{T}(undef, size(A))
    for (i, v) in zip(eachindex(out), A)
        out[i] = f(v)
    end
    return out
end

"""Default (rtol, atol) a reader's `verify` uses for outputs of these dtypes (spec §3.7)."""
function reference_tolerances(dtypes)::Tuple{Float64,Float64}
    if any(d -> d in ("f16", "bf16"), dtypes)
        return (1e-2, 1e-3)
    elseif any(d -> d in ("f32", "complex<f32>"), dtypes)
        return (1e-4, 1e-5)
    elseif any(d -> d in ("f64", "complex<f64>"), dtypes)
        return (1e-10, 1e-12)
    end
    return (0.0, 0.0)
end
