# export_lux: flatten, export the flat function with Reactant's public macros, write the directory.

# One set of options for every compile: nothing donated (so no argument is marked as aliased to a
# result), no shardy passes (as @code_hlo's default, R src/compiler/Macros.jl:74-83). A
# CompileOptions object overrides every loose keyword (R src/CompileOptions.jl:367-374), so the
# options live in it alone.
compile_options() = Reactant.CompileOptions(; donated_args=:none, shardy_passes=:none)

# What the flat function rebuilds its trees from while Reactant traces it, and the result paths
# it finds: held here, not in the function, so Reactant's tracer never walks it.
mutable struct TraceState
    trees::Tuple
    flat::Flattened
    results::Vector{Any}
end
const TRACE = Ref{Union{Nothing,TraceState}}(nothing)
const TRACE_LOCK = ReentrantLock()

# A traced array, also from a wrapper of one (a view, a transpose): ReactantCore's documented
# materialize_traced_array (R lib/ReactantCore/src/ReactantCore.jl:885-890, bound in R src/Reactant.jl:8).
as_traced(v) = v isa AbstractArray{<:TracedRNumber} ? Reactant.materialize_traced_array(v) : v

"""`model` as a function of the flattened leaves of (x, ps, st) (docs/julia-export.md)."""
struct FlatModel{M}
    model::M
end

# Reactant appends every argument the function changed in place (`.=`, `rand!` on a state RNG:
# R src/stdlibs/Random.jl:84-85) to @main's results, found by comparing the traced array's SSA
# value, its field `mlir_data` (R src/Types.jl:67-70), with the block argument (in make_mlir_fn,
# read at 0.2.280). The model gets copies (R src/TracedRArray.jl:66), so no argument changes,
# and a change shows on its copy's `mlir_data`: captured as new state or refused.
ssa(v) = getfield(v, :mlir_data)

function (f::FlatModel)(leaves...)
    t = TRACE[]::TraceState
    copies = map(copy, leaves)
    before = map(ssa, copies)
    traced(v, _) = v isa Reactant.ConcreteRArray ? copies[t.flat.index[v]] : v
    x, ps, st = (map_tree(traced, tree, root) for (tree, root) in zip(t.trees, (:x, :ps, :st)))
    y, st_new = f.model(x, ps, st)
    ys = Pair{Vector{Any},Any}[]
    for (p, leaf) in leaves_with_paths(y, :y)
        v = as_traced(leaf)
        if v isa TracedRArray
            push!(ys, Any["output"; p] => v)
        elseif v isa Union{AbstractArray{<:Number},TracedRNumber}
            throw(ExportError("the output at $(label(:y, p)) is a $(typeof(v)), not a traced array: return arrays computed from the inputs (fill(v) for a number)"))
        end
    end
    new_state = Dict(leaves_with_paths(st_new, :st_new))
    states = Pair{Vector{Any},Any}[]
    for (k, a) in enumerate(t.flat.args)
        where_, changed = label(root_of(a["role"]), a["path"]), ssa(copies[k]) != before[k]
        if a["role"] != "state"
            changed && throw(ExportError("the model changes $where_ in place; the exported function returns no new value for an input or a parameter, so the change would be lost: change a copy, or keep the array in st and return it"))
            continue
        end
        raw = get(new_state, a["path"], nothing)
        v = as_traced(raw)
        v isa TracedRArray || throw(ExportError("the new state has $(raw === nothing ? "nothing" : "a $(typeof(raw))") at $where_ where st has an array; the model must return st's structure"))
        (changed && raw !== copies[k]) && throw(ExportError("the model changes $where_ in place but returns another array there; return the array it changed (or change a copy)"))
        # One array at several paths is one argument: its new value must be one array too.
        for p in get(a, "tied_paths", [])
            get(new_state, p, nothing) === raw || throw(ExportError("$where_ and $(label(:st, p)) are one array in st, but the model returns different new values for them; pass separate arrays (copy) to untie them"))
        end
        push!(states, Any["state"; a["path"]] => v)
    end
    for (s, old) in zip(t.flat.static, t.flat.static_leaves)
        new = get(new_state, s["path"], nothing)
        isequal(new, old) || throw(ExportError("the model changes $(label(:st, s["path"])) from $(repr(old)) to $(repr(new)); a setting that is not an array is frozen into the module, so it cannot change: make it an array"))
    end
    t.results = [first(r) for r in [ys; states]]
    # copy: a new traced array with the same value (R src/TracedRArray.jl:66), so every entry is
    # a result of @main, an input returned unchanged included.
    return (map(copy ∘ last, ys)..., map(copy ∘ last, states)...)
