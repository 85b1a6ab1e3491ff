# export_lux: trace, check, compute references, write the bundle.

const NAME_RE = r"^[A-Za-z0-9_.-]{1,128}$"

# The bundle name: given, or the directory name without ".bundle", made safe.
function bundle_name(name, target::AbstractString)::String
    if name !== nothing
        occursin(NAME_RE, name) || throw(ArgumentError("name must match [A-Za-z0-9_.-]{1,128}, got \"$name\""))
        return String(name)
    end
    base = basename(target)
    endswith(base, ".bundle") && (base = base[1:(end - 7)])
    safe = first(replace(base, r"[^A-Za-z0-9_.-]" => "_"), 128)
    return isempty(safe) ? "model" : safe
end

# User metadata as a JSON object; fails early (before tracing) if it cannot be written.
function metadata_object(model, metadata)::JSON.Object{String,Any}
    m = jobject("lux_model" => first(sprint(show, model), 10_000))
    for (k, v) in pairs(metadata)
        m[string(k)] = v
    end
    try
        JSON.json(m)
    catch err
        throw(ArgumentError("metadata cannot be written as JSON: $(sprint(showerror, err))"))
    end
    return m
end

"""
    export_lux(dir, model, ps, st, inputs...; name=nothing, mode=:test, overwrite=false,
               reference=true, vjp=false, metadata=Dict{String,Any}(),
               allow_custom_calls=false, samples_independent=nothing, progress=nothing) -> String

Write a juliabridge bundle for `model(x, ps, st)` to directory `dir` and return its path.
`x` is the single example input, or the tuple `inputs` when several are given. Arrays may be
plain CPU arrays or Reactant arrays; `mode` (`:test`/`:train`) is applied with
`Lux.testmode`/`Lux.trainmode`. With `reference`, the example inputs and the outputs of the
compiled function are stored for `juliabridge.verify`; with `vjp`, the pullback module too.
`progress(step, nsteps, message)` is called before each stage.
"""
function export_lux(dir::AbstractString, model, ps, st, inputs...; kwargs...)::String
    isempty(inputs) && throw(ArgumentError("export_lux needs at least one example input"))
    x = length(inputs) == 1 ? only(inputs) : inputs
    return export_model(dir, model, ps, st, x; kwargs...)
end

"""`export_lux` with the model input `x` given as is (a tuple stays one input structure)."""
function export_model(
    dir::AbstractString,
    model,
    ps,
    st,
    x;
    name=nothing,
    mode::Symbol=:test,
    overwrite::Bool=false,
    reference::Bool=true,
    vjp::Bool=false,
    metadata=Dict{String,Any}(),
    allow_custom_calls::Bool=false,
    samples_independent::Union{Nothing,Bool}=nothing,
    progress=nothing,
)::String
    mode in (:test, :train) || throw(ArgumentError("mode must be :test or :train, got :$mode"))
    target = String(rstrip(abspath(dir), ['/', '\\']))
    bname = bundle_name(name, target)
    check_target(target, overwrite)
    meta = metadata_object(model, metadata)
    nsteps = 4 + (vjp ? 1 : 0)
    step = Ref(0)
    report(msg) = (step[] += 1; progress === nothing || progress(step[], nsteps, msg); nothing)

    report("moving the example input, parameters and states to Reactant")
    client = export_client()
    st_mode = mode === :test ? Lux.testmode(copy_rngs(st)) : Lux.trainmode(copy_rngs(st))
    # One call, so an array shared between x, ps and st stays one Reactant array.
    xr, psr, str = Reactant.to_rarray((x, ps, st_mode); client)     # R src/Tracing.jl:2160-2185
    check_leaves(xr, "input x")
    check_leaves(psr, "parameter tree ps")
    check_leaves(str, "state tree st")

    report("tracing model(x, ps, st) with Reactant")
    traced = trace_forward(model, xr, psr, str; client)
    check_ops(traced.text, "forward"; allow_custom_calls)
    check_signature(traced)
    datasets = Dict{Int,String}(a.index => dataset_path(a.role, a.path) for a in traced.arguments if a.role != "input")
    B = batch_size(traced.arguments)

    # Run the compiled function when references are wanted, or to probe sample independence
    # (never in train mode, where e.g. BatchNorm mixes the samples of a batch).
    probe = samples_independent === nothing && mode === :test && B !== nothing && B >= 2
    outputs = nothing
    independent = something(samples_independent, false)
    report("running the compiled model on the example input")
    if reference || probe
        thunk = compile_forward(model, xr, psr, str; client)
        outputs = result_values(thunk(model, xr, psr, str), traced.results)
        probe && (independent = probe_sample_independence(thunk, model, xr, psr, str, traced, B, outputs; client))
    end
    batch = B === nothing ? nothing : (; size=B, samples_independent=independent)

    vjp_text = nothing
    if vjp
        report("tracing the pullback with Enzyme")
        vjp_text = trace_vjp(model, xr, psr, str, traced; client, allow_custom_calls)
    end

    report("writing $target")
    examples = nothing
    if reference
        inputs = [(a.index, host(a.value), a.dtype) for a in traced.arguments if a.role == "input"]
        rtol, atol = reference_tolerances([r.dtype for r in traced.results])
        examples = (;
            arrays=(;
                inputs=[i => (A, d) for (i, A, d) in inputs],
                outputs=[r.index => (A, r.dtype) for (r, A) in zip(traced.results, outputs)],
            ),
            datasets=(;
                inputs=[i => "/examples/inputs/$i" for (i, _, _) in inputs],
                outputs=[r.index => "/examples/outputs/$(r.index)" for r in traced.results],
                rtol,
                atol,
            ),
        )
    end
    write_atomically(target; overwrite) do tmp
        write(joinpath(tmp, MODULE_FILE), traced.text)
        vjp_text === nothing || write(joinpath(tmp, VJP_FILE), vjp_text)
        write_weights(joinpath(tmp, WEIGHTS_FILE), traced.arguments, datasets, examples === nothing ? nothing : examples.arrays)
        manifest = build_manifest(
            tmp, bname, mode, traced, datasets, examples === nothing ? nothing : examples.datasets, batch, vjp, meta;
            empty=(; params=empty_containers(ps), state=empty_containers(st_mode)),
        )
        write_manifest(joinpath(tmp, MANIFEST_FILE), manifest)
    end
    return target
end

"""Check the tables agree with the printed `@main` signature (spec §6 step 4)."""
function check_signature(traced::TracedForward)
    sig = main_signature(traced.text)
    want_args = [TensorSig(reverse(a.julia_shape), a.dtype) for a in traced.arguments]
    want_results = [TensorSig(reverse(r.julia_shape), r.dtype) for r in traced.results]
    sig.args == want_args || throw(ExportError("internal: @main arguments are $(sig.args), the table says $want_args"))
    sig.results == want_results || throw(ExportError("internal: @main results are $(sig.results), the table says $want_results"))
    return nothing
end
