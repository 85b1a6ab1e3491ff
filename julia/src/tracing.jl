# Tracing `model(x, ps, st)` with Reactant to StableHLO, and the argument/result tables that
# tie every `@main` argument and result to its place in (x, ps, st) and (y, st_new).

"""
The traced function. A named top-level function has `sizeof == 0`, so Reactant does not wrap
it (R src/TracedUtils.jl:321-345): `model` is argument source 1 (contributing no `@main`
argument, L lib/LuxCore/ext/ReactantExt.jl:6-10), `x` is 2, `ps` 3, `st` 4.
"""
lux_forward(model, x, ps, st) = model(x, ps, st)

const ROLES = Dict(2 => "input", 3 => "parameter", 4 => "state")

"""
The one `CompileOptions` of every export: a `CompileOptions` object overrides all loose
option keywords (R src/CompileOptions.jl:367-374), so everything goes in here.
- `optimization_passes=:all` runs the enzyme pass and the enzymexla lowerings
  (R src/compiler/Compiler.jl:440-474), leaving plain StableHLO for plain Lux layers;
- `donated_args=:none`: no `tf.aliasing_output` attributes, and the example inputs stay
  valid after running the compiled function (R src/compiler/Compiler.jl:1105-1127);
- the default `argprefix` is kept (never passed): preserved results are only recognised for
  the literal `:args` prefix (R src/compiler/Compiler.jl:1048).
The forward trace first keeps `make_mlir_fn`'s default `args_in_result=:all`
(R src/TracedUtils.jl:307, 745-756): every argument leaf is walked as a possible result
(`:resargs` paths, R src/TracedUtils.jl:677-697), so an argument the model mutates in place
stays visible as an `@main` result and `classify_echoes!` can refuse it or record it as an echo
(from the module's structure, `returned_arguments`).
"""
export_compile_options() = Reactant.CompileOptions(; optimization_passes=:all, donated_args=:none)

"""
The XLA CPU client (R src/xla/XLA.jl:131-163, src/accelerators/CPU.jl:49-56): references
computed on CPU are what a CPU JAX reader reproduces (spec §3.7), and lowering for CPU avoids
GPU-only rewrites. There is no fallback to another backend: a GPU reference would not be what
the spec promises, so a missing CPU client is an `ExportError`.
"""
function export_client()
    try
        return Reactant.XLA.client("cpu")
    catch err
        throw(
            ExportError(
                "Reactant has no XLA CPU client ($(sprint(showerror, err))). JuliaBridge traces for the CPU and computes the reference outputs there (spec §3.7); check that Reactant_jll works on this machine (`using Reactant; Reactant.XLA.client(\"cpu\")`).",
            ),
        )
    end
end

"""One `@main` argument: its role, place in x/ps/st, type and the Reactant array itself."""
struct ArgumentInfo
    index::Int                      # 0-based @main argument number
    role::String                    # "input", "parameter" or "state"
    source::Int                     # 2 (x), 3 (ps) or 4 (st)
    steps::Tuple                    # Reactant path below x/ps/st (integers, R src/Tracing.jl)
    path::Vector{Any}               # bundle path (spec §3.8)
    eltype::Type
    dtype::String
    julia_shape::Vector{Int}
    value::Any                      # the ConcreteRArray / ConcreteRNumber
    tied_paths::Vector{Vector{Any}} # other paths in the same tree to the same array
end

"""
One `@main` result: where it sits in (y, st_new), its type and shape. `argument` is the 0-based
`@main` argument whose traced value this result is (Reactant returns an argument it considers
written to, e.g. passed through a `@trace`d layer or mutated in place); `echo_of` is set to it
by `classify_echoes!` when `@main` returns that block argument itself (spec `echo_of`, decided
from the structure, never from values).
"""
mutable struct ResultInfo
    index::Int                      # 0-based @main result number
    steps::Vector{Tuple}            # Reactant paths below (y, st_new), first is canonical; may be empty
    paths::Vector{Vector{Any}}      # bundle paths, starting with "output" or "state"
    eltype::Type
    dtype::String
    julia_shape::Vector{Int}
    argument::Union{Nothing,Int}
    echo_of::Union{Nothing,Int}
end

"""An output that is `@main` argument `argument` returned unchanged (spec §3.5)."""
struct AliasInfo
    steps::Tuple
    path::Vector{Any}
    argument::Int
end

"""
The forward module text with its argument, result and alias tables, and the static leaves of
the returned state (compared with those of `st` by `check_static_unchanged`).
"""
struct TracedForward
    text::String
    arguments::Vector{ArgumentInfo}
    results::Vector{ResultInfo}
    aliases::Vector{AliasInfo}
    static_out::Vector{StaticLeaf}
    returned::Dict{Int,Int}         # @main result => the argument it returns unchanged (echoes.jl)
