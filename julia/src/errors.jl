# Errors JuliaBridge throws. Each says what is wrong and what to do, in one message.

"""Supertype of every error JuliaBridge throws for an unexportable model or an unreadable file."""
abstract type JuliaBridgeError <: Exception end

"""
A leaf of `x`, `ps` or `st` that tracing would freeze into the module as a constant instead
of making it an argument: a plain (non-Reactant) numeric array, a plain float number, a number
in `x`/`ps`, or a non-numeric array (`Vector{String}`, `Vector{Any}` of numbers...).
"""
struct NonReactantLeafError <: JuliaBridgeError
    role::String
    path::Vector{Any}
    type::Type
    why::String
end

NonReactantLeafError(role, path, type) = NonReactantLeafError(role, path, type, "")

function Base.showerror(io::IO, e::NonReactantLeafError)
    where_ = isempty(e.path) ? e.role : string(e.role, " at ", join(string.(e.path), "."))
    return print(
        io,
        "NonReactantLeafError: the $where_ is a $(e.type), not a Reactant array. ",
        isempty(e.why) ? "Reactant would bake it into the module as a constant instead of making it an argument. " : e.why * " ",
        "Use arrays of Float16/BFloat16/Float32/Float64/Int/UInt/Bool/Complex numbers ",
        "(JuliaBridge moves them to Reactant itself), or a 0-dimensional array (`fill(x)`) for a scalar.",
    )
end

"""The traced module contains ops or custom calls that stock XLA (and so JAX) cannot run."""
struct UnsupportedOpsError <: JuliaBridgeError
    what::String
    ops::Vector{String}
end

function Base.showerror(io::IO, e::UnsupportedOpsError)
    return print(
        io,
        "UnsupportedOpsError: the $(e.what) module contains what stock XLA cannot run: ",
        join(e.ops, "; "),
        ". Such ops come from Reactant-only lowerings (linear algebra solvers, custom ",
        "kernels, un-differentiated enzyme ops). Replace that part of the model, or pass ",
        "allow_custom_calls=true if only stablehlo.custom_call targets are listed and the ",
        "reader will opt in with trust=True.",
    )
end

"""The export target exists and `overwrite` was not given, or it is not a bundle directory."""
struct BundleExistsError <: JuliaBridgeError
    path::String
    reason::String
end

function Base.showerror(io::IO, e::BundleExistsError)
    return print(io, "BundleExistsError: refusing to write $(e.path): $(e.reason)")
end

"""The model or its arguments cannot be exported; the message says why."""
struct ExportError <: JuliaBridgeError
    msg::String
end

Base.showerror(io::IO, e::ExportError) = print(io, "ExportError: ", e.msg)

"""A bundle or weights file is missing, malformed or does not match the template."""
struct BundleReadError <: JuliaBridgeError
    msg::String
end

Base.showerror(io::IO, e::BundleReadError) = print(io, "BundleReadError: ", e.msg)
