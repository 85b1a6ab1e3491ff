# Deciding which argument-results are echoes (spec `echo_of`, from the module's structure) and
# refusing lost mutations; running the compiled forward function: the reference outputs (spec
# §3.7), and the probe of
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
Classify each result that is an argument's traced value from the module's structure
(`traced.returned`, echoes.jl), never from values: an in-place write that happens to leave the
example input as it was (`clamp!` on an input already in range) is still a write, and would be
lost for every other input. `@main` returns the block argument itself -> an echo: `echo_of` is
set. Computed and returned in (y, st_new) -> an ordinary result. Computed and not returned ->
the model mutates an argument in place and the bundle would lose it (spec §2: writers MUST
refuse): `ExportError`.
"""
function classify_echoes!(traced::TracedForward)
    for r in traced.results
        r.argument === nothing && continue
        a = traced.arguments[r.argument + 1]
        if get(traced.returned, r.index, nothing) == r.argument
            r.echo_of = a.index
        else
            r.echo_of = nothing
            isempty(r.steps) && throw(
                ExportError(
                    "the model mutates the $(a.role) $(path_label(a.path)) in place (Reactant returns it as @main result $(r.index), computed by the module) and does not return it in (y, st): the exported module would lose that change. Return the new value in the state instead of writing into the argument.",
                ),
            )
        end
    end
    return nothing
end

"""
True when running the thunk changed some argument's value (Reactant writes a result it reached
through an argument back into that argument, R src/compiler/Codegen.jl:1086-1178): the sample
probe would then start from other values. Decides only whether to probe, never what a result is.
"""
function mutated_in_place(traced::TracedForward, before::Dict{Int,Array})
    return any(traced.results) do r
        r.argument === nothing && return false
        now = host(traced.arguments[r.argument + 1].value)
        old = before[r.argument]
        return !(size(now) == size(old) && isequal(now, old))
    end
end

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