end

"""
Trace `lux_forward(model, x, ps, st)` (all leaves already Reactant arrays) to StableHLO text
and build its tables. Everything MLIR stays inside the context block, as Reactant's own
exporter does (R src/serialization/EnzymeJAX.jl:110-126). `args_in_result` is `make_mlir_fn`'s
keyword, passed through `compile_mlir` (R src/compiler/Compiler.jl:238-288,
src/TracedUtils.jl:307, 745-756): `:all` (its default) also returns every argument Reactant saw
written, `:result` only values that are part of the returned (y, st).
"""
function trace_forward(model, x, ps, st; client, args_in_result::Symbol=:all)::TracedForward
    args = (model, x, ps, st)
    return MLIR.IR.@dispose ctx = Reactant.ReactantContext() begin
        # compile_mlir(ctx, f, args; client, drop_unsupported_attributes, kwargs...) returns
        # (module, CompiledMlirFnResult) (R src/compiler/Compiler.jl:49-130); the fields read
        # below are those of R src/TracedUtils.jl:263-287 as rebuilt by compile_mlir!
        # (R src/compiler/Compiler.jl:1163-1187).
        mod, res = Reactant.Compiler.compile_mlir(
            ctx,
            lux_forward,
            args;
            client,
            drop_unsupported_attributes=true,
            compile_options=export_compile_options(),
            args_in_result,
        )
        try
            res.fnwrapped && throw(ExportError("internal: Reactant wrapped lux_forward; argument numbering would shift"))
            text = string(mod)
            arguments = argument_table(res, args)
            check_in_types(res, arguments)
            results, aliases = result_tables(res)
            out = res.traced_result
            TracedForward(text, arguments, results, aliases, static_leaves(out[2]; inside_structs=true), returned_arguments(mod))
        finally
            MLIR.IR.dispose(mod)
        end
    end
end

"""
The argument table: `%argN` is the (N+1)-th pair of `res.seen_args` (concrete => traced),
whose traced value carries the path `(:args, source, steps...)`
(R src/TracedUtils.jl:493-509, 1088-1098; R src/serialization/EnzymeJAX.jl:136-166).
"""
function argument_table(res, args)::Vector{ArgumentInfo}
    length(res.seen_args) == length(res.linear_args) ||
        throw(ExportError("internal: Reactant's seen_args and linear_args disagree"))
    paths_by_source = Dict(k => leaf_paths(args[k]) for k in 2:4)
    table = ArgumentInfo[]
    for (i, (concrete, traced)) in enumerate(res.seen_args)
        p = Reactant.TracedUtils.get_idx(traced, :args)
        source = p[2]
        haskey(ROLES, source) || throw(
            ExportError("@main argument $(i - 1) comes from the model object itself (path $p): keep arrays in ps/st, not in the layer"),
        )
        steps = Tuple(p[3:end])
        path = name_path(args[source], steps)
        T = Reactant.unwrapped_eltype(concrete)
        tied = [q for q in get(paths_by_source[source], concrete, Vector{Any}[]) if q != path]
        push!(
            table,
            ArgumentInfo(i - 1, ROLES[source], source, steps, path, T, mlir_dtype(T), collect(Int, size(concrete)), concrete, tied),
        )
    end
    return table
end

"""Check each argument's MLIR type is its Julia shape reversed (R src/TracedUtils.jl:511-527)."""
function check_in_types(res, arguments)
    for (a, ty) in zip(arguments, res.in_tys)
        collect(Int, size(ty)) == reverse(a.julia_shape) || throw(
            ExportError("internal: @main argument $(a.index) has MLIR shape $(size(ty)), expected $(reverse(a.julia_shape))"),
        )
    end
    return nothing
end

# The paths of a traced value inside the returned value: Reactant appends one `(:result, ...)`
# path per place it is reached (NoStopTracedTrack, R src/Tracing.jl:1492-1498).
function result_steps(v)::Vector{Tuple}
    steps = Tuple[Tuple(p[2:end]) for p in Reactant.TracedUtils.get_paths(v) if !isempty(p) && p[1] === :result]
    return unique(steps)
end

# "output"/"state" then the names below y or st_new.
function output_path(out, steps::Tuple)::Vector{Any}
    isempty(steps) && throw(ExportError("model(x, ps, st) returned a single array; Lux models return (y, st)"))
    head = steps[1] == 1 ? "output" : steps[1] == 2 ? "state" : throw(ExportError("model(x, ps, st) must return a 2-tuple (y, st)"))
    return vcat(Any[head], name_path(out[steps[1]], steps[2:end]))
end

