# Reference outputs: run the compiled forward function on the example inputs (spec §3.7),
# and probe whether output samples depend only on their own input sample (spec §3.6).

"""
Compile `lux_forward` for these arguments with the export options and return the thunk.
`Reactant.compile(f, args; kwargs...)` (R src/compiler/Compiler.jl:1372-1383) returns a
callable taking the same arguments; `donated_args=:none` keeps the inputs valid.
"""
function compile_forward(model, x, ps, st; client)
    return Reactant.compile(lux_forward, (model, x, ps, st); client, compile_options=export_compile_options())
end

"""The CPU value of every `@main` result, fetched from the returned (y, st_new) by its path."""
function result_values(out, results::Vector{ResultInfo})::Vector{Array}
    return [host(follow(out, first(r.steps))) for r in results]
end

"""
Decide `samples_independent`: change input sample 1 (index 1 of the last Julia dim of every
input) and check that every other output sample, and every result without a batch axis,
stays the same. Returns `false` when it cannot be probed (integer inputs, batch of 1).
"""
function probe_sample_independence(thunk, model, x, ps, st, traced::TracedForward, B::Int, outputs; client)::Bool
    B < 2 && return false
    inputs = [a for a in traced.arguments if a.role == "input"]
    all(a -> is_float_dtype(a.dtype) && !isempty(a.julia_shape), inputs) || return false
    x2 = perturb_first_sample(x, client)
    out2 = thunk(model, x2, ps, st)
    for (r, before) in zip(traced.results, outputs)
        after = host(follow(out2, first(r.steps)))
        if result_batch_axis(r, B) === nothing
            isapprox(after, before; rtol=1e-5) || return false
        else
            n = ndims(before)
            rest = 2:B
            isapprox(selectdim(after, n, rest), selectdim(before, n, rest); rtol=1e-5) || return false
        end
    end
    return true
end

# x with 1 added to sample 1 of every float array leaf; same structure and Reactant types.
function perturb_first_sample(v, client)
    if v isa Reactant.AbstractConcreteArray
        a = host(v)
        (eltype(a) <: AbstractFloat && ndims(a) >= 1) || return v
        sample = selectdim(a, ndims(a), 1)
        sample .+= one(eltype(a))
        return Reactant.to_rarray(a; client)
    elseif v isa NamedTuple
        return map(c -> perturb_first_sample(c, client), v)
    elseif v isa Tuple
        return map(c -> perturb_first_sample(c, client), v)
    end
    return v
end

"""MLIR batch axis (0) of an output result whose last Julia dim is the batch, else nothing."""
function result_batch_axis(r::ResultInfo, B::Union{Nothing,Int})
    B === nothing && return nothing
    all(p -> first(p) == "output", r.paths) || return nothing
    (isempty(r.julia_shape) || last(r.julia_shape) != B) && return nothing
    return 0
end
