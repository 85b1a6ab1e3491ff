# export_lux: trace, check, compute references, write the bundle.

const NAME_RE = r"^[A-Za-z0-9_.-]{1,128}\z"     # `\z`: `$` would accept a trailing newline

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

Write a juliabridge bundle (format 3) for `model(x, ps, st)` to directory `dir` and return its
path. `x` is the single example input, or the tuple `inputs` when several are given. Arrays may
be plain CPU arrays or Reactant arrays; `mode` (`:test`/`:train`) is applied with
`Lux.testmode`/`Lux.trainmode`. With `reference`, the example inputs and the outputs of the
compiled function are stored for `juliabridge.verify`; with `vjp`, the pullback module too.
`samples_independent=true` may not be combined with `mode=:train` (Lux's training mode mixes
the samples of a batch, e.g. BatchNorm's batch statistics). `progress(step, nsteps, message)` is
called before each stage.

Every dataset's digest is BLAKE3 (format 3). Before the first bundle of a session, JuliaBridge's
own BLAKE3 is checked against known answers (`blake3_selftest`); should that fail, the bundle is
written in format 2 (sha256 digests, which every juliabridge reads) with a warning.

Throws `ArgumentError` for bad keywords, `NonReactantLeafError` for a leaf tracing would freeze,
`UnsupportedOpsError` for ops stock XLA cannot run, `BundleExistsError` for an existing target and
`ExportError` for a model that cannot be exported (it mutates an argument in place, changes a
plain number of its state, returns a state of another structure, ...).
"""
function export_lux(dir::AbstractString, model, ps, st, inputs...; kwargs...)::String
    haskey(kwargs, :out) && throw(
        ArgumentError("export_lux got the bundle directory twice: \"$dir\" first and out=$(repr(kwargs[:out])); give it once"),
    )
    isempty(inputs) && throw(ArgumentError("export_lux needs at least one example input"))
    x = length(inputs) == 1 ? only(inputs) : inputs
    return export_model(dir, model, ps, st, x; kwargs...)
end

"""
    export_lux(model, ps, st, inputs...; out, kwargs...) -> String

The same export spelled as Python's `juliabridge.export_lux(model, ps, st, x, out=dir)`: the
bundle directory as the keyword `out`. Without `out` it throws an `ArgumentError` saying both
spellings, where Julia would otherwise raise a `MethodError` with no hint.
"""
function export_lux(model, ps, st, inputs...; out=nothing, kwargs...)::String
    out isa AbstractString || throw(
        ArgumentError(
            "export_lux needs the bundle directory: export_lux(dir, model, ps, st, x...) or, as in Python, export_lux(model, ps, st, x...; out=dir)" *
            (out === nothing ? "" : "; out must be a path string, got a $(typeof(out))"),
        ),
    )
    return export_lux(out, model, ps, st, inputs...; kwargs...)
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
    (mode === :train && samples_independent === true) && throw(
        ArgumentError(
            "samples_independent=true contradicts mode=:train: Lux's training mode mixes the samples of a batch (BatchNorm uses the batch statistics), so a reader must not split batches; readers refuse such a bundle. Leave samples_independent unset in train mode.",
        ),
    )
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
    # One conversion per tree (R src/Tracing.jl:2118-2171): an array shared between x and ps/st
    # becomes one argument per role, each with its own path; within ps (or st) a shared array
    # stays one argument with `tied_paths`, also when it is a Reactant array (`host_tied`).
    check_numbers_not_tied(ps, "parameter tree ps")
    check_numbers_not_tied(st_mode, "state tree st")
    xr = Reactant.to_rarray(host_tied(x); client)
    psr = Reactant.to_rarray(host_tied(ps); client)
    str = Reactant.to_rarray(host_tied(st_mode); client)
    check_leaves(xr, "input x")
    check_leaves(psr, "parameter tree ps")
    check_leaves(str, "state tree st"; static_ok=true)
    check_not_shared("input x" => xr, "parameter tree ps" => psr, "state tree st" => str)
    static = static_leaves(str)
    # Also the plain numbers inside other structs of st: not in the manifest, but a change to one
    # would be frozen just the same (`check_static_unchanged`).
    static_all = static_leaves(str; inside_structs=true)

    report("tracing model(x, ps, st) with Reactant")
    function checked_trace(args_in_result)
        t = trace_forward(model, xr, psr, str; client, args_in_result)
        check_ops(t.text, "forward"; allow_custom_calls)
        check_signature(t)
        check_state_tree(t)
        check_static_unchanged(static_all, t.static_out)
        return t
    end
    traced = checked_trace(:all)
    datasets = Dict{Int,String}(a.index => dataset_path(a.role, a.path) for a in traced.arguments if a.role != "input")
    B = batch_size(traced.arguments)

    # Echoes are decided from the module's structure before anything runs (a value that merely
    # equals its argument on the example is not one); a result that is an argument the module
    # computes and (y, st) does not return is a lost mutation and refused here.
    classify_echoes!(traced)
    if any(r -> r.echo_of !== nothing && isempty(r.steps), traced.results)
        # Arguments @main returns unchanged although (y, st) does not hold them (Reactant saw
        # them written, e.g. passed through a @trace'd layer): strip them (the spec allows a
        # writer to), so a reader does not copy them out of every call. Traced again keeping only
        # the returned (y, st): the same arguments, the other results in the same order.
        traced = checked_trace(:result)
        classify_echoes!(traced)
    end

    # Run the compiled function when references are wanted or to probe sample independence
    # (never in train mode, where e.g. BatchNorm mixes the samples of a batch).
    probe = samples_independent === nothing && mode === :test && B !== nothing && B >= 2
    outputs = nothing
    independent = something(samples_independent, false)
    report("running the compiled model on the example input")
    before = snapshot_candidates(traced)
    if reference || probe
        thunk = compile_forward(model, xr, psr, str; client)
        out = thunk(model, xr, psr, str)
        outputs = result_values(out, traced)
        # An argument changed in place (and returned) no longer holds the traced value: the
        # probe would run from another point, so it is not attempted.
        probe = probe && !mutated_in_place(traced, before)
        probe && (independent = probe_sample_independence(thunk, model, xr, psr, str, traced, B, outputs; client))
    end
    batch = B === nothing ? nothing : (; size=B, samples_independent=independent)
    # The values as they were traced: an argument the thunk wrote back keeps its snapshot.
    values = [haskey(before, a.index) ? before[a.index] : host(a.value) for a in traced.arguments]

    vjp_text = nothing
    if vjp
        report("tracing the pullback with Enzyme")
        vjp_text = trace_vjp(model, xr, psr, str, traced; client, allow_custom_calls)
    end

    report("writing $target")
    scheme = writer_digest_scheme(target)      # format 3, or 2 if BLAKE3 failed its self-test
    examples = nothing
    kept = reference ? reference_results(traced, outputs) : nothing
    if kept !== nothing
        inputs = [(a.index, values[a.index + 1], a.dtype) for a in traced.arguments if a.role == "input"]
        rtol, atol = reference_tolerances([r.dtype for (r, _) in kept])
        examples = (;
            arrays=(;
                inputs=[i => (A, d) for (i, A, d) in inputs],
                outputs=[r.index => (A, r.dtype) for (r, A) in kept],
            ),
            datasets=(;
                inputs=[i => "/examples/inputs/$i" for (i, _, _) in inputs],
                outputs=[r.index => "/examples/outputs/$(r.index)" for (r, _) in kept],
                rtol,
                atol,
            ),
        )
    end
    current = stablehlo_current_version()
    target_version = artifact_target(current)
    forward_artifact = portable_artifact(traced.text, target_version, "forward")
    vjp_artifact = vjp_text === nothing ? nothing : portable_artifact(vjp_text, target_version, "vjp")
    write_atomically(target; overwrite) do tmp
        write(joinpath(tmp, MODULE_FILE), traced.text)
        forward_artifact === nothing || write(joinpath(tmp, ARTIFACT_FILE), forward_artifact)
        vjp_text === nothing || write(joinpath(tmp, VJP_FILE), vjp_text)
        vjp_artifact === nothing || write(joinpath(tmp, VJP_ARTIFACT_FILE), vjp_artifact)
        digests = write_weights(
            joinpath(tmp, WEIGHTS_FILE),
            ("params" => psr, "state" => str),
            traced.arguments,
            datasets,
            values,
            examples === nothing ? nothing : examples.arrays;
            algorithm=scheme.algorithm,
        )
        artifacts = (;
            forward=forward_artifact === nothing ? nothing : artifact_object(tmp, ARTIFACT_FILE, current, target_version),
            vjp=vjp_artifact === nothing ? nothing : artifact_object(tmp, VJP_ARTIFACT_FILE, current, target_version),
        )
        manifest = build_manifest(
            tmp, bname, mode, traced, datasets, digests, examples === nothing ? nothing : examples.datasets, batch, vjp, meta;
            empty=(; params=empty_containers(ps), state=empty_containers(st_mode)),
            static,
            artifacts,
            scheme,
        )
        check_manifest(manifest; returned=traced.returned)  # never write what a reader would refuse
        write_manifest(joinpath(tmp, MANIFEST_FILE), manifest)
    end
    return target
end

"""
The `(result, value)` pairs whose values the bundle stores as reference outputs (spec §3.7:
`examples.outputs` lists at least one result), or `nothing` when there are none to store.
An echo's reference value is its argument by definition, so echoes are left out, unless every
result is one (an identity model): then the echoes that are outputs are stored. A model whose
outputs are all aliases has no `@main` result, hence no examples section.
"""
function reference_results(traced::TracedForward, outputs)
    pairs = collect(zip(traced.results, outputs))
    kept = [(r, A) for (r, A) in pairs if r.echo_of === nothing]
    isempty(kept) && (kept = [(r, A) for (r, A) in pairs if !isempty(r.paths)])
    return isempty(kept) ? nothing : kept
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
