# Running the compiled forward function: deciding which argument-results are echoes (spec
# `echo_of`) and refusing lost mutations, the reference outputs (spec §3.7), and the probe of
# whether output samples depend only on their own input sample (spec §3.6).

"""
Compile `lux_forward` for these arguments with the export options and return the thunk.
`Reactant.compile(f, args; kwargs...)` (R src/compiler/Compiler.jl:1372-1383) returns a
callable taking the same arguments; `donated_args=:none` keeps the inputs valid. A result
Reactant reached only through an argument (`:resargs`) is written back into that argument's
`ConcreteRArray` by the thunk (R src/compiler/Codegen.jl:1086-1178).
"""
function compile_forward(model, x, ps, st; client)
    return Reactant.compile(lux_forward, (model, x, ps, st); client, compile_options=export_compile_options())
end

"""CPU copies of the arguments some result may write back into, taken before the thunk runs."""
function snapshot_candidates(traced::TracedForward)::Dict{Int,Array}
    snap = Dict{Int,Array}()
    for r in traced.results
        r.argument === nothing && continue
        haskey(snap, r.argument) || (snap[r.argument] = host(traced.arguments[r.argument + 1].value))
    end
    return snap
end

"""
Classify each result that is an argument's traced value, from the run `out` of the thunk and
the arguments' values `before` it. Unchanged (bitwise, `isequal`) -> an echo: `echo_of` is set.
Changed and returned in (y, st_new) -> an ordinary result. Changed and not returned -> the model
mutates an argument in place and the bundle would silently lose it (spec §2: writers MUST
refuse): `ExportError`. Checked on the example arguments.
"""
function classify_echoes!(traced::TracedForward, before::Dict{Int,Array}, out)
    for r in traced.results
        r.argument === nothing && continue
        a = traced.arguments[r.argument + 1]
        old = before[r.argument]
        new = isempty(r.steps) ? host(a.value) : host(follow(out, first(r.steps)))
        if size(new) == size(old) && isequal(new, old)
            r.echo_of = a.index
        elseif isempty(r.steps)
            throw(
                ExportError(
                    "the model mutates the $(a.role) $(path_label(a.path)) in place (Reactant returns it as @main result $(r.index)) and does not return it in (y, st): the exported module would lose that change. Return the new value in the state instead of writing into the argument.",
                ),
            )
        end
    end
    return nothing
end

"""True when some argument was changed in place and returned (its value after the run differs)."""
mutated_in_place(traced::TracedForward) = any(r -> r.argument !== nothing && r.echo_of === nothing, traced.results)

"""
The CPU value of every `@main` result: fetched from the returned (y, st_new) by its path, or,
for an echo that has no path, the argument's value.
"""
function result_values(out, traced::TracedForward)::Vector{Array}
    return [
        isempty(r.steps) ? host(traced.arguments[r.argument + 1].value) : host(follow(out, first(r.steps))) for
        r in traced.results
    ]
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
    after_all = result_values(out2, traced)
    for (r, before, after) in zip(traced.results, outputs, after_all)
        if result_batch_axis(r, B, traced) === nothing
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

"""
MLIR batch axis of a result: an echo has its argument's; otherwise 0 for an output (all paths
under "output") whose last Julia dim is the batch, else nothing.
"""
function result_batch_axis(r::ResultInfo, B::Union{Nothing,Int}, traced::TracedForward)
    B === nothing && return nothing
    r.echo_of === nothing || return input_batch_axis(traced.arguments[r.echo_of + 1], B)
    isempty(r.paths) && return nothing
    all(p -> first(p) == "output", r.paths) || return nothing
    (isempty(r.julia_shape) || last(r.julia_shape) != B) && return nothing
    return 0
end