end

"""The directory name without its extension, made a valid export name."""
function export_name(name, target)
    name === nothing || occursin(r"^[A-Za-z0-9_.-]{1,128}\z", name) || throw(ArgumentError("name must match [A-Za-z0-9_.-]{1,128}, got $(repr(name))"))
    safe = first(replace(first(splitext(basename(target))), r"[^A-Za-z0-9_.-]" => "_"), 128)
    return something(name, isempty(safe) ? "model" : safe)
end

"""
    export_lux(dir, model, ps, st, inputs...; name=nothing, mode=:test, overwrite=false,
               reference=true, metadata=Dict(), samples_independent=nothing, progress=nothing) -> String

Write the Julia export directory `dir` (docs/julia-export.md) for `model(x, ps, st)` and return
its path; `x` is the one example input, or the tuple of `inputs`. Python's
`juliabridge.import_lux(dir)` imports it; `juliabridge convert` makes a bundle of it (where the
VJP and the check of the module's ops are made). Arrays may be CPU or Reactant arrays: the
flatten (`flatten!`) says what becomes an argument, a tie, an empty container or static state,
and what is refused. `mode` (`:test`/`:train`) is applied with `Lux.testmode`/`Lux.trainmode`.
With `reference`, the example inputs and Julia's outputs on them (`Reactant.@jit` of the same
flat function) are stored. `samples_independent` (true, false, or nothing = unknown) is recorded
(true contradicts `mode=:train`); `metadata` (JSON) is handed to the Python user;
`progress(step, nsteps, message)` is called before each stage. Throws `ArgumentError` for bad
keywords or an existing `dir` without `overwrite`, `ExportError` when the model or a tree cannot
be exported (the message says why).
"""
function export_lux(dir::AbstractString, model, ps, st, inputs...; kwargs...)::String
    isempty(inputs) && throw(ArgumentError("export_lux needs at least one example input"))
    return export_model(dir, model, ps, st, length(inputs) == 1 ? only(inputs) : inputs; kwargs...)
end

"""The same export spelled as Python's `export_lux(model, ps, st, x...; out=dir)`."""
function export_lux(model, ps, st, inputs...; out=nothing, kwargs...)::String
    out isa AbstractString || throw(ArgumentError("export_lux needs the directory: export_lux(dir, model, ps, st, x...) or export_lux(model, ps, st, x...; out=dir)"))
    return export_lux(out, model, ps, st, inputs...; kwargs...)
end

"""
A `StatefulLuxLayer` holds a layer with its own ps and st (L lib/LuxCore/src/stateful.jl:14-19;
the state is field `st` or `st_any` by `fixed_state_type`, :46-47): the layer inside is exported,
with the ps and st given, or the wrapper's where those are `nothing`.
"""
function unwrap(model, ps, st)
    model isa Lux.StatefulLuxLayer || return (model, ps, st)
    ps = something(ps, getfield(model, :ps), Some(nothing))
    st = something(st, getfield(model, getfield(model, :fixed_state_type) === Val(true) ? :st : :st_any), Some(nothing))
    (ps === nothing || st === nothing) && throw(ExportError("the StatefulLuxLayer holds no $(ps === nothing ? "ps" : "st") and none was given: export_lux(dir, layer, ps, st, x)"))
    return (getfield(model, :model), ps, st)
end

