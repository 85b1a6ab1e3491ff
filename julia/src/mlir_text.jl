# Reading the printed MLIR: the types of `@main`'s arguments and results, and the ops used.
# Written against the text Reactant prints (`string(mod)`, R src/mlir/IR/Module.jl:64), e.g.
#   func.func @main(%arg0: tensor<4x1x28x28xf32> {attr = ...}, ...) -> (tensor<4x10xf32>, ...) {

"""A tensor type of a `@main` signature: MLIR shape (row-major order) and element type."""
struct TensorSig
    shape::Vector{Int}
    dtype::String
end

Base.:(==)(a::TensorSig, b::TensorSig) = a.shape == b.shape && a.dtype == b.dtype
Base.show(io::IO, t::TensorSig) = print(io, "tensor<", join(string.(t.shape) .* "x"), t.dtype, ">")

"""Parse `tensor<4x1x28xf32>` (or `tensor<f32>`); throws for dynamic shapes."""
function parse_tensor_type(s::AbstractString)::TensorSig
    m = match(r"^tensor<(.*)>$", s)
    m === nothing && throw(ExportError("not a tensor type: $s"))
    body = String(m.captures[1])
    dims = Int[]
    while true
        d = match(r"^(\d+|\?)x", body)
        d === nothing && break
        d.captures[1] == "?" && throw(ExportError("dynamic shape in $s: JuliaBridge exports static shapes only"))
        push!(dims, parse(Int, d.captures[1]))
        body = body[(ncodeunits(d.match) + 1):end]
    end
    return TensorSig(dims, body)
end

# Index (in code units) just past the bracket that closes the one opening at `first_`.
# Skips string literals, so `{a = "x)"}` does not confuse it.
function _skip_balanced(b::AbstractVector{UInt8}, first_::Int)::Int
    pairs_ = Dict(UInt8('(') => UInt8(')'), UInt8('{') => UInt8('}'), UInt8('[') => UInt8(']'), UInt8('<') => UInt8('>'))
    stack = UInt8[pairs_[b[first_]]]
    i = first_ + 1
    while i <= length(b)
        c = b[i]
        if c == UInt8('"')
            i += 1
            while i <= length(b) && b[i] != UInt8('"')
                b[i] == UInt8('\\') && (i += 1)
                i += 1
            end
        elseif haskey(pairs_, c) && !(c == UInt8('<') && last(stack) != UInt8('>'))
            # `<` only nests inside `<...>` (types); elsewhere it is not a bracket.
            push!(stack, pairs_[c])
        elseif c == last(stack)
            pop!(stack)
            isempty(stack) && return i + 1
        end
        i += 1
    end
    throw(ExportError("unbalanced brackets in the @main signature"))
end

# The tensor types of a comma-separated list, ignoring everything inside `{...}` attributes.
function _list_types(b::AbstractVector{UInt8}, from::Int, to::Int)::Vector{TensorSig}
    out = TensorSig[]
    i = from
    while i <= to
        c = b[i]
        if c == UInt8('{') || c == UInt8('[') || c == UInt8('(')
            i = _skip_balanced(b, i)
            continue
        elseif c == UInt8('t') && i + 6 <= to && String(b[i:(i + 6)]) == "tensor<"
            j = _skip_balanced(b, i + 6)
            push!(out, parse_tensor_type(String(b[i:(j - 1)])))
            i = j
            continue
        end
        i += 1
    end
    return out
end

"""The argument and result tensor types of `func.func @main` in MLIR text `text`."""
function main_signature(text::AbstractString)
    m = match(r"func\.func\s+(?:public\s+)?@main\s*\(", text)
    m === nothing && throw(ExportError("the module has no func.func @main"))
    b = codeunits(text)
    lparen = m.offset + ncodeunits(m.match) - 1        # the '(' of the argument list
    close_ = _skip_balanced(b, lparen)                 # just past its ')'
    args = _list_types(b, lparen + 1, close_ - 2)
    rest = match(r"^\s*->\s*", SubString(text, close_))
    results = TensorSig[]
    if rest !== nothing
        i = close_ + ncodeunits(rest.match)
        if b[i] == UInt8('(')
            results = _list_types(b, i + 1, _skip_balanced(b, i) - 2)
        else
            j = _skip_balanced(b, i + 6)
            results = [parse_tensor_type(String(b[i:(j - 1)]))]
        end
    end
    return (; args, results)
end

# An op name at the start of a line, after optional `%results =`, pretty or generic form:
#   %0 = stablehlo.add ...   |   "stablehlo.reduce_window"(...)   |   stablehlo.return ...
const OP_AT_LINE_START = r"^\s*(?:%[^\s=,]+(?:\s*,\s*%[^\s=,]+)*\s*=\s*)?\"?([A-Za-z_][\w$]*)\.([\w$.]+)\"?"

"""Dialects spec §2 allows in a module (custom calls are checked separately)."""
const ALLOWED_DIALECTS = ("stablehlo", "chlo", "func")

"""
Every op of `text` that stock XLA cannot run: ops outside stablehlo/chlo/func (enzyme,
enzymexla, llvm, ...) and, unless `allow_custom_calls`, every `stablehlo.custom_call` target.
Reactant lowers Reactant-only work to such ops (facts §4: EJ LowerEnzymeXLALapack.cpp,
LowerJIT.cpp), so an empty result means the module is plain StableHLO.
"""
function unsupported_ops(text::AbstractString; allow_custom_calls::Bool=false)::Vector{String}
    found = String[]
    for (lineno, line) in enumerate(eachline(IOBuffer(text)))
        m = match(OP_AT_LINE_START, line)
        m === nothing && continue
        dialect, op = m.captures[1], m.captures[2]
        if !(dialect in ALLOWED_DIALECTS)
            push!(found, "$dialect.$op (line $lineno)")
        elseif dialect == "stablehlo" && op == "custom_call" && !allow_custom_calls
            t = match(r"custom_call\s*@([\w.$-]+)", line)
            t === nothing && (t = match(r"call_target_name\s*=\s*\"([^\"]*)\"", line))
            target = t === nothing ? "?" : t.captures[1]
            push!(found, "stablehlo.custom_call @$target (line $lineno)")
        end
    end
    return unique(found)
end

"""Throw `UnsupportedOpsError` when `unsupported_ops(text)` is not empty."""
function check_ops(text::AbstractString, what::AbstractString; allow_custom_calls::Bool=false)
    bad = unsupported_ops(text; allow_custom_calls)
    isempty(bad) || throw(UnsupportedOpsError(what, bad))
    return nothing
end