"""
The result table and the aliases. `res.linear_results` are the kept `@main` results in
order; `res.preserved_args` are (value, 0-based argument) pairs for returned values that are
arguments passed through unchanged, which Reactant removed from `@main`
(R src/compiler/Compiler.jl:1040-1056, 1163-1187). A kept result that is an argument's own
traced value (`res.linear_args[i]`, R src/TracedUtils.jl:493-509) records that argument: it is
an echo or a mutation, which `classify_echoes!` decides from the module's structure.
"""
function result_tables(res)
    out = res.traced_result
    (out isa Tuple && length(out) == 2) || throw(ExportError("model(x, ps, st) must return (y, st), got a $(typeof(out))"))
    results = ResultInfo[]
    for (k, r) in enumerate(res.linear_results)
        r isa Union{Reactant.TracedRArray,Reactant.TracedRNumber} ||
            throw(ExportError("@main result $(k - 1) is a $(typeof(r)), not an array"))
        steps = result_steps(r)
        i = findfirst(a -> a === r, res.linear_args)
        argument = i === nothing ? nothing : i - 1
        (isempty(steps) && argument === nothing) && throw(
            ExportError("@main result $(k - 1) is neither part of the returned (y, st) nor an argument: the model stores a new array inside a container of its arguments, which JuliaBridge cannot export; return it in the state instead"),
        )
        T = Reactant.unwrapped_eltype(r)
        push!(results, ResultInfo(k - 1, steps, [output_path(out, s) for s in steps], T, mlir_dtype(T), collect(Int, size(r)), argument, nothing))
    end
    aliases = AliasInfo[]
    for (r, argnum) in res.preserved_args
        for s in result_steps(r)
            push!(aliases, AliasInfo(s, output_path(out, s), argnum))
        end
    end
    all_paths = vcat([p for r in results for p in r.paths], [a.path for a in aliases])
    allunique(all_paths) || throw(ExportError("internal: an output path is listed twice across results and aliases"))
    return results, aliases
end

"""
Check the returned state is the same tree as `st` (spec: `new_state` has `state`'s structure):
the state paths of results and aliases are exactly the paths of the state arguments.
A state array the model drops, or returns as a constant (a plain array), would otherwise be
missing from every reader's `new_state`.
"""
function check_state_tree(traced::TracedForward)
    state_in = Set{Vector{Any}}()
    for a in traced.arguments
        a.role == "state" || continue
        push!(state_in, a.path)
        foreach(p -> push!(state_in, p), a.tied_paths)
    end
    returned = vcat([p for r in traced.results for p in r.paths], [al.path for al in traced.aliases])
    state_out = Set{Vector{Any}}(p[2:end] for p in returned if first(p) == "state")
    if state_in == state_out
        # Spec §3.5 names a returned state leaf by its argument's `path`, never by one of its
        # `tied_paths`, so a state array reached twice cannot come back at both places.
        for a in traced.arguments, t in a.tied_paths
            (a.role == "state" && t in state_out) || continue
            throw(
                ExportError(
                    "st holds the same array at $(path_label(a.path)) and $(path_label(t)), and the model returns it at both places; a bundle returns a state array at its one path only (docs/bundle-format.md §3.5). Pass a copy (`copy(a)`) for all but one place.",
                ),
            )
        end
        return nothing
    end
    missing_ = sort!([path_label(p) for p in setdiff(state_in, state_out)])
    extra = sort!([path_label(p) for p in setdiff(state_out, state_in)])
    throw(
        ExportError(
            "model(x, ps, st) returns a state that is not the same tree of arrays as st" *
            (isempty(missing_) ? "" : "; missing from the returned state (dropped, or returned as a plain array Reactant froze): $(join(missing_, ", "))") *
            (isempty(extra) ? "" : "; arrays st does not have: $(join(extra, ", "))") *
            ". Lux layers return a state with the structure of st; keep every state array in it.",
        ),
    )
end

"""The MLIR batch axis (0) of an input argument whose last Julia dim is the batch, else nothing."""
input_batch_axis(a::ArgumentInfo, B::Union{Nothing,Int}) =
    (a.role == "input" && B !== nothing && !isempty(a.julia_shape) && last(a.julia_shape) == B) ? 0 : nothing

"""
Batch size: the common last Julia dim of all input arguments of rank ≥ 1, else `nothing`; also
`nothing` when that dim is 0 (spec §3.6: a batch has at least one sample).
"""
function batch_size(arguments)::Union{Nothing,Int}
    dims = [last(a.julia_shape) for a in arguments if a.role == "input" && !isempty(a.julia_shape)]
    (isempty(dims) || !allequal(dims) || first(dims) < 1) && return nothing
    return first(dims)
end