"""`export_lux` with the model input `x` as is (a tuple stays one input structure)."""
function export_model(dir::AbstractString, model, ps, st, x; name=nothing, mode::Symbol=:test, overwrite::Bool=false,
                      reference::Bool=true, metadata=Dict{String,Any}(), samples_independent::Union{Nothing,Bool}=nothing, progress=nothing)::String
    mode in (:test, :train) || throw(ArgumentError("mode must be :test or :train, got :$mode"))
    (mode === :train && samples_independent === true) && throw(ArgumentError("samples_independent=true contradicts mode=:train: Lux's training mode mixes the samples of a batch (BatchNorm's batch statistics); leave it unset"))
    target = abspath(rstrip(dir, ['/', '\\']))
    if ispath(target)
        overwrite || throw(ArgumentError("$target exists; pass overwrite=true to replace it"))
        (isdir(target) && (isempty(readdir(target)) || any(n -> isfile(joinpath(target, n)), (DESCRIPTION_FILE, "manifest.json")))) ||
            throw(ArgumentError("$target is not an export directory or bundle; refusing to replace it"))
    end
    model, ps, st = unwrap(model, ps, st)
    meta = Dict{String,Any}("lux_model" => first(sprint(show, model), 10_000))
    merge!(meta, Dict{String,Any}(string(k) => v for (k, v) in pairs(metadata)))
    JSON.json(meta)                                       # fails now, not after tracing
    step = Ref(0)
    report(msg) = (step[] += 1; progress === nothing || progress(step[], 4, msg); nothing)

    report("moving the example input, parameters and states to Reactant")
    flat = Flattened()
    st_mode = mode === :test ? Lux.testmode(st) : Lux.trainmode(st)   # Lux's documented API
    trees = (flatten!(flat, x, :x), flatten!(flat, ps, :ps), flatten!(flat, st_mode, :st))
    f = FlatModel(model)
    opts = compile_options()
    text, outputs, paths, host = lock(TRACE_LOCK) do
        t = TRACE[] = TraceState(trees, flat, Any[])
        try
            report("tracing model(x, ps, st) with Reactant")
            # @code_hlo and @jit are documented (R docs/src/api/api.md:42); String of the
            # TextualModule @code_hlo returns: R src/compiler/Macros.jl:34.
            hlo = Reactant.@code_hlo compile_options = opts f(flat.leaves...)
            text = String(hlo)
            paths = copy(t.results)
            # The values written leave for the host first; the reference runs on copies of them.
            host = map(Array, flat.leaves)     # R src/ConcreteRArray.jl:150
            report(reference ? "running the flat function on the example input" : "skipping the reference outputs")
            outputs = ()
            fresh = reference ? map(Reactant.to_rarray, host) : ()
            reference && (outputs = Reactant.@jit compile_options = opts f(fresh...))
            (text, outputs, paths, host)
        finally
            TRACE[] = nothing
        end
    end

    report("writing $target")
    producer = Dict("tool" => "JuliaBridge.jl", "tool_version" => string(pkgversion(@__MODULE__)), "julia" => string(VERSION),
                    "lux" => string(pkgversion(Lux)), "reactant" => string(pkgversion(Reactant)),
                    "created" => Dates.format(Dates.now(Dates.UTC), "yyyy-mm-ddTHH:MM:SS") * "Z")
    desc = Dict{String,Any}(
        "format" => FORMAT, "format_version" => FORMAT_VERSION, "name" => export_name(name, target), "mode" => string(mode),
        "producer" => producer, "module" => Dict("file" => MODULE_FILE), "weights" => Dict("file" => WEIGHTS_FILE),
        "arguments" => flat.args, "results" => [Dict("index" => k - 1, "path" => p) for (k, p) in enumerate(paths)],
        "empty" => flat.empty, "static_state" => flat.static, "samples_independent" => samples_independent, "metadata" => meta,
    )
    inputs = [(a["index"], h) for (a, h) in zip(flat.args, host) if a["role"] == "input"]
    # A reader wants at least one reference output: a model without outputs has no examples.
    examples = reference && !isempty(outputs)
    examples && (desc["examples"] = Dict(
        "inputs" => [Dict("argument" => i, "dataset" => "/examples/inputs/$i") for (i, _) in inputs],
        "outputs" => [Dict("result" => k - 1, "dataset" => "/examples/outputs/$(k - 1)") for k in eachindex(outputs)],
    ))
    mkpath(dirname(target))
    tmp = mktempdir(dirname(target); prefix=".juliabridge-")
    try
        write(joinpath(tmp, MODULE_FILE), text)
        HDF5.h5open(joinpath(tmp, WEIGHTS_FILE), "w") do h
            foreach(((a, v),) -> haskey(a, "dataset") && write_array(h, a["dataset"], v), zip(flat.args, host))
            examples && foreach(((i, v),) -> write_array(h, "/examples/inputs/$i", v), inputs)
            foreach(((k, o),) -> write_array(h, "/examples/outputs/$(k - 1)", Array(o)), enumerate(outputs))
        end
        write(joinpath(tmp, DESCRIPTION_FILE), JSON.json(desc))
        ispath(target) && rm(target; recursive=true)     # overwrite was given (checked above)
        mv(tmp, target)
    catch
        rm(tmp; recursive=true, force=true)
        rethrow()
    end
    return target
end
